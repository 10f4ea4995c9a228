"""Loader for the one-hot Hamlet star schemas (MorpheusPy format: Flights, Walmart, Yelp).

A folder holds, for a fact table S and dimension tables R1..Rk:

* ``MLY.csv`` -- the target, one value a line after a header line;
* ``MLFK<i>.csv`` -- per fact row, the **1-based** row number in dimension i;
* ``MLR<i>Sparse.txt`` -- dimension i as a MatrixMarket matrix (binary one-hot);
* ``MLSSparse.txt`` (MatrixMarket) or ``MLSraw.txt`` (one integer column, kept as a numeric feature) --
  the fact table's own features; absent when the fact table has none (Yelp).

The joined table is ``T = hstack([S, R1[fk1 - 1], R2[fk2 - 1], ...])``.
"""

import re
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.io
import scipy.sparse as sp

from ilargi.rewriter import NormalizedMatrix

__all__ = ["load_hamlet", "hamlet_materialized", "hamlet_sources"]

_FK_FILE = re.compile(r"MLFK(\d+)\.csv")


def _read_column(path):
    """The single column of a one-column CSV with a header line, as a NumPy array."""
    return pd.read_csv(path, engine="c").iloc[:, 0].to_numpy()


def _read_mtx(path):
    return sp.csr_matrix(scipy.io.mmread(path), dtype=np.float64)


def _read_fact(folder, n_rows):
    """The fact table's own features as CSR (n_rows x d_S), or None when the fact table has none.

    ``MLSraw.txt`` holds a raw integer column (Walmart's department number); it is kept as one numeric
    column, stored sparse so that a Hamlet matrix stays all-sparse and materializes to CSR.
    """
    if (folder / "MLSSparse.txt").exists():
        fact = _read_mtx(folder / "MLSSparse.txt")
    elif (folder / "MLSraw.txt").exists():
        fact = sp.csr_matrix(_read_column(folder / "MLSraw.txt").astype(np.float64).reshape(-1, 1))
    else:
        return None
    if fact.shape[0] != n_rows:
        raise ValueError(
            f"Hamlet folder {folder}: the fact table has {fact.shape[0]} rows, MLY.csv has {n_rows}"
        )
    return fact


def _read_dimensions(folder, n_rows):
    """[(name, R_i as CSR, 0-based row index per fact row)] for i = 1..k, in order of i."""
    numbers = sorted(int(m.group(1)) for p in folder.iterdir() if (m := _FK_FILE.fullmatch(p.name)))
    if not numbers:
        raise ValueError(f"Hamlet folder {folder}: no MLFK<i>.csv files")
    dimensions = []
    for i in numbers:
        matrix_path = folder / f"MLR{i}Sparse.txt"
        if not matrix_path.exists():
            raise ValueError(
                f"Hamlet folder {folder}: MLFK{i}.csv has no matching {matrix_path.name}"
            )
        matrix = _read_mtx(matrix_path)
        rows = _read_column(folder / f"MLFK{i}.csv").astype(np.int64) - 1
        if len(rows) != n_rows:
            raise ValueError(
                f"Hamlet folder {folder}: MLFK{i}.csv has {len(rows)} rows, MLY.csv has {n_rows}"
            )
        if len(rows) and (rows.min() < 0 or rows.max() >= matrix.shape[0]):
            raise ValueError(
                f"Hamlet folder {folder}: MLFK{i}.csv refers to rows outside 1..{matrix.shape[0]} "
                f"of {matrix_path.name}"
            )
        dimensions.append((f"R{i}", matrix, rows))
    return dimensions


def _read_hamlet(directory):
    """(parts, y): parts = [(name, CSR source, rows or None)], in column order S, R1, R2, ..."""
    folder = Path(directory)
    if not (folder / "MLY.csv").is_file():
        raise FileNotFoundError(f"{folder} is not a Hamlet dataset folder (no MLY.csv)")
    y = _read_column(folder / "MLY.csv").astype(np.float64)
    fact = _read_fact(folder, len(y))
    parts = [] if fact is None else [("S", fact, None)]
    return parts + _read_dimensions(folder, len(y)), y


def load_hamlet(directory):
    """Load a Hamlet dataset folder as ``(NormalizedMatrix, y)`` without joining.

    Parts, in column order: the fact features ``S`` (identity rows; absent for Yelp), then one part
    ``R<i>`` per dimension with rows ``MLFK<i> - 1``. Column names are ``"S:<j>"`` and ``"R<i>:<j>"``
    (j = column of the source).

    Parameters
    ----------
    directory : str or path-like
        A Hamlet dataset folder, e.g. ``hamlet/Yelp``.

    Returns
    -------
    nm : NormalizedMatrix
        The star join, all parts CSR.
    y : ndarray of float64
        The target.

    Raises
    ------
    FileNotFoundError
        If the folder has no ``MLY.csv``.
    ValueError
        If the files do not fit together (row counts, FK ranges, missing dimension files).

    See Also
    --------
    hamlet_materialized : The same table, joined.

    Examples
    --------
    >>> from ilargi.datasets import load_hamlet
    >>> nm, y = load_hamlet("../shared/datasets/hamlet/Yelp")  # doctest: +SKIP
    >>> [part.name for part in nm.parts]  # doctest: +SKIP
    ['R1', 'R2']
    """
    parts, y = _read_hamlet(directory)
    sources, rows, cols, columns = [], [], [], []
    for name, source, index in parts:
        start = len(columns)
        sources.append(source)
        rows.append(index)
        cols.append(np.arange(start, start + source.shape[1]))
        columns.extend(f"{name}:{j}" for j in range(source.shape[1]))
    nm = NormalizedMatrix.from_parts(
        sources,
        rows,
        cols,
        shape=(len(y), len(columns)),
        columns=columns,
        names=[name for name, _, _ in parts],
    )
    return nm, y


def hamlet_materialized(directory):
    """The joined Hamlet table, built: the reference for tests and benchmarks.

    Parameters
    ----------
    directory : str or path-like
        A Hamlet dataset folder.

    Returns
    -------
    T : scipy.sparse.csr_matrix
        ``hstack([S, R1[fk1 - 1], ...])``.
    y : ndarray of float64
        The target.

    Examples
    --------
    >>> from ilargi.datasets import hamlet_materialized
    >>> T, y = hamlet_materialized("../shared/datasets/hamlet/Yelp")  # doctest: +SKIP
    """
    parts, y = _read_hamlet(directory)
    blocks = [source if index is None else source[index] for _, source, index in parts]
    return sp.hstack(blocks, format="csr"), y


def hamlet_sources(directory):
    """The source matrices of a Hamlet folder, for the stored metadata in ``metadata/hamlet_<name>``.

    Parameters
    ----------
    directory : str or path-like
        A Hamlet dataset folder.

    Returns
    -------
    sources : list of scipy.sparse.csr_matrix
        In part order: S if present, R1, R2, ...
    y : ndarray of float64
        The target.

    Examples
    --------
    >>> from ilargi import NormalizedMatrix
    >>> from ilargi.datasets import hamlet_sources
    >>> sources, y = hamlet_sources("../shared/datasets/hamlet/Yelp")  # doctest: +SKIP
    >>> nm = NormalizedMatrix.load("metadata/hamlet_yelp", sources=sources)  # doctest: +SKIP
    """
    parts, y = _read_hamlet(directory)
    return [source for _, source, _ in parts], y
