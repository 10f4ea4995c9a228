"""ilargi.models._sklearn_compat is the one module of ilargi that imports a private scikit-learn
name (a module path with a component, or a name, that starts with an underscore): every other
module takes such a name from it, so a scikit-learn release that moves one is fixed in one place."""

import ast
from pathlib import Path

import ilargi
from ilargi.models import _sklearn_compat

PACKAGE = Path(ilargi.__file__).resolve().parent
COMPAT = PACKAGE / "models" / "_sklearn_compat.py"


def private_sklearn_imports(source):
    """(line, what) for each import of a private scikit-learn name in the source."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "sklearn" and any(p.startswith("_") for p in parts[1:]):
                    found.append((node.lineno, f"import {alias.name}"))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            parts = node.module.split(".")
            if parts[0] != "sklearn":
                continue
            private_module = any(p.startswith("_") for p in parts[1:])
            for alias in node.names:
                if private_module or alias.name.startswith("_"):
                    found.append((node.lineno, f"from {node.module} import {alias.name}"))
    return found


def test_the_checker_finds_every_form():
    source = (
        "import sklearn.utils._param_validation\n"
        "from sklearn.utils._set_output import _get_output_config\n"
        "from sklearn.base import BaseEstimator, _fit_context\n"
        "def f():\n"
        "    from sklearn.utils.validation import _assert_all_finite\n"
        "from sklearn.utils.validation import check_array\n"
        "import sklearn\n"
    )
    assert [line for line, _ in private_sklearn_imports(source)] == [1, 2, 3, 5]


def test_no_module_but_the_compat_module_imports_a_private_sklearn_name():
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {what}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != COMPAT
        for line, what in private_sklearn_imports(path.read_text(encoding="utf-8"))
    ]
    assert not offenders, "import these from ilargi.models._sklearn_compat:\n" + "\n".join(
        offenders
    )
    assert private_sklearn_imports(COMPAT.read_text(encoding="utf-8"))  # where they live


def test_the_compat_names_work():
    from numbers import Real

    assert _sklearn_compat.Interval(Real, 0, None, closed="left").is_satisfied_by(1.0)
    assert _sklearn_compat.StrOptions({"a"}).is_satisfied_by("a")
    assert callable(_sklearn_compat._fit_context(prefer_skip_nested_validation=True))
    assert set(_sklearn_compat.__all__) <= set(dir(_sklearn_compat))
