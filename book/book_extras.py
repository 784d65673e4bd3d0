"""A small Sphinx extension for the book, loaded through ``sphinx.local_extensions`` in _config.yml.

It lives beside the chapters (a plain file in book/) so that any copy of the book that carries
book/'s files builds with it. It does what Jupyter Book 1 has no setting for:

* **Author-year bibliography.** The chapters cite author-year (``bibtex_reference_style:
  author_year``: "Goldwaser and Ge [2023]", "[Jacot et al., 2018]"), but pybtex only ships alpha
  and numeric labels. The bibliography style ``author_year`` registered here is pybtex's ``plain``
  (sorted by author, year, title) with labels in the same form as a parenthetical citation:
  "[Goldwaser and Ge, 2023]". Select it with ``bibtex_default_style: author_year``.
* **Download the executed notebook.** Each chapter is a MyST notebook (``.md``). sphinx-book-theme
  offers its executed ``.ipynb`` (the one MyST-NB writes to ``_build/jupyter_execute``) only when a
  launch button (Binder, JupyterHub, Colab, ...) is configured, and a launch button needs the
  book's repository URL, which this book has none of. This hook puts the executed notebook next to
  the page sources and adds the ``.ipynb`` entry to the theme's download menu, beside ``.md`` and
  ``.pdf``.
* **No ipywidgets state in the pages.** Executing a chapter stores the state of every widget it
  created in the notebook (the live demo's sliders and its last PNG, tens of KB). The built book
  shows no ipywidgets (its demos are static HTML; the live demo's output is removed), so that
  state, and the widget-manager scripts MyST-NB would load from a CDN to read it, are dropped
  from the pages and from the offered ``.ipynb``.
* **One of each script.** Every page loaded sphinx-thebe's configuration twice, an uncaught
  "Identifier 'THEBE_JS_URL' has already been declared" in the console; :func:`_dedupe_scripts`
  keeps one.
* **Tables that fit.** Long names in tables (record folders, claim ids) wrap, so the Findings
  tables fit a laptop's width (:data:`TABLE_CSS`).
* **Static demos.** A chapter's demos (``itlin.book.widgets.Demo``) are live ``ipywidgets`` in
  Jupyter; in the built book they are pre-rendered frames with sliders. :func:`setup` sets
  ``ITLIN_DEMOS=static``, which the kernels the build starts inherit.
* **Encrypted kernel transport.** jupyter_client leaves its kernels' ZeroMQ transport unencrypted
  by default, and ipykernel then prints "Kernel is running over TCP without encryption" once per
  executed chapter, burying real warnings in the build log. ipykernel's kernelspec declares
  CurveZMQ support, so :func:`encrypt_kernel_transport` makes the kernels the build starts use it
  (``KernelManager.transport_encryption = "auto"``, where pyzmq has Curve).
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from pathlib import Path

from pybtex.plugin import register_plugin
from pybtex.richtext import Text
from pybtex.style.formatting.plain import Style as PlainStyle
from pybtex.style.labels import BaseLabelStyle

STYLE_NAME = "author_year"


def _last_names(person) -> str:
    """"von Last" of a pybtex Person, LaTeX accents decoded ("Ortiz-Jim{\\'e}nez" -> "Ortiz-Jiménez")."""
    parts = [*person.rich_prelast_names, *person.rich_last_names]
    return " ".join(Text(p).render_as("text") for p in parts)


class AuthorYearLabelStyle(BaseLabelStyle):
    """Labels "Greydanus, 2020", "Goldwaser and Ge, 2023", "Jacot et al., 2018".

    Three or more authors give "First et al.", as sphinxcontrib-bibtex's author-year citations
    do. Equal labels get a, b, ... appended in bibliography order.
    """

    def format_labels(self, sorted_entries):
        labels = [self.format_label(entry) for entry in sorted_entries]
        count = Counter(labels)
        seen: Counter = Counter()
        for label in labels:
            if count[label] == 1:
                yield label
            else:
                yield label + chr(ord("a") + seen[label])
                seen[label] += 1

    def format_label(self, entry) -> str:
        persons = entry.persons.get("author") or entry.persons.get("editor") or []
        names = [_last_names(p) for p in persons]
        if not names:
            who = Text.from_latex(entry.fields.get("title", entry.key)).render_as("text")
        elif len(names) == 1:
            who = names[0]
        elif len(names) == 2:
            who = f"{names[0]} and {names[1]}"
        else:
            who = f"{names[0]} et al."
        year = entry.fields.get("year", "")
        return f"{who}, {year}" if year else who


class AuthorYearStyle(PlainStyle):
    """pybtex's plain style (entries sorted by author, year, title) with author-year labels."""

    default_label_style = AuthorYearLabelStyle


def _offer_executed_notebook(app, pagename, templatename, context, doctree):
    """Add the executed ``.ipynb`` of a MyST-notebook page to sphinx-book-theme's download menu.

    Runs before the theme's header buttons (priority 500 < 501); the theme then lists
    ``_sources/<page>.ipynb`` as ".ipynb" in the download menu. Pages that are not notebooks
    (no kernelspec), .ipynb sources (already offered as their source) and pages whose executed
    notebook is missing are left alone.
    """
    if context.get("ipynb_source"):
        return
    sourcename = context.get("sourcename") or ""
    if not sourcename.endswith((".md", ".md.txt")):
        return
    if "kernelspec" not in app.env.metadata.get(pagename, {}):
        return
    config = getattr(app.env, "mystnb_config", None)
    folder = getattr(config, "output_folder", None) or Path(app.outdir).parent / "jupyter_execute"
    executed = Path(folder, *f"{pagename}.ipynb".split("/"))
    if not executed.is_file():
        return
    target = Path(app.outdir, "_sources", *f"{pagename}.ipynb".split("/"))
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(executed, target)
    _strip_widget_metadata(target)
    context["ipynb_source"] = f"{pagename}.ipynb"


def _strip_widget_metadata(path: Path) -> None:
    """Drop the ipywidgets state from a downloadable notebook's metadata (see above)."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    if nb.get("metadata", {}).pop("widgets", None) is not None:
        path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def _clean_downloads(app, exception):
    """Strip widget state from every ``.ipynb`` offered under ``_sources``: the executed copies
    added above, and the sources Sphinx copies itself when chapters are given as ``.ipynb``
    (a book built from notebooks executed elsewhere, e.g. by papermill)."""
    if exception is None and app.builder.format == "html":
        for nb_file in Path(app.outdir, "_sources").rglob("*.ipynb"):
            _strip_widget_metadata(nb_file)


def _drop_widget_state(app, env):
    """Forget the ipywidgets state and scripts MyST-NB registered for each page (see above)."""
    for data in getattr(env, "nb_metadata", {}).values():
        files = data.get("js_files", {})
        for key in [k for k in files if k.startswith("ipywidgets")]:
            del files[key]


def encrypt_kernel_transport() -> bool:
    """Make every kernel jupyter_client starts from now on in this process encrypt its transport
    with CurveZMQ when its kernelspec declares support (the policy ``"auto"``); ``False`` (and
    nothing changed) when pyzmq lacks Curve."""
    import zmq
    from jupyter_client.manager import KernelManager

    if not zmq.has("curve"):
        return False
    KernelManager.class_traits()["transport_encryption"].default_value = "auto"
    return True


def _dedupe_scripts(app, pagename, templatename, context, doctree):
    """Keep one of each script a page loads. sphinx-thebe declares its configuration
    (``const THEBE_JS_URL = ...``) in an inline script that reaches every page twice under
    Jupyter Book 1 with Sphinx 7, and the second declaration is an uncaught error in the
    browser's console on every page."""
    seen, kept = set(), []
    for js in context.get("script_files", []):
        name = getattr(js, "filename", js) or ""  # an inline script's is None or "", as it was added
        key = (str(name), tuple(sorted((k, str(v)) for k, v in getattr(js, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            kept.append(js)
    context["script_files"] = kept


#: long names in tables (record folders, claim ids) wrap instead of pushing a table's right-hand
#: columns out of a laptop's view (the Findings tables). ``anywhere``, not ``break-word``, on the
#: cells: only ``anywhere`` lowers a cell's narrowest width, which is what the table's automatic
#: layout reads (a long word in the "could flip it" column had pushed the table 4 px past the page)
TABLE_CSS = ("<style>main table code, main table span.pre {white-space: normal !important; overflow-wrap: anywhere}"
             " main table td, main table th {overflow-wrap: anywhere; hyphens: auto}</style>")


def _table_css(app, pagename, templatename, context, doctree):
    context["metatags"] = context.get("metatags", "") + TABLE_CSS


def setup(app):
    # the kernels this build starts inherit it: each chapter's demos render as static frames
    os.environ["ITLIN_DEMOS"] = "static"
    encrypt_kernel_transport()
    app.connect("env-updated", _drop_widget_state)
    register_plugin("pybtex.style.formatting", STYLE_NAME, AuthorYearStyle, force=True)
    app.connect("html-page-context", _offer_executed_notebook, priority=500)
    app.connect("html-page-context", _dedupe_scripts, priority=900)
    app.connect("html-page-context", _table_css)
    app.connect("build-finished", _clean_downloads)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
