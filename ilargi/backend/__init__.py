"""The backend seam: array code takes its kernel module from its arrays.

Everything in :mod:`ilargi.rewriter` is written against the NumPy/SciPy API and asks
:func:`backend_of` for the module that matches the arrays it was given. The kernels whose fast
form differs between backends live in one module per backend: :mod:`.cpu` (NumPy/SciPy) and
the package :mod:`.gpu` (CuPy/cupyx, imported only when a CuPy array shows up). What a backend
must give, and what it may give, is written down in :mod:`.contract`; optional kernels are
looked up with :func:`optional`.

On the CPU the backend is :mod:`.compiled` (Numba, parallel): its own kernels for the passes over
the target rows, :mod:`.cpu`'s for the rest. The NumPy/SciPy kernels of :mod:`.cpu` serve alone
where the compiled ones cannot run (a process forked after its parent ran them on the OpenMP
threading layer), and when asked: ``kernels="numpy"`` in :func:`ilargi.config_context` (or
:func:`ilargi.set_config`, :func:`cpu_kernels`, ``ILARGI_KERNELS=numpy`` in the environment).

Which CPU kernels run (the ``kernels`` setting of :mod:`ilargi._config`, per thread):

* ``"auto"`` (the default): the compiled kernels once this environment has built them, the NumPy
  kernels until then, while one background process builds them (:mod:`.compiled.build`): a first
  call never waits for Numba's compiler. An estimator's fit keeps the kernels it started with
  (:func:`kernels_held`), so that a fit does not change kernels half-way.
* ``"compiled"``: always the compiled kernels, compiled on first use where not cached yet.
* ``"numpy"``: always the NumPy/SciPy kernels.
"""

import sys
from contextlib import contextmanager
from dataclasses import dataclass

from ilargi._config import config_context, live_config

from . import cpu
from .allocator import settle_allocator
from .contract import OPTIONAL, REQUIRED, Backend, optional
from .threads import settle_spin

settle_allocator()  # before any array of this process's first fit is allocated
settle_spin()  # before libgomp loads (Numba's first parallel kernel)

__all__ = [
    "Backend",
    "KernelStatus",
    "OPTIONAL",
    "REQUIRED",
    "backend_for_device",
    "backend_of",
    "compile_kernels",
    "compiling",
    "cpu",
    "cpu_kernels",
    "kernel_status",
    "kernels_held",
    "namespace_of",
    "optional",
]

_compiled = None  # the module, once imported


def _cpu():
    """The CPU backend now: compiled unless NumPy kernels are asked for, the compiled ones cannot
    run in this process, or (``"auto"``) they are not built yet."""
    global _compiled
    kind = live_config()["kernels"]
    if kind == "numpy":
        return cpu
    if _compiled is None:  # lazy: importing Numba costs time a GPU-only process need not pay
        from . import compiled  # (an import statement at every call costs more than a global)

        _compiled = compiled
    if not _compiled.usable():
        return cpu
    if kind == "compiled" or _compiled.build.ready():
        return _compiled
    return cpu


@contextmanager
def cpu_kernels(kind):
    """Run the block with the CPU kernels ``kind``: "auto" (the default: compiled once built,
    NumPy until then), "compiled" or "numpy".

    The same as ``ilargi.config_context(kernels=kind)``: the setting of the calling thread (and
    of the threads the library starts for its calls). Matrices pick their backend at each call, so
    the setting applies to every operator and estimator run inside the block (benchmarks compare
    the two; tests run both).

    Parameters
    ----------
    kind : {"auto", "compiled", "numpy"}

    Examples
    --------
    >>> import numpy as np
    >>> with cpu_kernels("numpy"):
    ...     backend_of(np.zeros(3)).__name__
    'ilargi.backend.cpu'
    """
    with config_context(kernels=kind):
        yield


@contextmanager
def kernels_held():
    """Inside the block, ``"auto"`` does not switch from the NumPy to the compiled kernels even
    if their build finishes (an estimator's fit runs in one, so that its iterations all run the
    same kernels and a fit's result does not depend on when a build ended). Blocks nest.

    Under ``"auto"`` the block sets the ``kernels`` setting to the kernels running when it opens
    (``"compiled"`` or ``"numpy"``), for the calling thread and the threads the library starts
    for it; another thread's ``"auto"`` still switches when the build is done.

    Examples
    --------
    >>> import numpy as np
    >>> with kernels_held():
    ...     backend_of(np.zeros(3)).name
    'cpu'
    """
    if live_config()["kernels"] != "auto":
        yield
        return
    with config_context(kernels="compiled" if _cpu() is not cpu else "numpy"):
        yield


def _is_cupy(x):
    # Never import cupy just to look: if it is not loaded, x cannot be a CuPy array.
    if "cupy" not in sys.modules:
        return False
    cls = type(x)
    return cls.__module__.startswith(("cupy", "cupyx"))


def _gpu():
    from . import gpu  # lazy: CuPy is optional and slow to import

    return gpu


def backend_of(*arrays):
    """The kernel module for these arrays: :mod:`.gpu` if any is a CuPy array, else the CPU
    backend (:mod:`.compiled`, or :mod:`.cpu`; see the module docstring).

    Parameters
    ----------
    *arrays : array, sparse matrix or None
        Dense or sparse arrays of either backend; None entries are ignored.

    Returns
    -------
    module
        A module satisfying :class:`~ilargi.backend.contract.Backend`.

    Examples
    --------
    >>> import numpy as np
    >>> backend_of(np.zeros(3), None).name
    'cpu'
    >>> backend_of().name
    'cpu'
    """
    for x in arrays:
        if x is not None and _is_cupy(x):
            return _gpu()
    return _cpu()


def namespace_of(*arrays):
    """The array module (numpy or cupy) for these arrays.

    Parameters
    ----------
    *arrays : array, sparse matrix or None
        As for :func:`backend_of`.

    Returns
    -------
    module
        ``numpy`` or ``cupy``.

    Examples
    --------
    >>> import numpy as np
    >>> namespace_of(np.zeros(3)) is np
    True
    """
    return backend_of(*arrays).xp


def backend_for_device(device):
    """The kernel module for a device name.

    Parameters
    ----------
    device : {"cpu", "gpu", "cuda"}
        "cuda" is a synonym of "gpu".

    Returns
    -------
    module
        The CPU backend or :mod:`.gpu` (importing CuPy).

    Raises
    ------
    ValueError
        For any other device name.

    Examples
    --------
    >>> backend_for_device("cpu").name
    'cpu'
    >>> backend_for_device("tpu")
    Traceback (most recent call last):
        ...
    ValueError: unknown device 'tpu'; use 'cpu' or 'gpu'
    """
    if device == "cpu":
        return _cpu()
    if device in ("gpu", "cuda"):
        return _gpu()
    raise ValueError(f"unknown device {device!r}; use 'cpu' or 'gpu'")


@dataclass(frozen=True)
class KernelStatus:
    """Which CPU kernels run, as :func:`kernel_status` reports it.

    Parameters
    ----------
    mode : {"auto", "compiled", "numpy"}
        The ``kernels`` setting (:func:`ilargi.get_config`; ``ILARGI_KERNELS`` by default).
    running : {"compiled", "numpy"}
        The kernels a call would run now.
    ready : bool
        The compiled kernels are built for this environment (cached by Numba).
    building : bool
        A build is under way in another process.
    failed : str or None
        Why the last build failed (the end of its traceback), else None.
    cache : str
        Numba's cache folder of the compiled kernels.
    """

    mode: str
    running: str
    ready: bool
    building: bool
    failed: str | None
    cache: str


def kernel_status():
    """Which CPU kernels run now, and where the compiled ones of this environment stand.

    Under ``"auto"`` (the default) this may start their background build, as a first call would.

    Returns
    -------
    KernelStatus
        The setting, the kernels running, and whether the compiled ones are built, building or
        failed to build.

    Examples
    --------
    >>> import ilargi
    >>> ilargi.kernel_status().running in ("compiled", "numpy")
    True
    """
    running = "compiled" if _cpu() is not cpu else "numpy"
    mode = live_config()["kernels"]
    if _compiled is None:
        return KernelStatus(mode, running, False, False, None, "")
    built = _compiled.build.status()
    return KernelStatus(mode, running, built.ready, built.building, built.failed, built.cache)


def compiling():
    """Whether a build of the compiled CPU kernels is under way now (in a background process of
    this one's, or in another process of this environment), as far as this process knows: False
    where it never loaded them. Never starts a build.

    Returns
    -------
    bool
    """
    return _compiled is not None and _compiled.build.status().building


def compile_kernels(quiet=True):
    """Build the compiled CPU kernels of this environment now, in this process (blocking).

    Where ``"auto"`` would run the NumPy kernels until a background build finishes, this builds
    them in the foreground, once per environment (a container image, a CI step, a Dask worker's
    start-up): afterwards every process loads them from Numba's cache. A build under way in
    another process is waited for rather than repeated. The command ``python -m ilargi compile``
    does the same.

    Parameters
    ----------
    quiet : bool, default=True
        Print nothing (else one line with the seconds taken and the cache folder).

    Returns
    -------
    float
        Seconds taken (a second call, or one in a built environment, only loads the kernels).
    """
    global _compiled
    if _compiled is None:
        from . import compiled

        _compiled = compiled
    return _compiled.build.build(quiet=quiet)
