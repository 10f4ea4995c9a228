"""Every example runs end to end at a small size and prints its result."""
import os
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run(script, *args, **env_vars):
    env = {**os.environ, **{name: str(value) for name, value in env_vars.items()}}
    done = subprocess.run([sys.executable, str(EXAMPLES / script), *args], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_every_example_is_tested():
    tested = {"logistic_hamlet.py", "logistic_santoku.py", "linear_tpch.py", "clustering_hamlet.py"}
    assert {path.name for path in EXAMPLES.glob("*.py")} == tested


def test_logistic_hamlet(datasets_dir):
    out = run("logistic_hamlet.py", "--rows", "3000", "--max-iter", "20", ILARGI_DATASETS=datasets_dir)
    for name in ("Flights", "Walmart", "Yelp"):
        assert name in out
    assert out.count("test accuracy") == 3 and 'plan="auto" picks' in out


def test_logistic_santoku(datasets_dir):
    out = run("logistic_santoku.py", "--dataset", "Walmart", "--rows", "3000", ILARGI_DATASETS=datasets_dir)
    assert "factorized" in out and "materialized" in out and "holdout accuracy" in out


def test_clustering_hamlet(datasets_dir):
    out = run("clustering_hamlet.py", "--dataset", "Flights", "--rows", "3000", "--max-iter", "5",
              ILARGI_DATASETS=datasets_dir)
    assert "k-means" in out and "GNMF" in out
    assert "test inertia/row" in out and "test rel. error" in out


def test_linear_tpch(tmp_path):
    # A private cache folder: the example generates TPC-H sf=0.01 with tpchgen-cli (about a second).
    out = run("linear_tpch.py", "--sf", "0.01", XDG_CACHE_HOME=tmp_path)
    assert "TPC-H sf=0.01" in out and "test R^2" in out
