"""The rows of one partition of a Dask-backed matrix, and the in-memory matrix built from them.

A partition holds the *fact-aligned* pieces of T for its target rows and nothing else: the blocks of
the identity-indicator sources (the fact table's rows), the index vector of every other table, and
the blocks of *local* tables (rows of a big dimension read by this partition only, e.g. the orders
of a lineitem partition's key range). Dimension sources live once per worker (broadcast) and are
shared by every partition. :func:`build` turns a :class:`Piece`, the broadcast dimensions and the
:class:`Layout` into an ordinary in-memory :class:`~ilargi.rewriter.NormalizedMatrix` of the
partition's rows, whose operators are the CPU backend's kernels; row selections take rows of pieces
(:func:`take`, :func:`concat`) before anything is built.
"""

import numpy as np
import scipy.sparse as sp

from ilargi.metadata import Indicator, Part
from ilargi.rewriter import NormalizedMatrix

FACT, BROADCAST, LOCAL = "fact", "broadcast", "local"


class PartSpec:
    """One part of T₀ as a partition assembles it: its name, the table it reads (an index into
    :attr:`Layout.kinds`), which block of that table is its source, its columns and finiteness,
    and for a broadcast source its largest absolute value (scanned once, not per partition)."""

    __slots__ = ("name", "table", "block", "cols", "finite", "absmax")

    def __init__(self, name, table, block, cols, finite=True, absmax=None):
        self.name, self.table, self.block = str(name), int(table), int(block)
        self.cols, self.finite = np.asarray(cols, dtype=np.intp), bool(finite)
        self.absmax = None if absmax is None else float(absmax)  # of a broadcast source

    def __getstate__(self):
        return {key: getattr(self, key) for key in self.__slots__}

    def __setstate__(self, state):
        for key, value in state.items():
            setattr(self, key, value)


class Layout:
    """How every partition's matrix is assembled (small; shipped inside each task).

    Parameters
    ----------
    kinds : list of str
        Per table: ``"fact"`` (identity indicator, blocks hold the partition's rows),
        ``"broadcast"`` (the source lives on every worker, the partition holds an index vector)
        or ``"local"`` (the partition holds both the index vector and its own source rows).
    n_source : list of int or None
        Rows of each broadcast table's source (None for the others).
    parts : list of PartSpec
        The parts, in the order of the in-memory matrix.
    d : int
        Columns of T.
    columns : list of str or None
        Column names.
    scale, shift : array of length d or None
        The affine state of every partition's matrix.
    derived : bool
        Whether the sources hold values computed by an elementwise function.
    """

    def __init__(
        self, kinds, n_source, parts, d, columns=None, scale=None, shift=None, derived=False
    ):
        self.kinds, self.n_source, self.parts = list(kinds), list(n_source), list(parts)
        self.d, self.columns = int(d), columns
        self.scale, self.shift, self.derived = scale, shift, bool(derived)


class Piece:
    """The fact-aligned rows of one partition.

    Attributes
    ----------
    n : int
        Target rows.
    fact : list
        The blocks of the fact table (n rows each; dense arrays or CSR), in block order.
    rows : dict of int to int array
        The index vector (length n, -1 = absent) of every broadcast and local table.
    local : dict of int to list
        The source blocks of every local table.
    """

    __slots__ = ("n", "fact", "rows", "local", "subset")

    def __init__(self, n, fact=(), rows=None, local=None, subset=None):
        self.n, self.fact = int(n), list(fact)
        self.rows, self.local = dict(rows or {}), dict(local or {})
        self.subset = dict(subset or {})

    def __getstate__(self):
        return {key: getattr(self, key) for key in self.__slots__}

    def __setstate__(self, state):
        for key, value in state.items():
            setattr(self, key, value)

    @property
    def nbytes(self):
        """Bytes of the arrays this piece holds (what a persisted partition keeps in memory)."""
        total = sum(_nbytes(block) for block in self.fact)
        total += sum(int(rows.nbytes) for rows in self.rows.values())
        return total + sum(_nbytes(block) for blocks in self.local.values() for block in blocks)


def _nbytes(block):
    if sp.issparse(block):
        return int(block.data.nbytes + block.indices.nbytes + block.indptr.nbytes)
    return int(block.nbytes)


def through(mapping, rows, absent=-1):
    """``mapping[rows]`` where a row is present, ``absent`` where it is absent (-1): an index
    vector composed with another one or with a renumbering.

    An empty mapping is its own case: a partition may use no row of a table at all, and then
    there is no entry 0 to clip its absent rows to (the IndexError of a snowflake's partition
    that meets none of a dimension's rows). ``absent`` is the row an absent one maps to: -1,
    or in a snowflake the next table's row of the missing key (an absent row's key is missing,
    and a missing key matches a missing key, as in pandas)."""
    rows = np.asarray(rows, dtype=np.intp)
    mapping = np.asarray(mapping, dtype=np.intp)
    if not mapping.size:
        return np.full(rows.shape, absent, dtype=np.intp)
    out = mapping.take(np.maximum(rows, 0))  # the mapping is not copied (it may be a big table's)
    out[rows < 0] = absent
    return out


def _take_block(block, idx):
    return block[idx] if sp.issparse(block) else np.take(block, idx, axis=0)


def take(piece, idx):
    """The piece of the rows ``idx`` (local positions, in order, repeats allowed)."""
    idx = np.asarray(idx, dtype=np.intp)
    return Piece(
        idx.size,
        [_take_block(block, idx) for block in piece.fact],
        {t: rows[idx] for t, rows in piece.rows.items()},
        piece.local,
        piece.subset,
    )


def take_mask(piece, mask):
    """The piece of the rows where the boolean ``mask`` holds."""
    return take(piece, np.flatnonzero(np.asarray(mask, dtype=bool)))


def concat(pieces, layout):
    """The rows of several pieces one after the other, as one piece (local tables stacked, their
    index vectors shifted)."""
    pieces = list(pieces)
    if len(pieces) == 1:
        return pieces[0]
    first = pieces[0]
    fact = [_vstack([p.fact[b] for p in pieces]) for b in range(len(first.fact))]
    rows, local = {}, {}
    for t, kind in enumerate(layout.kinds):
        if kind == BROADCAST:
            rows[t] = np.concatenate([_source_rows(p, t) for p in pieces])
        elif kind == LOCAL:
            shifted, offset = [], 0
            for p in pieces:
                r = p.rows[t]
                shifted.append(np.where(r >= 0, r + offset, -1))
                offset += local_rows(p, t)
            rows[t] = np.concatenate(shifted)
            local[t] = [
                _vstack([p.local[t][b] for p in pieces]) for b in range(len(first.local[t]))
            ]
    return Piece(sum(p.n for p in pieces), fact, rows, local)


def _source_rows(piece, t):
    """The index vector of broadcast table t into its whole source (a compacted piece's own
    rows mapped back)."""
    rows = piece.rows[t]
    if t not in piece.subset:
        return rows
    return through(piece.subset[t], rows)


# A piece keeps its own copy of the rows it uses of a broadcast table when they are at most this
# fraction of the table: its operators then cost what its rows cost, not what the table costs.
COMPACT = 0.5


def compact(piece, dims, layout):
    """The piece with its own copy of the rows it uses of each broadcast table of which it uses
    few (at most :data:`COMPACT` of them), its index vector renumbered into that copy.

    Every pass over a partition sums into, and multiplies, the sources it references: a
    broadcast table of 2M rows under a partition of 250k rows would cost each pass 2M rows of
    work for it (TPC-H sf=10's part). The copy is taken once, where the piece is made (the Parquet
    read, :func:`split`); the matrix stays the same rows (the unused source rows only ever
    contributed zeros)."""
    rows, local, subset = dict(piece.rows), dict(piece.local), dict(piece.subset)
    for t, kind in enumerate(layout.kinds):
        blocks = dims.get(t) if kind == BROADCAST and t not in piece.subset else None
        if not blocks:
            continue
        n_source = layout.n_source[t]
        used = np.zeros(n_source + 1, dtype=bool)
        used[piece.rows[t]] = True  # -1 (absent) marks the extra last entry
        used = used[:-1]
        count = int(np.count_nonzero(used))
        if count > COMPACT * n_source:
            continue
        position = np.cumsum(used, dtype=np.intp) - 1
        mine = piece.rows[t]
        rows[t] = through(position, mine)
        subset[t] = np.flatnonzero(used)
        local[t] = [_take_block(block, subset[t]) for block in blocks]
    if not subset.keys() - piece.subset.keys():
        return piece
    return Piece(piece.n, piece.fact, rows, local, subset)


def local_rows(piece, table):
    """Source rows of a local table in this piece."""
    blocks = piece.local[table]
    return int(blocks[0].shape[0]) if blocks else 0


def _vstack(blocks):
    if sp.issparse(blocks[0]):
        return sp.vstack(blocks, format="csr")
    return np.concatenate(blocks, axis=0)


def build(piece, dims, layout, ops=()):
    """The in-memory NormalizedMatrix of a piece's rows: one Indicator per table (shared by its
    parts, as in the matrix it came from), the broadcast sources from ``dims``, then the lazy
    elementwise operations ``ops`` (callables matrix -> matrix) in order."""
    indicators = []
    for t, kind in enumerate(layout.kinds):
        if kind == FACT:
            indicators.append(Indicator(None, piece.n))
        elif kind == BROADCAST and t not in piece.subset:
            indicators.append(Indicator(piece.rows[t], layout.n_source[t], validate=False))
        else:
            indicators.append(Indicator(piece.rows[t], local_rows(piece, t), validate=False))
    parts = []
    for spec in layout.parts:
        kind = layout.kinds[spec.table]
        source = (
            piece.fact[spec.block]
            if kind == FACT
            else dims[spec.table][spec.block]
            if spec.table not in piece.local
            else piece.local[spec.table][spec.block]
        )
        part = Part(spec.name, source, indicators[spec.table], spec.cols, spec.finite)
        parts.append(part if spec.absmax is None else part.knowing_absmax(spec.absmax))
    nm = NormalizedMatrix.from_trusted_parts(
        parts,
        (piece.n, layout.d),
        scale=layout.scale,
        shift=layout.shift,
        columns=layout.columns,
        derived=layout.derived,
    )
    for op in ops:
        nm = op(nm)
    return nm


def split(nm, bounds):
    """(layout, dims, pieces) of an in-memory matrix cut at row ``bounds`` (0 = b_0 < ... = n).

    Parts with the identity indicator form the fact table; every other indicator becomes a
    broadcast table whose sources are the dimension blocks. Pieces hold views (dense blocks and
    index vectors) of the matrix's arrays, or row slices of its CSR fact blocks.
    """
    scale, shift = nm.affine
    tables, kinds, n_source, dims, specs = {}, [], [], {}, []
    fact_blocks = []
    for part in nm.parts:
        ind = part.indicator
        if ind.is_identity:
            key = "fact"
            if key not in tables:
                tables[key] = len(kinds)
                kinds.append(FACT)
                n_source.append(None)
            fact_blocks.append(part.source)
            specs.append(
                PartSpec(part.name, tables[key], len(fact_blocks) - 1, part.cols, part.finite)
            )
            continue
        key = id(ind)
        if key not in tables:
            tables[key] = len(kinds)
            kinds.append(BROADCAST)
            n_source.append(ind.n_source)
            dims[tables[key]] = []
        t = tables[key]
        dims[t].append(part.source)
        specs.append(
            PartSpec(part.name, t, len(dims[t]) - 1, part.cols, part.finite, part.absmax())
        )
    layout = Layout(kinds, n_source, specs, nm.shape[1], nm.columns, scale, shift, nm.derived)
    indicators = {
        tables[id(p.indicator)]: p.indicator for p in nm.parts if not p.indicator.is_identity
    }
    pieces = []
    for start, stop in zip(bounds[:-1], bounds[1:]):
        rows = {t: ind.rows[start:stop] for t, ind in indicators.items()}
        pieces.append(
            compact(
                Piece(stop - start, [block[start:stop] for block in fact_blocks], rows),
                dims,
                layout,
            )
        )
    return layout, dims, pieces


def assemble(pieces, dims, layout, ops=()):
    """The in-memory matrix of all rows (``.compute()``): the pieces concatenated, then built."""
    return build(concat(pieces, layout), dims, layout, ops)
