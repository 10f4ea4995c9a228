"""Training steps on GPU parts, captured once as a CUDA graph and replayed.

A fixed-shape iteration launches the same kernels on the same buffers every time, so its launch
overhead (tens of launches, each a few microseconds of host work) can be paid once: the iteration
is captured into a CUDA graph and each later iteration is one graph launch. Capture has rules
(``docs/design.rst``, "Performance principles"): no cuBLAS/cuSPARSE calls (CuPy cannot capture
them), no allocation, no host synchronization. So every step here is built only from the kernels of
``ilargi/backend/cuda/ilargi.cu``, on buffers allocated up front, with every scalar that
changes (coefficients, intercept, sums) kept in device arrays.

Like the stacked passes (:func:`.stacked.gramvec`), these take what the backend takes elsewhere:
the parts of T₀ (sources on the device), the shape n × d and the affine state of
T = T₀·diag(scale) + 1·shiftᵀ (``scale``/``shift``: length d, or None for 1 and 0), never a
NormalizedMatrix. A caller holding one passes ``nm.parts, n, d, nm.scale, nm.shift`` with
``n, d = nm.shape``, and refuses a transposed view (``nm.transposed``) itself: the steps train
on T, not Tᵀ.

* :class:`LogisticGD` -- batch gradient descent for binary logistic regression:
  ``w ← w − lr·(Tᵀ r + l2·w)``, ``b ← b − lr·Σr``, ``r = s⊙(σ(T·w + b) − y)/Σs`` (s: sample weights,
  default 1), i.e. the gradient of the mean log-loss plus ``l2/2·‖w‖²``.
* :class:`KMeansLloyd` -- one k-means (Lloyd) step: assign each row to the nearest centroid, then
  move every non-empty cluster's centroid to its mean.

Both take ``graph=True`` (capture and replay) or ``graph=False`` (the same kernels launched
eagerly); a capture that fails falls back to the eager loop with a RuntimeWarning, and
``fallback_reason`` says why. :func:`fit_logistic_gd` and :func:`fit_kmeans_lloyd` run n steps.

No estimator calls these yet. Reaching them from ``LogisticRegression(solver="gd")`` and
``KMeans`` waits until it is shown on a GPU that replay through the estimators' public API gives
the eager results and saves time. ``tests/test_gpu.py`` and ``benchmarks/gpu_check.py`` call them.
"""

import warnings

import cupy as cp
import cupyx.scipy.sparse as csp
import numpy as np

from .device import fill_zero, launch, real_dtype
from .stacked import row_plan

MAX_CLUSTERS = 64  # ILARGI_KMEANS_MAX_K of the CUDA source
STEPS_PER_GRAPH = 10  # steps one captured graph holds (a replay amortizes its launch over them)

__all__ = [
    "KMeansLloyd",
    "LogisticGD",
    "MAX_CLUSTERS",
    "STEPS_PER_GRAPH",
    "fit_kmeans_lloyd",
    "fit_logistic_gd",
]


def _device_vector(values, length, what, dtype):
    values = cp.asarray(values)
    if values.shape != (length,):
        raise ValueError(f"{what} must have shape ({length},), got {values.shape}")
    if values.dtype.kind not in "biuf":
        raise TypeError(f"{what} must hold numbers, got dtype {values.dtype}")
    return cp.ascontiguousarray(values, dtype=dtype)


def _copy(source, target):
    launch("ilargi_copy", np.float64, target.size, (source, target, np.int64(target.size)))


def _on_device(source):
    return isinstance(source, cp.ndarray) or csp.issparse(source)


class _Factorized:
    """The parts of T₀ and the affine state in the form the graphed steps read, with buffers for
    m columns.

    ``plan``: the stacked form (:class:`.stacked.RowPlan`) with every gathered part in the stacked
    sparse products (cuBLAS cannot be captured); with ``fuse_fact`` (one column only) the fact
    table stays out of them: the row kernel reads it itself. U (Σ n_p × m): each part's
    S_p·(a⊙X)[cols_p]; B: the stacked segment sums; G (d × m): T₀ᵀ of what was summed.
    """

    def __init__(self, parts, n, d, scale, shift, m, fuse_fact=False):
        parts = tuple(parts)
        if not parts:
            raise ValueError("graphed iterations need at least one part")
        if not all(_on_device(part.source) for part in parts):
            raise ValueError("graphed iterations need parts on the GPU (nm.to('gpu'))")
        self.n, self.d = int(n), int(d)
        self.m = m
        self.plan = row_plan(parts, self.n, separate_fact=fuse_fact, cublas=False)
        if self.plan is None:
            raise ValueError(
                f"graphed iterations index with int32: a {self.n}-row matrix with "
                f"{len(parts)} parts is too large for them"
            )
        self.real = real_dtype(np.result_type(*(part.source.dtype for part in parts)))
        total = self.plan.total
        self.U = cp.zeros(max(total, 1) * m)
        self.B = cp.zeros(max(total, 1) * m)
        self.G = cp.zeros(self.d * m)
        self.has_scale, self.scale = self._affine(scale, 1.0, "scale")
        self.has_shift, self.shift = self._affine(shift, 0.0, "shift")
        self.plan.build()  # every structure now: a graph capture cannot allocate

    def _affine(self, vector, neutral, what):
        """(flag, device vector) of the kernels' affine arguments; a vector that is all
        ``neutral`` (what NormalizedMatrix.scale/shift report for no scale/shift) is absent."""
        if vector is not None:
            vector = _device_vector(vector, self.d, what, cp.float64)
            if bool((vector == neutral).all()):  # once, at setup: the kernels then skip it
                vector = None
        if vector is None:
            return np.int32(0), cp.zeros(1)
        return np.int32(1), vector

    def forward(self, X, scaled=False):
        """U_p = S_p·(a⊙X)[cols_p] for every gathered part (X: d × m float64, C-contiguous;
        ``scaled``: X already holds a⊙X)."""
        z = self.plan.z
        if z is not None:
            z.run(X, self.m, self.U, weight=None if scaled or not self.has_scale else self.scale)

    def backward(self, Y=None, labels=None):
        """G += Σ_p M_p·S_pᵀ·(I_pᵀ·Y) (Y: n × m float64, or the one-hot matrix of ``labels``)."""
        if not self.plan.P:
            return
        self.plan.segment_pieces.run(Y, self.m, self.B, labels=labels)
        if self.plan.zt is not None:
            self.plan.zt.run(self.B, self.m, self.G, accumulate=True)


class _GraphedLoop:
    """Runs ``_step`` n times, as replays of a captured CUDA graph or eagerly.

    One graph holds STEPS_PER_GRAPH consecutive steps, so a replay pays one graph launch for all
    of them; n steps are n // STEPS_PER_GRAPH replays and the rest eager steps (the same kernels).
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
            warnings.warn(
                f"CUDA graph capture failed ({self.fallback_reason}); running the "
                "iteration eagerly",
                RuntimeWarning,
                stacklevel=3,
            )
            cp.cuda.Device().synchronize()
            self._reset()

    def _capture(self):
        cp.cuda.Device().synchronize()  # buffers prepared on other streams are ready
        stream = cp.cuda.Stream(non_blocking=True)
        with stream:
            self._step()  # compiles and loads every kernel, builds every buffer, before capture
            stream.synchronize()
            self._reset()
            stream.begin_capture()
            try:
                for _ in range(STEPS_PER_GRAPH):
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
            replays, rest = divmod(int(n_iter), STEPS_PER_GRAPH)
            with self._stream:
                for _ in range(replays):
                    self._graph.launch(stream=self._stream)
                for _ in range(rest):
                    self._step()
            self._stream.synchronize()
        else:
            for _ in range(int(n_iter)):
                self._step()
        return self


class LogisticGD(_GraphedLoop):
    """Batch gradient descent for binary logistic regression on T = T₀·diag(scale) + 1·shiftᵀ.

    ``parts`` (on the GPU), ``n``, ``d``, ``scale``, ``shift``: T as in the module docstring.
    Each step: ``r = s⊙(σ(T·w + b) − y)/Σs``, ``w ← w − lr·(Tᵀr + l2·w)``, ``b ← b − lr·Σr``
    (b only with ``fit_intercept``). ``y`` holds 0/1 labels; ``coef``/``intercept`` are the start
    point (default 0). The current state is ``coef`` (d, float64) and ``intercept`` (1,) on the GPU.
    A step is five launches: prepare (G = 0, x = a⊙w, c0 = b0 + bᵀw), U = Z·x, the row pass (reads
    the fact table once for T·w and Tᵀr), B = Iᵀr with G += Zᵀ·B, and the update.
    """

    def __init__(
        self,
        parts,
        n,
        d,
        scale,
        shift,
        y,
        learning_rate,
        l2=0.0,
        fit_intercept=False,
        sample_weight=None,
        coef=None,
        intercept=0.0,
        graph=True,
    ):
        if not learning_rate > 0:
            raise ValueError(f"learning_rate must be positive, got {learning_rate!r}")
        if not l2 >= 0:
            raise ValueError(f"l2 must be non-negative, got {l2!r}")
        self.fact = fact = _Factorized(parts, n, d, scale, shift, 1, fuse_fact=True)
        n, d = fact.n, fact.d
        real = fact.plan.row_real
        self.y = _device_vector(y, n, "y", real)
        if sample_weight is None:
            self.weights, total = None, float(n)
        else:
            self.weights = _device_vector(sample_weight, n, "sample_weight", real)
            total = float(self.weights.sum())
            if not total > 0:
                raise ValueError("sample_weight must have a positive sum")
        self.inv_total = 1.0 / total
        self.start_coef = (
            cp.zeros(d) if coef is None else _device_vector(coef, d, "coef", cp.float64).copy()
        )
        self.start_intercept = cp.full(1, float(intercept))
        self.coef, self.intercept = self.start_coef.copy(), self.start_intercept.copy()
        self.x, self.residuals = cp.zeros(d), cp.zeros(n)
        self.c0, self.residual_sum = self.start_intercept.copy(), cp.zeros(1)
        self.learning_rate, self.l2 = np.float64(learning_rate), np.float64(l2)
        self.fit_intercept = np.int32(bool(fit_intercept))
        self._prepare_graph(graph)

    def _reset(self):
        _copy(self.start_coef, self.coef)
        _copy(self.start_intercept, self.intercept)
        _copy(self.start_intercept, self.c0)  # c0 starts each step at b0 (the update sets it)

    def _step(self):
        fact = self.fact
        launch(
            "ilargi_logistic_prepare",
            np.float64,
            fact.d,
            (
                self.coef,
                fact.scale,
                fact.has_scale,
                fact.shift,
                fact.has_shift,
                np.int32(fact.d),
                self.x,
                self.c0,
                fact.G,
                self.residual_sum,
            ),
        )
        fact.forward(self.x, scaled=True)
        fact.plan.rows(
            self.x,
            fact.U,
            2,
            self.residuals,
            self.c0,
            v=self.weights,
            y=self.y,
            inv_total=self.inv_total,
            G=fact.G,
            total=self.residual_sum,
        )
        fact.backward(self.residuals)
        launch(
            "ilargi_logistic_update",
            np.float64,
            fact.d,
            (
                self.coef,
                fact.G,
                fact.scale,
                fact.has_scale,
                fact.shift,
                fact.has_shift,
                self.residual_sum,
                np.int32(fact.d),
                self.learning_rate,
                self.l2,
                self.intercept,
                self.fit_intercept,
                self.c0,
            ),
        )


class KMeansLloyd(_GraphedLoop):
    """Lloyd's k-means on T = T₀·diag(scale) + 1·shiftᵀ from the given centroids (K × d, K ≤ 64).

    ``parts`` (on the GPU), ``n``, ``d``, ``scale``, ``shift``: T as in the module docstring.
    Each step assigns every row to its nearest centroid (by ‖c‖² − 2·x·c, the factorized form of
    the squared distance) and moves each non-empty cluster's centroid to the mean of its rows.
    ``centroids`` (K × d) and ``labels`` (the assignment of the last step) are on the GPU.
    A step is five launches: prepare (norms, bᵀC, G = 0), U = Z·(a⊙C), the assignment pass,
    B = Iᵀ·onehot(labels) with G += Zᵀ·B, and the update.
    """

    def __init__(self, parts, n, d, scale, shift, centroids, graph=True):
        centroids = cp.asarray(centroids, dtype=cp.float64)
        if centroids.ndim != 2 or centroids.shape[1] != d or centroids.shape[0] < 1:
            raise ValueError(f"centroids must have shape (K, {d}), got {centroids.shape}")
        K = centroids.shape[0]
        if K > MAX_CLUSTERS:
            raise ValueError(f"graphed k-means supports at most {MAX_CLUSTERS} clusters, got {K}")
        self.K = K
        self.fact = fact = _Factorized(parts, n, d, scale, shift, K)
        self.start = cp.ascontiguousarray(centroids.T)  # d × K: column c is centroid c
        self.C = self.start.copy()
        self.label_buffer = cp.zeros(fact.n, dtype=cp.int32)
        self.cb, self.norms, self.counts = cp.zeros(K), cp.zeros(K), cp.zeros(K)
        # Blocks per centroid column in prepare: the K columns' sums spread over the GPU.
        self.chunks = max(1, min(-(-fact.d // 256), 1024 // K))
        self._prepare_graph(graph)

    @property
    def centroids(self):
        return cp.ascontiguousarray(self.C.T)

    @property
    def labels(self):
        return self.label_buffer

    def _reset(self):
        _copy(self.start, self.C)
        for buffer in (self.norms, self.cb):  # prepare adds into them (the update zeroes them)
            fill_zero(buffer)

    def _step(self):
        fact, plan, K, d = self.fact, self.fact.plan, np.int32(self.K), np.int32(self.fact.d)
        launch(
            "ilargi_kmeans_prepare",
            np.float64,
            0,
            (
                self.C,
                d,
                K,
                fact.shift,
                fact.has_shift,
                self.norms,
                self.cb,
                self.counts,
                fact.G,
                np.int64(fact.G.size),
            ),
            blocks=self.K * self.chunks,
        )
        fact.forward(self.C)
        launch(
            "ilargi_kmeans_rows",
            np.float64,
            fact.n,
            (
                plan.R,
                np.int32(plan.P),
                np.int64(fact.n),
                fact.U,
                plan.offsets_device,
                K,
                self.cb,
                self.norms,
                self.label_buffer,
                self.counts,
            ),
        )
        fact.backward(labels=self.label_buffer)
        launch(
            "ilargi_kmeans_update",
            np.float64,
            fact.d * self.K,
            (
                self.C,
                fact.G,
                self.counts,
                fact.scale,
                fact.has_scale,
                fact.shift,
                fact.has_shift,
                d,
                K,
                self.norms,
                self.cb,
            ),
        )


def fit_logistic_gd(
    parts,
    n,
    d,
    scale,
    shift,
    y,
    learning_rate,
    n_iter,
    l2=0.0,
    fit_intercept=False,
    sample_weight=None,
    coef=None,
    intercept=0.0,
    graph=True,
):
    """Run n_iter steps of :class:`LogisticGD`; returns (coef (d,) on the GPU, intercept float)."""
    loop = LogisticGD(
        parts,
        n,
        d,
        scale,
        shift,
        y,
        learning_rate,
        l2,
        fit_intercept,
        sample_weight,
        coef,
        intercept,
        graph,
    ).run(n_iter)
    return loop.coef, float(loop.intercept[0])


def fit_kmeans_lloyd(parts, n, d, scale, shift, centroids, n_iter, graph=True):
    """Run n_iter steps of :class:`KMeansLloyd`; returns (centroids K × d, labels) on the GPU."""
    loop = KMeansLloyd(parts, n, d, scale, shift, centroids, graph).run(n_iter)
    return loop.centroids, loop.labels
