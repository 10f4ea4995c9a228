"""NormalizedMatrix: the virtual joined table T = (Σ_p I_p S_p M_pᵀ)·diag(a) + 1·bᵀ.

T is never built unless asked (:meth:`NormalizedMatrix.materialize`). Linear algebra on T is
rewritten into work on the sources by the rules of :mod:`ilargi.rewriter.rules`. This module holds
the class itself: construction, metadata and persistence, the affine state (a, b), the transpose
flag, the device and materialization. Its operators come from one mixin module per kind, each rule
next to its formula: :mod:`~ilargi.rewriter.products`, :mod:`~ilargi.rewriter.reductions`,
:mod:`~ilargi.rewriter.elementwise` and :mod:`~ilargi.rewriter.selection`; the training passes
that take the matrix are functions of :mod:`~ilargi.rewriter.training`. Every result equals the
one computed on the materialized table.
"""

from __future__ import annotations

import copy
import os
from typing import Any, Sequence

import numpy as np

from ilargi.backend import backend_for_device, backend_of
from ilargi.backend.contract import Array, Source
from ilargi.chooser import memory
from ilargi.metadata import Indicator, Metadata, Part, make_parts
from ilargi.metadata.indicator import read_only
from ilargi.metadata.parts import referenced

from . import pool
from .elementwise import ElementwiseMixin
from .operators import BinaryOperators, complex_error
from .products import ProductsMixin
from .reductions import ReductionsMixin
from .selection import SelectionMixin


class NormalizedMatrix(
    ProductsMixin, ReductionsMixin, ElementwiseMixin, SelectionMixin, BinaryOperators
):
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

    def __init__(
        self,
        parts: Sequence[Part],
        shape: Sequence[int],
        *,
        scale: Array | None = None,
        shift: Array | None = None,
        columns: Sequence[str] | None = None,
        transposed: bool = False,
    ) -> None:
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
    def from_parts(
        cls,
        sources: Sequence[Source],
        rows: Sequence[Any],
        cols: Sequence[Any],
        shape: Sequence[int],
        columns: Sequence[str] | None = None,
        names: Sequence[str] | None = None,
        allow_nonfinite: bool = False,
        copy: bool = True,
    ) -> NormalizedMatrix:
        """Build T from its parts, validating every input.

        A source at most half of whose rows T uses (a dimension far taller than the rows joined to
        it) is kept as those rows, once here: every operator then passes over the rows in use
        instead of the whole source. ``parts`` shows the sources as kept; :attr:`metadata` and
        :meth:`save` without sources record the index vectors into the sources as given, so they
        reload with them.

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
    def from_trusted_parts(
        cls,
        parts: Sequence[Part],
        shape: Sequence[int],
        *,
        scale: Array | None = None,
        shift: Array | None = None,
        columns: Sequence[str] | None = None,
        derived: bool = False,
    ) -> NormalizedMatrix:
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
    def from_metadata(
        cls, metadata: Metadata, sources: Sequence[Source], allow_nonfinite: bool = False
    ) -> NormalizedMatrix:
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
            raise ValueError(
                "this metadata describes sources transformed by an elementwise "
                "function; load it with the sources saved beside it "
                "(NormalizedMatrix.load(folder)), not with raw sources"
            )
        return cls._from_stored(metadata, sources, allow_nonfinite)

    @classmethod
    def _from_stored(cls, metadata, sources, allow_nonfinite=False):
        for name, expected, source in zip(metadata.names, metadata.source_shapes, sources):
            if tuple(source.shape) != tuple(expected):
                raise ValueError(
                    f"source for part {name!r} has shape {tuple(source.shape)}, "
                    f"the metadata expects {tuple(expected)}"
                )
        flags = metadata.extra
        nm = cls.from_parts(
            sources,
            metadata.rows,
            metadata.cols,
            metadata.shape,
            metadata.columns,
            metadata.names,
            allow_nonfinite or flags.get("nonfinite", False),
        )
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
            raise ValueError(
                f"metadata {name} must be {self._shape[1]} real numbers (one per "
                f"column), got dtype {values.dtype} and shape {values.shape}"
            )
        if not bool(xp.isfinite(values).all()):
            raise ValueError(f"metadata {name} holds NaN or inf")
        return values.astype(np.result_type(values.dtype, np.float32), copy=True)

    @property
    def metadata(self) -> Metadata:
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

        A source cut to the rows the table uses (see :meth:`from_parts`) is recorded as given:

        >>> T = NormalizedMatrix.from_parts(
        ...     [np.ones((2, 1)), np.arange(8.0).reshape(4, 2)], [None, np.array([3, 3])],
        ...     [[0], [1, 2]], (2, 3))
        >>> T.parts[1].source.shape, T.metadata.source_shapes[1], T.metadata.rows[1].tolist()
        ((1, 2), (4, 2), [3, 3])
        """
        return self._metadata(given=True)

    def _metadata(self, given):
        """The metadata in the terms of the user's sources (``given``) or of the sources held."""
        affine = self._scale is not None or self._shift is not None
        views = [
            p.given() if given else (p.indicator.rows, p.indicator.n_source) for p in self._parts
        ]
        return Metadata(
            self._shape,
            [p.name for p in self._parts],
            [(n_source, p.source.shape[1]) for p, (_, n_source) in zip(self._parts, views)],
            [None if rows is None else read_only(rows) for rows, _ in views],
            [p.cols for p in self._parts],
            self._columns,
            self._full_scale() if affine else None,
            self._full_shift() if affine else None,
            self._flags(),
        )

    def _flags(self):
        """Facts about T that the metadata must carry for a faithful reload."""
        flags = {
            "transposed": self._transposed,
            "derived": self._derived,
            "nonfinite": not all(p.finite for p in self._parts),
        }
        return {key: True for key, value in flags.items() if value}

    def save(self, folder: str | os.PathLike[str], sources: bool = False) -> None:
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
            raise ValueError(
                "this matrix holds sources transformed by an elementwise function; "
                "save it with sources=True, or save the matrix it was derived from"
            )
        if sources:  # the sources as held, with the index vectors into them
            self._metadata(given=False).save(folder, [p.source for p in self._parts])
        else:
            self.metadata.save(folder)

    @classmethod
    def load(
        cls, folder: str | os.PathLike[str], sources: Sequence[Source] | None = None
    ) -> NormalizedMatrix:
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
    def shape(self) -> tuple[int, int]:
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
    def ndim(self) -> int:
        """Always 2."""
        return 2

    @property
    def size(self) -> int:
        """Cells of T: n·d."""
        return self._shape[0] * self._shape[1]

    @property
    def dtype(self) -> np.dtype:
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
    def nnz(self) -> int:
        """Stored non-zeros of the sources as kept (not of the joined table; see :meth:`from_parts`).

        Examples
        --------
        >>> T = NormalizedMatrix.from_parts(
        ...     [np.array([[1.0], [2.0], [3.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])],
        ...     [None, np.array([0, 1, -1])], [[0], [1, 2]], (3, 3))
        >>> T.nnz
        7
        """
        kernels = self._kernels
        return sum(
            int(p.source.nnz)
            if kernels.is_sparse(p.source)
            else int(kernels.xp.count_nonzero(p.source))
            for p in self._parts
        )

    @property
    def T(self) -> NormalizedMatrix:
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
    def transposed(self) -> bool:
        """True for a transposed view (T.T): operators then read T through the transpose rules."""
        return self._transposed

    @property
    def parts(self) -> tuple[Part, ...]:
        """The parts of T₀ (name, source, indicator, cols); the affine state is ``scale``/``shift``."""
        return self._parts

    @property
    def columns(self) -> list[str] | None:
        """Names of the columns of T (not of T.T), or None."""
        return None if self._columns is None else list(self._columns)

    @property
    def scale(self) -> Array:
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
    def shift(self) -> Array:
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
    def affine(self) -> tuple[Array | None, Array | None]:
        """(scale, shift) as stored: None where T has no scale (all ones) or no shift (all zeros),
        so a copy of T (a partition's rows) keeps the same arithmetic."""
        return self._scale, self._shift

    @property
    def derived(self) -> bool:
        """Whether the sources hold values computed by an elementwise function (``np.log(T)``):
        metadata alone then no longer fits the user's raw sources."""
        return self._derived

    def to_dask(self, chunks: int | Sequence[int], *, persist: bool = True) -> Any:
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
    def device(self) -> str:
        """Where the sources live: 'cpu' (NumPy/SciPy) or 'gpu' (CuPy)."""
        return self._kernels.name

    def to(self, device: str) -> NormalizedMatrix:
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
                moved[id(ind)] = Indicator(
                    None if ind.is_identity else move(ind.rows),
                    ind.n_source,
                    ind.n_rows,
                    validate=False,
                )
            return moved[id(ind)]

        parts = tuple(
            Part(
                p.name,
                target.move_source(p.source),
                indicator(p.indicator),
                p.cols,
                p.finite,
                p.origin,
            )
            for p in self._parts
        )
        return self._derive(
            parts=parts,
            scale=None if self._scale is None else move(self._scale),
            shift=None if self._shift is None else move(self._shift),
        )

    def nonfinite(self) -> tuple[bool, bool]:
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
        used = (
            part.source if ind.is_identity else kernels.select_rows(part.source, ind.counts() > 0)
        )
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

    def __repr__(self) -> str:
        kinds = ", ".join(
            f"{p.name}: {p.source.shape[0]}×{p.source.shape[1]}"
            f"{' sparse' if self._kernels.is_sparse(p.source) else ''}"
            for p in self._parts
        )
        flag = ", transposed" if self._transposed else ""
        return f"<NormalizedMatrix {self.shape[0]}×{self.shape[1]} [{kinds}]{flag}>"

    # ------------------------------------------------------------------------------------------
    # Materialization

    @pool.operator
    def materialize(self) -> Source:
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
                "use the factorized operators or plan='factorized', or select rows first"
            )
        if planned.sparse:
            parts = [referenced(part, n) for part in self._parts]
            out = kernels.materialize_sparse(parts, n, d)
            if self._scale is not None:
                out = kernels.scale_columns(out, self._scale)
            return out.T.tocsr() if self._transposed else out
        out = kernels.materialize_dense(self._parts, n, d, self.dtype)
        if self._scale is not None:
            out *= self._scale
        if b is not None:
            out += b
        return out.T if self._transposed else out

    def toarray(self) -> Array:
        """The joined table as a dense array (see :meth:`materialize`).

        Returns
        -------
        array of this view's shape
        """
        return self._kernels.to_dense(self.materialize())

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if copy is False:
            raise ValueError(
                "a NormalizedMatrix holds no array to share: np.asarray(nm, "
                "copy=False) cannot avoid materializing a new one"
            )
        out = self._kernels.asnumpy(self.toarray())
        return out if dtype is None else out.astype(dtype)
