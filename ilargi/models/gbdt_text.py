"""LightGBM's model text of ilargi's trees (``GBDT::SaveModelToString``): what
``lightgbm.Booster(model_str=...)`` loads, so that prediction, SHAP values and saving come from
LightGBM itself."""

from __future__ import annotations


def _g(values):
    return " ".join(f"{float(v):g}" for v in values)


def _full(values):
    return " ".join(repr_17g(v) for v in values)


def repr_17g(value):
    """A double as LightGBM writes it in full precision (%.17g)."""
    return f"{float(value):.17g}"


def tree_text(tree):
    """One tree in LightGBM's model text (Tree::ToString)."""
    lines = [
        f"num_leaves={tree.num_leaves}",
        f"num_cat={len(tree.cat_boundaries) - 1}",
        "split_feature=" + " ".join(map(str, tree.split_feature)),
        "split_gain=" + _g(tree.split_gain),
        "threshold=" + _full(tree.threshold),
        "decision_type=" + " ".join(map(str, tree.decision_type)),
        "left_child=" + " ".join(map(str, tree.left_child)),
        "right_child=" + " ".join(map(str, tree.right_child)),
        "leaf_value=" + _full(tree.leaf_value),
        "leaf_weight=" + _full(tree.leaf_weight),
        "leaf_count=" + " ".join(str(int(c)) for c in tree.leaf_count),
        "internal_value=" + _g(tree.internal_value),
        "internal_weight=" + _g(tree.internal_weight),
        "internal_count=" + " ".join(str(int(c)) for c in tree.internal_count),
    ]
    if len(tree.cat_boundaries) > 1:
        lines.append("cat_boundaries=" + " ".join(map(str, tree.cat_boundaries)))
        lines.append("cat_threshold=" + " ".join(map(str, tree.cat_threshold)))
    lines += [
        "is_linear=0",
        f"shrinkage={tree.shrinkage:g}",
    ]
    return "\n".join(lines) + "\n\n"


def model_text(trees, objective_line, n_classes, n_per_round, feature_names, feature_infos):
    """A booster in LightGBM's model text (GBDT::SaveModelToString), without its parameters."""
    blocks = [f"Tree={i}\n" + tree_text(tree) + "\n" for i, tree in enumerate(trees)]
    head = [
        "tree",
        "version=v4",
        f"num_class={n_classes}",
        f"num_tree_per_iteration={n_per_round}",
        "label_index=0",
        f"max_feature_idx={len(feature_names) - 1}",
        f"objective={objective_line}",
        "feature_names=" + " ".join(feature_names),
        "feature_infos=" + " ".join(feature_infos),
        "tree_sizes=" + " ".join(str(len(b.encode())) for b in blocks),
        "",
        "",
    ]
    return "\n".join(head)[:-1] + "".join(blocks) + "end of trees\n"
