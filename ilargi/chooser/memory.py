"""How the joined table would be materialized, what it would cost in memory, and what is free.

:func:`layout` is the single rule both sides follow: ``NormalizedMatrix.materialize()`` builds
the table in the format it names, and :func:`ilargi.choose` refuses to pick the materialized plan
when its peak does not fit in :func:`available_bytes`. Sizes come from metadata alone (the
entries each part puts into T are counted once per indicator and cached, see
:func:`~ilargi.chooser.features.part_stats`); no value is read.

The format: CSR when no column is shifted (b = 0: a nonzero shift fills its column) and either
every source is sparse (as always) or the table is mostly zeros — its CSR form taking at most
half the bytes of the dense one, i.e. a density below about 1/3 — whatever mix of dense and
sparse parts makes it (a one-hot dimension of 100,000 levels next to one numeric column is
99.999 % zeros: 3 MiB as CSR, 74.5 GiB dense). Dense otherwise.
"""

import functools
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ilargi._config import get_config

from .features import csr_bytes, materializes_sparse, part_stats

# The chooser leaves this share of the available memory to everything else (the plan's own
# temporaries, other processes): a materialized plan must fit in the rest.
BUDGET = 0.8


@dataclass(frozen=True)
class Layout:
    """How :meth:`NormalizedMatrix.materialize` would build the table, and its size.

    Parameters
    ----------
    sparse : bool
        Built as CSR (else a dense array).
    nbytes : int
        Bytes of the result.
    peak : int
        Bytes held at once while building it (the result and its temporaries).
    entries : float
        Stored entries: n·d dense, the entries the parts put into T as CSR.
    """

    sparse: bool
    nbytes: int
    peak: int
    entries: float

    def describe(self):
        """The format and size in words, e.g. ``"dense float table of 74.5 GiB"``."""
        kind = "CSR" if self.sparse else "dense"
        return f"{kind} table of {format_bytes(self.nbytes)} (peak {format_bytes(self.peak)})"


def format_bytes(nbytes):
    """``nbytes`` in B, KiB, MiB, GiB or TiB, three significant digits."""
    value = float(nbytes)
    if value < 1024:
        return f"{int(value)} B"
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024:
            return f"{value:.3g} {unit}"
    value /= 1024
    return f"{value:.3g} TiB"


def layout(nm):
    """The format and size of ``nm.materialize()`` (untransposed T), from metadata alone.

    Parameters
    ----------
    nm : NormalizedMatrix

    Returns
    -------
    Layout

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> from ilargi import NormalizedMatrix
    >>> n, levels = 1000, 500
    >>> one_hot = sp.eye(levels, format="csr")
    >>> fk = np.arange(n) % levels
    >>> nm = NormalizedMatrix.from_parts([np.ones((n, 1)), one_hot], [None, fk],
    ...                                  [[0], np.arange(1, levels + 1)], (n, levels + 1))
    >>> layout(nm).sparse, layout(nm + 1.0).sparse
    (True, False)
    """
    n, d = (int(v) for v in nm.shape)
    if nm.transposed:
        d, n = n, d
    itemsize = np.dtype(nm.dtype).itemsize
    stats = [part_stats(p) for p in nm.parts]
    dense_bytes = n * d * itemsize
    largest_block = max((n * s.cols * itemsize for s in stats), default=0)
    dense = Layout(False, dense_bytes, dense_bytes + largest_block, float(n * d))
    has_shift = bool(d) and bool((nm.shift != 0).any())
    if not materializes_sparse(stats, (n, d), has_shift, itemsize):
        return dense
    nbytes = csr_bytes(stats, (n, d), itemsize)
    # Building it holds the per-part blocks, their stacked copy and the result at once.
    return Layout(True, nbytes, 3 * nbytes, float(sum(s.joined for s in stats)))


# Where the kernel shows the process's control groups and its memory use (tests point these at
# folders of their own).
CGROUP_ROOT = "/sys/fs/cgroup"
PROC_SELF = "/proc/self"
# cgroup v1 writes "no limit" as a number near 2**63 (rounded down to a page).
UNLIMITED = 1 << 60


def _read(path):
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError):
        return None


def _number(path):
    """The integer in a cgroup file; None when absent, "max" (no limit) or not a number."""
    text = _read(path)
    try:
        value = int(text.strip())
    except (AttributeError, ValueError):  # absent, "max", or garbage
        return None
    return None if value >= UNLIMITED else value


def _stat(path, key):
    """A field of a cgroup's ``memory.stat`` (bytes), 0 if absent."""
    for line in (_read(path) or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return 0


def _cgroup_dirs(controller_root, path):
    """The process's cgroup folder under a controller's mount, then its ancestors up to the
    mount (each level's limit applies); just the mount when the path is not visible there (a
    container shows its own cgroup as the root)."""
    root = Path(controller_root)
    own = root / path.lstrip("/")
    if not own.is_dir():
        return [root]
    dirs = [own]
    while dirs[-1] != root and root in dirs[-1].parents:
        dirs.append(dirs[-1].parent)
    return dirs


def cgroup_headroom():
    """Bytes the process's control group (and each one above it) can still take, the least.

    cgroup v2 (``memory.max - memory.current``) and v1 (``memory.limit_in_bytes -
    memory.usage_in_bytes``); the inactive file cache, which the kernel reclaims before it
    fails an allocation, counts as free, as psutil counts it. The groups and their limits are
    found once per process (:func:`_limited_groups`); only the usage is read on each call.

    Returns
    -------
    int or None
        None where no cgroup limits memory (or none is visible).
    """
    headrooms = []
    for limit, usage, stat, reclaimable in _limited_groups(str(CGROUP_ROOT), str(PROC_SELF)):
        used = (_number(usage) or 0) - _stat(stat, reclaimable)
        headrooms.append(max(0, limit - max(0, used)))
    return min(headrooms) if headrooms else None


@functools.lru_cache(maxsize=8)
def _limited_groups(cgroup_root, proc_self):
    """(limit, usage file, stat file, reclaimable field) of each cgroup level that limits the
    process's memory. Found once: walking the groups reads a dozen cgroupfs files (a large share
    of a plan decision's time budget), and limits are set when a container or job starts."""
    groups = []
    for line in (_read(Path(proc_self) / "cgroup") or "").splitlines():
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if number == "0" and controllers == "":  # v2: one hierarchy (hybrid: under unified/)
            mounts = [Path(cgroup_root), Path(cgroup_root) / "unified"]
            files = ("memory.max", "memory.current", "inactive_file")
        elif "memory" in controllers.split(","):
            mounts = [Path(cgroup_root) / "memory"]
            files = ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
        else:
            continue
        for mount in mounts:
            for folder in _cgroup_dirs(mount, path):
                limit = _number(folder / files[0])
                if limit is not None:
                    groups.append((limit, folder / files[1], folder / "memory.stat", files[2]))
    return tuple(groups)


def rlimit_headroom():
    """Bytes the process may still map under ``ulimit -v`` (RLIMIT_AS, against its address
    space) and ``ulimit -d`` (RLIMIT_DATA, against its data segment), the least.

    Returns
    -------
    int or None
        None where neither is limited.
    """
    try:
        import resource
    except ImportError:  # not a POSIX system
        return None
    # statm, in pages: size (the address space) first, data (+ stack) sixth
    in_use = {"RLIMIT_AS": 0, "RLIMIT_DATA": 5}
    limits = {}
    for name, field in in_use.items():
        kind = getattr(resource, name, None)
        soft = resource.getrlimit(kind)[0] if kind is not None else resource.RLIM_INFINITY
        if soft != resource.RLIM_INFINITY and soft >= 0:
            limits[field] = soft
    if not limits:  # the usual case: no file read
        return None
    fields = (_read(Path(PROC_SELF) / "statm") or "").split()
    page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
    headrooms = []
    for field, soft in limits.items():
        used = int(fields[field]) * page if len(fields) > field and fields[field].isdigit() else 0
        headrooms.append(max(0, soft - used))
    return min(headrooms)


def _physical_available():
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # not a POSIX system that reports it
        return None


def available_bytes(device="cpu"):
    """Memory free for a new table on ``device``, in bytes.

    CPU: the least of the machine's available memory (``psutil.virtual_memory().available``,
    what can be allocated without swapping, page cache included; the free physical pages of
    ``os.sysconf`` without psutil), what the process's control group still allows (cgroup v2
    ``memory.max`` or v1 ``memory.limit_in_bytes``, :func:`cgroup_headroom`) and what
    ``ulimit -v`` / ``ulimit -d`` still allow (:func:`rlimit_headroom`): a container or a
    limited shell fails an allocation long before the machine runs out. GPU: the device's free
    memory. The ``available_memory`` setting (bytes; :func:`ilargi.get_config`,
    ``$ILARGI_AVAILABLE_MEMORY`` by default) overrides both, e.g. to model a smaller machine.

    Parameters
    ----------
    device : {"cpu", "gpu"}, default="cpu"

    Returns
    -------
    int or None
        None when it cannot be told (then nothing is refused for lack of memory).
    """
    override = get_config()["available_memory"]
    if override is not None:
        return override
    if device == "gpu":
        from ilargi.backend import backend_for_device, optional

        free = optional(backend_for_device("gpu"), "free_memory")
        return None if free is None else int(free())
    known = [
        b for b in (_physical_available(), cgroup_headroom(), rlimit_headroom()) if b is not None
    ]
    return min(known) if known else None


def require(nbytes, what, device="cpu", budget=BUDGET):
    """Refuse, before allocating it, a result of ``nbytes`` that does not fit in ``budget`` x
    the available memory (:func:`available_bytes`): e.g. the d x d ``crossprod`` of a very
    wide matrix.

    Parameters
    ----------
    nbytes : int
        Bytes of the result.
    what : str
        The result in words, for the message (e.g. ``"the 200000 x 200000 crossprod"``).
    device : {"cpu", "gpu"}, default="cpu"
    budget : float, default=BUDGET
        Share of the available memory the result may take.

    Raises
    ------
    MemoryError
        Naming the result, its size and the memory available.

    Examples
    --------
    >>> require(8 * 1000 * 1000, "the 1000 x 1000 crossprod")
    """
    available = available_bytes(device)
    if available is not None and nbytes > budget * available:
        raise MemoryError(
            f"{what} needs {format_bytes(nbytes)}, more than {budget:.0%} of the "
            f"{format_bytes(available)} available on the {device}"
        )


def fits(nm, device="cpu", budget=BUDGET):
    """(whether ``nm.materialize()`` fits in ``budget`` × the available memory, in words).

    Parameters
    ----------
    nm : NormalizedMatrix
    device : {"cpu", "gpu"}, default="cpu"
    budget : float, default=BUDGET
        Share of the available memory the table may take at its peak.

    Returns
    -------
    (bool, str)
    """
    planned = layout(nm)
    available = available_bytes(device)
    if available is None:
        return True, f"materializing builds a {planned.describe()}; free memory unknown"
    verdict = planned.peak <= budget * available
    relation = "fits in" if verdict else "does not fit in"
    return verdict, (
        f"materializing builds a {planned.describe()}, which {relation} "
        f"{budget:.0%} of the {format_bytes(available)} available on the {device}"
    )


def lightgbm_bytes(n, d, entries, sparse, trees_per_round=1):
    """Bytes LightGBM adds to a table of ``n`` rows and ``d`` features while it trains on it
    with bins built from every row (``bin_construct_sample_cnt`` > n, as
    :class:`ilargi.GradientBoostingRegressor`'s materialized plan asks), an upper estimate.

    * the bin finder's sample: every stored value as a double and its row as an int (12 bytes
      an entry; LightGBM skips zeros, counted here);
    * the binned data: a byte per row and feature in the feature groups and again in the
      row-wise copy a ``force_row_wise`` histogram reads (two bytes per entry and eight per row
      for a sparse table);
    * per row: gradients and hessians (float32) and the score (float64) of each tree of a
      round, the label, the weight and the row's index in its leaf (12 bytes).

    Parameters
    ----------
    n, d : int
        Rows and features of the table.
    entries : float
        Its stored entries (n·d dense, the nonzeros of CSR).
    sparse : bool
        Whether LightGBM reads it as CSR.
    trees_per_round : int, default=1
        Trees per boosting round (the classes of a multiclass model).

    Returns
    -------
    int

    Examples
    --------
    >>> lightgbm_bytes(1000, 10, 10_000, sparse=False)
    168000
    """
    binned = 2 * entries + 8 * n if sparse else 2 * n * d
    return int(12 * entries + binned + 16 * n * trees_per_round + 12 * n)
