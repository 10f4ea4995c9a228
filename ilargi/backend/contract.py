"""The backend contract: what a kernel module must give the rewrite rules, and what it may give.

A backend is a module (:mod:`ilargi.backend.cpu`, the package :mod:`ilargi.backend.gpu`) that
:func:`ilargi.backend.backend_of` hands to the code above. It gives every member of
:class:`Backend`; it may give any member of :class:`OptionalKernels`, which callers look up by
:func:`optional` only (None where the backend has none, and the caller takes its generic path).

Notation as in ``docs/design.rst`` ("Rewrite rules"): ``ind`` is an
:class:`~ilargi.metadata.Indicator` (I_p, n × n_p), ``S`` a source (dense array or CSR matrix of
the backend), ``parts`` a sequence of :class:`~ilargi.metadata.Part`, g(Z, rows) a gather and
s(Y, rows) a segment sum.

Examples
--------
>>> from ilargi.backend import cpu
>>> from ilargi.backend.contract import Backend, optional
>>> isinstance(cpu, Backend)
True
>>> optional(cpu, "pushed_sums") is cpu.pushed_sums
True
>>> optional(cpu, "gramvec") is None
True
"""

from __future__ import annotations

from typing import Any, Callable, ContextManager, Protocol, Sequence, TypeAlias, runtime_checkable

# Names of the types that the annotations of the public API use. Each is Any to the type checker:
# the same code runs on NumPy and CuPy arrays, SciPy and CuPy sparse matrices and Dask arrays, which
# share no declared type; the names say in the signatures which of them a parameter takes.
Array: TypeAlias = Any
"""A dense array of a backend: ``numpy.ndarray`` or ``cupy.ndarray``."""
Source: TypeAlias = Any
"""A source of a backend: a dense array, or a CSR matrix of SciPy or CuPy."""
MatrixLike: TypeAlias = Any
"""What an estimator or operator takes: a NormalizedMatrix, a dense or sparse array of either
backend, a Dask array or DaskNormalizedMatrix, or anything ``numpy.asarray`` takes."""


class Accumulator(Protocol):
    """What ``Backend.BlockAccumulator(d, sparse)`` returns: a d × d sum of blocks."""

    def add(self, rows: Array, cols: Array, block: Source) -> None:
        """Add the d_p × d_q ``block`` at target rows ``rows`` and columns ``cols``."""

    def result(self) -> Source:
        """The d × d sum (dense, or CSR for a sparse accumulator)."""


@runtime_checkable
class Backend(Protocol):
    """The kernels every backend module gives (module-level functions; ``self`` is the module)."""

    xp: Any
    """The array module: numpy or cupy."""
    name: str
    """The device name: 'cpu' or 'gpu'."""

    # Arrays and sources.
    def is_sparse(self, x: object) -> bool:
        """Whether x is a sparse matrix of any backend."""

    def as_csr(self, x: Source, dtype: Any = None) -> Source:
        """x as this backend's CSR (copying only when the format or dtype must change)."""

    def to_dense(self, x: Source) -> Array:
        """x as a dense array of this backend."""

    def asnumpy(self, x: Source) -> Any:
        """A host copy of x (NumPy dense, SciPy sparse)."""

    def move_array(self, x: Array) -> Array:
        """A copy of a dense array (index vector, affine state) on this backend's device."""

    def move_source(self, S: Source) -> Source:
        """A source on this backend's device: dense array or CSR."""

    # The two primitives of every rule.
    def gather(self, Z: Array, ind: Any, out: Array | None = None) -> Array:
        """g(Z, rows): row i is Z[rows[i]], or 0 where rows[i] = -1 (into ``out`` if given)."""

    def gather_add(self, out: Array | None, Z: Array, ind: Any) -> Array:
        """out += g(Z, rows), allocating out when it is None; returns out."""

    def segment_sum(self, Y: Array, ind: Any) -> Array:
        """s(Y, rows) = Iᵀ·Y: row j sums the rows i of Y with rows[i] = j."""

    def counts(self, ind: Any) -> Array:
        """cnt_p: how many target rows take each source row (float64, length n_p)."""

    def cooccurrence(self, first: Any, second: Any, w: Array | None = None) -> Source | None:
        """C = I_pᵀ·diag(w)·I_q as CSR (n_p × n_q), or None if no target row takes both."""

    # Sources.
    def product(self, S: Source, X: Array, out: Array | None = None) -> Array:
        """S·X for a source S and a dense operand X (into ``out`` if given)."""

    def transposed_product(self, S: Source, Y: Array) -> Array:
        """Sᵀ·Y for a source S (n_p × d_p) and a dense Y of its rows (n_p [× m])."""

    def row_sums(self, S: Source) -> Array:
        """Per-row sums of S."""

    def column_sums(self, S: Source) -> Array:
        """Per-column sums of S."""

    def column_min_max(self, S: Source) -> tuple[Array, Array]:
        """(min, max) per column of S, implicit zeros of a sparse S included."""

    def zero_rows(self, S: Source, mask: Array) -> Source:
        """A copy of S with the rows in ``mask`` set to 0."""

    def select_rows(self, S: Source, mask: Array) -> Source:
        """The rows of S where ``mask`` holds."""

    def select_columns(self, S: Source, idx: Array) -> Source:
        """The columns ``idx`` of S."""

    def scale_rows(self, S: Source, v: Array) -> Source:
        """diag(v)·S (a sparse S stays sparse)."""

    def scale_columns(self, S: Source, v: Array) -> Source:
        """S·diag(v) (a sparse S stays sparse)."""

    def weighted_gram(self, S: Source, c: Array | None = None) -> Source:
        """Sᵀ·diag(c)·S (Sᵀ·S for c=None): a diagonal block of crossprod."""

    def BlockAccumulator(self, d: int, sparse: bool) -> Accumulator:
        """An :class:`Accumulator` of a d × d result, dense or sparse."""

    def map_source(
        self, S: Source, f: Callable[..., Any], scale: Array, shift: Array, cols: Array
    ) -> Source:
        """f(S·diag(scale) + shift, cols) on stored values (an elementwise function's part)."""

    def row_min(self, S: Source, scale: Array, shift: Array) -> Array:
        """Per-row min of S·diag(scale) + shift (implicit zeros count as shift)."""

    def square_excess(
        self, S: Source, scale: Array, shift: Array, weights: Array | None = None
    ) -> Array:
        """Σ (a·s + b)² − b² per source row, or per column with rows counted ``weights`` times."""

    # Links of the training losses (see ilargi.backend.links).
    BinaryLink: Any
    """The binary log-loss link: ``BinaryLink(y, sw)(z) -> (loss, r)``."""
    MultinomialLink: Any
    """The softmax link: ``MultinomialLink(labels, k, sw)(Z) -> (loss, R)``."""

    # Materialization.
    def materialize_dense(self, parts: Sequence[Any], n: int, d: int, dtype: Any) -> Array:
        """T₀ as a dense n × d array of ``dtype``."""

    def materialize_sparse(self, parts: Sequence[Any], n: int, d: int) -> Source:
        """T₀ as an n × d CSR matrix (a dense source's zeros are not stored)."""


class OptionalKernels(Protocol):
    """Kernels a backend may give; callers reach each through :func:`optional` by its full name.

    A stacked kernel (``fused_*``, ``gramvec``) may also return None for a call it does not
    cover; the caller then runs the generic rule.
    """

    def fused_lmm(self, parts: Sequence[Any], n: int, X: Array) -> Array | None:
        """T₀·X over all parts at once (rules.lmm), or None."""

    def fused_tmm(self, parts: Sequence[Any], d: int, Y: Array) -> Array | None:
        """T₀ᵀ·Y over all parts at once (rules.tmm), or None."""

    def fused_rowsums(self, parts: Sequence[Any], n: int) -> Array | None:
        """rowSums(T₀) over all parts at once (rules.rowsums), or None."""

    def fused_colsums(self, parts: Sequence[Any], d: int) -> Array | None:
        """colSums(T₀) over all parts at once (rules.colsums), or None."""

    def fused_cross_block(self, first: Any, second: Any, w: Array | None) -> Array | None:
        """The cross block S_pᵀ·I_pᵀ·diag(w)·I_q·S_q of crossprod, or None."""

    def gramvec(
        self,
        parts: Sequence[Any],
        n: int,
        d: int,
        scale: Array,
        shift: Array,
        y: Array,
        v: Array | None = None,
        alpha: float = 1.0,
        beta: float = 0.0,
        z: Array | None = None,
    ) -> Array | None:
        """α·Tᵀ(v⊙(T·y)) + β·z for T = T₀·diag(scale) + 1·shiftᵀ in one pass, or None."""

    def pushed_sums(self, S: Source, source: Any, target: Any, w: Array | None = None) -> Array:
        """I_targetᵀ·diag(w)·I_source·S for a narrow S, dense (target.n_source × d_p)."""

    NARROW: int
    """With ``pushed_sums``: the widest sparse (or fact) part it pushes."""

    def gram_pushes(
        self, S: Array, targets: Sequence[Any], w: Array | None = None
    ) -> tuple[Array, list[Array]] | None:
        """(Sᵀ·diag(w)·S, [I_gᵀ·diag(w)·S for each indicator g in targets]) for a dense fact
        block S, reading S once: its diagonal block of crossprod and its pushes; or None."""

    def direct_cross(
        self,
        S_p: Source,
        rows_p: Array | None,
        S_q: Source,
        rows_q: Array | None,
        w: Array | None = None,
        n: int | None = None,
    ) -> Array:
        """Σ_i w_i·S_p[rows_p[i]]ᵀ·S_q[rows_q[i]] over n pass rows (rows None: i; -1: absent),
        a cross block of crossprod summed row by row, for sources with short rows."""

    def one_pool(self) -> ContextManager[Any]:
        """A context manager that every operator and fit runs in, so that one thread pool at a
        time runs on the cores: the compiled CPU backend holds BLAS at one thread in it (see
        :mod:`ilargi.backend.threads`); a backend without one needs none."""

    def check_memory(self, nbytes: int, what: str) -> None:
        """Raise MemoryError before an allocation of ``nbytes`` the device cannot hold."""

    # Passes over the target rows that read each fact row once (the compiled CPU backend): a
    # PassPlan stacks the gathered tables of one matrix; each pass takes their small products U.
    PassPlan: Any
    """``PassPlan(indicators, fact, fact_csr, n)``: built once per matrix; ``scores(U, xf, xc, c)``
    gives T₀·x, ``transposed(Y)`` the pieces of T₀ᵀ·Y."""

    def logistic_pass(
        self,
        plan: Any,
        U: Array,
        y: Array,
        sw: Array | None = None,
        xf: Array | None = None,
        xc: Array | None = None,
        c: float = 0.0,
    ) -> Any:
        """Scores, the binary log-loss and its residual's products in one pass (a Pass)."""

    def softmax_pass(
        self,
        plan: Any,
        U: Array,
        labels: Array,
        sw: Array | None = None,
        xf: Array | None = None,
        xc: Array | None = None,
        c: float = 0.0,
    ) -> Any:
        """Scores, the softmax log-loss and its residual's products in one pass (a Pass)."""

    def gramvec_pass(
        self,
        plan: Any,
        U: Array,
        v: Array | None = None,
        xf: Array | None = None,
        xc: Array | None = None,
        c: float = 0.0,
    ) -> Any:
        """Scores, v ⊙ scores and their products in one pass (the pieces of α·Tᵀ(v⊙(T·y)))."""

    def kmeans_pass(
        self,
        plan: Any,
        U: Array,
        x_sq: Array,
        c_sq: Array,
        rounding: Array | float,
        xf: Array | None = None,
        xc: Array | None = None,
        c: float = 0.0,
    ) -> Any:
        """Scores, Lloyd's assignment and the cluster sums in one pass (an Assignment)."""

    # Gradient-boosted trees (ilargi.rewriter.histograms) on host arrays: uint8 bin codes of a
    # table, a leaf's rows, float gradients and hessians.
    def bin_histograms(
        self,
        codes: Array,
        rows: Array | None,
        idx: Array,
        g: Array,
        h: Array,
        c: Array | None = None,
        n_bins: int = 256,
    ) -> Array:
        """(k × n_bins × 3) sums of (g, h, count) by bin code, one per column of ``codes``, over
        the entries i of idx: codes row ``rows[i] + 1`` (row 0 the absent row), or row i for
        ``rows`` None; c the entries' counts (None: 1 each)."""

    def leaf_sums(self, rows: Array, idx: Array, g: Array, h: Array, n_out: int) -> Array:
        """(n_out × 3) sums of (g, h, 1) over the entries i of idx by ``rows[i] + 1``: a leaf's
        segment-sum by foreign key (row 0: the absent entries)."""

    def leaf_pass(
        self,
        R: Array,
        sel: Sequence[int],
        n_outs: Sequence[int],
        fcodes: Array | None,
        idx: Array,
        g: Array,
        h: Array,
        n_bins: int = 256,
        fbins: Array | None = None,
        counts: bool = True,
        scratch: dict | None = None,
        hessians: bool = True,
    ) -> tuple[list[Array], Array | None]:
        """A leaf's ``leaf_sums`` by the keys of the tables ``sel`` of the stacked index vectors
        R and the fact codes' ``bin_histograms``, from one pass over the leaf's rows ``idx``
        (None: every target row); ``counts`` False: the histograms' counts left at zero,
        ``hessians`` False too: their hessian sums as well; ``scratch``: buffers the caller
        keeps from leaf to leaf, where a backend may also leave the table rows a small leaf
        reached, as ``scratch["held"]``."""

    def column_histograms(self, codes_t: Array, jobs: Array, sums: Array, out: Array) -> None:
        """Adds into ``out[feature]`` the (g, h, count) ``sums[start + r]`` by the codes
        ``codes_t[column, r]``, r < rows, for each job (column, start, rows, feature)."""

    def sparse_histograms(
        self,
        columns: tuple,
        by_row: tuple,
        sums: Array,
        totals: Array,
        out: Array,
        leaf_rows: int,
        by_rows: Array | None = None,
        zero_bins: bool = True,
        held: Array | None = None,
        only: Array | None = None,
        counts: bool = True,
    ) -> None:
        """Writes into the (total bins × 3) ``out`` the sums ``sums[start + rows[e]]`` of sparse
        column c's entries e (``indptr[c]:indptr[c + 1]``) at rows ``offset + code`` (``columns``
        = (indptr, rows, codes, jobs), a job (start, offset, bins, default, table, c) per column;
        those of ``only`` summed, default all; whatever the jobs' rows held), its default bin
        the leaf's ``totals`` minus its other bins (the rows of columns without a job may
        change); ``by_row`` (row_ptr, bin_at, tables) holds
        the same entries by table row, for the rows of a leaf of ``leaf_rows`` rows (``by_rows``:
        the tables to add by row, default chosen by the backend; the result is the same;
        ``zero_bins`` False: default bins that are bin 0 left at zero; ``held``: the table rows
        the leaf holds, from ``leaf_pass``'s scratch, where a backend reads only those;
        ``counts`` False: the counts left at zero)."""

    def partition_rows(
        self,
        order: Array,
        lo: int,
        hi: int,
        codes: Array,
        rows: Array | None,
        column: int,
        threshold: int,
    ) -> int:
        """Stable partition of ``order[lo:hi]`` in place, rows whose code in ``column`` is <=
        threshold first; returns their number."""

    def split_rows(
        self,
        lst: Array,
        labels: Array,
        label: int,
        new_label: int,
        codes: Array,
        rows: Array | None,
        column: int,
        threshold: int | Array,
        side: bool,
        out: Array,
        every: bool = False,
    ) -> tuple[int, int]:
        """Split a leaf by scanning its rows ``lst`` (increasing): those labelled ``label``
        whose test (code in ``column`` <= threshold, or ``threshold[code]`` for a boolean
        table: a set of categories) equals ``side`` are relabelled
        ``new_label`` and written to ``out`` in order, the leaf's others compacted to the front
        of ``lst`` in order, rows of other labels dropped; returns (moved, kept). ``every``:
        the leaf is every target row, 0 up to len(lst), and lst is written, not read."""

    def split_by_keys(
        self,
        inverse: tuple[Array, Array],
        keys: Array,
        labels: Array,
        label: int,
        new_label: int,
        flags: Array,
        out: Array,
    ) -> int:
        """Split off the rows labelled ``label`` that read the table rows ``keys`` (through the
        table's ``inverse_index``): relabelled ``new_label``, written to ``out`` increasing
        (``flags``: a zero byte a target row, left zero); returns how many."""

    def inverse_index(self, rows: Array, n_rows: int) -> tuple[Array, Array]:
        """(ptr, rows): the target rows that read codes row r, ``rows[ptr[r]:ptr[r + 1]]``,
        increasing (codes row 0: the absent rows of index vector ``rows``)."""

    def compact_rows(self, lst: Array, labels: Array, label: int) -> int:
        """The rows of ``lst`` labelled ``label`` moved to its front in order; returns how many."""

    def subtract_ranges(self, parent: Array, child: Array, offsets: Array, n_bins: Array) -> None:
        """parent -= child over feature f's rows offsets[f] up to offsets[f] + n_bins[f]."""

    def residuals(self, score: Array, y: Array, out: Array) -> None:
        """out = score - y, in double, rounded to out's single precision (squared error's
        gradients; y single precision, widened exactly)."""

    def add_by_label(self, score: Array, values: Array, labels: Array) -> None:
        """score[i] += values[labels[i]] for every i, in place: a tree's leaf values added to
        the scores of the rows each leaf holds."""

    def dense_columns(self, columns: Sequence[Array], fills: Sequence[float], out: Array) -> Array:
        """out[:, j] = columns[j] (float64, (n, len(columns)), C-ordered), NaN replaced by
        fills[j]; returns out."""

    def add_by_label_residuals(
        self, score: Array, values: Array, labels: Array, y: Array, out: Array
    ) -> float:
        """``add_by_label(score, values, labels)``, then ``residuals(score, y, out)``, in one
        pass: a tree's leaf values added and squared error's next gradients made; returns
        ``sum_float64(out)`` (the next tree's Σg), the same bits."""

    def sum_float64(self, a: Array) -> float:
        """``np.sum(a, dtype=np.float64)``, the same bits (a tree's Σg, summed as LightGBM's
        root sums are compared with in the tests)."""

    def affine_column(self, column: Array, a: float, b: float, out: Array) -> None:
        """out = column·a + b in double (``column`` a float64 view of any strides), each value's
        product and sum rounded as NumPy's multiply and add round them."""

    def bin_column(self, values: Array, bounds: Array, codes: Array, column: int) -> None:
        """codes[:, column] = the bin of each value (uint8; codes C-ordered): the first bin whose
        upper bound (``bounds``, increasing) is >= it, as ``np.searchsorted(bounds, values,
        side="left")``."""

    def gather_codes(self, out: Array, at: int, codes: Array, rows: Array | None) -> None:
        """out[i, at:at + k] = codes[rows[i] + 1] for every target row i (codes row 0: the
        absent row), or codes[i] where ``rows`` is None; k = codes.shape[1]."""

    def joint_codes(self, codes: Array, groups: Sequence[Sequence[int]], bins: Array) -> tuple:
        """(joint, by_column): per row of ``codes`` (uint8, (n, k)) and group of its columns,
        the joint code c0 + b0·(c1 + b1·(...)) of the group's columns in order (b their
        ``bins``, whose product is at most 256), uint8 (n, groups); and a Fortran-ordered copy
        of ``codes``."""

    def best_thresholds(
        self,
        hist: Array,
        offsets: Array,
        n_bins: Array,
        usable: Array,
        G: float,
        H: float,
        count: int,
        params: Sequence[float],
    ) -> tuple[Array, Array]:
        """Per feature of a leaf's (total bins × 3) histograms (feature f's from row
        ``offsets[f]``), LightGBM's best threshold by its reverse scan: ((d × 5) gain over the
        leaf, bin, left Σg, Σh and count; splittable)."""

    def categorical_splits(
        self,
        hist: Array,
        offsets: Array,
        n_bins: Array,
        G: float,
        H: float,
        count: int,
        params: Sequence[float],
    ) -> tuple[Array, Array, Array]:
        """Per categorical feature of a leaf's histograms (feature f's bins from row
        ``offsets[f]``), LightGBM's best set of categories sent left: ((k × 6) gain over the
        leaf, bins sent left, left Σg, Σh and count, the children's L2 penalty; splittable;
        the bins sent left, row by row)."""

    def nan_thresholds(
        self,
        hist: Array,
        offsets: Array,
        n_bins: Array,
        zero_first: Array,
        G: float,
        H: float,
        count: int,
        params: Sequence[float],
    ) -> tuple[Array, Array]:
        """Per feature with a last bin of NaN (feature f's bins from row ``offsets[f]``),
        LightGBM's best threshold by its two scans and where NaN goes: ((k × 6) gain over the
        leaf, bin, left Σg, Σh and count, 1.0 where NaN goes left; splittable)."""

    def rebuild_bins(
        self, hist: Array, offsets: Array, n_bins: Array, bins: Array, G: float, H: float
    ) -> None:
        """Each feature's bin ``bins[f]`` of a leaf's histograms set to (G, H) less the
        feature's other bins, one at a time, in place (LightGBM's ``FixHistogram``)."""

    def subtract_held(
        self,
        by_row: tuple,
        jobs: Array,
        held: Array,
        sums: Array,
        totals: Array,
        parent: Array,
        rebuilt: Array,
        clean: Array,
        counts: bool = True,
    ) -> None:
        """``parent -=`` a small leaf's histograms of sparse columns (``sparse_histograms`` of
        every job), at the bins the entries of its ``held`` rows of ``sums`` reach and the
        default bins of the jobs ``rebuilt``: the same bytes at the cost of the leaf's entries
        (``clean``: a zero array of parent's shape, left zero; ``counts`` False: parent's
        counts left as they are)."""

    # The solvers (ilargi.models._solvers) on host vectors.
    def lbfgs_direction(
        self, s: Array, y: Array, rho: Array, order: Sequence[int], g: Array
    ) -> Array | None:
        """-H·g by L-BFGS's two-loop recursion over the pairs (s[i], y[i]), i in ``order`` newest
        first, or None where the backend leaves it to the solver's NumPy."""


def _members(protocol: type) -> tuple[str, ...]:
    """The public names a Protocol class lists (methods and annotated attributes), in order."""
    names = [key for key in vars(protocol) if not key.startswith("_")]
    names += [key for key in protocol.__annotations__ if key not in names]
    return tuple(names)


REQUIRED = _members(Backend)
"""Names every backend gives."""

OPTIONAL = _members(OptionalKernels)
"""Names a backend may give: the stacked GPU passes, ``pushed_sums`` (with ``NARROW``) and
``check_memory``; look them up with :func:`optional`."""


def optional(kernels: Any, name: str) -> Any:
    """The optional kernel ``name`` of a backend module, or None where it has none.

    Parameters
    ----------
    kernels : module
        A backend module (what :func:`ilargi.backend.backend_of` returns).
    name : str
        One of :data:`OPTIONAL`, spelled out in full at the call site.

    Returns
    -------
    callable or object or None
        The kernel (or constant), or None if the backend does not give it.

    Raises
    ------
    ValueError
        If ``name`` is not a documented optional kernel.

    Examples
    --------
    >>> from ilargi.backend import cpu
    >>> optional(cpu, "fused_lmm") is None
    True
    >>> optional(cpu, "NARROW")
    64
    """
    if name not in OPTIONAL:
        raise ValueError(
            f"{name!r} is not an optional kernel of the backend contract; "
            f"documented ones: {', '.join(OPTIONAL)}"
        )
    return getattr(kernels, name, None)
