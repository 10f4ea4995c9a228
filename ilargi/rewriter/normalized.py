"""NormalizedMatrix: the virtual joined table T = (Σ_p I_p S_p M_pᵀ)·diag(a) + 1·bᵀ.

T is never built unless asked (:meth:`NormalizedMatrix.materialize`). Linear algebra on T is
rewritten into work on the sources by the rules of :mod:`ilargi.rewriter.rules`; this module adds
the affine state (a, b), the transpose flag, elementwise functions and row/column selection on top,
each next to its formula; the training passes that take the matrix are functions of
:mod:`ilargi.rewriter.training`. Every result equals the one computed on the materialized table.
"""
import copy
import numbers
import operator

import numpy as np
from scipy.sparse.linalg import LinearOperator

from ilargi.backend import backend_for_device, backend_of, optional
from ilargi.chooser import choose
from ilargi.chooser import memory
from ilargi.metadata import Indicator, Metadata, Part, group_rows, is_finite, make_parts
from ilargi.metadata.indicator import read_only

from . import materialized, passes, pool, rules
from .operators import (BinaryOperators, complex_error, per_column_operand, point_index,
                        reduced_axis)

# Elementwise operations with an exact affine form: T op c = T₀·diag(a') + 1·b'ᵀ.
_AFFINE_UFUNCS = {np.add, np.subtract, np.multiply, np.true_divide}

# Comparisons are elementwise, as for a NumPy array: a boolean ndarray of the materialized table.
_COMPARISONS = {np.equal: operator.eq, np.not_equal: operator.ne, np.less: operator.lt,
                np.less_equal: operator.le, np.greater: operator.gt,
                np.greater_equal: operator.ge}

# Columns or rows of T are materialized this many at a time where a product must reproduce NaN/inf
# cell by cell (see NormalizedMatrix._lmm_exact and _tmm_exact).
_CHUNK = 256


def _sum_is_finite(x):
    """Whether an operand holds only finite values, by one reduction (no temporary): a NaN or
    inf makes the sum non-finite; an overflowing sum of finite values only sends the caller to
    its exact, slower path."""
    with np.errstate(all="ignore"):
        return bool(np.isfinite(x.sum())) if x.size else True


class NormalizedMatrix(BinaryOperators):
    """A joined table kept as its sources: T = (Σ_p I_p S_p M_pᵀ)·diag(a) + 1·bᵀ.

    Build one with :meth:`from_parts` (index vectors and mappings) or from tables with
    :class:`ilargi.Table`. It behaves like a 2-D array for linear algebra: ``T @ X``, ``X @ T``,
    ``T.T``, ``sum/mean/var/std/min/max``, scalar and per-column arithmetic, NumPy ufuncs,
    ``crossprod``, ``gramvec``, row selection ``T[idx]`` and ``materialize()``; every operation
    runs on the sources and equals the materialized result. Cells no part covers (NULLs of
    left/outer joins) hold 0 before any operation, as in the materialized table.

    It follows NumPy where an array would: comparisons (``==``, ``<``, ``np.equal``, ...) and
    ufuncs with boolean results are elementwise and return NumPy's boolean array of the
    materialized table; ``bool(T)`` is ambiguous for more than one cell; two index arrays select
    cells pointwise. NaN and inf follow IEEE as on the materialized table (products reproduce
    them cell by cell where the rules would aggregate first; ``crossprod`` of a table holding
    them is refused). Complex values are refused, never cast. :meth:`nonfinite` tells, from the
    parts alone, whether T holds NaN or inf; the estimators refuse such a T as scikit-learn
    refuses such an array.

    Parameters
    ----------
    parts : sequence of Part
        The parts of T₀, trusted as given (:meth:`from_parts` validates user input).
    shape : tuple of int
        (n, d) of the untransposed T.
    scale, shift : array of length d, optional
        The affine state a and b (None: all ones, all zeros).
    columns : list of str, optional
        Names of the d columns.
    transposed : bool, default False
        Whether this is the view Tᵀ.

    Attributes
    ----------
    shape : tuple of int
        (rows, columns) of this view.
    parts : tuple of Part
        The parts of T₀.
    scale, shift : array of length d
        The affine state.
    device : str
        'cpu' or 'gpu'.

    Examples
    --------
    >>> import numpy as np
    >>> from ilargi import NormalizedMatrix
    >>> T = NormalizedMatrix.from_parts(
    ...     [np.array([[1.0], [2.0], [3.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])],
    ...     [None, np.array([0, 1, -1])], [[0], [1, 2]], (3, 3))
    >>> T
    <NormalizedMatrix 3×3 [part0: 3×1, part1: 2×2]>
    >>> T.toarray().tolist()
    [[1.0, 1.0, 2.0], [2.0, 3.0, 4.0], [3.0, 0.0, 0.0]]
    >>> (T @ np.ones(3)).tolist()
    [4.0, 9.0, 3.0]
    >>> ((T - 1.0).sum(axis=0)).tolist()
    [3.0, 1.0, 3.0]
    """

    __array_priority__ = 1000

    def __init__(self, parts, shape, *, scale=None, shift=None, columns=None, transposed=False):
        # Internal constructor: parts are trusted. Users call from_parts.
        self._parts = tuple(parts)
        self._shape = tuple(int(v) for v in shape)
        self._scale, self._shift = scale, shift
        self._columns = columns
        self._transposed = bool(transposed)
        self._derived = False  # sources hold values computed from the user's (after a function)

    # ------------------------------------------------------------------------------------------
    # Construction, metadata, persistence

    @classmethod
    def from_parts(cls, sources, rows, cols, shape, columns=None, names=None,
                   allow_nonfinite=False, copy=True):
        """Build T from its parts, validating every input.

        Parameters
        ----------
        sources : list of 2-D arrays
            One per part, dense (NumPy/CuPy) or sparse (SciPy/cupyx). Integer and bool sources
            are promoted to float64; float32 stays float32 only if every source is float32.
        rows : list of integer arrays or None
            Per part, an index vector of length n (values in [0, n_p), -1 = absent), or None for
            the identity (the source is the fact table itself, n_p = n). Copied: later edits of
            the caller's arrays change nothing.
        cols : list of integer arrays
            Per part, the target column of each source column (length d_p, injective). Copied.
        shape : tuple of int
            (n, d) of the target table.
        columns : list of str, optional
            The d column names.
        names : list of str, optional
            Part names, used in error messages.
        allow_nonfinite : bool, default False
            Keep NaN/inf in sources instead of raising ValueError. NaN and inf in source rows no
            target row takes never reach a result; in rows that are used, sums of ±inf may
            differ from the materialized table (inf·(2 − 1) = inf where the materialized sum
            gives inf − inf = NaN).
        copy : bool, default True
            Copy the index vectors ``rows``. With False an integer array of the platform's index
            dtype is used as it is (validated, not copied): the caller must not change it
            afterwards. Tables hand over their join results this way (a copy of a 6M-row index
            vector is 48 MB).

        Returns
        -------
        NormalizedMatrix

        Raises
        ------
        TypeError
            For non-numeric sources or non-integer index vectors, naming the part.
        ValueError
            For bad shapes, out-of-range indices, non-injective mappings, non-finite values,
            empty sources, and target cells covered by two parts, naming the part.

        Examples
        --------
        >>> import numpy as np
        >>> T = NormalizedMatrix.from_parts([np.ones((2, 1)), np.eye(2)],
        ...                                 [None, np.array([1, 0])], [[0], [1, 2]], (2, 3))
        >>> T.toarray().tolist()
        [[1.0, 0.0, 1.0], [1.0, 1.0, 0.0]]
        """
        parts = make_parts(sources, rows, cols, shape, names, columns, allow_nonfinite, copy)
        return cls(parts, shape, columns=None if columns is None else [str(c) for c in columns])

    @classmethod
    def from_trusted_parts(cls, parts, shape, *, scale=None, shift=None, columns=None,
                           derived=False):
        """T from parts that are already validated, e.g. the rows of one partition of a
        validated matrix (:mod:`ilargi.scaleout` builds each partition's matrix this way).

        Nothing is checked or copied: the index vectors must be in range and the affine state
        finite, as :meth:`from_parts` and the operators guarantee for what they make.

        Parameters
        ----------
        parts : sequence of Part
            The parts of T₀ (parts of one table share one Indicator).
        shape : tuple of int
            (n, d) of T.
        scale, shift : array of length d, optional
            The affine state (None: ones, zeros).
        columns : list of str, optional
            Column names.
        derived : bool, default False
            Whether the sources hold values computed by an elementwise function.

        Returns
        -------
        NormalizedMatrix
        """
        nm = cls(parts, shape, scale=scale, shift=shift, columns=columns)
        nm._derived = bool(derived)
        return nm

    @classmethod
    def from_metadata(cls, metadata, sources, allow_nonfinite=False):
        """T from stored :class:`~ilargi.metadata.Metadata` and matching sources.

        Metadata of a matrix transformed by an elementwise function only fits the transformed
        sources saved with it (:meth:`load` without ``sources``), never the user's raw ones.

        Parameters
        ----------
        metadata : Metadata
            The stored index vectors, mappings, shape and affine state.
        sources : list of 2-D arrays
            One per part, of the shapes the metadata records.
        allow_nonfinite : bool, default False
            As for :meth:`from_parts`.

        Returns
        -------
        NormalizedMatrix

        Raises
        ------
        ValueError
            If a source has another shape than recorded, or the metadata describes sources
            transformed by an elementwise function.

        Examples
        --------
        >>> T = NormalizedMatrix.from_parts(
        ...     [np.array([[1.0], [2.0], [3.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])],
        ...     [None, np.array([0, 1, -1])], [[0], [1, 2]], (3, 3))
        >>> sources = [part.source for part in T.parts]
        >>> NormalizedMatrix.from_metadata(T.metadata, sources).toarray().tolist()
        [[1.0, 1.0, 2.0], [2.0, 3.0, 4.0], [3.0, 0.0, 0.0]]
        """
        if metadata.extra.get("derived"):
            raise ValueError("this metadata describes sources transformed by an elementwise "
                             "function; load it with the sources saved beside it "
                             "(NormalizedMatrix.load(folder)), not with raw sources")
        return cls._from_stored(metadata, sources, allow_nonfinite)

    @classmethod
    def _from_stored(cls, metadata, sources, allow_nonfinite=False):
        for name, expected, source in zip(metadata.names, metadata.source_shapes, sources):
            if tuple(source.shape) != tuple(expected):
                raise ValueError(f"source for part {name!r} has shape {tuple(source.shape)}, "
                                 f"the metadata expects {tuple(expected)}")
        flags = metadata.extra
        nm = cls.from_parts(sources, metadata.rows, metadata.cols, metadata.shape,
                            metadata.columns, metadata.names,
                            allow_nonfinite or flags.get("nonfinite", False))
        nm._scale = nm._owned_affine(metadata.scale, "scale")
        nm._shift = nm._owned_affine(metadata.shift, "shift")
        nm._derived = flags.get("derived", False)
        return nm.T if flags.get("transposed") else nm

    def _owned_affine(self, values, name):
        """A private copy of a stored affine vector, checked: the affine state stays finite and
        real (non-finite results are pushed into the sources instead, see :meth:`_binary`)."""
        if values is None:
            return None
        xp = self._kernels.xp
        values = xp.asarray(values)
        if values.dtype.kind == "c":
            raise complex_error(f"metadata {name}")
        if values.dtype.kind not in "biuf" or values.shape != (self._shape[1],):
            raise ValueError(f"metadata {name} must be {self._shape[1]} real numbers (one per "
                             f"column), got dtype {values.dtype} and shape {values.shape}")
        if not bool(xp.isfinite(values).all()):
            raise ValueError(f"metadata {name} holds NaN or inf")
        return values.astype(np.result_type(values.dtype, np.float32), copy=True)

    @property
    def metadata(self):
        """The data-integration metadata of T: no source values, the affine state included.

        Returns
        -------
        Metadata

        Examples
        --------
        >>> T = NormalizedMatrix.from_parts(
        ...     [np.array([[1.0], [2.0], [3.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])],
        ...     [None, np.array([0, 1, -1])], [[0], [1, 2]], (3, 3))
        >>> T.metadata.names, T.metadata.source_shapes
        (['part0', 'part1'], [(3, 1), (2, 2)])
        """
        affine = self._scale is not None or self._shift is not None
        return Metadata(self._shape, [p.name for p in self._parts],
                        [tuple(p.source.shape) for p in self._parts],
                        [None if p.indicator.rows is None else read_only(p.indicator.rows)
                         for p in self._parts], [p.cols for p in self._parts],
                        self._columns, self._full_scale() if affine else None,
                        self._full_shift() if affine else None, self._flags())

    def _flags(self):
        """Facts about T that the metadata must carry for a faithful reload."""
        flags = {"transposed": self._transposed, "derived": self._derived,
                 "nonfinite": not all(p.finite for p in self._parts)}
        return {key: True for key, value in flags.items() if value}

    def save(self, folder, sources=False):
        """Save the metadata into ``folder`` (npz + JSON), and the sources too if asked.

        After an elementwise function the sources hold derived values, so metadata alone could
        not be reloaded with the user's sources: that case must save the sources.

        Parameters
        ----------
        folder : str or Path
            Created if missing.
        sources : bool, default False
            Also write the sources beside the metadata.

        Raises
        ------
        ValueError
            If T holds derived sources and ``sources`` is False.

        Examples
        --------
        >>> T = NormalizedMatrix.from_parts(
        ...     [np.array([[1.0], [2.0], [3.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])],
        ...     [None, np.array([0, 1, -1])], [[0], [1, 2]], (3, 3))
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     T.save(folder, sources=True)
        ...     back = NormalizedMatrix.load(folder)
        >>> np.array_equal(back.toarray(), T.toarray())
        True
        """
        if self._derived and not sources:
            raise ValueError("this matrix holds sources transformed by an elementwise function; "
                             "save it with sources=True, or save the matrix it was derived from")
        self.metadata.save(folder, [p.source for p in self._parts] if sources else None)

    @classmethod
    def load(cls, folder, sources=None):
        """Load T saved by :meth:`save`.

        Parameters
        ----------
        folder : str or Path
            What :meth:`save` wrote.
        sources : list of 2-D arrays, optional
            The sources; default: the ones saved beside the metadata.

        Returns
        -------
        NormalizedMatrix

        Raises
        ------
        FileNotFoundError
            If ``folder`` holds no metadata, or no sources while ``sources`` is None.

        Examples
        --------
        >>> T = NormalizedMatrix.from_parts(
        ...     [np.array([[1.0], [2.0], [3.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])],
        ...     [None, np.array([0, 1, -1])], [[0], [1, 2]], (3, 3))
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     T.save(folder)
        ...     back = NormalizedMatrix.load(folder, [part.source for part in T.parts])
        >>> back.shape
        (3, 3)
        """
        meta = Metadata.load(folder)
        if sources is None:
            return cls._from_stored(meta, Metadata.load_sources(folder))
        return cls.from_metadata(meta, sources)

    def _derive(self, **changes):
        out = copy.copy(self)
        for key, value in changes.items():
            setattr(out, "_" + key, value)
        return out

    # ------------------------------------------------------------------------------------------
    # Attributes

    @property
    def shape(self):
        """(rows, columns) of this view: (n, d) for T, (d, n) for T.T.

        Examples
        --------
        >>> T = NormalizedMatrix.from_parts(
        ...     [np.array([[1.0], [2.0], [3.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])],
        ...     [None, np.array([0, 1, -1])], [[0], [1, 2]], (3, 3))
        >>> T.shape, T.T.shape
        ((3, 3), (3, 3))
        >>> T[:2].shape
        (2, 3)
        """
        n, d = self._shape
        return (d, n) if self._transposed else (n, d)

    @property
    def ndim(self):
        """Always 2."""
        return 2

    @property
    def size(self):
        """Cells of T: n·d."""
        return self._shape[0] * self._shape[1]

    @property
    def dtype(self):
        """The element type of T: the promoted type of the sources and the affine state.

        Examples
        --------
        >>> T = NormalizedMatrix.from_parts(
        ...     [np.array([[1.0], [2.0], [3.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])],
        ...     [None, np.array([0, 1, -1])], [[0], [1, 2]], (3, 3))
        >>> T.dtype
        dtype('float64')
        """
        dtypes = [p.source.dtype for p in self._parts]
        dtypes += [v.dtype for v in (self._scale, self._shift) if v is not None]
        return np.result_type(*dtypes) if dtypes else np.dtype(np.float64)

    @property
    def nnz(self):
        """Stored non-zeros of the sources (not of the joined table).

        Examples
        --------
        >>> T = NormalizedMatrix.from_parts(
        ...     [np.array([[1.0], [2.0], [3.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])],
        ...     [None, np.array([0, 1, -1])], [[0], [1, 2]], (3, 3))
        >>> T.nnz
        7
        """
        kernels = self._kernels
        return sum(int(p.source.nnz) if kernels.is_sparse(p.source)
                   else int(kernels.xp.count_nonzero(p.source)) for p in self._parts)

    @property
    def T(self):
        """The transpose: a flag, no copy.

        Examples
        --------
        >>> T = NormalizedMatrix.from_parts(
        ...     [np.array([[1.0], [2.0], [3.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])],
        ...     [None, np.array([0, 1, -1])], [[0], [1, 2]], (3, 3))
        >>> (T.T @ np.ones(3)).tolist()
        [6.0, 4.0, 6.0]
        """
        return self._derive(transposed=not self._transposed)

    @property
    def transposed(self):
        """True for a transposed view (T.T): operators then read T through the transpose rules."""
        return self._transposed

    @property
    def parts(self):
        """The parts of T₀ (name, source, indicator, cols); the affine state is ``scale``/``shift``."""
        return self._parts

    @property
    def columns(self):
        """Names of the columns of T (not of T.T), or None."""
        return None if self._columns is None else list(self._columns)

    @property
    def scale(self):
        """a of T = T₀·diag(a) + 1·bᵀ (length d; ones when T has no scale).

        Examples
        --------
        >>> T = NormalizedMatrix.from_parts(
        ...     [np.array([[1.0], [2.0], [3.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])],
        ...     [None, np.array([0, 1, -1])], [[0], [1, 2]], (3, 3))
        >>> (T * 2.0).scale.tolist()
        [2.0, 2.0, 2.0]
        """
        return self._full_scale()

    @property
    def shift(self):
        """b of T = T₀·diag(a) + 1·bᵀ (length d; zeros when T has no shift).

        Examples
        --------
        >>> T = NormalizedMatrix.from_parts(
        ...     [np.array([[1.0], [2.0], [3.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])],
        ...     [None, np.array([0, 1, -1])], [[0], [1, 2]], (3, 3))
        >>> (T + 1.0).shift.tolist()
        [1.0, 1.0, 1.0]
        """
        return self._full_shift()

    @property
    def affine(self):
        """(scale, shift) as stored: None where T has no scale (all ones) or no shift (all zeros),
        so a copy of T (a partition's rows) keeps the same arithmetic."""
        return self._scale, self._shift

    @property
    def derived(self):
        """Whether the sources hold values computed by an elementwise function (``np.log(T)``):
        metadata alone then no longer fits the user's raw sources."""
        return self._derived

    def to_dask(self, chunks, *, persist=True):
        """This matrix split into row partitions on Dask (the optional ``dask`` extra).

        The fact-aligned pieces (identity-indicator sources and every index vector) are cut
        into partitions of ``chunks`` rows; the dimension sources are placed once on every
        worker (broadcast) and shared by all partitions. Operators that give one value per row
        return row-chunked Dask arrays, the others small in-memory results through one tree
        reduction over the partitions (see :class:`ilargi.scaleout.DaskNormalizedMatrix`).

        Parameters
        ----------
        chunks : int or sequence of int
            Rows per partition (the last one takes the rest), or each partition's rows.
        persist : bool, default True
            Keep each partition's matrix (and the structures its kernels cache) in the
            workers' memory across operations; False builds it anew in every operation.

        Returns
        -------
        ilargi.scaleout.DaskNormalizedMatrix

        Examples
        --------
        >>> T = NormalizedMatrix.from_parts(
        ...     [np.array([[1.0], [2.0], [3.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])],
        ...     [None, np.array([0, 1, -1])], [[0], [1, 2]], (3, 3))
        >>> D = T.to_dask(chunks=2)
        >>> D.chunks, D.npartitions
        (((2, 1), (3,)), 2)
        >>> (D @ np.ones(3)).compute().tolist()
        [4.0, 9.0, 3.0]
        """
        from ilargi.scaleout import from_normalized  # lazy: Dask is an optional extra
        return from_normalized(self, chunks, persist=persist)

    @property
    def device(self):
        """Where the sources live: 'cpu' (NumPy/SciPy) or 'gpu' (CuPy)."""
        return self._kernels.name

    def to(self, device):
        """T with sources, indicators and affine state on ``device``.

        Dense sources become ``cupy.ndarray``, sparse ones ``cupyx.scipy.sparse.csr_matrix`` (and
        back); the metadata is unchanged.

        Parameters
        ----------
        device : {'cpu', 'gpu', 'cuda'}
            The target device.

        Returns
        -------
        NormalizedMatrix
            self if it already lives there.

        Raises
        ------
        ValueError
            For an unknown device name.

        Examples
        --------
        >>> T = NormalizedMatrix.from_parts(
        ...     [np.array([[1.0], [2.0], [3.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])],
        ...     [None, np.array([0, 1, -1])], [[0], [1, 2]], (3, 3))
        >>> T.to("cpu") is T
        True
        """
        target = backend_for_device(device)
        if target is self._kernels:
            return self
        move = target.move_array
        moved = {}  # one copy per indicator: parts of one table keep sharing theirs

        def indicator(ind):
            if id(ind) not in moved:
                moved[id(ind)] = Indicator(None if ind.is_identity else move(ind.rows),
                                           ind.n_source, ind.n_rows, validate=False)
            return moved[id(ind)]

        parts = tuple(Part(p.name, target.move_source(p.source), indicator(p.indicator), p.cols,
                           p.finite) for p in self._parts)
        return self._derive(parts=parts,
                            scale=None if self._scale is None else move(self._scale),
                            shift=None if self._shift is None else move(self._shift))

    def nonfinite(self):
        """Whether T holds NaN and whether it holds ±inf, from its parts and affine state alone.

        Nothing is materialized: a part built from finite values answers at once (its ``finite``
        flag); a part that may hold NaN/inf (``allow_nonfinite``, or made by a function such as
        ``np.log``, including the parts holding f(b) of NULL cells) is checked on the source rows
        some target row takes, through the affine state. The cells no part covers hold b, which
        is always finite. Where a finite source could overflow a·s + b (a bound from its largest
        value), its cells are checked as well.

        Returns
        -------
        (bool, bool)
            (has NaN, has ±inf).

        Examples
        --------
        >>> T = NormalizedMatrix.from_parts(
        ...     [np.array([[1.0], [2.0], [3.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])],
        ...     [None, np.array([0, 1, -1])], [[0], [1, 2]], (3, 3))
        >>> T.nonfinite(), np.log(T).nonfinite()
        ((False, False), (False, True))
        """
        xp = self._kernels.xp
        nan = inf = False
        for v in (self._scale, self._shift):  # finite by construction; checked, O(d)
            if v is not None and not bool(xp.isfinite(v).all()):
                nan, inf = nan or bool(xp.isnan(v).any()), inf or bool(xp.isinf(v).any())
        for part in self._parts:
            part_nan, part_inf = part.nonfinite()
            if part_nan or part_inf or self._may_overflow(part):
                part_nan, part_inf = self._cells_nonfinite(part)
            nan, inf = nan or part_nan, inf or part_inf
            if nan and inf:
                break
        return nan, inf

    def _may_overflow(self, part):
        """Whether a·s + b can overflow for a finite source: |a|·max|s| + |b| near the dtype's
        largest number (max|s| computed once per source)."""
        if self._scale is None and self._shift is None:
            return False
        xp = self._kernels.xp
        largest = part.absmax()
        a, b = self._full_scale()[part.cols], self._full_shift()[part.cols]
        bound = float(xp.abs(a).max()) * largest + float(xp.abs(b).max())
        return not bound < float(np.finfo(self.dtype).max) / 4

    def _cells_nonfinite(self, part):
        """(NaN, inf) among a·s + b over the source rows of ``part`` that T uses."""
        kernels, xp = self._kernels, self._kernels.xp
        ind = part.indicator
        used = part.source if ind.is_identity else kernels.select_rows(part.source,
                                                                      ind.counts() > 0)
        if used.shape[0] == 0:
            return False, False
        a, b = self._full_scale()[part.cols], self._full_shift()[part.cols]
        with np.errstate(all="ignore"):
            if kernels.is_sparse(used):
                used = kernels.as_csr(used)
                values = used.data * a[used.indices] + b[used.indices]
            else:
                values = used * a + b
        return bool(xp.isnan(values).any()), bool(xp.isinf(values).any())

    @property
    def _kernels(self):
        return backend_of(self._parts[0].source if self._parts else None)

    def _source_dtype(self):
        dtypes = {p.source.dtype for p in self._parts}
        return dtypes.pop() if len(dtypes) == 1 else np.dtype(np.float64)

    def _full_scale(self):
        xp = self._kernels.xp
        if self._scale is None:
            return xp.ones(self._shape[1], dtype=self._source_dtype())
        return self._scale

    def _full_shift(self):
        xp = self._kernels.xp
        if self._shift is None:
            return xp.zeros(self._shape[1], dtype=self._source_dtype())
        return self._shift

    def _base(self):
        """T itself (untransposed)."""
        return self.T if self._transposed else self

    def __repr__(self):
        kinds = ", ".join(f"{p.name}: {p.source.shape[0]}×{p.source.shape[1]}"
                          f"{' sparse' if self._kernels.is_sparse(p.source) else ''}"
                          for p in self._parts)
        flag = ", transposed" if self._transposed else ""
        return f"<NormalizedMatrix {self.shape[0]}×{self.shape[1]} [{kinds}]{flag}>"

    # ------------------------------------------------------------------------------------------
    # Matrix products

    def _operand(self, X, what):
        if isinstance(X, NormalizedMatrix):
            raise TypeError("a product of two NormalizedMatrix objects is not supported; "
                            "materialize one of them")
        kernels = self._kernels
        if kernels.is_sparse(X):
            raise TypeError(f"{what} must be a dense array, got a sparse matrix; use .toarray()")
        X = kernels.xp.asarray(X)
        if X.dtype.kind == "c":
            raise complex_error(what)
        if X.dtype.kind not in "biuf":
            raise TypeError(f"{what} must hold numbers, got dtype {X.dtype}")
        if X.ndim not in (1, 2):
            raise ValueError(f"{what} must be 1-D or 2-D, got shape {X.shape}")
        return X.astype(np.result_type(self.dtype, X.dtype, np.float32), copy=False)

    @pool.operator
    def __matmul__(self, X):
        """T·X (X: d × m or length d)."""
        X = self._operand(X, "right operand of @")
        if X.shape[0] != self.shape[1]:
            raise ValueError(f"matmul: NormalizedMatrix of shape {self.shape} @ operand of shape "
                             f"{X.shape}: inner dimensions {self.shape[1]} and {X.shape[0]} differ")
        return self._product(X)

    @pool.operator
    def __rmatmul__(self, X):
        """X·T (X: m × n or length n), as (Tᵀ·Xᵀ)ᵀ."""
        X = self._operand(X, "left operand of @")
        if X.shape[-1] != self.shape[0]:
            raise ValueError(f"matmul: operand of shape {X.shape} @ NormalizedMatrix of shape "
                             f"{self.shape}: inner dimensions {X.shape[-1]} and {self.shape[0]} "
                             "differ")
        if X.ndim == 1:
            return self.T._product(X)
        return self._kernels.xp.ascontiguousarray(self.T._product(X.T).T)

    @pool.operator
    def dot(self, X, out=None):
        """T·X, as ``ndarray.dot``, written into ``out`` when given.

        Training loops pass the same buffer every iteration, which spares allocating (and
        page-faulting) a fresh n-vector.

        Parameters
        ----------
        X : array, d × m or length d
            Dense operand.
        out : array, optional
            A C-contiguous array of the result's shape and dtype.

        Returns
        -------
        array
            ``out`` if given, else a new array.

        Raises
        ------
        TypeError
            For a sparse, non-numeric or NormalizedMatrix operand.
        ValueError
            If the inner dimensions differ or ``out`` does not fit.

        Examples
        --------
        >>> T = NormalizedMatrix.from_parts(
        ...     [np.array([[1.0], [2.0], [3.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])],
        ...     [None, np.array([0, 1, -1])], [[0], [1, 2]], (3, 3))
        >>> out = np.empty(3)
        >>> T.dot(np.ones(3), out=out) is out, out.tolist()
        (True, [4.0, 9.0, 3.0])
        """
        X = self._operand(X, "operand of dot")
        if X.shape[0] != self.shape[1]:
            raise ValueError(f"dot: NormalizedMatrix of shape {self.shape} and operand of shape "
                             f"{X.shape}: inner dimensions {self.shape[1]} and {X.shape[0]} differ")
        if out is None:
            return self @ X
        shape, dtype = (self.shape[0],) + X.shape[1:], np.result_type(self.dtype, X.dtype)
        if out.shape != shape or out.dtype != dtype or not out.flags.c_contiguous:
            raise ValueError(f"dot: out must be a C-contiguous {dtype} array of shape {shape}, got "
                             f"{out.dtype} of shape {out.shape}")
        return self._product(X, out)

    def _product(self, X, out=None):
        """This view times a checked operand X, into ``out`` if given.

        NaN and inf follow IEEE as on the materialized table: the rules skip the cells no part
        covers and aggregate rows before multiplying, which is exact for finite numbers only, so
        non-finite operand rows and non-finite cells go through :meth:`_lmm_exact` and
        :meth:`_tmm_exact`.
        """
        base = self._base()
        if self._transposed:
            result = base._tmm_exact(X)
            if out is None:
                return result
            out[...] = result
            return out
        return base._lmm_exact(X, out)

    def _lmm_exact(self, X, out=None):
        """T·X; rows j of X holding NaN/inf multiply column j of T cell by cell."""
        if _sum_is_finite(X):
            return self._lmm(X, out)
        xp = self._kernels.xp
        bad = xp.flatnonzero(~xp.isfinite(X).reshape(X.shape[0], -1).all(axis=1))
        finite = X.copy()
        finite[bad] = 0
        out = self._lmm(finite, out)
        for start in range(0, bad.shape[0], _CHUNK):
            chunk = bad[start:start + _CHUNK]
            out += self._select_columns(np.asarray(self._kernels.asnumpy(chunk))).toarray() \
                @ X[chunk]
        return out

    def _tmm_exact(self, Y):
        """Tᵀ·Y; rows i of Y holding NaN/inf multiply row i of T cell by cell, and so do the
        target rows that take a non-finite source row (see :meth:`_tmm`).

        Training loops call this every iteration with an n-long Y, so Y is not scanned when a
        dense part is present in every row: a NaN/inf in Y then meets a stored cell of it and
        shows in the result, which is checked instead (length d).
        """
        xp = self._kernels.xp
        out = None
        if self._every_row_stored():
            out = self._tmm(Y)
            if bool(xp.isfinite(out).all()):
                return out
        if _sum_is_finite(Y):  # NaN/inf from T's own cells: _tmm already handled them
            return self._tmm(Y) if out is None else out
        bad = xp.flatnonzero(~xp.isfinite(Y).reshape(Y.shape[0], -1).all(axis=1))
        finite = Y.copy()
        finite[bad] = 0
        out = self._tmm(finite)
        for start in range(0, bad.shape[0], _CHUNK):
            chunk = bad[start:start + _CHUNK]
            out += self._select_rows(chunk).toarray().T @ Y[chunk]
        return out

    def _every_row_stored(self):
        """Whether some dense part is present in every target row (then each row of Tᵀ·Y
        multiplies every Y_i by a stored number)."""
        kernels = self._kernels
        return any(p.indicator.n_absent == 0 and not kernels.is_sparse(p.source)
                   for p in self._parts)

    def _lmm(self, X, out=None):
        """T·X = T₀·(a⊙X) + 1·(bᵀX)."""
        a, b = self._scale, self._shift
        scaled = X if a is None else (a * X if X.ndim == 1 else a[:, None] * X)
        out = rules.lmm(self._parts, self._shape[0], scaled, out)
        if b is not None:
            out += b @ X
        return out

    def _tmm(self, Y):
        """Tᵀ·Y = a⊙(T₀ᵀ·Y) + b·(1ᵀY).

        The rule sums Y over the target rows that take one source row before multiplying by
        it: exact for finite values, but inf·(1 − 2) = −inf where the materialized table sums
        inf − 2·inf = NaN. Source rows holding NaN/inf are therefore left out of the rule
        (zeroed) and their target rows multiplied cell by cell.
        """
        a, b = self._scale, self._shift
        parts, exact = self._parts, []
        if not all(p.finite for p in parts):
            parts, exact = self._split_nonfinite_rows()
        out = rules.tmm(parts, self._shape[1], Y)
        for part, rows, taken in exact:  # target rows, and the source rows they take
            block = self._kernels.to_dense(part.source[taken])
            out[part.cols] += block.T @ Y[rows]
        if a is not None:
            out *= a if Y.ndim == 1 else a[:, None]
        if b is not None:
            out += b * Y.sum() if Y.ndim == 1 else b[:, None] * Y.sum(axis=0)
        return out

    def _split_nonfinite_rows(self):
        """(parts with their NaN/inf source rows zeroed, [(part, target rows, source rows)] of
        the cells left out), cached per part: see :meth:`_tmm`."""
        kernels, xp = self._kernels, self._kernels.xp
        parts, exact = [], []
        for part in self._parts:
            nan, inf = part.nonfinite()
            if not (nan or inf):
                parts.append(part)
                continue

            def build(part=part):
                S = part.source
                if kernels.is_sparse(S):  # rows of the stored entries that are not finite
                    per_row = np.diff(np.asarray(kernels.asnumpy(S.indptr)))
                    entry_rows = xp.asarray(np.repeat(np.arange(S.shape[0]), per_row))
                    bad = xp.zeros(S.shape[0], dtype=bool)
                    bad[entry_rows[~xp.isfinite(S.data)]] = True
                else:
                    bad = ~xp.isfinite(S).all(axis=1)
                rows = xp.flatnonzero(bad[xp.asarray(part.indicator.index_vector())]
                                      & xp.asarray(part.indicator.present()))
                taken = xp.asarray(part.indicator.index_vector())[rows]
                return part.with_source(kernels.zero_rows(S, bad), True), rows, taken
            finite, rows, taken = part.indicator.cached("split_nonfinite", build,
                                                        owner=part.source)
            parts.append(finite)
            exact.append((part, rows, taken))
        return tuple(parts), exact

    def matvec(self, x):
        """T·x for a length-d vector (the LinearOperator interface).

        Parameters
        ----------
        x : array of length d

        Returns
        -------
        array of length n
        """
        return self @ x

    def rmatvec(self, y):
        """Tᵀ·y for a length-n vector (the LinearOperator interface).

        Parameters
        ----------
        y : array of length n

        Returns
        -------
        array of length d
        """
        return self.T @ y

    def matmat(self, X):
        """T·X for a d × m matrix (the LinearOperator interface).

        Parameters
        ----------
        X : array, d × m

        Returns
        -------
        array, n × m
        """
        return self @ X

    def rmatmat(self, Y):
        """Tᵀ·Y for an n × m matrix (the LinearOperator interface).

        Parameters
        ----------
        Y : array, n × m

        Returns
        -------
        array, d × m
        """
        return self.T @ Y

    def aslinearoperator(self):
        """A :class:`scipy.sparse.linalg.LinearOperator` over T, for lsqr, cg, svds, ...

        Returns
        -------
        scipy.sparse.linalg.LinearOperator

        Examples
        --------
        >>> T = NormalizedMatrix.from_parts(
        ...     [np.array([[1.0], [2.0], [3.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])],
        ...     [None, np.array([0, 1, -1])], [[0], [1, 2]], (3, 3))
        >>> op = T.aslinearoperator()
        >>> op.shape, (op @ np.ones(3)).tolist()
        ((3, 3), [4.0, 9.0, 3.0])
        """
        return LinearOperator(self.shape, matvec=self.matvec, rmatvec=self.rmatvec,
                              matmat=self.matmat, rmatmat=self.rmatmat, dtype=self.dtype)

    def _materialize_for(self, plan, operator, m=None):
        """The materialized table if ``plan`` says so for this one call, else None.

        plan: "factorized" (default), "materialized", or "auto": ask the cost model
        (:func:`ilargi.choose`) for a one-shot call, so the join is charged to it.
        """
        if plan == "factorized":
            return None
        if plan == "auto":
            if choose(self, operator, m=m, repeats=1).factorize:
                return None
        elif plan != "materialized":
            raise ValueError(f"plan must be 'factorized', 'materialized' or 'auto', got {plan!r}")
        return self.materialize()

    @pool.operator
    def matmul(self, X, plan="factorized"):
        """T·X like ``T @ X``, with a choice of plan.

        Parameters
        ----------
        X : array, d × m or length d
            Dense operand.
        plan : {'factorized', 'materialized', 'auto'}, default 'factorized'
            'materialized' builds T for this call; 'auto' asks :func:`ilargi.choose`.

        Returns
        -------
        array

        Raises
        ------
        ValueError
            For an unknown plan or mismatched dimensions.

        Examples
        --------
        >>> T = NormalizedMatrix.from_parts(
        ...     [np.array([[1.0], [2.0], [3.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])],
        ...     [None, np.array([0, 1, -1])], [[0], [1, 2]], (3, 3))
        >>> T.matmul(np.ones(3), plan="materialized").tolist()
        [4.0, 9.0, 3.0]
        """
        X = self._operand(X, "right operand of matmul")
        table = self._materialize_for(plan, "lmm", X.shape[1] if X.ndim == 2 else 1)
        return self @ X if table is None else materialized.lmm(table, X)

    @pool.operator
    def gramvec(self, y, v=None, alpha=1.0, beta=0.0, z=None, plan="factorized"):
        """α·Tᵀ(v⊙(T·y)) + β·z in one pass over the factorized T.

        The pattern of GLM gradients, Hessian-vector products and CG steps. Only vectors of the
        target's row count (n × m for a 2-D y) are allocated, never an n × d temporary; a
        backend with a fused kernel (the GPU) runs it in one stacked pass.

        Parameters
        ----------
        y : array of length d (or d × m)
        v : array of length n, optional
            Row weights (default 1).
        alpha, beta : float, default 1.0 and 0.0
        z : array of length d (or d × m), optional
            Added as β·z.
        plan : {'factorized', 'materialized', 'auto'}, default 'factorized'
            'materialized' builds T for this call; 'auto' asks :func:`ilargi.choose`.

        Returns
        -------
        array of length d (or d × m)

        Raises
        ------
        ValueError
            If y, v or z has the wrong shape (naming it) or ``plan`` is unknown.
        TypeError
            If y, v, z, alpha or beta is not real numbers.

        Examples
        --------
        >>> T = NormalizedMatrix.from_parts(
        ...     [np.array([[1.0], [2.0], [3.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])],
        ...     [None, np.array([0, 1, -1])], [[0], [1, 2]], (3, 3))
        >>> T.gramvec(np.ones(3), v=np.array([1.0, 0.0, 1.0]), alpha=0.5).tolist()
        [6.5, 2.0, 4.0]
        """
        y, v, z, alpha, beta = self._gramvec_arguments(y, v, z, alpha, beta)
        table = self._materialize_for(plan, "gramvec")
        if table is not None:
            out = alpha * materialized.gramvec(table, y, v)
            return out if z is None or beta == 0.0 else out + beta * z
        kernels = self._kernels
        finite = not self._transposed and self._finite_pass(y, v, z)  # fused passes: finite sums
        fused = optional(kernels, "gramvec") if finite else None
        if fused is not None:  # the GPU's stacked pass
            n, d = self._shape
            out = fused(self._parts, n, d, self._scale, self._shift, y, v, alpha, beta, z)
            if out is not None:
                return out
        tabs = self._pass_tables() if finite else None
        if tabs is not None:  # one compiled pass: w = v ⊙ T·y, then Tᵀ·w
            X, c = self._pass_operand(y)
            out, total = passes.gramvec(tabs, kernels, X, c, v, self._shape[1])
            out = self._pass_result(out, total)
            if alpha != 1.0:
                out *= alpha
            if z is not None and beta != 0.0:
                out += beta * z
            return out.astype(np.result_type(self.dtype, y.dtype), copy=False)
        q = self @ y
        if v is not None:
            q *= v if q.ndim == 1 else v[:, None]
        out = self.T @ q
        if alpha != 1.0:
            out *= alpha
        if z is not None and beta != 0.0:
            out += beta * z
        return out

    # The fused passes' operand and result: gramvec above runs one, and so do the training passes
    # (:mod:`ilargi.rewriter.training`).

    def _pass_tables(self):
        """The compiled backend's tables of T₀ (see :mod:`ilargi.rewriter.passes`), or None."""
        return passes.tables(self._kernels, self._parts, self._shape[0])

    def _finite_pass(self, *operands):
        """Whether a fused pass is exact here: it sums finite numbers only."""
        return all(_sum_is_finite(x) for x in operands if x is not None) and not any(self.nonfinite())

    def _pass_operand(self, X):
        """(a⊙X, bᵀX): T·X = T₀·(a⊙X) + 1·(bᵀX), the operand and constant of a pass."""
        a, b = self._scale, self._shift
        scaled = X if a is None else (a * X if X.ndim == 1 else a[:, None] * X)
        return scaled, (0.0 if b is None else b @ X)

    def _pass_result(self, G, total):
        """Tᵀ·r = a⊙(T₀ᵀ·r) + b·(Σ_i r_i) from a pass's T₀ᵀ·r and Σ_i r_i."""
        a, b = self._scale, self._shift
        if a is not None:
            G = G * (a if G.ndim == 1 else a[:, None])
        if b is not None:
            G = G + (b * total if G.ndim == 1 else b[:, None] * total)
        return G

    def _gramvec_arguments(self, y, v, z, alpha, beta):
        """gramvec's arguments checked, each error naming the argument."""
        for name, value in (("alpha", alpha), ("beta", beta)):
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise TypeError(f"gramvec: {name} must be a real number, got {value!r}")
        y = self._operand(y, "y of gramvec")
        if y.shape[0] != self.shape[1]:
            raise ValueError(f"gramvec: y must have {self.shape[1]} rows (columns of T), got "
                             f"shape {y.shape}")
        if v is not None:
            v = self._vector(v, self.shape[0], "v of gramvec", "rows of T")
        if z is not None:
            z = self._operand(z, "z of gramvec")
            if z.shape != y.shape:
                raise ValueError(f"gramvec: z must have the shape of y, {y.shape}, got {z.shape}")
        return y, v, z, float(alpha), float(beta)

    @pool.operator
    def crossprod(self, w=None, plan="factorized"):
        """Tᵀ·diag(w)·T (Tᵀ·T for w=None), d × d.

        Parameters
        ----------
        w : array of length n, optional
            Row weights.
        plan : {'factorized', 'materialized', 'auto'}, default 'factorized'
            'materialized' builds T for this call; 'auto' asks :func:`ilargi.choose`.

        Returns
        -------
        array or sparse matrix, d × d
            Sparse when every source is sparse and b = 0.

        Raises
        ------
        ValueError
            If ``w`` has the wrong length, or T holds NaN/inf (see below).

        Notes
        -----
        On a T with NaN or inf cells the factorized rule is refused: the materialized product
        multiplies the zeros of cells no part covers by the infinities of other columns
        (0·inf = NaN), which the rule, by design, never touches. NaN/inf in ``w`` follow IEEE:
        their rows are multiplied cell by cell.

        Examples
        --------
        >>> T = NormalizedMatrix.from_parts(
        ...     [np.array([[1.0], [2.0], [3.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])],
        ...     [None, np.array([0, 1, -1])], [[0], [1, 2]], (3, 3))
        >>> np.allclose(T.crossprod(), T.toarray().T @ T.toarray())
        True
        """
        if self._transposed:
            return self.T.tcrossprod(w)
        if w is not None:
            w = self._row_vector(w, "w")
        table = self._materialize_for(plan, "crossprod")
        if table is not None:
            return materialized.crossprod(table, w)
        self._refuse_nonfinite("crossprod")
        if w is not None and not _sum_is_finite(w):
            return self._crossprod_nonfinite_weights(w)
        a, b = self._scale, self._shift
        d = self._shape[1]
        sparse = bool(self._parts) and self._all_sparse() and (b is None or not bool((b != 0).any()))
        gram = rules.crossprod(self._parts, d, w, sparse)
        if a is not None:
            gram = self._kernels.scale_columns(gram, a)
            gram = (self._kernels.scale_columns(gram.T, a)).T
        if b is None:
            return gram
        return self._shift_crossprod(gram, w)

    def _refuse_nonfinite(self, operator_name):
        nan, inf = self.nonfinite()
        if nan or inf:
            raise ValueError(
                f"{operator_name}: T holds {'NaN' if nan else 'inf'} cells, where the factorized "
                "rule would differ from the materialized product (which multiplies the zeros of "
                "NULL cells by infinities: 0·inf = NaN); materialize first, or clean the data")

    def _crossprod_nonfinite_weights(self, w):
        """TᵀWT with NaN/inf weights: their rows cell by cell, the others by the rule."""
        xp, kernels = self._kernels.xp, self._kernels
        bad = xp.flatnonzero(~xp.isfinite(w))
        finite = w.copy()
        finite[bad] = 0
        gram = kernels.to_dense(self.crossprod(finite))
        for start in range(0, bad.shape[0], _CHUNK):
            chunk = bad[start:start + _CHUNK]
            rows = self._select_rows(chunk).toarray()
            gram = gram + rows.T @ (rows * w[chunk][:, None])
        return gram

    def _shift_crossprod(self, gram, w):
        """TᵀWT = diag(a)·G₀·diag(a) + u·bᵀ + b·uᵀ + (Σw)·b·bᵀ, with u = a⊙T₀ᵀw."""
        xp = self._kernels.xp
        a, b = self._full_scale(), self._shift
        n = self._shape[0]
        u = a * (rules.colsums(self._parts, self._shape[1]) if w is None
                 else rules.tmm(self._parts, self._shape[1], w))
        total = n if w is None else w.sum()
        gram = gram.toarray() if self._kernels.is_sparse(gram) else gram
        return gram + xp.outer(u, b) + xp.outer(b, u) + total * xp.outer(b, b)

    @pool.operator
    def tcrossprod(self, w=None, max_bytes=2 ** 31):
        """T·diag(w)·Tᵀ (T·Tᵀ for w=None): a dense n × n matrix.

        Parameters
        ----------
        w : array of length d, optional
            Column weights.
        max_bytes : int, default 2**31
            Refuse a result larger than this.

        Returns
        -------
        array, n × n

        Raises
        ------
        ValueError
            If the result would exceed ``max_bytes`` or ``w`` has the wrong length.
        MemoryError
            On the GPU, if the device cannot hold it.

        Examples
        --------
        >>> T = NormalizedMatrix.from_parts(
        ...     [np.array([[1.0], [2.0], [3.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])],
        ...     [None, np.array([0, 1, -1])], [[0], [1, 2]], (3, 3))
        >>> np.allclose(T.tcrossprod(), T.toarray() @ T.toarray().T)
        True
        """
        if self._transposed:
            return self.T.crossprod(w)
        n, d = self._shape
        if n * n * 8 > max_bytes:
            raise ValueError(f"tcrossprod would build a dense {n} × {n} matrix "
                             f"({n * n * 8 / 2 ** 30:.1f} GiB) above max_bytes={max_bytes}")
        self._refuse_nonfinite("tcrossprod")
        if w is not None:
            w = self._column_vector(w, "w")
            if not _sum_is_finite(w):  # columns with NaN/inf weights, cell by cell
                xp = self._kernels.xp
                bad = np.flatnonzero(~np.isfinite(self._kernels.asnumpy(w)))
                finite = w.copy()
                finite[xp.asarray(bad)] = 0
                out = self.tcrossprod(finite, max_bytes)
                for start in range(0, bad.shape[0], _CHUNK):
                    chunk = bad[start:start + _CHUNK]
                    cols = self._select_columns(chunk).toarray()
                    out = out + (cols * w[xp.asarray(chunk)]) @ cols.T
                return out
        check_memory = optional(self._kernels, "check_memory")  # device memory (GPU)
        if check_memory is not None:
            check_memory(2 * n * n * 8, f"tcrossprod (a dense {n} × {n} result)")
        a, b = self._full_scale(), self._shift
        c = a * a if w is None else a * a * self._column_vector(w, "w")
        out = rules.tcrossprod(self._parts, n, c)
        if b is None:
            return out
        # T·W·Tᵀ = T₀ A W A T₀ᵀ + r·1ᵀ + 1·rᵀ + (bᵀWb)·1·1ᵀ with r = T₀(a⊙w⊙b).
        weights = b if w is None else b * self._column_vector(w, "w")
        r = rules.lmm(self._parts, n, a * weights)
        return out + r[:, None] + r[None, :] + float(b @ weights)

    def _vector(self, v, length, what, of):
        """A float64 vector of ``length`` real numbers, or an error naming ``what``."""
        if isinstance(v, NormalizedMatrix) or self._kernels.is_sparse(v):
            raise TypeError(f"{what} must be a dense vector, got {type(v).__name__}")
        v = self._kernels.xp.asarray(v)
        if v.dtype.kind == "c":
            raise complex_error(what)
        if v.dtype.kind not in "biuf":
            raise TypeError(f"{what} must hold real numbers, got dtype {v.dtype}")
        if v.shape != (length,):
            raise ValueError(f"{what} must have length {length} ({of}), got shape {v.shape}")
        return v.astype(np.float64, copy=False)

    def _row_vector(self, v, what):
        return self._vector(v, self._shape[0], what, "rows of T")

    def _column_vector(self, v, what):
        return self._vector(v, self._shape[1], what, "columns of T")

    def _all_sparse(self):
        return all(self._kernels.is_sparse(p.source) for p in self._parts)

    # ------------------------------------------------------------------------------------------
    # Reductions

    def _axis(self, axis):
        """The axis of the untransposed T that ``axis`` of this view reduces (0, 1 or None)."""
        return reduced_axis(axis, self._transposed)

    @staticmethod
    def _finish(result, axis, keepdims, out, shape):
        if keepdims:
            result = result.reshape((1, 1) if axis is None else
                                    ((1, shape[1]) if axis == 0 else (shape[0], 1)))
        if out is not None:
            out[...] = result
            return out
        return result

    def _colsums(self):
        """colSums(T) = a⊙colSums(T₀) + n·b."""
        out = rules.colsums(self._parts, self._shape[1])
        if self._scale is not None:
            out = out * self._scale
        if self._shift is not None:
            out = out + self._shape[0] * self._shift
        return out

    def _rowsums(self):
        """rowSums(T) = T₀·a + Σb."""
        n = self._shape[0]
        out = (rules.rowsums(self._parts, n) if self._scale is None
               else rules.lmm(self._parts, n, self._scale))
        if out is None:
            out = self._kernels.xp.zeros(n)
        if self._shift is not None:
            out = out + self._shift.sum()
        return out

    def _reduce_sum(self, axis):
        if axis == 1:
            return self._rowsums()
        sums = self._colsums()
        return sums if axis == 0 else sums.sum()

    @pool.operator
    def sum(self, axis=None, dtype=None, out=None, keepdims=False):
        """Sum over all cells (axis=None), down columns (0) or along rows (1).

        Parameters
        ----------
        axis : {None, 0, 1, -1, -2} or tuple of both axes
            Sum over all cells (None), down columns (0) or along rows (1).
        dtype : dtype, optional
            Cast the result to it.
        out : array, optional
            Written into when given.
        keepdims : bool, default False
            Keep the reduced axis with length one (sum of shape (1, d) or (n, 1)).

        Returns
        -------
        float or array
            The total for axis=None, else the column sums (0) or row sums (1).

        Raises
        ------
        ValueError
            For an axis out of range.

        Examples
        --------
        >>> T = NormalizedMatrix.from_parts(
        ...     [np.array([[1.0], [2.0], [3.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])],
        ...     [None, np.array([0, 1, -1])], [[0], [1, 2]], (3, 3))
        >>> float(T.sum()), T.sum(axis=1).tolist()
        (16.0, [4.0, 9.0, 3.0])
        """
        base_axis = self._axis(axis)
        result = self._base()._reduce_sum(base_axis)
        if dtype is not None:
            result = result.astype(dtype)
        return self._finish(result, self._view_axis(axis), keepdims, out, self.shape)

    def _view_axis(self, axis):
        return None if axis is None or isinstance(axis, tuple) else axis % 2

    def _count(self, base_axis):
        n, d = self._shape
        return n * d if base_axis is None else (n if base_axis == 0 else d)

    @pool.operator
    def mean(self, axis=None, dtype=None, out=None, keepdims=False):
        """Mean over all cells (axis=None), down columns (0) or along rows (1).

        Parameters
        ----------
        axis, out, keepdims
            As for :meth:`sum`.
        dtype : dtype, optional
            Accepted for NumPy compatibility; the mean is computed in the result type of T.

        Returns
        -------
        float or array
            The mean of all cells, or one mean per column or row.

        Examples
        --------
        >>> T = NormalizedMatrix.from_parts(
        ...     [np.array([[1.0], [2.0], [3.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])],
        ...     [None, np.array([0, 1, -1])], [[0], [1, 2]], (3, 3))
        >>> T.mean(axis=0).tolist()
        [2.0, 1.3333333333333333, 2.0]
        """
        base_axis = self._axis(axis)
        base = self._base()
        result = base._reduce_sum(base_axis) / base._count(base_axis)
        return self._finish(result, self._view_axis(axis), keepdims, out, self.shape)

    @pool.operator
    def var(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
        """Variance, exact through sums of squares of the centred table.

        Down columns (and over all cells) the table is centred in the affine form, then squared
        by the f(0)-correction rule, so no cancellation occurs; along rows the row means are not
        affine, so sums of squares of the table shifted by its overall mean are used.

        Parameters
        ----------
        axis : {None, 0, 1, -1, -2} or tuple of both axes
            Variance over all cells (None), down columns (0) or along rows (1).
        dtype : dtype, optional
            Accepted for NumPy compatibility.
        out : array, optional
            Receives the variance(s) when given.
        ddof : int, default 0
            Delta degrees of freedom.
        keepdims : bool, default False
            Keep the reduced axis with length one (var of shape (1, d) or (n, 1)).

        Returns
        -------
        float or array
            Variances: one float, or one per column or row.

        Examples
        --------
        >>> T = NormalizedMatrix.from_parts(
        ...     [np.array([[1.0], [2.0], [3.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])],
        ...     [None, np.array([0, 1, -1])], [[0], [1, 2]], (3, 3))
        >>> np.allclose(T.var(axis=0), T.toarray().var(axis=0))
        True
        """
        base_axis = self._axis(axis)
        result = self._base()._var(base_axis, ddof)
        return self._finish(result, self._view_axis(axis), keepdims, out, self.shape)

    def _var(self, axis, ddof):
        count = self._count(axis) - ddof
        if axis == 1:
            return self._row_sum_of_squares() / count
        per_column, column_means = self._column_sum_of_squares()
        if axis == 0:
            return per_column / count
        overall = column_means.mean()
        return (per_column.sum() + self._shape[0] * ((column_means - overall) ** 2).sum()) / count

    def _column_sum_of_squares(self):
        """(Σ_i (T_ij − μ_j)², μ_j) per column, combining per-part moments (parallel-axis rule).

        Column j's cells split into groups: the rows each covering part feeds (source rows weighted
        by how many target rows take them) and the NULL cells (value b_j). Each group's centred sum
        of squares comes from the source; Σ = Σ_groups M2 + N·(m − μ_j)²: no cancellation. μ_j is
        taken relative to the first group's mean, so a constant column has variance exactly 0.
        """
        kernels, xp = self._kernels, self._kernels.xp
        a, b = self._full_scale(), self._full_shift()
        n, d = self._shape
        groups = []  # (columns, count, mean, centred sum of squares) of T's cells
        for part in self._parts:
            ind = part.indicator
            if ind.n_present:
                mean, m2 = kernels.column_moments(part.summable(), ind.counts(),
                                                  ind.n_present)
                scale, shift = a[part.cols], b[part.cols]
                groups.append((part.cols, ind.n_present, scale * mean + shift, scale ** 2 * m2))
        groups.append((slice(None), n - self._column_coverage(), b, 0.0))
        reference = xp.full(d, xp.nan)
        for cols, count, mean, _ in groups:
            unset = xp.isnan(reference[cols]) & (xp.asarray(count) > 0)
            reference[cols] = xp.where(unset, mean, reference[cols])
        offset = xp.zeros(d)
        for cols, count, mean, _ in groups:
            offset[cols] += count * (mean - reference[cols])
        mu = reference + offset / n
        total = xp.zeros(d)
        for cols, count, mean, m2 in groups:
            total[cols] += m2 + count * (mean - mu[cols]) ** 2
        return total, mu

    def _row_sum_of_squares(self):
        """Σ_j (T_ij − μ_i)², combining per-part moments with the parallel-axis rule.

        Row i's cells split into groups (the columns of each present part, and the NULL columns);
        with group size k, mean m and centred sum of squares M2 (computed on the source rows),
        Σ_j (T_ij − μ_i)² = Σ_groups M2 + k·(m − μ_i)²: no cancellation, unlike Σ T² − d·μ².
        """
        kernels, xp = self._kernels, self._kernels.xp
        a, b = self._full_scale(), self._full_shift()
        n, d = self._shape
        mu = self._rowsums() / d
        total = xp.zeros(n)
        for part in self._parts:
            mean, m2 = kernels.row_moments(part.source, a[part.cols], b[part.cols])
            ind, k = part.indicator, part.cols.size
            group = kernels.gather(m2, ind) + k * (kernels.gather(mean, ind) - mu) ** 2
            total += xp.where(xp.asarray(ind.present()), group, 0.0)
        inverse, uncovered = self._null_patterns()
        for k, columns in enumerate(uncovered):
            if columns.size:
                nulls = b[columns]
                rows = inverse == k
                total[rows] += ((nulls - nulls.mean()) ** 2).sum() + \
                    columns.size * (nulls.mean() - mu[rows]) ** 2
        return xp.maximum(total, 0.0)  # the sparse correction terms can round below zero

    @pool.operator
    def sum_of_squares(self, axis=None):
        """Σ T_ij² over all cells, down columns (0) or along rows (1), without squaring a copy.

        Σ_j T_ij² = ‖b‖² + Σ_p g(Σ_{j∈cols_p} a_j s_j (a_j s_j + 2 b_j), rows_p), and down columns
        n·b_j² + Σ_p cnt_pᵀ (a s (a s + 2 b)): each part adds what its cells hold beyond b².

        Parameters
        ----------
        axis : {None, 0, 1}
            Over all cells (None), down columns (0) or along rows (1).

        Returns
        -------
        float or array
            Σ T_ij² as a float (axis=None), length d (axis=0) or length n (axis=1).

        Examples
        --------
        >>> T = NormalizedMatrix.from_parts(
        ...     [np.array([[1.0], [2.0], [3.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])],
        ...     [None, np.array([0, 1, -1])], [[0], [1, 2]], (3, 3))
        >>> T.sum_of_squares(axis=1).tolist()
        [6.0, 29.0, 9.0]
        """
        base_axis = self._axis(axis)
        return self._base()._square_sums(base_axis)

    def _square_sums(self, axis):
        kernels, xp = self._kernels, self._kernels.xp
        a, b = self._full_scale(), self._full_shift()
        n, d = self._shape
        if axis is None:  # each source row's sum weighed by its count: no n-long pass
            total = n * float((b * b).sum())
            for part in self._parts:
                excess = kernels.square_excess(part.summable(), a[part.cols], b[part.cols])
                total += float(excess @ part.indicator.counts())
            return total
        if axis == 0:
            out = n * b * b
            for part in self._parts:
                out[part.cols] += kernels.square_excess(part.operand(), a[part.cols],
                                                        b[part.cols], part.indicator.counts())
            return out
        out = xp.full(n, float((b * b).sum()))
        for part in self._parts:
            out += kernels.gather(kernels.square_excess(part.source, a[part.cols], b[part.cols]),
                                  part.indicator)
        return out

    @pool.operator
    def std(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
        """Standard deviation: the square root of :meth:`var` (same parameters).

        Parameters
        ----------
        axis, dtype, out, ddof, keepdims
            As for :meth:`var`.

        Returns
        -------
        float or array
            The square root of :meth:`var`.

        Examples
        --------
        >>> T = NormalizedMatrix.from_parts(
        ...     [np.array([[1.0], [2.0], [3.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])],
        ...     [None, np.array([0, 1, -1])], [[0], [1, 2]], (3, 3))
        >>> np.allclose(T.std(), T.toarray().std())
        True
        """
        return self._kernels.xp.sqrt(self.var(axis, dtype, out, ddof, keepdims))

    @pool.operator
    def min(self, axis=None, out=None, keepdims=False):
        """Minimum over cells, counting NULL cells (value b) and only source rows T uses.

        Parameters
        ----------
        axis : {None, 0, 1, -1, -2} or tuple of both axes
            Minimum over all cells (None), down columns (0) or along rows (1).
        out : array, optional
            Receives the minimum(s) when given.
        keepdims : bool, default False
            Keep the reduced axis with length one (min of shape (1, d) or (n, 1)).

        Returns
        -------
        float or array
            A float for axis=None; per column (0) or per row (1) otherwise.

        Raises
        ------
        ValueError
            For an empty T.

        Examples
        --------
        >>> T = NormalizedMatrix.from_parts(
        ...     [np.array([[1.0], [2.0], [3.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])],
        ...     [None, np.array([0, 1, -1])], [[0], [1, 2]], (3, 3))
        >>> T.min(axis=0).tolist()
        [1.0, 0.0, 0.0]
        """
        base_axis = self._axis(axis)
        result = self._base()._min(base_axis)
        return self._finish(result, self._view_axis(axis), keepdims, out, self.shape)

    @pool.operator
    def max(self, axis=None, out=None, keepdims=False):
        """Maximum over cells, as :meth:`min` of −T.

        Parameters
        ----------
        axis, out, keepdims
            As for :meth:`min`.

        Returns
        -------
        float or array
            Same shapes as :meth:`min`.

        Examples
        --------
        >>> T = NormalizedMatrix.from_parts(
        ...     [np.array([[1.0], [2.0], [3.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])],
        ...     [None, np.array([0, 1, -1])], [[0], [1, 2]], (3, 3))
        >>> T.max(axis=1).tolist()
        [2.0, 4.0, 3.0]
        """
        result = (-self).min(axis=axis, keepdims=keepdims)
        result = -result
        if out is not None:
            out[...] = result
            return out
        return result

    def _min(self, axis):
        n, d = self._shape
        if n == 0 or d == 0:
            raise ValueError("zero-size array to reduction operation minimum which has no identity")
        if axis == 1:
            return self._row_min()
        col_min = self._column_min()
        return col_min if axis == 0 else col_min.min()

    def _column_min(self):
        """min down column j = min(min over parts of a_j·S_p[used rows, j] + b_j, b_j if NULLs)."""
        kernels, xp = self._kernels, self._kernels.xp
        a, b = self._full_scale(), self._full_shift()
        out = xp.full(self._shape[1], xp.inf)
        for part in self._parts:
            ind = part.indicator
            used = kernels.select_rows(part.source, ind.present() if ind.is_identity
                                       else ind.counts() > 0)
            if used.shape[0] == 0:
                continue
            low, high = kernels.column_min_max(used)
            scale, shift = a[part.cols], b[part.cols]
            out[part.cols] = xp.minimum(out[part.cols],
                                        xp.minimum(scale * low, scale * high) + shift)
        has_null = self._column_coverage() < self._shape[0]
        out[has_null] = xp.minimum(out[has_null], b[has_null])
        return out

    def _row_min(self):
        """min along row i = min over parts present in row i, and over its uncovered cells (b)."""
        kernels, xp = self._kernels, self._kernels.xp
        a, b = self._full_scale(), self._full_shift()
        n, d = self._shape
        out = xp.full(n, xp.inf)
        for part in self._parts:
            per_source_row = kernels.row_min(part.source, a[part.cols], b[part.cols])
            gathered = kernels.gather(per_source_row, part.indicator).copy()
            if part.indicator.n_absent:
                gathered[~part.indicator.present()] = xp.inf
            out = xp.minimum(out, gathered)
        inverse, uncovered = self._null_patterns()
        null_min = xp.asarray([float(b[c].min()) if c.size else np.inf for c in uncovered])
        return xp.minimum(out, null_min[inverse])

    def _null_patterns(self):
        """Rows grouped by which parts are present: (group of each row, NULL columns per group)."""
        kernels = self._kernels
        group, patterns = group_rows([kernels.asnumpy(part.indicator.present())
                                      for part in self._parts])
        uncovered = []
        for present in patterns:
            covered = np.zeros(self._shape[1], dtype=bool)
            for part, on in zip(self._parts, present):
                if on:
                    covered[part.cols] = True
            uncovered.append(kernels.xp.asarray(np.flatnonzero(~covered)))
        return kernels.xp.asarray(group), uncovered

    def _column_coverage(self):
        """How many target rows some part covers, per column (n where no cell is NULL)."""
        coverage = np.zeros(self._shape[1], dtype=np.int64)
        for part in self._parts:
            coverage[part.cols] += part.indicator.n_present
        return self._kernels.xp.asarray(coverage)

    # ------------------------------------------------------------------------------------------
    # Elementwise operations

    def _affine(self, scale, shift):
        """(T₀·diag(a) + 1·bᵀ)·c + e = T₀·diag(a·c) + 1·(b·c + e)ᵀ for per-column c and e."""
        xp = self._kernels.xp
        d = self._shape[1]
        a, b = self._full_scale(), self._full_shift()
        new_scale = xp.broadcast_to(a * scale, (d,)).copy()
        new_shift = xp.broadcast_to(b * scale + shift, (d,)).copy()
        return self._derive(scale=new_scale, shift=new_shift)

    def _map(self, f):
        """f(T) for an elementwise f(values, target columns), by the f(0)-correction rule.

        Push a, b into each source and keep f(S_p·a_p + b_p) − f(b_p) there; the rank-1 term
        1·f(b)ᵀ restores every cell, so a NULL cell (value b) becomes f(b) exactly as in the
        materialized table, and sparse sources stay sparse. Only columns where the value b occurs
        (NULL cells, sparse implicit zeros) need that term; the others keep f(S_p·a_p + b_p) as is,
        which avoids cancellation. A non-finite f(b_j) in NULL cells goes into a filler part.
        """
        kernels, xp = self._kernels, self._kernels.xp
        d = self._shape[1]
        a, b = self._full_scale(), self._full_shift()
        with np.errstate(all="ignore"):
            null_value = f(b, xp.arange(d))
        if null_value.dtype.kind != "f":
            raise TypeError(f"elementwise result has dtype {null_value.dtype}; a NormalizedMatrix "
                            "holds floating-point numbers (materialize first)")
        needed = self._needs_shift()
        finite = xp.isfinite(null_value)
        fillers = self._null_fillers(xp.flatnonzero(needed & ~finite), null_value)
        shift = xp.where(needed & finite, null_value, 0.0)

        def corrected(values, cols):
            return f(values, cols) - shift[cols]

        parts = []
        for part in self._parts:
            with np.errstate(all="ignore"):
                source = kernels.map_source(part.source, corrected, a[part.cols], b[part.cols],
                                            part.cols)
            parts.append(part.with_source(source, is_finite(source)))
        return self._derive(parts=tuple(parts) + fillers, scale=None, derived=True,
                            shift=shift if bool((shift != 0).any()) else None)

    def _needs_shift(self):
        """Columns where the value b occurs in some cell: NULL cells or sparse implicit zeros."""
        needed = self._column_coverage() < self._shape[0]
        for part in self._parts:
            if self._kernels.is_sparse(part.source):
                needed[part.cols] = True
        return needed

    def _null_fillers(self, columns, null_value):
        """Parts holding a non-finite f(b_j) in the NULL cells of columns j, which 1·f(b)ᵀ cannot.

        Columns covered by the same parts have the same NULL rows; each such group gets one part:
        a 1 × k source of f(b) taken by exactly the rows no covering part is present in. Implicit
        zeros of a sparse part would need f(b) too, which only a dense copy could hold: refused.
        """
        kernels, xp = self._kernels, self._kernels.xp
        columns = np.asarray(kernels.asnumpy(columns))
        if columns.size == 0:
            return ()
        covering = {}
        for j in columns.tolist():
            covering[j] = tuple(k for k, part in enumerate(self._parts) if j in part.cols)
            sparse = [self._parts[k].name for k in covering[j]
                      if kernels.is_sparse(self._parts[k].source)]
            if sparse:
                name = f" ({self._columns[j]!r})" if self._columns else ""
                raise ValueError(
                    f"the elementwise result is not finite on the zero cells of column {j}{name} "
                    f"(f(0) = {float(null_value[j])}), which sparse part {sparse[0]!r} stores "
                    "implicitly; the factorized form cannot hold it: materialize first")
        fillers = []
        for group in set(covering.values()):
            cols = np.array([j for j, g in covering.items() if g == group])
            present = xp.zeros(self._shape[0], dtype=bool)
            for k in group:
                present |= xp.asarray(self._parts[k].indicator.present())
            if bool(present.all()):
                continue
            rows = xp.where(present, -1, 0)
            source = null_value[xp.asarray(cols)][None, :]
            fillers.append(Part("null", source, Indicator(rows, 1, validate=False), cols,
                                finite=False))
        return tuple(fillers)

    def _operand_per_column(self, other):
        """``other`` as a scalar or a length-d vector over the columns of T, or NotImplemented."""
        if isinstance(other, NormalizedMatrix) or self._kernels.is_sparse(other):
            return NotImplemented
        return per_column_operand(other, self._shape[1], self.shape, self._transposed,
                                  self._kernels.xp)

    def _binary(self, ufunc, other, reflected=False):
        c = self._operand_per_column(other)
        if c is NotImplemented:
            return NotImplemented
        xp = self._kernels.xp
        finite = bool(xp.isfinite(xp.asarray(c)).all())
        if ufunc in _AFFINE_UFUNCS and finite:
            with np.errstate(all="ignore"):
                out = self._affine_binary(ufunc, c, reflected)
            # A non-finite a or b (1/c overflowing, a·c beyond the largest float) would give
            # 0·inf = NaN in cells the materialized table holds as 0 or inf, and finite a, b whose
            # cells a·s + b overflow would be multiplied in another order than the table's
            # (a·(s·x) finite where (a·s)·x is inf): such results take the elementwise rule
            # below, which evaluates every cell as the table does.
            if out is not None and bool(xp.isfinite(out._scale).all()) and \
                    bool(xp.isfinite(out._shift).all()) and \
                    not any(out._may_overflow(part) for part in out._parts):
                return out
        per_column = not isinstance(c, numbers.Number)

        def f(values, cols):
            other_values = c[cols] if per_column else c
            return ufunc(other_values, values) if reflected else ufunc(values, other_values)
        return self._map(f)

    def _affine_binary(self, ufunc, c, reflected):
        """T op c as an affine map of T, or None where op has no such form."""
        if ufunc is np.add:
            return self._affine(1.0, c)
        if ufunc is np.subtract:
            return self._affine(-1.0, c) if reflected else self._affine(1.0, -c)
        if ufunc is np.multiply:
            return self._affine(c, 0.0)
        xp = self._kernels.xp
        if not reflected and bool((xp.asarray(c) != 0).all()):
            return self._affine(1.0 / xp.asarray(c, dtype=np.float64), 0.0)
        return None

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        name = f"np.{ufunc.__name__}"
        if "out" in kwargs:
            raise TypeError(f"{name}(..., out=...) is not supported on a NormalizedMatrix: the "
                            "result is a new matrix (T.dot(X, out=...) writes a product into a "
                            "buffer)")
        if method != "__call__":
            raise TypeError(f"{name}.{method} is not supported on a NormalizedMatrix; use its "
                            "methods (sum, min, max, ...) or materialize first")
        if kwargs:
            raise TypeError(f"{name}: keyword arguments {sorted(kwargs)} are not supported on a "
                            "NormalizedMatrix")
        if ufunc is np.matmul:
            left, right = inputs
            return self.__matmul__(right) if left is self else self.__rmatmul__(left)
        if ufunc in _COMPARISONS or not self._float_result(ufunc, inputs):
            return self._on_table(ufunc, inputs)
        if ufunc.nin == 1:
            if ufunc is np.negative:
                return -self
            if ufunc is np.positive:
                return self
            return self._map(lambda values, cols: ufunc(values))
        if ufunc.nin == 2 and len(inputs) == 2:
            if inputs[0] is self:
                out = self._binary(ufunc, inputs[1])
            else:
                out = self._binary(ufunc, inputs[0], reflected=True)
            if out is not NotImplemented:
                return out
        others = ", ".join(type(x).__name__ for x in inputs if x is not self)
        raise TypeError(f"{name} of a NormalizedMatrix and {others or 'nothing else'} is not "
                        "supported: it combines elementwise with scalars and one value per "
                        "column; materialize first for other operands")

    def _float_result(self, ufunc, inputs):
        """Whether ufunc maps T's values to one real floating-point result (so that the
        elementwise rule applies), from one sample value; complex results are refused."""
        samples = []
        for x in inputs:
            if x is self:
                samples.append(np.ones(1, dtype=self.dtype))
            elif isinstance(x, NormalizedMatrix):
                samples.append(np.ones(1, dtype=x.dtype))
            elif isinstance(x, numbers.Number) or self._kernels.is_sparse(x):
                samples.append(x)
            else:
                try:
                    value = np.asarray(self._kernels.asnumpy(x))
                except (TypeError, ValueError):
                    return True  # not an operand: _binary refuses it
                samples.append(value.reshape(-1)[:1] if value.size else value)
        try:
            with np.errstate(all="ignore"):
                result = ufunc(*samples)
        except Exception:  # e.g. a sparse operand: the elementwise rule gives its own error
            return True
        if ufunc.nout != 1:
            return False
        kind = np.asarray(result).dtype.kind
        if kind == "c":
            raise complex_error(f"np.{ufunc.__name__}'s result")
        return kind == "f"

    def _on_table(self, ufunc, inputs):
        """ufunc on the materialized table: comparisons and results that are not real floats
        (np.isnan, np.signbit, np.frexp) are n × d arrays, as NumPy returns them."""
        tables = [x.toarray() if isinstance(x, NormalizedMatrix) else x for x in inputs]
        return ufunc(*tables)

    def _compare(self, op, other):
        if isinstance(other, NormalizedMatrix):
            other = other.toarray()
        return op(self.toarray(), other)

    def __eq__(self, other):
        return self._compare(operator.eq, other)

    def __ne__(self, other):
        return self._compare(operator.ne, other)

    def __lt__(self, other):
        return self._compare(operator.lt, other)

    def __le__(self, other):
        return self._compare(operator.le, other)

    def __gt__(self, other):
        return self._compare(operator.gt, other)

    def __ge__(self, other):
        return self._compare(operator.ge, other)

    # Equality is elementwise (as for NumPy arrays), but a matrix stays hashable by identity:
    # caches of its features are keyed on it.
    __hash__ = object.__hash__

    def __bool__(self):
        if self.size != 1:
            raise ValueError(f"The truth value of a NormalizedMatrix with {self.size} elements is "
                             "ambiguous (as for a NumPy array); use nm.toarray().any() or .all()")
        return bool(self.toarray().reshape(-1)[0])

    def __len__(self):
        return self.shape[0]

    def __neg__(self):
        return self._affine(-1.0, 0.0)

    def __pos__(self):
        return self

    def __abs__(self):
        return np.abs(self)

    # ------------------------------------------------------------------------------------------
    # Selection

    def __getitem__(self, key):
        """Row selection ``T[rows]`` (int array, slice, bool mask) and ``T[rows, cols]``.

        Rows: new index vectors, sources untouched (train/test splits, mini-batches). Columns:
        sources restricted to the kept columns. An integer on an axis drops it, as in NumPy.
        Index arrays may be lists or NumPy arrays of any integer dtype; an Ellipsis stands for
        the axes not given (``T[idx, ...]``, as scikit-learn's ``_safe_indexing`` passes).
        Two index arrays select cells pointwise, as in NumPy: ``T[[0, 1], [2, 0]]`` is the
        array ``[T[0, 2], T[1, 0]]`` (the arrays broadcast against each other).

        Parameters
        ----------
        key : index or tuple of up to two indices (one may be ``...``)

        Returns
        -------
        NormalizedMatrix, or a dense array where an integer drops an axis or two index arrays
        select cells

        Raises
        ------
        IndexError
            For out-of-range indices, a mask of the wrong length, too many indices or
            ``None`` (new axes).
        TypeError
            For indices that are neither integers, slices nor boolean masks.

        Examples
        --------
        >>> T = NormalizedMatrix.from_parts(
        ...     [np.array([[1.0], [2.0], [3.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])],
        ...     [None, np.array([0, 1, -1])], [[0], [1, 2]], (3, 3))
        >>> T[np.array([2, 0])].toarray().tolist()
        [[3.0, 0.0, 0.0], [1.0, 1.0, 2.0]]
        >>> T[1].tolist()
        [2.0, 3.0, 4.0]
        """
        key = _two_axes(key)
        row_key, col_key = key[::-1] if self._transposed else key
        n, d = self._shape
        if _is_array_index(row_key) and _is_array_index(col_key):
            return self._base()._cells(point_index(row_key, n, "row"),
                                       point_index(col_key, d, "column"))
        row_scalar, rows = _index(row_key, n, "row")
        col_scalar, cols = _index(col_key, d, "column")
        out = self._base()
        if rows is not None:
            out = out._select_rows(rows)
        if cols is not None:
            out = out._select_columns(cols)
        if self._transposed:
            out = out.T
        if row_scalar or col_scalar:
            dense = out.toarray()
            drop = (row_scalar, col_scalar)[::-1] if self._transposed else (row_scalar, col_scalar)
            return dense[tuple(0 if dropped else slice(None) for dropped in drop)]
        return out

    def _cells(self, rows, cols):
        """The cells (rows[k], cols[k]) of T, broadcast as NumPy does, each a·s + b (or b for a
        NULL cell) exactly as :meth:`materialize` computes it; only the cells asked for are
        read."""
        kernels, xp = self._kernels, self._kernels.xp
        try:
            rows, cols = np.broadcast_arrays(rows, cols)
        except ValueError:
            raise IndexError(f"shape mismatch: row index of shape {np.shape(rows)} and column "
                             f"index of shape {np.shape(cols)} cannot be broadcast together") \
                from None
        shape, r, c = rows.shape, rows.ravel(), cols.ravel()
        a, b = self._full_scale(), self._full_shift()
        out = xp.zeros(r.size, dtype=self.dtype)
        for part in self._parts:
            position = np.full(self._shape[1], -1)
            position[part.cols] = np.arange(part.cols.size)
            j = position[c]
            taken = np.asarray(kernels.asnumpy(part.indicator.index_vector()))[r]
            mine = np.flatnonzero((j >= 0) & (taken >= 0))
            if mine.size:
                values = part.source[xp.asarray(taken[mine]), xp.asarray(j[mine])]
                values = kernels.to_dense(values) if kernels.is_sparse(values) else values
                out[xp.asarray(mine)] = xp.asarray(values).reshape(-1)
        with np.errstate(all="ignore"):
            out = out * a[xp.asarray(c)] + b[xp.asarray(c)]
        return kernels.asnumpy(out).reshape(shape)

    def _select_rows(self, idx):
        """T[idx] = Σ_p I_p[idx] S_p M_pᵀ: take idx from every index vector (once per table)."""
        xp = self._kernels.xp
        idx = xp.asarray(idx)
        taken = {}
        for p in self._parts:
            taken.setdefault(id(p.indicator), p.indicator.take(idx))
        parts = [p.with_indicator(taken[id(p.indicator)]) for p in self._parts]
        return self._derive(parts=tuple(parts), shape=(int(idx.shape[0]), self._shape[1]))

    def _select_columns(self, keep):
        """T[:, keep]: each part keeps the source columns that land in kept columns."""
        d = self._shape[1]
        kernels = self._kernels
        new_positions = np.arange(keep.size)
        parts = []
        for part in self._parts:
            source_of = np.full(d, -1)
            source_of[part.cols] = np.arange(part.cols.size)
            taken = source_of[keep]
            mine = taken >= 0
            if mine.any():
                source = kernels.select_columns(part.source, taken[mine])
                parts.append(Part(part.name, source, part.indicator, new_positions[mine],
                                  part.finite))
        columns = None if self._columns is None else [self._columns[j] for j in keep]
        return self._derive(parts=tuple(parts), shape=(self._shape[0], keep.size),
                            scale=None if self._scale is None else self._scale[keep],
                            shift=None if self._shift is None else self._shift[keep],
                            columns=columns)

    # ------------------------------------------------------------------------------------------
    # Materialization

    @pool.operator
    def materialize(self):
        """The joined table: CSR when b = 0 and the table is mostly zeros, else a dense array.

        CSR whenever every source is sparse, or when its CSR form takes at most half the bytes
        of the dense one whatever the parts (a one-hot dimension beside numeric columns); the
        rule is :func:`ilargi.chooser.memory.layout`'s, which the plan chooser sizes plans with.

        Returns
        -------
        array or sparse matrix, of this view's shape

        Raises
        ------
        MemoryError
            If the table (at its peak while being built) needs more memory than is available,
            before anything is allocated (on the GPU: device memory).

        Examples
        --------
        >>> T = NormalizedMatrix.from_parts(
        ...     [np.array([[1.0], [2.0], [3.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])],
        ...     [None, np.array([0, 1, -1])], [[0], [1, 2]], (3, 3))
        >>> T.materialize().tolist()
        [[1.0, 1.0, 2.0], [2.0, 3.0, 4.0], [3.0, 0.0, 0.0]]
        """
        kernels = self._kernels
        n, d = self._shape
        b = self._shift
        planned = memory.layout(self)
        available = memory.available_bytes(self.device)
        if available is not None and planned.peak > available:
            raise MemoryError(
                f"materializing this {n} × {d} NormalizedMatrix needs a {planned.describe()}, "
                f"but only {memory.format_bytes(available)} is available on the {self.device}; "
                "use the factorized operators or plan='factorized', or select rows first")
        if planned.sparse:
            out = kernels.materialize_sparse(self._parts, n, d)
            if self._scale is not None:
                out = kernels.scale_columns(out, self._scale)
            return out.T.tocsr() if self._transposed else out
        out = kernels.materialize_dense(self._parts, n, d, self.dtype)
        if self._scale is not None:
            out *= self._scale
        if b is not None:
            out += b
        return out.T if self._transposed else out

    def toarray(self):
        """The joined table as a dense array (see :meth:`materialize`).

        Returns
        -------
        array of this view's shape
        """
        return self._kernels.to_dense(self.materialize())

    def __array__(self, dtype=None, copy=None):
        if copy is False:
            raise ValueError("a NormalizedMatrix holds no array to share: np.asarray(nm, "
                             "copy=False) cannot avoid materializing a new one")
        out = self._kernels.asnumpy(self.toarray())
        return out if dtype is None else out.astype(dtype)


def _two_axes(key):
    """An index as (row key, column key): Ellipsis expanded, a missing column key is ':'."""
    key = key if isinstance(key, tuple) else (key,)
    if any(k is None for k in key):
        raise IndexError("a NormalizedMatrix has 2 axes: None (np.newaxis) cannot add one; "
                         "materialize first")
    ellipses = [i for i, k in enumerate(key) if k is Ellipsis]
    if len(ellipses) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if len(key) - len(ellipses) > 2:
        raise IndexError(f"too many indices for a NormalizedMatrix: it has 2 axes, got "
                         f"{len(key) - len(ellipses)}")
    if ellipses:
        i = ellipses[0]
        key = key[:i] + (slice(None),) * (3 - len(key)) + key[i + 1:]
    return key + (slice(None),) * (2 - len(key))


def _is_array_index(key):
    """An index array (list, ndarray, ...) rather than a slice or a scalar."""
    return not isinstance(key, (slice, numbers.Integral, bool, np.bool_)) and np.ndim(key) > 0


def _index(key, length, axis):
    """(is_scalar, int index array or None for 'everything') for one axis of a selection."""
    if isinstance(key, (bool, np.bool_)):
        raise IndexError(f"a boolean scalar is not a {axis} index (NumPy would add an axis); "
                         "use a boolean mask of the axis' length")
    if isinstance(key, slice):
        return False, (None if key == slice(None) else np.arange(length)[key])
    if np.ndim(key) == 0 and hasattr(key, "dtype") and key.dtype.kind in "iu":
        key = int(key)  # a 0-d integer array indexes like an integer
    if isinstance(key, numbers.Integral):
        key = [key]
        scalar = True
    else:
        scalar = False
    xp = np
    if type(key).__module__.startswith("cupy"):
        import cupy as xp  # lazy: CuPy is optional, and a CuPy key means it is loaded
    idx = xp.asarray(key)
    if idx.dtype == bool:
        if idx.shape != (length,):
            raise IndexError(f"boolean {axis} mask has shape {idx.shape}, expected ({length},)")
        return False, xp.flatnonzero(idx)
    if idx.size == 0:
        return scalar, idx.astype(np.intp)
    if idx.dtype.kind not in "iu":
        raise TypeError(f"{axis} index must be integers, a slice or a boolean mask, "
                        f"got dtype {idx.dtype}")
    if idx.ndim != 1:
        raise IndexError(f"{axis} index must be 1-D, got shape {idx.shape}")
    low, high = int(idx.min()), int(idx.max())
    if low < -length or high >= length:
        raise IndexError(f"{axis} index {low if low < -length else high} is out of bounds for "
                         f"{length} {axis}s")
    idx = idx.astype(np.intp)  # before wrapping: idx + length must not overflow a small dtype
    return scalar, xp.where(idx < 0, idx + length, idx)
