"""Reliability of tables, joins, files and the command lines (issue 12): bad and edge inputs, counted by outcome.

Every case runs an input against its reference -- pandas for merges and concats, a clear refusal for
bad files, SQL and command-line values -- and lands in one outcome class:

* same as reference -- the result equals pandas' (values, dtypes, column names and order, row order);
* refused with a clear error -- the refusal pandas makes, or the one a bad file/value deserves: the
  expected error class, naming the table, column, file or field;
* pandas fails (its own bug), ilargi answers -- pandas raises an internal error on valid keys;
* unhelpful error -- refused, but with another error class or a message naming nothing;
* silent difference -- another result than the reference, a bad input accepted, a file written
  outside its folder or SQL run from a file;
* crash -- an unexpected exception (IndexError, KeyError, a traceback from a command line);
* security -- a file read or written outside its folder, through a link, or unpickled from a
  place another user could write, a private folder or file left open to others;
* resource -- far more memory taken than the input holds (an array read before its declared
  length was checked).

The cases: the fuzz of ``tests/table/test_fuzz.py`` (random key dtypes, NULLs, every ``how``,
``validate``, ``sort``, suffixes; ``concat``; snowflake chains and unions), the hand-made key pairs of
``tests/table/test_keys.py``, the file, ``to_matrix`` and command-line cases of this script, and the
Dask/files family of issue 43: chunked Parquet joins against the in-memory Table and pandas
(the parity fuzz of ``tests/scaleout/test_parity.py``), ``chunks=`` and ``persist=`` values,
``compute()`` at every chunk size, NumPy functions on a Dask matrix, and saved folders in hostile
hands (links, absolute paths, stale and racing saves, lengthened arrays, the disk cache).

    python benchmarks/reliability_tables.py                      # this checkout's ilargi
    python benchmarks/reliability_tables.py --json after.json
    (cd ../main && python ../wt/benchmarks/reliability_tables.py --json before.json)   # another checkout
    python benchmarks/reliability_tables.py --before before.json  # both columns side by side
    python benchmarks/reliability_tables.py --only dask,files      # one family's groups only

The helpers come from this script's checkout; ``ilargi`` is imported from the current directory.
"""

import argparse
import collections
import contextlib
import importlib.util
import io
import json
import os
import signal
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

sys.path.insert(0, os.getcwd())  # ilargi from the current directory (a checkout to measure)
HERE = Path(__file__).resolve().parents[1]

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402


def _module(relative, name):
    """A helper module of this script's checkout (it may not exist in the measured one)."""
    spec = importlib.util.spec_from_file_location(name, HERE / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fuzz = _module("tests/table/test_fuzz.py", "reliability_fuzz")
keys = _module("tests/table/test_keys.py", "reliability_keys")
sys.modules.setdefault("tests.table.test_fuzz", fuzz)  # the parity fuzz draws from the same kinds

from ilargi.table import Table  # noqa: E402

SAME, REFUSED, UNHELPFUL, SILENT, CRASH = (
    fuzz.SAME,
    fuzz.REFUSED,
    fuzz.UNHELPFUL,
    fuzz.SILENT,
    fuzz.CRASH,
)
PANDAS_FAILS = fuzz.PANDAS_FAILS
SECURITY, RESOURCE = "security", "resource"
CLASSES = (SAME, REFUSED, PANDAS_FAILS, UNHELPFUL, SILENT, CRASH, SECURITY, RESOURCE)
LABELS = {
    SAME: "same as reference",
    REFUSED: "refused, clear error",
    PANDAS_FAILS: "pandas bug, ilargi answers",
    UNHELPFUL: "unhelpful error",
    SILENT: "silent difference",
    CRASH: "crash",
    SECURITY: "security",
    RESOURCE: "resource",
}
EXPECTED = (ValueError, TypeError, FileNotFoundError)  # what a clear refusal may raise


def refusal(run, needles, classes=EXPECTED):
    """A case whose reference is a refusal: ``run()`` must raise one of ``classes`` naming a needle."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run()
    except classes as error:
        text = str(error)
        if any(str(needle) in text for needle in needles):
            return REFUSED, text
        return UNHELPFUL, f"{type(error).__name__}: {text}"
    except Exception as error:  # noqa: BLE001 -- the class of anything else is the finding
        return CRASH, f"{type(error).__name__}: {error}"
    return SILENT, "accepted"


# --------------------------------------------------------------------------------------- join keys
def key_cases():
    for case, (left_key, right_key, _) in keys.REFUSED.items():
        for how in keys.HOWS:
            left = pd.DataFrame({"when": left_key, "x": range(3)})
            right = pd.DataFrame({"day": right_key, "y": range(3)})
            yield (
                "join keys pandas refuses",
                f"{case}, {how}",
                lambda l=left, r=right, h=how: fuzz.outcome(
                    lambda: l.merge(r, left_on="when", right_on="day", how=h),
                    lambda: (
                        Table(l, name="fact")
                        .merge(Table(r, name="cal"), left_on="when", right_on="day", how=h)
                        .to_pandas()
                    ),
                    ["when", "day"],
                    ["when"],
                ),
            )
    for case, (left_key, right_key) in keys.ACCEPTED.items():
        for how in keys.HOWS:
            for sort in (False, True):
                left = pd.DataFrame({"k": left_key, "x": range(3)})
                right = pd.DataFrame({"k": right_key, "y": [10, 20, 30]})
                order_free = case == "categoricals with other categories" and (
                    how == "outer" or sort
                )
                yield (
                    "join keys pandas accepts",
                    f"{case}, {how}, sort={sort}",
                    lambda l=left, r=right, h=how, s=sort, o=order_free: fuzz.outcome(
                        lambda: l.merge(r, on="k", how=h, sort=s),
                        lambda: (
                            Table(l, name="l")
                            .merge(
                                Table(r, name="r"), on="k", how=h, **({"sort": True} if s else {})
                            )
                            .to_pandas()
                        ),
                        ["k"],
                        ["k"],
                        o,
                    ),
                )


def fuzz_cases(merges, concats, chains):
    for seed in range(merges):
        yield "fuzz: merge", f"seed {seed}", lambda s=seed: fuzz.run_merge_case(s)
    for seed in range(concats):
        yield "fuzz: concat", f"seed {seed}", lambda s=seed: fuzz.run_concat_case(s)
    for seed in range(chains):
        yield (
            "fuzz: chain / union then merge",
            f"seed {seed}",
            lambda s=seed: fuzz.run_chain_case(s),
        )


# ------------------------------------------------------------------------------------------- files
# "{root}": the case's temporary folder, so that an absolute name that escapes lands there, not in /etc
NAMES = [
    "../../x",
    "../../../tmp/evil",
    "{root}/etc/passwd",
    "{root}/abs",
    "a/b",
    "a\\b",
    "",
    ".",
    "..",
    "x\0y",
    "CON",
    "nul",
    "Sales",
    "sales",
    "spaces and ünïcode",
    "name.parquet",
    "~/home",
    "C:\\windows\\x",
]


def name_case(name):
    with tempfile.TemporaryDirectory() as root:
        name = name.replace("{root}", root)
        folder = Path(root) / "deep" / "folder"
        fact = pd.DataFrame({"k": [1, 2, 2], "a": [0.5, 1.5, 2.5]})
        table = Table(fact, name=name).merge(
            Table(pd.DataFrame({"k": [1, 2], "b": ["x", "y"]}), name=name), on="k", how="left"
        )
        try:
            table.save(folder, sources=True)
        except (ValueError, TypeError) as error:
            outside = _outside(root, folder)
            return (SILENT, f"wrote {outside}") if outside else (REFUSED, str(error))
        except Exception as error:  # noqa: BLE001
            return CRASH, f"{type(error).__name__}: {error}"
        outside = _outside(root, folder)
        if outside:
            return SILENT, f"wrote outside the folder: {outside}"
        try:
            same = Table.load(folder).to_pandas().equals(table.to_pandas())
        except Exception as error:  # noqa: BLE001
            return CRASH, f"reload: {type(error).__name__}: {error}"
        return (SAME, "") if same else (SILENT, "reloaded table differs")


def _outside(root, folder):
    written = [os.path.join(d, f) for d, _, files in os.walk(root) for f in files]
    return [w for w in written if not w.startswith(str(folder) + os.sep)]


QUERIES = [
    "SELECT * FROM fact; DROP TABLE fact",
    "COPY (SELECT 42 AS answer) TO '{target}' (FORMAT csv)",
    "SELECT * FROM fact; COPY (SELECT 42) TO '{target}'",
    "CREATE TABLE hacked AS SELECT 1",
    "fact; DROP TABLE fact",
    "SELECT * FROM fact UNION ALL SELECT * FROM fact",
    "SELECT * FROM read_csv('{target}')",
    "ATTACH '{target}.db' AS other",
]


def query_case(query):
    import duckdb

    with tempfile.TemporaryDirectory() as root:
        target = Path(root) / "written.csv"
        connection = duckdb.connect()
        connection.execute("CREATE TABLE fact AS SELECT range AS k, range * 0.5 AS a FROM range(4)")
        folder = Path(root) / "saved"
        Table.from_duckdb(connection, "SELECT * FROM fact", name="q").save(folder)
        header = json.loads((folder / "metadata.json").read_text())
        header["extra"]["sources"][0]["query"] = query.format(target=target)
        (folder / "metadata.json").write_text(json.dumps(header))
        tables = connection.execute("SELECT count(*) FROM duckdb_tables()").fetchall()
        try:
            Table.load(folder, {"q": connection}).to_pandas()
            result = SILENT, "loaded: the saved SQL ran"
        except Exception as error:  # noqa: BLE001
            result = (REFUSED, str(error)) if "'q'" in str(error) else (UNHELPFUL, str(error))
        ran = (
            target.exists()
            or Path(f"{target}.db").exists()
            or connection.execute("SELECT count(*) FROM duckdb_tables()").fetchall() != tables
        )
        try:
            connection.execute("SELECT count(*) FROM fact").fetchall()
        except Exception:  # noqa: BLE001
            ran = True
        connection.close()
        return (SILENT, f"SQL from the file ran ({result[1]})") if ran else result


def _saved_matrix(folder, affine=False):
    import scipy.sparse as sp

    from ilargi import NormalizedMatrix

    T = NormalizedMatrix.from_parts(
        [np.arange(8.0).reshape(4, 2), sp.csr_array(np.arange(6.0).reshape(3, 2) + 1)],
        [None, np.array([2, 0, -1, 1])],
        [[0, 1], [2, 3]],
        (4, 4),
        names=["fact", "dim"],
    )
    ((T - 1.0) * 2.0 if affine else T).save(folder, sources=True)


ARRAY_EDITS = [
    ("rows shortened", "rows_1", lambda a: a[:-1]),
    ("rows lengthened", "rows_1", lambda a: np.append(a, 0)),
    ("rows out of range", "rows_1", lambda a: np.where(a >= 0, 7, -1)),
    ("rows below -1", "rows_1", lambda a: a - 5),
    ("rows as floats", "rows_1", lambda a: a.astype(float)),
    ("rows 2-D", "rows_1", lambda a: a[None, :]),
    ("rows as strings", "rows_1", lambda a: a.astype(str)),
    ("cols not injective", "cols_0", lambda a: np.zeros_like(a)),
    ("cols out of range", "cols_0", lambda a: a + 10),
    ("cols shortened", "cols_1", lambda a: a[:1]),
    ("cols as floats", "cols_1", lambda a: a.astype(float)),
    ("cols negative", "cols_1", lambda a: -a),
    ("array missing", "rows_1", None),
    ("scale shortened", "scale", lambda a: a[:-1]),
    ("shift lengthened", "shift", lambda a: np.append(a, 1.0)),
    ("scale with inf", "scale", lambda a: np.where(np.arange(len(a)) == 1, np.inf, a)),
    ("shift with NaN", "shift", lambda a: np.full_like(a, np.nan)),
    ("scale as ints", "scale", lambda a: a.astype(int)),
]
HEADER_EDITS = [
    ("parts missing", lambda h: h.pop("parts")),
    ("parts empty", lambda h: h.update(parts=[])),
    ("shape of one number", lambda h: h.update(shape=[4])),
    ("shape negative", lambda h: h.update(shape=[4, -1])),
    ("shape as text", lambda h: h.update(shape="4x4")),
    ("source_shape as text", lambda h: h["parts"][1].update(source_shape="3x2")),
    ("identity as text", lambda h: h["parts"][1].update(identity="no")),
    ("name missing", lambda h: h["parts"][0].pop("name")),
    ("identity with other rows", lambda h: h["parts"][0].update(source_shape=[5, 2])),
    ("source rows shrunk", lambda h: h["parts"][1].update(source_shape=[2, 2])),
    ("columns too few", lambda h: h.update(columns=["a"])),
    ("extra not an object", lambda h: h.update(extra=[1])),
    ("format changed", lambda h: h.update(format="other")),
    ("version changed", lambda h: h.update(version=99)),
    ("parts not objects", lambda h: h.update(parts=[1, 2])),
]


def array_case(name, edit, affine):
    from ilargi import NormalizedMatrix

    with tempfile.TemporaryDirectory() as root:
        folder = Path(root)
        _saved_matrix(folder, affine)
        with np.load(folder / "indices.npz") as stored:
            arrays = {key: stored[key] for key in stored.files}
        if edit is None:
            arrays.pop(name)
        else:
            arrays[name] = edit(arrays[name])
        np.savez(folder / "indices.npz", **arrays)
        return refusal(lambda: NormalizedMatrix.load(folder).toarray(), ["indices.npz"])


def header_case(edit):
    from ilargi import NormalizedMatrix

    with tempfile.TemporaryDirectory() as root:
        folder = Path(root)
        _saved_matrix(folder)
        header = json.loads((folder / "metadata.json").read_text())
        edit(header)
        (folder / "metadata.json").write_text(json.dumps(header))
        return refusal(
            lambda: NormalizedMatrix.load(folder).toarray(), ["metadata.json", "indices.npz"]
        )


def truncated_case(file_name, keep):
    from ilargi import NormalizedMatrix

    with tempfile.TemporaryDirectory() as root:
        folder = Path(root)
        _saved_matrix(folder)
        data = (folder / file_name).read_bytes()
        (folder / file_name).write_bytes(data[:keep] if keep is not None else b"\x00garbage\xff")
        return refusal(lambda: NormalizedMatrix.load(folder).toarray(), [file_name])


def _saved_join(folder):
    fact = pd.DataFrame({"k": [1, 2, 2, 9], "a": [1.0, 2.0, 3.0, 4.0]})
    dim = pd.DataFrame({"k": [1, 2, 3], "b": ["x", "y", "z"]})
    Table(fact, name="fact").merge(Table(dim, name="dim"), on="k", how="outer").save(
        folder, sources=True
    )


LAYOUT_EDITS = [
    ("labels too few", lambda e: e.update(labels=["k"])),
    ("slots missing", lambda e: e.pop("slots")),
    ("a slot removed", lambda e: e["slots"].pop()),
    ("slot source out of range", lambda e: e["slots"][0].update(source=7)),
    ("slot source as text", lambda e: e["slots"][0].update(source="0")),
    ("slot columns lengthened", lambda e: e["slots"][1].update(columns=["b", "k"])),
    ("source kind unknown", lambda e: e["sources"][0].update(kind="script")),
    ("source nrows as text", lambda e: e["sources"][0].update(nrows="4")),
    ("source path missing", lambda e: e["sources"][0].pop("path")),
    ("source path outside", lambda e: e["sources"][0].update(path="../../outside.parquet")),
    ("source path absolute, missing", lambda e: e["sources"][0].update(path="/no/such.parquet")),
    ("source nrows changed", lambda e: e["sources"][0].update(nrows=5)),
    ("sources not objects", lambda e: e.update(sources=["fact"])),
    ("name not text", lambda e: e.update(name=3)),
]


def layout_case(edit):
    with tempfile.TemporaryDirectory() as root:
        folder = Path(root) / "saved"
        _saved_join(folder)
        header = json.loads((folder / "metadata.json").read_text())
        edit(header["extra"])
        (folder / "metadata.json").write_text(json.dumps(header))
        return refusal(
            lambda: Table.load(folder).to_pandas(),
            ["metadata.json", "source 'fact'", "such.parquet"],
        )


def table_array_case(name, edit):
    with tempfile.TemporaryDirectory() as root:
        folder = Path(root) / "saved"
        _saved_join(folder)
        with np.load(folder / "indices.npz") as stored:
            arrays = {key: stored[key] for key in stored.files}
        arrays[name] = edit(arrays[name])
        np.savez(folder / "indices.npz", **arrays)
        return refusal(lambda: Table.load(folder).to_pandas(), ["indices.npz", "metadata.json"])


def truncated_table_case(which):
    with tempfile.TemporaryDirectory() as root:
        folder = Path(root) / "saved"
        _saved_join(folder)
        path = folder / which if which != "source" else next((folder / "sources").iterdir())
        path.write_bytes(path.read_bytes()[:40])
        return refusal(lambda: Table.load(folder).to_pandas(), [path.name])


def file_cases():
    for name in NAMES:
        yield "files: table names as paths", repr(name), lambda n=name: name_case(n)
    for query in QUERIES:
        yield "files: edited DuckDB queries", query, lambda q=query: query_case(q)
    for label, name, edit in ARRAY_EDITS:
        affine = name in ("scale", "shift")
        yield (
            "files: edited index/affine arrays",
            label,
            lambda n=name, e=edit, a=affine: array_case(n, e, a),
        )
    for label, name, edit in [
        ("rows shortened", "rows_1", lambda a: a[:-1]),
        ("rows lengthened", "rows_1", lambda a: np.append(a, 0)),
        ("rows as floats", "rows_1", lambda a: a.astype(float)),
        ("rows out of range", "rows_1", lambda a: np.where(a >= 0, 7, -1)),
        ("two parts on one cell", "rows_2", lambda a: np.zeros_like(a)),
    ]:
        yield (
            "files: edited index/affine arrays",
            f"Table: {label}",
            lambda n=name, e=edit: table_array_case(n, e),
        )
    for label, edit in HEADER_EDITS:
        yield "files: edited JSON fields", label, lambda e=edit: header_case(e)
    for label, edit in LAYOUT_EDITS:
        yield "files: edited JSON fields", f"Table: {label}", lambda e=edit: layout_case(e)
    for file_name, keep in [
        ("metadata.json", 50),
        ("metadata.json", None),
        ("indices.npz", 60),
        ("indices.npz", None),
        ("source_0.npy", 70),
        ("source_1.npz", 30),
    ]:
        yield (
            "files: truncated or foreign",
            f"{file_name} {'cut' if keep else 'garbage'}",
            lambda f=file_name, k=keep: truncated_case(f, k),
        )
    for which in ("metadata.json", "indices.npz", "source"):
        yield (
            "files: truncated or foreign",
            f"Table: {which} cut",
            lambda w=which: truncated_table_case(w),
        )


# ---------------------------------------------------------------------------------------- to_matrix
def infinite_case(dtype, value, where):
    fact = pd.DataFrame({"k": [1, 2, 2], "a": [1.0, 2.0, 3.0]})
    dim = pd.DataFrame({"k": [1, 2], "b": pd.array([1.0, value], dtype=dtype)})
    table = Table(fact, name="fact").merge(Table(dim, name="dim"), on="k", how=where)
    return refusal(lambda: table.to_matrix(target="a"), ["'b'"], (ValueError,))


def matrix_cases():
    for dtype in ("float64", "float32", "Float64"):
        for value in (np.inf, -np.inf):
            for how in ("left", "inner"):
                yield (
                    "to_matrix: infinite values",
                    f"{dtype} {value} {how}",
                    lambda d=dtype, v=value, h=how: infinite_case(d, v, h),
                )


# ---------------------------------------------------------------------------------------- commands
SMALL = ["--rows", "2000", "--tuple-ratio", "10"]
CLI_VALUES = [
    ["--rows", "0"],
    ["--rows", "-5"],
    ["--rows", "abc"],
    ["--max-iter", "-3"],
    ["--max-iter", "0"],
    ["--blas-threads", "-2"],
    ["--tuple-ratio", "0"],
    ["--tuple-ratio", "-1"],
    ["--tuple-ratio", "inf"],
    ["--tuple-ratio", "nan"],
    ["--feature-ratio", "0"],
    ["--feature-ratio", "nan"],
    ["--tpch", "0"],
    ["--tpch", "-1"],
    ["--seed", "-1"],
    ["--hamlet", "/no/such/folder"],
    ["--santoku", "/no/such/folder"],
    ["--hamlet", "{empty}"],
    ["--santoku", "{empty}"],
    ["--hamlet", "{bad_hamlet}"],
]
CALIBRATION = [
    ["train", "{missing_csv}", "--out", "{out}"],
    ["train", "{bad_csv}", "--out", "{out}"],
    ["train", "{text_csv}", "--out", "{out}"],
    ["train", "{empty_csv}", "--out", "{out}"],
    ["sweep", "--out", "{out}/x.csv", "--budget-seconds", "0"],
    ["sweep", "--out", "{out}/x.csv", "--blas-threads", "-2"],
    ["sweep", "--out", "{out}/x.csv", "--max-scenarios", "0"],
    ["calibrate", "--budget-seconds", "-5"],
    ["calibrate", "--budget-seconds", "nan"],
]


class _Running(Exception):
    """A command still running after its time limit: it accepted the bad value."""


def _stop(signum, frame):
    raise _Running()


def command_case(module, args, needles, limit=60):
    """In-process ``main(args)``: exit status 2 with one line on stderr is the clear refusal."""
    err = io.StringIO()
    signal.signal(signal.SIGALRM, _stop)
    signal.alarm(limit)
    try:
        with (
            contextlib.redirect_stderr(err),
            contextlib.redirect_stdout(io.StringIO()),
            warnings.catch_warnings(),
        ):
            warnings.simplefilter("ignore")
            status = module.main(args)
    except SystemExit as exit_:
        status = exit_.code
    except _Running:
        return SILENT, f"accepted: still running after {limit} s"
    except Exception as error:  # noqa: BLE001 -- a traceback on the command line
        return CRASH, f"{type(error).__name__}: {error}"
    finally:
        signal.alarm(0)
    text = err.getvalue().strip()
    if status == 0:
        return SILENT, "accepted"
    if status == 2 and "\n" not in text and any(n in text for n in needles):
        return REFUSED, text
    return UNHELPFUL, f"status {status}: {text[-200:]}"


def command_cases(root):
    import ilargi.calibration.__main__ as calibration
    import ilargi.cli as cli

    empty = Path(root) / "empty"
    empty.mkdir()
    bad_hamlet = Path(root) / "bad_hamlet"
    bad_hamlet.mkdir()
    (bad_hamlet / "MLY.csv").write_text("not,a\nhamlet,file\n")
    sweep = pd.read_csv(HERE / "tests" / "data" / "chooser_cpu_sweep.csv.xz").head(30)
    sweep.drop(columns=["scenario"]).to_csv(Path(root) / "bad.csv", index=False)
    sweep.assign(t_mat="fast").to_csv(Path(root) / "text.csv", index=False)
    (Path(root) / "empty.csv").write_text("")
    paths = {
        "empty": empty,
        "bad_hamlet": bad_hamlet,
        "missing_csv": Path(root) / "missing.csv",
        "bad_csv": Path(root) / "bad.csv",
        "text_csv": Path(root) / "text.csv",
        "empty_csv": Path(root) / "empty.csv",
        "out": Path(root) / "out",
    }
    for args in CLI_VALUES:
        args = [a.format(**paths) for a in args]
        extra = (
            []
            if args[0] in ("--rows", "--tuple-ratio", "--hamlet", "--santoku", "--tpch")
            else SMALL
        )
        needles = [args[0], str(args[1])]
        yield (
            "command line: ilargi",
            " ".join(args).replace(str(root), "…"),
            lambda a=args + extra, n=needles: command_case(cli, a, n),
        )
    for args in CALIBRATION:
        args = [a.format(**paths) for a in args]
        needles = [a for a in args if a.startswith("--") or a.endswith(".csv")]
        yield (
            "command line: python -m ilargi.calibration",
            " ".join(args).replace(str(root), "…"),
            lambda a=args, n=needles: command_case(calibration, a, n),
        )


# --------------------------------------------------------------------- Dask parity (issue 43)
def _dask():
    """Dask's synchronous scheduler: the same tasks as on a cluster, one at a time, here."""
    import dask

    return dask.config.set(scheduler="sync")


def parity_cases(seeds):
    parity = _module("tests/scaleout/test_parity.py", "reliability_parity")
    translate = {
        parity.SAME: SAME,
        parity.REFUSED: REFUSED,
        parity.SILENT: SILENT,
        parity.UNHELPFUL: UNHELPFUL,
        parity.CRASH: CRASH,
    }

    def case(seed):
        kind, detail = parity.parity_case(seed)
        return translate[kind], detail

    for seed in range(seeds):
        yield "dask: chunked joins vs in memory", f"seed {seed}", lambda s=seed: case(s)


def _scenario(name, n=97):
    return _module("tests/scaleout/conftest.py", "reliability_scaleout").scenario(name, n)


def _same_matrix(D, X):
    with _dask():
        got = D.compute().toarray()
    return (
        (SAME, "")
        if got.shape == X.shape and np.allclose(got, X.toarray())
        else (SILENT, "another matrix than in memory")
    )


def _refused(run, needles, classes=EXPECTED):
    with _dask():
        return refusal(run, needles, classes)


TO_DASK_CHUNKS = [
    1000.0,
    1.5,
    np.float64(2.0),
    np.float32(4),
    True,
    False,
    "64",
    "1000",
    "row_groups",
    [50.0, 47.0],
    [50, 40],
    [50, -3, 50],
    0,
    -3,
    None,
    2 + 0j,
    {"rows": 10},
]
TO_DASK_VALID = [
    1,
    7,
    np.int64(13),
    np.uint8(50),
    97,
    500,
    [97],
    [0, 97, 0],
    (40, 57),
    np.array([90, 7]),
]
PARQUET_CHUNKS = [
    1000.0,
    1.5,
    np.float64(8.0),
    True,
    "1000",
    "0B",
    "-5MiB",
    "lots",
    "12 parsecs",
    [5, 5],
    0,
    -1,
    "1.5",
    np.nan,
]
PARQUET_VALID = [1, 7, np.int32(100), "row_groups", "1B", "1kB", "2KiB", "1.5kB", "64MiB"]
PERSIST_TO_DASK = ["yes", None, 1, 0, 1.0, "disk", "memory", "True", [True]]
PERSIST_TABLE = ["yes", None, 1, 0, "memory", "Disk", "disk ", 2.0]


def _fact_file(root):
    fact = pd.DataFrame({"k": np.arange(40) % 5, "x": np.linspace(0, 1, 40)})
    fact.to_parquet(Path(root) / "fact.parquet", row_group_size=9)
    return Path(root) / "fact.parquet", pd.DataFrame({"k": range(5), "v": np.arange(5.0) * 2})


def parquet_chunks_case(chunks, valid):
    from ilargi.scaleout import ChunkedTable

    with tempfile.TemporaryDirectory() as root:
        path, dim = _fact_file(root)
        if not valid:
            return _refused(lambda: Table.from_parquet(path, chunks=chunks), ["chunks"])
        with _dask():
            table = Table.from_parquet(path, chunks=chunks)
            assert isinstance(table, ChunkedTable)
            D, y = table.merge(dim, on="k").to_matrix(columns=["v"], target="x")
            X, y_in = (
                Table(pd.read_parquet(path), name="fact")
                .merge(Table(dim), on="k")
                .to_matrix(columns=["v"], target="x")
            )
            same = np.allclose(D.compute().toarray(), X.toarray()) and np.allclose(
                y.compute(), y_in
            )
        return (SAME, "") if same else (SILENT, "another matrix than in memory")


def persist_table_case(persist):
    with tempfile.TemporaryDirectory() as root:
        path, dim = _fact_file(root)
        table = Table.from_parquet(path, chunks=10).merge(dim, on="k")
        return _refused(lambda: table.to_matrix(columns=["v"], persist=persist), ["persist"])


def compute_case(name, chunks):
    X, _ = _scenario(name)
    try:
        with _dask():
            D = X.to_dask(chunks, persist=False)
        return _same_matrix(D, X)
    except Exception as error:  # noqa: BLE001 -- the class is the finding
        return CRASH, f"{type(error).__name__}: {error}"


NUMPY_FUNCTIONS = [
    ("np.sum", np.sum, {}),
    ("np.mean", np.mean, {}),
    ("np.var", np.var, {}),
    ("np.var ddof=1", np.var, {"ddof": 1}),
    ("np.std", np.std, {}),
    ("np.min", np.min, {}),
    ("np.max", np.max, {}),
    ("np.amax", np.amax, {}),
    ("np.amin", np.amin, {}),
    ("np.mean dtype=float32", np.mean, {"dtype": np.float32}),
    ("np.nansum", np.nansum, {}),
    ("np.average", np.average, {}),
    ("np.ptp", np.ptp, {}),
]


def numpy_case(function, extra, axis, keepdims, transposed):
    import dask.array as da

    X, _ = _scenario("snowflake")
    dense = X.toarray()
    with _dask():
        D = X.to_dask(20, persist=False)
        if transposed:
            D, dense = D.T, dense.T
        arguments = (
            dict(extra, axis=axis)
            if function is np.average
            else dict(extra, axis=axis, keepdims=keepdims)
        )
        try:
            got = function(D, **arguments)
            got = got.compute() if isinstance(got, da.Array) else got
        except Exception as error:  # noqa: BLE001
            # a method that does not know NumPy's keywords fails inside NumPy: not a refusal
            clear = (
                isinstance(error, TypeError)
                and "DaskNormalizedMatrix" in str(error)
                and "unexpected keyword argument" not in str(error)
            )
            if clear:
                return REFUSED, str(error)
            return CRASH if not isinstance(
                error, EXPECTED
            ) else UNHELPFUL, f"{type(error).__name__}: {error}"
    expected = function(dense, **arguments)
    same = (
        np.shape(got) == np.shape(expected)
        and np.allclose(got, expected)
        and np.asarray(got).dtype == np.asarray(expected).dtype
    )
    return (
        (SAME, "")
        if same
        else (SILENT, f"{np.shape(got)} {np.asarray(got).dtype} vs {np.shape(expected)}")
    )


def out_case(axis, transposed):
    X, _ = _scenario("dense")
    dense = X.toarray()
    with _dask():
        D = X.to_dask(20, persist=False)
        if transposed:
            D, dense = D.T, dense.T
        out = np.empty(np.sum(dense, axis=axis).shape)
        lazy = (axis == 1) != transposed
        if lazy:  # along the rows: a lazy Dask array, which out= cannot take
            return _refused(lambda: np.sum(D, axis=axis, out=out), ["out="], (TypeError,))
        result = np.sum(D, axis=axis, out=out)
    written = result is out and np.allclose(out, dense.sum(axis=axis))
    return (SAME, "") if written else (SILENT, "out= not written")


def dask_cases(seeds):
    yield from parity_cases(seeds)
    X, _ = _scenario("dense")
    for chunks in TO_DASK_CHUNKS:
        yield (
            "dask: chunks= and persist= arguments",
            f"to_dask(chunks={chunks!r})",
            lambda c=chunks: _refused(lambda: X.to_dask(c), ["chunks"]),
        )
    for chunks in TO_DASK_VALID:
        yield (
            "dask: chunks= and persist= arguments",
            f"to_dask(chunks={chunks!r})",
            lambda c=chunks: _same_matrix(X.to_dask(c, persist=False), X),
        )
    for chunks in PARQUET_CHUNKS:
        yield (
            "dask: chunks= and persist= arguments",
            f"from_parquet(chunks={chunks!r})",
            lambda c=chunks: parquet_chunks_case(c, False),
        )
    for chunks in PARQUET_VALID:
        yield (
            "dask: chunks= and persist= arguments",
            f"from_parquet(chunks={chunks!r})",
            lambda c=chunks: parquet_chunks_case(c, True),
        )
    for persist in PERSIST_TO_DASK:
        yield (
            "dask: chunks= and persist= arguments",
            f"to_dask(persist={persist!r})",
            lambda p=persist: _refused(lambda: X.to_dask(10, persist=p), ["persist"]),
        )
    for persist in PERSIST_TABLE:
        yield (
            "dask: chunks= and persist= arguments",
            f"ChunkedTable.to_matrix(persist={persist!r})",
            lambda p=persist: persist_table_case(p),
        )
    for name in ("dense", "onehot", "snowflake"):
        for chunks in (1, 2, 3, 5, 7, 13, 32, 48, 64, 96, 97, 128):
            yield (
                "dask: compute() at every chunk size",
                f"{name}, chunks={chunks}",
                lambda n=name, c=chunks: compute_case(n, c),
            )
    for label, function, extra in NUMPY_FUNCTIONS:
        for axis in (None, 0, 1):
            for keepdims in (False, True):
                for transposed in (False, True):
                    on = " on D.T" if transposed else ""
                    yield (
                        "dask: NumPy functions on a Dask matrix",
                        f"{label}(axis={axis}, keepdims={keepdims}){on}",
                        lambda f=function, e=extra, a=axis, k=keepdims, t=transposed: numpy_case(
                            f, e, a, k, t
                        ),
                    )
    for axis in (0, 1):
        for transposed in (False, True):
            on = " on D.T" if transposed else ""
            yield (
                "dask: NumPy functions on a Dask matrix",
                f"np.sum(axis={axis}, out=){on}",
                lambda a=axis, t=transposed: out_case(a, t),
            )


# ----------------------------------------------------------- files in hostile hands (issue 43)
def _matrix(dense=True, scale=1.0, parts=2):
    import scipy.sparse as sp

    from ilargi import NormalizedMatrix

    fact = np.arange(8.0).reshape(4, 2) * scale
    fact = fact if dense else sp.csr_array(fact)
    if parts == 1:
        return NormalizedMatrix.from_parts([fact], [None], [[0, 1]], (4, 2))
    return NormalizedMatrix.from_parts(
        [fact, sp.csr_array(np.arange(6.0).reshape(3, 2) + 1)],
        [None, np.array([2, 0, -1, 1])],
        [[0, 1], [2, 3]],
        (4, 4),
        names=["fact", "dim"],
    )


def _snapshot(root, folder):
    """Every file outside ``folder`` under ``root``, with its bytes: what a save must not touch."""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            path = os.path.join(d, f)
            if not path.startswith(str(folder) + os.sep):
                with open(path, "rb") as file:
                    out[path] = file.read()
    return out


def linked_member_case(member, inside):
    from ilargi import NormalizedMatrix

    with tempfile.TemporaryDirectory() as root:
        folder = Path(root) / "saved"
        T = _matrix()
        T.save(folder, sources=True)
        target = (folder / "data" if inside else Path(root)) / f"moved-{member}"
        target.parent.mkdir(exist_ok=True)
        os.replace(folder / member, target)
        os.symlink(target, folder / member)
        try:
            loaded = NormalizedMatrix.load(folder).toarray()
        except Exception as error:  # noqa: BLE001
            if inside:
                return CRASH, f"a link inside refused: {type(error).__name__}: {error}"
            clear = isinstance(error, ValueError) and member in str(error)
            return (
                (REFUSED, str(error)) if clear else (UNHELPFUL, f"{type(error).__name__}: {error}")
            )
        if not inside:
            return SECURITY, f"read {member} through a link leading outside the folder"
        return (SAME, "") if np.array_equal(loaded, T.toarray()) else (SILENT, "another matrix")


def table_link_case(which):
    with tempfile.TemporaryDirectory() as root:
        folder, outside = Path(root) / "saved", Path(root) / "elsewhere"
        Table(pd.DataFrame({"k": [1, 2]}), name="t").save(folder, sources=True)
        if which == "sources folder":
            os.replace(folder / "sources", outside)
            os.symlink(outside, folder / "sources")
        elif which == "source file":
            outside.mkdir()
            os.replace(folder / "sources" / "t.parquet", outside / "t.parquet")
            os.symlink(outside / "t.parquet", folder / "sources" / "t.parquet")
        else:  # an absolute path in metadata.json to a readable, valid file of the same shape
            pd.DataFrame({"k": [7, 8]}).to_parquet(Path(root) / "private.parquet")
            header = json.loads((folder / "metadata.json").read_text())
            header["extra"]["sources"][0]["path"] = str(Path(root) / "private.parquet")
            (folder / "metadata.json").write_text(json.dumps(header))
        try:
            Table.load(folder).to_pandas()
        except Exception as error:  # noqa: BLE001
            clear = isinstance(error, ValueError) and "'t'" in str(error)
            return (
                (REFUSED, str(error)) if clear else (UNHELPFUL, f"{type(error).__name__}: {error}")
            )
        return SECURITY, f"read a source outside the folder ({which})"


def save_through_link_case(saver, link):
    with tempfile.TemporaryDirectory() as root:
        folder, outside = Path(root) / "saved", Path(root) / "outside"
        folder.mkdir()
        outside.mkdir()
        (outside / "keep.txt").write_text("someone else's")
        target = outside if link == "sources" else outside / "target"
        if link != "sources":
            target.write_text("someone else's")
        os.symlink(target, folder / link)
        before = _snapshot(root, folder)
        try:
            if saver == "Table":
                table = Table(pd.DataFrame({"k": [1, 2], "x": [0.5, 1.5]}), name="t")
                table.save(folder, sources=True)
            else:
                _matrix().save(folder, sources=True)
            result = SAME, ""
        except Exception as error:  # noqa: BLE001
            clear = isinstance(error, ValueError) and link in str(error)
            result = (
                (REFUSED, str(error)) if clear else (UNHELPFUL, f"{type(error).__name__}: {error}")
            )
        after = _snapshot(root, folder)
        if after != before:
            changed = sorted(
                set(after) ^ set(before) | {p for p in after if before.get(p) != after[p]}
            )
            return SECURITY, f"wrote outside the folder: {changed}"
        return result


STALE_SEQUENCES = [
    [(True, 2, True), (False, 2, True)],
    [(False, 2, True), (True, 2, True)],
    [(True, 2, True), (True, 1, True)],
    [(True, 2, True), (True, 2, False)],
    [(True, 1, True), (False, 2, True), (True, 2, True)],
    [(True, 2, False), (True, 1, True)],
    [(False, 2, True), (False, 1, False), (True, 2, True)],
]


def stale_case(sequence):
    import scipy.sparse as sp

    from ilargi import NormalizedMatrix

    with tempfile.TemporaryDirectory() as root:
        folder = Path(root) / "saved"
        for step, (dense, parts, with_sources) in enumerate(sequence):
            T = _matrix(dense, step + 1.0, parts)
            T.save(folder, sources=with_sources)
        expected = {"metadata.json", "indices.npz"}
        if with_sources:
            expected |= {
                f"source_{p}.{'npz' if sp.issparse(part.source) else 'npy'}"
                for p, part in enumerate(T.parts)
            }
        try:
            given = None if with_sources else [p.source for p in T.parts]
            loaded = NormalizedMatrix.load(folder, given).toarray()
        except Exception as error:  # noqa: BLE001
            return CRASH, f"{type(error).__name__}: {error}"
        if not np.array_equal(loaded, T.toarray()):
            return SILENT, "loaded an earlier save's member"
        left = set(os.listdir(folder)) - expected
        return (SILENT, f"stale members {sorted(left)}") if left else (SAME, "")


def concurrent_case(seed):
    import threading

    from ilargi import NormalizedMatrix

    with tempfile.TemporaryDirectory() as root:
        folder = Path(root) / "saved"
        matrices = [_matrix(True, 1.0 + seed), _matrix(False, 3.0 + seed)]
        expected = [T.toarray() for T in matrices]
        matrices[0].save(folder, sources=True)
        stop, mixed, loads, errors = threading.Event(), [], [], []

        def save(T):
            try:
                for _ in range(8):
                    T.save(folder, sources=True)
            except Exception as error:  # noqa: BLE001 -- a save that failed is the finding
                errors.append(f"{type(error).__name__}: {error}")

        def load():
            while not stop.is_set():
                try:
                    got = NormalizedMatrix.load(folder).toarray()
                except (FileNotFoundError, ValueError):
                    continue
                loads.append(1)
                if not any(np.array_equal(got, e) for e in expected):
                    mixed.append(got)

        threads = [threading.Thread(target=save, args=(T,)) for T in matrices]
        reader = threading.Thread(target=load)
        reader.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stop.set()
        reader.join()
        if errors:
            return CRASH, f"a save failed beside another: {errors[0]}"
        final = NormalizedMatrix.load(folder).toarray()
        if mixed or not any(np.array_equal(final, e) for e in expected):
            return SILENT, f"a load mixed two saves ({len(mixed)} of {len(loads)})"
        left = sorted(p.name for p in Path(root).iterdir())
        return (SAME, "") if left == ["saved"] else (SILENT, f"left behind: {left}")


def disk_cache_case(which):
    import pickle

    from ilargi.scaleout import cache
    from ilargi.scaleout.pieces import Piece

    with tempfile.TemporaryDirectory() as root:
        if which == "modes":
            with tempfile.TemporaryDirectory() as data:
                path, dim = _fact_file(data)
                import dask

                with dask.config.set({"temporary-directory": str(Path(root) / "scratch")}), _dask():
                    D, y = (
                        Table.from_parquet(path, chunks=10)
                        .merge(dim, on="k")
                        .to_matrix(columns=["v"], target="x", persist="disk")
                    )
                    D.T @ y
                (folder,) = (Path(root) / "scratch").iterdir()
                modes = {oct(f.stat().st_mode & 0o777) for f in folder.iterdir()}
                names = sorted(f.suffix for f in folder.iterdir())
            if folder.stat().st_mode & 0o077 or modes != {"0o600"}:
                return SECURITY, f"cache folder {oct(folder.stat().st_mode & 0o777)}, files {modes}"
            return (SAME, "") if set(names) == {".npz"} else (SECURITY, f"files {names}")
        folder = cache.new_folder(root)
        path = os.path.join(folder, "0.npz")
        if which == "planted pickle":
            marker = Path(root) / "ran"
            with open(path, "wb") as file:
                file.write(pickle.dumps(_Payload(str(marker))))
            os.chmod(path, 0o600)
            found = cache.read(path, [0])
            if marker.exists():
                return SECURITY, "a pickle in the cache ran code"
            return (SAME, "") if found is None else (SILENT, "a foreign file read as a partition")
        if which == "shared folder":
            shared = Path(root) / "shared"
            shared.mkdir()
            os.chmod(shared, 0o777)
            return refusal(
                lambda: cache.ensure_private(str(shared)), ["shared"], (PermissionError,)
            )
        cache.write(path, Piece(2, [np.ones((2, 1))]), None)
        if which == "file open to others":
            os.chmod(path, 0o666)
        else:  # a link in a partition's place
            os.unlink(path)
            os.symlink(Path(root) / "elsewhere", path)
        return refusal(lambda: cache.read(path, [0]), ["0.npz"], (PermissionError,))


class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


LENGTHENED = [("rows_1", 4), ("cols_0", 2), ("cols_1", 2), ("scale", 4), ("shift", 4)]


def lengthened_case(name, entries):
    import tracemalloc

    from ilargi import NormalizedMatrix

    with tempfile.TemporaryDirectory() as root:
        folder = Path(root)
        _saved_matrix(folder, affine=True)
        with np.load(folder / "indices.npz") as stored:
            arrays = {key: stored[key] for key in stored.files}
        arrays[name] = np.zeros(entries, dtype=arrays[name].dtype)
        np.savez_compressed(folder / "indices.npz", **arrays)
        size = (folder / "indices.npz").stat().st_size
        tracemalloc.start()
        try:
            result = refusal(lambda: NormalizedMatrix.load(folder), ["indices.npz"])
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        if peak > max(8 * size, 8 * 2**20):
            return RESOURCE, f"{peak / 2**20:.0f} MiB read to refuse a {size / 2**10:.0f} KiB file"
        return result


def promised_source_case(which):
    import tracemalloc
    import zipfile

    from ilargi import NormalizedMatrix

    with tempfile.TemporaryDirectory() as root:
        folder = Path(root)
        _saved_matrix(folder)
        if which == "dense header of 10^9 rows":
            with open(folder / "source_0.npy", "wb") as file:
                np.lib.format.write_array_header_1_0(
                    file, {"descr": "<f8", "fortran_order": False, "shape": (10**9, 2)}
                )
            member = "source_0.npy"
        elif which == "dense data cut":
            data = (folder / "source_0.npy").read_bytes()
            (folder / "source_0.npy").write_bytes(data[:-8])
            member = "source_0.npy"
        else:  # a sparse source whose row pointers promise 10^8 values
            with (
                zipfile.ZipFile(folder / "source_1.npz", "a") as archive,
                warnings.catch_warnings(),
            ):
                warnings.simplefilter("ignore")  # a second member of the same name, on purpose
                with archive.open("indptr.npy", "w") as stream:
                    np.lib.format.write_array(stream, np.array([0, 1, 2, 10**8]))
            member = "source_1.npz"
        tracemalloc.start()
        try:
            result = refusal(lambda: NormalizedMatrix.load(folder), [member])
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        return (RESOURCE, f"{peak / 2**20:.0f} MiB read") if peak > 8 * 2**20 else result


def hostile_file_cases():
    for member in ("metadata.json", "indices.npz", "source_0.npy", "source_1.npz"):
        for inside in (False, True):
            yield (
                "files: links, absolute paths and saves through links",
                f"{member} linked {'inside' if inside else 'outside'} the folder",
                lambda m=member, i=inside: linked_member_case(m, i),
            )
    for which in ("sources folder", "source file", "absolute path"):
        yield (
            "files: links, absolute paths and saves through links",
            f"Table: {which}",
            lambda w=which: table_link_case(w),
        )
    for saver in ("Table", "NormalizedMatrix"):
        for link in ("sources", "metadata.json", "indices.npz", "source_0.npy"):
            yield (
                "files: links, absolute paths and saves through links",
                f"{saver}.save through a linked {link}",
                lambda s=saver, k=link: save_through_link_case(s, k),
            )
    for number, sequence in enumerate(STALE_SEQUENCES):
        yield (
            "files: stale members and racing saves",
            f"saves {sequence}",
            lambda q=sequence: stale_case(q),
        )
    for seed in range(4):
        yield (
            "files: stale members and racing saves",
            f"two savers and a reader, run {seed}",
            lambda s=seed: concurrent_case(s),
        )
    for which in (
        "modes",
        "planted pickle",
        "shared folder",
        "file open to others",
        "link in its place",
    ):
        yield "files: persist='disk' cache", which, lambda w=which: disk_cache_case(w)
    for name, _ in LENGTHENED:
        for entries in (10**6, 4 * 10**6):
            yield (
                "files: arrays read header first",
                f"{name} of {entries} entries",
                lambda n=name, e=entries: lengthened_case(n, e),
            )
    for which in ("dense header of 10^9 rows", "dense data cut", "sparse row pointers of 10^8"):
        yield "files: arrays read header first", which, lambda w=which: promised_source_case(w)


# ------------------------------------------------------------------------------------------- report
def run(cases):
    counts = collections.OrderedDict()
    findings, leeways = [], collections.Counter()
    for group, name, case in cases:
        try:
            kind, detail = case()
        except Exception as error:  # noqa: BLE001 -- a failure of the case itself counts as a crash
            kind, detail = CRASH, f"{type(error).__name__}: {error} {traceback.format_exc(limit=1)}"
        counts.setdefault(group, collections.Counter())[kind] += 1
        if kind == SAME and detail:
            leeways[detail] += 1
        if kind not in (SAME, REFUSED, PANDAS_FAILS):
            findings.append((group, name, kind, detail.replace("\n", " ")[:300]))
    return counts, findings, leeways


def table(counts, before=None):
    header = ["group", "cases", *(LABELS[kind] for kind in CLASSES)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    totals = collections.Counter()
    for group, counter in list(counts.items()) + [("**total**", None)]:
        counter = totals if counter is None else counter
        if group != "**total**":
            totals.update(counter)
        old = (
            None
            if before is None
            else (
                before.get(group)
                if group != "**total**"
                else sum((collections.Counter(v) for v in before.values()), collections.Counter())
            )
        )
        cells = []
        for kind in CLASSES:
            now = counter.get(kind, 0)
            cells.append(f"{old.get(kind, 0)} → {now}" if old is not None else str(now))
        lines.append(f"| {group} | {sum(counter.values())} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", help="also write the counts and findings as JSON")
    parser.add_argument("--before", help="JSON of an earlier run: show 'before → now' counts")
    parser.add_argument("--merges", type=int, default=300)
    parser.add_argument("--concats", type=int, default=60)
    parser.add_argument("--chains", type=int, default=60)
    parser.add_argument(
        "--parity", type=int, default=200, help="chunked joins of the Dask parity fuzz"
    )
    parser.add_argument("--only", help="comma-separated group prefixes to run (e.g. dask,files)")
    args = parser.parse_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as root:
        cases = [
            *key_cases(),
            *fuzz_cases(args.merges, args.concats, args.chains),
            *file_cases(),
            *matrix_cases(),
            *command_cases(root),
            *dask_cases(args.parity),
            *hostile_file_cases(),
        ]
        if args.only:
            prefixes = tuple(p.strip() for p in args.only.split(","))
            cases = [case for case in cases if case[0].startswith(prefixes)]
        counts, findings, leeways = run(cases)
    before = json.loads(Path(args.before).read_text())["counts"] if args.before else None
    import ilargi

    print(
        f"ilargi from {Path(ilargi.__file__).parent}, pandas {pd.__version__}: {len(cases)} cases in "
        f"{time.perf_counter() - started:.0f} s\n"
    )
    print(table(counts, before))
    if leeways:
        print(
            "\n'same' includes, by the leeways documented in Table.merge: "
            + "; ".join(f"{count} {what}" for what, count in leeways.items())
        )
    if findings:
        print("\nfindings (not same as reference, not a clear refusal):")
        for group, name, kind, detail in findings:
            print(f"- [{group}] {name}: {kind}: {detail}")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"counts": {g: dict(c) for g, c in counts.items()}, "findings": findings}, indent=1
            )
        )


if __name__ == "__main__":
    main()
