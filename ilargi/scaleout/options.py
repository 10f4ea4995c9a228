"""The arguments every way onto Dask shares: how rows are cut into partitions, and what is kept.

One rule each, for ``NormalizedMatrix.to_dask``, ``Table.to_matrix(chunks=...)`` and
``Table.from_parquet(chunks=...)``:

* a number of rows is an integer (Python's or NumPy's), at least 1: a float, even ``1000.0``, is
  refused rather than rounded or read as something else, as is a bool;
* explicit partition sizes are a sequence of such integers (0 allowed) summing to the rows;
* a byte size (Parquet only) is a string with its unit, such as ``"128MiB"`` or ``"500B"``: a bare
  ``"1000"`` could mean rows or bytes and is refused;
* ``persist`` is a bool (or ``"disk"`` where the partitions can be written encoded).
"""

import numbers
import re

import numpy as np

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b)\s*$", re.IGNORECASE)
_UNITS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


def _integral(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def _forms(parquet):
    rows = "an int number of rows per partition (chunks=1000)"
    if parquet:
        return f"{rows}, 'row_groups' or a byte size with its unit such as '128MiB'"
    return f"{rows} or a sequence of each partition's rows"


def rows_per_partition(chunks, parquet=False):
    """``chunks`` as a number of rows, or None when it is not a single number.

    Parameters
    ----------
    chunks : object
        The user's ``chunks=``.
    parquet : bool
        Whether byte sizes and ``"row_groups"`` are also allowed (for the error message).

    Returns
    -------
    int or None

    Raises
    ------
    TypeError
        For a float or bool (a number that is not a whole count of rows).
    ValueError
        For a count below 1.
    """
    if isinstance(chunks, (bool, np.bool_)) or (
        isinstance(chunks, numbers.Real) and not _integral(chunks)
    ):
        raise TypeError(
            f"chunks={chunks!r} is a {type(chunks).__name__}, not a whole number of "
            f"rows; give {_forms(parquet)}"
        )
    if not _integral(chunks):
        return None
    if chunks < 1:
        raise ValueError(f"chunks={chunks} must be a positive number of rows")
    return int(chunks)


def row_bounds(n, chunks):
    """Partition boundaries [0, ..., n] for ``chunks`` rows per partition (an int; the last
    partition takes the rest) or explicit partition sizes (a sequence of ints summing to n).

    Parameters
    ----------
    n : int
        Rows to cut.
    chunks : int or sequence of int

    Returns
    -------
    list of int

    Raises
    ------
    TypeError
        For a float, bool, string or a sequence holding anything but integers.
    ValueError
        For a count below 1, or sizes that are negative or do not sum to n.

    Examples
    --------
    >>> row_bounds(5, 2), row_bounds(5, (1, 4))
    ([0, 2, 4, 5], [0, 1, 5])
    """
    rows = rows_per_partition(chunks)
    if rows is not None:
        return list(range(0, n, rows)) + [n] if n else [0, 0]
    if isinstance(chunks, (str, bytes)) or not isinstance(chunks, (list, tuple, np.ndarray)):
        raise TypeError(f"chunks={chunks!r}: give {_forms(False)}")
    sizes = list(np.asarray(chunks).ravel()) if isinstance(chunks, np.ndarray) else list(chunks)
    bad = [c for c in sizes if not _integral(c)]
    if bad:
        raise TypeError(f"chunks: partition sizes must be whole numbers of rows, got {bad[0]!r}")
    sizes = [int(c) for c in sizes]
    if any(c < 0 for c in sizes) or sum(sizes) != n:
        raise ValueError(f"chunks {tuple(sizes)} must be non-negative and sum to the {n} rows")
    return [0] + list(np.cumsum(sizes, dtype=np.int64).tolist()) if sizes else [0, 0]


def parse_bytes(text):
    """A byte size with its unit: ``"64MiB"`` -> 67108864 (B, kB, MB, GB, TB, KiB, ..., TiB).

    Parameters
    ----------
    text : str

    Returns
    -------
    int
        At least 1.

    Raises
    ------
    ValueError
        For text that is not a positive size with its unit.

    Examples
    --------
    >>> parse_bytes("64MiB"), parse_bytes("1.5kB")
    (67108864, 1500)
    """
    match = _SIZE.match(text) if isinstance(text, str) else None
    if not match:
        hint = (
            f"; for {text.strip()} rows give chunks={text.strip()} (an int), for bytes add "
            f"the unit ('{text.strip()}B')"
            if isinstance(text, str) and text.strip().isdigit()
            else ""
        )
        raise ValueError(f"chunks={text!r} is neither {_forms(True)}{hint}")
    size = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    if size < 1:
        raise ValueError(f"chunks={text!r} is an empty byte size; give at least one byte")
    return size


def persist_choice(persist, disk):
    """``persist`` checked: a bool, or ``"disk"`` where ``disk`` is allowed.

    Parameters
    ----------
    persist : object
        The user's ``persist=``.
    disk : bool
        Whether ``"disk"`` is a choice here (``ChunkedTable.to_matrix``).

    Returns
    -------
    bool or str

    Raises
    ------
    ValueError
        For anything else (``1``, ``"yes"``, None, ``"disk"`` where it is not a choice).
    """
    if isinstance(persist, (bool, np.bool_)):
        return bool(persist)
    if disk and isinstance(persist, str) and persist == "disk":
        return "disk"
    choices = (
        (
            "True (memory), False (Parquet again in every pass) or 'disk' (encoded partitions "
            "on disk)"
        )
        if disk
        else "True (keep every partition's matrix in the workers' memory) or False (build it anew in "
        "every operation); 'disk' is a choice of ChunkedTable.to_matrix"
    )
    raise ValueError(f"persist={persist!r}; expected {choices}")
