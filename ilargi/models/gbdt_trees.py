"""The tree learner behind :mod:`ilargi.models.gbdt`, with LightGBM's semantics (its objectives in
:mod:`.gbdt_objectives`, its model text in :mod:`.gbdt_text`).

Trees grow leaf-wise (best-first) on the histograms of a
:class:`~ilargi.rewriter.histograms.BinnedMatrix`: the leaf with the largest split gain is split
next, up to ``num_leaves`` leaves and ``max_depth`` levels; the smaller child's histograms are
built from its rows, the larger child's are its parent's minus the smaller's. Each step follows
LightGBM's serial tree learner (``serial_tree_learner.cpp``, ``feature_histogram.hpp``) so that the
same data, bins and parameters give the same trees:

* gradients and hessians in single precision, labels and weights too (LightGBM's ``score_t`` and
  ``label_t``); histograms, scores and leaf values in double;
* a feature's thresholds scanned from the top bin down, the right side accumulated (missing type
  None: rows of value 0 are ordinary values, the default direction is left; a feature with a bin
  of NaN is scanned from both ends for where NaN goes, :mod:`.gbdt_missing`); the gain of a side
  ``ThresholdL1(G, reg_alpha)² / (H + reg_lambda)``, its value ``-ThresholdL1(G, reg_alpha) /
  (H + reg_lambda)``, hessian sums carrying LightGBM's 1e-15 offsets; a split must leave
  ``min_child_samples`` rows and ``min_child_weight`` hessian on each side and gain more than
  ``min_split_gain`` over the leaf; ties go to the higher threshold, then the lower feature, then
  the lower leaf;
* a feature that cannot split a leaf is not tried in its descendants (LightGBM's
  ``is_splittable``); leaves with fewer than ``2 * min_child_samples`` rows on both sides of the
  last split, or at ``max_depth``, are not split;
* boosting from the average (L2: the weighted mean label; binary: the log-odds of the weighted
  positive rate; softmax: the log of each class's weighted rate), added to the first trees' leaf
  values; one tree per class per round; training stops when no tree of a round can split.

Within a leaf's threshold scan, ``min_child_samples`` is checked on row counts estimated from
the bins' hessian sums (``round(Σh_bin · rows / Σh_leaf)``), as LightGBM checks it: exact for
unit hessians (squared error without weights), an estimate for log-losses and sample weights.
Leaves' row counts themselves are exact.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import numpy as np

from ilargi.backend import backend_of
from ilargi.backend.contract import optional

from .gbdt_categorical import (
    CategoricalParams,
    CategoricalSplit,
    best_categorical_split,
    bitset,
    goes_left,
    leaf_outputs,
)
from .gbdt_gains import (
    K_EPSILON,
    _leaf_gain_float,
    _leaf_output_float,
    _nan_to_num,
    _round_to_zero,
    leaf_gain,
    leaf_output,
)
from .gbdt_missing import NanSplit, nan_splits


@dataclass
class GrowthParams:
    """The parameters of one tree's growth (LightGBM's names in comments)."""

    num_leaves: int = 31
    max_depth: int = -1
    min_data_in_leaf: int = 20  # min_child_samples
    min_sum_hessian_in_leaf: float = 1e-3  # min_child_weight
    lambda_l1: float = 0.0  # reg_alpha
    lambda_l2: float = 0.0  # reg_lambda
    min_gain_to_split: float = 0.0  # min_split_gain
    categorical: CategoricalParams = field(default_factory=CategoricalParams)


@dataclass
class Split:
    """The best split of a leaf (LightGBM's SplitInfo)."""

    gain: float = -np.inf
    feature: int = -1
    threshold: int = 0
    left_output: float = 0.0
    right_output: float = 0.0
    left_count: int = 0
    right_count: int = 0
    left_sum_gradient: float = 0.0
    left_sum_hessian: float = 0.0
    right_sum_gradient: float = 0.0
    right_sum_hessian: float = 0.0
    left_bins: np.ndarray | None = None  # a categorical split's: the bins sent left
    default_left: bool = True  # where NaN goes (LightGBM's default_left)
    nan: bool = False  # the feature has a bin of NaN (LightGBM's missing type NaN)

    def better_than(self, other):
        """LightGBM's SplitInfo::operator>: the larger gain, then the lower feature."""
        if self.gain != other.gain:
            return self.gain > other.gain
        a = self.feature if self.feature >= 0 else np.iinfo(np.int32).max
        b = other.feature if other.feature >= 0 else np.iinfo(np.int32).max
        return a < b


@dataclass
class Tree:
    """One tree in LightGBM's arrays: internal nodes numbered in split order, a child ``~leaf``
    (negative) for a leaf."""

    split_feature: list = field(default_factory=list)
    threshold_bin: list = field(default_factory=list)  # a categorical node's: its bins' table
    threshold: list = field(default_factory=list)  # a categorical node's: its cat_boundaries'
    decision_type: list = field(default_factory=list)
    cat_boundaries: list = field(default_factory=lambda: [0])
    cat_threshold: list = field(default_factory=list)  # the categories sent left, as bitsets
    split_gain: list = field(default_factory=list)
    left_child: list = field(default_factory=list)
    right_child: list = field(default_factory=list)
    internal_value: list = field(default_factory=list)
    internal_weight: list = field(default_factory=list)
    internal_count: list = field(default_factory=list)
    leaf_value: list = field(default_factory=lambda: [0.0])
    leaf_weight: list = field(default_factory=lambda: [0.0])
    leaf_count: list = field(default_factory=lambda: [0])
    leaf_parent: list = field(default_factory=lambda: [-1])
    leaf_depth: list = field(default_factory=lambda: [0])
    shrinkage: float = 1.0

    def __setstate__(self, state):
        # a tree pickled before categorical splits existed: every node numerical
        state.setdefault("decision_type", [2] * len(state["split_feature"]))
        state.setdefault("cat_boundaries", [0])
        state.setdefault("cat_threshold", [])
        self.__dict__.update(state)

    @property
    def num_leaves(self):
        """Leaves of the tree."""
        return len(self.leaf_value)

    def split(self, leaf, feature, bin_, real_threshold, split, gain):
        """Split ``leaf`` as LightGBM's Tree::Split: the left child keeps its index, the right one
        is the next; returns the right leaf."""
        node = self.num_leaves - 1
        right = self.num_leaves
        parent = self.leaf_parent[leaf]
        if parent >= 0:
            if self.left_child[parent] == ~leaf:
                self.left_child[parent] = node
            else:
                self.right_child[parent] = node
        self.split_feature.append(int(feature))
        self.threshold_bin.append(bin_ if isinstance(bin_, np.ndarray) else int(bin_))
        self.threshold.append(float(real_threshold))
        # numerical; where NaN goes; missing type NaN (2) or None (0), as LightGBM's bits
        self.decision_type.append((2 if split.default_left else 0) | (8 if split.nan else 0))
        self.split_gain.append(float(np.float32(gain)))
        self.left_child.append(~leaf)
        self.right_child.append(~right)
        self.internal_weight.append(split.left_sum_hessian + split.right_sum_hessian)
        self.internal_value.append(self.leaf_value[leaf])
        self.internal_count.append(split.left_count + split.right_count)
        self.leaf_parent[leaf] = node
        self.leaf_parent.append(node)
        self.leaf_value[leaf] = _nan_to_num(float(split.left_output))
        self.leaf_value.append(_nan_to_num(float(split.right_output)))
        self.leaf_weight[leaf] = split.left_sum_hessian
        self.leaf_weight.append(split.right_sum_hessian)
        self.leaf_count[leaf] = split.left_count
        self.leaf_count.append(split.right_count)
        self.leaf_depth.append(self.leaf_depth[leaf] + 1)
        self.leaf_depth[leaf] += 1
        return right

    def split_categorical(self, leaf, feature, left, categories, missing, split, gain):
        """Split ``leaf`` on a set of categories as LightGBM's Tree::SplitCategorical: ``left``
        the feature's table of bins sent left, ``categories`` theirs, ``missing`` whether some
        category has no bin of its own (missing type NaN); returns the right leaf."""
        right = self.split(leaf, feature, left, len(self.cat_boundaries) - 1, split, gain)
        self.decision_type[-1] = 1 | ((2 if missing else 0) << 2)  # categorical; missing type
        words = bitset(categories)
        self.cat_threshold.extend(words)
        self.cat_boundaries.append(self.cat_boundaries[-1] + len(words))
        return right

    def shrink(self, rate):
        """Multiply leaf and internal values by the learning rate (Tree::Shrinkage)."""
        self.leaf_value = list(_round_to_zero(np.array(self.leaf_value) * rate))
        self.internal_value = list(_round_to_zero(np.array(self.internal_value) * rate))
        self.shrinkage *= rate

    def add_bias(self, value):
        """Add the initial score to leaf and internal values (Tree::AddBias)."""
        self.leaf_value = list(_round_to_zero(np.array(self.leaf_value) + value))
        self.internal_value = list(_round_to_zero(np.array(self.internal_value) + value))
        self.shrinkage = 1.0

    def leaves(self, binned, idx=None):
        """The leaf of each target row (of ``idx``, default all) of a BinnedMatrix, routed split
        by split through the tables' codes."""
        idx = np.arange(binned.n) if idx is None else np.asarray(idx)
        out = np.zeros(idx.shape[0], dtype=np.intp)
        if self.num_leaves == 1:
            return out
        stack = [(0, np.arange(idx.shape[0]))]
        while stack:
            node, at = stack.pop()
            left = binned.goes_left(idx[at], self.split_feature[node], self.threshold_bin[node])
            for child, sel in ((self.left_child[node], left), (self.right_child[node], ~left)):
                sub = at[sel]
                if child < 0:
                    out[sub] = ~child
                elif sub.size:
                    stack.append((child, sub))
        return out

    def predict(self, binned, idx=None):
        """The tree's value for each target row."""
        return np.asarray(self.leaf_value)[self.leaves(binned, idx)]


def best_splits(hist, sum_gradient, sum_hessian, num_data, n_bins, usable, params, offsets=None):
    """The best threshold of every feature of a leaf, as LightGBM's reverse scan finds it.

    ``hist`` is (d × bins × 3), or (total bins × 3) with feature f's bins from row
    ``offsets[f]``. Returns (gain, threshold, left sums, splittable) per feature: gain is -inf
    where no threshold passes the checks; ``splittable`` says whether any threshold gained more
    than the leaf.
    """
    if offsets is not None:  # padded to the widest feature (bins past a feature's: zero)
        at = np.arange(int(np.max(n_bins, initial=1)))
        inside = at[None, :] < n_bins[:, None]
        padded = np.zeros(inside.shape + (3,))
        padded[inside] = hist[(offsets[:, None] + at[None, :])[inside]]
        hist = padded
    l1, l2 = params.lambda_l1, params.lambda_l2
    min_data, min_hess = params.min_data_in_leaf, params.min_sum_hessian_in_leaf
    total_hessian = sum_hessian + 2 * K_EPSILON
    min_gain_shift = leaf_gain(sum_gradient, total_hessian, l1, l2) + params.min_gain_to_split
    d, B, _ = hist.shape
    if B < 2:  # no feature has a second bin: no threshold
        none = np.full(d, -np.inf)
        zero = np.zeros(d)
        return none, np.zeros(d, dtype=np.intp), zero, zero, zero, np.zeros(d, bool), total_hessian
    # step s scans bin t = B - 1 - s down to 1; the threshold is t - 1
    scan = hist[:, :0:-1, :].copy()
    # a bin's rows estimated from its hessian sum, as LightGBM's scan does (exact for unit
    # hessians); the right side's hessian starts at LightGBM's epsilon
    scan[..., 2] = np.floor(scan[..., 1] * (num_data / total_hessian) + 0.5)
    scan[:, 0, 1] += K_EPSILON
    right = np.cumsum(scan, axis=1)
    right_g, right_h, right_c = right[..., 0], right[..., 1], right[..., 2]
    t = np.arange(B - 1, 0, -1)
    left_c = num_data - right_c
    left_h = total_hessian - right_h
    left_g = sum_gradient - right_g
    valid = (
        (t[None, :] <= (n_bins[:, None] - 1))
        & (right_c >= min_data)
        & (right_h >= min_hess)
        & (left_c >= min_data)
        & (left_h >= min_hess)
        & usable[:, None]
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        gain = leaf_gain(left_g, left_h, l1, l2) + leaf_gain(right_g, right_h, l1, l2)
    gain = np.where(valid & ~np.isnan(gain), gain, -np.inf)
    passes = gain > min_gain_shift
    splittable = passes.any(axis=1)
    gain = np.where(passes, gain, -np.inf)
    step = np.argmax(gain, axis=1)  # the first maximum: the highest threshold
    rows = np.arange(d)
    best = gain[rows, step]
    return (
        best - min_gain_shift,
        t[step] - 1,
        left_g[rows, step],
        left_h[rows, step],
        left_c[rows, step],
        splittable,
        total_hessian,
    )


class _RowPool:
    """Room for a tree's lists of rows, kept from tree to tree (fresh arrays of a big leaf's
    rows would be page-faulted in each time): lists taken one after another from chunks of
    about n rows, a new chunk where the current one has too little room left. Room taken but
    not committed (a split's scratch) is taken again by the next list."""

    def __init__(self, n):
        self.n = n
        # 32-bit rows where they fit: a split reads and writes a leaf's list, half the bytes
        self.dtype = np.int32 if n < np.iinfo(np.int32).max else np.intp
        self.chunks: list = []
        self.chunk, self.at = 0, 0

    def reset(self):
        """Every list of the last tree given up."""
        self.chunk, self.at = 0, 0

    def take(self, size):
        """Room for ``size`` rows after the last list (its contents undefined)."""
        while True:
            if self.chunk == len(self.chunks):
                self.chunks.append(np.empty(max(size, self.n + 1), dtype=self.dtype))
            room = self.chunks[self.chunk]
            if room.size - self.at >= size:
                return room[self.at : self.at + size]
            self.chunk, self.at = self.chunk + 1, 0

    def commit(self, size):
        """The first ``size`` rows of the room last taken hold a list."""
        self.at += size


class TreeLearner:
    """Grows one tree on a BinnedMatrix from single-precision gradients and hessians."""

    def __init__(self, binned, params):
        self.binned = binned
        self.params = params
        self.trivial = binned.n_bins <= 1
        self._free: list = []  # histogram buffers of leaves done with, reused by the next ones
        self._compiled = optional(backend_of(np.empty(0)), "best_thresholds")
        self._compiled_categorical = optional(backend_of(np.empty(0)), "categorical_splits")
        self._compiled_nan = optional(backend_of(np.empty(0)), "nan_thresholds")
        self._compiled_rebuild = optional(backend_of(np.empty(0)), "rebuild_bins")
        self._splittable: dict = {}  # _may_split's, by the rows a side needs
        self._usable = np.ones(0, dtype=bool)  # every candidate scanned: a prefix of all-True
        # categorical features: scanned for sets of categories, not thresholds
        self._is_categorical = np.zeros(binned.d, dtype=bool)
        self._is_categorical[list(binned.categorical)] = True
        # features with a bin of NaN and another two: scanned twice for NaN's direction
        self._scans_nan = binned.nan_bin & (binned.n_bins > 2) & ~self._is_categorical
        self._scanned_apart = self._is_categorical | self._scans_nan
        self._most_frequent = np.zeros(binned.d, dtype=np.intp)
        for j, most in binned.nan_features.items():
            self._most_frequent[j] = most
        self._zero_first = self._scans_nan & (self._most_frequent == 0)
        # features whose most frequent bin a leaf rebuilds as LightGBM does (only these: where
        # a leaf holds no NaN, both scans tie and its rounding decides where NaN goes)
        self._rebuilt = self._scans_nan & (self._most_frequent > 0)
        self._pool = _RowPool(binned.n)
        self._labels: np.ndarray | None = None  # each row's leaf label, reused by every tree
        self._seen_hessians: tuple | None = None  # _hessian_totals'
        # the compiled scan's parameters, the leaf's gain (index 4) set per leaf
        self._params = np.array(
            [
                params.lambda_l1,
                params.lambda_l2,
                params.min_data_in_leaf,
                params.min_sum_hessian_in_leaf,
                0.0,
                K_EPSILON,
            ]
        )

    def _buffer(self):
        """A (total bins × 3) buffer for a leaf's histograms, its contents undefined."""
        if self._free:
            return self._free.pop()
        return np.zeros((self.binned.total_bins, 3))  # zeros: unused bins stay finite

    def _leaf_best(self, hist, G, H, count, candidates):
        """The best split of a leaf over its candidate features, and those of them that gain
        more than the leaf (its children's candidates)."""
        p = self.params
        l1, l2 = p.lambda_l1, p.lambda_l2
        features = candidates.features
        if count < 2 * p.min_data_in_leaf:  # no threshold leaves min_data_in_leaf rows a side
            return Split(), features[:0]
        if self._usable.size < features.size:
            self._usable = np.ones(features.size, dtype=bool)
        usable = self._usable[: features.size]
        categorical = (
            np.flatnonzero(self._is_categorical[features]) if self.binned.categorical else ()
        )
        nan = np.flatnonzero(self._scans_nan[features]) if self._scans_nan.any() else ()
        if len(categorical) or len(nan):
            usable = ~self._scanned_apart[features]
        compiled = self._compiled
        if compiled is None:
            gain, thr, lg, lh, lc, splittable, total_h = best_splits(
                hist, G, H, count, candidates.n_bins, usable, p, candidates.offsets
            )
        else:
            total_h = H + 2 * K_EPSILON
            shift = _leaf_gain_float(G, total_h, l1, l2) + p.min_gain_to_split
            self._params[4] = shift
            out, splittable = compiled(
                hist,
                candidates.offsets,
                candidates.n_bins,
                usable,
                G,
                total_h,
                count,
                self._params,
            )
            gain, thr, lg, lh, lc = out.T
        found: dict = self._categorical_splits(hist, candidates, categorical, G, total_h, count)
        found.update(self._nan_splits(hist, candidates, nan, G, H, count))
        for k, split in found.items():
            gain[k], splittable[k] = split.gain, split.splittable
        best = Split()
        # the largest gain, ties to the lower feature (argmax takes the first): SplitInfo's
        # order; unusable features and those without a passing threshold hold -inf (the
        # compiled scan writes -inf for them: one argmax over the features, no masks, unless a
        # NaN gain comes first)
        if not features.size:
            return best, features
        f = int(np.argmax(gain))
        gains = gain
        if compiled is None or gain[f] != gain[f]:
            scanned = usable | self._scanned_apart[features]
            gains = np.where(scanned & ~np.isnan(gain), gain, -np.inf)
            f = int(np.argmax(gains))
        top = float(gains[f])
        feature = int(features[f])  # f indexes the candidates, sorted: ties to the lower feature
        if top > -np.inf and isinstance(found.get(f), NanSplit):
            nan_split = found[f]
            best = Split(gain=top, feature=feature, threshold=nan_split.threshold, nan=True)
            best.default_left = nan_split.default_left
            sums = nan_split.left_gradient, nan_split.left_hessian, nan_split.left_count
            self._set_sides(best, *sums, G, total_h, count)
        elif top > -np.inf and f in found:
            best = self._categorical_split(found[f], feature, top, G, total_h, count)
        elif top > -np.inf:
            nan_bin = bool(self.binned.nan_bin[feature])  # one value and NaN: NaN goes right
            best = Split(gain=top, feature=feature, threshold=int(thr[f]), nan=nan_bin)
            best.default_left = not nan_bin
            self._set_sides(best, float(lg[f]), float(lh[f]), int(round(lc[f])), G, total_h, count)
        return best, features[splittable]

    def _set_sides(self, split, left_g, left_h, left_c, G, total_h, count):
        """A threshold split's children from its left sums (``left_h`` with LightGBM's
        epsilon)."""
        l1, l2 = self.params.lambda_l1, self.params.lambda_l2
        split.left_output = _leaf_output_float(left_g, left_h, l1, l2)
        split.right_output = _leaf_output_float(G - left_g, total_h - left_h, l1, l2)
        split.left_count, split.right_count = left_c, count - left_c
        split.left_sum_gradient, split.right_sum_gradient = left_g, G - left_g
        split.left_sum_hessian = left_h - K_EPSILON
        split.right_sum_hessian = total_h - left_h - K_EPSILON

    def _nan_splits(self, hist, candidates, nan, G, H, count):
        """{candidate: NanSplit} of the candidates with a bin of NaN (positions k among the
        candidates)."""
        if not len(nan):
            return {}
        features = candidates.features[nan]
        scanned = (candidates.offsets[nan], candidates.n_bins[nan])
        zero_first = self._zero_first[features]
        if self._compiled_nan is None:
            offsets, n_bins = scanned
            found = nan_splits(
                hist, G, H, count, n_bins, offsets, zero_first, self.params, best_splits
            )
            return dict(zip(nan, found))
        total_h = H + 2 * K_EPSILON
        p = self.params
        self._params[4] = (
            _leaf_gain_float(G, total_h, p.lambda_l1, p.lambda_l2) + p.min_gain_to_split
        )
        out, splittable = self._compiled_nan(
            hist, *scanned, zero_first, G, total_h, count, self._params
        )
        return {
            k: NanSplit(
                float(row[0]),
                int(row[1]) if row[0] > -np.inf else 0,
                float(row[2]),
                float(row[3]),
                int(row[4]) if row[0] > -np.inf else 0,
                bool(row[5]),
                bool(splittable[i]),
            )
            for i, (k, row) in enumerate(zip(nan, out))
        }

    def _categorical_splits(self, hist, candidates, categorical, G, total_h, count):
        """{candidate: CategoricalSplit} of the categorical candidates (positions k among the
        candidates): the compiled scan of them all at once where the backend has it."""
        if not len(categorical):
            return {}
        p, compiled = self.params, self._compiled_categorical
        offsets, n_bins = candidates.offsets[categorical], candidates.n_bins[categorical]
        if compiled is None:
            return {
                k: best_categorical_split(hist[o : o + b], G, total_h, count, p, p.categorical)
                for k, o, b in zip(categorical, offsets.tolist(), n_bins.tolist())
            }
        cat = p.categorical
        shift = _leaf_gain_float(G, total_h, p.lambda_l1, p.lambda_l2) + p.min_gain_to_split
        params = [*self._params[:4], shift, K_EPSILON, cat.max_cat_to_onehot]
        params += [cat.max_cat_threshold, cat.cat_l2, cat.cat_smooth, cat.min_data_per_group]
        out, splittable, left = compiled(hist, offsets, n_bins, G, total_h, count, params)
        out[out[:, 0] == -np.inf, 1:5] = 0  # no split: its sums are not written
        return {
            k: CategoricalSplit(
                gain=float(row[0]),
                bins=left[i, : int(row[1])].copy(),
                left_gradient=float(row[2]),
                left_hessian=float(row[3]),
                left_count=int(row[4]),
                reg_lambda=float(row[5]),
                splittable=bool(splittable[i]),
            )
            for i, (k, row) in enumerate(zip(categorical, out))
        }

    def _categorical_split(self, found, feature, gain, G, total_h, count):
        """The Split of a categorical feature's best set of categories."""
        best = Split(gain=gain, feature=feature, threshold=-1, left_bins=found.bins)
        left_g, left_h, left_c = found.left_gradient, found.left_hessian, found.left_count
        best.left_output, best.right_output = leaf_outputs(found, G, total_h, self.params.lambda_l1)
        best.left_count, best.right_count = left_c, count - left_c
        best.left_sum_gradient, best.right_sum_gradient = left_g, G - left_g
        best.left_sum_hessian = left_h - K_EPSILON
        best.right_sum_hessian = total_h - left_h - K_EPSILON
        return best

    def grow(self, g, h, rows, features, sum_gradients=None):
        """One tree on the target rows ``rows`` (sorted; all rows or a bag; None: all rows) with
        gradients g and hessians h (float32, length n), the features allowed by ``features``
        (bool, length d); ``sum_gradients``: Σg over every row where the caller has it (the
        bits of the backend's ``sum_float64(g)``), read where the tree takes every row.

        Returns the tree, each target row's label (length n; rows not in ``rows`` hold
        ``num_leaves``; an array this learner writes again at its next tree) and each leaf's
        label: the rows of leaf j are those labelled ``leaf_labels[j]``."""
        p, binned = self.params, self.binned
        tree = Tree()
        # every row: the same values in the same order, so the same sums without the gathers
        if rows is None:
            every, size = True, binned.n
        else:
            rows = np.asarray(rows, dtype=np.intp)
            every, size = rows.size == g.size, rows.size
        if every and sum_gradients is not None:
            G = float(sum_gradients)
        else:
            G = backend_of(g).sum_float64(g if every else g[rows])  # np.sum's bits, in parallel
        H, c, repeated = self._hessian_totals(h, rows if not every else None)
        tree.leaf_value[0] = float(_round_to_zero(leaf_output(G, H, p.lambda_l1, p.lambda_l2)))
        # a split moves its smaller side's rows to a list of their own and relabels them; the
        # larger side keeps its parent's list and label (LightGBM's data partition rewrites the
        # parent's whole range instead: a leaf that sheds a small group costs the group here)
        dtype = np.uint8 if p.num_leaves <= 255 else np.int32
        if self._labels is None or self._labels.dtype != dtype:
            self._labels = np.empty(binned.n, dtype=dtype)
        # one array from tree to tree (the caller reads a tree's labels before the next grows):
        # a new one's pages would be faulted in by the root's split, on both threads at once
        labels = self._labels
        if every:
            labels.fill(0)
        else:
            labels.fill(p.num_leaves)
            labels[rows] = 0
        pool = self._pool
        pool.reset()
        root = pool.take(size)
        # every row: the root's list is left unfilled, its histograms and its split read the
        # rows in order without it (the split writes both children's lists)
        unfilled = rows is None
        if not unfilled:
            root[:] = rows
        pool.commit(size)
        lists, leaf_labels, count = [root], [0], [size]
        sums = [(G, H)]
        allowed = features & ~self.trivial
        if c is not None:
            allowed &= self._may_split(c)
        candidates = binned.candidates(np.flatnonzero(allowed))
        hists = {
            0: self._histograms(
                None if unfilled else root, g, h, (G, H), candidates, repeated if unfilled else None
            )
        }
        best: dict[int, Split] = {}
        # per leaf, the features it could split (LightGBM's is_splittable): its children
        # build and scan only those
        flags: dict[int, np.ndarray] = {}
        best[0], flags[0] = self._leaf_best(hists[0], G, H, size, candidates)
        for _ in range(p.num_leaves - 1):
            leaf = -1
            for candidate in range(tree.num_leaves):
                if candidate in best and (leaf < 0 or best[candidate].better_than(best[leaf])):
                    leaf = candidate
            if leaf < 0 or not best[leaf].gain > 0.0:
                break
            split = best.pop(leaf)
            f, bin_ = split.feature, split.threshold
            if split.left_bins is not None:  # categories: a table of the bins sent left
                bin_ = goes_left(split.left_bins, int(binned.n_bins[f]))
            elif split.nan and split.default_left:  # the bins up to the threshold, and NaN's
                nb = int(binned.n_bins[f])
                bin_ = goes_left(np.r_[: split.threshold + 1, nb - 1], nb)
            lst, label, right = lists[leaf], leaf_labels[leaf], tree.num_leaves
            # the side the scan expects to be smaller moves (the one whose histograms are built
            # from rows); where the expected counts erred, the other side's list is compacted
            side = split.left_count < split.right_count
            out = pool.take(lst.size + 1)
            moved, kept = binned.split(lst, labels, label, right, f, bin_, side, out, unfilled)
            unfilled = False
            if kept < 0:  # lst not read: it still holds the moved rows, which need room apart
                stay, out = lst, out[:moved]
                pool.commit(moved)
            else:
                # the rows that stay were compacted to the front of lst: its rest is free, and the
                # moved rows go there, so that the room taken serves the next split again (a
                # tree's lists then fill about n rows, not n per level of the tree)
                stay = lst[:kept]
                lst[kept : kept + moved] = out[:moved]
                out = lst[kept : kept + moved]
            n_left = moved if side else count[leaf] - moved
            split.left_count, split.right_count = n_left, count[leaf] - n_left
            if split.left_bins is None:
                real = binned.bounds[f][split.threshold]
                right = tree.split(leaf, f, bin_, real, split, split.gain + p.min_gain_to_split)
            else:
                categories = binned.bounds[f][split.left_bins]
                right = tree.split_categorical(
                    leaf,
                    f,
                    bin_,
                    categories,
                    binned.categorical[f],
                    split,
                    split.gain + p.min_gain_to_split,
                )
            if side:
                lists[leaf], leaf_labels[leaf] = out, right
                lists.append(stay)
                leaf_labels.append(label)
            else:
                lists[leaf] = stay
                lists.append(out)
                leaf_labels.append(right)
            count.append(count[leaf] - n_left)
            count[leaf] = n_left
            sums[leaf : leaf + 1] = [(split.left_sum_gradient, split.left_sum_hessian)]
            sums.append((split.right_sum_gradient, split.right_sum_hessian))
            parent_hist, parent_flags = hists.pop(leaf), flags.pop(leaf)
            if p.max_depth > 0 and tree.leaf_depth[leaf] >= p.max_depth:
                self._free.append(parent_hist)
                continue
            if count[leaf] < 2 * p.min_data_in_leaf and count[right] < 2 * p.min_data_in_leaf:
                self._free.append(parent_hist)
                continue
            small, large = (leaf, right) if count[leaf] < count[right] else (right, leaf)
            if not parent_flags.size:  # no feature can split either child: no histograms
                self._free.append(parent_hist)
                best[small], best[large] = Split(), Split()
                continue
            small_rows = lists[small]
            if small_rows.size != count[small]:  # the list that stayed, with moved rows in it
                small_rows = lists[small] = small_rows[
                    : binned.compact(small_rows, labels, leaf_labels[small])
                ]
            candidates = binned.candidates(parent_flags)
            children: tuple = (small, large)
            if count[small] < 2 * p.min_data_in_leaf and not self._rebuilt[parent_flags].any():
                # the small side cannot split (no threshold leaves min_data_in_leaf rows a
                # side): its histograms only make the large side's, subtracted from the
                # parent's as they are summed (a small leaf's sparse features' at the bins its
                # rows reach)
                self._histograms(small_rows, g, h, sums[small], candidates, sibling=parent_hist)
                best[small], flags[small] = Split(), parent_flags[:0]
                children = (large,)
            else:
                hists[small] = self._histograms(small_rows, g, h, sums[small], candidates)
                binned.subtract(parent_hist, hists[small], candidates)  # the parent's: not read
            hists[large] = parent_hist
            for child in children:
                Gc, Hc = sums[child]
                best[child], flags[child] = self._leaf_best(
                    hists[child], Gc, Hc, count[child], candidates
                )
        self._free.extend(hists.values())
        return tree, labels, np.asarray(leaf_labels, dtype=np.intp)

    def _hessian_totals(self, h, rows):
        """Σh over the rows (None: every row) and :meth:`_counts_exact`, kept for the hessians of
        every row that an objective hands again: squared error's unit hessians, one array every
        round (a row of it, a new view each time: the array behind it and the view's place in it
        are compared). The array is referred to weakly: the hessians of other objectives, new
        each round, are let go before the next round's are made; a dead reference matches no
        array, so a reused identity is never taken for it. The objectives make new arrays of
        hessians each round but squared error's, which is never written (L2.gradients). Returns
        (Σh, c, key): key names hessians seen before (the binned matrix keeps their sums over
        every row under it), None the first time or for a selection of rows."""
        owner = h if h.base is None else h.base
        seen = self._seen_hessians
        where = (h.__array_interface__["data"][0], h.shape, h.strides)
        if rows is None and seen is not None and seen[0][0]() is owner and seen[0][1:] == where:
            return seen[1], seen[2], seen[0]
        key = (weakref.ref(owner), *where)
        H = backend_of(h).sum_float64(h if rows is None else h[rows])
        c = self._counts_exact(h)
        if rows is None:
            self._seen_hessians = (key, H, c)
        return H, c, None

    def _counts_exact(self, h):
        """The hessian every target row holds where the threshold scan's rows (estimated from
        hessian sums) are every leaf's true rows: hessians equal on all target rows (squared
        error without weights), large enough that LightGBM's epsilons and the rounding stay
        below half a row; else None."""
        if not h.size:
            return None
        c = float(h[0])
        if not (c > 0.0 and float(h.min()) == c == float(h.max())):
            return None
        return c if self.binned.n * (4 * K_EPSILON / c + 1e-15) < 0.25 else None

    def _may_split(self, c):
        """Per feature, whether some threshold leaves ``min_child_samples`` rows and
        ``min_child_weight`` hessian (c a row, with LightGBM's epsilons) on both sides over all
        target rows (exact counts, once per fit). A leaf's rows on either side are at most
        those, so a feature without such a threshold never splits any leaf where the scan
        counts rows exactly (:meth:`_counts_exact`): LightGBM's ``feature_pre_filter`` on exact
        counts, which cannot change a tree."""
        p = self.params
        # a side's hessian is c · its rows plus at most two epsilons; rounded down (a margin
        # for the sums' rounding): fewer rows needed, never a feature dropped that could split
        by_hessian = (p.min_sum_hessian_in_leaf - 2 * K_EPSILON) / c * (1.0 - 1e-9)
        need = max(p.min_data_in_leaf, int(np.floor(by_hessian)) if by_hessian > 0 else 0)
        if need not in self._splittable:
            self._splittable[need] = self.binned.may_split(need)
        return self._splittable[need]

    def _histograms(self, rows, g, h, totals, candidates, hessians_of=None, sibling=None):
        # what the threshold scan reads alone: no default bins 0, no counts of the fact table
        # (nor, where every row's hessians repeat, their sums: kept by the binned matrix)
        out = self._buffer()
        self.binned.leaf_histograms(
            rows,
            g,
            h,
            totals,
            zero_bins=False,
            candidates=candidates,
            out=out,
            counts=False,
            hessians_of=hessians_of,
            sibling=sibling,
        )
        if sibling is not None:  # out holds nothing to read: free again
            self._free.append(out)
        else:
            self._rebuild_most_frequent(out, totals, candidates)
        return out

    def _rebuild_most_frequent(self, hist, totals, candidates):
        """The most frequent bin of each candidate of :attr:`_rebuilt` as LightGBM holds it in a
        leaf's histograms built from its rows (``Dataset::FixHistogram``): the leaf's sums less
        every other bin, one at a time, in place. A leaf's histograms made by subtraction are
        its parent's less its sibling's, each so rebuilt, as LightGBM's."""
        features = candidates.features
        at = np.flatnonzero(self._rebuilt[features])
        if not at.size:
            return
        if self._compiled_rebuild is not None:
            self._compiled_rebuild(
                hist,
                candidates.offsets[at],
                candidates.n_bins[at],
                self._most_frequent[features[at]],
                *totals,
            )
            return
        for o, b, m in zip(
            candidates.offsets[at].tolist(),
            candidates.n_bins[at].tolist(),
            self._most_frequent[features[at]].tolist(),
        ):
            for k in range(2):
                others = np.concatenate([hist[o : o + m, k], hist[o + m + 1 : o + b, k]])
                hist[o + m, k] = np.cumsum(np.concatenate([[totals[k]], -others]))[-1]
