"""Tables straight from Parquet: ``Table.from_parquet(..., chunks=...)`` read by the workers, merged
with broadcast dimensions and with a big one read by key range, equal to the in-memory
``Table.to_matrix`` of the same join; estimators on it; the checks and refusals."""

import os

import dask.array as da
import numpy as np
import pandas as pd
import pytest

from ilargi import Table
from ilargi.models import LogisticRegression, Ridge
from ilargi.scaleout import ChunkedTable, DaskNormalizedMatrix
from tests.scaleout.conftest import FEATURES, assert_close, frames


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The scenario's tables as Parquet files (the fact in order of its order key, as TPC-H's
    lineitem; small row groups), and the frames as read back."""
    folder = tmp_path_factory.mktemp("parquet")
    fact, orders, customers, products = frames(n=403, seed=3)
    fact = fact.sort_values("order", kind="stable").reset_index(drop=True)
    fact.to_parquet(folder / "fact.parquet", row_group_size=50)
    parts = folder / "fact_parts"
    parts.mkdir()
    for i, start in enumerate(range(0, len(fact), 150)):
        fact.iloc[start : start + 150].to_parquet(parts / f"part{i}.parquet", row_group_size=40)
    orders.to_parquet(folder / "orders.parquet", row_group_size=16)
    customers.to_parquet(folder / "customers.parquet")
    products.to_parquet(folder / "products.parquet")
    read = {
        name: pd.read_parquet(folder / f"{name}.parquet")
        for name in ("fact", "orders", "customers", "products")
    }
    return folder, read


def _in_memory(read, how_products="left"):
    table = Table(read["fact"], name="fact").merge(
        Table(read["orders"], name="orders"), left_on="order", right_on="order_id"
    )
    table = table.merge(
        Table(read["customers"], name="customers"), left_on="customer", right_on="customer_id"
    )
    return table.merge(
        Table(read["products"], name="products"),
        left_on="product",
        right_on="product_id",
        how=how_products,
    )


def _chunked(folder, read, chunks, orders_by_range=True, how_products="left", fact="fact.parquet"):
    table = Table.from_parquet(folder / fact, name="fact", chunks=chunks)
    orders = (
        Table.from_parquet(folder / "orders.parquet", chunks="row_groups")
        if orders_by_range
        else Table(read["orders"], name="orders")
    )
    table = table.merge(orders, left_on="order", right_on="order_id")
    table = table.merge(
        Table(read["customers"], name="customers"), left_on="customer", right_on="customer_id"
    )
    return table.merge(read["products"], left_on="product", right_on="product_id", how=how_products)


def _check(X, y, D, yd):
    assert isinstance(D, DaskNormalizedMatrix) and isinstance(yd, da.Array)
    assert D.shape == X.shape and D.columns == X.columns
    assert yd.chunks[0] == D.chunks[0]
    assert_close(yd.compute(), y, what="y")
    w = np.random.default_rng(0).normal(size=X.shape[1])
    assert_close((D @ w).compute(), X @ w, what="T·w")
    assert_close(D.T @ y, X.T @ y, what="Tᵀ·y")
    assert_close(D.crossprod(), X.crossprod(), what="TᵀT")
    assert_close(D.var(axis=0), X.var(axis=0), what="var")
    assert_close(D.compute().toarray(), X.toarray(), what="compute()")


@pytest.mark.parametrize("chunks", [60, "row_groups", "2KiB"])
@pytest.mark.parametrize("orders_by_range", [True, False], ids=["range", "broadcast"])
def test_snowflake_from_parquet(client, files, chunks, orders_by_range):
    folder, read = files
    X, y = _in_memory(read).to_matrix(columns=FEATURES, target="y")
    table = _chunked(folder, read, chunks, orders_by_range)
    assert isinstance(table, ChunkedTable) and table.columns == _in_memory(read).columns
    D, yd = table.to_matrix(columns=FEATURES, target="y")
    _check(X, y, D, yd)
    if chunks == 60:
        assert D.chunks[0] == (60,) * 6 + (43,)


def test_inner_join_drops_rows_and_files(client, files):
    folder, read = files
    X, y = _in_memory(read, "inner").to_matrix(columns=FEATURES, target="y")
    table = _chunked(folder, read, 100, how_products="inner", fact="fact_parts")
    assert "? rows" in repr(table)
    assert len(table) == X.shape[0] < len(read["fact"])
    D, yd = table.to_matrix(columns=FEATURES, target="y")
    assert D.npartitions == 6  # files of 150, 150 and 103 rows, 100 rows each at most
    _check(X, y, D, yd)


def test_targets_and_encodings(client, files):
    folder, read = files
    for target, columns, categorical in (
        ("balance", ["qty", "mode", "size"], "onehot"),
        ("segment", ["qty", "priority"], "ordinal"),
        ("size", None, "ordinal"),
    ):
        X, y = _in_memory(read).to_matrix(columns=columns, target=target, categorical=categorical)
        D, yd = _chunked(folder, read, 90).to_matrix(
            columns=columns, target=target, categorical=categorical
        )
        _check(
            X,
            y if target != "size" else np.nan_to_num(y),
            D,
            yd if target != "size" else da.nan_to_num(yd),
        )


def test_estimators_from_parquet(client, files):
    folder, read = files
    X, y = _in_memory(read).to_matrix(columns=FEATURES, target="y")
    for persist in (False, True):
        D, yd = _chunked(folder, read, 70).to_matrix(columns=FEATURES, target="y", persist=persist)
        assert D.persisted == persist
        model = Ridge(alpha=1.0).fit(D, yd)
        expected = Ridge(alpha=1.0, plan="factorized").fit(X, y)
        assert_close(model.coef_, expected.coef_, what="ridge coef")
        assert abs(model.score(D, yd) - expected.score(X, y)) < 1e-10
        labels = yd > float(np.median(y))
        model = LogisticRegression(solver="gd", max_iter=10).fit(D, labels)
        expected = LogisticRegression(solver="gd", max_iter=10, plan="factorized").fit(
            X, y > np.median(y)
        )
        assert_close(model.coef_, expected.coef_, what="logistic coef")


@pytest.mark.filterwarnings("ignore:lbfgs did not converge")
def test_persist_on_disk(client, files, tmp_path):
    """persist="disk": the first pass writes every partition, encoded, to Dask's temporary
    directory; later passes read those files, not Parquet (they still answer with the fact
    table gone), equal to the in-memory matrix; the files go with the matrix."""
    import gc
    import shutil

    import dask

    folder, read = files
    X, y = _in_memory(read).to_matrix(columns=FEATURES, target="y")
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    scratch = tmp_path / "scratch"
    with dask.config.set({"temporary-directory": str(scratch)}):
        D, yd = _chunked(copy, read, 70).to_matrix(columns=FEATURES, target="y", persist="disk")
    assert not D.persisted
    assert_close(D.T @ yd, X.T @ y, what="Tᵀ·y, first pass")
    (cache,) = scratch.iterdir()
    assert sorted(f.name for f in cache.iterdir()) == sorted(
        f"{k}.npz" for k in range(D.npartitions)
    )
    # private: nobody else may read the partitions or put a file among them
    assert cache.stat().st_mode & 0o777 == 0o700
    assert {f.stat().st_mode & 0o777 for f in cache.iterdir()} == {0o600}
    (copy / "fact.parquet").unlink()
    Z = (D - 1.0) * 2.0  # derived matrices share the files
    del D
    gc.collect()
    _check(X, y, (Z / 2.0) + 1.0, yd)
    labels = yd > float(np.median(y))
    model = LogisticRegression(solver="lbfgs", max_iter=10).fit(Z, labels)
    expected = LogisticRegression(solver="lbfgs", max_iter=10, plan="factorized").fit(
        (X - 1.0) * 2.0, y > np.median(y)
    )
    assert_close(model.coef_, expected.coef_, what="logistic coef")
    del Z, yd, labels, model
    gc.collect()
    assert not cache.exists()
    with pytest.raises(ValueError, match="persist="):
        _chunked(folder, read, 70).to_matrix(columns=FEATURES, persist="memory")


class _Payload:
    """Unpickling it would create the file ``marker``."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_disk_partitions_are_private_and_never_unpickled(tmp_path):
    """The cache of persist="disk" lives where other users may write (Dask's temporary directory):
    its folder and files must be private and ours, and what it reads is never a pickle."""
    import pickle

    from ilargi.scaleout import cache
    from ilargi.scaleout.pieces import Piece

    folder = cache.new_folder(str(tmp_path / "scratch"))
    assert os.stat(folder).st_mode & 0o777 == 0o700
    piece = Piece(3, [np.arange(6.0).reshape(3, 2)], {1: np.array([0, -1, 1])})
    path = os.path.join(folder, "0.npz")
    cache.write(path, piece, np.arange(3.0))
    assert os.stat(path).st_mode & 0o777 == 0o600
    back, y = cache.read(path, [0, 1])
    assert back.n == 3 and np.array_equal(back.rows[1], [0, -1, 1]) and np.array_equal(y, [0, 1, 2])
    marker = tmp_path / "ran"
    with open(path, "wb") as file:  # a pickle that runs code, in the partition's place
        pickle.dump(_Payload(str(marker)), file)
    assert cache.read(path, [0, 1]) is None and not marker.exists()  # read again from Parquet
    os.chmod(path, 0o644)
    with pytest.raises(PermissionError, match=r"0\.npz is not a private file of this user"):
        cache.read(path, [0, 1])
    os.unlink(path)
    os.symlink(tmp_path / "elsewhere.npz", path)
    with pytest.raises(PermissionError, match="cannot be opened safely"):
        cache.read(path, [0, 1])
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    with pytest.raises(PermissionError, match=r"shared is not a private folder of this user"):
        cache.ensure_private(str(shared))
    cache.ensure_private(str(tmp_path / "remote" / "new"))  # a worker elsewhere makes its own
    assert os.stat(tmp_path / "remote" / "new").st_mode & 0o777 == 0o700


def test_in_memory_table_with_chunks(client, files):
    _, read = files
    X, y = _in_memory(read).to_matrix(columns=FEATURES, target="y")
    D, yd = _in_memory(read).to_matrix(columns=FEATURES, target="y", chunks=128)
    assert D.chunks[0] == (128, 128, 128, 19)
    _check(X, y, D, yd)


def test_refusals(client, files, tmp_path):
    folder, read = files
    table = _chunked(folder, read, 100)
    with pytest.raises(NotImplementedError, match="missing"):
        table.to_matrix(columns=FEATURES, missing="indicator")
    with pytest.raises(NotImplementedError, match="read it without chunks"):
        table.to_binned(columns=FEATURES, target="y")
    with pytest.raises(ValueError, match="how="):
        Table.from_parquet(folder / "fact.parquet", chunks=50).merge(
            read["orders"], how="outer", left_on="order", right_on="order_id"
        )
    doubled = pd.concat([read["customers"], read["customers"]])
    base = Table.from_parquet(folder / "fact.parquet", chunks=50).merge(
        read["orders"], left_on="order", right_on="order_id"
    )
    with pytest.raises(pd.errors.MergeError, match="not unique"):
        base.merge(doubled, left_on="customer", right_on="customer_id").to_matrix(columns=["qty"])
    with pytest.raises(NotImplementedError, match="key range"):
        base.merge(
            Table.from_parquet(folder / "customers.parquet", chunks=10),
            left_on="customer",
            right_on="customer_id",
        )
    with pytest.raises(ValueError, match="both sides"):
        base.merge(read["orders"], left_on="order", right_on="order_id")
    bad = read["fact"].assign(
        price=np.where(np.arange(len(read["fact"])) == 5, np.inf, read["fact"]["price"])
    )
    bad.to_parquet(tmp_path / "bad.parquet")
    with pytest.raises(ValueError, match="infinite"):
        Table.from_parquet(tmp_path / "bad.parquet", chunks=100).to_matrix(columns=["price"])
    D, _ = Table.from_parquet(tmp_path / "bad.parquet", chunks=100).to_matrix(
        columns=["price"], allow_nonfinite=True
    )
    assert D.nonfinite() == (False, True)
    with pytest.raises(ValueError, match="chunks="):
        Table.from_parquet(folder / "fact.parquet", chunks="lots")
    for chunks, error, reason in [
        (1000.0, TypeError, r"chunks=1000.0 is a float"),
        (1.5, TypeError, r"chunks=1.5 is a float"),
        ("1000", ValueError, r"give chunks=1000 \(an int\)"),
        ("0B", ValueError, r"empty byte size"),
        ([100, 303], ValueError, r"chunks=\[100, 303\] is neither"),
    ]:
        with pytest.raises(error, match=reason):
            Table.from_parquet(folder / "fact.parquet", chunks=chunks)
    assert Table.from_parquet(folder / "fact.parquet", chunks="1kB").npartitions > 1
    # key types the in-memory merge refuses are refused alike, before any row is read
    with pytest.raises(
        ValueError,
        match=r"merge on int64 and str columns for key 'product'.*"
        r"right column 'product_id' of table 'right'",
    ):
        base.merge(
            read["products"].astype({"product_id": str}), left_on="product", right_on="product_id"
        )


def test_string_view_columns(tmp_path, client):
    """Arrow's string_view (tpchgen-cli writes every TPC-H string so) in a fact table read by the
    workers and in a broadcast dimension read from Parquet: the matrix of the same strings."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    fact = pd.DataFrame(
        {
            "k": [0, 1, 1, 2, 0, 2],
            "x": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
            "mode": ["air", "rail", "air", "ship", "rail", "air"],
        }
    )
    dim = pd.DataFrame({"k": [0, 1, 2], "segment": ["b", "a", "b"]})
    for frame, name in ((fact, "fact"), (dim, "dim")):
        table = pa.Table.from_pandas(frame, preserve_index=False)
        for position, field in enumerate(table.schema):
            if pa.types.is_string(field.type) or pa.types.is_large_string(field.type):
                table = table.set_column(
                    position, field.name, table.column(position).cast(pa.string_view())
                )
        pq.write_table(table, tmp_path / f"{name}.parquet", row_group_size=2)
    expected_X, expected_y = (
        Table(fact, name="fact")
        .merge(Table(dim, name="dim"), on="k")
        .to_matrix(columns=["mode", "segment"], target="x")
    )
    X, y = (
        Table.from_parquet(tmp_path / "fact.parquet", chunks=4)
        .merge(Table.from_parquet(tmp_path / "dim.parquet"), on="k")
        .to_matrix(columns=["mode", "segment"], target="x")
    )
    assert X.columns == expected_X.columns
    assert_close(X.compute().toarray(), expected_X.toarray(), what="X")
    assert_close(y.compute(), expected_y, what="y")


@pytest.mark.parametrize("index", ["range", "positions", "named"])
def test_a_file_written_with_a_pandas_index_reads_by_position(tmp_path, client, index):
    """A fact file written from a filtered or indexed DataFrame, read by the workers: rows in the
    file's order and a named index a column, as the in-memory table reads it."""
    fact = pd.DataFrame({"k": [0, 1, 1, 2, 0, 2], "x": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]})
    written = {
        "range": fact.iloc[1:5],
        "positions": fact.iloc[[4, 0, 2, 3]],
        "named": fact.set_index(pd.Index([7, 3, 9, 1, 5, 6], name="id")),
    }[index]
    written.to_parquet(tmp_path / "fact.parquet", row_group_size=2)
    pd.DataFrame({"k": [0, 1, 2], "d": [0.5, 1.5, 2.5]}).to_parquet(tmp_path / "dim.parquet")
    columns = ["d"] + (["id"] if index == "named" else [])

    def matrix(**chunks):
        return (
            Table.from_parquet(tmp_path / "fact.parquet", **chunks)
            .merge(Table.from_parquet(tmp_path / "dim.parquet"), on="k")
            .to_matrix(columns=columns, target="x")
        )

    expected_X, expected_y = matrix()
    np.testing.assert_array_equal(expected_y, written["x"].to_numpy())
    X, y = matrix(chunks="row_groups")
    assert_close(X.compute().toarray(), expected_X.toarray(), what="X")
    assert_close(y.compute(), expected_y, what="y")


@pytest.mark.parametrize("categorical", ["onehot", "ordinal"])
def test_categorical_columns_take_sorted_levels_as_in_memory(tmp_path, client, categorical):
    """A pandas Categorical stored in Parquet, its categories in no order, in the fact table and
    in a dimension: the workers' matrix has the in-memory matrix's levels (sorted by value),
    columns and codes."""
    fact = pd.DataFrame(
        {
            "k": [0, 1, 1, 2, 0, 2],
            "x": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
            "c": pd.Categorical(["b", "a", "c", "b", "a", "c"], categories=["c", "b", "a"]),
        }
    )
    dim = pd.DataFrame(
        {"k": [0, 1, 2], "d": pd.Categorical(["y", "x", "y"], categories=["y", "z", "x"])}
    )
    fact.to_parquet(tmp_path / "fact.parquet", row_group_size=2)
    dim.to_parquet(tmp_path / "dim.parquet")
    expected_X, _ = (
        Table.from_parquet(tmp_path / "fact.parquet")
        .merge(Table.from_parquet(tmp_path / "dim.parquet"), on="k")
        .to_matrix(columns=["c", "d"], target="x", categorical=categorical)
    )
    X, _ = (
        Table.from_parquet(tmp_path / "fact.parquet", chunks="row_groups")
        .merge(Table.from_parquet(tmp_path / "dim.parquet"), on="k")
        .to_matrix(columns=["c", "d"], target="x", categorical=categorical)
    )
    assert X.columns == expected_X.columns
    if categorical == "onehot":
        assert expected_X.columns == ["c=a", "c=b", "c=c", "d=x", "d=y"]
    assert_close(X.compute().toarray(), expected_X.toarray(), what="X")


def test_dictionary_encoded_keys_of_a_dimension_read_by_range(tmp_path, client):
    """A dimension key stored dictionary-encoded: integer levels are read as their values (the
    range read and the join equal the in-memory ones); string levels cannot be compared with
    the numeric bounds of a range and are refused naming the table, the key, its type and the
    way out."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    fact = pd.DataFrame({"order": np.sort(rng.integers(0, 30, 200)), "x": rng.normal(size=200)})
    fact.loc[::9, "order"] = 99  # no such order: a left join's NULL row
    fact.to_parquet(tmp_path / "fact.parquet", row_group_size=40)
    prices = rng.normal(size=30)
    keys = pa.array(np.arange(30)).dictionary_encode()
    pq.write_table(
        pa.table({"order_id": keys, "price": prices}), tmp_path / "orders.parquet", row_group_size=8
    )
    chunked = Table.from_parquet(tmp_path / "fact.parquet", name="fact", chunks=50)
    orders = Table.from_parquet(tmp_path / "orders.parquet", name="orders", chunks="row_groups")
    plain = pd.DataFrame({"order_id": np.arange(30), "price": prices})
    for how in ("inner", "left"):
        D, _ = chunked.merge(orders, left_on="order", right_on="order_id", how=how).to_matrix(
            columns=["x", "price"]
        )
        X, _ = (
            Table(fact)
            .merge(Table(plain), left_on="order", right_on="order_id", how=how)
            .to_matrix(columns=["x", "price"])
        )
        assert_close(D.compute().toarray(), X.toarray(), what=f"{how} join")
    names = pa.array([f"o{i}" for i in range(30)]).dictionary_encode()
    pq.write_table(pa.table({"order_id": names, "price": prices}), tmp_path / "named.parquet")
    named = Table.from_parquet(tmp_path / "named.parquet", name="named", chunks="row_groups")
    with pytest.raises(ValueError, match=r"(?s)'named'.*'order_id'.*numeric.*dictionary.*chunks="):
        chunked.merge(named, left_on="order", right_on="order_id")
