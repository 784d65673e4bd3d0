"""The API reference page (book/api.md), generated from the package's ``__all__`` lists.

Loaded through ``sphinx.local_extensions`` in _config.yml, beside book_extras. It adds one
directive, used once per section of the page::

    ```{api} itlin
    :from: itlin.core.train
    :first: iterative_linearisation
    ```

which documents every name of ``itlin.__all__`` *defined in* ``itlin.core.train`` (its
``__module__``): the defining module's docstring as the section's introduction, a summary table,
then one autodoc entry per name under its public name (``itlin.iterative_linearisation``, not
``itlin.core.train.iterative_linearisation``), in source order after the ``:first:`` names.
Without ``:from:`` it documents the whole ``__all__`` of a module of its own (``itlin.data``),
except names that are the core's (``itlin.models.Model`` is ``itlin.Model``, documented once).

So a name added to ``__all__`` appears on the page by itself, in the section of the module that
defines it. A name that no directive on the page selects (one from a new module) is reported as
a build warning, which ``-W`` makes an error: the page can not silently fall behind
``__all__``.

Docstrings refer to objects by their defining path (``:func:`~itlin.core.loop.fit```) or
relative to their module (``:class:`Model``` in ``itlin.models``); both resolve here to the
object's one documented entry (``itlin.fit``, ``itlin.Model``).
"""

from __future__ import annotations

import importlib
import inspect
import re

from docutils import nodes
from docutils.parsers.rst import Parser as RSTParser
from docutils.parsers.rst import directives
from docutils.parsers.rst.states import RSTState
from docutils.statemachine import StringList
from docutils.utils import new_document
from sphinx.ext.autosummary import Autosummary
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

logger = logging.getLogger(__name__)

CORE = "itlin"


def _import(path: str):
    """The object at a dotted path (a module, or an attribute of one), or None."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except Exception:  # not a module (any text can be a reference's target)
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


def _source_line(obj) -> int:
    try:
        return inspect.getsourcelines(inspect.unwrap(obj))[1]
    except (TypeError, OSError):
        return 10**9  # constants: after the functions and classes, in __all__ order


def core_names() -> dict[int, str]:
    """id(object) -> ``itlin.<name>`` for every name of the core's ``__all__``."""
    core = importlib.import_module(CORE)
    return {id(getattr(core, n)): f"{CORE}.{n}" for n in core.__all__}


def select(namespace: str, from_modules=(), first=()) -> list[str]:
    """The names of ``namespace.__all__`` that an ``{api}`` directive documents, in page order.

    ``from_modules``: only names whose object is defined in one of these modules (its
    ``__module__``); empty: every name, except a non-core namespace's re-exports of core names.
    ``first``: names put first, in this order; the rest follow in source order.
    """
    ns = importlib.import_module(namespace)
    names = list(ns.__all__)
    if from_modules:
        names = [n for n in names if getattr(getattr(ns, n), "__module__", None) in from_modules]
    elif namespace != CORE:
        core = core_names()
        names = [n for n in names if id(getattr(ns, n)) not in core]
    unknown = [n for n in first if n not in names]
    if unknown:
        raise ValueError(f"{namespace}: :first: names not selected here: {unknown}")
    rest = sorted((n for n in names if n not in first), key=lambda n: (_source_line(getattr(ns, n)), names.index(n)))
    return [*first, *rest]


def summary(doc: str) -> str:
    """The first sentence of a docstring, for the summary tables.

    autosummary's own cut ends a sentence at any full stop followed by a space, also inside an
    inline literal (``start .. start+n-1``) or after "e.g."; this one skips those.
    """
    para = " ".join(doc.strip().split("\n\n")[0].split())
    masked = re.sub(r"``.*?``|\b(?:e\.g|i\.e|et al|cf|vs|Eqs?|Figs?|Secs?|Apps?|Tab)\.", lambda m: "x" * len(m.group(0)), para)
    end = re.search(r"[.!?](?=\s|$)", masked)
    return para[: end.end()] if end else para


class ApiSummary(Autosummary):
    """autosummary's table, with :func:`summary`'s first sentence for functions and classes
    (constants keep autosummary's, read from their ``#:`` comment)."""

    def get_items(self, names):
        items = []
        for display, sig, text, real in super().get_items(names):
            obj = _import(real)
            if inspect.isclass(obj) or callable(obj):
                text = summary(inspect.getdoc(obj) or "")
            items.append((display, sig, text, real))
        return items


def _entry(namespace: str, name: str) -> list[str]:
    """The autodoc directive of one name (relative to ``.. currentmodule:: namespace``)."""
    obj = getattr(importlib.import_module(namespace), name)
    if inspect.isclass(obj) and issubclass(obj, BaseException):
        return [f".. autoexception:: {name}", ""]
    if inspect.isclass(obj):
        return [f".. autoclass:: {name}", "   :members:", ""]
    if callable(obj):
        return [f".. autofunction:: {name}", ""]
    return [f".. autodata:: {name}", "   :no-value:", ""]


class ApiDirective(SphinxDirective):
    """``{api} <namespace>`` with ``:from: <module> [<module> ...]`` and ``:first: <name> ...``
    (see the module docstring)."""

    required_arguments = 1
    option_spec = {"from": directives.unchanged, "first": directives.unchanged, "no-module-doc": directives.flag}

    def run(self):
        namespace = self.arguments[0]
        from_modules = tuple(self.options.get("from", "").split())
        first = tuple(self.options.get("first", "").split())
        try:
            names = select(namespace, from_modules, first)
        except (ImportError, ValueError) as exc:
            raise self.error(str(exc)) from exc
        if not names:
            raise self.error(f"{namespace}: no names of __all__ are defined in {from_modules}")
        self.env.itlin_api = getattr(self.env, "itlin_api", {})
        self.env.itlin_api.setdefault(self.env.docname, {}).setdefault(namespace, set()).update(names)

        lines = []
        for module in from_modules or (namespace,):
            # the module's docstring introduces the section and makes :mod:`module` a link here
            directive = "py:module" if "no-module-doc" in self.options else "automodule"
            lines += [f".. {directive}:: {module}", ""]
        # the table and entries under the public names: itlin.fit, not itlin.core.loop.fit
        lines += [f".. currentmodule:: {namespace}", "", ".. api-summary::", "   :nosignatures:", ""]
        lines += [f"   {n}" for n in names] + [""]
        for n in names:
            lines += _entry(namespace, n)
        return self.parse_rst(lines)

    def parse_rst(self, lines: list[str]) -> list[nodes.Node]:
        """The generated lines parsed as reStructuredText, as autodoc's output needs, also when
        the directive sits in a MyST page (whose own nested parse would read them as Markdown,
        the reason for MyST's ``eval-rst``)."""
        if isinstance(self.state, RSTState):
            node = nodes.container()
            nested_parse_with_titles(self.state, StringList(lines, source=self.env.docname), node)
            return node.children
        document = self.state.document
        sub = new_document(document["source"], document.settings)
        sub.reporter = document.reporter
        RSTParser().parse("\n".join(lines), sub)
        return sub.children


def _check_complete(app, env):
    """Warn about every name of a documented namespace's ``__all__`` that no directive shows."""
    documented: dict[str, set] = {}
    for per_doc in getattr(env, "itlin_api", {}).values():
        for namespace, names in per_doc.items():
            documented.setdefault(namespace, set()).update(names)
    for namespace, names in documented.items():
        missing = [n for n in select(namespace) if n not in names]
        if missing:
            by_module = {n: getattr(getattr(importlib.import_module(namespace), n), "__module__", "?") for n in missing}
            logger.warning(f"API page: names of {namespace}.__all__ on no {{api}} section: "
                           + ", ".join(f"{n} (defined in {m})" for n, m in by_module.items())
                           + "; add a section with ':from:' their module", type="itlin", subtype="api")


def _purge(app, env, docname):
    getattr(env, "itlin_api", {}).pop(docname, None)


def _merge(app, env, docnames, other):
    env.itlin_api = getattr(env, "itlin_api", {})
    env.itlin_api.update(getattr(other, "itlin_api", {}))


def _resolve_alias(app, env, node, contnode):
    """Resolve a Python reference to a re-exported object to its documented public name."""
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"].lstrip("~.")
    modname = node.get("py:module")
    documented = {**core_names(), **_research_names(env)}
    py = env.get_domain("py")
    for candidate in ([f"{modname}.{target}"] if modname else []) + [target]:
        # the longest prefix that is a documented object: itlin.core.model.Model.bind -> itlin.Model.bind
        parts = candidate.split(".")
        for i in range(len(parts), 0, -1):
            obj = _import(".".join(parts[:i]))
            name = documented.get(id(obj)) if obj is not None else None
            if name:
                name = ".".join([name, *parts[i:]])
                if name != candidate:
                    return py.resolve_xref(env, node["refdoc"], app.builder, node["reftype"], name, node, contnode)
                break
    return None


def _research_names(env) -> dict[int, str]:
    """id(object) -> ``namespace.name`` for the non-core namespaces documented on the page."""
    out = {}
    for per_doc in getattr(env, "itlin_api", {}).values():
        for namespace, names in per_doc.items():
            if namespace != CORE:
                ns = importlib.import_module(namespace)
                out.update({id(getattr(ns, n)): f"{namespace}.{n}" for n in names})
    return out


def _skip_namedtuple_fields(app, what, name, obj, skip, options):
    """NamedTuple fields document themselves as "Alias for field number N": the class docstring
    already describes them."""
    doc = getattr(obj, "__doc__", None) or ""
    return True if what == "class" and doc.startswith("Alias for field number") else None


def _flax_signature(app, what, name, obj, options, signature, return_annotation):
    """Flax modules' constructors end in ``parent=<flax.linen.module._Sentinel object>, name=None``,
    which every module has and nobody passes: leave them out."""
    if what == "class" and signature and any(c.__module__.startswith("flax.") for c in getattr(obj, "__mro__", ())):
        signature = re.sub(r", parent=<[^>]*>", "", signature)
        signature = re.sub(r", name=None\)$", ")", signature)
    return signature, return_annotation


def _nitpick_pairs(app, config):
    """``nitpick_ignore`` entries from _config.yml arrive as YAML lists; Sphinx compares them
    with ``(type, target)`` tuples."""
    config.nitpick_ignore = [tuple(entry) for entry in config.nitpick_ignore]


def setup(app):
    app.connect("config-inited", _nitpick_pairs)
    app.add_directive("api", ApiDirective)
    app.add_directive("api-summary", ApiSummary)
    app.connect("env-purge-doc", _purge)
    app.connect("env-merge-info", _merge)
    app.connect("env-check-consistency", _check_complete)
    app.connect("missing-reference", _resolve_alias)
    app.connect("autodoc-skip-member", _skip_namedtuple_fields)
    app.connect("autodoc-process-signature", _flax_signature)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
