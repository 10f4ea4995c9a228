"""Data-integration metadata as plain files: ``metadata.json`` + ``indices.npz`` (+ sources).

The metadata of a target table is everything but the numbers: its shape and column names, and per
part the name, source shape, index vector (absent = -1; identity stored as such) and mapping
vector. Sources are written beside it only when asked (``source_<p>.npy`` for dense,
``source_<p>.npz`` for sparse), so a data-integration scenario can be stored under ``metadata/``
and reused on new data.
"""
import json
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import scipy.sparse as sp

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

    def save(self, folder, sources=None):
        """Write the metadata (and the sources, if given) into ``folder``.

        Parameters
        ----------
        folder : str or Path
            Created if missing; gets ``metadata.json``, ``indices.npz`` and, with sources,
            ``source_<p>.npy`` (dense) or ``source_<p>.npz`` (sparse).
        sources : list of 2-D host arrays, optional
            The part sources, in part order.
        """
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        arrays = {f"cols_{p}": np.asarray(c) for p, c in enumerate(self.cols)}
        arrays.update({f"rows_{p}": np.asarray(r) for p, r in enumerate(self.rows) if r is not None})
        if self.scale is not None:
            arrays["scale"], arrays["shift"] = np.asarray(self.scale), np.asarray(self.shift)
        np.savez_compressed(folder / "indices.npz", **arrays)
        header = {
            "format": FORMAT, "version": VERSION, "shape": list(map(int, self.shape)),
            "columns": self.columns, "extra": self.extra, "sources_saved": sources is not None,
            "parts": [{"name": name, "source_shape": list(map(int, shape)), "identity": r is None}
                      for name, shape, r in zip(self.names, self.source_shapes, self.rows)],
        }
        (folder / "metadata.json").write_text(json.dumps(header, indent=1))
        for p, source in enumerate(sources or ()):
            if sp.issparse(source):
                sp.save_npz(folder / f"source_{p}.npz", sp.csr_array(source))
            else:
                np.save(folder / f"source_{p}.npy", np.asarray(source))

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
        header = read_header(header_path)
        n, d = header["shape"]
        parts = header["parts"]
        with _npz(folder / "indices.npz") as arrays:
            check = _ArrayCheck(folder / "indices.npz", arrays)
            check.expected({f"cols_{p}" for p in range(len(parts))}
                           | {f"rows_{p}" for p, part in enumerate(parts) if not part["identity"]}
                           | ({"scale", "shift"} if {"scale", "shift"} & set(arrays.files) else set()))
            rows, cols = [], []
            for p, part in enumerate(parts):
                n_p, d_p = part["source_shape"]
                if part["identity"]:
                    if n_p != n:
                        raise ValueError(f"{header_path}: parts[{p}] ({part['name']!r}) is the identity "
                                         f"but its source_shape has {n_p} rows, not shape[0] = {n}")
                    rows.append(None)
                else:
                    rows.append(check.index_vector(f"rows_{p}", n, -1, n_p, part["name"]))
                cols.append(check.index_vector(f"cols_{p}", d_p, 0, d, part["name"], injective=True))
            scale = shift = None
            if "scale" in arrays.files:
                finite = not header["extra"].get("nonfinite", False)
                scale, shift = (check.affine(name, d, finite) for name in ("scale", "shift"))
        return cls(tuple(header["shape"]), [part["name"] for part in parts],
                   [tuple(part["source_shape"]) for part in parts], rows, cols,
                   header["columns"], scale, shift, header["extra"])

    @staticmethod
    def load_sources(folder):
        """The sources saved beside the metadata in ``folder``, checked against the header.

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
            records, or does not hold numbers.
        """
        folder = Path(folder)
        header = read_header(folder / "metadata.json")
        if not header["sources_saved"]:
            raise FileNotFoundError(f"{folder} holds metadata only; pass the sources explicitly")
        return [_load_source(folder, p, tuple(part["source_shape"])) for p, part in enumerate(header["parts"])]


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
    if not path.exists():
        raise FileNotFoundError(f"no ilargi metadata in {path.parent} (missing {path.name})")
    try:
        header = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:  # truncated or foreign
        raise ValueError(f"{path} is not valid JSON (truncated or not ilargi metadata): {error}") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        found = header.get("format") if isinstance(header, dict) else type(header).__name__
        raise ValueError(f"{path} is not ilargi metadata (format {found!r})")
    if header.get("version") != VERSION:
        raise ValueError(f"{path}: version {header.get('version')!r} is not supported (expected {VERSION})")
    field_ = _Fields(path, header)
    n, d = field_.shape("shape")
    columns = header.get("columns")
    if columns is not None and (not isinstance(columns, list) or len(columns) != d
                                or not all(isinstance(c, str) for c in columns)):
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
    return {**header, "shape": [n, d], "columns": columns, "extra": extra}


class _Fields:
    """Checks of one JSON object's fields, naming the file and the field in every error."""

    def __init__(self, path, values, prefix=""):
        if not isinstance(values, dict):
            raise ValueError(f"{path}: {prefix or 'the header'} must be an object, got {type(values).__name__}")
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
            raise ValueError(f"{self.path}: field {self._name(key)!r} must be a {kind.__name__}, "
                             f"got {type(value).__name__}")
        return value

    def shape(self, key):
        value = self.typed(key, list)
        if len(value) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
            raise ValueError(f"{self.path}: field {self._name(key)!r} must be two non-negative integers, "
                             f"got {value!r}")
        return value


class _npz:
    """``np.load`` of an npz file (no pickles) as a context manager; errors name the file."""

    def __init__(self, path):
        self.path = path

    def __enter__(self):
        if not self.path.exists():
            raise FileNotFoundError(f"no ilargi metadata arrays: {self.path} is missing")
        try:
            self.arrays = np.load(self.path, allow_pickle=False)
            if not hasattr(self.arrays, "files"):
                raise ValueError("a single array, not an npz archive")
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:
            raise ValueError(f"{self.path} is not an npz archive of index arrays (truncated or "
                             f"foreign file): {error}") from None
        return self.arrays

    def __exit__(self, *exc):
        self.arrays.close()


class _ArrayCheck:
    """Reads arrays of an npz archive, each checked against the header."""

    def __init__(self, path, arrays):
        self.path, self.arrays = path, arrays

    def expected(self, names):
        found = set(self.arrays.files)
        if found - names:
            raise ValueError(f"{self.path}: unexpected arrays {sorted(found - names)} (expected {sorted(names)})")
        if names - found:
            raise ValueError(f"{self.path}: missing arrays {sorted(names - found)}")

    def read(self, name):
        try:
            return self.arrays[name]
        except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as error:
            raise ValueError(f"{self.path}: array {name!r} cannot be read (truncated file?): {error}") from None

    def index_vector(self, name, length, low, high, part, injective=False):
        """An integer vector of ``length`` values in [low, high), unique if ``injective``."""
        values = self.read(name)
        where = f"{self.path}: array {name!r} (part {part!r})"
        if values.ndim != 1 or values.dtype.kind not in "iu":
            raise ValueError(f"{where} must be a 1-D integer vector, got dtype {values.dtype} and shape "
                             f"{values.shape}")
        if len(values) != length:
            raise ValueError(f"{where} has {len(values)} entries; the header needs {length}")
        if len(values) and (int(values.min()) < low or int(values.max()) >= high):
            raise ValueError(f"{where} holds values outside [{low}, {high}): min {int(values.min())}, "
                             f"max {int(values.max())}")
        if injective and len(np.unique(values)) != len(values):
            raise ValueError(f"{where} maps two source columns to one target column; a mapping must be "
                             "injective")
        return values.astype(np.int64, copy=False)

    def affine(self, name, length, finite):
        """A float vector of ``length`` values, finite unless the metadata says otherwise."""
        values = self.read(name)
        where = f"{self.path}: array {name!r}"
        if values.ndim != 1 or values.dtype.kind != "f" or len(values) != length:
            raise ValueError(f"{where} must be a 1-D float vector of {length} values, got dtype "
                             f"{values.dtype} and shape {values.shape}")
        if finite and not np.isfinite(values).all():
            raise ValueError(f"{where} holds NaN or inf")
        return values


def _load_source(folder, p, shape):
    dense, sparse = folder / f"source_{p}.npy", folder / f"source_{p}.npz"
    path = dense if dense.exists() else sparse
    if not path.exists():
        raise FileNotFoundError(f"{folder}: the source of part {p} is missing (source_{p}.npy or .npz)")
    try:
        source = np.load(path, allow_pickle=False) if path == dense else sp.load_npz(path)
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error) as error:
        raise ValueError(f"{path} is not a saved source (truncated or foreign file): {error}") from None
    if tuple(source.shape) != shape:
        raise ValueError(f"{path} has shape {tuple(source.shape)}; the header records {shape}")
    if np.dtype(source.dtype).kind not in "biuf":
        raise ValueError(f"{path} holds {source.dtype} values; a source holds numbers")
    return source
