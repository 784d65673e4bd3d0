"""The experiment registry: named experiments with validated parameters.

An experiment is a function ``run(params, ctx) -> results`` plus a declaration of its parameters.
Each figure of the book has one module in this package (``itlin/experiments/fig9_damping.py``,
...) that builds its :class:`Experiment` and calls :func:`register` at import time::

    from itlin.experiments import Experiment, Param, register

    def run(p, ctx):
        ...
        res = ctx.fit(f"K={p['K']}", trainer, state, x, y, p["steps"], eval_sets=...)
        return {"loss": res.history.arrays()["loss"]}

    register(Experiment(
        name="fig9_damping",
        doc="Damped Gauss-Newton on the quintic for several dampings (main paper Fig. 9).",
        params={
            "dampings": Param.nonnegative([1e-3, 1e-1, 10.0], many=True, doc="damping values"),
            "K": Param.period(1),
            "learning_rate": Param.positive(1e-3),
            "dataset": Param.dataset("quintic"),
            "scale": Param.scale(),
            "seed": Param.seed(),
        },
        run=run,
        version="1",
    ))

Conventions:

* The experiment's name is the module's name when there is one experiment per module (then
  :func:`get` imports only that module). Every public module of this package (name not starting
  with ``_``) is imported when a name is not found, so a module may register several experiments.
* Bump ``version`` whenever a change to ``run`` changes its numbers: the version is part of the
  hash that keys stored results, so old results are then recomputed instead of reused.
* Parameters are validated and normalised before anything runs (:meth:`Experiment.resolve`):
  ``K="inf"`` becomes ``math.inf``, ``1e5`` for an integer becomes ``100000``, dataset names
  are put in the data registry's spelling. The normalised dict, defaults filled in, is what
  ``run`` receives and what is hashed.
* ``run`` returns a dict (nested dicts allowed) of arrays, numbers or strings, saved as arrays.
  Two keys are special: ``"status"`` (a string that overrides the status the runner derives
  from the fits) and ``"meta"`` (a JSON-able dict stored in the record rather than as arrays).
  Use ``ctx.fit`` for training runs and ``ctx.stage`` for other expensive sub-results so that an
  interrupted run resumes (see :mod:`itlin.runner`).
* Parameter scales: ``scale`` is ``"tiny"`` (seconds, for tests and CI), ``"default"`` (what the
  book shows, minutes on a laptop) or ``"paper"`` (the papers' sizes; hours to days).
"""

from __future__ import annotations

import ast
import difflib
import importlib
import math
import numbers
import pkgutil
import re
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

from .._io import jsonable

SCALES = ("default", "tiny", "paper")

_KINDS = ("int", "float", "str", "bool", "period", "dataset", "model", "schedule", "any")
_PY_TYPES = {int: "int", float: "float", str: "str", bool: "bool"}
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
_INF_WORDS = ("inf", "+inf", "infinity", "math.inf", "np.inf", "float('inf')", 'float("inf")')


class ParameterError(ValueError):
    """A parameter value (or name) that an experiment does not accept; the message says why."""


class UnknownExperimentError(ValueError):
    """No experiment of that name is registered."""


class _Reject(Exception):
    """Internal: a value failed a check; ``reason`` optionally says more."""

    def __init__(self, reason: str = ""):
        super().__init__(reason)
        self.reason = reason


def _suggest(word, options) -> str:
    """``"did you mean 'x'? "`` for the closest option (spelling, initials or prefix), else ``""``."""
    word, options = str(word), [str(o) for o in options]
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    if not close:
        w = word.lower().replace("-", "_")
        initials = [o for o in options if "".join(part[:1] for part in o.lower().split("_") if part) == w]
        prefix = [o for o in options if len(w) >= 2 and o.lower().startswith(w)]
        inside = [o for o in options if len(w) >= 3 and w in o.lower()]
        close = initials or prefix or inside
    return f"did you mean {close[0]!r}? " if close else ""


def _fmt_number(v) -> str:
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    return f"{v:g}" if isinstance(v, float) else str(v)


# ------------------------------------------------------------------------------ registries
def _dataset_names():
    """(canonical names, alias map) of :mod:`itlin.data`, or None if it cannot be imported."""
    try:
        from .. import data
    except Exception:  # pragma: no cover - another engineer's module may be mid-change
        return None
    return tuple(sorted(data.DATASETS)), dict(getattr(data, "_ALIASES", {}))


def _model_names():
    try:
        from .. import models
    except Exception:  # pragma: no cover
        return None
    return tuple(sorted(models.MODELS))


def _norm_name(value: str) -> str:
    return value.strip().lower().replace("-", "_")


# ------------------------------------------------------------------------------ Param
@dataclass(frozen=True)
class Param:
    """One parameter of an experiment: its default and what values it accepts.

    Args:
      default: the value used when the caller does not give one (validated at registration).
      type: ``"int"``, ``"float"``, ``"str"``, ``"bool"``, ``"period"`` (an integer >= 1 or
        infinity: the relinearisation period ``K``), ``"dataset"`` / ``"model"`` (a name in
        :data:`itlin.data.DATASETS` / :data:`itlin.models.MODELS`), ``"schedule"`` (anything
        :func:`itlin.schedules.get_schedule` accepts), ``"any"`` (any JSON-able value), or
        the Python types ``int``/``float``/``str``/``bool``. ``None`` infers it from the default.
      choices: the allowed values (strings or numbers).
      minimum, maximum: inclusive bounds for numbers (``strict_minimum=True`` makes the
        minimum exclusive: ``> minimum``).
      allow_inf: accept ``math.inf`` (or the string ``"inf"``) for a number.
      allow_none: accept ``None``.
      many: the value is a non-empty list, each entry checked as above (e.g. ``Ks=[1, 100, "inf"]``).
      check: extra ``check(value) -> value`` run after the built-in checks; raise ValueError
        with the reason to reject.
      doc: one line for help texts and error messages.

    Shortcuts: :meth:`period`, :meth:`integer`, :meth:`positive`, :meth:`nonnegative`,
    :meth:`number`, :meth:`choice`, :meth:`seed`, :meth:`scale`, :meth:`flag`, :meth:`dataset`,
    :meth:`model`, :meth:`schedule`.
    """

    default: Any
    type: Any = None
    choices: Optional[Sequence] = None
    minimum: Optional[float] = None
    maximum: Optional[float] = None
    strict_minimum: bool = False
    allow_inf: bool = False
    allow_none: bool = False
    many: bool = False
    check: Optional[Callable[[Any], Any]] = None
    doc: str = ""

    def __post_init__(self):
        kind = self.type
        if kind is None:
            kind = self._infer(self.default)
        kind = _PY_TYPES.get(kind, kind)
        if kind not in _KINDS:
            raise TypeError(f"Param type must be one of {_KINDS} or int/float/str/bool, got {self.type!r}.")
        if kind == "period":
            object.__setattr__(self, "minimum", 1 if self.minimum is None else self.minimum)
            object.__setattr__(self, "allow_inf", True)
        if self.choices is not None:
            object.__setattr__(self, "choices", tuple(self.choices))
        object.__setattr__(self, "type", kind)

    def _infer(self, default):
        probe = default
        if isinstance(default, (list, tuple)):
            object.__setattr__(self, "many", True)
            probe = default[0] if default else None
        if isinstance(probe, bool):
            return "bool"
        if isinstance(probe, numbers.Integral):
            return "int"
        if isinstance(probe, numbers.Real):
            if math.isinf(float(probe)):
                object.__setattr__(self, "allow_inf", True)
            return "float"
        if isinstance(probe, str):
            return "str"
        return "any"

    # ---------------------------------------------------------------- shortcuts
    @classmethod
    def period(cls, default=1, **kw) -> "Param":
        """A relinearisation period ``K``: an integer >= 1, or ``"inf"``/``math.inf``."""
        return cls(default, "period", **kw)

    @classmethod
    def integer(cls, default, minimum=None, maximum=None, **kw) -> "Param":
        return cls(default, "int", minimum=minimum, maximum=maximum, **kw)

    @classmethod
    def positive(cls, default, **kw) -> "Param":
        """A number > 0 (a learning rate, a width multiplier)."""
        return cls(default, "float", minimum=0.0, strict_minimum=True, **kw)

    @classmethod
    def nonnegative(cls, default, **kw) -> "Param":
        """A number >= 0 (a damping, a weight decay)."""
        return cls(default, "float", minimum=0.0, **kw)

    @classmethod
    def number(cls, default, minimum=None, maximum=None, **kw) -> "Param":
        return cls(default, "float", minimum=minimum, maximum=maximum, **kw)

    @classmethod
    def choice(cls, default, choices, **kw) -> "Param":
        kind = "str" if all(isinstance(c, str) for c in choices) else "any"
        return cls(default, kind, choices=tuple(choices), **kw)

    @classmethod
    def seed(cls, default=0, **kw) -> "Param":
        """A random seed: an integer >= 0."""
        return cls(default, "int", minimum=0, **kw)

    @classmethod
    def scale(cls, default="default", **kw) -> "Param":
        """``"tiny"`` (tests), ``"default"`` (the book) or ``"paper"`` (the papers' sizes)."""
        kw.setdefault("doc", "run size: 'tiny' (seconds), 'default' (the book), 'paper' (the papers' sizes)")
        return cls(default, "str", choices=SCALES, **kw)

    @classmethod
    def flag(cls, default=False, **kw) -> "Param":
        return cls(bool(default), "bool", **kw)

    @classmethod
    def dataset(cls, default, **kw) -> "Param":
        """A dataset name from :data:`itlin.data.DATASETS` (aliases accepted, normalised)."""
        return cls(default, "dataset", **kw)

    @classmethod
    def model(cls, default, **kw) -> "Param":
        """A model name accepted by :func:`itlin.models.get_model`."""
        return cls(default, "model", **kw)

    @classmethod
    def schedule(cls, default=1, **kw) -> "Param":
        """A schedule spec for :func:`itlin.schedules.get_schedule`: ``K``, ``"inf"`` or a dict."""
        return cls(default, "schedule", **kw)

    # ---------------------------------------------------------------- description
    def describe(self, name: str = "it") -> str:
        """What values are allowed, as a phrase: ``'an integer >= 1 or "inf"'``."""
        if self.many:
            return f"a non-empty list whose entries are each {self._describe_one()}"
        return self._describe_one()

    def _bounds(self) -> str:
        lo, hi = self.minimum, self.maximum
        if lo is not None and hi is not None and not self.strict_minimum:
            return f" between {_fmt_number(lo)} and {_fmt_number(hi)}"
        parts = []
        if lo is not None:
            parts.append(f"{'>' if self.strict_minimum else '>='} {_fmt_number(lo)}")
        if hi is not None:
            parts.append(f"<= {_fmt_number(hi)}")
        return (" " + " and ".join(parts)) if parts else ""

    def _describe_one(self) -> str:
        kind = self.type
        if self.choices is not None:
            desc = "one of " + ", ".join(f'"{c}"' if isinstance(c, str) else repr(c) for c in self.choices)
        elif kind in ("int", "period"):
            desc = "an integer" + self._bounds()
        elif kind == "float":
            desc = ("a number" if self.allow_inf else "a finite number") + self._bounds()
        elif kind == "bool":
            desc = "True or False"
        elif kind == "str":
            desc = "a string"
        elif kind == "dataset":
            names = _dataset_names()
            desc = "a known dataset" + (f" (one of: {', '.join(names[0])})" if names else "")
        elif kind == "model":
            names = _model_names()
            desc = "a known model" + (f" (one of: {', '.join(names)})" if names else "")
        elif kind == "schedule":
            desc = ('a schedule: an integer K >= 1, "inf", or a dict such as {"kind": "loss_drift", "rtol": 0.1} '
                    "(see itlin.schedules.get_schedule)")
        else:
            desc = "a JSON-able value (numbers, strings, lists, dicts)"
        if self.allow_inf and kind in ("int", "period", "float") and self.choices is None:
            desc += ' or "inf"'
        if self.allow_none:
            desc += " or None"
        return desc

    # ---------------------------------------------------------------- validation
    def normalize(self, name: str, value):
        """The canonical form of ``value``, or :class:`ParameterError` naming ``name``."""
        try:
            if self.many:
                return self._normalize_many(name, value)
            return self._normalize_one(value)
        except _Reject as rej:
            extra = f" ({rej.reason})" if rej.reason else ""
            raise ParameterError(
                f"parameter {name!r} = {value!r} is not allowed: {name} must be {self.describe()}{extra}."
            ) from None

    def _normalize_many(self, name, value):
        if self.allow_none and value is None:
            return None
        if isinstance(value, str):
            value = _parse_list(value)
        if isinstance(value, (set, frozenset)):
            raise _Reject("use a list, so that the order is fixed")
        if not isinstance(value, (list, tuple)) or hasattr(value, "_fields"):
            raise _Reject("give a list such as [1, 100, \"inf\"]")
        if len(value) == 0:
            raise _Reject("the list is empty")
        out = []
        for i, v in enumerate(value):
            try:
                out.append(self._normalize_one(v))
            except _Reject as rej:
                extra = f": {rej.reason}" if rej.reason else ""
                raise _Reject(f"{name}[{i}] = {v!r} is not allowed{extra}") from None
        return out

    def _normalize_one(self, value):
        if value is None:
            if self.allow_none:
                return None
            raise _Reject()
        kind = self.type
        if self.choices is not None:
            return self._choice(value)
        if kind in ("int", "period", "float"):
            return self._custom(self._bounded(self._to_number(value, integer=kind != "float")))
        if kind == "bool":
            return self._bool(value)
        if kind == "str":
            if not isinstance(value, str):
                raise _Reject()
            return self._custom(value)
        if kind == "dataset":
            return self._custom(self._dataset(value))
        if kind == "model":
            return self._custom(self._model(value))
        if kind == "schedule":
            return self._custom(self._schedule(value))
        try:
            jsonable(value)
        except TypeError as err:
            raise _Reject(str(err)) from None
        return self._custom(value)

    def _custom(self, value):
        if self.check is None:
            return value
        try:
            out = self.check(value)
        except (ValueError, TypeError) as err:
            raise _Reject(str(err)) from None
        return value if out is None else out

    def _to_number(self, value, integer: bool):
        if isinstance(value, bool):
            raise _Reject("a boolean is not a number")
        if isinstance(value, str):
            text = value.strip()
            if text.lower() in _INF_WORDS:
                value = math.inf
            else:
                try:
                    value = ast.literal_eval(text)
                except (ValueError, SyntaxError):
                    try:
                        value = float(text)
                    except ValueError:
                        raise _Reject() from None
                if isinstance(value, bool) or not isinstance(value, numbers.Real):
                    raise _Reject()
        if not isinstance(value, numbers.Real):
            raise _Reject()
        v = float(value)
        if math.isnan(v):
            raise _Reject("NaN is not a value")
        if math.isinf(v):
            if not self.allow_inf or v < 0:
                raise _Reject()
            return math.inf
        if integer:
            if isinstance(value, numbers.Integral):
                return int(value)
            if not v.is_integer():
                raise _Reject(f"{value!r} is not a whole number")
            return int(v)
        return v

    def _bounded(self, v):
        if math.isinf(v):
            return v
        if self.minimum is not None:
            if (v <= self.minimum) if self.strict_minimum else (v < self.minimum):
                raise _Reject()
        if self.maximum is not None and v > self.maximum:
            raise _Reject()
        return v

    def _bool(self, value):
        if isinstance(value, bool):
            return self._custom(value)
        if isinstance(value, numbers.Integral) and int(value) in (0, 1):
            return self._custom(bool(value))
        if isinstance(value, str) and value.strip().lower() in ("true", "false", "yes", "no", "1", "0"):
            return self._custom(value.strip().lower() in ("true", "yes", "1"))
        raise _Reject()

    def _choice(self, value):
        for c in self.choices:
            if isinstance(c, str) == isinstance(value, str) and c == value:
                return self._custom(c)
        if isinstance(value, str):
            for c in self.choices:
                if isinstance(c, str) and c.lower() == value.strip().lower():
                    return self._custom(c)
        if not isinstance(value, str) and isinstance(value, numbers.Real) and not isinstance(value, bool):
            for c in self.choices:
                if isinstance(c, numbers.Real) and not isinstance(c, bool) and float(c) == float(value):
                    return self._custom(c)
        raise _Reject(_suggest(value, self.choices).strip())

    def _dataset(self, value):
        if not isinstance(value, str):
            raise _Reject()
        names = _dataset_names()
        if names is None:
            return value
        known, aliases = names
        key = _norm_name(value)
        key = aliases.get(key, key)
        if key not in known:
            raise _Reject(_suggest(key, list(known) + list(aliases)).strip())
        return key

    def _model(self, value):
        if not isinstance(value, str):
            raise _Reject()
        try:
            from .. import models
        except Exception:  # pragma: no cover
            return value
        key = _norm_name(value)
        if key in models.MODELS:
            return key
        try:  # aliases that get_model knows (resnet18_nobn, lenet2d, ...); building is cheap
            models.get_model(key)
        except ValueError as err:
            if "unknown model" in str(err):
                raise _Reject(_suggest(key, list(models.MODELS)).strip()) from None
        except Exception:
            pass  # a known name whose constructor needs arguments: accept
        return key

    def _schedule(self, value):
        if isinstance(value, Mapping):
            spec = dict(value)
            try:
                jsonable(spec)
            except TypeError as err:
                raise _Reject(str(err)) from None
            try:
                from ..schedules import get_schedule

                get_schedule(spec)
            except (ValueError, TypeError) as err:
                raise _Reject(str(err).rstrip(".")) from None
            return spec
        period = Param(1, "period")
        return period._normalize_one(value)


def _parse_list(text: str):
    """``"[1, 100, inf]"`` or ``"1, 100, inf"`` -> a list of entries (strings where unparsed)."""
    s = text.strip()
    try:
        out = ast.literal_eval(s)
        if isinstance(out, (list, tuple)):
            return list(out)
    except (ValueError, SyntaxError):
        pass
    if s.startswith("[") and s.endswith("]"):
        s = s[1:-1]
    parts = [p.strip().strip("'\"") for p in s.split(",")]
    return [p for p in parts if p != ""] if s.strip() else []


# ------------------------------------------------------------------------------ Experiment
@dataclass(frozen=True)
class Experiment:
    """A named experiment: ``run(params, ctx) -> results`` and its parameters.

    Args:
      name: unique name (letters, digits, ``_``, ``-``, ``.``); also the folder of its results.
      params: ``{name: Param}``; every parameter has a default.
      run: ``run(params: dict, ctx: itlin.runner.RunContext) -> dict`` of results.
      version: bump it when ``run`` changes its numbers (stored results are then recomputed).
      doc: one paragraph for the book and for ``help``.
      check: optional cross-parameter check ``check(params)`` on the resolved dict; raise
        ValueError (naming the parameters) to reject a combination.
    """

    name: str
    params: Mapping[str, Param]
    run: Callable[[dict, Any], Any]
    version: str = "1"
    doc: str = ""
    check: Optional[Callable[[dict], Any]] = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            raise ValueError(f"experiment name {self.name!r} must start with a letter or digit and contain only "
                             "letters, digits, '_', '-' and '.'.")
        if not callable(self.run):
            raise TypeError(f"experiment {self.name!r}: run must be callable, got {self.run!r}.")
        params = dict(self.params)
        for pname, p in params.items():
            if not isinstance(pname, str) or not pname.isidentifier():
                raise ValueError(f"experiment {self.name!r}: parameter names must be Python identifiers "
                                 f"(papermill injects them as variables), got {pname!r}.")
            if not isinstance(p, Param):
                raise TypeError(f"experiment {self.name!r}: parameter {pname!r} must be a Param, got {p!r}.")
            try:
                p.normalize(pname, p.default)
            except ParameterError as err:
                raise ValueError(f"experiment {self.name!r}: the default of {err}") from None
        object.__setattr__(self, "params", params)
        object.__setattr__(self, "version", str(self.version))

    def defaults(self) -> dict:
        """The resolved default parameters."""
        return self.resolve({})

    def resolve(self, params: Optional[Mapping] = None) -> dict:
        """Validate ``params`` against the declarations and fill in defaults.

        Raises :class:`ParameterError` (a ValueError) for an unknown name (with a "did you mean"
        hint) or a value that is not allowed (naming the parameter, the value and what is
        allowed). Nothing runs before this has passed.
        """
        given = {} if params is None else params
        if not isinstance(given, Mapping):
            raise TypeError(f"params must be a dict of parameter values, got {type(given).__name__}.")
        unknown = [k for k in given if k not in self.params]
        if unknown:
            k = unknown[0]
            raise ParameterError(
                f"unknown parameter {k!r} for experiment {self.name!r}: {_suggest(k, self.params)}"
                f"known parameters: {', '.join(self.params) or '(none)'}."
            )
        out = {}
        for pname, p in self.params.items():
            out[pname] = p.normalize(pname, given[pname] if pname in given else p.default)
        if self.check is not None:
            try:
                self.check(dict(out))
            except ParameterError:
                raise
            except (ValueError, TypeError) as err:
                raise ParameterError(f"experiment {self.name!r}: {err}") from None
        return out

    def describe(self) -> str:
        """A plain-text table of the parameters (name, default, allowed values, doc)."""
        lines = [f"{self.name} (version {self.version})"]
        if self.doc:
            lines.append(f"  {self.doc}")
        for pname, p in self.params.items():
            lines.append(f"  {pname} = {p.default!r}: {p.describe()}" + (f" -- {p.doc}" if p.doc else ""))
        return "\n".join(lines)


# ------------------------------------------------------------------------------ registry
_REGISTRY: dict = {}
_IMPORT_ERRORS: dict = {}
_DISCOVERED = False


def register(experiment: Experiment, *, replace: bool = False) -> Experiment:
    """Add ``experiment`` to the registry (returns it, so it can be used as an expression).

    Registering a second experiment under a taken name is an error unless ``replace=True`` or
    it comes from the same function (a module imported again, e.g. by ``importlib.reload``).
    """
    if not isinstance(experiment, Experiment):
        raise TypeError(f"register needs an Experiment, got {experiment!r}.")
    old = _REGISTRY.get(experiment.name)
    if old is not None and old is not experiment and not replace:
        same_code = (getattr(old.run, "__module__", None), getattr(old.run, "__qualname__", None)) == \
                    (getattr(experiment.run, "__module__", None), getattr(experiment.run, "__qualname__", None))
        if not same_code:
            raise ValueError(f"an experiment named {experiment.name!r} is already registered "
                             f"(by {getattr(old.run, '__module__', '?')}); pick another name or pass replace=True.")
    _REGISTRY[experiment.name] = experiment
    return experiment


def unregister(name: str) -> None:
    """Remove an experiment (tests use it to clean up)."""
    _REGISTRY.pop(name, None)


def _submodules() -> list:
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def _discover() -> None:
    """Import every public submodule once; failures are remembered (and reported on a miss)."""
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
            warnings.warn(f"itlin.experiments: could not import {mod!r} ({type(err).__name__}: {err}); "
                          "its experiments are unavailable.", RuntimeWarning, stacklevel=3)
    _DISCOVERED = True


def get(name) -> Experiment:
    """The registered experiment ``name`` (an :class:`Experiment` passes through).

    Looks in the registry, then imports the module of the same name in this package (errors in
    it are raised), then every module of the package. Unknown names raise
    :class:`UnknownExperimentError` listing the known experiments.
    """
    if isinstance(name, Experiment):
        return name
    if not isinstance(name, str):
        raise TypeError(f"experiment name must be a string, got {name!r}.")
    if name in _REGISTRY:
        return _REGISTRY[name]
    if name.isidentifier() and name in _submodules():
        importlib.import_module(f"{__name__}.{name}")
        if name in _REGISTRY:
            return _REGISTRY[name]
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


__all__ = [
    "SCALES",
    "Experiment",
    "Param",
    "ParameterError",
    "UnknownExperimentError",
    "get",
    "names",
    "register",
    "unregister",
]
