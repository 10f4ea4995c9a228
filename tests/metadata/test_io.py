"""Metadata.load and load_sources trust nothing in the files: every array is checked against the header,
and a truncated, edited or foreign file fails at once with a ValueError naming the file and the field."""

import json

import numpy as np
import pytest
import scipy.sparse as sp

from ilargi import NormalizedMatrix
from ilargi.metadata import Metadata

FACT = np.arange(8.0).reshape(4, 2)
DIM = np.array([[10.0, 1.0], [20.0, 2.0], [30.0, 3.0]])


def _saved(folder, affine=False, sources=True):
    T = NormalizedMatrix.from_parts(
        [FACT, sp.csr_array(DIM)],
        [None, np.array([2, 0, -1, 1])],
        [[0, 1], [2, 3]],
        (4, 4),
        names=["fact", "dim"],
    )
    if affine:
        T = (T - 1.0) * 2.0
    T.save(folder, sources=sources)
    return T


def _edit_arrays(folder, **changes):
    with np.load(folder / "indices.npz") as stored:
        arrays = {name: stored[name] for name in stored.files}
    for name, value in changes.items():
        if value is None:
            arrays.pop(name)
        else:
            arrays[name] = value
    np.savez(folder / "indices.npz", **arrays)


def _edit_header(folder, edit):
    path = folder / "metadata.json"
    header = json.loads(path.read_text())
    edit(header)
    path.write_text(json.dumps(header))


def test_round_trip_still_loads(tmp_path):
    T = _saved(tmp_path, affine=True)
    back = NormalizedMatrix.load(tmp_path)
    np.testing.assert_array_equal(back.toarray(), T.toarray())


@pytest.mark.parametrize(
    "name, value, reason",
    [
        ("rows_1", np.array([2, 0, -1]), r"has 3 entries; the header needs 4"),  # shortened
        ("rows_1", np.array([2, 0, -1, 1, 0]), r"has 5 entries; the header needs 4"),  # lengthened
        ("rows_1", np.array([2, 0, 3, 1]), r"outside \[-1, 3\)"),  # out of range
        ("rows_1", np.array([2, 0, -2, 1]), r"outside \[-1, 3\)"),
        (
            "rows_1",
            np.array([2.0, 0.0, -1.0, 1.0]),
            r"1-D integer vector, got dtype float64",
        ),  # swapped dtype
        ("rows_1", np.array([[2, 0, -1, 1]]), r"1-D integer vector"),
        ("cols_0", np.array([0, 0]), r"injective"),
        ("cols_0", np.array([0, 4]), r"outside \[0, 4\)"),
        ("cols_1", np.array([2]), r"has 1 entries; the header needs 2"),
        ("cols_1", np.array(["2", "3"]), r"1-D integer vector"),
        ("rows_1", None, r"missing arrays \['rows_1'\]"),
        ("rows_7", np.arange(4), r"unexpected arrays \['rows_7'\]"),
    ],
)
def test_arrays_that_disagree_with_the_header(tmp_path, name, value, reason):
    _saved(tmp_path)
    _edit_arrays(tmp_path, **{name: value})
    with pytest.raises(ValueError, match=rf"indices\.npz.*{reason}"):
        Metadata.load(tmp_path)
    with pytest.raises(ValueError, match=r"indices\.npz"):
        NormalizedMatrix.load(tmp_path)


@pytest.mark.parametrize(
    "name, value, reason",
    [
        ("scale", np.ones(3), r"array 'scale' must be a 1-D float vector of 4 values"),
        ("shift", np.ones(5), r"array 'shift' must be a 1-D float vector of 4 values"),
        ("scale", np.array([1.0, np.inf, 1.0, 1.0]), r"array 'scale' holds NaN or inf"),
        ("shift", np.array([1.0, np.nan, 1.0, 1.0]), r"array 'shift' holds NaN or inf"),
        ("scale", np.ones(4, dtype=np.int64), r"float vector"),
        ("shift", None, r"missing arrays \['shift'\]"),
    ],
)
def test_affine_vectors(tmp_path, name, value, reason):
    _saved(tmp_path, affine=True)
    _edit_arrays(tmp_path, **{name: value})
    with pytest.raises(ValueError, match=rf"indices\.npz.*{reason}"):
        Metadata.load(tmp_path)


@pytest.mark.parametrize(
    "edit, reason",
    [
        (lambda h: h.pop("parts"), r"field 'parts' is missing"),
        (lambda h: h.update(parts=[]), r"field 'parts' is empty"),
        (lambda h: h.update(shape=[4]), r"field 'shape' must be two non-negative integers"),
        (lambda h: h.update(shape=[4, -1]), r"field 'shape' must be two non-negative integers"),
        (lambda h: h.update(shape="4x4"), r"field 'shape' must be a list"),
        (lambda h: h["parts"][1].update(source_shape=[3, "2"]), r"field 'parts\[1\].source_shape'"),
        (
            lambda h: h["parts"][1].update(identity="no"),
            r"field 'parts\[1\].identity' must be a bool",
        ),
        (lambda h: h["parts"][0].pop("name"), r"field 'parts\[0\].name' is missing"),
        (
            lambda h: h["parts"][0].update(source_shape=[5, 2]),
            r"parts\[0\] \('fact'\) is the identity",
        ),
        (
            lambda h: h["parts"][1].update(source_shape=[2, 2]),
            r"array 'rows_1' .*outside \[-1, 2\)",
        ),
        (lambda h: h.update(columns=["a"]), r"field 'columns' must be null or a list of 4 strings"),
        (lambda h: h.update(extra=[1]), r"field 'extra' must be an object"),
        (lambda h: h.update(format="other"), r"is not ilargi metadata \(format 'other'\)"),
        (lambda h: h.update(version=99), r"version 99 is not supported"),
    ],
)
def test_headers_with_missing_or_wrong_fields(tmp_path, edit, reason):
    _saved(tmp_path)
    _edit_header(tmp_path, edit)
    with pytest.raises(ValueError, match=reason):
        Metadata.load(tmp_path)


def test_truncated_and_foreign_files_name_the_path(tmp_path):
    _saved(tmp_path)
    header = (tmp_path / "metadata.json").read_text()
    (tmp_path / "metadata.json").write_text(header[: len(header) // 2])
    with pytest.raises(ValueError, match=r"metadata\.json is not valid JSON"):
        Metadata.load(tmp_path)
    (tmp_path / "metadata.json").write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(ValueError, match=r"metadata\.json is not valid JSON"):
        Metadata.load(tmp_path)
    (tmp_path / "metadata.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"metadata\.json is not ilargi metadata"):
        Metadata.load(tmp_path)
    (tmp_path / "metadata.json").write_text(header)
    data = (tmp_path / "indices.npz").read_bytes()
    (tmp_path / "indices.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"indices\.npz is not an npz archive"):
        Metadata.load(tmp_path)
    np.save(tmp_path / "indices.npz", np.arange(3))  # a foreign .npy under the npz name
    (tmp_path / "indices.npz.npy").rename(tmp_path / "indices.npz")
    with pytest.raises(ValueError, match=r"indices\.npz is not an npz archive"):
        Metadata.load(tmp_path)
    (tmp_path / "indices.npz").unlink()
    with pytest.raises(FileNotFoundError, match=r"indices\.npz is missing"):
        Metadata.load(tmp_path)


def test_saved_sources_are_checked(tmp_path):
    _saved(tmp_path)
    np.save(tmp_path / "source_0.npy", np.ones((4, 3)))
    with pytest.raises(
        ValueError, match=r"source_0\.npy has shape \(4, 3\); the header records \(4, 2\)"
    ):
        NormalizedMatrix.load(tmp_path)
    np.save(tmp_path / "source_0.npy", np.array([["a", "b"]] * 4))
    with pytest.raises(ValueError, match=r"source_0\.npy holds <U1 values"):
        NormalizedMatrix.load(tmp_path)
    np.save(tmp_path / "source_0.npy", np.array([[None, 1]] * 4, dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match=r"source_0\.npy is not a saved source"):  # no pickles
        NormalizedMatrix.load(tmp_path)
    data = (tmp_path / "source_1.npz").read_bytes()
    np.save(tmp_path / "source_0.npy", FACT)
    (tmp_path / "source_1.npz").write_bytes(data[:20])
    with pytest.raises(ValueError, match=r"source_1\.npz is not a saved source"):
        NormalizedMatrix.load(tmp_path)
    (tmp_path / "source_1.npz").unlink()
    with pytest.raises(FileNotFoundError, match=r"source of part 1 is missing"):
        NormalizedMatrix.load(tmp_path)


def test_metadata_only(tmp_path):
    _saved(tmp_path, sources=False)
    with pytest.raises(FileNotFoundError, match="holds metadata only"):
        Metadata.load_sources(tmp_path)
    assert Metadata.load(tmp_path).names == ["fact", "dim"]
