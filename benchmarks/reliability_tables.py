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
* crash -- an unexpected exception (IndexError, KeyError, a traceback from a command line).

The cases: the fuzz of ``tests/table/test_fuzz.py`` (random key dtypes, NULLs, every ``how``,
``validate``, ``sort``, suffixes; ``concat``; snowflake chains and unions), the hand-made key pairs of
``tests/table/test_keys.py``, and the file, ``to_matrix`` and command-line cases of this script.

    python benchmarks/reliability_tables.py                      # this checkout's ilargi
    python benchmarks/reliability_tables.py --json after.json
    (cd ../main && python ../wt/benchmarks/reliability_tables.py --json before.json)   # another checkout
    python benchmarks/reliability_tables.py --before before.json  # both columns side by side

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

from ilargi.table import Table  # noqa: E402

SAME, REFUSED, UNHELPFUL, SILENT, CRASH = fuzz.SAME, fuzz.REFUSED, fuzz.UNHELPFUL, fuzz.SILENT, fuzz.CRASH
PANDAS_FAILS = fuzz.PANDAS_FAILS
CLASSES = (SAME, REFUSED, PANDAS_FAILS, UNHELPFUL, SILENT, CRASH)
LABELS = {SAME: "same as reference", REFUSED: "refused, clear error", PANDAS_FAILS: "pandas bug, ilargi answers",
          UNHELPFUL: "unhelpful error", SILENT: "silent difference", CRASH: "crash"}
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
            yield "join keys pandas refuses", f"{case}, {how}", lambda l=left, r=right, h=how: fuzz.outcome(
                lambda: l.merge(r, left_on="when", right_on="day", how=h),
                lambda: Table(l, name="fact").merge(Table(r, name="cal"), left_on="when", right_on="day",
                                                    how=h).to_pandas(), ["when", "day"], ["when"])
    for case, (left_key, right_key) in keys.ACCEPTED.items():
        for how in keys.HOWS:
            for sort in (False, True):
                left = pd.DataFrame({"k": left_key, "x": range(3)})
                right = pd.DataFrame({"k": right_key, "y": [10, 20, 30]})
                order_free = case == "categoricals with other categories" and (how == "outer" or sort)
                yield "join keys pandas accepts", f"{case}, {how}, sort={sort}", \
                    lambda l=left, r=right, h=how, s=sort, o=order_free: fuzz.outcome(
                        lambda: l.merge(r, on="k", how=h, sort=s),
                        lambda: Table(l, name="l").merge(Table(r, name="r"), on="k", how=h,
                                                         **({"sort": True} if s else {})).to_pandas(),
                        ["k"], ["k"], o)


def fuzz_cases(merges, concats, chains):
    for seed in range(merges):
        yield "fuzz: merge", f"seed {seed}", lambda s=seed: fuzz.run_merge_case(s)
    for seed in range(concats):
        yield "fuzz: concat", f"seed {seed}", lambda s=seed: fuzz.run_concat_case(s)
    for seed in range(chains):
        yield "fuzz: chain / union then merge", f"seed {seed}", lambda s=seed: fuzz.run_chain_case(s)


# ------------------------------------------------------------------------------------------- files
# "{root}": the case's temporary folder, so that an absolute name that escapes lands there, not in /etc
NAMES = ["../../x", "../../../tmp/evil", "{root}/etc/passwd", "{root}/abs", "a/b", "a\\b", "", ".", "..",
         "x\0y", "CON", "nul", "Sales", "sales", "spaces and ünïcode", "name.parquet", "~/home", "C:\\windows\\x"]


def name_case(name):
    with tempfile.TemporaryDirectory() as root:
        name = name.replace("{root}", root)
        folder = Path(root) / "deep" / "folder"
        fact = pd.DataFrame({"k": [1, 2, 2], "a": [0.5, 1.5, 2.5]})
        table = Table(fact, name=name).merge(Table(pd.DataFrame({"k": [1, 2], "b": ["x", "y"]}), name=name),
                                             on="k", how="left")
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


QUERIES = ["SELECT * FROM fact; DROP TABLE fact", "COPY (SELECT 42 AS answer) TO '{target}' (FORMAT csv)",
           "SELECT * FROM fact; COPY (SELECT 42) TO '{target}'", "CREATE TABLE hacked AS SELECT 1",
           "fact; DROP TABLE fact", "SELECT * FROM fact UNION ALL SELECT * FROM fact",
           "SELECT * FROM read_csv('{target}')", "ATTACH '{target}.db' AS other"]


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
        ran = target.exists() or Path(f"{target}.db").exists() or \
            connection.execute("SELECT count(*) FROM duckdb_tables()").fetchall() != tables
        try:
            connection.execute("SELECT count(*) FROM fact").fetchall()
        except Exception:  # noqa: BLE001
            ran = True
        connection.close()
        return (SILENT, f"SQL from the file ran ({result[1]})") if ran else result


def _saved_matrix(folder, affine=False):
    from ilargi import NormalizedMatrix
    import scipy.sparse as sp
    T = NormalizedMatrix.from_parts([np.arange(8.0).reshape(4, 2), sp.csr_array(np.arange(6.0).reshape(3, 2) + 1)],
                                    [None, np.array([2, 0, -1, 1])], [[0, 1], [2, 3]], (4, 4), names=["fact", "dim"])
    ((T - 1.0) * 2.0 if affine else T).save(folder, sources=True)


ARRAY_EDITS = [
    ("rows shortened", "rows_1", lambda a: a[:-1]), ("rows lengthened", "rows_1", lambda a: np.append(a, 0)),
    ("rows out of range", "rows_1", lambda a: np.where(a >= 0, 7, -1)), ("rows below -1", "rows_1", lambda a: a - 5),
    ("rows as floats", "rows_1", lambda a: a.astype(float)), ("rows 2-D", "rows_1", lambda a: a[None, :]),
    ("rows as strings", "rows_1", lambda a: a.astype(str)),
    ("cols not injective", "cols_0", lambda a: np.zeros_like(a)), ("cols out of range", "cols_0", lambda a: a + 10),
    ("cols shortened", "cols_1", lambda a: a[:1]), ("cols as floats", "cols_1", lambda a: a.astype(float)),
    ("cols negative", "cols_1", lambda a: -a), ("array missing", "rows_1", None),
    ("scale shortened", "scale", lambda a: a[:-1]), ("shift lengthened", "shift", lambda a: np.append(a, 1.0)),
    ("scale with inf", "scale", lambda a: np.where(np.arange(len(a)) == 1, np.inf, a)),
    ("shift with NaN", "shift", lambda a: np.full_like(a, np.nan)), ("scale as ints", "scale", lambda a: a.astype(int)),
]
HEADER_EDITS = [
    ("parts missing", lambda h: h.pop("parts")), ("parts empty", lambda h: h.update(parts=[])),
    ("shape of one number", lambda h: h.update(shape=[4])), ("shape negative", lambda h: h.update(shape=[4, -1])),
    ("shape as text", lambda h: h.update(shape="4x4")),
    ("source_shape as text", lambda h: h["parts"][1].update(source_shape="3x2")),
    ("identity as text", lambda h: h["parts"][1].update(identity="no")),
    ("name missing", lambda h: h["parts"][0].pop("name")),
    ("identity with other rows", lambda h: h["parts"][0].update(source_shape=[5, 2])),
    ("source rows shrunk", lambda h: h["parts"][1].update(source_shape=[2, 2])),
    ("columns too few", lambda h: h.update(columns=["a"])), ("extra not an object", lambda h: h.update(extra=[1])),
    ("format changed", lambda h: h.update(format="other")), ("version changed", lambda h: h.update(version=99)),
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
        return refusal(lambda: NormalizedMatrix.load(folder).toarray(), ["metadata.json", "indices.npz"])


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
    Table(fact, name="fact").merge(Table(dim, name="dim"), on="k", how="outer").save(folder, sources=True)


LAYOUT_EDITS = [
    ("labels too few", lambda e: e.update(labels=["k"])), ("slots missing", lambda e: e.pop("slots")),
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
        return refusal(lambda: Table.load(folder).to_pandas(), ["metadata.json", "source 'fact'", "such.parquet"])


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
        yield "files: edited index/affine arrays", label, lambda n=name, e=edit, a=affine: array_case(n, e, a)
    for label, name, edit in [("rows shortened", "rows_1", lambda a: a[:-1]),
                              ("rows lengthened", "rows_1", lambda a: np.append(a, 0)),
                              ("rows as floats", "rows_1", lambda a: a.astype(float)),
                              ("rows out of range", "rows_1", lambda a: np.where(a >= 0, 7, -1)),
                              ("two parts on one cell", "rows_2", lambda a: np.zeros_like(a))]:
        yield "files: edited index/affine arrays", f"Table: {label}", lambda n=name, e=edit: table_array_case(n, e)
    for label, edit in HEADER_EDITS:
        yield "files: edited JSON fields", label, lambda e=edit: header_case(e)
    for label, edit in LAYOUT_EDITS:
        yield "files: edited JSON fields", f"Table: {label}", lambda e=edit: layout_case(e)
    for file_name, keep in [("metadata.json", 50), ("metadata.json", None), ("indices.npz", 60),
                            ("indices.npz", None), ("source_0.npy", 70), ("source_1.npz", 30)]:
        yield "files: truncated or foreign", f"{file_name} {'cut' if keep else 'garbage'}", \
            lambda f=file_name, k=keep: truncated_case(f, k)
    for which in ("metadata.json", "indices.npz", "source"):
        yield "files: truncated or foreign", f"Table: {which} cut", lambda w=which: truncated_table_case(w)


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
                yield "to_matrix: infinite values", f"{dtype} {value} {how}", \
                    lambda d=dtype, v=value, h=how: infinite_case(d, v, h)


# ---------------------------------------------------------------------------------------- commands
SMALL = ["--rows", "2000", "--tuple-ratio", "10"]
CLI_VALUES = [["--rows", "0"], ["--rows", "-5"], ["--rows", "abc"], ["--max-iter", "-3"], ["--max-iter", "0"],
              ["--blas-threads", "-2"], ["--tuple-ratio", "0"], ["--tuple-ratio", "-1"], ["--tuple-ratio", "inf"],
              ["--tuple-ratio", "nan"], ["--feature-ratio", "0"], ["--feature-ratio", "nan"], ["--tpch", "0"],
              ["--tpch", "-1"], ["--seed", "-1"], ["--hamlet", "/no/such/folder"], ["--santoku", "/no/such/folder"],
              ["--hamlet", "{empty}"], ["--santoku", "{empty}"], ["--hamlet", "{bad_hamlet}"]]
CALIBRATION = [["train", "{missing_csv}", "--out", "{out}"], ["train", "{bad_csv}", "--out", "{out}"],
               ["train", "{text_csv}", "--out", "{out}"], ["train", "{empty_csv}", "--out", "{out}"],
               ["sweep", "--out", "{out}/x.csv", "--budget-seconds", "0"],
               ["sweep", "--out", "{out}/x.csv", "--blas-threads", "-2"],
               ["sweep", "--out", "{out}/x.csv", "--max-scenarios", "0"],
               ["calibrate", "--budget-seconds", "-5"], ["calibrate", "--budget-seconds", "nan"]]


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
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
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
    paths = {"empty": empty, "bad_hamlet": bad_hamlet, "missing_csv": Path(root) / "missing.csv",
             "bad_csv": Path(root) / "bad.csv", "text_csv": Path(root) / "text.csv",
             "empty_csv": Path(root) / "empty.csv", "out": Path(root) / "out"}
    for args in CLI_VALUES:
        args = [a.format(**paths) for a in args]
        extra = [] if args[0] in ("--rows", "--tuple-ratio", "--hamlet", "--santoku", "--tpch") else SMALL
        needles = [args[0], str(args[1])]
        yield "command line: ilargi", " ".join(args).replace(str(root), "…"), \
            lambda a=args + extra, n=needles: command_case(cli, a, n)
    for args in CALIBRATION:
        args = [a.format(**paths) for a in args]
        needles = [a for a in args if a.startswith("--") or a.endswith(".csv")]
        yield "command line: python -m ilargi.calibration", " ".join(args).replace(str(root), "…"), \
            lambda a=args, n=needles: command_case(calibration, a, n)


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
        old = None if before is None else (before.get(group) if group != "**total**" else
                                           sum((collections.Counter(v) for v in before.values()),
                                               collections.Counter()))
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
    args = parser.parse_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as root:
        cases = [*key_cases(), *fuzz_cases(args.merges, args.concats, args.chains), *file_cases(),
                 *matrix_cases(), *command_cases(root)]
        counts, findings, leeways = run(cases)
    before = json.loads(Path(args.before).read_text())["counts"] if args.before else None
    import ilargi
    print(f"ilargi from {Path(ilargi.__file__).parent}, pandas {pd.__version__}: {len(cases)} cases in "
          f"{time.perf_counter() - started:.0f} s\n")
    print(table(counts, before))
    if leeways:
        print("\n'same' includes, by the leeways documented in Table.merge: "
              + "; ".join(f"{count} {what}" for what, count in leeways.items()))
    if findings:
        print("\nfindings (not same as reference, not a clear refusal):")
        for group, name, kind, detail in findings:
            print(f"- [{group}] {name}: {kind}: {detail}")
    if args.json:
        Path(args.json).write_text(json.dumps({"counts": {g: dict(c) for g, c in counts.items()},
                                               "findings": findings}, indent=1))


if __name__ == "__main__":
    main()
