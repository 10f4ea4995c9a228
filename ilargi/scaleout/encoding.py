"""The encoding of a partition's columns on a worker, as the in-memory table encodes them: float
values (an ordinal or target categorical as the code of its level), codes of levels and the
one-hot CSR block of the categorical columns.
"""

import numpy as np
import pandas as pd
import scipy.sparse as sp


def column_values(series, spec):
    """Float values of a column (NaN = missing): numbers as they are, an ordinal or target
    categorical as the code of its level."""
    if spec.categorical:
        codes = column_codes(spec.levels, series)
        return np.where(codes < 0, np.nan, codes.astype(np.float64))
    return series.to_numpy(dtype=np.float64, na_value=np.nan)


def column_codes(levels, series):
    """The position of each value in ``levels`` (-1: missing or absent). The few distinct values
    are looked up, not every row: hashing a partition's strings once (``factorize``) is several
    times faster than looking each one up."""
    if not len(series):
        return np.zeros(0, dtype=np.intp)
    codes, uniques = pd.factorize(series)
    found = np.append(levels.get_indexer(uniques), -1)  # code -1 (missing) -> found[-1] = -1
    return found[codes]


def one_hot(code_columns, widths, n):
    """CSR (n × Σ widths): a 1 at each row's code in each block; code -1 (missing) has none."""
    codes = np.column_stack(code_columns) if code_columns else np.zeros((n, 0), dtype=np.intp)
    present = codes >= 0
    offsets = np.cumsum([0] + list(widths[:-1]))
    indices = (codes + offsets)[present]
    indptr = np.concatenate([[0], np.cumsum(present.sum(axis=1))])
    return sp.csr_array((np.ones(len(indices)), indices, indptr), shape=(n, int(sum(widths))))
