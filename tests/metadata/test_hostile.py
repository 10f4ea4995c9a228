"""Saved folders in hostile hands: links in and out of the folder, absolute paths in the header,
members edited or left over from an earlier save, saves racing each other and a reader, arrays
whose header promises more than the metadata, and the private folder of ``persist="disk"``.

The rules under test (:mod:`ilargi.metadata.io`): a load reads only regular files inside the
folder (a link only to a file inside), only the members the header names, every array header
first; a save is written into a private folder and renamed into place as a whole, never through a
link it finds.
"""

import json
import os
import threading
import tracemalloc
import zipfile

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from hypothesis import given
from hypothesis import strategies as st

from ilargi import NormalizedMatrix, Table
from ilargi.metadata import Metadata
from tests.strategies import property_settings

FACT = np.arange(8.0).reshape(4, 2)
DIM = np.array([[10.0, 1.0], [20.0, 2.0], [30.0, 3.0]])
MEMBERS = ["metadata.json", "indices.npz", "source_0.npy", "source_1.npz"]


def _matrix(dense_fact=True, scale=1.0, parts=2):
    fact = FACT if dense_fact else sp.csr_array(FACT)
    if parts == 1:
        return NormalizedMatrix.from_parts([fact * scale], [None], [[0, 1]], (4, 2))
    return NormalizedMatrix.from_parts(
        [fact * scale, sp.csr_array(DIM)],
        [None, np.array([2, 0, -1, 1])],
        [[0, 1], [2, 3]],
        (4, 4),
        names=["fact", "dim"],
    )


def _files_under(root):
    return sorted(
        os.path.relpath(os.path.join(d, f), root) for d, _, files in os.walk(root) for f in files
    )


@pytest.mark.parametrize("name", MEMBERS)
def test_a_member_linked_outside_is_never_read(tmp_path, name):
    folder = tmp_path / "saved"
    _matrix().save(folder, sources=True)
    outside = tmp_path / f"outside-{name}"
    os.replace(folder / name, outside)  # the very bytes, valid: only where they are differs
    os.symlink(outside, folder / name)
    with pytest.raises(ValueError, match=rf"{name} leads outside .*saved"):
        NormalizedMatrix.load(folder)


def test_a_link_to_a_file_inside_the_folder_is_followed(tmp_path):
    folder = tmp_path / "saved"
    T = _matrix()
    T.save(folder, sources=True)
    (folder / "data").mkdir()
    os.replace(folder / "source_0.npy", folder / "data" / "fact.npy")
    os.symlink(folder / "data" / "fact.npy", folder / "source_0.npy")
    np.testing.assert_array_equal(NormalizedMatrix.load(folder).toarray(), T.toarray())


def test_a_tables_sources_linked_outside_are_never_read(tmp_path):
    folder, outside = tmp_path / "saved", tmp_path / "elsewhere"
    Table(pd.DataFrame({"k": [1, 2]}), name="t").save(folder, sources=True)
    os.replace(folder / "sources", outside)
    os.symlink(outside, folder / "sources")  # the whole subfolder
    with pytest.raises(
        ValueError,
        match=r"the path 'sources/t.parquet' of source 't' leads "
        r"outside",
    ):
        Table.load(folder)
    os.unlink(folder / "sources")
    (folder / "sources").mkdir()
    os.symlink(outside / "t.parquet", folder / "sources" / "t.parquet")  # one file
    with pytest.raises(ValueError, match=r"leads outside"):
        Table.load(folder)


def test_an_absolute_path_in_the_header_is_never_read(tmp_path):
    folder = tmp_path / "saved"
    Table(pd.DataFrame({"k": [1, 2]}), name="t").save(folder, sources=True)
    mine = tmp_path / "private.parquet"
    pd.DataFrame({"k": [7, 8]}).to_parquet(mine)  # valid, readable, the same shape
    header = json.loads((folder / "metadata.json").read_text())
    header["extra"]["sources"][0]["path"] = str(mine)
    (folder / "metadata.json").write_text(json.dumps(header))
    with pytest.raises(
        ValueError,
        match=r"source 't' was saved as a reference to .*private"
        r"\.parquet.*pass it, sources=",
    ):
        Table.load(folder)
    assert Table.load(folder, {"t": mine}).to_pandas()["k"].tolist() == [7, 8]  # when asked


@pytest.mark.parametrize("link", ["sources", "metadata.json", "source_0.npy"])
def test_a_save_never_writes_through_a_link_it_finds(tmp_path, link):
    folder, outside = tmp_path / "saved", tmp_path / "outside"
    folder.mkdir()
    outside.mkdir()
    os.symlink(outside if link == "sources" else outside / "target", folder / link)
    table = Table(pd.DataFrame({"k": [1, 2], "x": [0.5, 1.5]}), name="t")
    with pytest.raises(ValueError, match=rf"cannot save into .*saved: \['{link}'\] is a link"):
        table.save(folder, sources=True)
    with pytest.raises(ValueError, match=r"is a link"):
        _matrix().save(folder, sources=True)
    assert _files_under(outside) == []
    assert os.path.islink(folder / link)  # nor was the link removed


def test_a_folder_of_other_files_is_not_replaced(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"it holds \['notes.txt'\], which a save does not write"):
        _matrix().save(tmp_path, sources=True)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_saved_folders_are_private_while_written_and_keep_the_usual_mode(tmp_path):
    folder = tmp_path / "saved"
    _matrix().save(folder, sources=True)
    probe = tmp_path / "probe"
    probe.mkdir()
    assert (folder.stat().st_mode & 0o777) == (probe.stat().st_mode & 0o777)
    os.chmod(folder, 0o750)
    _matrix(scale=2.0).save(folder, sources=True)
    assert folder.stat().st_mode & 0o777 == 0o750  # a replaced folder keeps its mode
    assert sorted(p.name for p in tmp_path.iterdir()) == ["probe", "saved"]  # no stage left


def test_a_folder_that_cannot_be_renamed_is_saved_into_in_place(tmp_path, monkeypatch):
    """A mount point, or a folder in one this user may not write: the members are renamed into
    it one by one, and the earlier save's other members removed."""
    import ilargi.metadata.io as io

    folder = tmp_path / "mounted"
    _matrix(True, 1.0).save(folder, sources=True)
    Table(pd.DataFrame({"k": [1, 2]}), name="t").save(tmp_path / "table", sources=True)
    monkeypatch.setattr(io.os, "access", lambda *args, **kwargs: False)
    T = _matrix(False, 2.0, parts=1)
    T.save(folder, sources=True)
    assert sorted(os.listdir(folder)) == ["indices.npz", "metadata.json", "source_0.npz"]
    np.testing.assert_array_equal(NormalizedMatrix.load(folder).toarray(), T.toarray())
    table = Table(pd.DataFrame({"k": [3], "y": [1.0]}), name="u")
    table.save(tmp_path / "table", sources=True)
    assert sorted(os.listdir(tmp_path / "table" / "sources")) == ["u.parquet"]
    pd.testing.assert_frame_equal(Table.load(tmp_path / "table").to_pandas(), table.to_pandas())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mounted", "table"]


saves = st.lists(
    st.tuples(st.booleans(), st.sampled_from([1, 2]), st.booleans(), st.integers(1, 5)),
    min_size=2,
    max_size=4,
)


@property_settings(max_examples=15)
@given(saves)
def test_each_save_replaces_the_last_one_whole(tmp_path_factory, sequence):
    """Saves of other shapes, part counts, dense or sparse sources, with and without sources,
    into one folder: the folder then holds the members of the last save only, and loads it."""
    folder = tmp_path_factory.mktemp("saved") / "m"
    for dense, parts, with_sources, scale in sequence:
        T = _matrix(dense, float(scale), parts)
        T.save(folder, sources=with_sources)
        expected = ["indices.npz", "metadata.json"]
        if with_sources:
            expected += [
                f"source_{p}.{'npz' if sp.issparse(part.source) else 'npy'}"
                for p, part in enumerate(T.parts)
            ]
        assert sorted(os.listdir(folder)) == sorted(expected)
        sources = None if with_sources else [part.source for part in T.parts]
        np.testing.assert_array_equal(NormalizedMatrix.load(folder, sources).toarray(), T.toarray())


def test_an_older_save_with_both_source_files_is_refused(tmp_path):
    _matrix().save(tmp_path, sources=True)
    header = json.loads((tmp_path / "metadata.json").read_text())
    for part in header["parts"]:
        part.pop("source_file")  # as an earlier version wrote it
    (tmp_path / "metadata.json").write_text(json.dumps(header))
    np.save(tmp_path / "source_1.npy", DIM)  # a stale dense file beside the sparse one
    with pytest.raises(ValueError, match=r"both source_1.npy and source_1.npz exist"):
        NormalizedMatrix.load(tmp_path)


def test_concurrent_saves_and_loads_never_mix(tmp_path):
    """Two threads save different matrices into one folder while a third loads it: every load
    gives one of the two matrices or a clear error, never a mix; the folder ends as one save."""
    folder = tmp_path / "saved"
    matrices = [_matrix(True, 1.0), _matrix(False, 3.0)]
    expected = [T.toarray() for T in matrices]
    matrices[0].save(folder, sources=True)
    stop, seen, failures = threading.Event(), [], []

    def save(T):
        for _ in range(12):
            T.save(folder, sources=True)

    def load():
        while not stop.is_set():
            try:
                got = NormalizedMatrix.load(folder).toarray()
            except (FileNotFoundError, ValueError) as error:  # the folder mid-swap: said so
                seen.append(type(error).__name__)
                continue
            if not any(np.array_equal(got, e) for e in expected):
                failures.append(got)
            seen.append("loaded")

    reader = threading.Thread(target=load)
    writers = [threading.Thread(target=save, args=(T,)) for T in matrices]
    reader.start()
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    stop.set()
    reader.join()
    assert not failures and "loaded" in seen
    final = NormalizedMatrix.load(folder).toarray()
    assert any(np.array_equal(final, e) for e in expected)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["saved"]


def test_a_folder_moved_away_between_the_checks_is_no_objection(tmp_path, monkeypatch):
    """A concurrent save renames the earlier save away between this save's checks: the folder
    is then gone, not 'not a folder' (a race that failed one of two concurrent saves)."""
    import shutil

    from ilargi.metadata import saving

    folder = tmp_path / "saved"
    _matrix(True, 1.0).save(folder)
    real, moved = os.lstat, []

    def moved_away_first(path, *args, **kwargs):
        if not moved and os.fspath(path) == os.fspath(folder):
            moved.append(path)
            shutil.rmtree(folder)  # what the other save's swap does at this instant
        return real(path, *args, **kwargs)

    monkeypatch.setattr(saving.os, "lstat", moved_away_first)
    saving._check_replaceable(folder)  # no error: nothing is left to object to
    monkeypatch.undo()
    _matrix(False, 3.0).save(folder, sources=True)
    np.testing.assert_array_equal(
        NormalizedMatrix.load(folder).toarray(), _matrix(False, 3.0).toarray()
    )


def _lengthened(folder, name, entries):
    """Replace an array of indices.npz by a compressed one of ``entries`` zeros (a few hundred
    kB on disk, 8 bytes per entry once read)."""
    with np.load(folder / "indices.npz") as stored:
        arrays = {key: stored[key] for key in stored.files}
    arrays[name] = np.zeros(entries, dtype=np.int64)
    np.savez_compressed(folder / "indices.npz", **arrays)


@pytest.mark.parametrize(
    "name, reason",
    [
        ("rows_1", "has 5000000 entries; the header needs 4"),
        ("cols_0", "has 5000000 entries; the header needs 2"),
    ],
)
def test_an_array_is_checked_before_it_is_read(tmp_path, name, reason):
    _matrix().save(tmp_path, sources=True)
    _lengthened(tmp_path, name, 5_000_000)
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=reason):
            NormalizedMatrix.load(tmp_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4_000_000, f"read {peak} bytes to refuse a 40 MB array"


@pytest.mark.filterwarnings("ignore:Duplicate name")
def test_a_source_whose_header_promises_more_is_refused_unread(tmp_path):
    _matrix().save(tmp_path, sources=True)
    with open(tmp_path / "source_0.npy", "wb") as file:  # a header of 10^9 rows, no data
        np.lib.format.write_array_header_1_0(
            file, {"descr": "<f8", "fortran_order": False, "shape": (10**9, 2)}
        )
    with pytest.raises(
        ValueError,
        match=r"source_0.npy has shape \(1000000000, 2\); the header "
        r"records \(4, 2\)",
    ):
        NormalizedMatrix.load(tmp_path)
    np.save(tmp_path / "source_0.npy", FACT)
    data = (tmp_path / "source_0.npy").read_bytes()
    (tmp_path / "source_0.npy").write_bytes(data[:-8])  # the right header, a row short
    with pytest.raises(ValueError, match=r"source_0.npy is truncated"):
        NormalizedMatrix.load(tmp_path)
    _matrix().save(tmp_path, sources=True)
    with zipfile.ZipFile(tmp_path / "source_1.npz", "a") as archive:  # nnz past n x d
        with archive.open("indptr.npy", "w") as member:
            np.lib.format.write_array(member, np.array([0, 1, 2, 99]))
    with pytest.raises(ValueError, match=r"source_1.npz"):
        NormalizedMatrix.load(tmp_path)


def test_metadata_load_reads_its_own_header_first(tmp_path):
    _matrix().save(tmp_path, sources=False)
    assert Metadata.load(tmp_path).names == ["fact", "dim"]
    with pytest.raises(FileNotFoundError, match="holds metadata only"):
        Metadata.load_sources(tmp_path)
