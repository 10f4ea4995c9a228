"""Data-integration metadata as plain files: ``metadata.json`` + ``indices.npz`` (+ sources).

The metadata of a target table is everything but the numbers: its shape and column names, and per
part the name, source shape, index vector (absent = -1; identity stored as such) and mapping
vector. Sources are written beside it only when asked (``source_<p>.npy`` for dense,
``source_<p>.npz`` for sparse), so a data-integration scenario can be stored under ``metadata/``
and reused on new data.

A saved folder is data, never instructions, and one save is one whole:

* a save writes every member into a new private folder beside the target, then puts it in place
  of the target by renames (:func:`.saving.staged`): nothing is written through a link found in the
  target, no member of an earlier save stays behind, and a reader finds one save or the other;
* a load reads only the members the header names, each one a regular file inside the folder
  (:func:`member`: a symbolic link is followed only to a file inside the folder), opened without
  following a link;
* every array is read header first (shape and dtype from the ``.npy`` header, checked against
  ``metadata.json``) and only then its data, never as a pickle.
"""

import errno
import io
import json
import os
import stat
import threading
import uuid
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import scipy.sparse as sp

from .saving import staged

FORMAT = "ilargi-metadata"
VERSION = 1


@dataclass
class Metadata:
    """The data-integration metadata of a target table: everything but the source values.

    Parameters
    ----------
    shape : tuple of int
        (n, d) of the target table.
    names : list of str
        Part names.
    source_shapes : list of tuple of int
        (n_p, d_p) of each part's source.
    rows : list of integer arrays or None
        Per part, the index vector (-1 = absent), None for the identity.
    cols : list of integer arrays
        Per part, the target column of each source column.
    columns : list of str, optional
        The d column names.
    scale, shift : ndarray, optional
        The affine state a, b of T = T₀·diag(a) + 1·bᵀ (both or neither).
    extra : dict, optional
        Flags needed for a faithful reload (``"transposed"``, ``"derived"``, ``"nonfinite"``).

    Examples
    --------
    >>> import tempfile
    >>> import numpy as np
    >>> meta = Metadata((3, 2), ["fact", "dim"], [(3, 1), (2, 1)],
    ...                 [None, np.array([0, 1, -1])], [np.array([0]), np.array([1])])
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     meta.save(folder)
    ...     back = Metadata.load(folder)
    >>> back.shape, back.names, back.rows[1].tolist()
    ((3, 2), ['fact', 'dim'], [0, 1, -1])
    """

    shape: tuple
    names: list
    source_shapes: list
    rows: list
    cols: list
    columns: Sequence[str] | None = None
    scale: np.ndarray | None = None
    shift: np.ndarray | None = None
    extra: dict = field(default_factory=dict)

    def save(self, folder, sources=None, write=None):
        """Write the metadata (and the sources, if given) into ``folder``, as a whole.

        The members are written into a new private folder beside ``folder`` and then put in its
        place (:func:`.saving.staged`): an earlier save's members never stay behind, nothing is written
        through a link found in ``folder``, and a reader finds one save or the other.

        Parameters
        ----------
        folder : str or Path
            Created if missing (with its parents); replaced if it holds an earlier save. A
            folder that holds anything else (or a link) is refused, never emptied.
        sources : list of 2-D host arrays, optional
            The part sources, in part order: ``source_<p>.npy`` (dense) or ``source_<p>.npz``
            (sparse, CSR).
        write : callable, optional
            Called with the staging folder to add members of the caller's own (a Table's
            Parquet sources under ``sources/``) before the folder is put in place.

        Raises
        ------
        ValueError
            If ``folder`` is a file, holds a link or files no save writes.
        """
        with staged(folder) as stage:
            self._write(stage, sources)
            if write is not None:
                write(stage)

    def _write(self, folder, sources):
        arrays = {f"cols_{p}": np.asarray(c) for p, c in enumerate(self.cols)}
        arrays.update(
            {f"rows_{p}": np.asarray(r) for p, r in enumerate(self.rows) if r is not None}
        )
        if self.scale is not None:
            arrays["scale"], arrays["shift"] = np.asarray(self.scale), np.asarray(self.shift)
        np.savez_compressed(folder / "indices.npz", **arrays)
        sources = None if sources is None else list(sources)
        files = [
            f"source_{p}.{'npz' if sp.issparse(source) else 'npy'}"
            for p, source in enumerate(sources or ())
        ]
        header = {
            "format": FORMAT,
            "version": VERSION,
            "save": uuid.uuid4().hex,
            "shape": list(map(int, self.shape)),
            "columns": self.columns,
            "extra": self.extra,
            "sources_saved": sources is not None,
            "parts": [
                {
                    "name": name,
                    "source_shape": list(map(int, shape)),
                    "identity": r is None,
                    **({"source_file": files[p]} if sources is not None else {}),
                }
                for p, (name, shape, r) in enumerate(zip(self.names, self.source_shapes, self.rows))
            ],
        }
        (folder / "metadata.json").write_text(json.dumps(header, indent=1))
        for source, name in zip(sources or (), files):
            if sp.issparse(source):
                sp.save_npz(folder / name, sp.csr_array(source))
            else:
                np.save(folder / name, np.asarray(source), allow_pickle=False)

    @classmethod
    def load(cls, folder):
        """The metadata saved in ``folder`` by :meth:`save`, validated against its header.

        Nothing in the files is trusted: the header (``metadata.json``) must have the fields and
        types :meth:`save` writes, and every array of ``indices.npz`` must agree with it -- integer
        index vectors of the right length and range, injective mappings inside the target's
        columns, finite float affine vectors of length d -- so a truncated, edited or foreign file
        fails here, naming the file and the field, not later in a kernel.

        Parameters
        ----------
        folder : str or Path

        Returns
        -------
        Metadata

        Raises
        ------
        FileNotFoundError
            If ``folder`` has no ``metadata.json`` or no ``indices.npz``.
        ValueError
            If a file is not ilargi metadata, is truncated, or disagrees with the header: the
            message names the file and the field.
        """
        folder = Path(folder)
        header_path = folder / "metadata.json"
        with _Pinned(folder) as pinned:  # one save, even if another replaces the folder
            header = _read_header(pinned, "metadata.json")
            _LOADED.__dict__.setdefault("saves", {})[_key(folder)] = header.get("save")
            return cls._from_header(pinned, header, header_path)

    @classmethod
    def _from_header(cls, pinned, header, header_path):
        folder = pinned.path
        n, d = header["shape"]
        parts = header["parts"]
        with _Archive(pinned, "indices.npz") as arrays:
            check = _ArrayCheck(folder / "indices.npz", arrays)
            check.expected(
                {f"cols_{p}" for p in range(len(parts))}
                | {f"rows_{p}" for p, part in enumerate(parts) if not part["identity"]}
                | ({"scale", "shift"} if {"scale", "shift"} & set(arrays.files) else set())
            )
            rows, cols = [], []
            for p, part in enumerate(parts):
                n_p, d_p = part["source_shape"]
                if part["identity"]:
                    if n_p != n:
                        raise ValueError(
                            f"{header_path}: parts[{p}] ({part['name']!r}) is the identity "
                            f"but its source_shape has {n_p} rows, not shape[0] = {n}"
                        )
                    rows.append(None)
                else:
                    rows.append(check.index_vector(f"rows_{p}", n, -1, n_p, part["name"]))
                cols.append(
                    check.index_vector(f"cols_{p}", d_p, 0, d, part["name"], injective=True)
                )
            scale = shift = None
            if "scale" in arrays.files:
                finite = not header["extra"].get("nonfinite", False)
                scale, shift = (check.affine(name, d, finite) for name in ("scale", "shift"))
        return cls(
            tuple(header["shape"]),
            [part["name"] for part in parts],
            [tuple(part["source_shape"]) for part in parts],
            rows,
            cols,
            header["columns"],
            scale,
            shift,
            header["extra"],
        )

    @staticmethod
    def load_sources(folder):
        """The sources saved beside the metadata in ``folder``, checked against the header.

        After :meth:`load` of the same folder in the same thread (as
        :meth:`ilargi.NormalizedMatrix.load` does), sources of another save than those metadata
        (the folder replaced in between) are refused.

        Parameters
        ----------
        folder : str or Path

        Returns
        -------
        list of ndarray or scipy.sparse.csr_array
            In part order.

        Raises
        ------
        FileNotFoundError
            If the metadata was saved without sources, or a source file is missing.
        ValueError
            If a source file is truncated, not an array, or has another shape than the header
            records, or does not hold numbers; if it is a link leading outside the folder.
        """
        folder = Path(folder)
        with _Pinned(folder) as pinned:
            header = _read_header(pinned, "metadata.json")
            # NormalizedMatrix.load reads the metadata, then the sources: from one save only
            loaded = _LOADED.__dict__.setdefault("saves", {}).pop(_key(folder), header.get("save"))
            if loaded != header.get("save"):
                raise ValueError(
                    f"{folder} was replaced by another save while it was being "
                    "loaded (its metadata and its sources come from two saves); "
                    "load it again"
                )
            if not header["sources_saved"]:
                raise FileNotFoundError(
                    f"{folder} holds metadata only; pass the sources explicitly"
                )
            return [
                _load_source(pinned, p, tuple(part["source_shape"]), part.get("source_file"))
                for p, part in enumerate(header["parts"])
            ]


# ---------------------------------------------------------------------------------------- validation
def read_header(path):
    """``metadata.json``, parsed and checked field by field (the types :meth:`Metadata.save` writes).

    Parameters
    ----------
    path : Path
        The header file.

    Returns
    -------
    dict
        The header, with ``columns`` (None or a list of d strings) and ``extra`` (a dict) filled in.

    Raises
    ------
    FileNotFoundError
        If the file is missing.
    ValueError
        If it is not JSON, not ilargi metadata, or a field is missing or of the wrong type.
    """
    path = Path(path)
    with _Pinned(path.parent) as pinned:
        return _read_header(pinned, path.name)


def _read_header(pinned, name):
    path = pinned.path / name
    if not pinned.exists(name):
        raise FileNotFoundError(f"no ilargi metadata in {path.parent} (missing {path.name})")
    try:
        with pinned.open(name) as file:
            header = json.loads(file.read().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:  # truncated or foreign
        raise ValueError(
            f"{path} is not valid JSON (truncated or not ilargi metadata): {error}"
        ) from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        found = header.get("format") if isinstance(header, dict) else type(header).__name__
        raise ValueError(f"{path} is not ilargi metadata (format {found!r})")
    if header.get("version") != VERSION:
        raise ValueError(
            f"{path}: version {header.get('version')!r} is not supported (expected {VERSION})"
        )
    field_ = _Fields(path, header)
    n, d = field_.shape("shape")
    columns = header.get("columns")
    if columns is not None and (
        not isinstance(columns, list)
        or len(columns) != d
        or not all(isinstance(c, str) for c in columns)
    ):
        raise ValueError(f"{path}: field 'columns' must be null or a list of {d} strings")
    extra = header.get("extra", {})
    if not isinstance(extra, dict):
        raise ValueError(f"{path}: field 'extra' must be an object, got {type(extra).__name__}")
    field_.typed("sources_saved", bool, default=False)
    parts = field_.typed("parts", list)
    if not parts:
        raise ValueError(f"{path}: field 'parts' is empty; a target table needs at least one part")
    for p, part in enumerate(parts):
        where = _Fields(path, part, f"parts[{p}]")
        where.typed("name", str)
        where.shape("source_shape")
        where.typed("identity", bool)
        if "source_file" in part:  # a name this module writes, never a path read from a file
            file = where.typed("source_file", str)
            if file not in (f"source_{p}.npy", f"source_{p}.npz"):
                raise ValueError(
                    f"{path}: field 'parts[{p}].source_file' is {file!r}; expected "
                    f"'source_{p}.npy' or 'source_{p}.npz'"
                )
    return {**header, "shape": [n, d], "columns": columns, "extra": extra}


class _Fields:
    """Checks of one JSON object's fields, naming the file and the field in every error."""

    def __init__(self, path, values, prefix=""):
        if not isinstance(values, dict):
            raise ValueError(
                f"{path}: {prefix or 'the header'} must be an object, got {type(values).__name__}"
            )
        self.path, self.values, self.prefix = path, values, prefix

    def _name(self, key):
        return f"{self.prefix}.{key}" if self.prefix else key

    def typed(self, key, kind, default=None):
        if key not in self.values:
            if default is not None:
                return default
            raise ValueError(f"{self.path}: field {self._name(key)!r} is missing")
        value = self.values[key]
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise ValueError(
                f"{self.path}: field {self._name(key)!r} must be a {kind.__name__}, "
                f"got {type(value).__name__}"
            )
        return value

    def shape(self, key):
        value = self.typed(key, list)
        if len(value) != 2 or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
        ):
            raise ValueError(
                f"{self.path}: field {self._name(key)!r} must be two non-negative integers, "
                f"got {value!r}"
            )
        return value


# -------------------------------------------------------------------------------- members
def member(folder, name):
    """The path of a member of a saved folder that may be read: a regular file inside it.

    A symbolic link (the member itself, or a subfolder on its way) is followed only where it
    leads to a file inside the folder; anything else is refused before a byte is read.

    Parameters
    ----------
    folder : str or Path
        The saved folder.
    name : str
        The member's path relative to the folder (``"indices.npz"``, ``"sources/x.parquet"``).

    Returns
    -------
    Path
        The member's resolved path (no link left in it).

    Raises
    ------
    FileNotFoundError
        If the member does not exist.
    ValueError
        If it leads outside the folder, or is not a regular file.
    """
    folder = Path(folder)
    path = folder / name
    root = folder.resolve()
    resolved = path.resolve()
    if not resolved.is_relative_to(root):  # said first: whether a file is there is none of ours
        raise ValueError(
            f"{path} leads outside {folder} (to {resolved}); a saved folder's "
            "members are read only inside it"
        )
    if not os.path.lexists(path) or not os.path.lexists(resolved):
        raise FileNotFoundError(f"{path} is missing")
    if not resolved.is_file():
        raise ValueError(f"{path} is not a regular file")
    return resolved


def open_member(folder, name):
    """A member of a saved folder (see :func:`member`) opened for reading, without following a
    link in its last component (a link put there after the check is not followed either).

    Parameters
    ----------
    folder : str or Path
    name : str

    Returns
    -------
    file object
        Binary, positioned at the start.
    """
    with _Pinned(folder) as pinned:
        return pinned.open(name)


class _Pinned:
    """A saved folder held open for one load: every member is opened relative to the folder
    itself (``dir_fd``), so a save that replaces the folder meanwhile is not mixed in (the load
    reads the save it started on, or fails to find a member it removed)."""

    def __init__(self, folder):
        self.path = Path(folder)
        self.fd = None

    def __enter__(self):
        if os.open in os.supports_dir_fd and hasattr(os, "O_DIRECTORY"):
            try:
                self.fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
            except (FileNotFoundError, NotADirectoryError):
                raise FileNotFoundError(
                    f"no ilargi metadata in {self.path} (no such folder)"
                ) from None
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)

    def exists(self, name):
        """Whether the folder has an entry ``name`` (a link counts, wherever it leads)."""
        if self.fd is None or "/" in name:
            return os.path.lexists(self.path / name)
        try:
            os.lstat(name, dir_fd=self.fd)
        except FileNotFoundError:
            return False
        return True

    def open(self, name):
        """Member ``name`` opened for reading: a regular file, never through a link that leads
        outside the folder (:func:`member`)."""
        where = self.path / name
        fd = None
        if self.fd is not None and "/" not in name:
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=self.fd)
            except FileNotFoundError:
                raise FileNotFoundError(f"{where} is missing") from None
            except OSError as error:
                if error.errno != errno.ELOOP:  # a link: followed only to a file inside
                    raise
        if fd is None:
            path = member(self.path, name)
            try:
                fd = os.open(
                    path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
                )
            except OSError as error:
                if error.errno == errno.ELOOP:
                    raise ValueError(f"{where} became a link while it was opened") from None
                raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise ValueError(f"{where} is not a regular file")
        return os.fdopen(fd, "rb")


# What Metadata.load last read of a folder, per thread: which save (its "save" token)
_LOADED = threading.local()


def _key(folder):
    return str(Path(folder).absolute())


def _npy_header(file, where, what="array"):
    """(shape, fortran order, dtype) from an ``.npy`` header, the data not read."""
    try:
        version = np.lib.format.read_magic(file)
        read = {
            (1, 0): np.lib.format.read_array_header_1_0,
            (2, 0): np.lib.format.read_array_header_2_0,
        }.get(version)
        if read is None:
            raise ValueError(f"npy format version {version}")
        return read(file)
    except (OSError, ValueError, EOFError, SyntaxError, zlib.error, zipfile.BadZipFile) as error:
        raise ValueError(
            f"{where} is not a saved {what} (truncated or foreign file): {error}"
        ) from None


def _read_npy(file, where, check, what="array"):
    """An array from an open ``.npy`` stream: its header read and given to ``check(shape,
    dtype)`` (which raises to refuse) before any data is read; never a pickle."""
    start = file.tell()
    shape, _, dtype = _npy_header(file, where, what)
    if dtype.hasobject:
        raise ValueError(
            f"{where} is not a saved {what}: it holds Python objects, which are never unpickled"
        )
    check(tuple(shape), dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    try:
        size = os.fstat(file.fileno()).st_size
    except (OSError, ValueError, io.UnsupportedOperation):  # a member of an archive: its reads
        size = None  # stop at the checked shape
    if size is not None:
        remaining = size - file.tell()
        if remaining != nbytes:
            raise ValueError(
                f"{where} is truncated or has extra data: {remaining} bytes of data "
                f"for an array of {nbytes}"
            )
    file.seek(start)
    try:
        return np.lib.format.read_array(file, allow_pickle=False)
    except (OSError, ValueError, EOFError, zlib.error, zipfile.BadZipFile) as error:
        raise ValueError(f"{where} cannot be read (truncated file?): {error}") from None


class _Archive:
    """An npz archive of a saved folder, read member by member, each member's header checked
    before its data (a lengthened array is refused before it is read)."""

    def __init__(self, pinned, name):
        self.pinned, self.name = pinned, name
        self.path = pinned.path / name

    def __enter__(self):
        if not self.pinned.exists(self.name):
            raise FileNotFoundError(f"no ilargi metadata arrays: {self.path} is missing")
        self._file = self.pinned.open(self.name)
        try:
            self._zip = zipfile.ZipFile(self._file)
            names = self._zip.namelist()
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:
            self._file.close()
            raise ValueError(
                f"{self.path} is not an npz archive of index arrays (truncated or "
                f"foreign file): {error}"
            ) from None
        self.files = [n[:-4] for n in names if n.endswith(".npy")]
        return self

    def __exit__(self, *exc):
        self._zip.close()
        self._file.close()

    def read(self, name, check):
        """Member ``name`` after ``check(shape, dtype)`` accepted its header."""
        where = f"{self.path}: array {name!r}"
        try:
            stream = self._zip.open(f"{name}.npy")
        except (OSError, KeyError, zipfile.BadZipFile, RuntimeError) as error:
            raise ValueError(f"{where} cannot be read (truncated file?): {error}") from None
        with stream:
            return _read_npy(stream, where, check)


class _ArrayCheck:
    """Reads arrays of an npz archive, each checked against the header."""

    def __init__(self, path, arrays):
        self.path, self.arrays = path, arrays

    def expected(self, names):
        found = set(self.arrays.files)
        if found - names:
            raise ValueError(
                f"{self.path}: unexpected arrays {sorted(found - names)} (expected {sorted(names)})"
            )
        if names - found:
            raise ValueError(f"{self.path}: missing arrays {sorted(names - found)}")

    def index_vector(self, name, length, low, high, part, injective=False):
        """An integer vector of ``length`` values in [low, high), unique if ``injective``."""
        where = f"{self.path}: array {name!r} (part {part!r})"

        def check(shape, dtype):  # from the header, before the data is read
            if len(shape) != 1 or dtype.kind not in "iu":
                raise ValueError(
                    f"{where} must be a 1-D integer vector, got dtype {dtype} and shape {shape}"
                )
            if shape[0] != length:
                raise ValueError(f"{where} has {shape[0]} entries; the header needs {length}")

        values = self.arrays.read(name, check)
        if len(values) and (int(values.min()) < low or int(values.max()) >= high):
            raise ValueError(
                f"{where} holds values outside [{low}, {high}): min {int(values.min())}, "
                f"max {int(values.max())}"
            )
        if injective and len(np.unique(values)) != len(values):
            raise ValueError(
                f"{where} maps two source columns to one target column; a mapping must be injective"
            )
        return values.astype(np.int64, copy=False)

    def affine(self, name, length, finite):
        """A float vector of ``length`` values, finite unless the metadata says otherwise."""
        where = f"{self.path}: array {name!r}"

        def check(shape, dtype):
            if len(shape) != 1 or dtype.kind != "f" or shape[0] != length:
                raise ValueError(
                    f"{where} must be a 1-D float vector of {length} values, got "
                    f"dtype {dtype} and shape {shape}"
                )

        values = self.arrays.read(name, check)
        if finite and not np.isfinite(values).all():
            raise ValueError(f"{where} holds NaN or inf")
        return values


def _load_source(pinned, p, shape, file=None):
    """The saved source of part ``p``: the file the header names (a save before
    ``source_file`` was recorded: the one of ``source_<p>.npy`` and ``.npz`` that exists)."""
    folder = pinned.path
    if file is None:
        present = [
            f"source_{p}.{kind}" for kind in ("npy", "npz") if pinned.exists(f"source_{p}.{kind}")
        ]
        if len(present) > 1:
            raise ValueError(
                f"{folder}: both {present[0]} and {present[1]} exist and the header "
                f"does not say which one is the source of part {p}; save again"
            )
        file = present[0] if present else None
    if file is None or not pinned.exists(file):
        raise FileNotFoundError(
            f"{folder}: the source of part {p} is missing (source_{p}.npy or .npz)"
        )
    path = folder / file

    def check(found, dtype):
        if found != shape:
            raise ValueError(f"{path} has shape {found}; the header records {shape}")
        if dtype.kind not in "biuf":
            raise ValueError(f"{path} holds {dtype} values; a source holds numbers")

    with pinned.open(file) as stream:
        if file.endswith(".npy"):
            return _read_npy(stream, path, check, "source")
        return _read_csr(stream, path, shape, check)


def _read_csr(stream, path, shape, check):
    """A CSR source saved by ``scipy.sparse.save_npz``, every member's header checked against
    the recorded shape before its data is read, and the structure fully checked after."""
    try:
        archive = zipfile.ZipFile(stream)
        names = set(archive.namelist())
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:
        raise ValueError(
            f"{path} is not a saved source (truncated or foreign file): {error}"
        ) from None
    expected = {f"{n}.npy" for n in ("data", "indices", "indptr", "format", "shape")}
    if not expected <= names <= expected | {"_is_array.npy"}:  # _is_array: SciPy >= 1.11
        raise ValueError(
            f"{path} is not a saved source: members {sorted(names)}, expected {sorted(expected)}"
        )
    n, d = shape

    def member_array(name, check_member):
        try:
            with archive.open(f"{name}.npy") as member_stream:
                return _read_npy(member_stream, f"{path}: array {name!r}", check_member, "source")
        except (OSError, zipfile.BadZipFile, RuntimeError, zlib.error) as error:
            raise ValueError(f"{path} is not a saved source (truncated file?): {error}") from None

    def small(shape_, kinds):
        def check_small(found, dtype):
            if found != shape_ or dtype.kind not in kinds:
                raise ValueError(
                    f"{path} is not a saved source: a member has shape {found} and dtype {dtype}"
                )

        return check_small

    kind = member_array("format", small((), "SU")).item()
    kind = kind.decode("ascii", "replace") if isinstance(kind, bytes) else str(kind)
    if kind != "csr":
        raise ValueError(f"{path} holds a {kind} matrix; a saved sparse source is CSR")
    stored = tuple(int(v) for v in member_array("shape", small((2,), "iu")))
    check(stored, np.dtype(np.float64))  # the shape, before any n-sized array is read
    indptr = member_array("indptr", small((n + 1,), "iu"))
    nnz = int(indptr[-1]) if len(indptr) else 0
    if indptr[0] != 0 or np.any(np.diff(indptr) < 0) or nnz > n * d:
        raise ValueError(
            f"{path} is not a saved source: its row pointers are not those of a "
            f"{n} x {d} CSR matrix"
        )

    def values_check(found, dtype):
        check(shape, dtype)
        if found != (nnz,):
            raise ValueError(
                f"{path}: array 'data' has shape {found}; the row pointers need ({nnz},)"
            )

    data = member_array("data", values_check)
    indices = member_array("indices", small((nnz,), "iu"))
    matrix = sp.csr_array((data, indices, indptr), shape=shape)
    try:
        matrix.check_format(full_check=True)
    except ValueError as error:
        raise ValueError(f"{path} is not a saved source: {error}") from None
    return matrix
