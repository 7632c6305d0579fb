"""Sphinx configuration of the airflow-task-state documentation.

The pages are MyST Markdown (myst-parser), so the text that used to live in one README moved here
with its Markdown intact. tests/test_docs.py builds them with warnings as errors, and
tests/test_docs_samples.py runs every code sample they show.
"""

from __future__ import annotations

project = "airflow-task-state"
author = "The airflow-task-state authors"
copyright = "the airflow-task-state authors"

extensions = ["myst_parser", "sphinx.ext.autodoc"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
# Headings get the same anchors as on GitHub, so links like `security.md#the-key` keep working.
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence"]
html_theme = "alabaster"
html_title = "airflow-task-state"
autodoc_member_order = "bysource"
autodoc_typehints = "description"
