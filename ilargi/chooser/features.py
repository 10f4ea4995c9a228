"""Features of (data, workload, device) from metadata and shapes alone, in microseconds.

Nothing here touches the values of a source or builds the joined table. The only O(n) work --
per-indicator fan-out statistics and the number of entries a sparse part puts into T -- runs once
and is cached on the :class:`~ilargi.metadata.Indicator` (``indicator.cached``), next to the
counts the kernels cache there anyway, so every later call costs a few microseconds per part.

Notation: the fact parts are the ones with an identity indicator (the fact table's own columns);
the other parts are dimensions. Tuple ratio TR = n / Σ n_p over dimensions, feature ratio FR =
Σ d_p (dimensions) / d_fact, as in Morpheus. "Entries" are stored numbers: nnz for a sparse
source, n_p·d_p for a dense one; nnz(T) = Σ_p Σ_r cnt_p[r]·nnz(row r of S_p).

The FLOP and byte estimates of both plans (:func:`workload_costs`) are first-order counts of the
work the rewrite rules and the materialized operators do; the cost model corrects them.
"""

import math
import os
import weakref
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from ilargi.backend import threads as thread_control

from . import host, rules
from .workload import MODELS, OPERATORS

JOIN_KINDS = ("fact", "left", "union_outer", "no_fact")
DEVICES = ("cpu", "gpu")
CATEGORICAL = {"workload": OPERATORS + MODELS, "join_kind": JOIN_KINDS, "device": DEVICES}


# Rough machine rates (FLOP/s, bytes/s of gather-heavy, sparse-ish work) that turn the estimates
# into seconds: for the sweep's time caps and the estimated time ratios among the features.
RATES = {"cpu": (4e9, 3e9), "gpu": (2e11, 5e11)}

# Byte-equivalents of one multiply-add of a sparse-sparse product and of one entry of a sparse
# result (SciPy's SpGEMM runs at ~1e7-1e8 multiply-adds per second here, BLAS at ~1e10). The
# factorized crossprod's sparse multiply-adds are counted apart (``sparse_work_fact``): its
# blocks are mostly compiled gathers and sums, priced by the rule
# (:data:`ilargi.chooser.rules.CROSS_SPARSE_BYTES`).
SPGEMM_BYTES = 200
SPARSE_RESULT_BYTES = 100
# A table this small stays in a core's cache (L2 is 256 KiB or more on x86 cores of the last
# decade): reads and writes at random rows of it cost what streamed ones do, so the gathers and
# segment-sums through the index vectors of a small dimension (dates, nations, airports) are not
# charged at the gather rate.
RESIDENT_BYTES = 256 * 1024


@dataclass(frozen=True)
class PartStats:
    """Shape-level facts about one part, as :func:`part_stats` computes them.

    Parameters
    ----------
    rows, cols : int
        Shape of the source S_p.
    stored : float
        Entries stored in S_p (nnz, or rows × cols when dense).
    joined : float
        Entries S_p puts into T.
    present : int
        Target rows that take a row of S_p.
    identity : bool
        The part is a fact table (identity indicator).
    sparse : bool
        S_p is sparse.
    referenced : int
        Source rows referred to by at least one target row.
    fanout_max, fanout_cv : float
        Largest fan-out, and its coefficient of variation, over the referenced rows.
    """

    rows: int
    cols: int
    stored: float
    joined: float
    present: int
    identity: bool
    sparse: bool
    referenced: int
    fanout_max: float
    fanout_cv: float


def _is_sparse(source):
    return hasattr(source, "indptr")


def _fanout(indicator):
    """(referenced source rows, max fan-out, coefficient of variation of the fan-out), cached."""

    def build():
        counts = indicator.counts()
        referenced = counts[counts > 0]
        if referenced.size == 0:
            return 0, 0.0, 0.0
        mean = float(referenced.mean())
        return int(referenced.size), float(referenced.max()), float(referenced.std()) / mean

    return indicator.cached("chooser.fanout", build)


def _joined_sparse(indicator, source):
    """Σ_r cnt[r]·nnz(row r of S): the entries a sparse part puts into T, cached per source.

    One indicator can serve several sources (a transformed copy such as ``abs(nm)`` keeps the
    indicators), so the entry is owned by the source."""

    def build():
        counts = indicator.counts()
        per_row = source.indptr[1:] - source.indptr[:-1]
        return float(counts @ per_row.astype(counts.dtype))

    return indicator.cached("chooser.joined", build, owner=source)


def part_stats(part):
    """Shape-level facts about one part, from its metadata (O(n) work cached on the indicator).

    Parameters
    ----------
    part : ilargi.metadata.Part
        A part of a NormalizedMatrix.

    Returns
    -------
    PartStats
        Its statistics.
    """
    source, indicator = part.source, part.indicator
    n_p, d_p = (int(v) for v in source.shape)
    sparse = _is_sparse(source)
    stored = float(source.nnz) if sparse else float(n_p * d_p)
    if indicator.is_identity:
        return PartStats(n_p, d_p, stored, stored, n_p, True, sparse, n_p, 1.0, 0.0)
    present = indicator.n_present
    joined = _joined_sparse(indicator, source) if sparse else float(present * d_p)
    referenced, fanout_max, fanout_cv = _fanout(indicator)
    return PartStats(
        n_p, d_p, stored, joined, present, False, sparse, referenced, fanout_max, fanout_cv
    )


def _join_kind(stats, n):
    """A coarse name of the join from the index vectors: a fact table with all rows present
    ("fact"), a fact table with absent dimension rows ("left"), no fact table and absent rows
    (union or outer join, "union_outer"), or no fact table and every row present ("no_fact":
    many-to-many joins, or a star whose fact table has no features)."""
    has_fact = any(s.identity for s in stats)
    has_absent = any(s.present < n for s in stats)
    if has_fact:
        return "left" if has_absent else "fact"
    return "union_outer" if has_absent else "no_fact"


def _ratio(a, b):
    return a / b if b else float(a > 0) * 1e9


def data_features(nm):
    """The data features of a NormalizedMatrix, from metadata and shapes alone.

    Parameters
    ----------
    nm : NormalizedMatrix
        Untransposed.

    Returns
    -------
    features : dict
        Sizes, ratios, density, redundancy, fan-out and join kind (see :func:`aggregate`).
    stats : list of PartStats
        Per part.
    """
    shift = nm.shift
    has_shift = bool((shift != 0).any()) if nm.shape[1] else False
    stats = [part_stats(p) for p in nm.parts]
    return aggregate(stats, nm.shape, has_shift, np.dtype(nm.dtype).itemsize), stats


# materialize() builds a CSR when it takes at most this share of the dense table's bytes (see
# :mod:`ilargi.chooser.memory`, whose layout follows :func:`materializes_sparse`).
SPARSE_SHARE = 0.5


def csr_bytes(stats, shape, itemsize):
    """Bytes of the joined table as CSR: its entries, their column indices, the row pointers."""
    n, d = shape
    entries = float(sum(s.joined for s in stats))
    index = 4 if max(entries, d) < 2**31 else 8
    return int(entries * (itemsize + index) + (n + 1) * index)


def materializes_sparse(stats, shape, has_shift, itemsize):
    """Whether ``materialize()`` builds the table as CSR: no shifted column, and every part sparse
    or the CSR form at most :data:`SPARSE_SHARE` of the dense bytes. The one rule of the plan
    and of its features."""
    if not stats or has_shift:
        return False
    n, d = shape
    return (
        all(s.sparse for s in stats)
        or csr_bytes(stats, shape, itemsize) <= SPARSE_SHARE * n * d * itemsize
    )


def aggregate(stats, shape, has_shift, itemsize):
    """The data features of a table made of parts with the given statistics.

    Parameters
    ----------
    stats : list of PartStats
        Per part.
    shape : tuple of int
        ``(n, d)`` of the table.
    has_shift : bool
        The table carries a nonzero affine shift (so materializing it is dense).
    itemsize : int
        Bytes per value.

    Returns
    -------
    dict
        Feature name to value.
    """
    n, d = shape
    facts = [s for s in stats if s.identity]
    dims = [s for s in stats if not s.identity]
    d_fact = sum(s.cols for s in facts)
    dim_rows, dim_cols = sum(s.rows for s in dims), sum(s.cols for s in dims)
    stored_fact, stored_dims = sum(s.stored for s in facts), sum(s.stored for s in dims)
    stored = stored_fact + stored_dims
    nnz_t = sum(s.joined for s in stats)
    mat_sparse = materializes_sparse(stats, shape, has_shift, itemsize)
    per_dim_tr = [_ratio(n, s.rows) for s in dims] or [0.0]
    per_dim_fr = [_ratio(s.cols, max(d_fact, 1)) for s in dims] or [0.0]
    sparse_stored = sum(s.stored for s in stats if s.sparse)
    return {
        "n": n,
        "d": d,
        "n_parts": len(stats),
        "n_fact_parts": len(facts),
        "n_dims": len(dims),
        "d_fact": d_fact,
        "dim_rows": dim_rows,
        "dim_cols": dim_cols,
        "dim_rows_max": max((s.rows for s in dims), default=0),
        "stored_fact": stored_fact,
        "stored_dims": stored_dims,
        "stored": stored,
        "nnz_t": nnz_t,
        "tuple_ratio": _ratio(n, dim_rows),
        "feature_ratio": _ratio(dim_cols, max(d_fact, 1)),
        "tr_min": min(per_dim_tr),
        "tr_max": max(per_dim_tr),
        "fr_min": min(per_dim_fr),
        "fr_max": max(per_dim_fr),
        "density_fact": _ratio(stored_fact, sum(s.rows * s.cols for s in facts)),
        "density_dims": _ratio(stored_dims, sum(s.rows * s.cols for s in dims)),
        "density_t": nnz_t / (n * d) if n * d else 0.0,
        "redundancy": _ratio(nnz_t, stored),
        "fanout_max": max((s.fanout_max for s in dims), default=0.0),
        "fanout_mean": _ratio(sum(s.present for s in dims), sum(s.referenced for s in dims)),
        "fanout_cv": max((s.fanout_cv for s in dims), default=0.0),
        "referenced_frac": min((_ratio(s.referenced, s.rows) for s in dims), default=1.0),
        "absent_frac": max((1.0 - s.present / n for s in stats), default=0.0) if n else 0.0,
        "absent_frac_mean": (sum(1.0 - s.present / n for s in stats) / len(stats)) if n else 0.0,
        "join_kind": _join_kind(stats, n),
        "sparse_frac": _ratio(sparse_stored, stored),
        "mat_sparse": int(mat_sparse),
        "has_shift": int(has_shift),
        "itemsize": int(itemsize),
    }


# ---------------------------------------------------------------------------------------------
# FLOP and byte estimates of both plans.


class _Costs:
    """First-order work of each operator, factorized (f) and materialized (m), on one dataset."""

    def __init__(self, stats, data):
        self.n, self.d = data["n"], data["d"]
        self.isz = data["itemsize"]
        self.stats = stats
        self.dims = [s for s in stats if not s.identity]
        self.src = sum(s.stored for s in stats)
        self.src_bytes = sum(s.stored * self._entry_bytes(s.sparse) for s in stats)
        self.mat_sparse = bool(data["mat_sparse"])
        self.t_entries = data["nnz_t"] if self.mat_sparse else float(self.n * self.d)
        self.t_bytes = self.t_entries * self._entry_bytes(self.mat_sparse)
        self.t_row = self.t_entries / self.n if self.n else 0.0

    def _entry_bytes(self, sparse):
        return self.isz + 4 if sparse else self.isz

    def lmm(self, m):
        n, isz, g = self.n, self.isz, len(self.dims)
        f = (2 * m * self.src, self.src_bytes + g * n * (8 + 2 * m * isz) + n * m * isz)
        return f, (2 * m * self.t_entries, self.t_bytes + n * m * isz)

    def tmm(self, m):
        n, isz, g = self.n, self.isz, len(self.dims)
        f = (
            2 * m * self.src + g * n * m,
            self.src_bytes + g * n * (8 + m * isz) + len(self.stats) * n * m * isz,
        )
        return f, (2 * m * self.t_entries, self.t_bytes + n * m * isz)

    def rowsums(self):
        n, g = self.n, len(self.dims)
        return (
            (self.src + g * n, self.src_bytes + g * n * (8 + 2 * self.isz)),
            (self.t_entries, self.t_bytes + n * self.isz),
        )

    def colsums(self):
        return (self.src + sum(s.rows for s in self.dims), self.src_bytes), (
            self.t_entries,
            self.t_bytes,
        )

    def crossprod(self):
        """Gram blocks; a sparse product (SpGEMM) costs far more per multiply-add than BLAS, and a
        sparse result per entry more still: both are counted as byte-equivalents, the factorized
        plan's sparse multiply-adds apart (``cross_sparse_work``, priced by the rule)."""
        flops, sparse_work = 0.0, 0.0
        for p, first in enumerate(self.stats):
            row_p = first.stored / max(first.rows, 1)
            if first.sparse:
                sparse_work += first.stored * row_p
            else:
                flops += first.rows * first.cols**2
            for second in self.stats[p + 1 :]:
                row_q = second.stored / max(second.rows, 1)
                both = min(first.present, second.present)
                work = 2 * (
                    both * min(row_p, row_q) + min(first.rows * second.cols, both * row_q) * row_p
                )
                if first.sparse or second.sparse:
                    sparse_work += work
                else:
                    flops += work
        if self.mat_sparse:
            mat_flops, mat_sparse_work = 0.0, self.t_entries * self.t_row
            out = min(self.d * self.d, mat_sparse_work) * SPARSE_RESULT_BYTES
        else:
            mat_flops, mat_sparse_work = float(self.n) * self.d**2, 0.0
            out = self.d * self.d * self.isz
        self.cross_sparse_work = sparse_work
        return (flops + sparse_work, self.src_bytes + out), (
            mat_flops + mat_sparse_work,
            self.t_bytes + out + SPGEMM_BYTES * mat_sparse_work,
        )

    def gramvec(self):
        (lf, lb), _ = self.lmm(1)
        (tf, tb), _ = self.tmm(1)
        return (lf + tf, lb + tb), (4 * self.t_entries, 2 * self.t_bytes)

    def operator(self, kind, m):
        if kind == "lmm":
            return self.lmm(m)
        if kind in ("rmm", "tmm"):
            return self.tmm(m)
        return getattr(self, kind)()

    def join(self):
        """Building T: write every entry, read every source entry it comes from (the rows some
        target row refers to: a dimension larger than the fact table is read in part)."""
        factor = 3 if self.mat_sparse else 2
        read = sum(
            s.stored * min(1.0, s.referenced / max(s.rows, 1)) * self._entry_bytes(s.sparse)
            for s in self.stats
        )
        return self.t_entries, factor * self.t_bytes + read

    def gathers(self, kind, m):
        """Bytes one pass of an operator reads or writes at random rows, (factorized,
        materialized): the gathers and segment-sums through the index vectors, and a CSR
        product's accesses to its operand's rows by column index. They are among the bytes
        counted above too; a random access costs more than a streamed byte, at the host's
        gather rate (:func:`ilargi.chooser.rules.analytic_seconds`)."""
        n, isz = self.n, self.isz
        csr = self.t_entries * m * isz if self.mat_sparse else 0.0
        if kind in ("lmm", "rmm", "tmm"):
            return self._through_keys(m) * n * m * isz, csr
        if kind == "rowsums":
            return self._through_keys(1) * n * isz, 0.0
        if kind == "colsums":
            return 0.0, (self.t_entries * isz if self.mat_sparse else 0.0)
        if kind == "gramvec":
            return 2 * self._through_keys(1) * n * isz, 2 * csr
        cross = 0.0  # crossprod: each cross block gathers the rows of one side per target row,
        for p, first in enumerate(self.stats):  # at random rows of the smaller side's table
            for second in self.stats[p + 1 :]:
                if self._resident(first) or self._resident(second):
                    continue
                row = min(first.stored / max(first.rows, 1), second.stored / max(second.rows, 1))
                cross += min(first.present, second.present) * row * isz
        return cross, 0.0

    def _through_keys(self, m):
        """The dimensions whose m-wide per-row results (S_p·X_p, or the segment-sums into them)
        are too large to stay in cache: those read or written at random rows."""
        return sum(dim.rows * m * self.isz > RESIDENT_BYTES for dim in self.dims)

    def _resident(self, part):
        return part.stored * self._entry_bytes(part.sparse) <= RESIDENT_BYTES

    def join_gathers(self):
        """Building T reads every entry of it (and, as CSR, its column index) from a source row
        picked by an index vector; those of a dimension that stays in cache are streamed."""
        resident = sum(dim.joined for dim in self.dims if self._resident(dim))
        return max(self.t_entries - resident, 0.0) * self._entry_bytes(self.mat_sparse)


@dataclass
class Work:
    """First-order work of both plans of a workload, as :func:`workload_costs` counts it.

    Parameters
    ----------
    flops_fact, bytes_fact, gather_fact : float
        The factorized plan's FLOPs, bytes moved, and bytes of those at random rows.
    sparse_work_fact : float
        The multiply-adds of the factorized crossprod's blocks with a sparse side (among
        ``flops_fact`` too), which the rule prices apart.
    flops_mat, bytes_mat, gather_mat : float
        The same of the materialized plan (the join excluded).
    flops_common : float
        Work both plans do alike (n × k arithmetic of an estimator, the d × d solve).
    join_flops, join_bytes, join_gather : float
        Building the joined table.
    passes : float
        Operator passes over the data (calls of an operator; per fit, its iterations' calls).
    """

    flops_fact: float = 0.0
    bytes_fact: float = 0.0
    gather_fact: float = 0.0
    sparse_work_fact: float = 0.0
    flops_mat: float = 0.0
    bytes_mat: float = 0.0
    gather_mat: float = 0.0
    flops_common: float = 0.0
    join_flops: float = 0.0
    join_bytes: float = 0.0
    join_gather: float = 0.0
    passes: float = 0.0


def workload_costs(stats, data, workload):
    """First-order FLOP, byte and gather counts of both plans of a workload.

    Parameters
    ----------
    stats : list of PartStats
        Per part.
    data : dict
        The data features (:func:`aggregate`).
    workload : Workload
        The work.

    Returns
    -------
    Work
        The counts.

    Raises
    ------
    ValueError
        For an unknown workload kind.
    """
    costs = _Costs(stats, data)
    kind, m, iters = workload.kind, workload.m, workload.iterations
    n, d = data["n"], data["d"]
    work = Work()

    def add(operator, width=1, times=1):
        (ff, fb), (mf, mb) = costs.operator(operator, width)
        gf, gm = costs.gathers(operator, width)
        work.flops_fact += times * ff
        work.bytes_fact += times * fb
        work.gather_fact += times * gf
        if operator == "crossprod":
            work.sparse_work_fact += times * costs.cross_sparse_work
        work.flops_mat += times * mf
        work.bytes_mat += times * mb
        work.gather_mat += times * gm
        work.passes += times

    if kind in OPERATORS:
        add(kind, m)
    elif kind == "linreg_cholesky":
        add("crossprod")
        add("colsums")
        add("tmm")
        work.flops_common = d**3 / 3 + 2 * d * d
    elif kind in ("linreg_lsqr", "linreg_cg"):
        add("colsums")
        if kind == "linreg_cg":
            add("gramvec", times=iters)
        else:
            add("lmm", times=iters)
            add("tmm", times=iters)
        work.flops_common = iters * 10 * (n + d)
    elif kind in ("logreg_gd", "logreg_lbfgs"):
        add("lmm", m, iters)
        add("tmm", m, iters)
        if kind == "logreg_gd":  # the step size needs max ||x_i||^2: squares, then row sums
            add("rowsums", times=2)
        work.flops_common = iters * 20 * n * m
        if kind == "logreg_lbfgs":  # the two-loop recursion over 10 pairs: 40 d-vector ops
            work.flops_common += iters * 80 * d * m
    elif kind == "logreg_newton":  # per Newton step: the loss pass, D, and ~10 CG gramvec passes
        add("lmm", m, 2 * iters)
        add("tmm", m, 2 * iters)
        add("gramvec", times=10 * iters)
        work.flops_common = iters * (40 * n * m + 100 * d * m)  # ~5 d-vector ops per CG step
    elif kind == "kmeans":
        add("rowsums", times=2)  # ||x||^2 of every row, once
        add("colsums", times=2)  # column variances for the tolerance
        add("lmm", 2 + int(math.log(max(m, 1))), m)  # k-means++ candidates
        add("lmm", m, iters)
        add("tmm", m, iters)
        work.flops_common = iters * 10 * n * m
    elif kind == "gnmf":
        add("rowsums", times=2)  # ||X||^2, once
        add("lmm", m, iters)
        add("tmm", m, iters)
        work.flops_common = iters * (4 * (n + d) * m * m + 10 * n * m)
    else:
        raise ValueError(f"unknown workload kind {kind!r}")
    work.join_flops, work.join_bytes = costs.join()
    work.join_gather = costs.join_gathers()
    return work


# ---------------------------------------------------------------------------------------------
# The device.


@lru_cache(maxsize=None)
def _cores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


CACHES = Path("/sys/devices/system/cpu/cpu0/cache")


@lru_cache(maxsize=None)
def _last_level_cache_mib(caches=CACHES):
    """The largest data cache the OS reports for CPU 0, in MiB (0.0 where it reports none, as
    off Linux). On a virtual machine it is the host's (a shared L3 of several tenants): to the
    cost model a mark of the host, which sets how a factorized plan's small tables and the
    materialized plan's streams compare (sweeps of two hosts of different cache sizes measured
    whole-fit speed-ups far apart on the same data)."""
    sizes = []
    for index in sorted(caches.glob("index*")):
        try:
            kind = (index / "type").read_text().strip()
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        units = {"K": 2**10, "M": 2**20, "G": 2**30}
        if kind != "Instruction" and text[:-1].isdigit() and text[-1] in units:
            sizes.append(int(text[:-1]) * units[text[-1]] / 2**20)
    return max(sizes, default=0.0)


# The device features' columns and their types (a sweep CSV holds them as text): the host's
# probed properties (:mod:`.host`), and the last-level cache the cost models before them read.
DEVICE_COLUMNS = {
    "device": str,
    "cores": int,
    "threads": int,
    "bandwidth_gbs": float,
    "gemm_gflops": float,
    "gather_gbs": float,
    "call_us": float,
    "llc_mib": float,
    "gpu_sms": int,
    "gpu_bandwidth_gbs": float,
    "gpu_memory_gb": float,
}
PROBED = host.RATES


def _cpu_features():
    """This host's probed properties at the thread count both plans run at now (the compiled
    kernels and BLAS alike; measured on first use per thread count, then cached), and the
    last-level cache."""
    measured = host.probe(thread_control.get_num_threads())
    return {
        "device": "cpu",
        **{name: measured[name] for name in host.PROPERTIES},
        "llc_mib": _last_level_cache_mib(),
        "gpu_sms": 0,
        "gpu_bandwidth_gbs": 0.0,
        "gpu_memory_gb": 0.0,
    }


# A GPU is not probed: its rates are nominal (GPU_GEMM_GFLOPS for GEMM, GPU_CALL_US for a kernel
# launch and its Python call, a gather at GPU_GATHER_SHARE of its memory bandwidth).
GPU_GEMM_GFLOPS, GPU_CALL_US, GPU_GATHER_SHARE = 2e4, 10.0, 0.25


@lru_cache(maxsize=None)
def _gpu_features(device_id):
    import cupy

    device = cupy.cuda.Device(device_id)
    attributes = device.attributes
    # Peak bandwidth: two transfers per memory clock (DDR) over the bus width (kHz, bits).
    bandwidth = (
        2
        * attributes.get("MemoryClockRate", 0)
        * 1e3
        * attributes.get("GlobalMemoryBusWidth", 0)
        / 8
        / 1e9
    )
    return {
        "device": "gpu",
        "cores": _cores(),
        "llc_mib": _last_level_cache_mib(),
        "bandwidth_gbs": bandwidth,
        "gemm_gflops": GPU_GEMM_GFLOPS,
        "gather_gbs": GPU_GATHER_SHARE * bandwidth,
        "call_us": GPU_CALL_US,
        "gpu_sms": attributes.get("MultiProcessorCount", 0),
        "gpu_bandwidth_gbs": bandwidth,
        "gpu_memory_gb": device.mem_info[1] / 2**30,
    }


def device_features(device):
    """The device features: cores, threads, the host's probed rates (:mod:`.host`) and the CPU's
    last-level cache, and on a GPU its SMs, bandwidth and memory (its rates nominal).

    Parameters
    ----------
    device : {"cpu", "gpu"}
        For "gpu", the current CUDA device is described; read once per process.

    Returns
    -------
    dict
        Feature name to value.

    Raises
    ------
    ValueError
        For "gpu" without CuPy.
    """
    if device == "cpu":
        return _cpu_features()
    try:
        import cupy
    except ImportError as error:
        raise ValueError("device 'gpu' needs CuPy (pip install ilargi[gpu])") from error
    return {
        **_gpu_features(cupy.cuda.runtime.getDevice()),
        "threads": thread_control.get_num_threads(),
    }


# ---------------------------------------------------------------------------------------------
# Everything together.

# Data features per NormalizedMatrix: it never changes once built (operations derive new ones),
# so repeated decisions on one matrix only add the workload's part. Keyed by id, with a weak
# reference that drops the entry when the matrix goes: a WeakKeyDictionary would compare keys
# with ==, which is elementwise for a matrix (as for a NumPy array).
_DATA: dict = {}


def _cached_data_features(nm):
    key = id(nm)
    entry = _DATA.get(key)
    if entry is None or entry[0]() is not nm:
        entry = _DATA[key] = (
            weakref.ref(nm, lambda _, key=key: _DATA.pop(key, None)),
            data_features(nm),
        )
    return entry[1]


def extract(nm, workload, device=None):
    """The features of running a workload on a NormalizedMatrix.

    Parameters
    ----------
    nm : NormalizedMatrix
        Untransposed; its data features are cached per matrix.
    workload : Workload
        The work.
    device : {"cpu", "gpu"}, optional
        Default: where nm's sources live.

    Returns
    -------
    dict
        Feature name to value: data, workload, cost estimates and device.

    Examples
    --------
    >>> from ilargi.chooser.features import extract
    >>> from ilargi.chooser.workload import Workload
    >>> from ilargi.datasets import make_star
    >>> nm, _ = make_star(100, tuple_ratio=10, target=None, random_state=0)
    >>> features = extract(nm, Workload("lmm", 4), "cpu")
    >>> features["n"], features["d"], features["tuple_ratio"], features["workload"]
    (100, 20, 10.0, 'lmm')
    """
    data, stats = _cached_data_features(nm)
    return combine(data, stats, workload, device or nm.device)


def combine(data, stats, workload, device, machine=None):
    """The features of a workload on a device, for a table with known data features.

    Parameters
    ----------
    data : dict
        The data features (:func:`data_features`).
    stats : list of PartStats
        Per part.
    workload : Workload
        The work.
    device : {"cpu", "gpu"}
        The device.
    machine : dict, optional
        The device features of the machine described (:func:`device_features`), default this
        one's now: a sweep's rows carry those of the machine that timed them.

    Returns
    -------
    dict
        Feature name to value.
    """
    work = workload_costs(stats, data, workload)
    ff, fb, mf, mb = work.flops_fact, work.bytes_fact, work.flops_mat, work.bytes_mat
    common, jf, jb = work.flops_common, work.join_flops, work.join_bytes
    features = dict(data)
    features.update({"workload": workload.kind, "m": workload.m, "iterations": workload.iterations})
    features.update(asdict(work))
    features.update(
        {
            "flop_ratio": (mf + common) / max(ff + common, 1.0),
            "byte_ratio": mb / max(fb, 1.0),
            "join_per_run": jb / max(mb, 1.0),
        }
    )
    features.update(device_features(device) if machine is None else machine)
    flop_rate, byte_rate = RATES[features["device"]]
    seconds_fact = (ff + common) / flop_rate + fb / byte_rate
    seconds_mat = (mf + common) / flop_rate + mb / byte_rate
    features["seconds_fact"], features["seconds_mat"] = seconds_fact, seconds_mat
    features["time_ratio"] = seconds_mat / max(seconds_fact, 1e-12)
    features["join_time_ratio"] = (jf / flop_rate + jb / byte_rate) / max(seconds_fact, 1e-12)
    features.update(rules.analytic_features(features))
    return features


def vector(features, columns):
    """The features as the cost model's input row.

    Parameters
    ----------
    features : dict
        Feature name to value.
    columns : list of str
        The cost model's columns, in order.

    Returns
    -------
    list of float
        The values in ``columns`` order, categorical values as their codes.
    """
    return [
        float(CATEGORICAL[c].index(features[c])) if c in CATEGORICAL else float(features[c])
        for c in columns
    ]
