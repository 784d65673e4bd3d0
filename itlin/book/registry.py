"""The registry of experiments, and the views of what they declare that other layers read.

:func:`itlin.book.study.register` puts each :class:`~itlin.book.study.Experiment` in it. An
experiment declares, in its own module, what the book needs of it (``axes``, ``tallies``, ``pool``,
``plans``); :class:`Declared` views read that here, keyed by experiment (``axes.AXES``,
``opendata.TALLY_READERS``) or by record folder (``plans.CONFIRMATORY``), so that no table
outside an experiment's module is keyed by its name.

Why here: this module imports nothing of the book, so the store (``store``, ``axes``,
``opendata``, ``records``) reads declarations without importing an experiment or the contract
above it (:mod:`~itlin.book.study`). A record file does not carry them, since records made before
a declaration (an axis named, a plan) would lack it. A name not yet registered is looked up through
:data:`finder`, which :mod:`itlin.book` (the package, above every layer) sets to import that
experiment's module by name; with no finder set, only experiments already registered are seen.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Callable, Optional

_REGISTRY: dict = {}
#: ``finder(name)`` imports experiment ``name``'s module (every one for ``None``); set by :mod:`itlin.book`
finder: Optional[Callable[[Optional[str]], None]] = None


def declared(name: str):
    """The experiment ``name`` (its module imported if it is not registered yet), or ``None``."""
    if name not in _REGISTRY and finder is not None:
        finder(name)
    return _REGISTRY.get(name)


class Declared(Mapping):
    """A read-only view of what experiments declare as ``field`` (those that declare one): by
    experiment name, or with ``merged`` the union of their mappings, whose keys (record folders)
    start with ``<experiment name>-``, each looked up under the experiment it names."""

    def __init__(self, field: str, merged: bool = False):
        self.field, self.merged = field, merged

    def __getitem__(self, key):
        owners = [key[:i] for i, c in enumerate(key) if c == "-"] if self.merged else [key]
        for experiment in filter(None, map(declared, owners if isinstance(key, str) else ())):
            value = getattr(experiment, self.field)  # of the experiment the key names
            if value and (not self.merged or key in value):
                return value[key] if self.merged else value
            break
        raise KeyError(key)

    def _items(self) -> dict:
        if finder is not None:
            finder(None)
        pairs = [(n, getattr(e, self.field)) for n, e in sorted(_REGISTRY.items()) if getattr(e, self.field)]
        return {k: v for _, d in pairs for k, v in d.items()} if self.merged else dict(pairs)

    def __iter__(self):
        return iter(self._items())

    def __len__(self) -> int:
        return len(self._items())

    def __repr__(self) -> str:
        return f"Declared({self.field!r}: {self._items()!r})"


__all__ = ["Declared", "declared", "finder"]
