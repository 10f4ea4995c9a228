"""Categorical splits as LightGBM finds and writes them (``FindBestThresholdCategoricalInner``,
``Tree::SplitCategorical``): a set of a feature's categories goes left, the rest right.

A categorical feature's bins are its categories, bin 0 those without a bin of their own
(:func:`~ilargi.rewriter.bin_edges.category_bins`); bin 0 is never sent left. With at most
``max_cat_to_onehot`` bins, each category alone is tried against the rest; with more, the
categories of at least ``cat_smooth`` rows are sorted by Σg / (Σh + cat_smooth) and the first
ones from either end (at most ``max_cat_threshold``, in groups of at least
``min_data_per_group`` rows) go left, the gains and leaf values then penalized by ``reg_lambda +
cat_l2``. Rows per bin are estimated from the hessians, as the threshold scan estimates them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from .gbdt_gains import K_EPSILON, _leaf_gain_float, _leaf_output_float


@dataclass(frozen=True)
class CategoricalParams:
    """LightGBM's categorical parameters (its names and defaults)."""

    max_cat_to_onehot: int = 4
    max_cat_threshold: int = 32
    cat_l2: float = 10.0
    cat_smooth: float = 10.0
    min_data_per_group: int = 100

    @classmethod
    def of(cls, estimator):
        """The parameters of an estimator that has them under the same names."""
        return cls(**{f.name: getattr(estimator, f.name) for f in fields(cls)})


@dataclass
class CategoricalSplit:
    """The best categorical split of a leaf on one feature."""

    gain: float  # over the leaf (minus its gain and min_split_gain); -inf where none passes
    bins: np.ndarray  # the bins sent left
    left_gradient: float
    left_hessian: float  # with LightGBM's epsilon, as the threshold scan's
    left_count: int
    reg_lambda: float  # the L2 penalty of the children's values
    splittable: bool  # whether some split gains more than the leaf


def best_categorical_split(hist, G, total_h, count, growth, cat):
    """LightGBM's best categorical split of one feature of a leaf.

    Parameters
    ----------
    hist : ndarray of shape (bins, 3)
        The feature's histograms of the leaf (Σg, Σh; counts not read).
    G, total_h : float
        The leaf's Σg and Σh plus LightGBM's two epsilons.
    count : int
        The leaf's rows.
    growth : GrowthParams
        reg_alpha/reg_lambda, min_child_samples/min_child_weight and min_split_gain.
    cat : CategoricalParams

    Returns
    -------
    CategoricalSplit
    """
    l1, l2 = growth.lambda_l1, growth.lambda_l2
    min_data, min_hess = growth.min_data_in_leaf, growth.min_sum_hessian_in_leaf
    shift = _leaf_gain_float(G, total_h, l1, l2) + growth.min_gain_to_split
    n_bins = hist.shape[0]
    g, h = hist[:, 0].tolist(), hist[:, 1].tolist()
    per_hessian = count / total_h
    rows = [int(v * per_hessian + 0.5) for v in h]
    best = CategoricalSplit(-np.inf, np.zeros(0, np.intp), 0.0, 0.0, 0, l2, False)
    best_gain = -np.inf
    if n_bins <= cat.max_cat_to_onehot:
        for t in range(1, n_bins):
            c = rows[t]
            if c < min_data or h[t] < min_hess or count - c < min_data:
                continue
            other_h = total_h - h[t] - K_EPSILON
            if other_h < min_hess:
                continue
            gain = _leaf_gain_float(G - g[t], other_h, l1, l2) + _leaf_gain_float(
                g[t], h[t] + K_EPSILON, l1, l2
            )
            if gain <= shift:
                continue
            best.splittable = True
            if gain > best_gain:
                best_gain = gain
                best.bins = np.array([t], dtype=np.intp)
                best.left_gradient, best.left_hessian, best.left_count = g[t], h[t] + K_EPSILON, c
    else:
        l2 += cat.cat_l2
        best.reg_lambda = l2
        kept = [t for t in range(1, n_bins) if rows[t] >= cat.cat_smooth]
        # stable: ties keep the bins' order
        kept.sort(key=lambda t: g[t] / (h[t] + cat.cat_smooth))
        used = len(kept)
        most = min(cat.max_cat_threshold, (used + 1) // 2)
        for order in (kept, kept[::-1]):
            group = left_c = 0
            left_g, left_h = 0.0, K_EPSILON
            for i in range(min(used, most)):
                t = order[i]
                left_g += g[t]
                left_h += h[t]
                left_c += rows[t]
                group += rows[t]
                if left_c < min_data or left_h < min_hess:
                    continue
                right_c = count - left_c
                if right_c < min_data or right_c < cat.min_data_per_group:
                    break
                right_h = total_h - left_h
                if right_h < min_hess:
                    break
                if group < cat.min_data_per_group:
                    continue
                group = 0
                gain = _leaf_gain_float(left_g, left_h, l1, l2) + _leaf_gain_float(
                    G - left_g, right_h, l1, l2
                )
                if gain <= shift:
                    continue
                best.splittable = True
                if gain > best_gain:
                    best_gain = gain
                    best.bins = np.array(order[: i + 1], dtype=np.intp)
                    best.left_gradient, best.left_hessian, best.left_count = left_g, left_h, left_c
    if best.splittable:
        best.gain = best_gain - shift
    return best


def leaf_outputs(split, G, total_h, l1):
    """The left and right children's values of a categorical split."""
    left = _leaf_output_float(split.left_gradient, split.left_hessian, l1, split.reg_lambda)
    right = _leaf_output_float(
        G - split.left_gradient, total_h - split.left_hessian, l1, split.reg_lambda
    )
    return left, right


def goes_left(bins, n_bins=256):
    """A table over a feature's codes: True at the bins sent left."""
    table = np.zeros(n_bins, dtype=bool)
    table[bins] = True
    return table


def bitset(categories):
    """LightGBM's bitset of whole numbers (``Common::ConstructBitset``): bit v % 32 of word
    v // 32 set for each v, as many words as the largest needs."""
    values = np.asarray(categories, dtype=np.int64)
    words = np.zeros(int(values.max()) // 32 + 1, dtype=np.uint64)
    np.bitwise_or.at(
        words, values // 32, np.left_shift(np.uint64(1), (values % 32).astype(np.uint64))
    )
    return [int(w) for w in words]
