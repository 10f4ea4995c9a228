"""LightGBM's leaf arithmetic (``feature_histogram.hpp``): a leaf's value and gain from its
gradient and hessian sums under L1/L2 penalties, in NumPy and in Python floats with NumPy's bits,
shared by the threshold scans of :mod:`.gbdt_trees` and :mod:`.gbdt_categorical`."""

from __future__ import annotations

import numpy as np

K_EPSILON = float(np.float32(1e-15))  # LightGBM's kEpsilon (a float)
K_ZERO = float(np.float32(1e-35))


def _round_to_zero(values):
    """LightGBM's MaybeRoundToZero: values within 1e-35 of zero become 0."""
    values = np.asarray(values, dtype=np.float64)
    return np.where((values > -K_ZERO) & (values <= K_ZERO), 0.0, values)


def threshold_l1(s, l1):
    """sign(s)·max(0, |s| - l1), elementwise."""
    return np.sign(s) * np.maximum(0.0, np.abs(s) - l1)


def leaf_output(G, H, l1, l2):
    """A leaf's value for gradient sum G and hessian sum H: -ThresholdL1(G, l1) / (H + l2)."""
    return -threshold_l1(G, l1) / (H + l2)


def leaf_gain(G, H, l1, l2):
    """A leaf's gain: ThresholdL1(G, l1)² / (H + l2)."""
    s = threshold_l1(G, l1)
    return s * s / (H + l2)


def _threshold_l1_float(s, l1):
    """:func:`threshold_l1` of one float in Python's arithmetic (a NumPy call per leaf and
    side costs more than the scan of a small leaf), with NumPy's bits: a zero sum gives +0.0,
    a negative one within l1 of zero -0.0, NaN stays NaN."""
    m = abs(s) - l1
    if m <= 0.0:
        m = 0.0
    if s > 0.0:
        return m
    if s < 0.0:
        return -m
    return 0.0 if s == 0.0 else s


def _leaf_output_float(G, H, l1, l2):
    """:func:`leaf_output` of floats; NumPy's where the divisor is zero (inf or NaN, no
    exception)."""
    d = H + l2
    if d == 0.0:
        return float(leaf_output(G, H, l1, l2))
    return -_threshold_l1_float(G, l1) / d


def _leaf_gain_float(G, H, l1, l2):
    """:func:`leaf_gain` of floats; NumPy's where the divisor is zero."""
    d = H + l2
    if d == 0.0:
        return float(leaf_gain(G, H, l1, l2))
    s = _threshold_l1_float(G, l1)
    return s * s / d


_MAX_FLOAT = float(np.finfo(np.float64).max)


def _nan_to_num(x):
    """np.nan_to_num of one float: NaN to 0, infinities to the largest finite floats."""
    if x != x:
        return 0.0
    if x == np.inf:
        return _MAX_FLOAT
    if x == -np.inf:
        return -_MAX_FLOAT
    return x
