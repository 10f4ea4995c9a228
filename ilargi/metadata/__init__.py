"""Data-integration metadata: indicator and mapping matrices, parts, overlap rules, save/load.

The builders that derive metadata from tables (:class:`ilargi.Table`, :func:`ilargi.concat`) live in
:mod:`ilargi.metadata.table`.
"""
from .indicator import Indicator, mapping_matrix
from .io import Metadata
from .parts import Part, check_disjoint_coverage, make_parts, resolve_overlap

__all__ = ["Indicator", "Metadata", "Part", "check_disjoint_coverage", "make_parts",
           "mapping_matrix", "resolve_overlap"]
