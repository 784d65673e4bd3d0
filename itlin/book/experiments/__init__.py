"""The book's experiments, one module per figure or table, by paper: :mod:`~.main`, :mod:`~.arbel`,
:mod:`~.ortiz`. The contract between an experiment and its chapter (:class:`Params`, :func:`param`,
:class:`Experiment`, the registry) is :mod:`itlin.book.study`, whose names this package re-exports.
A module whose name does not start with ``_`` is imported when a name is not found (:func:`get`,
:func:`names`); the experiment's name is its module's name.
"""

from __future__ import annotations

import importlib
import pkgutil
import warnings

from ..plans import Plan  # noqa: F401
from ..registry import _REGISTRY
from ..study import (CLOSE_MARGIN, SCALES, Dataset, Derived, Experiment, ParameterError, Params, Period,  # noqa: F401
                     UnknownExperimentError, _suggest, coerce, param, register, scales_digest, unregister)

_IMPORT_ERRORS: dict = {}
_DISCOVERED = False


def _submodules() -> list:
    """The experiment modules: every module of this package and of its sub-packages (one per
    paper) whose name does not start with ``_``, as dotted names relative to the package."""
    prefix = __name__ + "."
    return sorted(m.name[len(prefix):] for m in pkgutil.walk_packages(__path__, prefix)
                  if not m.ispkg and not any(part.startswith("_") for part in m.name[len(prefix):].split(".")))


def _discover() -> None:
    global _DISCOVERED
    if _DISCOVERED:
        return
    for mod in _submodules():
        if mod in _IMPORT_ERRORS:
            continue
        try:
            importlib.import_module(f"{__name__}.{mod}")
        except Exception as err:  # one broken figure module must not hide the others
            _IMPORT_ERRORS[mod] = err
            warnings.warn(f"itlin.book.experiments: could not import {mod!r} ({type(err).__name__}: {err}); "
                          "its experiments are unavailable.", RuntimeWarning, stacklevel=3)
    _DISCOVERED = True


def get(name) -> Experiment:
    """The registered experiment ``name`` (an :class:`Experiment` passes through); unknown names
    raise :class:`UnknownExperimentError` listing the known ones."""
    if isinstance(name, Experiment):
        return name
    if not isinstance(name, str):
        raise TypeError(f"experiment name must be a string, got {name!r}.")
    if name not in _REGISTRY and name.isidentifier():
        for mod in _submodules():
            if mod.rsplit(".", 1)[-1] == name:
                importlib.import_module(f"{__name__}.{mod}")
    if name not in _REGISTRY:
        _discover()
    if name in _REGISTRY:
        return _REGISTRY[name]
    known = sorted(_REGISTRY)
    msg = f"unknown experiment {name!r}; {_suggest(name, known)}known experiments: {', '.join(known) or '(none)'}."
    if _IMPORT_ERRORS:
        msg += " Modules that failed to import: " + "; ".join(
            f"{m} ({type(e).__name__}: {e})" for m, e in sorted(_IMPORT_ERRORS.items()))
    raise UnknownExperimentError(msg)


def names() -> list:
    """Names of all experiments (every module of the package imported first)."""
    _discover()
    return sorted(_REGISTRY)


__all__ = ["CLOSE_MARGIN", "SCALES", "Dataset", "Derived", "Experiment", "ParameterError", "Params", "Period", "Plan",
           "UnknownExperimentError",
           "get", "names", "param", "register", "scales_digest", "unregister"]
