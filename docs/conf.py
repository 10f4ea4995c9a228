"""Sphinx configuration of Ilargi's documentation.

Build (from the repository root, after ``pip install -e ".[docs]"``)::

    python -m sphinx -W --keep-going -b html docs docs/_build/html      # as CI builds it
    python -m sphinx -b html -D plot_gallery=0 docs docs/_build/html    # quick: gallery not run

The gallery (``docs/gallery/plot_*.py``) runs at build time and draws its figures from timings taken
on the machine that builds; the scripts of ``examples/`` are rendered, not run (``tests/
test_examples.py`` runs them). After the build, every name of ``ilargi.__all__`` must have its page
under ``api/generated/`` (checked at ``build-finished``; a missing one is a warning, so an error
under ``-W``).
"""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # document this checkout, whatever ilargi is installed
os.environ.setdefault("MPLBACKEND", "Agg")

import ilargi  # noqa: E402

# -- Project ----------------------------------------------------------------------------------
project = "Ilargi"
author = "the Ilargi developers"
copyright = "the Ilargi developers, Apache-2.0"
release = version = ilargi.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "numpydoc",
    "matplotlib.sphinxext.plot_directive",
    "sphinx_gallery.gen_gallery",
]

templates_path = ["_templates"]
exclude_patterns = ["_build", "**.ipynb_checkpoints", "gallery/README.txt", "_scripts"]
default_role = "code"  # `x` in prose is code, not a dangling cross-reference
root_doc = "index"

# -- API reference ----------------------------------------------------------------------------
autosummary_generate = True
autosummary_imported_members = True  # ilargi.datasets re-exports its submodules' loaders
autodoc_default_options = {"member-order": "bysource"}
autodoc_typehints = "none"
numpydoc_show_class_members = False  # the class template lists and documents the methods
numpydoc_class_members_toctree = False
numpydoc_attributes_as_param_list = True
numpydoc_xref_param_type = True  # types in parameter lists link where they are known:
numpydoc_xref_ignore = "all"  # only the names below (and full dotted names) become links
numpydoc_xref_aliases = {
    "Table": "ilargi.Table",
    "NormalizedMatrix": "ilargi.NormalizedMatrix",
    "Plan": "ilargi.Plan",
    "Metadata": "ilargi.Metadata",
    "Part": "ilargi.Part",
    "Indicator": "ilargi.Indicator",
    "DataFrame": "pandas.DataFrame",
    "pandas.DataFrame": "pandas.DataFrame",
    "ndarray": "numpy.ndarray",
    "LinearOperator": "scipy.sparse.linalg.LinearOperator",
}

# -- Figures of the guide (matplotlib's plot directive) ---------------------------------------
plot_include_source = False
plot_html_show_source_link = False
plot_html_show_formats = False
plot_formats = [("png", 110)]
plot_rcparams = {"figure.dpi": 110, "savefig.bbox": "tight"}
plot_basedir = str(Path(__file__).parent / "_scripts")

# -- Gallery ------------------------------------------------------------------------------------
sphinx_gallery_conf = {
    # The gallery of figures (run at build time) and the user scripts of examples/ (rendered only:
    # they need datasets or take arguments; tests/test_examples.py runs them on small data).
    "examples_dirs": ["gallery", "../examples"],
    "gallery_dirs": ["auto_gallery", "auto_examples"],
    "filename_pattern": r"/plot_",
    "ignore_pattern": r"__init__\.py|/_",
    "within_subsection_order": "FileNameSortKey",
    "download_all_examples": False,
    "remove_config_comments": True,
    "capture_repr": (),
    "image_scrapers": ("matplotlib",),
    "matplotlib_animations": False,
    "min_reported_time": 1,
    "backreferences_dir": "api/generated/backreferences",
    "doc_module": ("ilargi",),
    "reference_url": {"ilargi": None},
    "show_memory": False,
    "show_signature": False,
}

# -- HTML ---------------------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"Ilargi {release}"
html_static_path = ["_static"]
html_css_files = ["ilargi.css"]
html_show_sourcelink = False
html_theme_options = {
    "navbar_align": "left",
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
}
html_context = {"default_mode": "light"}


# -- Checks -------------------------------------------------------------------------------------
def _check_api_pages(app, exception):
    """Every public name of ilargi has its page (a warning otherwise: an error under -W)."""
    if exception is not None or app.builder.format != "html":
        return
    from sphinx.util import logging

    logger = logging.getLogger("ilargi.docs")
    out = Path(app.outdir) / "api" / "generated"
    for name in ilargi.__all__:
        if not (out / f"ilargi.{name}.html").is_file():
            logger.warning(
                f"ilargi.{name} (in ilargi.__all__) has no API page: add it to docs/api/index.rst"
            )


# Links out, without intersphinx (the build must not need the network). Methods the estimators
# inherit from scikit-learn (score, set_output, get_metadata_routing, ...) keep their docstrings,
# whose cross-references point into scikit-learn's own documentation: those labels get their
# pages. Names of NumPy, SciPy, pandas and scikit-learn (``See Also`` entries, types) get the page
# their documentation generates for every public name.
SKLEARN = "https://scikit-learn.org/stable/"
SKLEARN_LABELS = {
    ("ref", "metadata_routing"): "metadata_routing.html",
    ("ref", "df_output_transform"): "auto_examples/miscellaneous/plot_set_output.html",
    (
        "ref",
        "sphx_glr_auto_examples_miscellaneous_plot_set_output.py",
    ): "auto_examples/miscellaneous/plot_set_output.html",
    ("ref", "r2_score"): "modules/model_evaluation.html#r2-score",
    ("ref", "accuracy_score"): "modules/model_evaluation.html#accuracy-score",
    ("term", "meta-estimator"): "glossary.html#term-meta-estimator",
}
# numpydoc's links of common type words (``bool``, ``iterable``, ``int``, ...) assume intersphinx.
PYTHON = "https://docs.python.org/3/"
NUMPY = "https://numpy.org/doc/stable/"
INTERSPHINX_LIKE = {
    "python:bltin-boolean-values": PYTHON + "library/stdtypes.html#boolean-type-bool",
    "python:iterable": PYTHON + "glossary.html#term-iterable",
    "python:sequence": PYTHON + "glossary.html#term-sequence",
    "numpy:array_like": NUMPY + "glossary.html#term-array_like",
    "python:None": PYTHON + "library/constants.html#None",
    "python:True": PYTHON + "library/constants.html#True",
    "python:False": PYTHON + "library/constants.html#False",
    "python:int": PYTHON + "library/functions.html#int",
    "python:float": PYTHON + "library/functions.html#float",
    "python:str": PYTHON + "library/stdtypes.html#str",
    "python:list": PYTHON + "library/stdtypes.html#list",
    "python:tuple": PYTHON + "library/stdtypes.html#tuple",
    "python:dict": PYTHON + "library/stdtypes.html#dict",
    "python:callable": PYTHON + "library/functions.html#callable",
}
API_PAGES = {
    "sklearn": SKLEARN + "modules/generated/{}.html",
    "numpy": "https://numpy.org/doc/stable/reference/generated/{}.html",
    "scipy": "https://docs.scipy.org/doc/scipy/reference/generated/{}.html",
    "pandas": "https://pandas.pydata.org/docs/reference/api/{}.html",
}


def _external_reference(app, env, node, contnode):
    """A link into another project's documentation for a reference Sphinx cannot resolve here."""
    from docutils import nodes

    target = node.get("reftarget", "")
    if target in INTERSPHINX_LIKE:
        url = INTERSPHINX_LIKE[target]
        text = contnode.astext()
    elif node.get("refdomain") == "std":
        page = SKLEARN_LABELS.get((node.get("reftype"), target.lower()))
        url = None if page is None else SKLEARN + page
        text = contnode.astext() if node.get("refexplicit") else target.replace("_", " ")
    elif node.get("refdomain") == "py":
        root = target.split(".")[0]
        public = all(not piece.startswith("_") for piece in target.split("."))
        url = (
            API_PAGES[root].format(target)
            if root in API_PAGES and public and "." in target
            else None
        )
        text = contnode.astext()
    else:
        url = None
    if url is None:
        return None
    reference = nodes.reference("", "", internal=False, refuri=url)
    literal = node.get("refdomain") == "py" and target not in INTERSPHINX_LIKE
    reference += nodes.literal(text, text) if literal else nodes.inline(text, text)
    return reference


def setup(app):
    app.connect("missing-reference", _external_reference)
    app.connect("build-finished", _check_api_pages)
