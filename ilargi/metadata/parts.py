"""Parts of a target table: a source matrix with its indicator and mapping.

T₀ = Σ_p I_p S_p M_pᵀ. A :class:`Part` couples S_p (dense ndarray or CSR) with I_p
(:class:`~ilargi.metadata.indicator.Indicator`) and M_p (the integer vector ``cols``: the target
column of each source column). :func:`make_parts` validates user input once, so the rewrite rules
can trust it: shapes agree, indices are in range, mappings are injective, sources are finite
numbers, and no target cell is covered by two parts.
"""

import numbers
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from ilargi.backend import backend_of

from .cache import cached
from .indicator import Indicator, check_index_vector, mapping_matrix, read_only


@dataclass(frozen=True, eq=False)
class Part:
    """One term I_p·S_p·M_pᵀ of T₀: a source, its indicator and its column mapping.

    Parts are immutable: what is derived from one (a summable copy, a stacked GPU plan) is cached
    on it or on its indicator and stays valid. :func:`make_parts` builds validated parts.

    Parameters
    ----------
    name : str
        The part's name in error messages.
    source : dense array or CSR matrix, n_p × d_p
        S_p, on the CPU (NumPy/SciPy) or the GPU (CuPy/cupyx).
    indicator : Indicator
        I_p, n × n_p.
    cols : ndarray of int, length d_p
        M_p as a vector: the target column of each source column (injective, host array).
    finite : bool, default True
        False if the source may hold NaN/inf (allowed by the user, or made by a function).
    origin : tuple (ndarray of int, int), optional
        Where the source keeps only some rows of the one the user gave (:func:`compacted`): the
        user's row of each of its rows (host array) and the height of the user's source. None
        when the source has the user's rows. :meth:`given` states the part in the user's terms.

    Examples
    --------
    >>> import numpy as np
    >>> part = Part("dim", np.array([[1.0, 2.0], [3.0, 4.0]]),
    ...             Indicator(np.array([1, 1, 0]), 2), np.array([3, 4]))
    >>> part.target
    slice(3, 5, None)
    >>> part.mapping_matrix(5).shape
    (5, 2)
    """

    name: str
    source: Any  # a dense array or CSR matrix of a backend
    indicator: Indicator
    cols: np.ndarray
    finite: bool = True
    origin: Any = None

    @property
    def rows(self):
        """The indicator's index vector, read-only (None for the identity)."""
        return None if self.indicator.rows is None else read_only(self.indicator.rows)

    @cached_property
    def target(self):
        """``cols`` as an index for target-indexed arrays: a slice when the columns are contiguous
        (a view instead of a fancy-index copy on every product)."""
        c = self.cols
        if c.size and c[-1] - c[0] == c.size - 1 and bool((np.diff(c) == 1).all()):
            return slice(int(c[0]), int(c[-1]) + 1)
        return c

    def __getstate__(self):
        # Derived structures (caches, the ``target`` index) are rebuilt on demand after unpickling;
        # the indicator is pickled once however many parts share it (pickle's memo), so parts of
        # one table still share one Indicator in a joblib worker.
        return {
            key: value for key, value in self.__dict__.items() if key not in ("_cache", "target")
        }

    def nonfinite(self):
        """(has NaN, has ±inf) among the source values some target row takes (cached).

        A finite part answers at once; otherwise the source rows in use are scanned once per
        source and indicator: values in rows no target row takes never reach T.

        Returns
        -------
        tuple of bool

        Examples
        --------
        >>> import numpy as np
        >>> part = Part("dim", np.array([[1.0], [np.nan], [np.inf]]),
        ...             Indicator(np.array([0, 2]), 3), np.array([0]), finite=False)
        >>> part.nonfinite()
        (False, True)
        """
        if self.finite:
            return False, False

        def scan():
            kernels = backend_of(self.source)
            ind = self.indicator
            used = (
                self.source
                if ind.is_identity
                else kernels.select_rows(self.source, ind.counts() > 0)
            )
            values = used.data if kernels.is_sparse(used) else used
            xp = kernels.xp
            return bool(xp.isnan(values).any()), bool(xp.isinf(values).any())

        return self.indicator.cached("nonfinite", scan, owner=self.source)

    def absmax(self):
        """``max |S_p|`` over the stored values (0 for an empty source), computed once per source.

        Row selections keep it (:meth:`with_indicator`): it bounds a·s + b when estimators check
        that a transformed T holds no overflow, without a pass over the source per call.

        Returns
        -------
        float
            The largest absolute stored value of the source.
        """
        if "_absmax" not in self.__dict__:  # frozen dataclass: a cache, not a field
            self.__dict__["_absmax"] = source_absmax(self.source)
        return self.__dict__["_absmax"]

    def given(self):
        """The index vector and source height in the terms of the source the user gave: this
        part's own where its source is the user's, else its rows renumbered back through
        ``origin`` (what :attr:`NormalizedMatrix.metadata` records, so it fits the user's sources).

        Returns
        -------
        tuple (index vector or None, int)
            None for the identity.

        Examples
        --------
        >>> import numpy as np
        >>> part = Part("dim", np.arange(10.0).reshape(5, 2), Indicator(np.array([3, -1, 3]), 5),
        ...             np.array([0, 1]))
        >>> rows, n_source = compacted([part])[0].given()
        >>> rows.tolist(), n_source
        ([3, -1, 3], 5)
        """
        ind = self.indicator
        if self.origin is None:
            return ind.rows, ind.n_source
        kept, n_source = self.origin
        if ind.is_identity:  # a fact table's rows cut to a view (sliced): they are its rows
            kept = np.asarray(kept)
            if kept.size == n_source and np.array_equal(kept, np.arange(n_source)):
                return None, n_source  # every row, in order (a slice of all of them): identity
            return kept, n_source
        xp = backend_of(ind.rows).xp
        return xp.where(ind.rows >= 0, xp.asarray(kept)[xp.maximum(ind.rows, 0)], -1), n_source

    def mapping_matrix(self, d):
        """M_p as a d × d_p CSR 0/1 matrix (see :func:`~ilargi.metadata.mapping_matrix`).

        Parameters
        ----------
        d : int
            Columns of the target table.

        Returns
        -------
        scipy.sparse.csr_array
        """
        return mapping_matrix(self.cols, d)

    def with_source(self, source, finite=True):
        """This part with another source of the same shape (indicator and mapping kept).

        Parameters
        ----------
        source : dense array or CSR matrix
            The new S_p.
        finite : bool, default True
            Whether the new source holds only finite values.

        Returns
        -------
        Part
        """
        return Part(self.name, source, self.indicator, self.cols, finite, self.origin)

    def knowing_absmax(self, value):
        """This part, its :meth:`absmax` already known (from where its source was made): a
        source shared by many parts, such as a broadcast dimension under every partition of a
        Dask matrix, is then not scanned again for each of them.

        Parameters
        ----------
        value : float
            ``max |S_p|`` of the source.

        Returns
        -------
        Part
            This part.
        """
        self.__dict__["_absmax"] = float(value)
        return self

    def with_indicator(self, indicator):
        """This part with another indicator (a row selection), source and mapping kept.

        Parameters
        ----------
        indicator : Indicator
            The new I_p over the same source.

        Returns
        -------
        Part
        """
        out = Part(self.name, self.source, indicator, self.cols, self.finite, self.origin)
        if "_absmax" in self.__dict__:  # a fact about the source alone
            out.__dict__["_absmax"] = self.__dict__["_absmax"]
        return out

    def slices_to_view(self):
        """Whether the source's rows ``start:stop`` are a contiguous view of it: a dense
        row-major source. A CSR slice copies its rows, and a row slice of a column-major array is
        strided (the kernels would copy it on every call), so those fact parts keep an index
        vector instead.

        Returns
        -------
        bool

        Examples
        --------
        >>> import numpy as np
        >>> source = np.ones((3, 2))
        >>> Part("fact", source, Indicator(None, 3), np.array([0, 1])).slices_to_view()
        True
        >>> Part("fact", np.asfortranarray(source), Indicator(None, 3),
        ...      np.array([0, 1])).slices_to_view()
        False
        """
        kernels = backend_of(self.source)
        return not kernels.is_sparse(self.source) and bool(self.source.flags.c_contiguous)

    def sliced(self, indicator, start, stop):
        """This identity part over the target rows ``start:stop``: the source's rows
        ``start:stop`` (a view, see :meth:`slices_to_view`) under ``indicator``, the identity of
        ``stop - start`` rows (one object for all the parts of the fact table, as they share one
        before).

        Parameters
        ----------
        indicator : Indicator
            The identity of ``stop - start`` rows.
        start, stop : int
            The target rows kept (0 ≤ start < stop ≤ n).

        Returns
        -------
        Part

        Examples
        --------
        >>> import numpy as np
        >>> part = Part("fact", np.arange(6.0).reshape(3, 2), Indicator(None, 3), np.array([0, 1]))
        >>> cut = part.sliced(Indicator(None, 2), 1, 3)
        >>> cut.source.tolist(), np.shares_memory(cut.source, part.source)
        ([[2.0, 3.0], [4.0, 5.0]], True)
        """
        # the rows kept, in the terms of the user's source (what the metadata records)
        kept = np.arange(start, stop)
        origin = (
            (kept, self.source.shape[0]) if self.origin is None else _through(self.origin, kept)
        )
        out = Part(self.name, self.source[start:stop], indicator, self.cols, self.finite, origin)
        if "_absmax" in self.__dict__:  # the parent's bound still bounds its rows
            out.__dict__["_absmax"] = self.__dict__["_absmax"]
        return out

    def cached(self, key, build, owner=None):
        """A structure derived from this part (and ``owner``), built by ``build()`` once.

        As :meth:`Indicator.cached`, on this part: for what depends on the part itself, e.g. a
        plan over a tuple of parts cached on the first one with the tuple as owner.

        Parameters
        ----------
        key : hashable
            What the structure is.
        build : callable
            Builds the structure on first use.
        owner : object or tuple of objects, optional
            What else it derives from, compared by identity.

        Returns
        -------
        object
        """
        return cached(self.__dict__.setdefault("_cache", {}), key, build, owner)

    def forget(self):
        """Drop the structures cached on this part and on its indicator (see
        :meth:`Indicator.forget`)."""
        self.__dict__.pop("_cache", None)
        self.indicator.forget()

    def summable(self):
        """S_p for products that sum over source rows.

        A NaN/inf in a source row no target row takes must not leak through 0·NaN, so in a
        non-finite source such rows are zeroed, in a private copy built once per source and
        indicator.

        Returns
        -------
        dense array or CSR matrix
            The source itself when it is finite.

        Examples
        --------
        >>> import numpy as np
        >>> part = Part("dim", np.array([[1.0], [np.nan]]), Indicator(np.array([0, 0]), 2),
        ...             np.array([0]), finite=False)
        >>> part.summable().tolist()
        [[1.0], [0.0]]
        """
        if self.finite:
            return self.source
        kernels = backend_of(self.source)
        return self.indicator.cached(
            "summable",
            lambda: kernels.zero_rows(self.source, self.indicator.counts() == 0),
            owner=self.source,
        )

    def operand(self):
        """S_p as the small products multiply it: :meth:`summable`, dense where that is cheaper.

        A sparse S_p that would take no more memory dense (density ≳ 2/3, e.g. a fact column
        stored as CSR) is multiplied as a column-major dense copy built once (BLAS runs it as
        a few axpys); other sources are returned as they are.

        Returns
        -------
        dense array or CSR matrix

        Examples
        --------
        >>> import numpy as np
        >>> import scipy.sparse as sp
        >>> part = Part("fact", sp.csr_array(np.ones((3, 1))), Indicator(None, 3), np.array([0]))
        >>> part.operand().flags.f_contiguous
        True
        """
        S = self.summable()
        kernels = backend_of(S)
        if not kernels.is_sparse(S) or S.shape[0] * S.shape[1] * S.dtype.itemsize > S.nnz * (
            S.dtype.itemsize + S.indices.dtype.itemsize
        ):
            return S
        return self.indicator.cached(
            "dense_operand",
            lambda: kernels.xp.asfortranarray(kernels.to_dense(S)),
            owner=self.source,
        )


def referenced(part, n):
    """The part with its source cut to the rows its indicator uses, where the source has more
    rows than the table it feeds (a dimension larger than the fact table): a table built from it
    then reads and converts the rows it writes, not the whole source (materializing TPC-DS's
    catalog_returns through its 1.9-million-row customer_demographics). The table is the same: a
    row no target row takes adds nothing.

    Parameters
    ----------
    part : Part
        A term of T₀.
    n : int
        Rows of T₀.

    Returns
    -------
    Part
        ``part`` itself where its source has at most n rows, else a part of the used rows (in
        their order) and an indicator renumbered into them.

    Examples
    --------
    >>> import numpy as np
    >>> part = Part("dim", np.arange(10.0).reshape(5, 2), Indicator(np.array([3, -1, 3]), 5),
    ...             np.array([0, 1]))
    >>> cut = referenced(part, 3)
    >>> cut.source.tolist(), cut.indicator.rows.tolist()
    ([[6.0, 7.0]], [0, -1, 0])
    """
    ind = part.indicator
    if ind.is_identity or ind.n_source <= n:
        return part
    subset, indicator = _cut(ind, _used(ind))
    return Part(part.name, part.source[subset], indicator, part.cols, part.finite)


def compacted(parts):
    """The parts with every source at most half of whose rows the table uses cut to those rows,
    once per indicator (parts sharing one share the cut indicator).

    The factorized operators pass over every row of a source on each call, so a dimension much
    taller than the part of it that is joined (a 1.9-million-row customer table under 10,000
    orders, a fact table filtered to one year) costs each call its whole height; cut once at
    construction it costs the rows used. The table is the same: a row no target row takes adds
    nothing. Non-finite values in the rows cut away no longer count against the part.

    Examples
    --------
    >>> import numpy as np
    >>> dim = Indicator(np.array([3, -1, 3]), 5)
    >>> parts = [Part("a", np.arange(10.0).reshape(5, 2), dim, np.array([0, 1])),
    ...          Part("b", np.arange(5.0).reshape(5, 1), dim, np.array([2]))]
    >>> a, b = compacted(parts)
    >>> a.source.tolist(), b.source.tolist(), a.indicator is b.indicator, a.indicator.rows.tolist()
    ([[6.0, 7.0]], [[3.0]], True, [0, -1, 0])
    """
    cuts = {}
    out = []
    for part in parts:
        ind = part.indicator
        if ind.is_identity:
            out.append(part)
            continue
        if id(ind) not in cuts:
            used = _used(ind)
            kept = int(used.sum())
            cuts[id(ind)] = _cut(ind, used) if 0 < 2 * kept <= ind.n_source else None
        cut = cuts[id(ind)]
        if cut is None:
            out.append(part)
            continue
        subset, indicator = cut
        source = part.source[subset]
        kept = np.asarray(backend_of(subset).asnumpy(subset))
        origin = (kept, ind.n_source) if part.origin is None else _through(part.origin, kept)
        finite = part.finite or is_finite(source)
        out.append(Part(part.name, source, indicator, part.cols, finite, origin))
    return out


def _through(origin, kept):
    """The origin of rows ``kept`` of a source whose own origin is ``origin``."""
    rows, n_source = origin
    return rows[kept], n_source


def _used(ind):
    """Mask of the source rows ``ind`` uses."""
    used = backend_of(ind.rows).xp.zeros(ind.n_source + 1, dtype=bool)
    used[ind.rows] = True  # an absent row (-1) marks the extra last entry
    return used[:-1]


def _cut(ind, used):
    """(the source rows ``used`` marks, in order; ``ind`` renumbered into them)."""
    xp = backend_of(ind.rows).xp
    position = xp.cumsum(used, dtype=ind.rows.dtype) - 1
    rows = xp.where(ind.rows >= 0, position[xp.maximum(ind.rows, 0)], -1)
    subset = xp.flatnonzero(used)
    return subset, Indicator(rows, int(subset.shape[0]), validate=False)


def source_dtype(sources):
    """The documented promotion: float32 if every source is float32, float64 otherwise."""
    dtypes = {np.dtype(s.dtype) for s in sources}
    return np.dtype(np.float32) if dtypes == {np.dtype(np.float32)} else np.dtype(np.float64)


def is_finite(source):
    """Whether every value of a dense or sparse source (stored entries) is finite."""
    kernels = backend_of(source)
    values = source.data if kernels.is_sparse(source) else source
    return bool(kernels.xp.isfinite(values).all())


def check_source(source, what, allow_nonfinite=False):
    """A 2-D numeric dense array or sparse matrix, not empty, finite unless allowed."""
    kernels = backend_of(source)
    source = kernels.as_csr(source) if kernels.is_sparse(source) else kernels.xp.asarray(source)
    dtype = np.dtype(source.dtype)
    if dtype.kind == "c":
        raise TypeError(
            f"{what} has complex dtype {dtype}; a NormalizedMatrix holds real numbers "
            "(complex values are refused rather than cast, which would drop the "
            "imaginary part)"
        )
    if dtype.kind not in "biuf":
        raise TypeError(f"{what} must hold numbers (bool, int or float), got dtype {dtype}")
    if source.ndim != 2:
        raise ValueError(f"{what} must be 2-D, got {source.ndim}-D with shape {source.shape}")
    if source.shape[0] == 0 or source.shape[1] == 0:
        raise ValueError(f"{what} is empty (shape {source.shape})")
    if not allow_nonfinite and dtype.kind == "f":
        if not is_finite(source):
            raise ValueError(
                f"{what} contains NaN or inf; clean it, or pass allow_nonfinite=True to keep them"
            )
    return source


def cast_source(source, dtype):
    """The source in ``dtype``, sparse as canonical CSR; the caller's object is never modified."""
    kernels = backend_of(source)
    if kernels.is_sparse(source):
        out = kernels.as_csr(source, dtype=dtype)
        if not out.has_canonical_format:
            out = out.copy()  # the CSR view may share its arrays with the caller's matrix
            out.sum_duplicates()
        return out
    return source.astype(dtype, copy=False)


def make_parts(
    sources, rows, cols, shape, names=None, columns=None, allow_nonfinite=False, copy=True
):
    """Validate user input and build the parts of an n × d target table (``copy``: see
    :meth:`ilargi.NormalizedMatrix.from_parts`)."""
    if len(shape) != 2 or not all(isinstance(v, numbers.Integral) for v in shape):
        raise TypeError(f"shape must be two integers (n, d), got {shape!r}")
    n, d = (int(v) for v in shape)
    if n < 0 or d < 0:
        raise ValueError(f"shape must be non-negative, got {shape}")
    sources, rows, cols = list(sources), list(rows), list(cols)
    if not (len(sources) == len(rows) == len(cols)):
        raise ValueError(
            f"need one rows and one cols entry per source: got {len(sources)} sources, "
            f"{len(rows)} rows, {len(cols)} cols"
        )
    if not sources:
        raise ValueError("need at least one source")
    names = [f"part{p}" for p in range(len(sources))] if names is None else [str(s) for s in names]
    if len(names) != len(sources):
        raise ValueError(f"got {len(names)} names for {len(sources)} sources")
    if columns is not None:
        columns = [str(c) for c in columns]
        if len(columns) != d:
            raise ValueError(f"got {len(columns)} column names for {d} columns")
    checked = [check_source(s, f"source {nm!r}", allow_nonfinite) for s, nm in zip(sources, names)]
    dtype = source_dtype(checked)
    parts, indicators, validated = [], [], {}
    for source, r, c, nm in zip(checked, rows, cols, names):
        # Parts of one table pass the same rows array: it is validated and copied once (the
        # copies of a 6M-row table's index vector cost more than the rest of the check).
        key = (id(r), source.shape[0])
        indicator = validated.get(key)
        if indicator is None:
            indicator = _shared(
                Indicator(r, source.shape[0], n, what=f"rows of part {nm!r}", copy=copy), indicators
            )
            validated[key] = indicator
        c = check_index_vector(c, source.shape[1], d, f"cols of part {nm!r}", allow_absent=False)
        c = read_only(np.asarray(backend_of(c).asnumpy(c)))  # a private copy (check_index_vector)
        values, counts = np.unique(c, return_counts=True)
        if values.size != c.size:
            dup = values[counts > 1][0]
            raise ValueError(
                f"cols of part {nm!r} map two source columns to target column {dup}; "
                "a mapping must be injective"
            )
        source = cast_source(source, dtype)
        parts.append(Part(nm, source, indicator, c, not allow_nonfinite or is_finite(source)))
    check_disjoint_coverage(parts, columns)
    return compacted(parts)


def _shared(indicator, known):
    """An equal indicator seen before (parts of one table), so its cached structures and the
    rules' per-indicator work (one gather, one segment-sum) are shared; else this one."""
    for other in known:
        if (
            other.n_source == indicator.n_source
            and other.n_rows == indicator.n_rows
            and (
                other.rows is indicator.rows
                or (
                    other.rows is not None
                    and indicator.rows is not None
                    and bool((other.rows == indicator.rows).all())
                )
            )
        ):
            return other
    known.append(indicator)
    return indicator


def check_disjoint_coverage(parts, columns=None):
    """Raise ValueError if a target cell is covered by two parts (the core invariant)."""
    for p, first in enumerate(parts):
        for second in parts[p + 1 :]:
            shared = np.intersect1d(first.cols, second.cols)
            if shared.size == 0:
                continue
            both = np.asarray(
                backend_of(first.rows).asnumpy(first.indicator.present())
            ) & np.asarray(backend_of(second.rows).asnumpy(second.indicator.present()))
            if both.any():
                row, col = int(np.flatnonzero(both)[0]), int(shared[0])
                label = f"{col} ({columns[col]!r})" if columns else f"{col}"
                raise ValueError(
                    f"parts {first.name!r} and {second.name!r} overlap: both cover target cell "
                    f"(row {row}, column {label}); resolve overlapping columns first "
                    "(ilargi.metadata.resolve_overlap)"
                )


def _infer_rows(sources, rows):
    for source, r in zip(sources, rows):
        if r is not None:
            return len(r)
    return sources[0].shape[0]


def _column_subset(source, keep):
    if keep.size == source.shape[1] and np.array_equal(keep, np.arange(source.shape[1])):
        return source
    return source[:, keep]


def resolve_overlap(sources, rows, cols, names=None, rule="first"):
    """Make parts that share target columns row-disjoint, by a stated rule.

    The invariant of the base form is that no target cell is covered by two parts; this
    rewrites overlapping inputs so that it holds. Inputs are not modified.

    Parameters
    ----------
    sources : list of 2-D arrays
        One source per part.
    rows : list of integer arrays or None
        Per part, the index vector (-1 = absent) or None for the identity.
    cols : list of integer arrays
        Per part, the target column of each source column.
    names : list of str, optional
        Part names (default ``part0``, ``part1``, ...).
    rule : {"first", "coalesce"}, default "first"
        ``"first"``: the first part (in order) that has a column owns it for every row, so a
        later part loses that column, even in rows where the first part is absent (those cells
        stay NULL). ``"coalesce"``: per row, the first part whose row is present wins the cell;
        a later part is split into one part per pattern of earlier overlapping parts being
        present.

    Returns
    -------
    (sources, rows, cols, names) : tuple of lists
        Split parts are named ``name[k]`` and hold column subsets of their source (a copy),
        with rows masked by -1.

    Raises
    ------
    ValueError
        If ``rule`` is not one of the two rules.

    Examples
    --------
    >>> import numpy as np
    >>> left, right = np.ones((3, 2)), np.full((3, 2), 2.0)
    >>> rows = [None, np.array([0, -1, 2])]
    >>> _, _, cols, names = resolve_overlap([left, right], rows, [[0, 1], [1, 2]])
    >>> [c.tolist() for c in cols], names
    ([[0, 1], [2]], ['part0', 'part1'])
    >>> _, rows_c, cols_c, names_c = resolve_overlap([right, left], [rows[1], None],
    ...                                              [[1, 2], [0, 1]], rule="coalesce")
    >>> names_c, [r.tolist() for r in rows_c[1:]], [c.tolist() for c in cols_c[1:]]
    (['part0', 'part1[0]', 'part1[1]'], [[-1, 1, -1], [0, -1, 2]], [[0, 1], [0]])
    """
    if rule not in ("first", "coalesce"):
        raise ValueError(f"rule must be 'first' or 'coalesce', got {rule!r}")
    sources, rows, cols = list(sources), list(rows), [np.asarray(c) for c in cols]
    names = [f"part{p}" for p in range(len(sources))] if names is None else list(names)
    n = _infer_rows(sources, rows)
    present = [np.ones(n, bool) if r is None else np.asarray(r) >= 0 for r in rows]
    out = ([], [], [], [])
    for q, (source, r, c, name) in enumerate(zip(sources, rows, cols, names)):
        earlier = [p for p in range(q) if np.intersect1d(cols[p], c).size]
        if not earlier:
            pieces = [(np.arange(c.size), r)]
        elif rule == "first":
            keep = np.flatnonzero(~np.isin(c, np.concatenate([cols[p] for p in earlier])))
            pieces = [(keep, r)] if keep.size else []
        else:
            pieces = _coalesce_pieces(c, r, n, present[q], [(present[p], cols[p]) for p in earlier])
        for k, (keep, piece_rows) in enumerate(pieces):
            out[0].append(_column_subset(source, keep))
            out[1].append(piece_rows)
            out[2].append(c[keep])
            out[3].append(name if len(pieces) == 1 else f"{name}[{k}]")
    return out


def group_rows(masks, n=None):
    """Group rows by which of the boolean ``masks`` (one per part, length n) hold in them.

    Returns (group of each row, one boolean vector per group saying which masks hold), for any
    number of masks (rows are compared as packed bit strings, not as one machine integer). With no
    masks every one of the ``n`` rows is in the one group (``n`` is needed only then).
    """
    masks = [np.asarray(m, dtype=bool) for m in masks]
    n = masks[0].size if masks else (n or 0)
    if not masks:
        return np.zeros(n, dtype=np.intp), [np.zeros(0, dtype=bool)]
    packed = np.packbits(np.stack(masks, axis=1), axis=1)
    keys = np.ascontiguousarray(packed).view(np.dtype((np.void, packed.shape[1]))).ravel()
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    return inverse.ravel(), [np.array([m[i] for m in masks]) for i in first]


def _coalesce_pieces(c, r, n, present_q, earlier):
    """Split part q by which earlier overlapping parts are present in each row."""
    group, patterns = group_rows([present_p for present_p, _ in earlier])
    index = np.arange(n) if r is None else np.asarray(r)
    pieces = []
    for k in np.unique(group[present_q]):
        taken = [cols_p for (_, cols_p), on in zip(earlier, patterns[k]) if on]
        keep = np.flatnonzero(~np.isin(c, np.concatenate(taken))) if taken else np.arange(c.size)
        if keep.size:
            pieces.append((keep, np.where(present_q & (group == k), index, -1)))
    return pieces


def source_absmax(source):
    """``max |S|`` over a source's stored values (0 for an empty one): :meth:`Part.absmax`.

    Parameters
    ----------
    source : array or sparse matrix

    Returns
    -------
    float
    """
    kernels = backend_of(source)
    values = source.data if kernels.is_sparse(source) else source
    if not values.size:
        return 0.0
    # max and -min, not abs().max(): no temporary the size of the source, whose fresh pages a fit
    # on a materialized table paid for on every fit; NaN propagates through maximum.
    return float(kernels.xp.maximum(values.max(), -values.min()))
