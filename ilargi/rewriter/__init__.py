"""The rewriter: :class:`NormalizedMatrix` (the virtual joined table) and its rewrite rules."""

from .normalized import NormalizedMatrix

__all__ = ["NormalizedMatrix"]
