"""Encoded partitions on disk (``ChunkedTable.to_matrix(..., persist="disk")``), private and never
unpickled.

The files live in Dask's temporary directory, which other users can usually list and write
(``/tmp``). So:

* the folder is created private (mode 0700, by ``mkdtemp`` on the client; a worker on another
  machine creates it 0700 too) and is used only while it stays private and ours: a folder that is
  a link, belongs to another user or lets others in is refused;
* each file is created exclusively with mode 0600 (never through a link), written whole and renamed
  into place, and read only while it is a regular file of ours that no one else may write;
* a file holds plain arrays (``.npz`` read with ``allow_pickle=False``): even a file that got there
  some other way can only fail to parse, never run code. A file that does not parse is read again
  from Parquet and rewritten.
"""

import os
import stat
import tempfile
import uuid
import zipfile
import zlib

import numpy as np
import scipy.sparse as sp

from .pieces import Piece

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def new_folder(base):
    """A new private folder (0700) for one matrix's partitions under ``base`` (created if
    missing).

    Parameters
    ----------
    base : str

    Returns
    -------
    str
    """
    os.makedirs(base, exist_ok=True)
    return tempfile.mkdtemp(prefix="ilargi-partitions-", dir=base)


def ensure_private(folder):
    """``folder`` as a private folder of this user: created with mode 0700 if missing, refused if
    it is a link, another user's, or open to others.

    Parameters
    ----------
    folder : str

    Raises
    ------
    PermissionError
        If the folder is not private.
    """
    if not os.path.lexists(folder):
        os.makedirs(os.path.dirname(folder), exist_ok=True)
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            pass
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or not _ours(info):
        raise PermissionError(
            f"the partition cache folder {folder} is not a private folder of this user (mode "
            f"{stat.filemode(info.st_mode)}, owner uid {info.st_uid}); refusing to read or write "
            "partitions there. Remove it, or set Dask's temporary-directory to a private place"
        )


def _ours(info):
    """Owned by this user and closed to group and others."""
    owner = info.st_uid == os.geteuid() if hasattr(os, "geteuid") else True
    return owner and not info.st_mode & 0o077


def _blocks(prefix, blocks, arrays):
    arrays[f"{prefix}_count"] = np.asarray(len(blocks), dtype=np.int64)
    for b, block in enumerate(blocks):
        if sp.issparse(block):
            block = sp.csr_array(block)
            arrays[f"{prefix}_{b}_csr_data"] = block.data
            arrays[f"{prefix}_{b}_csr_indices"] = block.indices
            arrays[f"{prefix}_{b}_csr_indptr"] = block.indptr
            arrays[f"{prefix}_{b}_csr_shape"] = np.asarray(block.shape, dtype=np.int64)
        else:
            arrays[f"{prefix}_{b}"] = np.asarray(block)


def _unblocks(prefix, arrays):
    out = []
    for b in range(int(arrays[f"{prefix}_count"])):
        if f"{prefix}_{b}" in arrays:
            out.append(arrays[f"{prefix}_{b}"])
        else:
            shape = tuple(int(v) for v in arrays[f"{prefix}_{b}_csr_shape"])
            out.append(
                sp.csr_array(
                    (
                        arrays[f"{prefix}_{b}_csr_data"],
                        arrays[f"{prefix}_{b}_csr_indices"],
                        arrays[f"{prefix}_{b}_csr_indptr"],
                    ),
                    shape=shape,
                )
            )
    return out


def write(path, piece, y):
    """Write one encoded partition (its piece and target) to ``path``: a new 0600 file written
    whole, then renamed into place (a concurrent reader never sees half a file).

    Parameters
    ----------
    path : str
    piece : Piece
    y : ndarray or None
    """
    arrays = {"n": np.asarray(piece.n, dtype=np.int64)}
    _blocks("fact", piece.fact, arrays)
    for t, rows in piece.rows.items():
        arrays[f"rows_{t}"] = np.asarray(rows)
    for t, blocks in piece.local.items():
        _blocks(f"local_{t}", blocks, arrays)
    for t, subset in piece.subset.items():
        arrays[f"subset_{t}"] = np.asarray(subset)
    if y is not None:
        arrays["y"] = np.asarray(y)
    partial = f"{path}.{uuid.uuid4().hex}.partial"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as file:
            np.savez(file, **arrays)
        os.replace(partial, path)
    except BaseException:
        if os.path.lexists(partial):
            os.unlink(partial)
        raise


def read(path, tables):
    """The partition in ``path`` as ``(piece, y)``, or None where there is no usable file (none
    yet, or one that does not parse: it is then read from Parquet again and rewritten).

    Parameters
    ----------
    path : str
    tables : iterable of int
        The layout's table indices (the keys of the piece's index vectors).

    Returns
    -------
    tuple or None

    Raises
    ------
    PermissionError
        If the file is a link, another user's, or writable by others.
    """
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise PermissionError(
            f"the cached partition {path} cannot be opened safely ({error}); refusing it"
        ) from None
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode) or not _ours(info):
            raise PermissionError(
                f"the cached partition {path} is not a private file of this user (mode "
                f"{stat.filemode(info.st_mode)}, owner uid {info.st_uid}); refusing to read it"
            )
        try:
            with np.load(file, allow_pickle=False) as stored:
                arrays = {name: stored[name] for name in stored.files}
            rows = {t: arrays[f"rows_{t}"] for t in tables if f"rows_{t}" in arrays}
            local = {
                t: _unblocks(f"local_{t}", arrays) for t in tables if f"local_{t}_count" in arrays
            }
            subset = {t: arrays[f"subset_{t}"] for t in tables if f"subset_{t}" in arrays}
            piece = Piece(int(arrays["n"]), _unblocks("fact", arrays), rows, local, subset)
        except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile, zlib.error):
            return None
    return piece, arrays.get("y")
