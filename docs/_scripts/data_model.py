"""Figures of the guide's data-model page, drawn from real metadata (matplotlib's plot directive).

``star()`` and ``left_join()`` each build a two-table join with :class:`ilargi.Table`, encode it
with ``to_matrix`` and draw what the NormalizedMatrix holds: the joined table T, and the sources
S (sales) and R (stores) with their indicator matrices I and mapping matrices M, so that

    T = I_S S M_Sᵀ + I_R R M_Rᵀ        (I_S: the identity, the fact table itself)

Every number drawn comes from the matrix's parts (``part.source``, ``part.rows``, ``part.cols``).
"""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.patches import Rectangle

import ilargi

FACT, DIM, NULL, ONE, ZERO = "#cfe2f3", "#fce5cd", "#eeeeee", "#444444", "#f6f6f6"


def joined(store_ids):
    sales = pd.DataFrame(
        {
            "store_id": store_ids,
            "units": [3.0, 1.0, 4.0, 1.0, 5.0, 2.0],
            "price": [2.0, 7.0, 1.0, 8.0, 2.0, 8.0],
        }
    )
    stores = pd.DataFrame(
        {"store_id": [1, 2, 3], "size": [10.0, 20.0, 40.0], "staff": [3.0, 5.0, 9.0]}
    )
    table = ilargi.Table(sales, name="sales").merge(
        ilargi.Table(stores, name="stores"), on="store_id", how="left", validate="many_to_one"
    )
    X, _ = table.to_matrix(columns=["units", "price", "size", "staff"])
    return X


def grid(ax, values, colors, title, height, labels=None, numbers=True, rowlabels=None):
    """Draw a matrix as cells, top-aligned in a frame ``height`` cells high: ``colors[i][j]`` fills
    cell (i, j); its numbers unless ``numbers`` is False (then a 1 in each nonzero cell)."""
    n, d = values.shape
    for i in range(n):
        for j in range(d):
            ax.add_patch(
                Rectangle(
                    (j, n - 1 - i),
                    1,
                    1,
                    facecolor=colors[i][j],
                    edgecolor="white",
                    hatch="///" if colors[i][j] == NULL else None,
                    linewidth=1.5,
                )
            )
            if numbers and colors[i][j] != NULL:
                ax.text(
                    j + 0.5, n - 0.5 - i, f"{values[i, j]:g}", ha="center", va="center", fontsize=9
                )
            elif not numbers and values[i, j]:
                ax.text(
                    j + 0.5, n - 0.5 - i, "1", ha="center", va="center", fontsize=9, color="white"
                )
    ax.set_xlim(-0.1, d + 0.1)
    ax.set_ylim(n - height, n + 1.4)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.text(d / 2, n + 1.3, title, ha="center", va="bottom", fontsize=10)
    if labels:
        for j, label in enumerate(labels):
            ax.text(j + 0.5, n + 0.15, label, ha="center", va="bottom", fontsize=7, rotation=40)
    if rowlabels is not None:
        for i, label in enumerate(rowlabels):
            ax.text(-0.2, n - 0.5 - i, label, ha="right", va="center", fontsize=7, color="0.35")


def symbol(ax, text):
    ax.axis("off")
    ax.text(0.5, 0.62, text, ha="center", va="center", fontsize=18)


def draw(X, caption):
    fact, dim = X.parts
    T = X.toarray()
    n, d = T.shape
    rows = dim.rows
    S, R = fact.source, dim.source
    I = np.zeros((n, R.shape[0]))
    I[np.flatnonzero(rows >= 0), rows[rows >= 0]] = 1
    M_S, M_R = np.zeros((S.shape[1], d)), np.zeros((R.shape[1], d))  # the transposed mappings
    M_S[np.arange(S.shape[1]), fact.cols] = 1
    M_R[np.arange(R.shape[1]), dim.cols] = 1
    source_of = np.full((n, d), NULL, dtype=object)
    source_of[:, fact.cols] = FACT
    source_of[np.ix_(np.flatnonzero(rows >= 0), dim.cols)] = DIM

    widths = [
        d + 0.2,
        0.8,
        S.shape[1] + 0.2,
        0.6,
        d + 0.2,
        0.8,
        I.shape[1] + 0.2,
        0.6,
        R.shape[1] + 0.2,
        0.6,
        d + 0.2,
    ]
    fig, axes = plt.subplots(
        1, len(widths), figsize=(13, 3.4), gridspec_kw={"width_ratios": widths}
    )
    rowlabels = [f"row {i}" for i in range(n)]
    grid(axes[0], T, source_of, "T (the joined table)", n, X.columns, rowlabels=rowlabels)
    symbol(axes[1], "=")
    grid(axes[2], S, [[FACT] * S.shape[1]] * n, "S (sales)", n, X.columns[:2])
    symbol(axes[3], "·")
    grid(
        axes[4],
        M_S,
        [[ONE if v else ZERO for v in r] for r in M_S],
        "$M_S^T$ (mapping)",
        n,
        X.columns,
        numbers=False,
    )
    symbol(axes[5], "+")
    grid(
        axes[6],
        I,
        [[ONE if v else ZERO for v in r] for r in I],
        "$I_R$ (indicator)",
        n,
        [f"r{j}" for j in range(R.shape[0])],
        numbers=False,
    )
    symbol(axes[7], "·")
    grid(
        axes[8],
        R,
        [[DIM] * R.shape[1]] * R.shape[0],
        "R (stores)",
        n,
        ["size", "staff"],
        rowlabels=[f"r{j}" for j in range(R.shape[0])],
    )
    symbol(axes[9], "·")
    grid(
        axes[10],
        M_R,
        [[ONE if v else ZERO for v in r] for r in M_R],
        "$M_R^T$ (mapping)",
        n,
        X.columns,
        numbers=False,
    )
    fig.text(0.5, 0.01, caption, ha="center", fontsize=9, color="0.3")
    fig.subplots_adjust(left=0.04, right=0.995, top=0.8, bottom=0.08, wspace=0.1)
    return fig


def star():
    """An inner star join: every sale finds its store."""
    X = joined([1, 2, 2, 3, 1, 1])
    return draw(
        X,
        f"index vector of R: rows_R = {X.parts[1].rows.tolist()}   "
        f"mapping: cols_S = {X.parts[0].cols.tolist()}, cols_R = {X.parts[1].cols.tolist()}",
    )


def left_join():
    """A left join: the last sale's store 9 is not in the stores table."""
    X = joined([1, 2, 2, 3, 1, 9])
    return draw(
        X,
        f"rows_R = {X.parts[1].rows.tolist()}: -1 = no match, an all-zero row of I_R; "
        f"the hatched NULL cells of T hold 0",
    )
