"""The scripts of ``examples/`` run end to end on small data, and they and the gallery scripts of
``docs/gallery/`` use only ilargi's public names (``ilargi.__all__``).

The examples are user code: tables in (pandas, Parquet, DuckDB), ``Table.merge``/``to_matrix``, then
``fit``/``predict``/``score``. Dataset shortcuts that hide the join a user must write
(``tpch_regression``, ``load_santoku``, ...) are not allowed there; ``make_star_tables`` (tables)
and ``tpch_dir`` (the Parquet files) are. The gallery may also use ``make_star``, the synthetic
scenario generator its timing figures are drawn from.
"""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import ilargi
from tests.tools import TPCHGEN, found

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
GALLERY = ROOT / "docs" / "gallery"
EXAMPLE_DATASETS = {"make_star_tables", "tpch_dir"}
GALLERY_DATASETS = EXAMPLE_DATASETS | {"make_star"}


def run(script, *args, **env_vars):
    # The checkout's ilargi first on the path, whatever ilargi is installed.
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        **{name: str(value) for name, value in env_vars.items()},
    }
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def ilargi_names(path):
    """Every ``ilargi...`` name a script uses: imports and attribute chains, as dotted strings."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    aliases, used = {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "ilargi":
                    used.append(alias.name)
                    aliases[alias.asname or alias.name.split(".")[0]] = (
                        alias.asname and alias.name or "ilargi"
                    )
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.split(".")[0] == "ilargi"
        ):
            used.extend(f"{node.module}.{alias.name}" for alias in node.names)
    inner_nodes = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in inner_nodes:  # whole chains only
            chain, inner = [node.attr], node.value
            while isinstance(inner, ast.Attribute):
                chain.append(inner.attr)
                inner = inner.value
            if isinstance(inner, ast.Name) and inner.id in aliases:
                used.append(".".join([aliases[inner.id], *reversed(chain)]))
    return used


def non_public(path, datasets):
    """The names of ilargi a script uses beyond the public API."""
    bad = []
    for name in ilargi_names(path):
        parts = name.split(".")
        if parts == ["ilargi"]:
            continue
        if parts[1] not in ilargi.__all__:
            bad.append(name)
        elif parts[1] == "datasets" and len(parts) > 2 and parts[2] not in datasets:
            bad.append(name)
    return bad


def test_every_example_is_tested():
    tested = {
        "logistic_santoku.py",
        "ridge_tpch_parquet.py",
        "gbdt_tpch_parquet.py",
        "logistic_tpch_duckdb.py",
        "left_join_missing_values.py",
    }
    assert {path.name for path in EXAMPLES.glob("*.py")} == tested


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.py")), ids=lambda path: path.name)
def test_examples_use_public_names(path):
    assert non_public(path, EXAMPLE_DATASETS) == []


@pytest.mark.parametrize("path", sorted(GALLERY.glob("*.py")), ids=lambda path: path.name)
def test_gallery_uses_public_names(path):
    assert non_public(path, GALLERY_DATASETS) == []


def test_public_name_check_catches_private_use(tmp_path):
    script = tmp_path / "bad.py"
    script.write_text(
        "import ilargi\nfrom ilargi.cli import compare_plans\nfrom ilargi import Table\n"
        "ilargi.datasets.tpch_regression(0.01)\nilargi.models.Ridge()\n"
        "ilargi.datasets.tpch_dir(0.01)\n"
    )
    assert sorted(non_public(script, EXAMPLE_DATASETS)) == [
        "ilargi.cli.compare_plans",
        "ilargi.datasets.tpch_regression",
        "ilargi.models.Ridge",
    ]


@pytest.fixture(scope="module")
def tpch_cache(tmp_path_factory):
    """A private cache folder for TPC-H sf=0.01, generated once for both TPC-H examples (~1 s)."""
    if not found("tpchgen-cli"):
        pytest.skip(TPCHGEN)
    return tmp_path_factory.mktemp("xdg-cache")


def test_logistic_santoku(datasets_dir):
    out = run(
        "logistic_santoku.py",
        "--dataset",
        "Walmart",
        "--rows",
        "3000",
        "--data",
        datasets_dir / "santoku",
    )
    assert "holdout accuracy" in out and "plan" in out and "P(positive)" in out


def test_logistic_santoku_without_data(tmp_path):
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "logistic_santoku.py"), "--data", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 1 and "not found: pass --data" in done.stderr


def test_ridge_tpch_parquet(tpch_cache):
    out = run("ridge_tpch_parquet.py", "--sf", "0.01", XDG_CACHE_HOME=tpch_cache)
    assert "60,175 rows" in out and "test R^2" in out and "predicted" in out


def test_gbdt_tpch_parquet(tpch_cache):
    out = run("gbdt_tpch_parquet.py", "--sf", "0.01", "--trees", "20", XDG_CACHE_HOME=tpch_cache)
    assert "binned: 60,175 rows x 13 columns" in out and "20 trees" in out and "test RMSE" in out
    assert "most split on:" in out and "peak resident memory" in out


def test_logistic_tpch_duckdb(tpch_cache):
    out = run("logistic_tpch_duckdb.py", "--sf", "0.01", XDG_CACHE_HOME=tpch_cache)
    assert "TPC-H in DuckDB" in out and "test accuracy" in out and "predicted classes" in out


def test_left_join_missing_values():
    out = run("left_join_missing_values.py", "--rows", "20000", "--clusters", "3")
    assert (
        "__missing" in out
        and "LinearRegression" in out
        and "KMeans" in out
        and "test R^2" in out
        and "NaN where cells are missing" in out
    )
