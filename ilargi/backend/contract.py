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
from typing import Any, Protocol, runtime_checkable


class Accumulator(Protocol):
    """What ``Backend.BlockAccumulator(d, sparse)`` returns: a d × d sum of blocks."""

    def add(self, rows, cols, block):
        """Add the d_p × d_q ``block`` at target rows ``rows`` and columns ``cols``."""

    def result(self):
        """The d × d sum (dense, or CSR for a sparse accumulator)."""


@runtime_checkable
class Backend(Protocol):
    """The kernels every backend module gives (module-level functions; ``self`` is the module)."""

    xp: Any
    """The array module: numpy or cupy."""
    name: str
    """The device name: 'cpu' or 'gpu'."""

    # Arrays and sources.
    def is_sparse(self, x):
        """Whether x is a sparse matrix of any backend."""

    def as_csr(self, x, dtype=None):
        """x as this backend's CSR (copying only when the format or dtype must change)."""

    def to_dense(self, x):
        """x as a dense array of this backend."""

    def asnumpy(self, x):
        """A host copy of x (NumPy dense, SciPy sparse)."""

    def move_array(self, x):
        """A copy of a dense array (index vector, affine state) on this backend's device."""

    def move_source(self, S):
        """A source on this backend's device: dense array or CSR."""

    # The two primitives of every rule.
    def gather(self, Z, ind, out=None):
        """g(Z, rows): row i is Z[rows[i]], or 0 where rows[i] = -1 (into ``out`` if given)."""

    def gather_add(self, out, Z, ind):
        """out += g(Z, rows), allocating out when it is None; returns out."""

    def segment_sum(self, Y, ind):
        """s(Y, rows) = Iᵀ·Y: row j sums the rows i of Y with rows[i] = j."""

    def counts(self, ind):
        """cnt_p: how many target rows take each source row (float64, length n_p)."""

    def cooccurrence(self, first, second, w=None):
        """C = I_pᵀ·diag(w)·I_q as CSR (n_p × n_q), or None if no target row takes both."""

    # Sources.
    def product(self, S, X, out=None):
        """S·X for a source S and a dense operand X (into ``out`` if given)."""

    def transposed_product(self, S, Y):
        """Sᵀ·Y for a source S (n_p × d_p) and a dense Y of its rows (n_p [× m])."""

    def row_sums(self, S):
        """Per-row sums of S."""

    def column_sums(self, S):
        """Per-column sums of S."""

    def column_min_max(self, S):
        """(min, max) per column of S, implicit zeros of a sparse S included."""

    def zero_rows(self, S, mask):
        """A copy of S with the rows in ``mask`` set to 0."""

    def select_rows(self, S, mask):
        """The rows of S where ``mask`` holds."""

    def select_columns(self, S, idx):
        """The columns ``idx`` of S."""

    def scale_rows(self, S, v):
        """diag(v)·S (a sparse S stays sparse)."""

    def scale_columns(self, S, v):
        """S·diag(v) (a sparse S stays sparse)."""

    def weighted_gram(self, S, c=None):
        """Sᵀ·diag(c)·S (Sᵀ·S for c=None): a diagonal block of crossprod."""

    def BlockAccumulator(self, d, sparse) -> Accumulator:
        """An :class:`Accumulator` of a d × d result, dense or sparse."""

    def map_source(self, S, f, scale, shift, cols):
        """f(S·diag(scale) + shift, cols) on stored values (an elementwise function's part)."""

    def row_min(self, S, scale, shift):
        """Per-row min of S·diag(scale) + shift (implicit zeros count as shift)."""

    def square_excess(self, S, scale, shift, weights=None):
        """Σ (a·s + b)² − b² per source row, or per column with rows counted ``weights`` times."""

    def column_moments(self, S, weights, total):
        """Per-column weighted mean and centred sum of squares (rows counted ``weights`` times)."""

    def row_moments(self, S, scale, shift):
        """Per-row mean and centred sum of squares of S·diag(scale) + shift."""

    # Links of the training losses (see ilargi.backend.links).
    BinaryLink: Any
    """The binary log-loss link: ``BinaryLink(y, sw)(z) -> (loss, r)``."""
    MultinomialLink: Any
    """The softmax link: ``MultinomialLink(labels, k, sw)(Z) -> (loss, R)``."""

    # Materialization.
    def materialize_dense(self, parts, n, d, dtype):
        """T₀ as a dense n × d array of ``dtype``."""

    def materialize_sparse(self, parts, n, d):
        """T₀ as an n × d CSR matrix (a dense source's zeros are not stored)."""


class OptionalKernels(Protocol):
    """Kernels a backend may give; callers reach each through :func:`optional` by its full name.

    A stacked kernel (``fused_*``, ``gramvec``) may also return None for a call it does not
    cover; the caller then runs the generic rule.
    """

    def fused_lmm(self, parts, n, X):
        """T₀·X over all parts at once (rules.lmm), or None."""

    def fused_tmm(self, parts, d, Y):
        """T₀ᵀ·Y over all parts at once (rules.tmm), or None."""

    def fused_rowsums(self, parts, n):
        """rowSums(T₀) over all parts at once (rules.rowsums), or None."""

    def fused_colsums(self, parts, d):
        """colSums(T₀) over all parts at once (rules.colsums), or None."""

    def fused_cross_block(self, first, second, w):
        """The cross block S_pᵀ·I_pᵀ·diag(w)·I_q·S_q of crossprod, or None."""

    def gramvec(self, parts, n, d, scale, shift, y, v=None, alpha=1.0, beta=0.0, z=None):
        """α·Tᵀ(v⊙(T·y)) + β·z for T = T₀·diag(scale) + 1·shiftᵀ in one pass, or None."""

    def pushed_sums(self, S, source, target, w=None):
        """I_targetᵀ·diag(w)·I_source·S for a narrow S, dense (target.n_source × d_p)."""

    NARROW: int
    """With ``pushed_sums``: the widest sparse (or fact) part it pushes."""

    def gram_pushes(self, S, targets, w=None):
        """(Sᵀ·diag(w)·S, [I_gᵀ·diag(w)·S for each indicator g in targets]) for a dense fact
        block S, reading S once: its diagonal block of crossprod and its pushes; or None."""

    def direct_cross(self, S_p, rows_p, S_q, rows_q, w=None, n=None):
        """Σ_i w_i·S_p[rows_p[i]]ᵀ·S_q[rows_q[i]] over n pass rows (rows None: i; -1: absent),
        a cross block of crossprod summed row by row, for sources with short rows."""

    def one_pool(self):
        """A context manager that every operator and fit runs in, so that one thread pool at a
        time runs on the cores: the compiled CPU backend holds BLAS at one thread in it (see
        :mod:`ilargi.backend.threads`); a backend without one needs none."""

    def check_memory(self, nbytes, what):
        """Raise MemoryError before an allocation of ``nbytes`` the device cannot hold."""

    # Passes over the target rows that read each fact row once (the compiled CPU backend): a
    # PassPlan stacks the gathered tables of one matrix; each pass takes their small products U.
    PassPlan: Any
    """``PassPlan(indicators, fact, fact_csr, n)``: built once per matrix; ``scores(U, xf, xc, c)``
    gives T₀·x, ``transposed(Y)`` the pieces of T₀ᵀ·Y."""

    def logistic_pass(self, plan, U, y, sw=None, xf=None, xc=None, c=0.0):
        """Scores, the binary log-loss and its residual's products in one pass (a Pass)."""

    def softmax_pass(self, plan, U, labels, sw=None, xf=None, xc=None, c=0.0):
        """Scores, the softmax log-loss and its residual's products in one pass (a Pass)."""

    def gramvec_pass(self, plan, U, v=None, xf=None, xc=None, c=0.0):
        """Scores, v ⊙ scores and their products in one pass (the pieces of α·Tᵀ(v⊙(T·y)))."""

    def kmeans_pass(self, plan, U, x_sq, c_sq, rounding, xf=None, xc=None, c=0.0):
        """Scores, Lloyd's assignment and the cluster sums in one pass (an Assignment)."""

    # The solvers (ilargi.models._solvers) on host vectors.
    def lbfgs_direction(self, s, y, rho, order, g):
        """-H·g by L-BFGS's two-loop recursion over the pairs (s[i], y[i]), i in ``order`` newest
        first, or None where the backend leaves it to the solver's NumPy."""


def _members(protocol):
    """The public names a Protocol class lists (methods and annotated attributes), in order."""
    names = [key for key in vars(protocol) if not key.startswith("_")]
    names += [key for key in protocol.__annotations__ if key not in names]
    return tuple(names)


REQUIRED = _members(Backend)
"""Names every backend gives."""

OPTIONAL = _members(OptionalKernels)
"""Names a backend may give: the stacked GPU passes, ``pushed_sums`` (with ``NARROW``) and
``check_memory``; look them up with :func:`optional`."""


def optional(kernels, name):
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
        raise ValueError(f"{name!r} is not an optional kernel of the backend contract; "
                         f"documented ones: {', '.join(OPTIONAL)}")
    return getattr(kernels, name, None)
