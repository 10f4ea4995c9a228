"""One thread pool at a time: the context every operator runs in.

On a machine without spare cores, two thread pools that take turns wait for each other: after a
call, OpenBLAS's idle threads spin for a while and GNU OpenMP's (the compiled kernels') too,
each holding a core that the other pool's next parallel call needs, so that call waits a
scheduler slice for it (:mod:`ilargi.backend.threads`). Every operator
therefore runs in its backend's ``one_pool`` context: on the compiled CPU backend BLAS is held at
one thread from the operator's first BLAS call or first compiled launch at several threads to its
end (:class:`~ilargi.backend.threads.blas_held_on_demand`), and the products that need more than
one thread run as BLAS calls in row blocks on the compiled kernels' own threads. The backend's
kernels take the hold around each BLAS call they make, and the rewriter's own BLAS calls between
them are in :func:`blas`. An operator that needs neither (every kernel on one thread) sets
nothing: holding BLAS, a few microseconds, made such an operator slower at the default thread
count than at one thread.
"""

from contextlib import nullcontext
from functools import wraps

from ilargi.backend import optional, threads


def one_pool(kernels):
    """The context an operator runs in on this backend (a no-op where it needs none).

    Parameters
    ----------
    kernels : module
        A backend module (:func:`ilargi.backend.backend_of`).

    Returns
    -------
    context manager
        The backend's ``one_pool()``, else a null context.
    """
    pool = optional(kernels, "one_pool")
    return nullcontext() if pool is None else pool()


def blas(kernels):
    """The context of a BLAS call that an operator makes itself, between its backend's kernels
    (e.g. ``b @ X`` of an affine matrix): the operator's hold taken now, where the backend holds
    BLAS (:func:`one_pool`), so that the call neither runs on BLAS's pool nor leaves it spinning
    before the operator's next compiled kernel.

    Parameters
    ----------
    kernels : module
        A backend module (:func:`ilargi.backend.backend_of`).

    Returns
    -------
    context manager
        BLAS held at one thread (:class:`ilargi.backend.threads.blas_held`), else a null context.
    """
    return nullcontext() if optional(kernels, "one_pool") is None else threads.blas_held()


def operator(method):
    """Run a NormalizedMatrix method, or a function that takes the matrix first
    (:mod:`ilargi.rewriter.training`), in its backend's :func:`one_pool` (nested calls: once).

    Parameters
    ----------
    method : callable
        A method whose object (a function whose first argument) has the backend as ``_kernels``.

    Returns
    -------
    callable
        The method, wrapped.
    """

    @wraps(method)
    def in_one_pool(self, *args, **kwargs):
        with one_pool(self._kernels):
            return method(self, *args, **kwargs)

    return in_one_pool
