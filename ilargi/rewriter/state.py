"""The state the mixins of a NormalizedMatrix share, declared for the type checker.

:class:`~ilargi.rewriter.NormalizedMatrix` is made of one mixin per kind of operator
(:mod:`~ilargi.rewriter.products`, :mod:`~ilargi.rewriter.reductions`,
:mod:`~ilargi.rewriter.elementwise`, :mod:`~ilargi.rewriter.selection`); each reads the matrix's
state and a few of its members. :class:`MatrixState`, their common base, declares them, so that
mypy checks the mixins' bodies against the class they become part of. It adds nothing at run time:
the attributes are set by ``NormalizedMatrix.__init__`` and the members are NormalizedMatrix's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from typing import Self

    import numpy as np

    from ilargi.backend.contract import Array
    from ilargi.metadata import Part

    from .normalized import NormalizedMatrix


class MatrixState:
    """The attributes and members of a NormalizedMatrix that its mixins use."""

    _parts: tuple[Part, ...]
    _shape: tuple[int, ...]
    _scale: Array | None
    _shift: Array | None
    _columns: Sequence[str] | None
    _transposed: bool
    _derived: bool

    if TYPE_CHECKING:

        @property
        def shape(self) -> tuple[int, int]: ...

        @property
        def size(self) -> int: ...

        @property
        def dtype(self) -> np.dtype: ...

        @property
        def T(self) -> NormalizedMatrix: ...

        @property
        def _kernels(self) -> Any: ...

        def _base(self) -> NormalizedMatrix: ...

        def _full_scale(self) -> Array: ...

        def _full_shift(self) -> Array: ...

        def toarray(self) -> Array: ...

        def _select_columns(self, keep: Any) -> NormalizedMatrix: ...

        def _select_rows(self, idx: Any) -> NormalizedMatrix: ...

        def _may_overflow(self, part: Part) -> bool: ...

        def __neg__(self) -> Self: ...
