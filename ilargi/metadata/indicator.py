"""Indicator matrices: which source row feeds which target row.

The indicator I_p of a part is the n × n_p 0/1 matrix of the paper. It is stored as an index vector
``rows`` of length n (values in [0, n_p), or -1 where the target row takes nothing from this source),
or as ``None`` for the identity (the fact table itself). Structures that kernels derive from it
(counts, a CSR form of Iᵀ, rows with absent entries redirected) never change, so they are built once
and cached on the indicator, where every operator and every iteration of a training loop reuses them.
"""

import numpy as np
import scipy.sparse as sp

from ilargi.backend import backend_of, namespace_of

from .cache import cached


def read_only(values):
    """A read-only view of a NumPy array (CuPy arrays have no such flag and pass through).

    What a matrix hands out of its validated index vectors and mappings (``metadata``,
    ``Part.cols``) is a read-only view, so it cannot be changed behind the kernels' back (gathers
    skip bounds checks). A view: the flag of an array someone else holds is left alone. The
    indicators keep their own private copies writeable, because ``np.take`` and ``np.bincount``
    copy a read-only index array on every call.
    """
    if isinstance(values, np.ndarray) and values.flags.writeable:
        values = values.view()
        values.flags.writeable = False
    return values


def check_index_vector(values, length, upper, what, allow_absent=True, copy=True):
    """Validate an integer index vector: dtype, 1-D, length and range.

    Returns a private intp copy: the caller may edit its array afterwards without changing the
    matrix built from it (its cached CSR forms and counts included), and no later write of the
    caller's can put an index out of the validated range. With ``copy=False`` an intp array is
    returned as it is, for callers that hand over arrays they never change (ilargi's tables).
    Raises TypeError for non-integer values and ValueError (naming ``what``) for the rest.
    """
    xp = namespace_of(values)
    values = xp.asarray(values)
    if values.dtype.kind not in "iu":
        raise TypeError(f"{what} must be an integer index vector, got dtype {values.dtype}")
    if values.ndim != 1:
        raise ValueError(f"{what} must be 1-D, got shape {values.shape}")
    if length is not None and values.shape[0] != length:
        raise ValueError(f"{what} has length {values.shape[0]}, expected {length}")
    if values.size:
        low, high = int(values.min()), int(values.max())
        floor = -1 if allow_absent else 0
        if low < floor or high >= upper:
            bad = low if low < floor else high
            allowed = f"[{floor}, {upper})" + (" (-1 = absent)" if allow_absent else "")
            raise ValueError(f"{what} has index {bad} out of range {allowed}")
    return values.astype(xp.intp, copy=copy)


def _function(fine, coarse, n_fine, probe=1 << 16):
    """f with coarse = f[fine] wherever fine ≥ 0, or None. Most pairs of tables are not functions
    of each other, which the first rows usually show, so those are checked first."""
    xp = namespace_of(fine)
    if fine.shape[0] > 4 * probe and _function(fine[:probe], coarse[:probe], n_fine) is None:
        return None
    if fine.shape[0] and int(fine.min()) >= 0:  # no absent rows: no compacted copies
        rows_fine, rows_coarse = fine, coarse
    else:
        present = fine >= 0
        rows_fine, rows_coarse = fine[present], coarse[present]
    mapped = xp.full(n_fine, -1, dtype=xp.intp)
    mapped[rows_fine] = rows_coarse
    return mapped if bool((mapped[rows_fine] == rows_coarse).all()) else None


class Indicator:
    """The indicator matrix I_p (n × n_p, 0/1) of a part, kept as an index vector.

    Row i of the target table takes row ``rows[i]`` of the source, or nothing where
    ``rows[i] = -1`` (absent: a left-join miss, a union row of another source).
    ``rows=None`` is the identity (the fact table itself, n_p = n). Structures the kernels derive
    from it are cached on it (:meth:`cached`).

    Parameters
    ----------
    rows : integer array of length n, or None
        The index vector (values in [0, n_source) or -1), NumPy or CuPy; None for the identity.
        With ``validate=True`` the indicator keeps a private copy, so later edits of the caller's
        array change nothing; with ``validate=False`` it keeps ``rows`` itself, which the caller
        promises is in range and will not change (the rules' own row selections).
    n_source : int
        n_p, the rows of the source.
    n_rows : int, optional
        n, the rows of the target table; checked against ``rows`` when given.
    what : str, default "indicator"
        How error messages name this indicator.
    validate : bool, default True
        Check (and copy) ``rows`` (dtype, shape, range); False for index vectors already checked
        and owned, as the rewrite rules' own row selections are: gathers trust the range.
    copy : bool, default True
        With ``validate=True``: keep a private copy. False keeps an intp ``rows`` itself after
        the checks, for a caller that will not change it (a table's join results).
    n_absent : int, optional
        The count of -1 in ``rows`` where the caller knows it (rows of an indicator with none
        absent); counted otherwise.

    Attributes
    ----------
    rows : array or None
        The index vector (as intp after validation), or None for the identity.
    n_rows : int
        n, the target rows.
    n_source : int
        n_p, the source rows.
    n_absent : int
        Target rows that take nothing from this source.

    Raises
    ------
    TypeError
        If ``rows`` is not an integer vector.
    ValueError
        If ``rows`` is not 1-D, has the wrong length or an index out of range, or an identity
        is given ``n_rows`` different from ``n_source``.

    Examples
    --------
    >>> import numpy as np
    >>> ind = Indicator(np.array([0, 2, -1, 2]), 3)
    >>> ind
    <Indicator 4 × 3, 1 absent>
    >>> ind.counts().tolist()
    [1.0, 0.0, 2.0]
    >>> Indicator(None, 5).is_identity
    True
    """

    __slots__ = ("rows", "n_rows", "n_source", "n_absent", "_cache")

    def __init__(
        self,
        rows,
        n_source,
        n_rows=None,
        *,
        what="indicator",
        validate=True,
        copy=True,
        n_absent=None,
    ):
        if rows is None:
            if n_rows is not None and n_rows != n_source:
                raise ValueError(
                    f"{what} is the identity, so its source needs {n_rows} rows, got {n_source}"
                )
            self.rows, self.n_rows, self.n_absent = None, int(n_source), 0
        else:
            if validate:
                rows = check_index_vector(rows, n_rows, n_source, what, copy=copy)
            self.rows, self.n_rows = rows, int(rows.shape[0])
            if n_absent is None:
                n_absent = int((rows < 0).sum()) if rows.size else 0
            self.n_absent = int(n_absent)
        self.n_source = int(n_source)
        self._cache = {}

    def __getstate__(self):
        # Cached structures are rebuilt on demand: a pickle (a joblib worker's copy) stays small.
        return {
            "rows": self.rows,
            "n_rows": self.n_rows,
            "n_source": self.n_source,
            "n_absent": self.n_absent,
        }

    def __setstate__(self, state):
        for key, value in state.items():
            setattr(self, key, value)
        self._cache = {}

    @property
    def is_identity(self):
        """True for the identity (``rows`` is None: the fact table itself)."""
        return self.rows is None

    @property
    def n_present(self):
        """Number of target rows that take a row of this source."""
        return self.n_rows - self.n_absent

    def cached(self, key, build, owner=None):
        """The structure stored under ``key`` (and ``owner``), built by ``build()`` on first use.

        Parameters
        ----------
        key : hashable
            What the structure is, e.g. ``"counts"``.
        build : callable
            Builds the structure; called once per key and owner.
        owner : object or tuple of objects, optional
            What else the structure derives from (a source, another indicator); kept with the
            entry and compared by identity, so an ``id`` reused after garbage collection never
            returns a stale structure.

        Returns
        -------
        object
            The structure.

        Examples
        --------
        >>> import numpy as np
        >>> ind = Indicator(np.array([1, 0, 1]), 2)
        >>> ind.cached("width", lambda: 7)
        7
        >>> ind.cached("width", lambda: 8)
        7
        """
        return cached(self._cache, key, build, owner)

    def forget(self):
        """Drop every cached structure (rebuilt on next use).

        A structure cached with an owner keeps that owner, and plans over parts keep their
        parts, so a matrix's caches form reference cycles that only Python's full collection
        frees; a matrix built for one short task forgets its caches so its arrays go with it.
        """
        self._cache.clear()

    def present(self):
        """Boolean mask of target rows that take a row of this source.

        Returns
        -------
        ndarray of bool, length n
            True where the target row takes a source row.

        Examples
        --------
        >>> import numpy as np
        >>> Indicator(np.array([1, -1, 0]), 2).present().tolist()
        [True, False, True]
        """
        if self.rows is None:
            return np.ones(self.n_rows, dtype=bool)
        return self.rows >= 0

    def counts(self):
        """cnt_p: how many target rows take each source row (cached).

        Returns
        -------
        array of float64, length n_source
            On the indicator's device.

        Examples
        --------
        >>> import numpy as np
        >>> Indicator(np.array([1, -1, 1]), 3).counts().tolist()
        [0.0, 2.0, 0.0]
        """
        return self.cached("counts", lambda: backend_of(self.rows).counts(self))

    def index_vector(self):
        """``rows`` with the identity spelled out as 0..n-1.

        Returns
        -------
        array of int, length n

        Examples
        --------
        >>> Indicator(None, 3).index_vector().tolist()
        [0, 1, 2]
        """
        return np.arange(self.n_rows) if self.rows is None else self.rows

    def take(self, idx):
        """The indicator of the target rows ``idx`` (a row selection; ``idx`` already validated).

        Parameters
        ----------
        idx : integer array
            Target rows to keep, in order (repeats allowed).

        Returns
        -------
        Indicator
            len(idx) × n_source, over the same source.

        Examples
        --------
        >>> import numpy as np
        >>> Indicator(np.array([2, 0, -1]), 3).take(np.array([2, 0])).rows.tolist()
        [-1, 2]
        """
        rows = idx if self.rows is None else self.rows[idx]
        return Indicator(rows, self.n_source, validate=False)

    def sliced(self, start, stop):
        """The indicator of the target rows ``start:stop`` (0 ≤ start < stop ≤ n), sharing the
        index vector (a view, NumPy or CuPy alike: no rows copied).

        Index vectors never change once validated, so the view is as safe as a copy; a step-1
        view of a contiguous vector is contiguous, as the kernels read it. Cached structures
        are the new indicator's own. The identity has no index vector to share: a part cuts
        its source instead (:meth:`Part.sliced`).

        Parameters
        ----------
        start, stop : int
            The target rows kept, in order.

        Returns
        -------
        Indicator
            (stop - start) × n_source, over the same source.

        Raises
        ------
        ValueError
            For the identity.

        Examples
        --------
        >>> import numpy as np
        >>> parent = Indicator(np.array([2, 0, -1, 1]), 3)
        >>> view = parent.sliced(1, 3)
        >>> view.rows.tolist(), view.n_absent, np.shares_memory(view.rows, parent.rows)
        ([0, -1], 1, True)
        """
        if self.rows is None:
            raise ValueError("the identity has no index vector to slice; slice the source")
        known = 0 if not self.n_absent else None  # none absent in all rows: none in these
        return Indicator(self.rows[start:stop], self.n_source, validate=False, n_absent=known)

    def function_of(self, fine):
        """f with ``self.rows = f[fine.rows]`` wherever ``fine.rows ≥ 0``, or None.

        f maps fine's source rows to this source's rows (-1 where this source is absent); it
        exists when no source row of ``fine`` meets two rows of this source (each order has
        one customer). Cached on ``fine``.

        Parameters
        ----------
        fine : Indicator
            An indicator over the same target rows.

        Returns
        -------
        array of intp (length fine.n_source) or None

        Examples
        --------
        >>> import numpy as np
        >>> orders = Indicator(np.array([0, 1, 1, 2]), 3)
        >>> customers = Indicator(np.array([5, 4, 4, 5]), 6)
        >>> customers.function_of(orders).tolist()
        [5, 4, 5]
        >>> orders.function_of(customers) is None
        True
        """
        return fine.cached(
            "function", lambda: _function(fine.rows, self.rows, fine.n_source), owner=self
        )

    def through(self, fine):
        """The indicator F (fine's source rows × this source's rows) with I_self = I_fine·F, or None.

        It exists when every source row of ``fine`` meets one row of this source (a functional
        dependency, as in a snowflake: each order has one customer) and this source is absent
        wherever ``fine`` is. Gathers through I_self may then gather F first on the small source
        and segment-sums aggregate fine's sums further, so one n-long pass serves both. Cached
        on ``fine``.

        Parameters
        ----------
        fine : Indicator
            An indicator over the same target rows.

        Returns
        -------
        Indicator or None

        Examples
        --------
        >>> import numpy as np
        >>> orders = Indicator(np.array([0, 1, 1, 2]), 3)
        >>> customers = Indicator(np.array([5, 4, 4, 5]), 6)
        >>> customers.through(orders)
        <Indicator 3 × 6, 0 absent>
        """
        if self.rows is None or fine.rows is None or fine.n_rows != self.n_rows:
            return None

        def build():
            mapped = self.function_of(fine)
            if mapped is not None and fine.n_absent and bool((self.rows[fine.rows < 0] >= 0).any()):
                mapped = None
            return None if mapped is None else Indicator(mapped, self.n_source, validate=False)

        return fine.cached("through", build, owner=self)

    def tocsr(self):
        """The n × n_p 0/1 indicator matrix of the paper.

        Returns
        -------
        scipy.sparse.csr_array
            One entry per present target row (host indicators only).

        Examples
        --------
        >>> import numpy as np
        >>> Indicator(np.array([1, -1, 0]), 2).tocsr().toarray().tolist()
        [[0.0, 1.0], [0.0, 0.0], [1.0, 0.0]]
        """
        rows = np.asarray(self.index_vector())
        if not self.n_absent:  # one entry per row: the index vector is the CSR's column indices
            return sp.csr_array(
                (np.ones(self.n_rows), rows.copy(), np.arange(self.n_rows + 1)),
                shape=(self.n_rows, self.n_source),
            )
        present = np.flatnonzero(rows >= 0)
        indptr = np.zeros(self.n_rows + 1, dtype=np.int64)
        np.cumsum(rows >= 0, out=indptr[1:])
        return sp.csr_array(
            (np.ones(present.size), rows[present], indptr), shape=(self.n_rows, self.n_source)
        )

    def __repr__(self):
        kind = "identity" if self.rows is None else f"{self.n_absent} absent"
        return f"<Indicator {self.n_rows} × {self.n_source}, {kind}>"


def mapping_matrix(cols, d):
    """The d × d_p 0/1 mapping matrix M_p of the paper for the mapping vector ``cols``.

    Parameters
    ----------
    cols : integer array of length d_p
        The target column of each source column.
    d : int
        Columns of the target table.

    Returns
    -------
    scipy.sparse.csr_array
        d × d_p, with M[cols[j], j] = 1.

    Examples
    --------
    >>> mapping_matrix([2, 0], 3).toarray().tolist()
    [[0.0, 1.0], [0.0, 0.0], [1.0, 0.0]]
    """
    cols = np.asarray(cols)
    return sp.csr_array((np.ones(cols.size), (cols, np.arange(cols.size))), shape=(d, cols.size))
