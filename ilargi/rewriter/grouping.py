"""Parts grouped as the rules read them: by table (shared indicator), snowflakes folded."""


def by_indicator(parts):
    """Parts grouped by shared indicator (a table split into numeric and one-hot parts)."""
    groups = {}
    for part in parts:
        groups.setdefault(id(part.indicator), []).append(part)
    return list(groups.values())


def folds(groups):
    """(c, h, F) for each group c whose indicator factors through a smaller-than-n host group h's,
    I_c = I_h·F (a snowflake, or Walmart's stores through its (store, week) rows), coarsest first.

    Then g(Z_c, rows_c) = g(g(Z_c, F), rows_h) and s(Y, rows_c) = s(s(Y, rows_h), F): the coarse
    group rides on the host's n-long gather and segment-sum, and its own are passes over n_h rows.
    """
    indicators = [group[0].indicator for group in groups]
    order = sorted(range(len(groups)), key=lambda i: indicators[i].n_source)
    out = []
    for position, c in enumerate(order):
        for h in order[position + 1 :]:  # the smallest host first
            host = indicators[h]
            if host.n_source > indicators[c].n_source and 2 * host.n_source <= host.n_rows:
                factor = indicators[c].through(host)
                if factor is not None:
                    out.append((c, h, factor))
                    break
    return out
