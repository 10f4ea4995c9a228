"""Indicator matrices: which source row feeds which target row.

The indicator I_p of a part is the n × n_p 0/1 matrix of the paper. It is stored as an index vector
``rows`` of length n (values in [0, n_p), or -1 where the target row takes nothing from this source),
or as ``None`` for the identity (the fact table itself). Structures that kernels derive from it
(counts, a CSR form of Iᵀ, rows with absent entries redirected) never change, so they are built once
and cached on the indicator, where every operator and every iteration of a training loop reuses them.
"""
import numpy as np
import scipy.sparse as sp

from ilargi.backend import backend_of, namespace_of


def check_index_vector(values, length, upper, what, allow_absent=True):
    """Validate an integer index vector: dtype, 1-D, length and range; returns it as intp.

    Raises TypeError for non-integer values and ValueError (naming ``what``) for the rest.
    """
    xp = namespace_of(values)
    values = xp.asarray(values)
    if values.dtype.kind not in "iu":
        raise TypeError(f"{what} must be an integer index vector, got dtype {values.dtype}")
    if values.ndim != 1:
        raise ValueError(f"{what} must be 1-D, got shape {values.shape}")
    if length is not None and values.shape[0] != length:
        raise ValueError(f"{what} has length {values.shape[0]}, expected {length}")
    if values.size:
        low, high = int(values.min()), int(values.max())
        floor = -1 if allow_absent else 0
        if low < floor or high >= upper:
            bad = low if low < floor else high
            allowed = f"[{floor}, {upper})" + (" (-1 = absent)" if allow_absent else "")
            raise ValueError(f"{what} has index {bad} out of range {allowed}")
    return values.astype(xp.intp, copy=False)


def _function(fine, coarse, n_fine, probe=1 << 16):
    """f with coarse = f[fine] wherever fine ≥ 0, or None. Most pairs of tables are not functions
    of each other, which the first rows usually show, so those are checked first."""
    xp = namespace_of(fine)
    if fine.shape[0] > 4 * probe and _function(fine[:probe], coarse[:probe], n_fine) is None:
        return None
    present = fine >= 0
    rows_fine, rows_coarse = fine[present], coarse[present]
    mapped = xp.full(n_fine, -1, dtype=xp.intp)
    mapped[rows_fine] = rows_coarse
    return mapped if bool((mapped[rows_fine] == rows_coarse).all()) else None


class Indicator:
    """I_p as an index vector over target rows (-1 = absent) or the identity (``rows=None``)."""

    __slots__ = ("rows", "n_rows", "n_source", "n_absent", "_cache")

    def __init__(self, rows, n_source, n_rows=None, *, what="indicator", validate=True):
        if rows is None:
            if n_rows is not None and n_rows != n_source:
                raise ValueError(
                    f"{what} is the identity, so its source needs {n_rows} rows, got {n_source}")
            self.rows, self.n_rows, self.n_absent = None, int(n_source), 0
        else:
            if validate:
                rows = check_index_vector(rows, n_rows, n_source, what)
            self.rows, self.n_rows = rows, int(rows.shape[0])
            self.n_absent = int((rows < 0).sum()) if rows.size else 0
        self.n_source = int(n_source)
        self._cache = {}

    @property
    def is_identity(self):
        return self.rows is None

    @property
    def n_present(self):
        """Number of target rows that take a row of this source."""
        return self.n_rows - self.n_absent

    def cached(self, key, build):
        """The structure stored under ``key``, built by ``build()`` on first use."""
        value = self._cache.get(key)
        if value is None:
            value = self._cache[key] = build()
        return value

    def present(self):
        """Boolean mask of target rows that take a row of this source."""
        if self.rows is None:
            return np.ones(self.n_rows, dtype=bool)
        return self.rows >= 0

    def counts(self):
        """cnt_p: how many target rows take each source row (float, cached)."""
        return self.cached("counts", lambda: backend_of(self.rows).counts(self))

    def index_vector(self):
        """``rows`` with the identity spelled out as 0..n-1."""
        return np.arange(self.n_rows) if self.rows is None else self.rows

    def take(self, idx):
        """The indicator of the target rows ``idx`` (row selection; idx already validated)."""
        rows = idx if self.rows is None else self.rows[idx]
        return Indicator(rows, self.n_source, validate=False)

    def function_of(self, fine):
        """f with self.rows = f[fine.rows] wherever fine.rows ≥ 0 (f = -1 where this source is absent),
        or None if a source row of ``fine`` meets two rows of this source. Cached on ``fine``."""
        key = ("function", id(self))
        entry = fine._cache.get(key)
        if entry is None or entry[0] is not self:
            entry = fine._cache[key] = (self, _function(fine.rows, self.rows, fine.n_source))
        return entry[1]

    def through(self, fine):
        """The indicator F (fine's source rows × this source's rows) with I_self = I_fine · F, or None.

        It exists when every source row of ``fine`` meets one row of this source (a functional
        dependency, as in a snowflake: each order has one customer) and this source is absent
        wherever ``fine`` is. Gathers through I_self may then gather F first on the small source
        and segment-sums aggregate fine's sums further, so one n-long pass serves both.
        """
        if self.rows is None or fine.rows is None or fine.n_rows != self.n_rows:
            return None
        key = ("through", id(self))
        entry = fine._cache.get(key)
        if entry is None or entry[0] is not self:
            mapped = self.function_of(fine)
            if mapped is not None and fine.n_absent and bool((self.rows[fine.rows < 0] >= 0).any()):
                mapped = None
            factor = None if mapped is None else Indicator(mapped, self.n_source, validate=False)
            entry = fine._cache[key] = (self, factor)
        return entry[1]

    def tocsr(self):
        """The n × n_p 0/1 indicator matrix of the paper, as ``scipy.sparse.csr_array``."""
        rows = np.asarray(self.index_vector())
        if not self.n_absent:  # one entry per row: the index vector is the CSR's column indices
            return sp.csr_array((np.ones(self.n_rows), rows.copy(), np.arange(self.n_rows + 1)),
                                shape=(self.n_rows, self.n_source))
        present = np.flatnonzero(rows >= 0)
        indptr = np.zeros(self.n_rows + 1, dtype=np.int64)
        np.cumsum(rows >= 0, out=indptr[1:])
        return sp.csr_array((np.ones(present.size), rows[present], indptr),
                            shape=(self.n_rows, self.n_source))

    def __repr__(self):
        kind = "identity" if self.rows is None else f"{self.n_absent} absent"
        return f"<Indicator {self.n_rows} × {self.n_source}, {kind}>"


def mapping_matrix(cols, d):
    """The d × d_p 0/1 mapping matrix M_p of the paper for the mapping vector ``cols``."""
    cols = np.asarray(cols)
    return sp.csr_array((np.ones(cols.size), (cols, np.arange(cols.size))), shape=(d, cols.size))
