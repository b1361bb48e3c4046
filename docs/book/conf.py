"""Sphinx configuration of the reading edition (`make book`, tools/coursetools/book/).

Jupyter Book 1's stack, used directly: Sphinx, MyST-NB (notebooks with their stored outputs, never
executed here) and the Sphinx Book Theme, all from PyPI, so the site builds without any other
network. The lesson pages are the executed lessons `make test` keeps; coursetools.book writes them
and the home page into a staging folder beside this file's copy.
"""

project = "GPUs for Machine Learning"
author = "the course's authors"
copyright = "the course's authors"  # noqa: A001 (Sphinx's name)

extensions = ["myst_nb", "sphinx_design"]
# Pages come from notebooks that already ran; a build never starts a kernel.
nb_execution_mode = "off"
# Widget state (tqdm's bars) would load its JavaScript from a CDN: the site fetches nothing from
# outside.
nb_ipywidgets_js = {}
nb_merge_streams = True
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
suppress_warnings = ["myst.header", "mystnb.unknown_mime_type"]
exclude_patterns = ["_build", "**.ipynb_checkpoints"]

html_theme = "sphinx_book_theme"
# Jupyter Book 2 (mystmd) was tried first: its CLI (npm `mystmd`, PyPI `jupyter-book` 2.x) fetches
# the site theme from api.mystmd.org at build time, and no registry serves the built theme, so it
# cannot build where only PyPI and npm are reachable (this project's CI runner). This stack builds from PyPI alone.
html_title = project
html_static_path = ["_static"]
html_css_files = ["book.css"]
html_copy_source = False
html_show_sourcelink = False
html_theme_options = {
    "repository_url": "https://github.com/gpus-for-ml/gpus-for-ml",
    "use_repository_button": True,
    "show_toc_level": 2,
    "navigation_with_keys": False,
}
html_last_updated_fmt = None
