"""Data-integration metadata as plain files: ``metadata.json`` + ``indices.npz`` (+ sources).

The metadata of a target table is everything but the numbers: its shape and column names, and per
part the name, source shape, index vector (absent = -1; identity stored as such) and mapping
vector. Sources are written beside it only when asked (``source_<p>.npy`` for dense,
``source_<p>.npz`` for sparse), so a data-integration scenario can be stored under ``metadata/``
and reused on new data.
"""
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.sparse as sp

FORMAT = "ilargi-metadata"
VERSION = 1


@dataclass
class Metadata:
    """Shape, column names and, per part: name, source shape, rows (None = identity), cols."""

    shape: tuple
    names: list
    source_shapes: list
    rows: list
    cols: list
    columns: list = None
    scale: np.ndarray = None
    shift: np.ndarray = None
    extra: dict = field(default_factory=dict)

    def save(self, folder, sources=None):
        """Write the metadata (and ``sources``, a list of matrices, if given) into ``folder``."""
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
        folder = Path(folder)
        header_path = folder / "metadata.json"
        if not header_path.exists():
            raise FileNotFoundError(f"no ilargi metadata in {folder} (missing metadata.json)")
        header = json.loads(header_path.read_text())
        if header.get("format") != FORMAT:
            raise ValueError(f"{header_path} is not ilargi metadata (format {header.get('format')!r})")
        with np.load(folder / "indices.npz") as arrays:
            parts = header["parts"]
            rows = [None if part["identity"] else arrays[f"rows_{p}"] for p, part in enumerate(parts)]
            cols = [arrays[f"cols_{p}"] for p in range(len(parts))]
            scale = arrays["scale"] if "scale" in arrays else None
            shift = arrays["shift"] if "shift" in arrays else None
        return cls(tuple(header["shape"]), [part["name"] for part in parts],
                   [tuple(part["source_shape"]) for part in parts], rows, cols,
                   header.get("columns"), scale, shift, header.get("extra", {}))

    @staticmethod
    def load_sources(folder):
        """The sources saved beside the metadata in ``folder`` (FileNotFoundError if none)."""
        folder = Path(folder)
        header = json.loads((folder / "metadata.json").read_text())
        if not header.get("sources_saved"):
            raise FileNotFoundError(f"{folder} holds metadata only; pass the sources explicitly")
        out = []
        for p in range(len(header["parts"])):
            dense = folder / f"source_{p}.npy"
            out.append(np.load(dense) if dense.exists() else sp.load_npz(folder / f"source_{p}.npz"))
        return out
