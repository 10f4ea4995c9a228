"""Binning a NormalizedMatrix's features for the tree learner: bins and codes from its parts.

Each target column is fed by one or more parts with disjoint rows; stacked, their rows form one
:class:`BinnedTable` with one index vector (row 0 of it the absent row, which holds the column's
NULL value). Each table row weighs the target rows that take it, so the bins found from the
table's distinct values (:mod:`~ilargi.rewriter.bin_edges`) are those of the materialized column;
the codes are stored per table row (:func:`binned_tables`), then tables over the same index
vector are merged (:func:`merged_tables`) and the narrow ones laid out per target row
(:func:`per_target_tables`). :class:`~ilargi.rewriter.histograms.BinnedMatrix` holds the result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ilargi.backend import backend_of
from ilargi.backend.contract import Array

from .bin_edges import (
    K_ZERO,
    MAX_BIN,
    bin_codes,
    bin_upper_bounds,
    binning_kernels,
    category_bins,
    category_codes,
    check_categories,
    code_nan,
    distinct_counts,
    most_frequent_bin,
)
from .sparse_bins import SparseBinnedTable, bin_sparse_table, sparse_entries


@dataclass
class BinnedTable:
    """The bin codes of the features one index vector feeds.

    Attributes
    ----------
    rows : ndarray of intp or None
        Index vector over the target rows (-1: absent), None for the fact table (row i is target
        row i).
    codes : ndarray of uint8, shape (n_rows, k)
        Codes per table row and feature; with ``rows``, row 0 is the absent row (the features'
        NULL value) and table row j is codes row j + 1.
    features : ndarray of intp, shape (k,)
        The target column of each codes column.
    """

    rows: Array | None
    codes: Array
    features: Array

    @property
    def n_rows(self) -> int:
        """Codes rows."""
        return int(self.codes.shape[0])

    def code_rows(self, idx: Array) -> Array:
        """The codes rows that target rows ``idx`` read."""
        return idx if self.rows is None else self.rows[idx] + 1

    def column(self, c: int) -> Array:
        """Column c's codes over the codes rows."""
        return self.codes[:, c]


def is_sparse_table(table):
    """Whether a binned table holds a sparse source's codes (its entries)."""
    return isinstance(table, SparseBinnedTable)


def _dense_table(table):
    """A SparseBinnedTable as a BinnedTable of dense codes."""
    return BinnedTable(table.rows, table.dense(), table.features)


def binned_tables(X, max_bin, min_data_in_bin, bounds, fit_rows, found_weights, categorical=()):
    """(bounds, tables, constant codes, ranges, categorical, nan_features) of X's features: the
    work of :meth:`BinnedMatrix.from_matrix`, its tables not yet laid out per target row
    (``found_weights``: the weights of the index vectors binned before, :func:`_fit_weights`;
    ``categorical``: the features binned as categories, returned with whether some category
    got no bin of its own; ``nan_features``: those whose bins found hold NaN's, with their
    most frequent bin)."""
    if X.transposed:
        raise ValueError("bin a NormalizedMatrix, not a transposed view; use T.T")
    if X.device != "cpu":
        raise ValueError(
            f"bins are built on the CPU; move the matrix there first: X.to('cpu') "
            f"(this one is on the {X.device})"
        )
    n, d = X.shape
    if bounds is not None and len(bounds) != d:
        raise ValueError(f"X has {d} features, the bins are for {len(bounds)}")
    n_fit = n if fit_rows is None else len(range(n)[fit_rows])
    scale, shift = X.affine
    a = np.ones(d) if scale is None else backend_of(scale).asnumpy(scale).astype(np.float64)
    b = np.zeros(d) if shift is None else backend_of(shift).asnumpy(shift).astype(np.float64)
    cover: list[list[tuple[int, int]]] = [[] for _ in range(d)]
    for p, part in enumerate(X.parts):
        for c, j in enumerate(part.cols):
            cover[int(j)].append((p, c))
    groups: dict[tuple, list[int]] = {}
    indicator = [id(part.indicator) for part in X.parts]
    for j, covered in enumerate(cover):
        if len(covered) == 1:  # most columns: one part, no sort
            groups.setdefault((indicator[covered[0][0]],), []).append(j)
        elif covered:
            covered.sort(key=lambda pc: indicator[pc[0]])
            groups.setdefault(tuple(indicator[p] for p, _ in covered), []).append(j)
    out_bounds: list[Array] = [np.array([np.inf])] * d if bounds is None else list(bounds)
    constant = np.zeros(d, dtype=np.uint8)
    ranges = [(0.0, 0.0)] * d
    missing: dict[int, bool] = {}
    nan_features: dict[int, int] = {}
    binning = (max_bin, min_data_in_bin)

    def given(j):  # a categorical feature's categories where the bins are given
        return None if bounds is None else out_bounds[j]

    for j in range(d):
        if not cover[j]:  # every row holds b_j
            if j in categorical:
                binned = _category_codes(
                    np.array([b[j]]), np.array([n_fit]), None, given(j), binning, _label(X, j)
                )
                constant[j], out_bounds[j], missing[j] = binned[0][0], binned[1], binned[2]
                continue
            if bounds is None:
                out_bounds[j] = bin_upper_bounds([b[j]], [n_fit], max_bin, min_data_in_bin)
                ranges[j] = _value_range(np.array([b[j]]))
            constant[j] = bin_codes([b[j]], out_bounds[j])[0]
    tables: list = []
    sparse_part = [_is_sparse(part.source) for part in X.parts]
    csc: dict[int, Any] = {}
    affine_column, bin_column = binning_kernels()[:2]
    for columns in groups.values():
        first = cover[columns[0]]
        indicators = [X.parts[p].indicator for p, _ in first]
        rows, offsets, n_rows = _stacked_rows(indicators, n)
        weights = None if rows is None else _fit_weights(rows, n_rows, fit_rows, found_weights)
        shifted = rows is not None
        sparse = [j for j in columns if all(sparse_part[p] for p, _ in cover[j])]
        dense_only = sorted(j for j in sparse if j in categorical)
        if dense_only:
            raise ValueError(
                f"categorical features {dense_only} come from sparse sources; ilargi bins "
                "categories of dense sources only (encode them with categorical='ordinal')"
            )
        if sparse:
            _refuse_sparse_nan(X, sparse, cover)
            features = np.asarray(sparse, dtype=np.intp)
            for p in {p for j in sparse for p, _ in cover[j]} - csc.keys():
                csc[p] = _csc(X.parts[p].source)
            covers = [[(csc[p], c) for p, c in cover[j]] for j in sparse]
            col, row, value = sparse_entries(covers, n_rows + shifted, shifted, offsets)
            found, found_ranges, table = bin_sparse_table(
                rows,
                n_rows + shifted,
                features,
                col,
                row,
                a[features][col] * value + b[features][col],
                b[features],
                _fit_mask(n, fit_rows) if rows is None and fit_rows is not None else weights,
                max_bin,
                min_data_in_bin,
                None if bounds is None else [out_bounds[j] for j in sparse],
            )
            for j, found_bounds in zip(sparse, found):
                out_bounds[j] = found_bounds
            if found_ranges is not None:
                for j, found_range in zip(sparse, found_ranges):
                    ranges[j] = found_range
            # a fact table's codes are read per target row (one byte a feature)
            tables.append(table if shifted else _dense_table(table))
            taken = set(sparse)
            columns = [j for j in columns if j not in taken]
            if not columns:
                continue
        codes = np.empty((n_rows + shifted, len(columns)), dtype=np.uint8)
        for k, j in enumerate(columns):
            values = np.empty(n_rows + shifted)
            if shifted:
                values[0] = b[j]
            for (p, c), offset in zip(cover[j], offsets):
                column = _dense_column(X.parts[p].source, c)
                # a·s + b written in place (the same products and sums, no temporaries)
                into = values[shifted + offset : shifted + offset + column.size]
                affine_column(column, a[j], b[j], into)
                del column, into
            if j in categorical:
                codes[:, k], out_bounds[j], missing[j] = _category_codes(
                    values,
                    weights,
                    None if rows is not None else fit_rows,
                    given(j),
                    binning,
                    _label(X, j),
                )
                continue
            if bounds is None:
                fit = values if rows is not None or fit_rows is None else values[fit_rows]
                distinct, counts = distinct_counts(fit, weights)
                out_bounds[j] = bin_upper_bounds(distinct, counts, max_bin, min_data_in_bin)
                ranges[j] = _value_range(distinct)
                if np.isnan(out_bounds[j][-1]):
                    nan_features[j] = most_frequent_bin(distinct, counts, out_bounds[j])
            bin_column(values, out_bounds[j], codes, k)
            if not all(X.parts[p].finite for p, _ in cover[j]):  # a search places NaN nowhere
                code_nan(values, out_bounds[j], codes, k)
        tables.append(BinnedTable(rows, codes, np.asarray(columns, dtype=np.intp)))
    ranges = None if bounds is not None else ranges
    return out_bounds, tables, constant, ranges, missing, nan_features


def _label(X, j):
    """Feature j of X as an error names it: its column name, else its position."""
    return j if X.columns is None else f"{X.columns[j]!r}"


def _category_codes(values, weights, fit_rows, categories, binning, label):
    """(codes, categories, missing) of a categorical feature's values: its bins found from the
    values (``weights``: how many rows take each; for a single value, its count) where
    ``categories`` is None, with ``binning`` = (max_bin, min_data_in_bin); ``label`` names it."""
    missing = False
    if categories is None:
        fit = values if fit_rows is None else values[fit_rows]
        if values.size == 1 and weights is not None and weights.size == 1:
            distinct, counts = values, weights
        else:
            distinct, counts = distinct_counts(fit, weights)
        check_categories(distinct[counts > 0], label)
        categories, missing = category_bins(distinct, counts, *binning)
        if categories.size > MAX_BIN + 1:
            raise ValueError(
                f"categorical feature {label} has {categories.size - 1} categories of a bin of "
                f"their own; ilargi's bins are one byte: at most {MAX_BIN}"
            )
    else:
        check_categories(values, label)
    return category_codes(values, categories), categories, missing


def _fit_weights(rows, n_rows, fit_rows, found):
    """How many of the rows the bins are found from take each row of a table with an index
    vector (row 0: the absent row), once per index vector (``found``: {id: (rows, weights)})."""
    known = found.get(id(rows))
    if known is None or known[0] is not rows or known[1].size != n_rows + 1:
        fit = rows if fit_rows is None else rows[fit_rows]
        known = found[id(rows)] = (rows, np.bincount(fit + 1, minlength=n_rows + 1))
    return known[1]


def _fit_mask(n, fit_rows):
    """1 for the rows the bins are found from, 0 for the others (a table without index vector,
    read per target row)."""
    weights = np.zeros(n, dtype=np.int64)
    weights[fit_rows] = 1
    return weights


def _value_range(distinct):
    """(least, greatest) of a column's distinct values but NaN, values within 1e-35 of zero as
    0.0 (0.0 for none)."""
    values = np.where(np.abs(distinct) <= K_ZERO, 0.0, distinct)
    values = values[~np.isnan(values)]
    if not values.size:  # only NaN: LightGBM's range is its zero
        return 0.0, 0.0
    return float(values.min()), float(values.max())


def _refuse_sparse_nan(X, features, cover):
    """A ValueError naming the first of ``features`` (from sparse sources) that holds NaN:
    ilargi bins NaN of dense sources only."""
    for j in features:
        for p, c in cover[j]:
            part = X.parts[p]
            if not part.finite and np.isnan(_csc(part.source)[:, c].data).any():
                raise ValueError(
                    f"feature {_label(X, j)} holds NaN in a sparse source; ilargi bins NaN "
                    "of dense sources only (give the column densely, or fill its NaN)"
                )


def _stacked_rows(indicators, n):
    """(rows, offsets, n_rows): one index vector over the stacked rows of several indicators with
    disjoint present rows (None for the identity alone), each indicator's offset in the stack."""
    if len(indicators) == 1:
        ind = indicators[0]
        if ind.is_identity:
            return None, [0], n
        return np.asarray(ind.rows, dtype=np.intp), [0], int(ind.n_source)
    rows = np.full(n, -1, dtype=np.intp)
    offsets, offset = [], 0
    for ind in indicators:
        if ind.is_identity:
            rows[:] = offset + np.arange(n)
        else:
            own = np.asarray(ind.rows)
            present = own >= 0
            rows[present] = offset + own[present]
        offsets.append(offset)
        offset += int(ind.n_source)
    return rows, offsets, offset


def _dense_column(source, c):
    """Column c of a source as a host float64 vector (a view of a float64 array's column)."""
    if isinstance(source, np.ndarray) and source.dtype == np.float64 and source.ndim == 2:
        return source[:, c]
    kernels = backend_of(source)
    column = kernels.to_dense(kernels.select_columns(source, np.array([c])))
    return np.asarray(kernels.asnumpy(column), dtype=np.float64).reshape(-1)


def _is_sparse(source):
    return bool(backend_of(source).is_sparse(source))


def _csc(source):
    """A sparse source as a host CSC array with sorted indices."""
    import scipy.sparse as sp

    out = sp.csc_array(backend_of(source).asnumpy(source), dtype=np.float64, copy=True)
    out.sum_duplicates()  # canonical: sorted rows, duplicates summed (as the table reads them)
    return out


def merged_tables(tables):
    """The dense tables over the same index vector (or none, per target row) as one table, their
    codes side by side, where the first of them was (any sources: a target row reads the same
    codes row of each); sparse tables as they are."""
    groups: list[list] = []  # in order: a sparse table alone, or dense tables of equal rows
    for table in tables:
        same = None
        if not is_sparse_table(table):
            same = next(
                (g for g in groups if not is_sparse_table(g[0]) and _same_rows(g[0], table)),
                None,
            )
        if same is None:
            groups.append([table])
        else:
            same.append(table)
    return [
        group[0]
        if len(group) == 1
        else BinnedTable(
            group[0].rows,
            np.hstack([t.codes for t in group]),
            np.concatenate([t.features for t in group]),
        )
        for group in groups
    ]


def _same_rows(a, b):
    """Whether two dense tables are read through the same index vector (or both per target row)
    into as many codes rows: then target row i reads the same codes row of both."""
    if a.codes.shape[0] != b.codes.shape[0] or (a.rows is None) != (b.rows is None):
        return False
    return a.rows is b.rows or bool(np.array_equal(a.rows, b.rows))


# A dense keyed table of at most this many features has its codes gathered per target row: k
# bytes a row read in the fact pass cost less than its key and the scatter of the leaf's sums by
# key; a wider dimension stays keyed, its histograms from its own rows (both measured:
# benchmarks/RESULTS.md, "Gradient-boosted trees").
NARROW = 8


def per_target_tables(tables, n):
    """The tables read per target row as one table of codes per target row: the fact table, a
    selection of its rows (at least as many rows as the target), and dense tables of at most
    NARROW features. A leaf then reads its rows' codes directly, in the pass that sums by the
    other tables' keys, not through an index vector (n bytes a feature, as the codes of the fact
    table itself). A sparse table stays sparse where its codes per target row would be many
    times its entries (wide one-hot dimensions of a small row selection, e.g. a test set)."""

    def per_target(t):
        if t.rows is not None and t.n_rows <= n:
            return not is_sparse_table(t) and t.features.size <= NARROW
        return not is_sparse_table(t) or t.features.size * n <= 8 * (t.entry_rows.size + t.n_rows)

    wide = [t for t in tables if per_target(t)]
    if not wide or (len(wide) == 1 and wide[0].rows is None):
        return tables
    # written in place a block of target rows at a time: no gathered copy of a table, no
    # index vector of every target row, beside the result
    codes = np.empty((n, sum(t.features.size for t in wide)), dtype=np.uint8)
    at = 0
    for t in wide:
        binning_kernels()[2](codes, at, t.dense() if is_sparse_table(t) else t.codes, t.rows)
        at += t.features.size
    features = np.concatenate([t.features for t in wide])
    rest = [t for t in tables if not any(t is w for w in wide)]
    return [BinnedTable(None, codes, features)] + rest
