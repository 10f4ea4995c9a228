"""Binned tables and leaf histograms for gradient-boosted trees on a NormalizedMatrix.

A tree learner on histograms needs, per feature, bin edges and each row's bin; per leaf (a set of
target rows) and feature, the sums of (gradient, hessian, count) by bin. On T = Σ_p I_p S_p M_pᵀ
neither needs the joined table:

* **Bins from the joined column's distribution.** A target column is fed by one or more parts
  with disjoint rows (a union's inputs); stacked, their rows form one *binned table* with one index
  vector (row 0 of it the absent row, which holds the column's NULL value b_j, as the materialized
  table does). Each table row weighs the number of target rows that take it (a bincount of the
  index vector), so the weighted distinct values are those of the materialized column, and the
  bin edges (LightGBM's rule, :func:`~ilargi.rewriter.bin_edges.bin_upper_bounds`) equal those
  found on it. Codes are uint8, stored per table row, never per target row
  (:mod:`~ilargi.rewriter.binning`).
* **Leaf histograms by foreign key.** A leaf's histogram of a dimension's features is the
  segment-sum of (g, h, 1) over the leaf's rows by foreign key (``leaf_sums``), then one pass over
  the dimension's rows adding those sums by bin code (``bin_histograms``); where the leaf has fewer
  rows than the dimension, the codes are read through the index vector row by row instead. Fact
  features are summed directly. Snowflake dimensions need nothing else: their index vectors are
  composed to target rows already.
* **Splits through the foreign keys.** A split on a dimension feature is a mask over the
  dimension's rows (code <= threshold), gathered through the index vector to route target rows.

The kernels are the backend's (:class:`ilargi.backend.contract.OptionalKernels`, compiled and
parallel on the CPU once built, NumPy's ``bincount`` before); every result equals the one on the
materialized, binned table, sums to rounding: they are added in another order (by key, by block,
from joint codes), which for double sums of single-precision gradients changes no bit at the
sizes measured (tests/rewriter/test_histograms.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np

from ilargi.backend import backend_of
from ilargi.backend.contract import Array, optional

from .bin_edges import (
    MAX_BIN,
    NO_VALUES,
    all_found,
    binning_kernels,
)
from .binning import (
    BinnedTable,
    binned_tables,
    is_sparse_table,
    merged_tables,
    per_target_tables,
)

if TYPE_CHECKING:
    from .normalized import NormalizedMatrix


# ---------------------------------------------------------------------------------------------
# The binned matrix.


class FactPass:
    """The fact table's codes as a leaf's pass reads them: features of few bins coded jointly.

    The pass adds each row's gradient and hessian into one bin per codes column: two stores a
    column, which bound its speed. Features whose bins multiply to at most 256 share a column,
    their joint code c0 + b0·(c1 + b1·c2) (bins b0, b1, ...); each one's histogram is then a sum
    of the joint histogram over the others' codes, a few hundred bins a leaf against a store
    per row. TPC-H's 20 lineitem, orders, part and nation features take 12 columns so.

    Attributes
    ----------
    codes : ndarray of uint8, shape (n, columns)
        Per target row and column, the code (the table's own codes where no features share).
    bins : ndarray of intp, shape (columns,)
        Each column's bins.
    width : int
        The most bins of a column.
    """

    def __init__(self, codes, groups, bins, offsets):
        self.codes = codes
        self.bins = np.array(
            [int(np.prod([bins[c] for c in group])) for group in groups], dtype=np.intp
        )
        self.width = int(self.bins.max(initial=1))
        # a feature alone in its column: its histogram is the column's (q, first row, bins)
        self._alone = [
            (q, int(offsets[g[0]]), int(bins[g[0]])) for q, g in enumerate(groups) if len(g) == 1
        ]
        # the features sharing columns: each joint bin p of column q adds to one row of each
        # feature, the row of its code (p // stride) % bins; summed by one bincount a leaf (the
        # rows of a feature's bin in increasing p), three sums a row
        src, dst = [], []
        for q, group in enumerate(groups):
            if len(group) == 1:
                continue
            p = np.arange(self.bins[q])
            stride = 1
            for c in group:
                src.append(q * self.width + p)
                dst.append(offsets[c] + (p // stride) % bins[c])
                stride *= int(bins[c])
        self._shared = None
        if src:
            rows, local = np.unique(np.concatenate(dst), return_inverse=True)
            self._shared = (
                np.concatenate(src),
                (3 * local[:, None] + np.arange(3)).ravel(),
                rows,
            )

    @classmethod
    def of(cls, table: BinnedTable, n_bins: Array, offsets: Array) -> tuple[FactPass, Array | None]:
        """Group the table's features (bins ``n_bins``, first rows in a leaf's histograms
        ``offsets``) by increasing bins while their product is at most 256.

        Returns the pass and, where features share columns, the table's codes column by column
        (its row-major codes are then read by nothing else: splits and ``goes_left`` read a
        column at a time, from its own cache lines); where no column is saved, the pass reads
        the table's own codes and None is returned.
        """
        bins = np.maximum(np.asarray(n_bins, dtype=np.intp), 1)
        groups: list[list[int]] = []
        product = MAX_BIN + 2
        for c in np.argsort(bins, kind="stable"):
            if product * bins[c] <= MAX_BIN + 1:
                groups[-1].append(int(c))
                product *= int(bins[c])
            else:
                groups.append([int(c)])
                product = int(bins[c])
        k = table.codes.shape[1]
        if len(groups) == k:  # no column saved: the table's codes, in its order
            return cls(table.codes, [[c] for c in range(k)], bins, offsets), None
        codes, by_column = binning_kernels()[3](table.codes, groups, bins)
        return cls(codes, groups, bins, offsets), by_column

    def scatter(self, out: Array, hist: Array) -> None:
        """Each feature's rows of ``out`` from the pass's histograms (columns × width × 3)."""
        for q, at, bins in self._alone:
            out[at : at + bins] = hist[q, :bins]
        if self._shared is not None:
            src, index, rows = self._shared
            values = hist.reshape(-1, 3)[src].ravel()
            out[rows] = np.bincount(index, weights=values, minlength=3 * rows.size).reshape(-1, 3)


@dataclass(frozen=True)
class Candidates:
    """The features a leaf's histograms are built for (those it may split on: LightGBM's
    splittable features of its parent), with where their bins lie.

    Attributes
    ----------
    features : ndarray of intp
        Sorted features.
    offsets, n_bins : ndarray of intp
        Their first row in a leaf's histograms and their bins.
    sparse_jobs : ndarray of intp
        Their jobs of ``sparse_histograms`` (the sparse ones' columns).
    """

    features: Array
    offsets: Array
    n_bins: Array
    sparse_jobs: Array


# Where a split's side is found through a table's inverse index: a target row reached so costs
# about this many of a scan of the leaf's list (gathered from anywhere, not read in order).
INVERSE_COST = 2


class BinnedMatrix:
    """A NormalizedMatrix's features as bin codes per source table: what a histogram tree learner
    reads, never built per target row.

    Build one with :meth:`from_matrix` (bin edges from the data, or given ones to bin new data
    like the training data).

    Attributes
    ----------
    n : int
        Target rows.
    bounds : list of ndarray
        Per feature, the bins' upper bounds (the last +inf).
    tables : list of BinnedTable
        The tables of codes; each feature with more than one value is in one of them.
    constant : ndarray of uint8
        Per feature, its code where no table holds it (a column no part covers).
    ranges : list of (float, float) or None
        Per feature, the least and the greatest value (zero for values within 1e-35 of it), as
        LightGBM reports them; None for a matrix binned with given bounds.
    columns : list of str or None
        The features' names (the matrix's column names).
    binning : (int, int) or None
        The ``(max_bin, min_data_in_bin)`` the bins were found with; None for given bounds.
    categorical : dict of int to bool
        The categorical features: their bins are categories (``bounds[j]`` holds each bin's
        category, bin 0's -1, :func:`~ilargi.rewriter.bin_edges.category_bins`), each with
        whether some category has no bin of its own (then in bin 0 with unseen ones).
    nan_bin : ndarray of bool, shape (d,)
        The numerical features with a last bin of NaN values (LightGBM's missing type NaN; their
        last bound is NaN): each split learns where NaN goes. Elsewhere NaN is binned as 0.
    nan_features : dict of int to int
        The features with a bin of NaN whose bins were found from this matrix, each with its most
        frequent bin as LightGBM finds it
        (:func:`~ilargi.rewriter.bin_edges.most_frequent_bin`).

    A slice of rows, ``B[lo:hi]``, is a BinnedMatrix of those target rows that shares the codes
    (no copy), as a NormalizedMatrix's row slice shares its sources; integer positions or a
    boolean mask select rows too (a copy of what they index).
    """

    def __init__(self, n, bounds, tables, constant, ranges=None, columns=None):
        self.n = int(n)
        self.ranges = ranges
        self.columns = None if columns is None else list(columns)
        self.bounds = list(bounds)
        self.tables = list(tables)
        self.constant = np.asarray(constant, dtype=np.uint8)
        d = len(self.bounds)
        self.table_of = np.full(d, -1, dtype=np.intp)
        self.column_of = np.zeros(d, dtype=np.intp)
        for t, table in enumerate(self.tables):
            self.table_of[table.features] = t
            self.column_of[table.features] = np.arange(table.features.size)
        self._alone = np.flatnonzero(self.table_of < 0)  # features no table holds
        self.n_bins = np.array([b.size for b in self.bounds], dtype=np.intp)
        self.nan_bin = np.array([bool(np.isnan(b[-1])) for b in self.bounds], dtype=bool)
        self.max_bins = int(self.n_bins.max(initial=1))
        # a leaf's histograms: each feature's bins in a range of rows of one (total bins × 3)
        # array, not a (d × max_bins × 3) one (one feature of 255 bins among thousands of
        # one-hot ones would make every leaf's array a hundred times larger)
        self.offsets = np.zeros(d + 1, dtype=np.intp)
        np.cumsum(self.n_bins, out=self.offsets[1:])
        self.total_bins = int(self.offsets[-1])
        self._stacked: Any = None
        self._scatters: dict = {}
        self._sparse_columns()
        self._codes_t: Any = None
        self._first_column: dict = {}
        self._jobs: dict = {}
        # the leaf pass's buffers, kept from leaf to leaf (the backend's; a leaf's sums by key
        # then cost its rows, not its tables')
        self._pass_scratch: dict = {}
        self._kernels: tuple = (None, None)
        self._weights: dict = {}  # per keyed table, the target rows that read each codes row
        self._inverses: dict = {}  # per keyed table, its inverse index (split)
        self._split_columns: dict = {}  # per (table, column) split on: its codes, contiguous
        self._flags: Any = None
        self._clean: Any = None  # zero bins, left zero: the backend's subtract_held's
        self.binning: tuple[int, int] | None = None
        self.categorical: dict[int, bool] = {}
        # the features with a bin of NaN whose bins were found here, each with LightGBM's most
        # frequent bin (its scan for NaN's direction sums bin 0 apart where that is bin 0)
        self.nan_features: dict[int, int] = {}
        self._layout()

    def _layout(self):
        """What every leaf's :meth:`leaf_histograms` reads of the tables, found once: the fact
        table (with its features' widest bins and bins), the dense keyed tables by their rows,
        and the dense tables read through their index vectors whatever the leaf."""
        self._fact = next((t for t, table in enumerate(self.tables) if table.rows is None), None)
        self._fact_pass: Any = None  # the fact codes the leaf pass reads (_fact_codes)
        self._every_row_hessians: Any = None  # (hessians' key, fact histograms' Σh of every row)
        self._dense_keyed = [
            (t, table.n_rows)
            for t, table in enumerate(self.tables)
            if table.rows is not None and not is_sparse_table(table)
        ]
        # tables of codes per target row besides the fact table (none from from_matrix), read
        # whatever the leaf (more rows than any)
        self._dense_other = [
            (t, self.n + 1)
            for t, table in enumerate(self.tables)
            if table.rows is None and t != self._fact and not is_sparse_table(table)
        ]
        self._pass_args: dict = {}  # per keyed tables: their rows of the stacked keys, rows

    @property
    def d(self) -> int:
        """Features."""
        return len(self.bounds)

    @property
    def shape(self) -> tuple[int, int]:
        """(target rows, features)."""
        return self.n, self.d

    def __reduce__(self):
        # its bins and codes: the learner's buffers and kernels kept here are made again
        fields = (self.n, self.bounds, self.tables, self.constant, self.ranges, self.columns)
        return _unpickled, (fields, self.binning, self.categorical, self.nan_features)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, rows: Any) -> BinnedMatrix:
        """Target rows: a slice of step 1 (codes and index vectors as views), or integer
        positions or a boolean mask (copies). The bins stay those found before, as the rows of
        a LightGBM Dataset keep its bins (cross-validation folds, model selection)."""
        if isinstance(rows, tuple) and len(rows) == 2 and rows[1] in (Ellipsis, slice(None)):
            rows = rows[0]  # B[rows, ...] (scikit-learn's indexing of folds), B[rows, :]
        if isinstance(rows, slice) and rows.step in (None, 1):
            span = range(self.n)[rows]
            take: Any = slice(span.start, span.start + len(span))
            count = len(span)
        else:
            take = np.asarray(rows)
            if take.dtype == bool and take.shape == (self.n,):
                take = np.flatnonzero(take)
            if take.ndim != 1 or take.dtype.kind not in "iu":
                raise TypeError(
                    f"a BinnedMatrix takes a slice of rows (B[lo:hi], step 1), integer "
                    f"positions or a boolean mask of its {self.n} rows, got {rows!r}"
                )
            if take.size and (take.min() < -self.n or take.max() >= self.n):
                raise IndexError(f"row positions outside the {self.n} rows")
            count = take.size
        tables = [
            replace(t, rows=t.rows[take])
            if t.rows is not None
            else BinnedTable(None, t.codes[take], t.features)  # per target row: always dense
            for t in self.tables
        ]
        out = type(self)(count, self.bounds, tables, self.constant, self.ranges, self.columns)
        out.binning, out.categorical = self.binning, self.categorical
        out.nan_features = self.nan_features
        return out

    def _sparse_columns(self):
        """The entries of the sparse tables by column and by row (``sparse_histograms``), with
        each column's job: the sparse tables' sums by key come first in a leaf's stacked sums, in
        table order, so each column's first row there is fixed."""
        self.sparse = [t for t, table in enumerate(self.tables) if is_sparse_table(table)]
        indptr, rows, codes, jobs = [np.zeros(1, np.intp)], [], [], []
        row_ptr, bin_at, tables, start, columns = [np.zeros(1, np.intp)], [], [], 0, 0
        for i, t in enumerate(self.sparse):
            table = self.tables[t]
            k = table.features.size
            rows.append(table.entry_rows)
            codes.append(table.entry_codes)
            jobs.append(
                np.column_stack(
                    [
                        np.full(k, start),
                        self.offsets[table.features],
                        self.n_bins[table.features],
                        table.default.astype(np.intp),
                        np.full(k, i),
                        columns + np.arange(k),
                    ]
                )
            )
            indptr.append(indptr[-1][-1] + table.indptr[1:])
            column = np.repeat(np.arange(k), np.diff(table.indptr))
            order = np.argsort(table.entry_rows, kind="stable")
            at = self.offsets[table.features[column]] + table.entry_codes
            bin_at.append(at[order])
            counts = np.bincount(table.entry_rows, minlength=table.n_rows)
            row_ptr.append(row_ptr[-1][-1] + np.cumsum(counts))
            tables.append((start, table.n_rows, table.entry_rows.size))
            start += table.n_rows
            columns += k
        self._sparse_job = np.full(self.d, -1, dtype=np.intp)  # each sparse feature's job
        if self.sparse:
            features = np.concatenate([self.tables[t].features for t in self.sparse])
            self._sparse_job[features] = np.arange(features.size)
        self._sparse_layout = (
            (
                np.concatenate(indptr).astype(np.intp),
                np.concatenate(rows).astype(np.intp) if rows else np.empty(0, np.intp),
                np.concatenate(codes) if codes else np.empty(0, np.uint8),
                np.concatenate(jobs).astype(np.intp) if jobs else np.empty((0, 6), np.intp),
            ),
            (
                np.concatenate(row_ptr).astype(np.intp),
                np.concatenate(bin_at).astype(np.intp) if bin_at else np.empty(0, np.intp),
                np.array(tables, dtype=np.intp).reshape(-1, 3),
            ),
        )

    @classmethod
    def from_matrix(
        cls,
        X: NormalizedMatrix,
        max_bin: int = MAX_BIN,
        min_data_in_bin: int = 3,
        bounds: Sequence[Array] | None = None,
        fit_rows: slice | None = None,
        categorical: Iterable[int | str] | None = None,
    ) -> BinnedMatrix:
        """Bin every feature of X, factorized.

        Parameters
        ----------
        X : NormalizedMatrix
            The matrix (not a transposed view; finite).
        max_bin : int, default=255
            Bins per feature at most (<= 255).
        min_data_in_bin : int, default=3
            Rows a bin holds at least (where the values allow it).
        bounds : list of ndarray, optional
            Bin upper bounds per feature (those of a training matrix): X is binned with them
            instead of its own.
        fit_rows : slice, optional
            The target rows the bins are found from (default: all): ``from_matrix(X,
            fit_rows=s)[s]`` equals ``from_matrix(X[s])``, and the other rows are binned with
            the same bins, as a held-out set binned with the training bounds.
        categorical : iterable of int or str, optional
            Features whose values are categories (whole numbers from 0 below 2**31), by
            position or column name: binned one category a bin, as LightGBM bins a
            ``categorical_feature`` (:func:`~ilargi.rewriter.bin_edges.category_bins`); with
            ``bounds``, those of the training matrix (its ``categorical``).

        Returns
        -------
        BinnedMatrix

        Raises
        ------
        ValueError
            For a transposed view, a matrix on the GPU, ``max_bin`` outside [2, 255], or a
            categorical feature that holds something other than categories, has more than 255
            categories a bin of their own or comes from a sparse source.
        """
        return cls.from_matrices([X], max_bin, min_data_in_bin, bounds, fit_rows, categorical)

    @classmethod
    def from_matrices(
        cls,
        blocks: Iterable[NormalizedMatrix],
        max_bin: int = MAX_BIN,
        min_data_in_bin: int = 3,
        bounds: Sequence[Array] | None = None,
        fit_rows: slice | None = None,
        categorical: Iterable[int | str] | None = None,
    ) -> BinnedMatrix:
        """Bin the columns of several matrices over the same target rows, side by side: the
        features of the first block, then the second's, and so on.

        The blocks are binned one at a time and not kept, so a generator of blocks (a column of
        a table each, :meth:`ilargi.Table.to_binned`) never holds more than one block's values:
        a table's float64 columns need not all exist at once. Codes over the same index vector
        are kept as one table, as :meth:`from_matrix` keeps a source's columns.

        Parameters
        ----------
        blocks : iterable of NormalizedMatrix
            At least one, each with the same number of rows.
        max_bin, min_data_in_bin, bounds, fit_rows, categorical
            As in :meth:`from_matrix` (``bounds`` and ``categorical`` for the features of every
            block in order).

        Returns
        -------
        BinnedMatrix
        """
        if not 2 <= max_bin <= MAX_BIN:
            raise ValueError(f"max_bin must be in [2, {MAX_BIN}], got {max_bin}")
        n = None
        out_bounds: list[Array] = []
        tables: list = []
        constant: list[int] = []
        ranges: list[tuple[float, float]] = []
        columns: list | None = []  # None once a block has no names
        weights: dict = {}  # per index vector, the rows that take each of its table's rows
        given_missing = categorical if isinstance(categorical, dict) else {}
        wanted = list(categorical or ())
        names = {j for j in wanted if isinstance(j, str)}
        positions = {int(j) for j in wanted if not isinstance(j, str)}
        named: set = set()  # the names found among the blocks' columns
        missing: dict[int, bool] = {}
        nan_features: dict[int, int] = {}
        for X in blocks:
            if n is not None and X.shape[0] != n:
                raise ValueError(f"the blocks have {n} and {X.shape[0]} rows; bin the same rows")
            n, d = X.shape
            at = len(out_bounds)
            if bounds is not None and at + d > len(bounds):
                raise ValueError(
                    f"X has more than {len(bounds)} features, the bins are for {len(bounds)}"
                )
            given = None if bounds is None else bounds[at : at + d]
            mine = {j - at for j in positions if at <= j < at + d}
            for k, name in enumerate(() if not names or X.columns is None else X.columns):
                if str(name) in names:
                    mine.add(k)
                    named.add(str(name))
            found = binned_tables(X, max_bin, min_data_in_bin, given, fit_rows, weights, mine)
            missing.update((at + j, flag) for j, flag in found[4].items())
            nan_features.update((at + j, most) for j, most in found[5].items())
            columns = None if X.columns is None or columns is None else columns + list(X.columns)
            del X  # a generator's block goes before the next is made
            out_bounds += found[0]
            tables += [replace(t, features=t.features + at) for t in found[1]]
            constant += found[2].tolist()
            ranges += found[3] or []
        if n is None:
            raise ValueError("no blocks to bin")
        if bounds is not None and len(bounds) != len(out_bounds):
            raise ValueError(f"X has {len(out_bounds)} features, the bins are for {len(bounds)}")
        outside = sorted(j for j in positions if not 0 <= j < len(out_bounds))
        if outside or names - named:
            raise ValueError(
                f"categorical features {outside or sorted(names - named)} are not features of "
                f"X ({len(out_bounds)}{', named ' + str(columns[:10]) if columns else ''})"
            )
        tables = merged_tables(tables)  # the blocks' tables let go once merged
        binned = cls(
            n,
            out_bounds,
            per_target_tables(tables, n),
            constant,
            None if bounds is not None else ranges,
            columns,
        )
        binned.binning = None if bounds is not None else (max_bin, min_data_in_bin)
        binned.categorical = {j: bool(given_missing.get(j, missing[j])) for j in sorted(missing)}
        binned.nan_features = nan_features
        return binned

    def kernels(self):
        """(bin_histograms, leaf_sums, partition_rows, leaf_pass) of the CPU backend (compiled
        once built)."""
        kernels = backend_of(NO_VALUES)
        if kernels is self._kernels[0]:  # looked up once per backend: a leaf asks several times
            return self._kernels[1]
        found = (
            optional(kernels, "bin_histograms"),
            optional(kernels, "leaf_sums"),
            optional(kernels, "partition_rows"),
            optional(kernels, "leaf_pass"),
        )
        self._kernels = (kernels, all_found(kernels, found, "tree"))
        return found

    def _column_histograms(self):
        found = optional(backend_of(np.empty(0)), "column_histograms")
        if found is None:  # pragma: no cover - every CPU backend has it
            raise TypeError("the CPU backend has no column_histograms")
        return found

    def _sparse_histograms(self):
        found = optional(backend_of(np.empty(0)), "sparse_histograms")
        if found is None:  # pragma: no cover - every CPU backend has it
            raise TypeError("the CPU backend has no sparse_histograms")
        return found

    def _columns(self, keyed):
        """The codes of the tables with an index vector, one column a row (built once), and the
        jobs of ``column_histograms`` for the tables ``keyed`` summed by key in this order."""
        if self._codes_t is None:
            tables = [
                t
                for t, table in enumerate(self.tables)
                if table.rows is not None and not is_sparse_table(table)
            ]
            width = max((self.tables[t].codes.shape[0] for t in tables), default=0)
            k = sum(self.tables[t].codes.shape[1] for t in tables)
            codes_t = np.zeros((k, width), dtype=np.uint8)
            first, at = {}, 0
            for t in tables:
                codes = self.tables[t].codes
                codes_t[at : at + codes.shape[1], : codes.shape[0]] = codes.T
                first[t], at = at, at + codes.shape[1]
            self._codes_t, self._first_column, self._jobs = codes_t, first, {}
        if keyed not in self._jobs:
            jobs, start = [], 0
            for t in keyed:
                table = self.tables[t]
                n_rows = table.codes.shape[0]
                for k in range(table.features.size):
                    jobs.append((self._first_column[t] + k, start, n_rows, len(jobs)))
                start += n_rows
            features = np.concatenate([self.tables[t].features for t in keyed])
            self._jobs[keyed] = np.array(jobs, dtype=np.intp).reshape(-1, 4), features
        jobs, features = self._jobs[keyed]
        return self._codes_t, jobs, features

    def _keys(self):
        """The index vectors of the tables with one, stacked (G × n), and each table's row in it
        (built once). Stored a target row's keys side by side (Fortran order), in 32 bits where
        the tables allow: a leaf's pass reads all of a row's keys from one cache line."""
        if self._stacked is None:
            keyed = [t for t, table in enumerate(self.tables) if table.rows is not None]
            small = all(self.tables[t].n_rows < np.iinfo(np.int32).max for t in keyed)
            dtype = np.int32 if small else np.intp
            stacked = np.empty((len(keyed), self.n), dtype=dtype, order="F")
            for j, t in enumerate(keyed):
                stacked[j] = self.tables[t].rows
            self._stacked = stacked, {t: j for j, t in enumerate(keyed)}
        return self._stacked

    def histograms(self, idx: Array, g: Array, h: Array, totals=None) -> Array:
        """The histograms of (g, h, count) of every feature over the target rows ``idx``, one
        feature a row (:meth:`leaf_histograms`, padded to the widest feature with zeros).

        Returns
        -------
        ndarray of shape (d, max_bins, 3)
            Per feature and bin, Σg, Σh and the count; equal to the histograms of the
            materialized, binned table.
        """
        return self.padded(self.leaf_histograms(idx, g, h, totals))

    def padded(self, hist: Array) -> Array:
        """Histograms of :meth:`leaf_histograms` as (d × max_bins × 3), zero past a feature's
        bins."""
        at = np.arange(self.max_bins)
        inside = at[None, :] < self.n_bins[:, None]
        out = np.zeros((self.d, self.max_bins) + hist.shape[1:])
        out[inside] = hist[(self.offsets[:-1, None] + at[None, :])[inside]]
        return out

    def may_split(self, min_rows: int) -> Array:
        """Per feature, whether some threshold leaves at least ``min_rows`` of all target rows on
        each side (bins up to it, bins above it): a tree's leaf holds at most these rows on
        either side, so a feature without one never splits a leaf by row counts.

        Parameters
        ----------
        min_rows : int
            Rows each side needs.

        Returns
        -------
        ndarray of bool, shape (d,)
        """
        # a block of target rows at a time (whole counts: their sums are exact in any order),
        # without a list of every target row; one array of zeros for gradients and hessians
        counts = np.zeros(self.total_bins)
        zeros = np.zeros(self.n, np.float32)
        step = 4 * _ROW_BLOCK
        for lo in range(0, self.n, step):
            block = np.arange(lo, min(lo + step, self.n))
            counts += self.leaf_histograms(block, zeros, zeros)[:, 2]
        left = np.cumsum(counts)  # rows up to each bin, from the first feature's first bin on
        start = self.offsets[:-1]
        left -= np.repeat(left[start] - counts[start], self.n_bins)  # from the feature's first
        both = (left >= min_rows) & (self.n - left >= min_rows)
        both[self.offsets[1:] - 1] = False  # the last bin is no threshold
        found = np.logical_or.reduceat(both, start) if self.d else np.zeros(0, dtype=bool)
        found[list(self.categorical)] = True  # sets of categories, not thresholds: kept
        found[self.nan_bin] = True  # NaN goes either way: more sides than thresholds
        return found

    def candidates(self, features: Array) -> Candidates:
        """The :class:`Candidates` of the sorted ``features``."""
        features = np.asarray(features, dtype=np.intp)
        jobs = self._sparse_job[features]
        return Candidates(features, self.offsets[features], self.n_bins[features], jobs[jobs >= 0])

    def subtract(self, parent: Array, child: Array, candidates: Candidates) -> None:
        """parent -= child at the candidates' bins, in place: the histograms of a leaf's larger
        child from its parent's and its smaller child's (other bins left undefined)."""
        # the candidates' runs of bins alone, in parallel: bins of no candidate may hold
        # anything (a whole-array subtraction would read and write them too)
        self._tree_kernels().subtract_ranges(parent, child, candidates.offsets, candidates.n_bins)

    def leaf_histograms(
        self,
        idx: Array | None,
        g: Array,
        h: Array,
        totals=None,
        zero_bins: bool = True,
        candidates: Candidates | None = None,
        out: Array | None = None,
        counts: bool = True,
        hessians_of: tuple | None = None,
        sibling: Array | None = None,
    ) -> Array:
        """The histograms of (g, h, count) of every feature over the target rows ``idx``.

        One pass over the rows sums them by the foreign key of every sparse table and every
        dense one that has at most as many rows as the leaf (its histograms then cost a pass over
        its rows, or a sparse one's entries, not over the leaf's), and into the fact table's
        histograms; each such table's histograms then come from its own rows and those sums. The
        codes of a dense table with more rows than that are read through its index vector, row
        by row.

        Parameters
        ----------
        idx : ndarray of intp or None
            Target rows (a leaf); None: every target row (a tree's root, read in order).
        g, h : ndarray
            Gradients and hessians of the target rows (length n).
        totals : (float, float), optional
            The leaf's Σg and Σh as the tree learner holds them (default: summed here): a sparse
            feature's default bin is the leaf's totals minus its other bins, as LightGBM
            rebuilds its most frequent bin from the leaf's sums.
        zero_bins : bool, default=True
            False: a sparse feature whose default bin is bin 0 (one-hot columns) keeps it at
            zero, as LightGBM does not store it: a threshold scan never reads bin 0, and each
            leaf then saves a pass over those features.
        candidates : Candidates, optional
            Only these features' bins are needed (a tree learner's leaf: the features its parent
            could split): the sparse ones' are summed alone, and the bins of the others are
            left undefined (default: every feature's).
        out : ndarray of shape (total_bins, 3), optional
            Where to write them (a buffer reused from leaf to leaf; default a new one).
        counts : bool, default=True
            False: the fact table's and the sparse tables' features count no rows (zero), as a
            threshold scan estimates rows from hessians (LightGBM's histograms hold no counts):
            the pass over the leaf's rows adds two sums a feature instead of three, and the
            sparse tables' histograms two a stored entry.
        hessians_of : tuple, optional
            With idx None and counts False: a key naming the hessians h (the caller's: the same
            key, the same values). The fact features' hessian sums over every row are kept under
            it, and a later call with the same key adds the gradients alone (one sum a feature).
        sibling : ndarray of shape (total_bins, 3), optional
            With candidates: the histograms of the leaf's parent, from which the leaf's are
            subtracted over the candidates, in place (its sibling's then, as :meth:`subtract`
            makes them); where the leaf's pass listed the table rows it holds (a small leaf),
            its sparse features' at the bins their entries reach alone (elsewhere they are
            zero), which costs the leaf's entries, not its candidates. ``out`` then holds
            nothing to read.

        Returns
        -------
        ndarray of shape (total_bins, 3)
            Per bin, Σg, Σh and the count, feature f's bins from row ``offsets[f]``; equal to
            the histograms of the materialized, binned table.
        """
        histogram, _, _, leaf_pass = self.kernels()
        # every part below writes its features' bins whatever they held (the sparse ones zero
        # their own before adding): a leaf's buffer of candidates is not zeroed first
        if out is None:
            out = np.zeros((self.total_bins, 3))
        elif candidates is None:
            out.fill(0.0)
        columns, by_row = self._sparse_layout
        sparse, only = self.sparse, None
        if candidates is not None:
            only = candidates.sparse_jobs
            if not only.size:  # no sparse candidate: no sums by their keys
                sparse = []
        elif sibling is not None:
            raise ValueError("a sibling's histograms are made over candidates")
        subtracted = False  # the sparse candidates' subtracted from sibling already
        m = self.n if idx is None else len(idx)
        fact = self._fact
        # a sparse table is always summed by key (its histograms cost its entries, whatever the
        # leaf's rows); a dense one where the leaf has at least as many rows
        dense = [t for t, n_rows in self._dense_keyed if n_rows <= m]
        keyed = sparse + dense
        if keyed or fact is not None:
            key = tuple(keyed)
            found = self._pass_args.get(key)
            if found is None:
                R, position = self._keys()
                found = self._pass_args[key] = (
                    R,
                    [position[t] for t in keyed],
                    [self.tables[t].n_rows for t in keyed],
                )
            R, sel, n_outs = found
            scratch = self._pass_scratch
            scratch.pop("held", None)
            fact_pass = None if fact is None else self._fact_codes()
            kept = None
            if idx is None and hessians_of is not None and not counts:
                kept = self._every_row_hessians
                if kept is not None and not _same_key(kept[0], hessians_of):
                    kept = None
            sums, fact_hist = leaf_pass(
                R,
                sel,
                n_outs,
                None if fact_pass is None else fact_pass.codes,
                idx,
                g,
                h,
                1 if fact_pass is None else fact_pass.width,
                None if fact_pass is None else fact_pass.bins,
                counts,
                scratch,
                kept is None,
            )
            if fact_hist is not None and idx is None and hessians_of is not None and not counts:
                if kept is None:
                    self._every_row_hessians = (hessians_of, fact_hist[..., 1].copy())
                else:
                    fact_hist[..., 1] = kept[1]
            held = scratch.get("held")  # the rows of the sums the leaf holds, where known
            if keyed:
                stacked = _stacked(sums)
            if sparse:
                if totals is None:
                    totals = (_sum(g, idx), _sum(h, idx))
                leaf = np.array([float(totals[0]), float(totals[1]), float(m)])
                direct = None
                if sibling is not None and held is not None:
                    direct = optional(self._tree_kernels(), "subtract_held")
                if direct is not None and only is not None:
                    rebuilt = only if zero_bins else only[columns[3][only, 3] != 0]
                    if self._clean is None:
                        self._clean = np.zeros((self.total_bins, 3))
                    direct(
                        by_row,
                        columns[3],
                        held,
                        stacked,
                        leaf,
                        sibling,
                        rebuilt,
                        self._clean,
                        counts,
                    )
                    subtracted = True
                else:
                    self._sparse_histograms()(
                        columns, by_row, stacked, leaf, out, m, None, zero_bins, held, only, counts
                    )
            if dense:
                codes_t, jobs, features = self._columns(tuple(dense))
                at = sum(self.tables[t].n_rows for t in sparse)
                hist = np.zeros((features.size, self._width(features), 3))
                self._column_histograms()(codes_t, jobs, stacked[at:], hist)
                self._scatter(out, features, hist)
            if fact_pass is not None:
                fact_pass.scatter(out, fact_hist)
        # dense tables with more rows than the leaf, read through their index vectors
        for t, n_rows in self._dense_keyed + self._dense_other:
            if n_rows > m:
                table = self.tables[t]
                width = self._width(table.features)
                rows = np.arange(self.n) if idx is None else idx
                hist = histogram(table.codes, table.rows, rows, g, h, None, width)
                self._scatter(out, table.features, hist)
        alone = self._alone
        if alone.size:
            for f in alone:
                out[self.offsets[f] : self.offsets[f + 1]] = 0.0
            out[self.offsets[alone] + self.constant[alone]] = [
                _sum(g, idx),
                _sum(h, idx),
                float(m),
            ]
        if sibling is not None:
            assert candidates is not None
            offsets, n_bins = candidates.offsets, candidates.n_bins
            if subtracted:  # the other candidates
                rest = self._sparse_job[candidates.features] < 0
                offsets, n_bins = offsets[rest], n_bins[rest]
            self._tree_kernels().subtract_ranges(sibling, out, offsets, n_bins)
        return out

    def _fact_codes(self) -> FactPass:
        """The fact table's codes as the leaf pass reads them (built at the first pass)."""
        if self._fact_pass is None:
            table = self.tables[self._fact]
            features = table.features
            self._fact_pass, by_column = FactPass.of(
                table, self.n_bins[features], self.offsets[features]
            )
            if by_column is not None:
                table.codes = by_column
        return self._fact_pass

    def _width(self, features):
        """Bins of the widest of ``features``."""
        return int(self.n_bins[features].max(initial=1))

    def _scatter(self, out, features, hist):
        """out's rows of ``features`` = hist (one feature a row, padded); a copy of one block
        where the features' bins are contiguous in out and fill hist (built once per set)."""
        key = (features.tobytes(), hist.shape[1])
        where = self._scatters.get(key)
        if where is None:
            at = np.arange(hist.shape[1])
            inside = at[None, :] < self.n_bins[features][:, None]
            dst = (self.offsets[features][:, None] + at[None, :])[inside]
            if inside.all() and np.array_equal(dst, np.arange(dst[0], dst[0] + dst.size)):
                where = slice(int(dst[0]), int(dst[0]) + dst.size)
            else:
                where = (dst, np.flatnonzero(inside.ravel()))
            self._scatters[key] = where
        flat = hist.reshape(-1, hist.shape[-1])
        if isinstance(where, slice):
            out[where] = flat
        else:
            out[where[0]] = flat[where[1]]

    def goes_left(self, idx: Array, feature: int, threshold: int | Array) -> Array:
        """Whether each target row of ``idx`` goes left at a split (code <= threshold, or a
        categorical split's ``threshold[code]``): a mask over the table's rows gathered through
        its index vector where the table is the smaller.

        Parameters
        ----------
        idx : ndarray of intp
            Target rows.
        feature : int
            The split's feature.
        threshold : int or ndarray of bool
            The split's bin; or, for a set of categories, whether each bin goes left.

        Returns
        -------
        ndarray of bool
        """
        t = self.table_of[feature]
        if t < 0:
            return np.full(len(idx), bool(_left_of(self.constant[feature], threshold)))
        table = self.tables[t]
        column = table.column(self.column_of[feature])
        if table.rows is not None and column.size < len(idx):
            return _left_of(column, threshold)[table.rows[idx] + 1]
        return _left_of(column[table.code_rows(idx)], threshold)

    def partition(self, order: Array, lo: int, hi: int, feature: int, threshold: int) -> int:
        """Split the leaf ``order[lo:hi]`` in place, stably: the rows that go left first.

        Parameters
        ----------
        order : ndarray of intp
            Target rows, leaves as contiguous ranges.
        lo, hi : int
            The leaf's range.
        feature : int
            The split's feature.
        threshold : int
            The split's bin.

        Returns
        -------
        int
            Rows that go left.
        """
        t = self.table_of[feature]
        if t < 0:
            return hi - lo if int(self.constant[feature]) <= threshold else 0
        table = self.tables[t]
        if is_sparse_table(table):  # the column over the table's rows (one byte a row)
            codes, column = table.column(self.column_of[feature]).reshape(-1, 1), 0
        else:
            codes, column = table.codes, int(self.column_of[feature])
        return self.kernels()[2](order, lo, hi, codes, table.rows, column, int(threshold))

    def split(
        self,
        lst: Array,
        labels: Array,
        label: int,
        new_label: int,
        feature: int,
        threshold: int | Array,
        side: bool,
        out: Array,
        every: bool = False,
    ) -> tuple[int, int]:
        """Move one side of a leaf's rows to a list of their own, leaving the other side where it
        is: the rows labelled ``label`` whose test (code <= threshold, or ``threshold[code]``
        for a set of categories) equals ``side`` are relabelled ``new_label`` and written to
        ``out``, increasing.

        A tree learner moves the smaller side: where the split's table has an index vector and
        the table rows on that side are read by fewer target rows than the leaf's list holds, its
        rows are found through the table's inverse index (target rows by table row), and the
        leaf's list is not read at all; it then still holds the moved rows (their labels tell
        them apart, the next scan of it drops them). Else the list is scanned, and the rows that
        stay are compacted to its front.

        Parameters
        ----------
        lst : ndarray of intp
            The leaf's rows, increasing; may also hold rows of other labels.
        labels : ndarray of uint8 or int32
            Each target row's label (its leaf's), updated here.
        label, new_label : int
            The leaf's label; the moved side's.
        feature : int
            The split's feature.
        threshold : int or ndarray of bool
            The split's bin (codes <= threshold go left), or whether each code goes left.
        side : bool
            The side that moves: True the rows that go left.
        out : ndarray of intp
            Longer than lst.
        every : bool, default=False
            The leaf is every target row and lst (of length n) is not filled yet: its contents
            are written, never read (a tree's root; where lst is returned as it was, kept -1, it
            is filled with 0 up to n - 1).

        Returns
        -------
        moved : int
            Rows moved (``out[:moved]``).
        kept : int
            The rows that stay, at the front of lst; -1 where lst was not read.
        """
        tree_kernels = self._tree_kernels()
        t = self.table_of[feature]
        column = int(self.column_of[feature])
        keys = None
        if t >= 0 and self.tables[t].rows is not None:
            keys = self._side_keys(t, column, threshold, side, lst.shape[0])
        if every and (t < 0 or keys is not None):  # lst read below, or handed back as it is
            fill_range(lst)
            every = False
        if t < 0:  # every row on the side of the feature's one code
            goes = bool(_left_of(self.constant[feature], threshold)) == side
            kept = tree_kernels.compact_rows(lst, labels, label)
            if not goes:
                return 0, kept
            out[:kept] = lst[:kept]
            labels[lst[:kept]] = new_label
            return kept, 0
        table = self.tables[t]
        if keys is not None:
            moved = tree_kernels.split_by_keys(
                self._inverse(t), keys, labels, label, new_label, self._split_flags, out
            )
            return moved, -1
        if is_sparse_table(table):  # the column over the table's rows (one byte a row)
            codes, column = table.column(column).reshape(-1, 1), 0
        else:
            codes, column = self._split_column(t, column), 0
        return tree_kernels.split_rows(
            lst,
            labels,
            label,
            new_label,
            codes,
            table.rows,
            column,
            threshold if isinstance(threshold, np.ndarray) else int(threshold),
            side,
            out,
            every,
        )

    def _split_column(self, t, column):
        """Column ``column`` of dense table t's codes as a contiguous (n_rows × 1) array: a view
        where the codes lie column by column (a fact table whose features share columns of the
        leaf pass, :class:`FactPass`), else a copy made the first time a split reads it. A split
        reads one byte of each of a leaf's rows: from row-major codes, that byte costs a cache
        line a row (a table of many features), from a column, a line per 64 rows. Only the
        features split on are copied (a tree ensemble splits a few of them again and again)."""
        codes = self.tables[t].codes
        if codes.shape[1] == 1 or codes.flags.f_contiguous:
            return codes[:, column : column + 1]
        found = self._split_columns.get((t, column))
        if found is None:
            found = self._split_columns[(t, column)] = np.ascontiguousarray(
                codes[:, column : column + 1]
            )
        return found

    def compact(self, lst: Array, labels: Array, label: int) -> int:
        """Move the rows of ``lst`` labelled ``label`` to its front, in order; returns how
        many (the exact list of a leaf whose list still held rows that moved)."""
        return self._tree_kernels().compact_rows(lst, labels, label)

    def _side_keys(self, t, column, threshold, side, scanned):
        """The codes rows of table t on the given side of a split, where finding the target rows
        that read them costs less than a scan of ``scanned`` rows; else None. A sparse column's
        side away from its default code is its entries there; a dense column is read whole
        where it is short against the scan."""
        table = self.tables[t]
        weights = self._weights.get(t)
        if weights is None:
            weights = self._weights[t] = np.bincount(table.rows + 1, minlength=table.n_rows)
        if is_sparse_table(table):
            if bool(_left_of(table.default[column], threshold)) == side:
                return None  # the default side: most of the table's rows
            lo, hi = table.indptr[column], table.indptr[column + 1]
            keys = table.entry_rows[lo:hi]
            keys = keys[_left_of(table.entry_codes[lo:hi], threshold) == side]
        elif table.n_rows * INVERSE_COST < scanned:
            keys = np.flatnonzero(_left_of(table.codes[:, column], threshold) == side)
        else:
            return None
        if INVERSE_COST * int(weights[keys].sum()) >= scanned:
            return None
        return keys.astype(np.intp, copy=False)

    def _inverse(self, t):
        """Table t's inverse index (target rows by codes row), built once."""
        found = self._inverses.get(t)
        if found is None:
            table = self.tables[t]
            found = self._inverses[t] = self._tree_kernels().inverse_index(table.rows, table.n_rows)
        return found

    @property
    def _split_flags(self):
        """A zero byte a target row (a multiple of 8 bytes): the inverse splits' scratch."""
        if self._flags is None:
            self._flags = np.zeros(-(-self.n // 8) * 8 or 8, dtype=np.uint8)
        return self._flags

    def _tree_kernels(self):
        """The CPU backend (compiled once built), whose kernels split a leaf's rows."""
        return backend_of(NO_VALUES)

    def toarray(self) -> Array:
        """The codes of the materialized table (n × d, uint8), for tests and small data."""
        out = np.empty((self.n, self.d), dtype=np.uint8)
        out[:] = self.constant
        everything = np.arange(self.n)
        for table in self.tables:
            codes = table.dense() if is_sparse_table(table) else table.codes
            out[:, table.features] = codes[table.code_rows(everything)]
        return out


# Target rows gathered at once where codes are laid out per target row (temporaries of a few MiB).
_ROW_BLOCK = 1 << 18


def _unpickled(fields, binning, categorical=None, nan_features=None):
    binned = BinnedMatrix(*fields)
    binned.binning, binned.categorical = binning, categorical or {}
    binned.nan_features = nan_features or {}
    return binned


def _left_of(codes, threshold):
    """Whether codes go left: code <= threshold, or a categorical split's threshold[code]."""
    if isinstance(threshold, np.ndarray):
        return threshold[codes]
    return codes <= threshold


def fill_range(out):
    """out[i] = i, a block at a time (no temporary of out's length)."""
    for lo in range(0, out.size, _ROW_BLOCK):
        hi = min(lo + _ROW_BLOCK, out.size)
        out[lo:hi] = np.arange(lo, hi)


def _same_key(a, b):
    """Whether two keys of hessians name the same: their first items (the learner's weak
    reference to the hessians' array) the same object, the rest equal."""
    return a[0] is b[0] and a[1:] == b[1:]


def _sum(values, idx):
    """Σ values[idx] in double (idx None: every value)."""
    return float(np.sum(values if idx is None else values[idx], dtype=np.float64))


def _stacked(parts):
    """Tables' sums by key as one array, stacked in order: the array they are consecutive rows
    of where a pass wrote them so (the compiled one; no copy), else a copy."""
    base = parts[0].base if len(parts) > 1 else None
    if base is None or base.ndim != 2 or not base.flags.c_contiguous:
        return parts[0] if len(parts) == 1 else np.concatenate(parts)
    at = base.__array_interface__["data"][0]
    for part in parts:
        if part.base is not base or part.__array_interface__["data"][0] != at:
            return np.concatenate(parts)
        at += part.nbytes
    return (
        base if at == base.__array_interface__["data"][0] + base.nbytes else np.concatenate(parts)
    )
