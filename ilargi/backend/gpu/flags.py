"""Switches between the GPU backend's alternative kernels, for tests and benchmarks to compare.

Each is a setting of :func:`ilargi.get_config`, read when a kernel runs, so a test or benchmark
sets it for a block with :func:`ilargi.config_context` (e.g. ``config_context(gpu_stacked=False)``);
the environment variable gives its default:

* :func:`stacked` (``gpu_stacked``, env ``ILARGI_GPU_STACKED``, default on): the stacked passes of
  :mod:`.stacked`; off, the rules run part by part (the generic path, also used where an index
  exceeds int32).
* :func:`fused_gramvec` (``gpu_fused_gramvec``, env ``ILARGI_GPU_FUSED_GRAMVEC``, default on):
  α·Tᵀ(v⊙(T·y)) + β·z in one stacked pass instead of the operator chain T·y, ⊙v, Tᵀ·. The fused
  pass does a subset of the chain's work (the same forward products, one row pass instead of two
  reads of F, no n-vector temporaries, fewer launches), so it is taken whenever it applies (a 1-D
  y on T itself).
* :func:`segment_sum_method` (``gpu_segment_sum``, env ``ILARGI_GPU_SEGMENT_SUM``): the
  single-indicator segment sum s(Y, rows): ``"pieces"`` (default; deterministic unless a row is
  cut), ``"atomic"`` (scatter with atomic adds) or ``"csr"`` (cuSPARSE with a CSR of Iᵀ).
"""

from ilargi._config import live_config


def stacked():
    """Whether the stacked passes run (the ``gpu_stacked`` setting)."""
    return live_config()["gpu_stacked"]


def fused_gramvec():
    """Whether α·Tᵀ(v⊙(T·y)) + β·z runs as one stacked pass (the ``gpu_fused_gramvec`` setting)."""
    return live_config()["gpu_fused_gramvec"]


def segment_sum_method():
    """The single-indicator segment sum: "pieces", "atomic" or "csr" (``gpu_segment_sum``)."""
    return live_config()["gpu_segment_sum"]
