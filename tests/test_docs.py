"""The API reference covers the public API: every name of ``ilargi.__all__`` is listed in
``docs/api/index.rst`` (the Sphinx build also checks that each has its page), and every public
function, class and method defined in ilargi has a numpydoc docstring with a summary and its
parameters (numpydoc's validator, installed with the ``docs`` extra; the docstring checks without
it)."""

import inspect
import re
from pathlib import Path

import pytest

import ilargi

ROOT = Path(__file__).resolve().parents[1]
API_INDEX = ROOT / "docs" / "api" / "index.rst"
GUIDE = ROOT / "docs" / "guide"

# numpydoc codes that fail the test: no docstring, no summary, parameters missing or unknown,
# no Returns section where the function returns a value (not asked of properties).
REQUIRED = {"GL08", "SS01", "PR01", "PR02", "RT01"}


def _listed_names():
    """The names under the ``autosummary`` directives of docs/api/index.rst."""
    names, inside = set(), False
    for line in API_INDEX.read_text().splitlines():
        if line.startswith(".. autosummary::"):
            inside = True
        elif inside and line.strip() and not line.startswith(" "):
            inside = False
        elif inside and line.startswith("   ") and not line.strip().startswith(":"):
            names.add(line.strip())
    return names


def test_every_public_name_is_in_the_api_reference():
    assert set(ilargi.__all__) - _listed_names() == set()
    assert _listed_names() - set(ilargi.__all__) == set()


def _own(cls, attr):
    """Whether cls's public attribute attr is a method or property written in ilargi (not one
    inherited from scikit-learn or object)."""
    static = inspect.getattr_static(cls, attr)
    func = static.fget if isinstance(static, property) else getattr(static, "__func__", static)
    return callable(func) and (getattr(func, "__module__", None) or "").startswith("ilargi")


def _documented_objects():
    """Dotted names of every public function, class and method that the API pages show."""
    out = []
    for name in ilargi.__all__:
        obj = getattr(ilargi, name)
        if inspect.ismodule(obj):  # ilargi.datasets: its own __all__
            out += [f"ilargi.{name}.{sub}" for sub in obj.__all__]
            continue
        out.append(f"ilargi.{name}")
        if inspect.isclass(obj):
            out += [
                f"ilargi.{name}.{attr}"
                for attr in dir(obj)
                if not attr.startswith("_") and _own(obj, attr)
            ]
    return out


def _resolve(dotted):
    parts = dotted.split(".")
    obj = ilargi
    for part in parts[1:]:
        obj = getattr(obj, part)
    return obj


@pytest.mark.parametrize("dotted", _documented_objects())
def test_public_object_has_a_docstring(dotted):
    doc = inspect.getdoc(_resolve(dotted))
    assert doc and doc.strip().splitlines()[0].strip(), f"{dotted} has no docstring summary"


@pytest.mark.parametrize("dotted", _documented_objects())
def test_public_object_docstring_validates(dotted):
    validate = pytest.importorskip("numpydoc.validate").validate
    errors = [(code, message) for code, message in validate(dotted)["errors"] if code in REQUIRED]
    owner, _, attr = dotted.rpartition(".")
    if (
        owner != "ilargi"
        and inspect.isclass(_resolve(owner))
        and isinstance(inspect.getattr_static(_resolve(owner), attr), property)
    ):
        errors = [(code, message) for code, message in errors if code != "RT01"]
    assert errors == [], f"{dotted}: {errors}"


def test_every_guide_page_is_in_the_guide_toctree():
    """A page left out of the toctree is a warning (an error under -W); this says which."""
    index = (GUIDE / "index.rst").read_text()
    listed = set(re.findall(r"^   ([a-z_]+)$", index, flags=re.M))
    pages = {p.stem for p in GUIDE.glob("*.rst")} - {"index"}
    assert pages - listed == set()
