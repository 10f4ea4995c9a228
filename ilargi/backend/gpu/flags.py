"""Switches between the GPU backend's alternative kernels, for tests and benchmarks to compare.

Read at call time, so a test or benchmark may set them on this module (``flags.STACKED = False``).

* ``STACKED`` (env ``ILARGI_GPU_STACKED``, default on): the stacked passes of
  :mod:`.stacked`; off, the rules run part by part (the generic path, also used where an index
  exceeds int32).
* ``FUSED_GRAMVEC`` (env ``ILARGI_GPU_FUSED_GRAMVEC``, default on): α·Tᵀ(v⊙(T·y)) + β·z in one
  stacked pass instead of the operator chain T·y, ⊙v, Tᵀ·. The fused pass does a subset of the
  chain's work (the same forward products, one row pass instead of two reads of F, no n-vector
  temporaries, fewer launches), so it is taken whenever it applies (a 1-D y on T itself).
* ``SEGMENT_SUM`` (env ``ILARGI_GPU_SEGMENT_SUM``): the single-indicator segment sum s(Y, rows):
  ``"pieces"`` (default; deterministic unless a row is cut), ``"atomic"`` (scatter with atomic
  adds) or ``"csr"`` (cuSPARSE with a CSR of Iᵀ).
"""

import os

STACKED = os.environ.get("ILARGI_GPU_STACKED", "1") != "0"
FUSED_GRAMVEC = os.environ.get("ILARGI_GPU_FUSED_GRAMVEC", "1") != "0"
SEGMENT_SUM = os.environ.get("ILARGI_GPU_SEGMENT_SUM", "pieces")
