"""DaskNormalizedMatrix: the joined table T split by target rows over Dask workers.

Each partition is an in-memory :class:`~ilargi.rewriter.NormalizedMatrix` of some target rows, built
on a worker from its :class:`~.pieces.Piece` (fact rows, index vectors) and the dimension sources,
which are placed on every worker once (:class:`~.graph.Shared`). The rewrite rules then split by
rows as well:

* T·X, row sums, row moments: one task per partition, a row-chunked Dask array (lazy);
* Tᵀ·Y, column sums, moments, crossprod, gramvec, the fused loss + gradient, k-means' clusters:
  one task per partition and a tree reduction of its d-sized partials (computed, in memory);
* affine and elementwise operations, column and row selections: recorded, applied by every task.

Nothing n × d is ever gathered on the client: :meth:`materialize` and ``np.asarray`` refuse beyond a
size (:class:`GatherRefused`); :meth:`compute` returns the in-memory matrix on purpose.
"""

import numbers
import uuid
from functools import partial
from weakref import WeakKeyDictionary

import dask
import dask.array as da
import numpy as np
from dask import delayed

from ilargi.rewriter.operators import BinaryOperators, per_column_operand, point_index

from . import graph, links, tasks
from .pieces import assemble, take, take_mask
from .reductions import DaskReductions

# materialize(), toarray() and np.asarray() gather at most this many bytes on the client.
MAX_GATHER_BYTES = 2**28


# A fit's labels and weights placed beside the partitions (DaskNormalizedMatrix._placed), per
# owner: they live as long as the fit's link
_PLACED: WeakKeyDictionary = WeakKeyDictionary()


class _Placed:
    """The persisted blocks of a row-aligned array, block k beside partition k."""

    def __init__(self, blocks):
        self.blocks = list(blocks)


class _Once:
    """The owner of operands placed for one pass."""


class GatherRefused(ValueError):
    """An operation on a Dask-backed matrix would gather the whole table on the client."""


def _name(prefix, *parts):
    return f"ilargi-{prefix}-{dask.base.tokenize(*parts)}"


class DaskNormalizedMatrix(DaskReductions, BinaryOperators):
    """A NormalizedMatrix whose target rows are split into partitions on Dask.

    Made by :meth:`ilargi.NormalizedMatrix.to_dask` or by ``Table.to_matrix(..., chunks=...)`` on a
    table read with ``Table.from_parquet(..., chunks=...)``. It offers the operators the estimators
    use, with the same results as the in-memory matrix: ``T @ X`` and ``T.sum(axis=1)`` are
    row-chunked Dask arrays, ``T.T @ Y``, ``T.sum(axis=0)``, ``mean``/``var``/``std``/``min``/``max``,
    ``sum_of_squares``, ``crossprod``, ``gramvec``, ``loss_gradient`` and ``assign`` are computed by
    one distributed pass and a tree reduction; arithmetic, NumPy ufuncs and ``T[rows, cols]``
    stay lazy. Computations run on the current ``distributed.Client``, or on Dask's default
    scheduler without one.

    Attributes
    ----------
    shape : tuple of int
    chunks : tuple of tuple of int
        Dask's notation: ``((rows of each partition), (d,))``.
    npartitions : int
    columns : list of str or None
    """

    __array_priority__ = 1000

    def __init__(
        self,
        layout,
        dims,
        sources,
        chunks,
        *,
        ops=(),
        d=None,
        columns=None,
        dtype=np.float64,
        transposed=False,
        built=None,
        nonfinite=None,
        token=None,
        origin=None,
    ):
        self._layout, self._dims, self._sources = layout, dims, list(sources)
        self._chunks = tuple(int(c) for c in chunks)
        self._ops = tuple(ops)
        self._d = layout.d if d is None else int(d)
        self._columns = layout.columns if columns is None and not ops else columns
        self._dtype = np.dtype(dtype)
        self._transposed = bool(transposed)
        # (partition matrices, how many of the ops they include, whether they are persisted)
        self._built = built
        self._nonfinite = nonfinite
        self._token = token or uuid.uuid4().hex
        self._origin = origin  # what made it, for repr

    # ------------------------------------------------------------------------------------------
    # Description

    @property
    def shape(self):
        n, d = sum(self._chunks), self._d
        return (d, n) if self._transposed else (n, d)

    @property
    def ndim(self):
        return 2

    @property
    def size(self):
        return sum(self._chunks) * self._d

    @property
    def dtype(self):
        return self._dtype

    @property
    def chunks(self):
        rows, cols = self._chunks, (self._d,)
        return (cols, rows) if self._transposed else (rows, cols)

    @property
    def npartitions(self):
        return len(self._chunks)

    @property
    def columns(self):
        return None if self._columns is None else list(self._columns)

    @property
    def transposed(self):
        return self._transposed

    @property
    def T(self):
        return self._derive(transposed=not self._transposed)

    @property
    def backend(self):
        """What the estimators' ``kernels(X)`` gives: NumPy for small results, links that keep
        labels and weights on the workers (:mod:`ilargi.scaleout.links`)."""
        return links

    @property
    def persisted(self):
        """Whether the partitions' matrices are kept in the workers' memory."""
        return self._built is not None and self._built[2]

    def __len__(self):
        return self.shape[0]

    def __repr__(self):
        flag = ", transposed" if self._transposed else ""
        state = ", persisted" if self.persisted else ""
        return (
            f"<DaskNormalizedMatrix {self.shape[0]}×{self.shape[1]}, {self.npartitions} "
            f"partitions{state}{flag}>"
        )

    def _derive(self, **changes):
        fields = dict(
            layout=self._layout,
            dims=self._dims,
            sources=self._sources,
            chunks=self._chunks,
            ops=self._ops,
            d=self._d,
            columns=self._columns,
            dtype=self._dtype,
            transposed=self._transposed,
            built=self._built,
            nonfinite=self._nonfinite,
            token=self._token,
            origin=self._origin,
        )
        fields.update(changes)
        return DaskNormalizedMatrix(**fields)

    # ------------------------------------------------------------------------------------------
    # Partitions

    def _offsets(self):
        return np.concatenate([[0], np.cumsum(self._chunks)]).astype(np.int64)

    def _partitions(self):
        """One delayed in-memory matrix per partition (untransposed), with every operation."""
        if self._built is not None:
            built, applied, _ = self._built
            rest = self._ops[applied:]
            if not rest:
                return list(built)
            token = uuid.uuid4().hex
            return [
                delayed(tasks.apply_ops, pure=False)(
                    nm, rest, dask_key_name=f"ilargi-ops-{token}-{k}"
                )
                for k, nm in enumerate(built)
            ]
        dims, token = self._dims.ref(), uuid.uuid4().hex
        return [
            delayed(tasks.build_partition, pure=False)(
                source, dims, self._layout, self._ops, dask_key_name=f"ilargi-build-{token}-{k}"
            )
            for k, source in enumerate(self._sources)
        ]

    def persist(self):
        """This matrix with every partition's matrix built once and kept in the workers' memory
        (with the structures its kernels cache), for iterative fits whose data fit the workers.

        Returns
        -------
        DaskNormalizedMatrix
        """
        if self.persisted and self._built[1] == len(self._ops):
            return self
        built = graph.persist(self._partitions())
        return self._derive(built=(built, len(self._ops), True))

    def compute(self):
        """The in-memory NormalizedMatrix of all rows (gathers every partition on the client).

        Returns
        -------
        ilargi.NormalizedMatrix
        """
        pieces = graph.compute(*self._sources)
        nm = assemble(pieces, self._dims.value, self._layout, self._ops)
        return nm.T if self._transposed else nm

    def _base(self):
        return self.T if self._transposed else self

    # ------------------------------------------------------------------------------------------
    # Row-aligned operands

    def align(self, values, what="values"):
        """``values`` (n or n × m, NumPy or Dask) as a Dask array chunked like this matrix's rows
        (a NumPy array is placed on the workers once).

        Parameters
        ----------
        values : array-like or dask.array.Array
            One value (or row of values) per target row.
        what : str
            How error messages name it.

        Returns
        -------
        dask.array.Array

        Raises
        ------
        ValueError
            If its length differs from the matrix's rows, its chunks are unknown, or it has
            more than two dimensions.
        """
        n = sum(self._chunks)
        if isinstance(values, da.Array):
            if values.ndim not in (1, 2):
                raise ValueError(f"{what} must be 1-D or 2-D, got shape {values.shape}")
            if any(np.isnan(c) for c in values.chunks[0]):
                raise ValueError(
                    f"{what} has unknown chunk sizes; call compute_chunk_sizes() on it first"
                )
            if values.shape[0] != n:
                raise ValueError(f"{what} has {values.shape[0]} rows, the matrix has {n}")
            target = (self._chunks,) + ((-1,) if values.ndim == 2 else ())
            if values.chunks[0] != self._chunks or (values.ndim == 2 and len(values.chunks[1]) > 1):
                values = values.rechunk(target)
            return values
        values = np.asarray(values)
        if values.ndim not in (1, 2):
            raise ValueError(f"{what} must be 1-D or 2-D, got shape {values.shape}")
        if values.shape[0] != n:
            raise ValueError(f"{what} has {values.shape[0]} rows, the matrix has {n}")
        array = da.from_array(
            values,
            chunks=(self._chunks,) + values.shape[1:],
            name=f"ilargi-operand-{uuid.uuid4().hex}",
        )
        return array.persist() if graph.current_client() is not None else array

    @staticmethod
    def _blocks(array):
        """The delayed row blocks of a row-chunked Dask array (its columns in one chunk)."""
        if array is None:
            return None
        blocks = array.to_delayed(
            optimize_graph=False
        )  # keeps the futures of a persisted array alive
        return list(blocks.reshape(blocks.shape[0], -1)[:, 0])

    def _aligned_blocks(self, values, what):
        return None if values is None else self._blocks(self.align(values, what))

    def _rows(self, per_partition, tail, dtype, prefix):
        """A row-chunked Dask array from one delayed block per partition."""
        arrays = [
            da.from_delayed(
                block,
                shape=(n,) + tuple(tail),
                dtype=dtype,
                name=_name(prefix + "-block", block.key),
            )
            for block, n in zip(per_partition, self._chunks)
        ]
        return da.concatenate(arrays, axis=0) if len(arrays) > 1 else arrays[0]

    def _placed(self, owner, array):
        """A row-aligned Dask array's blocks, each persisted on the worker holding the matching
        persisted partition, once per ``owner`` (a fit's link): an iterative pass then finds its
        labels and weights beside its partition and moves only its d-sized partial. Without a
        client or persisted partitions, the array itself.

        The placement is loose: after a failure a block is computed again wherever its
        partition went (its lineage is the array's)."""
        client = graph.current_client()
        if array is None or client is None or not self.persisted:
            return array
        try:
            cache = _PLACED.setdefault(owner, {})
        except TypeError:  # an owner without weak references: no cache, no placement
            return array
        built = self._built[0]
        key = (array.name, id(built))
        if key not in cache:
            from distributed import wait

            wait(built)
            who = client.who_has(built)
            token = uuid.uuid4().hex
            blocks = []
            for k, (block, part) in enumerate(zip(self._blocks(array), built)):
                workers = list(who.get(part.key, ()))
                with dask.annotate(workers=workers or None, allow_other_workers=True):
                    blocks.append(
                        delayed(tasks.identity, pure=False)(
                            block, dask_key_name=f"ilargi-placed-{token}-{k}"
                        )
                    )
            cache[key] = _Placed(graph.persist(blocks))
        return cache[key]

    def _map(self, func, *args, aligned=(), prefix="map"):
        """func(partition matrix, *args, *chunks of aligned arrays) per partition (delayed)."""
        blocks = [
            None if a is None else a.blocks if isinstance(a, _Placed) else self._blocks(a)
            for a in aligned
        ]
        # A fresh key per computation: a key submitted again while the scheduler still forgets
        # its previous run can be cancelled ("already forgotten")
        token = uuid.uuid4().hex
        out = []
        if self._built is None:  # each partition's matrix built inside the task that uses it
            dims = self._dims.ref()
            for k, source in enumerate(self._sources):
                extra = [None if b is None else b[k] for b in blocks]
                out.append(
                    delayed(tasks.on_piece, pure=False)(
                        func,
                        source,
                        dims,
                        self._layout,
                        self._ops,
                        *args,
                        *extra,
                        dask_key_name=f"ilargi-{prefix}-{token}-{k}",
                    )
                )
            return out
        for k, nm in enumerate(self._partitions()):
            extra = [None if b is None else b[k] for b in blocks]
            out.append(
                delayed(func, pure=False)(
                    nm, *args, *extra, dask_key_name=f"ilargi-{prefix}-{token}-{k}"
                )
            )
        return out

    def _reduce(self, func, *args, aligned=(), combine=tasks.add, prefix="reduce"):
        """The tree-combined partials of func over the partitions, computed."""
        partials = self._map(func, *args, aligned=aligned, prefix=prefix)
        return graph.compute(graph.tree(partials, combine))[0]

    # ------------------------------------------------------------------------------------------
    # Products

    def _operand(self, X, what, length):
        if isinstance(X, DaskNormalizedMatrix) or hasattr(X, "gramvec"):
            raise TypeError("a product of two normalized matrices is not supported")
        if isinstance(X, da.Array):
            X = X.compute() if X.shape[0] == length and X.size * 8 <= MAX_GATHER_BYTES else X
        X = np.asarray(X)
        if X.dtype.kind == "c":
            raise TypeError(f"{what} is complex; a NormalizedMatrix holds real numbers")
        if X.dtype.kind not in "biuf":
            raise TypeError(f"{what} must hold numbers, got dtype {X.dtype}")
        if X.ndim not in (1, 2):
            raise ValueError(f"{what} must be 1-D or 2-D, got shape {X.shape}")
        if X.shape[0] != length:
            raise ValueError(
                f"matmul: inner dimensions differ: {what} has {X.shape[0]} rows, expected {length}"
            )
        return X.astype(np.result_type(self._dtype, X.dtype, np.float32), copy=False)

    def __matmul__(self, X):
        """T·X (row-chunked Dask array) or, on the transposed view, Tᵀ·Y (computed)."""
        if self._transposed:
            return self._base()._tmm(X)
        return self._lmm(X)

    def __rmatmul__(self, X):
        """X·T = (Tᵀ·Xᵀ)ᵀ (computed), or X·Tᵀ = (T·Xᵀ)ᵀ (lazy) on the transposed view."""
        if self._transposed:
            X = np.asarray(X)
            return (self._base()._lmm(X.T)).T
        if isinstance(X, da.Array):
            return self._tmm(X.T).T
        X = np.asarray(X)
        out = self._tmm(X.T)
        return out.T if X.ndim == 2 else out

    def dot(self, X, out=None):
        """T·X as :meth:`__matmul__`; ``out`` is refused (the result is a Dask array)."""
        if out is not None:
            raise TypeError(
                "a DaskNormalizedMatrix cannot write into out=: T·X is a row-chunked Dask array"
            )
        return self @ X

    def _lmm(self, X):
        X = self._operand(X, "right operand of @", self._d)
        dtype = np.result_type(self._dtype, X.dtype)
        blocks = self._map(tasks.lmm, X, prefix="lmm")
        return self._rows(blocks, X.shape[1:], dtype, "lmm")

    def _tmm(self, Y):
        Y = self.align(Y, "left operand of Tᵀ·Y")
        return self._reduce(tasks.tmm, aligned=(Y,), prefix="tmm")

    def matvec(self, x):
        return self @ x

    def rmatvec(self, y):
        return self.T @ y

    # ------------------------------------------------------------------------------------------
    # Reductions

    def _untransposed(self, what):
        if self._transposed:
            raise ValueError(f"{what} works on T, not on a transposed view; use T.T")

    def crossprod(self, w=None):
        """Tᵀ·diag(w)·T (d × d): per-partition Gram matrices, summed."""
        if self._transposed:
            raise GatherRefused("T·Tᵀ of a Dask matrix is n × n; it is not supported")
        return self._reduce(
            tasks.crossprod, aligned=(self._align_optional(w, "w"),), prefix="crossprod"
        )

    def _align_optional(self, values, what):
        return None if values is None else self.align(values, what)

    def gramvec(self, y, v=None, alpha=1.0, beta=0.0, z=None):
        """α·Tᵀ(v ⊙ (T·y)) + β·z: each partition's fused pass, summed."""
        self._untransposed("gramvec")
        y = self._operand(y, "y of gramvec", self._d)
        out = self._reduce(
            tasks.gramvec,
            y,
            float(alpha),
            aligned=(self._align_optional(v, "v of gramvec"),),
            prefix="gramvec",
        )
        if z is not None and beta != 0.0:
            out = out + beta * np.asarray(z)
        return out

    def loss_gradient(self, coef, intercept, link):
        """(Σ loss, Tᵀ·r, Σ r) of a link at T·coef + intercept: one fused pass per partition
        (the in-memory matrix's :func:`~ilargi.rewriter.training.loss_gradient`), one reduction.

        ``link`` holds the labels and weights (NumPy or Dask, row-aligned): a
        :mod:`ilargi.scaleout.links` link, or an in-memory one."""
        self._untransposed("loss_gradient")
        coef = self._operand(coef, "coef of loss_gradient", self._d)
        kind = link.kind
        labels = link.y if kind == "logistic" else link.labels
        classes = None if kind == "logistic" else int(link.n_classes)
        intercept = np.asarray(intercept, dtype=np.float64)
        intercept = float(intercept) if intercept.ndim == 0 else intercept
        loss, grad, total = self._reduce(
            tasks.loss_gradient,
            coef,
            intercept,
            kind,
            classes,
            aligned=(
                self._placed(link, self.align(labels, "labels")),
                self._placed(link, self._align_optional(link.sw, "sample weights")),
            ),
            prefix="loss",
        )
        return float(loss), grad, total

    def assign(self, centers, x_sq, rounding):
        """Lloyd's assignment per partition and the clusters' totals in one pass: labels and
        closest distances stay on the workers (persisted, row-chunked Dask arrays), counts and
        sums are reduced."""
        self._untransposed("assign")
        centers = self._operand(centers, "centers of assign", centers.shape[0])
        if centers.ndim != 2 or centers.shape[1] != self._d:
            raise ValueError(f"assign: centers must have shape (k, {self._d}), got {centers.shape}")
        results = graph.persist(
            self._map(
                tasks.assign,
                centers,
                float(rounding),
                aligned=(self.align(x_sq, "x_sq"),),
                prefix="assign",
            )
        )
        totals = [delayed(tasks.assign_totals, pure=True)(r) for r in results]
        _, counts, sums = graph.compute(graph.tree(totals, tasks.add))[0]
        labels = self._rows(
            [delayed(tasks.item, pure=True)(r, 0) for r in results], (), np.intp, "labels"
        )
        closest = self._rows(
            [delayed(tasks.item, pure=True)(r, 1) for r in results], (), np.float64, "closest"
        )
        return labels, closest, counts, sums

    def normal_equations(self, Y, sw=None, gram=True):
        """The least-squares statistics in one pass: (TᵀSTs or None, TᵀSY, TᵀS1, Σs, ΣsY).

        Parameters
        ----------
        Y : array or dask.array.Array, n × m
        sw : array or dask.array.Array of length n, optional
        gram : bool
            Whether to compute TᵀST (d × d).
        """
        self._untransposed("normal_equations")
        once = _Once()  # y and the weights beside the partitions, for this pass
        return self._reduce(
            tasks.normal_equations,
            bool(gram),
            aligned=(
                self._placed(once, self.align(Y, "y")),
                self._placed(once, self._align_optional(sw, "sample weights")),
            ),
            prefix="normal",
        )

    # ------------------------------------------------------------------------------------------
    # Elementwise operations: recorded, applied by every task to its partition's matrix

    def _per_column(self, other):
        if isinstance(other, (DaskNormalizedMatrix, da.Array)) or hasattr(other, "gramvec"):
            return NotImplemented
        return per_column_operand(other, self._d, self.shape, self._transposed)

    def _with_op(self, op, dtype=None, d=None, columns=None, keep_finite=False):
        return self._derive(
            ops=self._ops + (op,),
            token=uuid.uuid4().hex,
            dtype=self._dtype if dtype is None else dtype,
            d=self._d if d is None else d,
            columns=self._columns if columns is None and d is None else columns,
            nonfinite=self._nonfinite if keep_finite else None,
        )

    def _binary(self, ufunc, other, reflected=False):
        c = self._per_column(other)
        if c is NotImplemented:
            return NotImplemented
        dtype = np.result_type(self._dtype, np.asarray(c).dtype, np.float32)
        if not np.issubdtype(dtype, np.floating):
            dtype = np.dtype(np.float64)
        return self._with_op(
            partial(_binary_op, ufunc=ufunc, other=c, reflected=reflected), dtype=dtype
        )

    def __neg__(self):
        return self._with_op(partial(_unary_op, ufunc=np.negative), keep_finite=True)

    def __pos__(self):
        return self

    def __abs__(self):
        return self._with_op(partial(_unary_op, ufunc=np.absolute), keep_finite=True)

    # ufunc.reduce of the reductions the matrix has (np.ptp, np.add.reduce(D, axis=0), ...)
    _REDUCE = {"add": "sum", "maximum": "max", "minimum": "min"}

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        name = f"np.{ufunc.__name__}"
        if method == "reduce" and ufunc.__name__ in self._REDUCE and inputs and inputs[0] is self:
            return self._ufunc_reduce(self._REDUCE[ufunc.__name__], name, **kwargs)
        if method != "__call__" or kwargs:
            raise TypeError(
                f"{name}.{method} with {sorted(kwargs)} is not supported on a "
                "DaskNormalizedMatrix; use its methods sum, mean, var, std, min and "
                "max (axis=, dtype=, out=, keepdims=), or to_dask_array() for the "
                "materialized table as a Dask array"
            )
        if ufunc is np.matmul:
            left, right = inputs
            return self.__matmul__(right) if left is self else self.__rmatmul__(left)
        sample = [np.ones(1) if x is self else x for x in inputs]
        try:
            with np.errstate(all="ignore"):
                kind = np.asarray(ufunc(*sample)).dtype.kind
        except Exception:
            kind = None
        if ufunc.nout != 1 or kind != "f":
            raise GatherRefused(
                f"{name} of a DaskNormalizedMatrix gives an n × d array of "
                f"{'booleans' if kind == 'b' else 'non-float values'}; use "
                "to_dask_array() for the materialized table as a Dask array"
            )
        if ufunc.nin == 1:
            return self._with_op(partial(_unary_op, ufunc=ufunc))
        if ufunc.nin == 2 and len(inputs) == 2:
            out = (
                self._binary(ufunc, inputs[1])
                if inputs[0] is self
                else self._binary(ufunc, inputs[0], reflected=True)
            )
            if out is not NotImplemented:
                return out
        raise TypeError(
            f"{name} of a DaskNormalizedMatrix combines only with scalars and one value per column"
        )

    def _ufunc_reduce(self, method, name, axis=0, dtype=None, out=None, keepdims=False, **rest):
        """``np.add/maximum/minimum.reduce``: the matrix's sum, max or min (NumPy's keywords;
        ``initial=`` and ``where=`` are refused by name)."""
        given = sorted(key for key, value in rest.items() if value is not None)
        if given:
            raise TypeError(
                f"{name}.reduce with {given} is not supported on a "
                f"DaskNormalizedMatrix; use its {method}(axis=, out=, keepdims=)"
            )
        out = out[0] if isinstance(out, tuple) and len(out) == 1 else out
        if method == "sum":
            return self.sum(axis=axis, dtype=dtype, out=out, keepdims=keepdims)
        result = getattr(self, method)(axis=axis, out=out, keepdims=keepdims)
        return result if dtype is None or out is not None else self._finish(result, axis, dtype)

    def _refuse_comparison(self, other):
        raise GatherRefused(
            "comparisons of a DaskNormalizedMatrix give an n × d boolean array; "
            "use to_dask_array() for the materialized table as a Dask array"
        )

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _refuse_comparison
    __hash__ = object.__hash__

    def __bool__(self):
        raise ValueError("the truth value of a DaskNormalizedMatrix is ambiguous")

    # ------------------------------------------------------------------------------------------
    # Selection

    def __getitem__(self, key):
        """``T[rows]``, ``T[rows, cols]``: lazy row and column selections (NumPy index arrays,
        slices, boolean masks, or a row-aligned Dask boolean mask); an integer on an axis gives
        that row (computed, small) or that column (a lazy Dask array)."""
        key = key if isinstance(key, tuple) else (key,)
        if any(k is Ellipsis for k in key):
            key = tuple(k for k in key if k is not Ellipsis)
        if len(key) > 2:
            raise IndexError("too many indices for a 2-D matrix")
        key = key + (slice(None),) * (2 - len(key))
        if self._transposed:
            out = self._base()[key[1], key[0]]
            return out.T if isinstance(out, DaskNormalizedMatrix) else out
        rows, cols = key
        if _is_index_array(rows) and _is_index_array(cols):
            raise IndexError(
                "pointwise selection (two index arrays) is not supported on a "
                "DaskNormalizedMatrix; select rows, then columns"
            )
        out = self
        if isinstance(cols, numbers.Integral) and not isinstance(cols, bool):
            j = _wrap(int(cols), self._d, "column")
            return self[rows]._column(j) if not _everything(rows) else self._column(j)
        if not _everything(cols):
            keep = _positions(cols, self._d, "column")
            names = None if self._columns is None else [self._columns[j] for j in keep]
            out = out._with_op(
                partial(_select_columns, keep=keep), d=keep.size, columns=names, keep_finite=True
            )
        if isinstance(rows, numbers.Integral) and not isinstance(rows, bool):
            i = _wrap(int(rows), sum(self._chunks), "row")
            return out._select(np.array([i])).toarray()[0]
        if _everything(rows):
            return out
        if isinstance(rows, da.Array):
            return out._select_mask(rows)
        return out._select(_positions(rows, sum(self._chunks), "row"))

    def _column(self, j):
        blocks = self._map(tasks.column, j, prefix="column")
        return self._rows(blocks, (), self._dtype, "column")

    def _select(self, idx):
        """The rows idx (wrapped, in range), lazily: per partition for sorted indices, else in
        pieces that gather from the partitions they touch."""
        offsets = self._offsets()
        owner = np.searchsorted(offsets, idx, side="right") - 1
        layout = self._layout
        sources, chunks = [], []
        if idx.size == 0:
            owner_groups = []
        elif np.all(np.diff(idx) >= 0):
            owner_groups = [(k, np.flatnonzero(owner == k)) for k in np.unique(owner)]
            built = self._built
            for k, where in owner_groups:
                local = idx[where] - offsets[k]
                sources.append(
                    delayed(take, pure=False)(
                        self._sources[k], local, dask_key_name=_name("take", self._token, k, local)
                    )
                )
                chunks.append(local.size)
            out = self._derive(sources=sources, chunks=chunks, built=None, token=uuid.uuid4().hex)
            if built is not None:  # rows of the kept matrices: nothing is read or built again
                matrices = [
                    delayed(tasks.select_rows, pure=True)(built[0][k], idx[where] - offsets[k])
                    for k, where in owner_groups
                ]
                out._built = (matrices, built[1], False)
            return out
        size = max(self._chunks) if self._chunks else 1
        for start in range(0, idx.size, size):
            piece_idx, piece_owner = idx[start : start + size], owner[start : start + size]
            touched = np.unique(piece_owner)
            first = {k: i for i, k in enumerate(touched)}
            local_offsets = np.concatenate([[0], np.cumsum([self._chunks[k] for k in touched])])
            local = (
                piece_idx - offsets[piece_owner] + local_offsets[[first[k] for k in piece_owner]]
            )
            sources.append(
                delayed(_gather, pure=False)(
                    [self._sources[k] for k in touched],
                    layout,
                    local,
                    dask_key_name=_name("gather", self._token, touched, local),
                )
            )
            chunks.append(piece_idx.size)
        return self._derive(sources=sources, chunks=chunks, built=None, token=uuid.uuid4().hex)

    def _select_mask(self, mask):
        mask = self.align(mask, "row mask")
        if mask.dtype != bool:
            raise IndexError(f"a Dask row index must be a boolean mask, got dtype {mask.dtype}")
        blocks = self._blocks(mask)
        counts = graph.compute(*[delayed(np.count_nonzero, pure=True)(b) for b in blocks])
        kept = [k for k, c in enumerate(counts) if c] or [0]
        sources = [
            delayed(take_mask, pure=False)(
                self._sources[k],
                blocks[k],
                dask_key_name=_name("mask", self._token, k, blocks[k].key),
            )
            for k in kept
        ]
        return self._derive(
            sources=sources,
            chunks=[int(counts[k]) for k in kept],
            built=None,
            token=uuid.uuid4().hex,
        )

    # ------------------------------------------------------------------------------------------
    # Materialization: only on purpose, and only small

    def _gather_check(self, what, max_bytes):
        limit = MAX_GATHER_BYTES if max_bytes is None else max_bytes
        n, d = self.shape
        need = n * d * self._dtype.itemsize
        if need > limit:
            raise GatherRefused(
                f"{what} would gather the whole {n} × {d} table ({need / 2**20:.1f} MiB) on the "
                f"client, above max_bytes={limit}; select rows first, use to_dask_array() for a "
                "row-chunked Dask array of it, or compute() for the in-memory NormalizedMatrix"
            )

    def materialize(self, max_bytes=None):
        """The joined table on the client (dense, or CSR when every partition's is), refused
        beyond ``max_bytes`` (default :data:`MAX_GATHER_BYTES`)."""
        self._gather_check("materialize()", max_bytes)
        blocks = self._base()._map(tasks.materialize, prefix="materialize")
        out = graph.compute(delayed(tasks.stack, pure=True)(*blocks))[0]
        return out.T if self._transposed else out

    def toarray(self, max_bytes=None):
        """The joined table as a dense array on the client (see :meth:`materialize`)."""
        self._gather_check("toarray()", max_bytes)
        out = self.materialize(max_bytes)
        return out.toarray() if hasattr(out, "toarray") else np.asarray(out)

    def __array__(self, dtype=None, copy=None):
        out = self.toarray()
        return out if dtype is None else out.astype(dtype)

    def to_dask_array(self):
        """The joined table as a row-chunked (dense) Dask array: each partition materializes its
        own rows on its worker."""
        base = self._base()
        blocks = base._map(tasks.toarray, prefix="toarray")
        out = base._rows(blocks, (self._d,), self._dtype, "toarray")
        return out.T if self._transposed else out

    def tcrossprod(self, *args, **kwargs):
        raise GatherRefused("T·Tᵀ of a Dask matrix is an n × n matrix; it is not supported")


def _binary_op(nm, ufunc, other, reflected):
    return ufunc(other, nm) if reflected else ufunc(nm, other)


def _unary_op(nm, ufunc):
    return ufunc(nm)


def _select_columns(nm, keep):
    return nm[:, keep]


def _gather(pieces, layout, local):
    from .pieces import concat

    return take(concat(pieces, layout), local)


def _everything(key):
    return isinstance(key, slice) and key == slice(None)


def _is_index_array(key):
    return not isinstance(key, (slice, numbers.Integral, np.bool_)) and np.ndim(key) > 0


def _wrap(i, length, axis):
    if not -length <= i < length:
        raise IndexError(f"{axis} index {i} is out of bounds for {length} {axis}s")
    return i % length


def _positions(key, length, axis):
    """An index (slice, integer array or list, boolean mask) as wrapped 1-D integer positions."""
    if isinstance(key, slice):
        return np.arange(length)[key]
    if np.ndim(key) != 1:
        raise IndexError(f"{axis} index must be 1-D, got shape {np.shape(key)}")
    return point_index(key, length, axis)
