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
sys.path.insert(0, str(ROOT))          # document this checkout, whatever ilargi is installed
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
default_role = "code"          # `x` in prose is code, not a dangling cross-reference
root_doc = "index"

# -- API reference ----------------------------------------------------------------------------
autosummary_generate = True
autosummary_imported_members = True     # ilargi.datasets re-exports its submodules' loaders
autodoc_default_options = {"member-order": "bysource"}
autodoc_typehints = "none"
numpydoc_show_class_members = False     # the class template lists and documents the methods
numpydoc_class_members_toctree = False
numpydoc_attributes_as_param_list = True
numpydoc_xref_param_type = False

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
            logger.warning(f"ilargi.{name} (in ilargi.__all__) has no API page: add it to docs/api/index.rst")


# Methods the estimators inherit from scikit-learn (score, set_output, get_metadata_routing, ...)
# keep their docstrings, whose cross-references point into scikit-learn's own documentation; they
# are resolved to its pages here (no intersphinx: the build must not need the network).
SKLEARN = "https://scikit-learn.org/stable/"
SKLEARN_TARGETS = {
    ("ref", "metadata_routing"): "metadata_routing.html",
    ("ref", "df_output_transform"): "auto_examples/miscellaneous/plot_set_output.html",
    ("ref", "r2_score"): "modules/model_evaluation.html#r2-score",
    ("ref", "accuracy_score"): "modules/model_evaluation.html#accuracy-score",
    ("term", "meta-estimator"): "glossary.html#term-meta-estimator",
}


def _sklearn_reference(app, env, node, contnode):
    """A link into scikit-learn's documentation for the labels its docstrings use."""
    from docutils import nodes

    target = node.get("reftarget", "").lower()
    page = SKLEARN_TARGETS.get((node.get("reftype"), target))
    if page is None:
        return None
    text = contnode.astext() if node.get("refexplicit") else target.replace("_", " ")
    reference = nodes.reference("", "", internal=False, refuri=SKLEARN + page)
    reference += nodes.inline(text, text)
    return reference


def setup(app):
    app.connect("missing-reference", _sklearn_reference)
    app.connect("build-finished", _check_api_pages)
