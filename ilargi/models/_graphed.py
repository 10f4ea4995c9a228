"""Training iterations on a GPU NormalizedMatrix, captured once as a CUDA graph and replayed.

A fixed-shape iteration launches the same kernels on the same buffers every time, so its launch
overhead (tens of launches, each a few microseconds of host work) can be paid once: the iteration
is captured into a CUDA graph and each later iteration is one graph launch. Capture has rules
(DESIGN.md §4): no cuBLAS/cuSPARSE calls (CuPy cannot capture them), no allocation, no host
synchronization. So every step here is built only from the kernels of
``ilargi/rewriter/kernels/cuda/ilargi.cu``, on buffers allocated up front, with every scalar that
changes (coefficients, intercept, sums) kept in device arrays.

* :class:`LogisticGD` -- batch gradient descent for binary logistic regression:
  ``w ← w − lr·(Tᵀ r + l2·w)``, ``b ← b − lr·Σr``, ``r = s⊙(σ(T·w + b) − y)/Σs`` (s: sample weights,
  default 1), i.e. the gradient of the mean log-loss plus ``l2/2·‖w‖²``.
* :class:`KMeansLloyd` -- one k-means (Lloyd) step: assign each row to the nearest centroid, then
  move every non-empty cluster's centroid to its mean.

Both take ``graph=True`` (capture and replay) or ``graph=False`` (the same kernels launched
eagerly); a capture that fails falls back to the eager loop with a RuntimeWarning, and
``fallback_reason`` says why. :func:`fit_logistic_gd` and :func:`fit_kmeans_lloyd` are the entry
points for the estimators.
"""
import warnings

import numpy as np

import cupy as cp

from ilargi.rewriter.kernels import gpu
from ilargi.rewriter.rules import summable

# Rows of a dense source one thread sums for Sᵀ·B (one atomic add per chunk and column).
_CHUNK = 256
MAX_CLUSTERS = 64  # ILARGI_KMEANS_MAX_K of the CUDA source


def _device_vector(values, length, what, dtype):
    values = cp.asarray(values)
    if values.shape != (length,):
        raise ValueError(f"{what} must have shape ({length},), got {values.shape}")
    if values.dtype.kind not in "biuf":
        raise TypeError(f"{what} must hold numbers, got dtype {values.dtype}")
    return cp.ascontiguousarray(values, dtype=dtype)


def _fill_zero(x):
    gpu.launch("ilargi_fill_zero", np.float64, x.size, (x, np.int64(x.size)))


def _copy(source, target):
    gpu.launch("ilargi_copy", np.float64, target.size, (source, target, np.int64(target.size)))


class _Factorized:
    """A GPU NormalizedMatrix in the form the graphed kernels read, with buffers for m columns.

    U (Σ n_p × m): each part's S_p·(a⊙X)[cols_p]; B (Σ n_p × m, zeroed by the step): the per-part
    segment sums the row kernel scatters; G (d × m): T₀ᵀ of what was scattered. With ``fuse_fact``
    (one column only) the fact table is left out of U and B: the row kernel reads it itself
    (:func:`ilargi.rewriter.kernels.gpu.fused_fact`).
    """

    def __init__(self, nm, m, fuse_fact=False):
        if getattr(nm, "device", None) != "gpu":
            raise ValueError("graphed iterations need a NormalizedMatrix on the GPU (nm.to('gpu'))")
        if nm._transposed:
            raise ValueError("graphed iterations need T itself, not a transposed view")
        self.n, self.d = nm.shape
        parts = nm.parts
        self.real = gpu._real(np.result_type(*(part.source.dtype for part in parts)))
        f = gpu.fused_fact(parts) if fuse_fact else None
        self.width = 0 if f is None else parts[f].source.shape[1]
        self.F = None if f is None else gpu.contiguous_source(parts[f], self.real)
        self.f_cols = cp.zeros(1, dtype=cp.int32) if f is None else gpu.device_index(parts[f].cols)
        others = [part for p, part in enumerate(parts) if p != f]
        self.plan = gpu.row_plan(others, self.n)
        self.m = m
        total = self.plan.total
        self.U = cp.zeros(total * m, dtype=self.real)
        self.B = cp.zeros(total * m, dtype=cp.float64)
        self.G = cp.zeros(self.d * m, dtype=cp.float64)
        if self.F is None:
            self.F = self.U  # never read (width 0)
        self.has_scale, self.scale = self._affine(nm._scale)
        self.has_shift, self.shift = self._affine(nm._shift)
        self.parts = [self._prepare(part, offset) for part, offset in zip(others, self.plan.offsets)]

    def _affine(self, vector):
        if vector is None:
            return np.int32(0), cp.zeros(1)
        return np.int32(1), cp.ascontiguousarray(vector, dtype=cp.float64)

    def _prepare(self, part, offset):
        S, m = summable(part), self.m  # unreferenced rows zeroed if they may hold NaN/inf
        n_p, d_p = S.shape
        views = (self.U[offset * m:(offset + n_p) * m], self.B[offset * m:(offset + n_p) * m])
        prepared = {"n_p": n_p, "d_p": d_p, "cols": gpu.device_index(part.cols),
                    "U": views[0], "B": views[1], "sparse": gpu.is_sparse(S)}
        if prepared["sparse"]:
            prepared["indptr"], prepared["indices"] = (cp.ascontiguousarray(x) for x in
                                                       gpu._csr_parts(S))
            prepared["data"] = cp.ascontiguousarray(S.data, dtype=self.real)
            prepared["entry_rows"] = gpu._entry_rows(S)
        else:
            prepared["S"] = cp.ascontiguousarray(S, dtype=self.real)
        return prepared

    def forward(self, X):
        """U_p = S_p·(a⊙X)[cols_p] for every part (X: d × m float64, C-contiguous)."""
        m = np.int32(self.m)
        for p in self.parts:
            n_p = np.int32(p["n_p"])
            if p["sparse"]:
                args = (p["indptr"], p["indices"], p["data"], n_p, p["cols"], self.scale,
                        self.has_scale, X, m, p["U"])
                gpu.launch("ilargi_csr_part_mm", self.real, p["n_p"] * self.m, args)
            else:
                args = (p["S"], n_p, np.int32(p["d_p"]), p["cols"], self.scale, self.has_scale,
                        X, m, p["U"])
                gpu.launch("ilargi_dense_part_mm", self.real, p["n_p"] * self.m, args)

    def backward(self):
        """G = Σ_p M_p·S_pᵀ·B_p (G zeroed by the step)."""
        m = np.int32(self.m)
        for p in self.parts:
            if p["sparse"]:
                nnz = p["data"].size
                args = (p["entry_rows"], p["indices"], p["data"], np.int64(nnz), p["B"], m,
                        p["cols"], self.G)
                gpu.launch("ilargi_csr_part_tmm", self.real, nnz, args)
            else:
                chunks = -(-p["n_p"] // _CHUNK)
                args = (p["S"], np.int32(p["n_p"]), np.int32(p["d_p"]), p["B"], m, p["cols"],
                        np.int32(_CHUNK), self.G)
                gpu.launch("ilargi_dense_part_tmm", self.real, chunks * p["d_p"], args)

    def rows_args(self):
        """The leading arguments of the row kernels: R, P, n, U, offsets."""
        return (self.plan.R, np.int32(len(self.parts)), np.int64(self.n), self.U,
                self.plan.offsets_device)

    def fact_args(self, X):
        """The fact-table arguments of a fused row kernel: F, width, f_cols, X, a, has_scale."""
        return (self.F, np.int32(self.width), self.f_cols, X, self.scale, self.has_scale)


class _GraphedLoop:
    """Runs ``_step`` n times, as replays of one captured CUDA graph or eagerly.

    Subclasses define ``_step`` (kernel launches only) and ``_reset`` (restore the start state).
    """

    graphed = False
    fallback_reason = None

    def _prepare_graph(self, graph):
        if not graph:
            return
        try:
            self._stream, self._graph = self._capture()
            self.graphed = True
        except Exception as exc:  # any capture failure: the eager loop computes the same step
            self.fallback_reason = f"{type(exc).__name__}: {exc}"
            warnings.warn(f"CUDA graph capture failed ({self.fallback_reason}); running the "
                          "iteration eagerly", RuntimeWarning, stacklevel=3)
            cp.cuda.Device().synchronize()
            self._reset()

    def _capture(self):
        cp.cuda.Device().synchronize()  # buffers prepared on other streams are ready
        stream = cp.cuda.Stream(non_blocking=True)
        with stream:
            self._step()  # compiles and loads every kernel before the capture
            stream.synchronize()
            self._reset()
            stream.begin_capture()
            try:
                self._step()
            except Exception:
                stream.end_capture()  # leave the stream usable; the step's error is the report
                raise
            graph = stream.end_capture()
        return stream, graph

    def run(self, n_iter):
        """Run n_iter steps (from the current state); returns self."""
        if isinstance(n_iter, bool) or not isinstance(n_iter, (int, np.integer)) or n_iter < 0:
            raise ValueError(f"n_iter must be a non-negative integer, got {n_iter!r}")
        if self.graphed:
            with self._stream:
                for _ in range(int(n_iter)):
                    self._graph.launch(stream=self._stream)
            self._stream.synchronize()
        else:
            for _ in range(int(n_iter)):
                self._step()
        return self


class LogisticGD(_GraphedLoop):
    """Batch gradient descent for binary logistic regression on a GPU NormalizedMatrix T.

    Each step: ``r = s⊙(σ(T·w + b) − y)/Σs``, ``w ← w − lr·(Tᵀr + l2·w)``, ``b ← b − lr·Σr``
    (b only with ``fit_intercept``). ``y`` holds 0/1 labels; ``coef``/``intercept`` are the start
    point (default 0). The current state is ``coef`` (d, float64) and ``intercept`` (1,) on the GPU.
    """

    def __init__(self, nm, y, learning_rate, l2=0.0, fit_intercept=False, sample_weight=None,
                 coef=None, intercept=0.0, graph=True):
        if not learning_rate > 0:
            raise ValueError(f"learning_rate must be positive, got {learning_rate!r}")
        if not l2 >= 0:
            raise ValueError(f"l2 must be non-negative, got {l2!r}")
        self.fact = fact = _Factorized(nm, 1, fuse_fact=True)
        n, d = fact.n, fact.d
        self.y = _device_vector(y, n, "y", fact.real)
        if sample_weight is None:
            self.weights, self.has_weights, total = self.y, np.int32(0), float(n)
        else:
            self.weights = _device_vector(sample_weight, n, "sample_weight", fact.real)
            self.has_weights, total = np.int32(1), float(self.weights.sum())
            if not total > 0:
                raise ValueError("sample_weight must have a positive sum")
        self.inv_total = np.float64(1.0 / total)
        self.start_coef = (cp.zeros(d) if coef is None
                           else _device_vector(coef, d, "coef", cp.float64).copy())
        self.start_intercept = cp.full(1, float(intercept))
        self.coef, self.intercept = self.start_coef.copy(), self.start_intercept.copy()
        self.c0, self.residual_sum = cp.zeros(1), cp.zeros(1)
        self.learning_rate, self.l2 = np.float64(learning_rate), np.float64(l2)
        self.fit_intercept = np.int32(bool(fit_intercept))
        self._prepare_graph(graph)

    def _reset(self):
        _copy(self.start_coef, self.coef)
        _copy(self.start_intercept, self.intercept)

    def _step(self):
        fact = self.fact
        for buffer in (fact.B, fact.G, self.residual_sum):
            _fill_zero(buffer)
        _copy(self.intercept, self.c0)
        if fact.has_shift:  # c0 = b0 + bᵀw: the shift's share of every row's T·w
            gpu.launch("ilargi_column_dot", np.float64, 0,
                       (fact.shift, self.coef, np.int32(fact.d), np.int32(1), self.c0), blocks=1)
        fact.forward(self.coef)
        gpu.launch("ilargi_logistic_rows", fact.real, fact.n,
                   fact.rows_args() + fact.fact_args(self.coef)
                   + (self.y, self.weights, self.has_weights, self.inv_total, self.c0, fact.B,
                      fact.G, self.residual_sum), width=fact.width)
        fact.backward()
        gpu.launch("ilargi_logistic_update", np.float64, fact.d,
                   (self.coef, fact.G, fact.scale, fact.has_scale, fact.shift, fact.has_shift,
                    self.residual_sum, np.int32(fact.d), self.learning_rate, self.l2,
                    self.intercept, self.fit_intercept))


class KMeansLloyd(_GraphedLoop):
    """Lloyd's k-means on a GPU NormalizedMatrix T, from the given centroids (K × d, K ≤ 64).

    Each step assigns every row to its nearest centroid (by ‖c‖² − 2·x·c, the factorized form of
    the squared distance) and moves each non-empty cluster's centroid to the mean of its rows.
    ``centroids`` (K × d) and ``labels`` (the assignment of the last step) are on the GPU.
    """

    def __init__(self, nm, centroids, graph=True):
        centroids = cp.asarray(centroids, dtype=cp.float64)
        if centroids.ndim != 2 or centroids.shape[1] != nm.shape[1] or centroids.shape[0] < 1:
            raise ValueError(f"centroids must have shape (K, {nm.shape[1]}), got {centroids.shape}")
        K = centroids.shape[0]
        if K > MAX_CLUSTERS:
            raise ValueError(f"graphed k-means supports at most {MAX_CLUSTERS} clusters, got {K}")
        self.K = K
        self.fact = fact = _Factorized(nm, K)
        self.start = cp.ascontiguousarray(centroids.T)  # d × K: column c is centroid c
        self.C = self.start.copy()
        self.label_buffer = cp.zeros(fact.n, dtype=cp.int32)
        self.cb, self.norms, self.counts = cp.zeros(K), cp.zeros(K), cp.zeros(K)
        self._prepare_graph(graph)

    @property
    def centroids(self):
        return cp.ascontiguousarray(self.C.T)

    @property
    def labels(self):
        return self.label_buffer

    def _reset(self):
        _copy(self.start, self.C)

    def _step(self):
        fact, K, d = self.fact, np.int32(self.K), np.int32(self.fact.d)
        for buffer in (fact.B, fact.G, self.counts, self.cb, self.norms):
            _fill_zero(buffer)
        if fact.has_shift:  # cb = bᵀC: the shift's share of x·c
            gpu.launch("ilargi_column_dot", np.float64, 0, (fact.shift, self.C, d, K, self.cb),
                       blocks=self.K)
        gpu.launch("ilargi_column_sq_norms", np.float64, 0, (self.C, d, K, self.norms),
                   blocks=self.K)
        fact.forward(self.C)
        gpu.launch("ilargi_kmeans_rows", fact.real, fact.n,
                   fact.rows_args() + (K, self.cb, self.norms, self.label_buffer, fact.B,
                                       self.counts))
        fact.backward()
        gpu.launch("ilargi_kmeans_update", np.float64, fact.d * self.K,
                   (self.C, fact.G, self.counts, fact.scale, fact.has_scale, fact.shift,
                    fact.has_shift, d, K))


def fit_logistic_gd(nm, y, learning_rate, n_iter, l2=0.0, fit_intercept=False,
                    sample_weight=None, coef=None, intercept=0.0, graph=True):
    """Run n_iter steps of :class:`LogisticGD`; returns (coef (d,) on the GPU, intercept float)."""
    loop = LogisticGD(nm, y, learning_rate, l2, fit_intercept, sample_weight, coef, intercept,
                      graph).run(n_iter)
    return loop.coef, float(loop.intercept[0])


def fit_kmeans_lloyd(nm, centroids, n_iter, graph=True):
    """Run n_iter steps of :class:`KMeansLloyd`; returns (centroids K × d, labels) on the GPU."""
    loop = KMeansLloyd(nm, centroids, graph).run(n_iter)
    return loop.centroids, loop.labels
