"""The matrix products of a NormalizedMatrix: T·X, X·T, ``dot``, ``gramvec``, ``crossprod`` and
``tcrossprod``, with the LinearOperator interface.

:class:`ProductsMixin` is one of the mixins :class:`~ilargi.rewriter.NormalizedMatrix` is made of,
kept apart so that each kind of operator reads on its own: every product is rewritten into work on
the sources by the rules of :mod:`ilargi.rewriter.rules`, through the affine state (a, b), and
reproduces NaN/inf cell by cell where the rules would aggregate first. The helpers of the fused
passes (operand a⊙X and bᵀX, result a⊙(T₀ᵀ·r) + b·Σr) live here with ``gramvec``, which runs one;
the training passes of :mod:`ilargi.rewriter.training` use them too.
"""

from __future__ import annotations

import numbers

import numpy as np
from scipy.sparse.linalg import LinearOperator

from ilargi.backend import optional
from ilargi.backend.contract import Array, MatrixLike, Source
from ilargi.chooser import choose
from ilargi.chooser.memory import layout, require

from . import materialized, passes, pool, rules
from .operators import complex_error
from .state import MatrixState

# Columns or rows of T are materialized this many at a time where a product must reproduce NaN/inf
# cell by cell (see NormalizedMatrix._lmm_exact and _tmm_exact).
_CHUNK = 256
# A crossprod of a mostly-zero table (materialized as CSR) with dense parts is sparse where a
# dense d × d result would take more than this: a wide one-hot dimension beside a dense fact
# table made a dense result of gigabytes, seconds to fill, where the sparse one takes
# milliseconds; below it the dense result costs less than a sparse assembly.
DENSE_GRAM_BYTES = 64 << 20


def _sum_is_finite(x):
    """Whether an operand holds only finite values, by one reduction (no temporary): a NaN or
    inf makes the sum non-finite; an overflowing sum of finite values only sends the caller to
    its exact, slower path."""
    with np.errstate(all="ignore"):
        return bool(np.isfinite(x.sum())) if x.size else True


class ProductsMixin(MatrixState):
    """T·X, X·T, ``dot``, ``matmul``, ``gramvec``, ``crossprod``, ``tcrossprod`` and the
    LinearOperator interface of :class:`~ilargi.rewriter.NormalizedMatrix` (a mixin: it reads the
    matrix's parts, shape and affine state)."""

    def _operand(self, X, what):
        from .normalized import NormalizedMatrix

        if isinstance(X, NormalizedMatrix):
            raise TypeError(
                "a product of two NormalizedMatrix objects is not supported; "
                "materialize one of them"
            )
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
    def __matmul__(self, X: MatrixLike) -> Array:
        """T·X (X: d × m or length d)."""
        X = self._operand(X, "right operand of @")
        if X.shape[0] != self.shape[1]:
            raise ValueError(
                f"matmul: NormalizedMatrix of shape {self.shape} @ operand of shape "
                f"{X.shape}: inner dimensions {self.shape[1]} and {X.shape[0]} differ"
            )
        return self._product(X)

    @pool.operator
    def __rmatmul__(self, X: MatrixLike) -> Array:
        """X·T (X: m × n or length n), as (Tᵀ·Xᵀ)ᵀ."""
        X = self._operand(X, "left operand of @")
        if X.shape[-1] != self.shape[0]:
            raise ValueError(
                f"matmul: operand of shape {X.shape} @ NormalizedMatrix of shape "
                f"{self.shape}: inner dimensions {X.shape[-1]} and {self.shape[0]} "
                "differ"
            )
        if X.ndim == 1:
            return self.T._product(X)
        return self._kernels.xp.ascontiguousarray(self.T._product(X.T).T)

    @pool.operator
    def dot(self, X: MatrixLike, out: Array | None = None) -> Array:
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
            raise ValueError(
                f"dot: NormalizedMatrix of shape {self.shape} and operand of shape "
                f"{X.shape}: inner dimensions {self.shape[1]} and {X.shape[0]} differ"
            )
        if out is None:
            return self @ X
        shape, dtype = (self.shape[0],) + X.shape[1:], np.result_type(self.dtype, X.dtype)
        if out.shape != shape or out.dtype != dtype or not out.flags.c_contiguous:
            raise ValueError(
                f"dot: out must be a C-contiguous {dtype} array of shape {shape}, got "
                f"{out.dtype} of shape {out.shape}"
            )
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
            chunk = bad[start : start + _CHUNK]
            columns = self._select_columns(np.asarray(self._kernels.asnumpy(chunk))).toarray()
            with pool.blas(self._kernels):
                out += columns @ X[chunk]
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
            chunk = bad[start : start + _CHUNK]
            rows = self._select_rows(chunk).toarray()
            with pool.blas(self._kernels):
                out += rows.T @ Y[chunk]
        return out

    def _every_row_stored(self):
        """Whether some dense part is present in every target row (then each row of Tᵀ·Y
        multiplies every Y_i by a stored number)."""
        kernels = self._kernels
        return any(
            p.indicator.n_absent == 0 and not kernels.is_sparse(p.source) for p in self._parts
        )

    def _lmm(self, X, out=None):
        """T·X = T₀·(a⊙X) + 1·(bᵀX)."""
        a, b = self._scale, self._shift
        scaled = X if a is None else (a * X if X.ndim == 1 else a[:, None] * X)
        out = rules.lmm(self._parts, self._shape[0], scaled, out)
        if b is not None:
            with pool.blas(self._kernels):
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
            with pool.blas(self._kernels):
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
                rows = xp.flatnonzero(
                    bad[xp.asarray(part.indicator.index_vector())]
                    & xp.asarray(part.indicator.present())
                )
                taken = xp.asarray(part.indicator.index_vector())[rows]
                return part.with_source(kernels.zero_rows(S, bad), True), rows, taken

            finite, rows, taken = part.indicator.cached("split_nonfinite", build, owner=part.source)
            parts.append(finite)
            exact.append((part, rows, taken))
        return tuple(parts), exact

    def matvec(self, x: Array) -> Array:
        """T·x for a length-d vector (the LinearOperator interface).

        Parameters
        ----------
        x : array of length d

        Returns
        -------
        array of length n
        """
        return self @ x

    def rmatvec(self, y: Array) -> Array:
        """Tᵀ·y for a length-n vector (the LinearOperator interface).

        Parameters
        ----------
        y : array of length n

        Returns
        -------
        array of length d
        """
        return self.T @ y

    def matmat(self, X: Array) -> Array:
        """T·X for a d × m matrix (the LinearOperator interface).

        Parameters
        ----------
        X : array, d × m

        Returns
        -------
        array, n × m
        """
        return self @ X

    def rmatmat(self, Y: Array) -> Array:
        """Tᵀ·Y for an n × m matrix (the LinearOperator interface).

        Parameters
        ----------
        Y : array, n × m

        Returns
        -------
        array, d × m
        """
        return self.T @ Y

    def aslinearoperator(self) -> LinearOperator:
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
        return LinearOperator(
            self.shape,
            matvec=self.matvec,
            rmatvec=self.rmatvec,
            matmat=self.matmat,
            rmatmat=self.rmatmat,
            dtype=self.dtype,
        )

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
    def matmul(self, X: MatrixLike, plan: str = "factorized") -> Array:
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
    def gramvec(
        self,
        y: Array,
        v: Array | None = None,
        alpha: float = 1.0,
        beta: float = 0.0,
        z: Array | None = None,
        plan: str = "factorized",
    ) -> Array:
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
        return all(_sum_is_finite(x) for x in operands if x is not None) and not any(
            self.nonfinite()
        )

    def _pass_operand(self, X):
        """(a⊙X, bᵀX): T·X = T₀·(a⊙X) + 1·(bᵀX), the operand and constant of a pass."""
        a, b = self._scale, self._shift
        scaled = X if a is None else (a * X if X.ndim == 1 else a[:, None] * X)
        if b is None:
            return scaled, 0.0
        with pool.blas(self._kernels):
            return scaled, b @ X

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
            raise ValueError(
                f"gramvec: y must have {self.shape[1]} rows (columns of T), got shape {y.shape}"
            )
        if v is not None:
            v = self._vector(v, self.shape[0], "v of gramvec", "rows of T")
        if z is not None:
            z = self._operand(z, "z of gramvec")
            if z.shape != y.shape:
                raise ValueError(f"gramvec: z must have the shape of y, {y.shape}, got {z.shape}")
        return y, v, z, float(alpha), float(beta)

    @pool.operator
    def crossprod(self, w: Array | None = None, plan: str = "factorized") -> Source:
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
            Sparse when b = 0 and every source is sparse, or when b = 0, :meth:`materialize`
            builds a CSR table (:func:`ilargi.chooser.memory.layout`: its CSR form at most half
            the dense bytes) and a dense result would exceed ``DENSE_GRAM_BYTES`` (64 MiB).

        Raises
        ------
        ValueError
            If ``w`` has the wrong length, or T holds NaN/inf (see below).
        MemoryError
            If the dense d × d result (and one temporary of its size) would take more than the
            share of the available memory that :func:`ilargi.chooser.memory.require` allows.

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
        sparse = (
            bool(self._parts)
            and (b is None or not bool((b != 0).any()))
            and (self._all_sparse() or (d * d * 8 > DENSE_GRAM_BYTES and layout(self).sparse))
        )
        if not sparse:  # the dense d × d result and one temporary of its size
            require(
                2 * d * d * 8,
                f"crossprod of a matrix with {d} columns (a dense {d} × {d} result)",
                self._kernels.name,
            )
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
                "NULL cells by infinities: 0·inf = NaN); materialize first, or clean the data"
            )

    def _crossprod_nonfinite_weights(self, w):
        """TᵀWT with NaN/inf weights: their rows cell by cell, the others by the rule."""
        xp, kernels = self._kernels.xp, self._kernels
        bad = xp.flatnonzero(~xp.isfinite(w))
        finite = w.copy()
        finite[bad] = 0
        gram = kernels.to_dense(self.crossprod(finite))
        for start in range(0, bad.shape[0], _CHUNK):
            chunk = bad[start : start + _CHUNK]
            rows = self._select_rows(chunk).toarray()
            with pool.blas(kernels):
                gram = gram + rows.T @ (rows * w[chunk][:, None])
        return gram

    def _shift_crossprod(self, gram, w):
        """TᵀWT = diag(a)·G₀·diag(a) + u·bᵀ + b·uᵀ + (Σw)·b·bᵀ, with u = a⊙T₀ᵀw."""
        xp = self._kernels.xp
        a, b = self._full_scale(), self._shift
        n = self._shape[0]
        u = a * (
            rules.colsums(self._parts, self._shape[1])
            if w is None
            else rules.tmm(self._parts, self._shape[1], w)
        )
        total = n if w is None else w.sum()
        gram = gram.toarray() if self._kernels.is_sparse(gram) else gram
        return gram + xp.outer(u, b) + xp.outer(b, u) + total * xp.outer(b, b)

    @pool.operator
    def tcrossprod(self, w: Array | None = None, max_bytes: int = 2**31) -> Array:
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
            If the n × n result (and one temporary of its size) would take more than the share
            of the available memory that :func:`ilargi.chooser.memory.require` allows, or on the
            GPU if the device cannot hold it.

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
            raise ValueError(
                f"tcrossprod would build a dense {n} × {n} matrix "
                f"({n * n * 8 / 2**30:.1f} GiB) above max_bytes={max_bytes}"
            )
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
                    chunk = bad[start : start + _CHUNK]
                    cols = self._select_columns(chunk).toarray()
                    with pool.blas(self._kernels):
                        out = out + (cols * w[xp.asarray(chunk)]) @ cols.T
                return out
        check_memory = optional(self._kernels, "check_memory")  # device memory (GPU)
        if check_memory is not None:
            check_memory(2 * n * n * 8, f"tcrossprod (a dense {n} × {n} result)")
        require(  # the dense n × n result and one temporary of its size
            2 * n * n * 8,
            f"tcrossprod of a matrix with {n} rows (a dense {n} × {n} result)",
            self._kernels.name,
        )
        a, b = self._full_scale(), self._shift
        c = a * a if w is None else a * a * self._column_vector(w, "w")
        out = rules.tcrossprod(self._parts, n, c)
        if b is None:
            return out
        # T·W·Tᵀ = T₀ A W A T₀ᵀ + r·1ᵀ + 1·rᵀ + (bᵀWb)·1·1ᵀ with r = T₀(a⊙w⊙b).
        weights = b if w is None else b * self._column_vector(w, "w")
        r = rules.lmm(self._parts, n, a * weights)
        with pool.blas(self._kernels):
            constant = float(b @ weights)
        return out + r[:, None] + r[None, :] + constant

    def _vector(self, v, length, what, of):
        """A float64 vector of ``length`` real numbers, or an error naming ``what``."""
        from .normalized import NormalizedMatrix

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
