"""Synthetic star and snowflake schemas with a planted signal, for tests, the demo, benchmarks and the chooser.

Morpheus notation: the fact table S has n_S rows and d_S feature columns; each dimension R_i has n_R rows
and d_R feature columns; tuple ratio TR = n_S / n_R, feature ratio FR = d_R / d_S. The joined table is
``T = [S, R_1, ..., R_k]`` (feature columns only; keys and FKs are not features), never materialized:
:func:`make_star` returns it as a :class:`ilargi.NormalizedMatrix`, :func:`make_star_tables` as the
pandas tables it comes from, so the same scenario can go through :class:`ilargi.Table` or ``pandas.merge``.

Tables and names (``i`` = 1..k)::

    fact    s0 .. s{d_S-1}, fk1 .. fkk     (snowflake: only fk1)       [y, see make_star_tables]
    dim<i>  fk<i> (its key), r<i>_0 .. r<i>_{d_R-1}   (snowflake: also fk<i+1>, except the last)

The FK column and the key it refers to have the same name, so each join is ``merge(..., on="fk<i>")``.
Keys are a random permutation of the row numbers (so a join has real work to do), and every dimension
row is referred to about equally often.

Join kinds (``join=``), with ``pandas.merge`` semantics:

* ``"inner"``, ``"left"``, ``"outer"``: the kind of every join. A ``dangling`` fraction of the fact
  rows (and of the referencing rows at each snowflake level) holds a key that no dimension row has, and a
  ``dangling`` fraction of each dimension's keys is referred to by no row: an inner join drops the former,
  a left join keeps them with the dimension absent (NULL; index -1 in the metadata), an outer join keeps
  both (unreferenced dimension rows become extra target rows with the fact table absent).
* ``"union"``: the fact table arrives as two shards, tables ``fact_0`` and ``fact_1`` (first and second
  half of the rows, the same columns), each a source of its own covering its block of target rows; the
  dimensions are left-joined to their union.
* ``"many_to_many"``: every dimension key occurs in two rows (one, for the last key of an odd-sized
  dimension), so the inner join has about ``2**k`` target rows per fact row.

Target row order is pandas' for all kinds except ``"outer"``: there the rows are those of the left join,
in fact-table order, followed by the unreferenced rows of each dimension in turn (pandas sorts an outer
join by key instead).

The planted signal: ``y = T @ w + noise`` (``target="linear"``) or ``y = 1[T @ w + noise > 0]``
(``target="logistic"``, noise drawn from a logistic distribution of scale ``noise``: that is
``y ~ Bernoulli(sigmoid(T @ w / noise))``, thresholded when ``noise == 0``), with NULL cells counting 0
and ``w ~ N(0, 1 / d)``; ``T @ w`` is computed factorized. With ``join="inner"`` the signal is computed
on the left join and restricted to the kept rows, so a fact row's label does not depend on the join kind.
"""

from dataclasses import dataclass

import numpy as np
import pandas as pd
import scipy.sparse as sp

from ilargi.rewriter import NormalizedMatrix

__all__ = ["JOINS", "TARGETS", "make_star", "make_star_tables"]

JOINS = ("inner", "left", "outer", "union", "many_to_many")
TARGETS = ("linear", "logistic", None)


@dataclass
class _Star:
    """One generated scenario: sources, keys and the target rows' index vectors (one per source)."""

    fact: object  # n_S x d_S source (ndarray, or CSR when density < 1)
    fact_fks: dict  # FK column name -> values, for the FKs held by the fact table
    dims: list  # per dimension: (source, key values, {FK column name: values})
    rows: list  # index vector per source (fact first); None = identity
    columns: list  # target column names
    coef: np.ndarray | None = None  # planted weights w
    y: np.ndarray | None = None  # target per target row (None when target is None)
    fact_y: np.ndarray | None = None  # target per fact row, when every target row is one fact row


def _check(
    n_fact, tuple_ratio, feature_ratio, n_dims, d_fact, density, join, dangling, target, noise
):
    def positive_int(name, value):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"make_star: {name} must be a positive integer, got {value!r}")

    positive_int("n_fact", n_fact)
    positive_int("n_dims", n_dims)
    positive_int("d_fact", d_fact)
    for name, value in (("tuple_ratio", tuple_ratio), ("feature_ratio", feature_ratio)):
        if not value > 0:
            raise ValueError(f"make_star: {name} must be positive, got {value!r}")
    if not 0 < density <= 1:
        raise ValueError(f"make_star: density must be in (0, 1], got {density!r}")
    if not 0 <= dangling < 1:
        raise ValueError(f"make_star: dangling must be in [0, 1), got {dangling!r}")
    if join not in JOINS:
        raise ValueError(f"make_star: join must be one of {JOINS}, got {join!r}")
    if join == "union" and n_fact < 2:
        raise ValueError(f"make_star: a union of two fact shards needs n_fact >= 2, got {n_fact}")
    if target not in TARGETS:
        raise ValueError(f"make_star: target must be one of {TARGETS}, got {target!r}")
    if noise is not None and not noise >= 0:
        raise ValueError(f"make_star: noise must be >= 0, got {noise!r}")


def _features(rng, n, d, density):
    """An n x d source: standard normal values, dense, or CSR with a ``density`` fraction of nonzeros."""
    if density == 1:
        return rng.standard_normal((n, d))
    return sp.csr_matrix(
        sp.random_array(
            (n, d), density=density, format="csr", rng=rng, data_sampler=rng.standard_normal
        )
    )


def _keys(rng, n_rows, many_to_many):
    """Key values of a dimension's rows, and the number of distinct keys (keys are 0 .. n_keys - 1)."""
    n_keys = (n_rows + 1) // 2 if many_to_many else n_rows
    return rng.permutation(n_rows) % n_keys, n_keys


def _foreign_keys(rng, n_rows, n_keys, dangling):
    """FK values of n_rows referencing rows: a ``dangling`` fraction of keys is referred to by no row;
    the others equally often, except a ``dangling`` fraction of rows that hold a key no row has."""
    referenced = rng.permutation(n_keys)[: max(1, n_keys - int(dangling * n_keys))]
    shuffled = rng.permutation(n_rows)
    misses, matched = np.split(shuffled, [int(dangling * n_rows)])
    fks = np.empty(n_rows, dtype=np.int64)
    fks[matched] = referenced[np.arange(len(matched)) % len(referenced)]
    fks[misses] = n_keys + rng.integers(0, n_keys, len(misses))
    return fks


def _join(rows, keys, dim_keys, n_keys, how):
    """Join one dimension onto the target rows: the new index vectors (the old ones taken, the
    dimension's appended). ``keys``: the FK value per target row, -1 where the row that holds it is
    absent. pandas semantics: left rows in order, each with its matches in dimension order."""
    counts = np.bincount(dim_keys, minlength=n_keys)
    starts = np.cumsum(counts) - counts
    order = np.argsort(dim_keys, kind="stable")
    valid = (keys >= 0) & (keys < n_keys)
    safe_keys = np.where(valid, keys, 0)
    matches = np.where(valid, counts[safe_keys], 0)
    emitted = matches if how == "inner" else np.maximum(matches, 1)
    take = np.repeat(np.arange(len(keys)), emitted)
    offset = np.arange(len(take)) - np.repeat(np.cumsum(emitted) - emitted, emitted)
    hit = matches[take] > 0
    dim_rows = np.where(hit, order[np.where(hit, starts[safe_keys][take] + offset, 0)], -1)
    if not (emitted == 1).all():
        rows = [take if r is None else r[take] for r in rows]
    if how == "outer":
        unreferenced = np.flatnonzero(
            np.bincount(dim_rows[dim_rows >= 0], minlength=len(dim_keys)) == 0
        )
        absent = np.full(len(unreferenced), -1)
        rows = [np.concatenate([take if r is None else r, absent]) for r in rows]
        dim_rows = np.concatenate([dim_rows, unreferenced])
    return rows + [dim_rows]


def _generate(
    n_fact, tuple_ratio, feature_ratio, n_dims, d_fact, density, join, dangling, snowflake, rng
):
    """Sources, keys and index vectors of a scenario (the planted signal is added by the caller)."""
    d_dim = max(1, round(feature_ratio * d_fact))
    many_to_many = join == "many_to_many"
    how = {"inner": "left", "union": "left", "many_to_many": "inner"}.get(join, join)
    fact = _features(rng, n_fact, d_fact, density)
    fact_fks, dims, columns = {}, [], [f"s{j}" for j in range(d_fact)]
    rows = [None]
    n_referencing, referencing_fks = n_fact, fact_fks
    for i in range(1, n_dims + 1):
        n_dim = max(1, round((n_referencing if snowflake else n_fact) / tuple_ratio))
        source = _features(rng, n_dim, d_dim, density)
        dim_keys, n_keys = _keys(rng, n_dim, many_to_many)
        fks = referencing_fks[f"fk{i}"] = _foreign_keys(rng, n_referencing, n_keys, dangling)
        referencing_rows = rows[i - 1 if snowflake else 0]
        keys = (
            fks
            if referencing_rows is None
            else np.where(referencing_rows >= 0, fks[referencing_rows], -1)
        )
        rows = _join(rows, keys, dim_keys, n_keys, how)
        dim_fks = {}
        dims.append((source, dim_keys, dim_fks))
        columns += [f"r{i}_{j}" for j in range(d_dim)]
        if snowflake:
            n_referencing, referencing_fks = n_dim, dim_fks
    return _Star(fact, fact_fks, dims, rows, columns)


def _sources_and_rows(star, join):
    """The parts of the target (sources, rows, cols, names): the fact table split in two for a union."""
    d_fact = star.fact.shape[1]
    fact_cols = np.arange(d_fact)
    sources, rows, cols, names = [], [], [], []
    if join == "union":
        n_fact = star.fact.shape[0]
        half = n_fact // 2
        positions = np.arange(n_fact)
        for name, block in (("fact_0", slice(0, half)), ("fact_1", slice(half, n_fact))):
            in_block = (positions >= block.start) & (positions < block.stop)
            sources.append(star.fact[block])
            rows.append(np.where(in_block, positions - block.start, -1))
            cols.append(fact_cols)
            names.append(name)
    else:
        sources.append(star.fact)
        rows.append(star.rows[0])
        cols.append(fact_cols)
        names.append("fact")
    start = d_fact
    for i, ((source, _, _), dim_rows) in enumerate(zip(star.dims, star.rows[1:]), start=1):
        sources.append(source)
        rows.append(dim_rows)
        cols.append(np.arange(start, start + source.shape[1]))
        names.append(f"dim{i}")
        start += source.shape[1]
    return sources, rows, cols, names


def _normalized_matrix(star, join, keep=None):
    sources, rows, cols, names = _sources_and_rows(star, join)
    n = len(star.rows[-1])
    if keep is not None:
        rows = [keep if r is None else r[keep] for r in rows]
        n = len(keep)
    return NormalizedMatrix.from_parts(
        sources, rows, cols, shape=(n, len(star.columns)), columns=star.columns, names=names
    )


def _plant(nm, target, noise, rng):
    """The planted target of the rows of nm, computed factorized: T @ w plus noise, thresholded if logistic."""
    w = rng.standard_normal(nm.shape[1]) / np.sqrt(nm.shape[1])
    z = np.asarray(nm @ w, dtype=np.float64)
    if target == "linear":
        return z + rng.normal(0.0, noise, len(z)), w
    margin = z + (rng.logistic(0.0, noise, len(z)) if noise > 0 else 0.0)
    return (margin > 0).astype(np.float64), w


def _build(
    n_fact,
    tuple_ratio,
    feature_ratio,
    n_dims,
    d_fact,
    density,
    join,
    dangling,
    snowflake,
    target,
    noise,
    random_state,
):
    _check(
        n_fact, tuple_ratio, feature_ratio, n_dims, d_fact, density, join, dangling, target, noise
    )
    if noise is None:
        noise = 1.0 if target == "logistic" else 0.1
    rng = np.random.default_rng(random_state)
    star = _generate(
        n_fact, tuple_ratio, feature_ratio, n_dims, d_fact, density, join, dangling, snowflake, rng
    )
    nm = _normalized_matrix(star, join)
    if target is not None:
        star.y, star.coef = _plant(nm, target, noise, rng)
        if join in ("inner", "left", "union"):
            star.fact_y = star.y
    keep = (
        np.flatnonzero(np.all([r >= 0 for r in star.rows[1:]], axis=0)) if join == "inner" else None
    )
    if keep is not None and len(keep) < nm.shape[0]:
        nm = _normalized_matrix(star, join, keep)
        if star.y is not None:
            star.y = star.y[keep]
    return star, nm


def make_star(
    n_fact=10_000,
    tuple_ratio=10.0,
    feature_ratio=1.0,
    n_dims=1,
    d_fact=10,
    *,
    density=1.0,
    join="inner",
    dangling=0.0,
    snowflake=False,
    target="linear",
    noise=None,
    coef=False,
    random_state=None,
):
    """A synthetic star (or snowflake) join as ``(NormalizedMatrix, y)``, never materialized.

    The target columns are ``s0..`` (fact) then ``r<i>_0..`` per dimension; parts are named ``fact``
    (``fact_0``/``fact_1`` for a union) and ``dim<i>``.

    Parameters
    ----------
    n_fact : int, default=10000
        Rows of the fact table S (n_S).
    tuple_ratio : float, default=10.0
        TR = n_S / n_R; each dimension has ``round(n_S / TR)`` rows (snowflake: ``round(n_prev / TR)``,
        n_prev the rows of the table that refers to it).
    feature_ratio : float, default=1.0
        FR = d_R / d_S; each dimension has ``round(FR * d_fact)`` feature columns (at least 1).
    n_dims : int, default=1
        Number of dimensions k.
    d_fact : int, default=10
        Feature columns of the fact table (d_S).
    density : float in (0, 1], default=1.0
        Fraction of nonzero feature values; below 1 every source is a scipy CSR matrix.
    join : {"inner", "left", "outer", "union", "many_to_many"}, default="inner"
        The join kind (see the module documentation).
    dangling : float in [0, 1), default=0.0
        Fraction of referencing rows whose FK matches no key, and of keys referred to by no row.
    snowflake : bool, default=False
        Chain the dimensions (fact -> dim1 -> dim2 -> ...) instead of joining all to the fact table.
    target : {"linear", "logistic", None}, default="linear"
        The planted signal (None: no target).
    noise : float or None, default=None
        Scale of the noise: standard deviation (linear) or logistic scale (logistic). Default 0.1 for
        linear, 1.0 for logistic.
    coef : bool, default=False
        Also return the planted weights.
    random_state : int, numpy Generator or None, default=None
        Seed; the same seed gives the same scenario.

    Returns
    -------
    nm : NormalizedMatrix
        The joined table, factorized.
    y : ndarray of shape (n_rows,) or None
        The planted target, float64 (0/1 for logistic); None when ``target`` is None.
    w : ndarray of shape (n_columns,)
        The planted weights; only with ``coef=True``.

    Raises
    ------
    ValueError
        For an argument out of its range or an unknown ``join`` or ``target``.

    See Also
    --------
    make_star_tables : The same scenario as pandas tables.

    Examples
    --------
    >>> from ilargi.datasets import make_star
    >>> nm, y = make_star(1000, tuple_ratio=10, n_dims=2, d_fact=3, random_state=0)
    >>> nm.shape, [part.name for part in nm.parts], y.shape
    ((1000, 9), ['fact', 'dim1', 'dim2'], (1000,))
    >>> nm.columns[:4]
    ['s0', 's1', 's2', 'r1_0']
    >>> nm, y, w = make_star(100, join="left", dangling=0.1, coef=True, random_state=0)
    >>> w.shape
    (20,)
    """
    star, nm = _build(
        n_fact,
        tuple_ratio,
        feature_ratio,
        n_dims,
        d_fact,
        density,
        join,
        dangling,
        snowflake,
        target,
        noise,
        random_state,
    )
    return (nm, star.y, star.coef) if coef else (nm, star.y)


def _frame(source, names):
    values = source.toarray() if sp.issparse(source) else source
    return pd.DataFrame(values, columns=names, copy=False)


def make_star_tables(
    n_fact=10_000,
    tuple_ratio=10.0,
    feature_ratio=1.0,
    n_dims=1,
    d_fact=10,
    *,
    density=1.0,
    join="inner",
    dangling=0.0,
    snowflake=False,
    target="linear",
    noise=None,
    random_state=None,
):
    """The tables of :func:`make_star`'s scenario (same arguments, same seed, same numbers), as
    ``{table name: pandas DataFrame}``: ``fact`` (or ``fact_0``/``fact_1``) and ``dim1..dimk``.

    Sparse sources are stored densely (zeros). When every target row is one fact row (``join`` inner,
    left or union) and a target is planted, the fact table has the target as column ``y``; for outer and
    many-to-many joins the target belongs to the joined rows and only :func:`make_star` returns it.
    Joining the tables with ``pandas.merge`` (``on="fk<i>"``, ``how`` = the join kind, ``"left"`` for a
    union after ``pd.concat`` of the shards) gives ``make_star``'s matrix (outer: up to row order).

    Parameters
    ----------
    n_fact, tuple_ratio, feature_ratio, n_dims, d_fact, density
        As in :func:`make_star`.
    join, dangling, snowflake, target, noise, random_state
        As in :func:`make_star`.

    Returns
    -------
    dict of str to pandas.DataFrame
        The tables by name.

    Raises
    ------
    ValueError
        For an argument out of its range or an unknown ``join`` or ``target``.

    Examples
    --------
    >>> import ilargi
    >>> from ilargi.datasets import make_star_tables
    >>> tables = make_star_tables(1000, tuple_ratio=10, n_dims=2, d_fact=3, random_state=0)
    >>> {name: frame.shape for name, frame in tables.items()}
    {'fact': (1000, 6), 'dim1': (100, 4), 'dim2': (100, 4)}
    >>> joined = ilargi.Table(tables["fact"]).merge(tables["dim1"], on="fk1")
    >>> joined = joined.merge(tables["dim2"], on="fk2")
    >>> joined.shape
    (1000, 12)
    """
    star, _ = _build(
        n_fact,
        tuple_ratio,
        feature_ratio,
        n_dims,
        d_fact,
        density,
        join,
        dangling,
        snowflake,
        target,
        noise,
        random_state,
    )
    d_fact = star.fact.shape[1]
    fact = _frame(star.fact, star.columns[:d_fact]).assign(**star.fact_fks)
    if star.fact_y is not None:
        fact["y"] = star.fact_y
    if join == "union":
        half = len(fact) // 2
        tables = {
            "fact_0": fact.iloc[:half].reset_index(drop=True),
            "fact_1": fact.iloc[half:].reset_index(drop=True),
        }
    else:
        tables = {"fact": fact}
    start = d_fact
    for i, (source, keys, fks) in enumerate(star.dims, start=1):
        names = star.columns[start : start + source.shape[1]]
        start += source.shape[1]
        key = pd.DataFrame({f"fk{i}": keys})
        tables[f"dim{i}"] = pd.concat([key, _frame(source, names)], axis=1).assign(**fks)
    return tables
