"""Tables in, metadata out: :class:`Table` (pandas, Parquet, DuckDB sources), ``merge`` with pandas
semantics, :func:`concat`, ``to_matrix`` (a :class:`~ilargi.rewriter.NormalizedMatrix`), save/load."""

from .table import Table, concat

__all__ = ["Table", "concat"]
