"""Helpers for the estimators' row-chunked Dask arrays (targets, labels, distances), so that
nothing n-long comes to the client: k-means++ draws, the farthest points, class codes, scores."""

import dask
import dask.array as da
import numpy as np
from dask import delayed

# Names of Dask arrays known to hold finite numbers only (targets whose values to_matrix checked in
# its pass over the data), so that a fit does not read them again to check them.
_FINITE: set[str] = set()


def known_finite(array):
    """Record that a Dask array holds finite values only (its name identifies its graph)."""
    _FINITE.add(array.name)


def is_known_finite(array):
    """Whether :func:`known_finite` recorded this array's graph."""
    return array.name in _FINITE


def _blocks(array):
    blocks = array.to_delayed(optimize_graph=False)  # keeps the futures of a persisted array alive
    return list(blocks.reshape(blocks.shape[0], -1)[:, 0])


def _offsets(array):
    return np.concatenate([[0], np.cumsum(array.chunks[0])]).astype(np.int64)


def _search(block, values):
    cumulative = np.cumsum(block)
    return np.minimum(np.searchsorted(cumulative, values), block.shape[0] - 1)


def draw_rows(weights, draws):
    """Rows where ``draws`` fall along the cumulative sum of ``weights`` (as
    ``searchsorted(cumsum(weights), draws)``): the chunk of each draw from the chunks' totals,
    the row within it on the chunk's worker."""
    blocks = _blocks(weights)
    totals = np.array(dask.compute(*[delayed(np.sum, pure=True)(b) for b in blocks]), dtype=float)
    ends = np.cumsum(totals)
    draws = np.asarray(draws, dtype=float)
    chunk = np.minimum(np.searchsorted(ends, draws), len(blocks) - 1)
    offsets = _offsets(weights)
    starts = ends - totals
    wanted = {}
    for i, k in enumerate(chunk):
        wanted.setdefault(int(k), []).append(i)
    found = dask.compute(
        {
            k: delayed(_search, pure=True)(blocks[k], draws[rows] - starts[k])
            for k, rows in wanted.items()
        }
    )[0]
    ids = np.empty(draws.size, dtype=np.int64)
    for k, rows in wanted.items():
        ids[rows] = offsets[k] + found[k]
    return np.minimum(ids, weights.shape[0] - 1)


def largest(values, m):
    """Positions of the m largest values, largest first (ties: the first position)."""
    if m <= 0:
        return np.zeros(0, dtype=np.int64)
    return np.asarray(da.argtopk(values, m).compute(), dtype=np.int64)


def take_values(values, codes):
    """``values[codes]`` block by block."""
    return codes.map_blocks(_take, values, dtype=values.dtype)


def _take(block, values):
    return values[block]


def class_codes(y, check):
    """(sorted classes, codes) of a Dask target: its distinct values in one pass, checked by
    ``check`` (scikit-learn's classification-target check) on those; codes stay lazy."""
    classes = np.unique(da.unique(y).compute())
    check(classes)
    codes = y.map_blocks(_codes, classes, dtype=np.intp)
    return classes, codes


def _codes(block, classes):
    return np.searchsorted(classes, block)


def _r2_parts(y, prediction, sw):
    """(Σw, weighted mean, Σ w (y - mean)², Σ w (y - prediction)²) per output of one block."""
    y = np.asarray(y, dtype=np.float64)
    y = y[:, None] if y.ndim == 1 else y
    prediction = np.asarray(prediction, dtype=np.float64).reshape(y.shape)
    w = np.ones(y.shape[0]) if sw is None else np.asarray(sw, dtype=np.float64)
    total = float(w.sum())
    mean = (w @ y) / total if total else np.zeros(y.shape[1])
    return total, mean, w @ (y - mean) ** 2, w @ (y - prediction) ** 2


def _combine_r2(*items):
    total, mean, m2, residual = items[0]
    for t_b, mean_b, m2_b, residual_b in items[1:]:
        if not t_b:
            continue
        if not total:
            total, mean, m2, residual = t_b, mean_b, m2_b, residual + residual_b
            continue
        both = total + t_b
        delta = mean_b - mean
        mean = mean + delta * (t_b / both)
        m2 = m2 + m2_b + delta * delta * (total * t_b / both)
        residual = residual + residual_b
        total = both
    return total, mean, m2, residual


def r2_score(y, prediction, sample_weight=None):
    """scikit-learn's R² (averaged over outputs) of a Dask target and prediction, in one pass:
    per chunk the weighted moments of y and the residual sum of squares, combined without
    cancellation."""
    from .graph import tree

    prediction = prediction.rechunk({0: y.chunks[0], **({1: -1} if prediction.ndim == 2 else {})})
    y = y.rechunk({0: y.chunks[0], **({1: -1} if y.ndim == 2 else {})})
    weights = None if sample_weight is None else _blocks(sample_weight.rechunk(y.chunks[0]))
    parts = [
        delayed(_r2_parts, pure=True)(a, b, None if weights is None else weights[k])
        for k, (a, b) in enumerate(zip(_blocks(y), _blocks(prediction)))
    ]
    _, _, m2, residual = dask.compute(tree(parts, _combine_r2))[0]
    score = np.where(
        m2 > 0, 1.0 - residual / np.where(m2 > 0, m2, 1.0), np.where(residual == 0, 1.0, 0.0)
    )
    return float(np.mean(score))


def accuracy(y, prediction, sample_weight=None):
    """The (weighted) fraction of correct predictions, in one pass."""
    correct = (y == prediction).astype(np.float64)
    if sample_weight is None:
        return float(correct.mean().compute())
    hits, total = dask.compute((correct * sample_weight).sum(), sample_weight.sum())
    return float(hits / total)
