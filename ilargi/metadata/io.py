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
    columns: list = None
    scale: np.ndarray = None
    shift: np.ndarray = None
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
        """The metadata saved in ``folder`` by :meth:`save`.

        Parameters
        ----------
        folder : str or Path

        Returns
        -------
        Metadata

        Raises
        ------
        FileNotFoundError
            If ``folder`` has no ``metadata.json``.
        ValueError
            If ``metadata.json`` is not ilargi metadata.
        """
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
        """The sources saved beside the metadata in ``folder``.

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
            If the metadata was saved without sources.
        """
        folder = Path(folder)
        header = json.loads((folder / "metadata.json").read_text())
        if not header.get("sources_saved"):
            raise FileNotFoundError(f"{folder} holds metadata only; pass the sources explicitly")
        out = []
        for p in range(len(header["parts"])):
            dense = folder / f"source_{p}.npy"
            out.append(np.load(dense) if dense.exists() else sp.load_npz(folder / f"source_{p}.npz"))
        return out
