"""Where NaN goes: LightGBM's two threshold scans of a feature with a bin of NaN values.

A numerical feature that holds NaN has a last bin of them (LightGBM's missing type NaN,
:func:`~ilargi.rewriter.bin_edges.bin_upper_bounds`). With more than two bins, LightGBM scans its
thresholds twice (``FindBestThresholdSequentially`` with ``NA_AS_MISSING``):

* from the right, NaN's bin left out of the sums: NaN goes left, with the bins up to the
  threshold (``default_left``); this is the usual scan over the other bins;
* from the left: NaN goes right, with the bins above the threshold.

The second replaces the first only where its gain is larger. With two bins (one value and
NaN) the usual scan sends NaN right. A leaf's bin 0 is summed as the rest of the leaf where it
is the feature's most frequent bin (LightGBM then keeps no histogram of it), else read: this
decides the rows the scan from the left counts (from hessians) and so its checks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .gbdt_gains import K_EPSILON, leaf_gain


@dataclass
class NanSplit:
    """The best threshold of a feature with a bin of NaN, and where NaN goes."""

    gain: float  # less the leaf's gain; -inf for none
    threshold: int
    left_gradient: float
    left_hessian: float  # with LightGBM's epsilon
    left_count: int
    default_left: bool
    splittable: bool


def nan_splits(hist, G, H, count, n_bins, offsets, zero_first, params, reverse_scan):
    """The :class:`NanSplit` of each feature with a bin of NaN values.

    Parameters
    ----------
    hist : ndarray, shape (total bins, 3)
        The leaf's histograms, feature f's bins from row ``offsets[f]`` (bin 0's read where
        it is not the most frequent bin: a dense feature's, always summed).
    G, H : float
        The leaf's sums of gradients and hessians (H without epsilons).
    count : int
        The leaf's rows.
    n_bins, offsets : ndarray of intp
        Each feature's bins (NaN's last, more than two) and first row of ``hist``.
    zero_first : ndarray of bool
        Whether each feature's most frequent bin is bin 0.
    params : GrowthParams
    reverse_scan : callable
        LightGBM's scan from the right (:func:`~ilargi.models.gbdt_trees.best_splits`).

    Returns
    -------
    list of NanSplit
    """
    usable = np.ones(len(n_bins), dtype=bool)
    # from the right over the bins but NaN's: NaN's sums stay on the left
    gain, thr, lg, lh, lc, splittable, total_h = reverse_scan(
        hist, G, H, count, n_bins - 1, usable, params, offsets
    )
    shift = leaf_gain(G, total_h, params.lambda_l1, params.lambda_l2) + params.min_gain_to_split
    out = []
    for k, (o, b) in enumerate(zip(offsets.tolist(), n_bins.tolist())):
        split = NanSplit(
            float(gain[k]),
            int(thr[k]),
            float(lg[k]),
            float(lh[k]),
            int(round(lc[k])),
            True,
            bool(splittable[k]),
        )
        forward = _forward_scan(hist[o : o + b], G, total_h, count, bool(zero_first[k]), params)
        if forward is not None:
            best, t, left_g, left_h, left_c = forward
            split.splittable = True
            # LightGBM keeps the scan from the right's unless this gain is larger than its
            # output's gain plus the shift (the same arithmetic: where the leaf holds no NaN,
            # both find the same partition and rounding decides)
            if best > split.gain + shift:
                split.gain, split.threshold = best - shift, t
                split.left_gradient, split.left_hessian, split.left_count = left_g, left_h, left_c
                split.default_left = False
        out.append(split)
    return out


def _forward_scan(bins, G, total_h, count, zero_first, params):
    """LightGBM's scan from the left of one feature, NaN on the right: (gain, threshold, left
    sums) of its best threshold, None where no threshold gains more than the leaf. ``bins``:
    the feature's bins, NaN's last. The sums are added in LightGBM's order: where two
    thresholds make the same partition (a leaf without NaN), rounding decides, as in LightGBM."""
    p = params
    factor = count / total_h
    g, h = bins[:, 0], bins[:, 1]
    c = np.floor(h * factor + 0.5)  # a bin's rows from its hessians, as LightGBM counts them
    if zero_first:  # bin 0 as the leaf less every other bin, one subtraction at a time
        start_g = np.cumsum(np.concatenate([[G], -g[1:]]))[-1]
        start_h = np.cumsum(np.concatenate([[total_h - K_EPSILON], -h[1:]]))[-1]
        start_c = count - c[1:].sum()
    else:  # bin 0's own sums
        start_g, start_h, start_c = 0.0 + g[0], K_EPSILON + h[0], c[0]
    # thresholds 0 .. NaN's bin - 1: bin 0, then each next bin but NaN's added on the left
    left_g = np.cumsum(np.concatenate([[start_g], g[1:-1]]))
    left_h = np.cumsum(np.concatenate([[start_h], h[1:-1]]))
    left_c = np.cumsum(np.concatenate([[start_c], c[1:-1]]))
    right_h = total_h - left_h
    valid = (
        (left_c >= p.min_data_in_leaf)
        & (left_h >= p.min_sum_hessian_in_leaf)
        & (count - left_c >= p.min_data_in_leaf)
        & (right_h >= p.min_sum_hessian_in_leaf)
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        gain = leaf_gain(left_g, left_h, p.lambda_l1, p.lambda_l2) + leaf_gain(
            G - left_g, right_h, p.lambda_l1, p.lambda_l2
        )
    shift = leaf_gain(G, total_h, p.lambda_l1, p.lambda_l2) + p.min_gain_to_split
    gain = np.where(valid & ~np.isnan(gain) & (gain > shift), gain, -np.inf)
    t = int(np.argmax(gain))  # the first maximum: the lowest threshold
    if not gain[t] > -np.inf:
        return None
    return float(gain[t]), t, float(left_g[t]), float(left_h[t]), int(round(left_c[t]))
