"""The one cache of derived structures: :meth:`Indicator.cached` and :meth:`Part.cached` use it.

Indicators and parts never change, so what kernels derive from them (counts, CSR forms, device
copies, stacked plans) is built once and kept on them. A structure that also depends on another
object (a source, a second indicator, a tuple of parts) names it as its *owner*: the entry keeps
the owner and is returned only for that very object, so an ``id`` reused after garbage
collection never returns a stale structure.
"""

_MISSING = object()


def cached(cache, key, build, owner=None):
    """``cache``'s entry for ``key`` (and ``owner``), built by ``build()`` on first use.

    Parameters
    ----------
    cache : dict
        The dictionary the entry lives in (an indicator's or a part's).
    key : hashable
        What the structure is, e.g. ``"gpu_rows32"`` or ``("gpu_contiguous", "f")``.
    build : callable
        Builds the structure; called once per key and owner.
    owner : object or tuple of objects, optional
        What else the structure is derived from; compared by identity, element by element for
        a tuple.

    Returns
    -------
    object
        The cached structure (None too, if that is what ``build`` returned).

    Examples
    --------
    >>> store = {}
    >>> source = [1.0, 2.0]
    >>> cached(store, "total", lambda: sum(source), owner=source)
    3.0
    >>> cached(store, "total", lambda: -1.0, owner=source)  # built once
    3.0
    >>> cached(store, "total", lambda: 0.0, owner=[])  # another owner, another entry
    0.0
    """
    if owner is None:
        value = cache.get(key, _MISSING)
        if value is _MISSING:
            value = cache[key] = build()
        return value
    owners = owner if isinstance(owner, tuple) else (owner,)
    full_key = (key,) + tuple(id(item) for item in owners)
    entry = cache.get(full_key)
    if entry is None or any(kept is not item for kept, item in zip(entry[0], owners)):
        entry = cache[full_key] = (owners, build())
    return entry[1]
