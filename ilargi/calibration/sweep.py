"""The training data of the chooser: ilargi times both plans on synthetic scenarios itself.

Each scenario is drawn at random (seeded) from :func:`ilargi.datasets.make_star`: tuple ratio, feature
ratio, sparsity, number of dimensions, join kind, dense/sparse/one-hot/mixed sources, size. Three
variations go beyond one make_star call: dimensions of different tuple and feature ratios (several
one-dimension stars over the same fact rows, recomposed), one-hot encoded sources (a few ones per
row, as in the Hamlet and Santoku data), and mixed dense/one-hot parts (numeric columns beside
one-hot ones, as in TPC-H); in the "keys" style the fact table holds keys and at most a few numeric
columns, and each dimension one-hot encodes its own key (as Hamlet's). The "wide_keys" style, drawn
only when asked for (``styles``), is the keys style at Hamlet's scale: 5·10⁴ fact rows and more,
and dimension rows of 5-40 one-hot attributes (Hamlet Yelp's users hold 33 entries a row, Walmart's
stores 10), whose joined rows repeat tens of stored entries. The "tall" style, drawn only when asked
for, is the warehouse fact table: 5·10⁵ to 4·10⁶ fact rows (TPC-H lineitem, TPC-DS sales and
returns) of a few numeric and one-hot categorical columns, joined to dimensions of tuple ratios 1.5
to 3·10⁴, each a few numeric and categorical columns too; its caps are its own (:data:`TALL_CAPS`),
since the default ones would shrink it to the shapes the other styles already draw. The "roles" style, also drawn only when
asked for, is a dense star of small dimensions (a few to thousands of rows, tuple ratios up to 10⁵,
as airports, dates, nations) one of which plays two roles: the same source joined a second time
through a key of its own (a flight's origin and destination airport, an order's sale and ship
date). On each scenario the join is
timed (``nm.materialize()``), then every operator (with random widths m) and a couple of estimators
with a fixed iteration budget run both plans side by side (:func:`ilargi.calibration.runs.time_pair`).
A logistic fit's target has two classes most often, or 3, 5 or 8 (:data:`CLASSES`: a softmax pass
of one column per class). A fit that converges before its budget (common on synthetic data) is
recorded with the iterations it ran. One CSV row per workload: scenario parameters, the features of
:func:`ilargi.chooser.features.extract`, and ``t_fact``, ``t_mat``, ``t_join`` (seconds, medians) and
``repeats``.

Workloads whose estimated time (from the FLOP and byte estimates) is above a cap are skipped, and the
sweep stops at its time budget, writing as it goes. It needs NumPy/SciPy (and CuPy for
``device="gpu"``), never LightGBM.

An output named ``*.csv.xz`` is written xz-compressed, as the sweeps shipped in ``estimators/`` are
stored (the same CSV text; pandas and :func:`refeaturize` read either).
"""

import csv
import gc
import lzma
import math
import shutil
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ilargi.backend import compile_kernels
from ilargi.backend import threads as thread_control
from ilargi.chooser import host
from ilargi.chooser.cost_model import META, TIMES
from ilargi.chooser.features import DEVICE_COLUMNS, combine, data_features, extract
from ilargi.chooser.memory import available_bytes
from ilargi.chooser.workload import MODELS, OPERATORS, Workload, workload_of
from ilargi.datasets import make_star
from ilargi.models import GNMF, KMeans, LinearRegression, LogisticRegression
from ilargi.rewriter import NormalizedMatrix

from .runs import iterations_run, model_calls, operator_calls, time_join, time_pair

# Caps that keep one scenario within a few seconds and a few hundred MiB on a 2-core machine.
MAX_DENSE_CELLS = 5e7  # n * d of a dense joined table
MAX_SPARSE_ENTRIES = 3e7  # nnz of a sparse joined table
MAX_SOURCE_ENTRIES = 2e7  # entries of one source
MEMORY_SHARE = 0.5  # of the available memory, the most a workload's results may take
MAX_SECONDS = 2.0  # estimated time of one call of the slower plan (features' seconds_*)

# The "tall" style's caps: its joined table up to 2·10⁸ cells (dense) or 6·10⁷ stored entries
# (CSR), a few seconds a call at most; fewer cells than that would leave it no taller than the rest.
TALL_CAPS = {"dense_cells": 2e8, "entries": 6e7}
TALL_ROWS = (5e5, 4e6)

WIDTHS = (2, 4, 8, 16, 32, 64)
# The source styles a scenario is drawn from, and how often. "wide_keys" and "roles" only when asked
# for: with a weight of 0 (last) the default draws are those of the sweeps shipped before them.
STYLES = {
    "dense": 0.3,
    "sparse": 0.2,
    "onehot": 0.25,
    "mixed": 0.15,
    "keys": 0.1,
    "wide_keys": 0.0,
    "roles": 0.0,
    "tall": 0.0,
}
KEY_STYLES = ("keys", "wide_keys")
# Classes of a logistic fit's target, drawn per fit: two most often; k > 2 makes the fit a softmax
# pass of k columns (Hamlet Yelp's stars: 5).
CLASSES = (2, 2, 3, 5, 8)


def _log_uniform(rng, low, high):
    return float(math.exp(rng.uniform(math.log(low), math.log(high))))


def draw(rng, max_rows=6e5, styles=None):
    """Random scenario parameters for :func:`build`.

    Parameters
    ----------
    rng : numpy.random.Generator
        The draws.
    max_rows : float, default=6e5
        At most this many fact rows.
    styles : sequence of str, optional
        Draw from these styles of :data:`STYLES` only, at their relative frequencies (default:
        all).

    Returns
    -------
    dict
        Style, join kind, sizes, ratios, density, dangling fraction and seed.
    """
    names = list(STYLES) if styles is None else list(styles)
    weights = np.array([STYLES[name] for name in names])
    if not weights.sum():  # styles asked for, none drawn by default: equally often
        weights = np.ones(len(names))
    style = str(rng.choice(names, p=weights / weights.sum()))
    join = str(
        rng.choice(
            ["inner", "left", "outer", "union", "many_to_many", "snowflake"],
            p=[0.4, 0.15, 0.1, 0.1, 0.1, 0.15],
        )
    )
    n_dims = int(rng.choice([1, 2, 3, 4], p=[0.35, 0.3, 0.2, 0.15]))
    if join == "many_to_many":
        n_dims = min(n_dims, 2)
    if style == "roles":  # the role-playing joins of star schemas: inner or left, few dimensions
        join, n_dims = str(rng.choice(["inner", "left"])), int(rng.choice([1, 2, 3]))
    if style == "tall":  # warehouse stars and snowflakes: orders -> customer -> address
        join = str(rng.choice(["inner", "left", "snowflake"], p=[0.45, 0.2, 0.35]))
    if style == "dense":
        d_fact, density = int(_log_uniform(rng, 1, 100)), 1.0
        max_tuple_ratio, feature_ratios = 300, (0.02, 10)
    elif style == "roles":  # small dimensions of a few numeric columns each
        d_fact, density = int(_log_uniform(rng, 1, 30)), 1.0
        max_tuple_ratio, feature_ratios = 1e5, (0.05, 5)
    elif style == "sparse":
        d_fact, density = int(_log_uniform(rng, 5, 500)), _log_uniform(rng, 0.005, 0.2)
        max_tuple_ratio, feature_ratios = 300, (0.02, 30)
    elif style in KEY_STYLES:  # dimensions one-hot encode their own keys; the fact table holds
        d_fact, density = int(rng.choice([1, 2, 3])), 1.0  # keys and, half the time, numeric
        max_tuple_ratio, feature_ratios = 300, (0.001, 0.1)  # columns; attribute columns per key
    elif style == "tall":  # a few categorical columns (ship mode, priority, state) one-hot
        d_fact = int(_log_uniform(rng, 3, 60))
        density = min(1.0, _log_uniform(rng, 1, 6) / d_fact)
        max_tuple_ratio, feature_ratios = 3e4, (0.1, 3)
    else:  # one-hot encoded categorical columns: a few ones per row of wide sources
        d_fact = int(_log_uniform(rng, 1, 3000))
        density = min(1.0, _log_uniform(rng, 1, 30) / d_fact)
        max_tuple_ratio, feature_ratios = 3000, (0.01, 60000 / d_fact)
    numeric_fact = style in KEY_STYLES and bool(rng.random() < 0.5)  # as Hamlet's Walmart
    hetero = n_dims > 1 and join in ("inner", "left") and rng.random() < 0.5
    # Per dimension: tuple ratio, feature ratio, and ones per row when one-hot encoded.
    wide = style == "wide_keys"
    tuple_ratios, ones = ((2, 1000), (5, 40)) if wide else ((1, max_tuple_ratio), (1, 30))
    if style == "tall":
        tuple_ratios, ones = (1.5, max_tuple_ratio), (1, 6)
    dims = [
        (
            _log_uniform(rng, *tuple_ratios),
            _log_uniform(rng, *feature_ratios),
            _log_uniform(rng, *ones),
        )
        for _ in range(n_dims if hetero else 1)
    ]
    min_rows = min(5e4 if wide else 2e3, max_rows)
    if style == "tall":
        min_rows, max_rows = TALL_ROWS
    return {
        "style": style,
        "join": join,
        "snowflake": join == "snowflake",
        "hetero": hetero,
        "n_fact": int(_log_uniform(rng, min_rows, max_rows)),
        "n_dims": n_dims,
        "d_fact": d_fact,
        "numeric_fact": numeric_fact,
        "dims": dims,
        "density": density,
        "dangling": float(rng.uniform(0.02, 0.3)) if join in ("left", "outer") else 0.0,
        "seed": int(rng.integers(2**31)),
    }


def _one_hot_style(params):
    return params["style"] in ("onehot", "mixed", "tall") + KEY_STYLES


def _dim_shapes(params):
    """(rows, columns, stored entries per row) of each dimension at the current n_fact; in the
    key styles a dimension has a column per key plus feature_ratio · rows attribute columns (in
    "wide_keys" at least three levels per attribute)."""
    shapes, n_referencing = [], params["n_fact"]
    for tuple_ratio, feature_ratio, ones in params["dims"] * (
        1 if params["hetero"] else params["n_dims"]
    ):
        rows = max(1, round(n_referencing / tuple_ratio))
        attributes = max(1, round(feature_ratio * rows))
        if params["style"] == "wide_keys":
            attributes = max(attributes, 3 * round(ones))
        cols = (
            rows + attributes
            if params["style"] in KEY_STYLES
            else max(1, round(feature_ratio * params["d_fact"]))
        )
        per_row = (
            min(cols, max(1, round(ones))) if _one_hot_style(params) else cols * params["density"]
        )
        shapes.append((rows, cols, per_row))
        n_referencing = rows if params["snowflake"] else n_referencing
    if params["style"] == "roles":  # the first dimension joined a second time
        shapes.append(shapes[0])
    return shapes


def _shrink(params):
    """Scale n_fact down until the joined table and every source respect the caps."""
    shapes = _dim_shapes(params)
    d = params["d_fact"] + sum(cols for _, cols, _ in shapes)
    n = params["n_fact"] * (2 ** params["n_dims"] if params["join"] == "many_to_many" else 1)
    fact_entries = params["n_fact"] * params["d_fact"] * params["density"]
    if params["style"] == "tall":
        return _shrink_tall(params, shapes, n, d, fact_entries)
    scale = MAX_SOURCE_ENTRIES / fact_entries
    if (
        params["style"] in ("dense", "mixed")
        or params["density"] == 1
        and params["style"] not in KEY_STYLES
    ):
        # T is dense
        scale = min(scale, MAX_DENSE_CELLS / (n * d))
    else:
        row_entries = params["d_fact"] * params["density"] + sum(e for _, _, e in shapes)
        scale = min(scale, MAX_SPARSE_ENTRIES / (n * row_entries))
    for rows, cols, per_row in shapes:
        entries = rows * (cols if params["style"] == "dense" else per_row)
        scale = min(scale, MAX_SOURCE_ENTRIES / entries)
    params["n_fact"] = max(200, int(params["n_fact"] * min(1.0, scale)))
    return params


def _shrink_tall(params, shapes, n, d, fact_entries):
    """_shrink for the "tall" style, at :data:`TALL_CAPS`: the joined table's stored entries (a
    numeric column of 1-4 per source beside the one-hot ones, :func:`_mixed`), and its cells where
    it is dense enough to be kept dense (:func:`ilargi.chooser.memory.layout`)."""
    numeric = 4 * (1 + len(shapes))
    row_entries = fact_entries / params["n_fact"] + sum(e for _, _, e in shapes) + numeric
    scale = min(TALL_CAPS["entries"] / (n * row_entries), TALL_CAPS["entries"] / fact_entries)
    if row_entries > (d + numeric) / 3:  # CSR would take more than half the dense bytes
        scale = min(scale, TALL_CAPS["dense_cells"] / (n * (d + numeric)))
    params["n_fact"] = max(200, int(params["n_fact"] * min(1.0, scale)))
    return params


def _star(params, tuple_ratio, feature_ratio, n_dims, seed):
    # make_star draws random numbers: one-hot sources are drawn one column wide here and
    # replaced by one-hot encodings of the right width (_one_hot_sources).
    if _one_hot_style(params):
        feature_ratio = 1.0 / params["d_fact"]
    return make_star(
        n_fact=params["n_fact"],
        tuple_ratio=tuple_ratio,
        feature_ratio=feature_ratio,
        n_dims=n_dims,
        d_fact=params["d_fact"],
        density=params["density"],
        join="inner" if params["join"] == "snowflake" else params["join"],
        dangling=params["dangling"],
        snowflake=params["snowflake"],
        target=None,
        random_state=seed,
    )[0]


def _parts_of(nm):
    return (
        [p.source for p in nm.parts],
        [p.indicator.rows for p in nm.parts],
        [p.cols for p in nm.parts],
        [p.name for p in nm.parts],
    )


def _recompose(fact_parts, dim_parts, n):
    """One NormalizedMatrix from parts of several stars over the same target rows."""
    sources, rows, cols, names = [], [], [], []
    start = 0
    for source, r, _, name in fact_parts + dim_parts:
        sources.append(source)
        rows.append(r)
        cols.append(np.arange(start, start + source.shape[1]))
        names.append(f"{name}.{len(names)}")
        start += source.shape[1]
    return NormalizedMatrix.from_parts(sources, rows, cols, (n, start), names=names)


def _split(nm):
    sources, rows, cols, names = _parts_of(nm)
    parts = list(zip(sources, rows, cols, names))
    return [p for p in parts if not p[3].startswith("dim")], [
        p for p in parts if p[3].startswith("dim")
    ]


def _one_hot(rng, rows, width, columns):
    """A rows × width CSR one-hot encoding of ``columns`` categorical columns (one 1 each)."""
    edges = np.linspace(0, width, columns + 1).astype(np.int64)
    lows, sizes = edges[:-1], np.maximum(np.diff(edges), 1)
    indices = np.minimum(lows + (rng.random((rows, columns)) * sizes).astype(np.int64), width - 1)
    indptr = np.arange(0, rows * columns + 1, columns)
    return sp.csr_array((np.ones(rows * columns), indices.ravel(), indptr), shape=(rows, width))


def _key_one_hot(rng, rows, width, ones):
    """A dimension that one-hot encodes its own key (column i for row i) beside ``ones - 1``
    categorical attributes in the other width - rows columns (as Hamlet's Yelp and Walmart)."""
    extra = width - rows
    attributes = _one_hot(rng, rows, extra, max(1, min(ones - 1, extra)))
    return sp.hstack([sp.identity(rows, format="csr"), attributes], format="csr")


def _one_hot_sources(params, nm, rng):
    """The fact table (unless it is one dense numeric block; in the key styles its dense
    numeric columns, or nothing when it holds keys only) and every dimension one-hot encoded."""
    facts, dims = _split(nm)
    if params["style"] in KEY_STYLES:
        dims = [
            (_key_one_hot(rng, source.shape[0], cols, per_row), r, c, name)
            for (source, r, c, name), (_, cols, per_row) in zip(dims, _dim_shapes(params))
        ]
        return _recompose(facts if params["numeric_fact"] else [], dims, nm.shape[0])
    if params["density"] < 1:
        ones = max(1, round(params["density"] * params["d_fact"]))
        facts = [
            (_one_hot(rng, source.shape[0], source.shape[1], ones), r, c, name)
            for source, r, c, name in facts
        ]
    dims = [
        (_one_hot(rng, source.shape[0], cols, per_row), r, c, name)
        for (source, r, c, name), (_, cols, per_row) in zip(dims, _dim_shapes(params))
    ]
    return _recompose(facts, dims, nm.shape[0])


def _mixed(nm, rng):
    """Numeric dense columns beside the sparse ones: a dense part per source (1-4 columns)."""
    facts, dims = _split(nm)
    extra = []
    for source, r, c, name in facts + dims:
        width = int(rng.integers(1, 5))
        extra.append((rng.standard_normal((source.shape[0], width)), r, None, name + ":num"))
    return _recompose(facts + extra[: len(facts)], dims + extra[len(facts) :], nm.shape[0])


def build(params):
    """The NormalizedMatrix of a scenario (never materialized here).

    Parameters
    ----------
    params : dict
        Scenario parameters from :func:`draw`.

    Returns
    -------
    NormalizedMatrix
        The scenario's data.

    Examples
    --------
    >>> import numpy as np
    >>> from ilargi.calibration.sweep import build, draw
    >>> nm = build(draw(np.random.default_rng(0), max_rows=2000))
    >>> nm.shape[0] <= 2000 * 4  # a many-to-many join can multiply the rows
    True
    """
    rng = np.random.default_rng(params["seed"])
    if params["hetero"]:
        stars = [
            _star(params, tr, fr, 1, params["seed"] + i)
            for i, (tr, fr, _) in enumerate(params["dims"])
        ]
        facts, _ = _split(stars[0])
        dims = [_split(star)[1][0] for star in stars]
        nm = _recompose(facts, dims, stars[0].shape[0])
    else:
        tr, fr, _ = params["dims"][0]
        nm = _star(params, tr, fr, params["n_dims"], params["seed"])
    if _one_hot_style(params):
        nm = _one_hot_sources(params, nm, rng)
    if params["style"] in ("mixed", "tall"):
        nm = _mixed(nm, rng)
    if params["style"] == "roles":
        nm = _second_role(params, nm, rng)
    return nm


def _second_role(params, nm, rng):
    """The first dimension joined once more, through a key of its own: the same source, a second
    index vector (uniform over its rows; in a left join a share of the keys dangling, -1)."""
    facts, dims = _split(nm)
    source, rows, _, name = dims[0]
    second = rng.integers(0, source.shape[0], rows.size)
    if params["join"] == "left":
        second[rng.random(rows.size) < params["dangling"]] = -1
    return _recompose(facts, dims + [(source, second, None, name + ":role")], nm.shape[0])


def _estimators(rng):
    """Two estimators with a fixed iteration budget, drawn at random."""
    pick = lambda values: int(rng.choice(values))  # noqa: E731
    choices = [
        lambda: LinearRegression(max_iter=pick([10, 20, 50])),
        lambda: LogisticRegression(solver="gd", max_iter=pick([10, 20, 50])),
        # 100, the default: a default fit's solver work (a history of 10 pairs, O(10·d) a step,
        # fuller and more costly than in a short fit) is then measured, not extrapolated. These
        # fits converge in 9-18 steps on the planted targets; sweeps whose L-BFGS fits ran their
        # budget (tol=0, in every scenario, keys style more often) trained a model no better on
        # the real fits (estimators/README.md says how the shipped model was selected)
        lambda: LogisticRegression(solver="lbfgs", max_iter=pick([10, 30, 100])),
        lambda: KMeans(
            n_clusters=pick([2, 3, 5, 8, 12]), max_iter=pick([5, 10, 20]), random_state=0
        ),
        lambda: GNMF(n_components=pick([2, 3, 5, 8]), max_iter=pick([5, 10, 20]), random_state=0),
    ]
    return [choices[i]() for i in rng.choice(len(choices), size=2, replace=False)]


def _operators(rng):
    widths = [int(rng.choice(WIDTHS)) for _ in range(3)]
    return [
        Workload("lmm", 1),
        Workload("lmm", widths[0]),
        Workload("rmm", 1),
        Workload("rmm", widths[1]),
        Workload("tmm", widths[2]),
    ] + [Workload(kind) for kind in OPERATORS if kind not in ("lmm", "rmm", "tmm")]


# The compression of an .xz sweep CSV: the smallest xz makes (about 1/8 of the CSV text).
XZ_PRESET = 9 | lzma.PRESET_EXTREME


def _read_rows(path):
    """The rows of a sweep CSV (``.csv`` or ``.csv.xz``) as dicts of strings."""
    path = Path(path)
    opened = lzma.open(path, "rt", newline="") if path.suffix == ".xz" else path.open(newline="")
    with opened as file:
        return list(csv.DictReader(file))


class _Writer:
    """Appends rows to the CSV, the header taken from the first row, flushed row by row. An
    ``.xz`` output is written plain beside it first (``<name>.partial``, which an interrupted
    sweep leaves behind) and compressed into place on :meth:`close`."""

    def __init__(self, path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.compress = self.path.suffix == ".xz"
        self.plain = (
            self.path.with_name(self.path.name + ".partial") if self.compress else self.path
        )
        self.file, self.writer, self.rows = None, None, 0

    def write(self, row):
        if self.writer is None:
            self.file = self.plain.open("w", newline="")
            self.writer = csv.DictWriter(self.file, fieldnames=list(row))
            self.writer.writeheader()
        self.writer.writerow(row)
        self.file.flush()
        self.rows += 1

    def close(self):
        if self.file is None:
            return
        self.file.close()
        self.file = None
        if self.compress:
            with (
                self.plain.open("rb") as plain,
                lzma.open(self.path, "wb", preset=XZ_PRESET) as out,
            ):
                shutil.copyfileobj(plain, out)
            self.plain.unlink()


def _resource_errors(device):
    """What running out of memory raises: MemoryError, and on a GPU also cuSPARSE's
    "insufficient resources" (a sparse product whose workspace does not fit)."""
    if device == "cpu":
        return (MemoryError,)
    from cupy_backends.cuda.libs.cusparse import CuSparseError

    return (MemoryError, CuSparseError)


def _device_sync(device):
    if device == "cpu":
        return None
    import cupy

    return cupy.cuda.Device().synchronize


def _targets(nm, rng):
    """Planted scores (factorized), and a linear target: the scores plus noise."""
    z = np.asarray(nm.to("cpu") @ rng.standard_normal(nm.shape[1]))
    return z, z + 0.1 * rng.standard_normal(z.size)


def _labels(scores, classes):
    """Balanced class labels 0, 1, ... of the scores: above the median or not for two classes
    (where ties at the median leave one class, as with one-hot data of few distinct scores, the
    upper half of the rows by rank), equal parts by rank for more."""
    order = np.argsort(scores, kind="stable")
    if classes == 2:
        binary = scores > np.median(scores)
        if binary.all() or not binary.any():
            binary = np.zeros(scores.size, bool)
            binary[order[scores.size // 2 :]] = True
        return binary.astype(np.float64)
    labels = np.empty(scores.size)
    labels[order] = np.arange(scores.size) * classes // scores.size
    return labels


def run_scenario(
    index, params, writer, deadline, device="cpu", log=None, thread_counts=(1,), fits_only=False
):
    """Time every workload of one scenario, one CSV row each.

    Parameters
    ----------
    index : int
        The scenario's number (its ``scenario`` column).
    params : dict
        Scenario parameters from :func:`draw`.
    writer : object
        Has ``write(row)`` for one CSV row (a dict).
    deadline : float
        ``time.monotonic()`` after which no new workload starts.
    device : {"cpu", "gpu"}, default="cpu"
        Where to run.
    log : callable, optional
        Called with a line of text per workload.
    thread_counts : tuple of int, default=(1,)
        The thread counts every workload is timed at (one row each).
    fits_only : bool, default=False
        Time the estimator fits only, not the operators.

    Returns
    -------
    int
        Rows written.
    """
    rng = np.random.default_rng(params["seed"] + 1)
    nm = build(params)
    if device != "cpu":
        nm = nm.to(device)
    sync = _device_sync(device)
    t_join, T = _time_joins(nm, thread_counts, sync)
    meta = dict(
        zip(
            META,
            (
                index,
                params["style"],
                params["join"],
                int(params["snowflake"]),
                int(params["hetero"]),
                params["n_fact"],
                params["dims"][0][0],
                params["dims"][0][1],
                params["density"],
                params["dangling"],
            ),
        )
    )
    written = 0
    scores, y_linear = _targets(nm, rng)
    # The class counts come from a stream of their own: scenarios and workloads are drawn as in
    # the sweeps before logistic fits of more than two classes were timed.
    classes = np.random.default_rng([params["seed"], 1])
    absolute = None
    operators = _operators(rng)
    jobs = [] if fits_only else [(w, None, None) for w in operators]
    for estimator in _estimators(rng):
        logistic = isinstance(estimator, LogisticRegression)
        y = _labels(scores, int(classes.choice(CLASSES))) if logistic else y_linear
        jobs.append((None, estimator, y))
    for workload, estimator, y in jobs:
        for k in thread_counts:  # every workload at each thread count: threads is a feature
            if time.monotonic() > deadline:
                return written
            with thread_control.threads(k):
                row = _time_workload(
                    nm, T, t_join[k], workload, estimator, rng, device, sync, y, absolute, log
                )
            if row is None:
                continue
            row, absolute = row
            writer.write({**meta, **row})
            written += 1
    return written


def _time_joins(nm, thread_counts, sync=None):
    """({thread count: median seconds of nm.materialize()}, the table): the compiled backend
    builds the join on every thread."""
    t_join = {}
    for k in thread_counts:
        T = None  # dropped before the next count's joins
        with thread_control.threads(k):
            t_join[k], T = time_join(nm, sync=sync)
    return t_join, T


def _time_workload(nm, T, t_join, workload, estimator, rng, device, sync, y, absolute, log):
    """(CSV row of features and times, absolute-value data for GNMF) of one workload at the
    current thread count, or None when it is skipped (estimated too slow, or out of memory)."""
    if estimator is not None:
        workload = _fit_workload(estimator, nm.shape, y)
    features = extract(nm, workload, device)
    if max(features["seconds_fact"], features["seconds_mat"]) > MAX_SECONDS:
        return None
    needed = _result_bytes(features)
    available = available_bytes(device)
    if available is not None and needed > MEMORY_SHARE * available:
        if log:
            log(
                f"  {workload.kind:16s} skipped: its results take {needed / 2**30:.1f} GiB, "
                f"{MEMORY_SHARE:g} of the {available / 2**30:.1f} GiB available is the limit"
            )
        return None
    try:
        if estimator is None:
            fact, mat = operator_calls(nm, T, workload, rng)
            t_fact, t_mat, repeats = time_pair(fact, mat, sync=sync)
        else:
            if workload.kind == "gnmf":  # non-negative data (a GPU fit builds its own T)
                absolute = absolute or (abs(nm), abs(T) if device == "cpu" else None)
                features = extract(absolute[0], workload, device)
            data, table = absolute if workload.kind == "gnmf" else (nm, T)
            fact, mat, join_included = model_calls(estimator, data, table, y)
            t_fact, t_mat, repeats = time_pair(
                fact, mat, budget=1.0, min_repeats=2, max_repeats=4, sync=sync
            )
            if join_included:
                t_mat = max(t_mat - t_join, 1e-6)
            # as the fitted estimator describes its fit (the classes it found, the iterations run)
            ran = iterations_run(workload_of(fact.estimator, data.shape), fact.estimator)
            if ran != workload:  # it converged early: its time belongs to the iterations it ran
                workload = ran
                features = extract(data, workload, device)
    except _resource_errors(device) as error:  # out of (device) memory: skip it, say so
        if log:
            log(f"  {workload.kind:16s} skipped: {error}")
        return None
    if log:
        log(
            f"  {workload.kind:16s} m={workload.m:<3d} it={workload.iterations:<4d} "
            f"threads={features['threads']} fact {t_fact * 1e3:9.2f} ms  "
            f"mat {t_mat * 1e3:9.2f} ms  speedup {t_mat / t_fact:6.2f}"
        )
    return {**features, **dict(zip(TIMES, (t_fact, t_mat, t_join, repeats)))}, absolute


def _result_bytes(features):
    """Bytes of the results both plans of a workload hold at once: a crossprod of a table with
    any dense part is a dense d × d matrix per plan (a CSR T included: its factorized blocks). An allocation that large can succeed and only fail as its pages
    are written, and then the kernel's OOM killer ends the sweep (MemoryError is never raised):
    a 51,004-column crossprod, 2 × 20.8 GB on 24 GiB, did."""
    if features["workload"] == "crossprod" and features["sparse_frac"] < 1.0:
        return 2.0 * features["d"] ** 2 * features["itemsize"]
    return 0.0


def _fit_workload(estimator, shape, y):
    """The workload of a fit of y before it runs, as the fitted estimator will describe it: an
    unfitted logistic regression assumes two classes, and a fit of k > 2 is k columns wide."""
    workload = workload_of(estimator, shape)
    classes = np.unique(y).size if workload.kind.startswith("logreg") else 2
    return Workload(workload.kind, classes, workload.iterations) if classes > 2 else workload


def sweep(
    out,
    budget_seconds=1200.0,
    device="cpu",
    seed=0,
    max_scenarios=None,
    threads=None,
    log=print,
    styles=None,
    fits_only=False,
):
    """Time both plans on random scenarios until the budget is spent; write the CSV as it goes.

    Parameters
    ----------
    out : path-like
        The CSV to write (xz-compressed where it ends with ``.xz``: ``sweep.csv.xz``).
    budget_seconds : float, default=1200.0
        Time budget.
    device : {"cpu", "gpu"}, default="cpu"
        Where to run.
    seed : int, default=0
        Seed of the scenarios.
    max_scenarios : int, optional
        Stop after this many scenarios.
    threads : tuple of int, optional
        The thread counts (compiled kernels and BLAS, both plans) every workload is timed at,
        one CSV row each; default: 1 and every core, so the cost model learns what threads do.
    log : callable, default=print
        Called with a line of text per scenario and workload (None: quiet).
    styles : sequence of str, optional
        Draw scenarios of these styles of :data:`STYLES` only (default: all): more training data
        where the cost model needs it.
    fits_only : bool, default=False
        Time the estimator fits only (the scenarios drawn are the same): more fits in the budget.

    Returns
    -------
    rows : int
        Rows written.
    scenarios : int
        Scenarios run.
    seconds : float
        Time taken.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from ilargi.calibration.sweep import sweep
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "sweep.csv"
    >>> rows, scenarios, seconds = sweep(out, budget_seconds=60, max_scenarios=1)  # doctest: +SKIP
    """
    if threads is None:
        threads = tuple(sorted({1, thread_control.default_num_threads()}))
    unknown = sorted(set(styles or ()) - set(STYLES))
    if unknown or (styles is not None and not styles):
        raise ValueError(f"styles must be a non-empty subset of {list(STYLES)}, got {styles!r}")
    if device == "cpu":  # the rows carry the host's rates as measured now, not a stale cache
        # ... and the times those of the compiled kernels, not of the NumPy ones that run while
        # a fresh environment builds them: built here first (loaded where they are built)
        compile_kernels()
        for k in threads:
            host.probe(k, refresh=True)
    start = time.monotonic()
    deadline = start + budget_seconds
    max_rows = _max_rows(budget_seconds)
    rng = np.random.default_rng(seed)
    writer = _Writer(out)
    scenarios = 0
    try:
        while time.monotonic() < deadline and (max_scenarios is None or scenarios < max_scenarios):
            params = _shrink(draw(rng, max_rows, styles))
            if log:
                log(
                    f"scenario {scenarios}: {params['style']} {params['join']} "
                    f"n_fact={params['n_fact']} dims={params['n_dims']} "
                    f"d_fact={params['d_fact']} density={params['density']:.3g} "
                    f"(TR, FR)={[(round(a, 1), round(b, 2)) for a, b, _ in params['dims']]}"
                )
            try:
                run_scenario(scenarios, params, writer, deadline, device, log, threads, fits_only)
            except _resource_errors(device) as error:  # the caps are estimates: skip, say so
                if log:
                    log(f"  scenario skipped: {error}")
            scenarios += 1
            gc.collect()
    finally:
        writer.close()
    return writer.rows, scenarios, time.monotonic() - start


def _timed_again(nm, params, rows, kinds, log):
    """{id(row): features and times} of a scenario's rows of these fit kinds, timed again at
    their thread counts, the scenario's estimators and targets drawn as :func:`run_scenario`
    drew them (before any timing)."""
    if not any(row["workload"] in kinds for row in rows):
        return {}
    _, T = time_join(nm)
    rng = np.random.default_rng(params["seed"] + 1)
    scores, y_linear = _targets(nm, rng)
    classes = np.random.default_rng([params["seed"], 1])
    _operators(rng)
    timed, absolute = {}, None
    for estimator in _estimators(rng):
        logistic = isinstance(estimator, LogisticRegression)
        y = _labels(scores, int(classes.choice(CLASSES))) if logistic else y_linear
        kind = _fit_workload(estimator, nm.shape, y).kind
        for row in rows:
            if row["workload"] != kind or kind not in kinds:
                continue
            with thread_control.threads(int(row["threads"])):
                new = _time_workload(
                    nm, T, float(row["t_join"]), None, estimator, rng, "cpu", None, y, absolute, log
                )
            if new is not None:  # else (estimated too slow, as when it was timed) kept as it was
                timed[id(row)], absolute = new
    return timed


def _max_rows(budget_seconds):
    # A short sweep (a quick calibration) draws smaller scenarios, so that some of them finish.
    return max(5e3, 6e5 * min(1.0, budget_seconds / 240))


def _machine_of(row, path, probe_host):
    """The device features of the machine that timed a row: its own columns, or, for a row
    recorded before the host was probed (and ``probe_host``), this host's probe at the row's
    thread count -- only right on the machine that ran the sweep."""
    missing = [name for name in DEVICE_COLUMNS if row.get(name) in (None, "")]
    if missing and not probe_host:
        raise ValueError(
            f"{path}: rows without the device features {missing} (a sweep from "
            "before the host probe); on the host that ran it, refeaturize with "
            "probe_host=True (--probe-host)"
        )
    if missing:
        if row["device"] != "cpu" or int(row["cores"]) != host.cores():
            raise ValueError(
                f"{path}: a row of a {row['cores']}-core {row['device']} cannot take "
                f"this {host.cores()}-core CPU host's probe"
            )
        measured = host.probe(int(row["threads"]))
        row = {**row, **{name: measured[name] for name in host.PROPERTIES}}
    return {name: kind(row[name]) for name, kind in DEVICE_COLUMNS.items()}


def refeaturize(
    path, out, seed, budget_seconds, styles=None, log=print, retime=(), probe_host=False
):
    """A sweep's rows with their features computed again and their times kept.

    For a change in what a feature means (not in the kernels, whose times would change too): the
    sweep's scenarios are drawn again from its seed and budget (the draws never depend on the
    timings), rebuilt, and every row's features recomputed for its workload, from metadata
    alone; its device features (cores, threads, a GPU's) are the row's own, those of the
    machine that timed it, so a GPU sweep is re-featurized on any machine. A row whose scenario
    parameters differ from the redrawn ones is an error (wrong seed, budget or styles).

    After a change of one estimator's code, ``retime`` names the fits to time again on this
    machine (a CPU sweep): each scenario's fits are drawn again as the sweep drew them, and the
    rows of those kinds get new features and times, each at its own thread count. ``"join"``
    times every row's join (``t_join``) again at its thread count, after a change of
    ``materialize``.

    Parameters
    ----------
    path : path-like
        The sweep CSV (or ``.csv.xz``).
    out : path-like
        The CSV to write (may be ``path``; xz-compressed where it ends with ``.xz``).
    seed, budget_seconds, styles
        As the sweep was run with (:func:`sweep`).
    log : callable, default=print
        Called with a line per changed feature column (None: quiet).
    retime : sequence of str, default=()
        Workload kinds of estimator fits (``ilargi.chooser.workload.MODELS``) to time again, and
        ``"join"``.
    probe_host : bool, default=False
        Give rows recorded before the host probe (:mod:`ilargi.chooser.host`) this host's probe
        at their thread count: only on the host that ran the sweep.

    Returns
    -------
    rows : int
        Rows written.
    changed : dict
        Feature name to the number of rows whose value changed.
    """
    unknown = sorted(set(retime) - set(MODELS) - {"join"})
    if unknown:
        raise ValueError(
            f"retime takes 'join' and workload kinds of fits ({', '.join(MODELS)}), got {unknown}"
        )
    rows = _read_rows(path)
    if not rows:
        raise ValueError(f"{path}: no rows")
    if retime and any(row["device"] != "cpu" for row in rows):
        raise ValueError(f"{path}: only a CPU sweep's fits can be timed again here")
    by_scenario = {}
    for row in rows:
        by_scenario.setdefault(int(row["scenario"]), []).append(row)
    rng = np.random.default_rng(seed)
    changed, result, retimed = {}, {}, 0
    for index in range(max(by_scenario) + 1):
        params = _shrink(draw(rng, _max_rows(budget_seconds), styles))
        if index not in by_scenario:
            continue
        first = by_scenario[index][0]
        if (first["style"], first["join"], int(first["n_fact_param"])) != (
            params["style"],
            params["join"],
            params["n_fact"],
        ):
            raise ValueError(
                f"{path}: scenario {index} is not the one seed {seed} and a budget of "
                f"{budget_seconds:g} s draw ({first['style']} {first['join']} "
                f"n_fact={first['n_fact_param']}, drawn {params['style']} "
                f"{params['join']} n_fact={params['n_fact']})"
            )
        nm = build(params)
        if "join" in retime:  # before the fits timed again, which take their rows' t_join
            counts = sorted({int(row["threads"]) for row in by_scenario[index]})
            t_join, _ = _time_joins(nm, counts)
            for row in by_scenario[index]:
                row["t_join"] = repr(t_join[int(row["threads"])])
        timed = _timed_again(nm, params, by_scenario[index], retime, log) if retime else {}
        retimed += len(timed)
        absolute = None
        for row in by_scenario[index]:
            if id(row) in timed:
                result[id(row)] = {**row, **timed[id(row)]}
                continue
            data = nm
            if row["workload"] == "gnmf":  # timed on non-negative data (see _time_workload)
                absolute = data = abs(nm) if absolute is None else absolute
            workload = Workload(row["workload"], int(row["m"]), int(row["iterations"]))
            machine = _machine_of(row, path, probe_host)
            features = combine(*data_features(data), workload, machine["device"], machine)
            for name, value in features.items():
                if str(value) != row.get(name):
                    changed[name] = changed.get(name, 0) + 1
            result[id(row)] = {**row, **features}
    writer = _Writer(out)
    try:
        for row in rows:
            writer.write(result[id(row)])
    finally:
        writer.close()
    if log:
        for name, count in sorted(changed.items()):
            log(f"  {name}: {count} of {len(rows)} rows changed")
        if retime:
            fits = [kind for kind in retime if kind != "join"]
            done = [f"{retimed} rows of {', '.join(fits)} timed again"] if fits else []
            log("  " + "; ".join(done + ["every row's join timed again"] * ("join" in retime)))
    return writer.rows, changed
