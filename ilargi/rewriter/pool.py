"""One thread pool at a time: the context every operator runs in.

On a machine without spare cores, two thread pools that take turns wait for each other: after a
call, OpenBLAS's idle threads spin for a while and GNU OpenMP's (the compiled kernels') too,
each holding a core that the other pool's next parallel call needs, so that call waits a
scheduler slice for it (:mod:`ilargi.backend.threads`). Every operator
therefore runs in its backend's ``one_pool`` context: on the compiled CPU backend BLAS is held at
one thread for the whole call, and the products that need more than one thread run as BLAS calls
in row blocks on the compiled kernels' own threads. One decorator on the operators, not a hold
around each BLAS call, so that no code path of an operator can wake the other pool.
"""

from contextlib import nullcontext
from functools import wraps

from ilargi.backend import optional


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
