"""Data-integration metadata: indicator and mapping matrices, parts, overlap rules, save/load.

The builders that derive metadata from tables (:class:`ilargi.Table`, :func:`ilargi.concat`) live in
:mod:`ilargi.table`, above the rewriter; nothing here imports anything above :mod:`ilargi.backend`.
"""

from .indicator import Indicator, mapping_matrix
from .io import Metadata
from .parts import Part, check_disjoint_coverage, group_rows, is_finite, make_parts, resolve_overlap

__all__ = [
    "Indicator",
    "Metadata",
    "Part",
    "check_disjoint_coverage",
    "group_rows",
    "is_finite",
    "make_parts",
    "mapping_matrix",
    "resolve_overlap",
]
