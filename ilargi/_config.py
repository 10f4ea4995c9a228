"""Ilargi's configuration: one set of settings per thread, as scikit-learn's ``sklearn._config``.

:func:`get_config` reads the settings, :func:`set_config` changes some of them, and
:func:`config_context` changes them for a block. The defaults come from environment variables,
read once, when this module is first imported (``import ilargi`` does not import it; the first
use of the kernels, the chooser or :func:`get_config` does):

* ``kernels`` (``ILARGI_KERNELS``): the CPU kernels, ``"auto"`` (default: the compiled ones once
  built, NumPy/SciPy's until then), ``"compiled"`` or ``"numpy"``;
* ``gpu_stacked`` (``ILARGI_GPU_STACKED``): the GPU's stacked passes over every part at once
  (default True; ``0`` in the variable turns them off);
* ``gpu_fused_gramvec`` (``ILARGI_GPU_FUSED_GRAMVEC``): α·Tᵀ(v⊙(T·y)) + β·z as one stacked GPU
  pass (default True; ``0`` turns it off);
* ``gpu_segment_sum`` (``ILARGI_GPU_SEGMENT_SUM``): the GPU's single-indicator segment sum,
  ``"pieces"`` (default), ``"atomic"`` or ``"csr"``;
* ``chooser_dir`` (``ILARGI_CHOOSER_DIR``): the folder of calibrated cost models (default None:
  ``~/.cache/ilargi/chooser``);
* ``host_dir`` (``ILARGI_HOST_DIR``): the folder of cached host probes (default None:
  ``~/.cache/ilargi/host``);
* ``available_memory`` (``ILARGI_AVAILABLE_MEMORY``): bytes the memory guard takes as available
  on every device (default None: measured);
* ``datasets_dir`` (``ILARGI_DATASETS``): the folder of the real datasets of ``python -m ilargi``
  (default None: ``shared/datasets`` next to the checkout).

Threads: each thread starts from the defaults, and :func:`set_config` and :func:`config_context`
change the calling thread's settings only. The threads the library starts for one call (the column
encoders of ``Table.to_matrix``, the host probe) run with the settings of the thread that called
(:func:`with_config`). Other processes start from the defaults of their own environment (the
background build of the compiled kernels, Dask's workers), and so do the threads of Dask's local
scheduler, which runs a Dask-backed matrix's tasks without a ``distributed`` client: set the
environment variable where a setting must reach them.

This module imports nothing from ilargi: every layer may read it.
"""

import math
import os
import threading
from contextlib import contextmanager
from functools import wraps
from numbers import Real
from pathlib import Path

__all__ = ["config_context", "get_config", "live_config", "set_config", "with_config"]

KERNELS = ("auto", "compiled", "numpy")
SEGMENT_SUMS = ("pieces", "atomic", "csr")
FOLDERS = ("chooser_dir", "host_dir", "datasets_dir")
FLAGS = ("gpu_stacked", "gpu_fused_gramvec")
# Each key's environment variable.
ENVIRONMENT = {
    "kernels": "ILARGI_KERNELS",
    "gpu_stacked": "ILARGI_GPU_STACKED",
    "gpu_fused_gramvec": "ILARGI_GPU_FUSED_GRAMVEC",
    "gpu_segment_sum": "ILARGI_GPU_SEGMENT_SUM",
    "chooser_dir": "ILARGI_CHOOSER_DIR",
    "host_dir": "ILARGI_HOST_DIR",
    "available_memory": "ILARGI_AVAILABLE_MEMORY",
    "datasets_dir": "ILARGI_DATASETS",
}


def _validate(key, value):
    """The stored form of ``value`` for ``key``; TypeError or ValueError naming the key and what
    it takes."""
    if key not in ENVIRONMENT:
        raise TypeError(
            f"unknown configuration key {key!r}; the keys are {', '.join(sorted(ENVIRONMENT))}"
        )
    if key == "kernels" or key == "gpu_segment_sum":
        options = KERNELS if key == "kernels" else SEGMENT_SUMS
        if value not in options:
            raise ValueError(f"{key} must be one of {options}, got {value!r}")
        return value
    if key in FLAGS:
        if not isinstance(value, bool):
            raise TypeError(f"{key} must be True or False, got {value!r}")
        return value
    if key in FOLDERS:
        if value is None:
            return None
        if not isinstance(value, (str, os.PathLike)):
            raise TypeError(f"{key} must be a path (str or os.PathLike) or None, got {value!r}")
        return Path(value)
    # available_memory
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, Real) or not 0 <= value < math.inf:
        raise ValueError(f"available_memory must be a number of bytes >= 0 or None, got {value!r}")
    return int(value)


def _from_environment(key, text):
    """A key's default from its environment variable's text (unset or empty: the built-in one)."""
    variable = ENVIRONMENT[key]
    if key in FLAGS:
        return text != "0"
    if not text:
        return {"kernels": "auto", "gpu_segment_sum": "pieces"}.get(key)
    try:
        value = float(text) if key == "available_memory" else text
        return _validate(key, value)
    except (TypeError, ValueError) as error:
        raise ValueError(f"${variable}: {error}") from None


_global_config = {
    key: _from_environment(key, os.environ.get(ENVIRONMENT[key])) for key in ENVIRONMENT
}
_threadlocal = threading.local()


def live_config():
    """This thread's settings, the live dict: for the library's hot paths (the choice of the CPU
    kernels at every operator), which read a setting without the copy :func:`get_config` makes.
    Read it, never change it (:func:`set_config` does, after its checks).

    Returns
    -------
    dict
    """
    try:
        return _threadlocal.config
    except AttributeError:
        _threadlocal.config = _global_config.copy()
        return _threadlocal.config


def get_config():
    """The settings of the calling thread.

    Returns
    -------
    dict
        Every key :func:`set_config` takes, with its value (a copy: changing it changes nothing).

    See Also
    --------
    set_config : Change settings.
    config_context : Change settings for a block.

    Examples
    --------
    >>> import ilargi
    >>> sorted(ilargi.get_config())  # doctest: +NORMALIZE_WHITESPACE
    ['available_memory', 'chooser_dir', 'datasets_dir', 'gpu_fused_gramvec', 'gpu_segment_sum',
     'gpu_stacked', 'host_dir', 'kernels']
    """
    return live_config().copy()


def set_config(**settings):
    """Change settings of the calling thread; the keys not given keep their values.

    Parameters
    ----------
    **settings
        The settings to change, by key (the environment variable of each gives its default):

        * ``kernels`` -- {"auto", "compiled", "numpy"}: the CPU kernels (``ILARGI_KERNELS``);
          "auto" runs the compiled (Numba) kernels once this environment has built them and the
          NumPy/SciPy ones until then.
        * ``gpu_stacked`` -- bool: the GPU's stacked passes over every part at once
          (``ILARGI_GPU_STACKED``); off, the rewrite rules run part by part.
        * ``gpu_fused_gramvec`` -- bool: α·Tᵀ(v⊙(T·y)) + β·z as one stacked GPU pass
          (``ILARGI_GPU_FUSED_GRAMVEC``).
        * ``gpu_segment_sum`` -- {"pieces", "atomic", "csr"}: the GPU's single-indicator segment
          sum (``ILARGI_GPU_SEGMENT_SUM``).
        * ``chooser_dir`` -- str, os.PathLike or None: the folder of calibrated cost models,
          looked up before the shipped ones and written by :func:`ilargi.calibrate`
          (``ILARGI_CHOOSER_DIR``; None: ``~/.cache/ilargi/chooser``).
        * ``host_dir`` -- str, os.PathLike or None: the folder of cached host probes
          (``ILARGI_HOST_DIR``; None: ``~/.cache/ilargi/host``).
        * ``available_memory`` -- int or None: bytes the memory guard takes as available on any
          device, e.g. to model a smaller machine (``ILARGI_AVAILABLE_MEMORY``; None: measured).
        * ``datasets_dir`` -- str, os.PathLike or None: the folder of the real datasets of
          ``python -m ilargi`` (``ILARGI_DATASETS``; None: ``shared/datasets`` next to the
          checkout).

    Raises
    ------
    TypeError
        For an unknown key, or a value of the wrong type.
    ValueError
        For a value outside the key's options.

    See Also
    --------
    get_config : Read the settings.
    config_context : Change settings for a block.

    Examples
    --------
    >>> import ilargi
    >>> previous = ilargi.get_config()
    >>> ilargi.set_config(kernels="numpy")
    >>> ilargi.get_config()["kernels"]
    'numpy'
    >>> ilargi.set_config(**previous)
    """
    checked = {key: _validate(key, value) for key, value in settings.items()}
    live_config().update(checked)


@contextmanager
def config_context(**settings):
    """Change settings of the calling thread for the block; every setting comes back at its end,
    also after an exception. Blocks nest.

    Parameters
    ----------
    **settings
        Keys and values as :func:`set_config` takes them.

    Yields
    ------
    None

    Raises
    ------
    TypeError, ValueError
        As :func:`set_config`, before the block runs.

    See Also
    --------
    get_config : Read the settings.
    set_config : Change settings.

    Examples
    --------
    >>> import ilargi
    >>> with ilargi.config_context(kernels="numpy", available_memory=2**30):
    ...     ilargi.get_config()["available_memory"]
    1073741824
    """
    checked = {key: _validate(key, value) for key, value in settings.items()}
    config = live_config()
    previous = config.copy()
    config.update(checked)
    try:
        yield
    finally:
        config.clear()
        config.update(previous)


def with_config(function, config=None):
    """``function`` made to run with the calling thread's settings (or ``config``) in whichever
    thread calls it: what the library hands to a pool of threads.

    Parameters
    ----------
    function : callable
    config : dict, optional
        Settings as :func:`get_config` returns them; default the calling thread's, now.

    Returns
    -------
    callable
        Takes the arguments of ``function`` and returns what it returns.

    Examples
    --------
    >>> from concurrent.futures import ThreadPoolExecutor
    >>> with config_context(kernels="numpy"), ThreadPoolExecutor(1) as pool:
    ...     pool.submit(with_config(lambda: get_config()["kernels"])).result()
    'numpy'
    """
    settings = get_config() if config is None else dict(config)

    @wraps(function)
    def run(*args, **kwargs):
        with config_context(**settings):
            return function(*args, **kwargs)

    return run
