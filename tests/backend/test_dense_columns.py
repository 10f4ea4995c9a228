"""A table's numeric columns as one row-major block: the compiled kernel gives the NumPy twin's
bytes, in one call of its columns and in several, with NaN filled, and hands columns it does not
take to the twin."""

import numpy as np
import pytest

import ilargi
from ilargi.backend import cpu

compiled = pytest.importorskip("ilargi.backend.compiled")


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("k", [1, 7, 8, 9, 17])
def test_columns_stacked_with_their_fills_are_numpys(threads, k):
    rng = np.random.default_rng(k)
    n = 50_001  # steps of both versions and a last, partial one
    columns = [rng.standard_normal(n) for _ in range(k)]
    for j, column in enumerate(columns):
        column[rng.integers(0, n, 50 * j)] = np.nan
    fills = list(rng.standard_normal(k))
    ours, theirs = np.empty((n, k)), np.empty((n, k))
    with ilargi.threads(threads):
        assert compiled.dense_columns(columns, fills, ours) is ours
    cpu.dense_columns(columns, fills, theirs)
    np.testing.assert_array_equal(ours, theirs)
    expected = np.column_stack(columns)
    expected = np.where(np.isnan(expected), np.array(fills), expected)
    np.testing.assert_array_equal(ours, expected)


def test_columns_it_does_not_take_go_to_numpy():
    """float32, strided and read-only columns: NumPy's copy, the same values."""
    rng = np.random.default_rng(3)
    n = 10_000
    base = rng.standard_normal((n, 2))
    readonly = rng.standard_normal(n)
    readonly.flags.writeable = False
    columns = [base[:, 1], rng.standard_normal(n).astype(np.float32), readonly]
    ours, theirs = np.empty((n, 3)), np.empty((n, 3))
    compiled.dense_columns(columns, [0.0] * 3, ours)
    cpu.dense_columns(columns, [0.0] * 3, theirs)
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(ours[:, 1], columns[1].astype(np.float64))
