"""Experiments as studies: one declared contract between an experiment and its chapter.

This module is book machinery (:mod:`itlin.book.experiments` re-exports its public names and
holds the experiments themselves, one module each, grouped by paper, and their discovery).

An experiment is a figure or table of a paper, reproduced. It declares

* its **parameters**, a frozen dataclass of :class:`Params` (typed, bounded, documented; a
  parameter with a ``label`` is a row of the settings table, with the paper's value or the
  ``scale="paper"`` one and its ``source``; :class:`Derived` rows add settings computed from
  others);
* ``run(params, ctx) -> results``: data only (arrays, numbers, strings), through the runner
  (:mod:`itlin.book.runner`: cached, checkpointed, resumable), from its :class:`Params`
  instance resolved (:meth:`Params.resolve`), read by attribute (``params.steps``);
* ``summary(record) -> [row, ...]``: the rows of its summary table (dicts, column to value);
* ``claims(record) -> [Verdict, ...]``: the paper's claims judged on the record
  (:mod:`itlin.book.verdicts`), each with a stable ``id``, the paper's statement, the rule
  (``exceeds``/``not_worse``/``close``) and the margin.

Generic functions render any experiment (:mod:`itlin.book.render`: ``settings``, ``summary``,
``claims``, and ``judge``, which applies Holm's correction over the claims of the records it is
given, one family per call: most chapters call it once per record, a few on the records of
their default settings together); chapters
pick claims by id and draw figures from :mod:`itlin.book.figures` (one module per paper). No
experiment module builds Markdown or imports matplotlib. A minimal one::

    from dataclasses import dataclass
    from typing import Optional
    from itlin.book.experiments import Experiment, Params, Period, param, register
    from itlin.book import verdicts as V

    @dataclass(frozen=True)
    class DampingParams(Params):
        SCALES = {"tiny": {"steps": 10}, "default": {"steps": 200}, "paper": {"steps": 20000}}
        dampings: tuple[float, ...] = param((1e-3, 1e-1, 10.0), "damping values", gt=0,
                                            label="dampings", source="Fig. 9 caption")
        steps: Optional[int] = param(None, "Gauss-Newton steps; None: from scale", min=1)

    def run(params: DampingParams, ctx):  # validated and resolved: no None left
        ...
        return {"loss": losses}

    def claims(rec):
        gap = V.paired_gap(rec["loss"][:, 0], rec["loss"][:, -1])
        return [V.judge("loss_falls", "the loss falls with damping", "more damping ...", gap, "exceeds")]

    register(Experiment("fig9_damping", DampingParams, run, version="1", claims=claims))

Conventions:

* A parameter is declared once, on its field: its type is its annotation; its bounds (``min``,
  ``gt``, ``max``, ``lt``, elementwise for tuples), ``allow_inf``, ``distinct`` and ``doc`` go in
  :func:`param`. pydantic validates them all (one validator per :class:`Params` class, built from
  the annotations and bounds): ``int`` (whole floats such as ``1e5`` pass, ``True`` does not),
  ``float`` (``"1e-3"`` passes; finite unless ``allow_inf``; never nan), ``bool``, ``str``,
  ``Literal[...]`` (one of the choices, in any case), :data:`Period` (an integer >= 1 or ``"inf"``,
  through :func:`itlin.parse_period`), :data:`Dataset` (an alias, through
  :func:`itlin.data.dataset_name`), ``tuple[T, ...]`` (a non-empty list, or its text
  ``"[1, 10, inf]"``) and ``Optional[T]`` (``None`` means "from scale"); the first error is raised
  as one line, a :class:`ParameterError` that names the parameter and says what to fix.
  Cross-field checks go in :meth:`Params.check`. Every experiment has ``scale`` and ``seed``.
* ``scale`` is ``"tiny"`` (seconds: tests and CI), ``"default"`` (what the book shows, minutes on
  a laptop) or ``"paper"`` (the papers' sizes; hours). A parameter left ``None`` takes its value
  from the class's ``SCALES[scale]`` (:meth:`Params.resolve`); ``run`` receives the resolved
  instance; the runner stores the same values as a dict in the record
  (``record.meta["resolved"]``, see :meth:`Params.resolved`) updated by what ``run`` returns
  under ``meta["resolved"]`` (e.g. the sizes of the data as loaded).
* Experiments are grouped by paper in :mod:`itlin.book.experiments`: ``main``, ``arbel``,
  ``ortiz``. Every module of those packages whose name does not start with ``_`` is imported
  when a name is not found; the experiment's name is its module's name.
* The version is part of the hash that keys stored results, with a digest of ``SCALES`` added,
  so a changed scale default is never served from an old result. Bump it when ``run`` changes
  its numbers. A minor version (``"4.1"``) marks a change to numbers that no claim or table reads
  (e.g. the parameters of runs every claim drops as diverged): stored results are computed
  again, and records of the same major version still stand for the chapter's live run.
* ``run`` returns a dict (nested dicts allowed) of arrays, numbers or strings. Two keys are
  special: ``"status"`` (overrides the status the runner derives from the fits) and ``"meta"``
  (a JSON-able dict stored in the record). Use ``ctx.run(FitJob(...))`` for training runs and ``ctx.stage``
  for other expensive sub-results so that an interrupted run resumes.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import inspect
import json
import math
import re
import typing
from dataclasses import dataclass
from typing import Annotated, Any, Callable, ClassVar, Literal, Mapping, NamedTuple, NewType, Optional, Sequence, Union

from pydantic import BeforeValidator, Field, PlainValidator, Strict, TypeAdapter, ValidationError
from typing_extensions import TypedDict

from .._io import jsonable
from .labels import did_you_mean as _suggest
from .plans import Plan
from .registry import _REGISTRY
from ..core.schedules import INF_WORDS, parse_period

SCALES = ("tiny", "default", "paper")

#: a relinearisation period: an integer >= 1 or ``math.inf`` (``"inf"``)
Period = NewType("Period", float)
#: a dataset of :mod:`itlin.data`'s registry (aliases and case normalised)
Dataset = NewType("Dataset", str)

#: the book's equivalence margin: two accuracies count as close when the interval of their gap lies
#: within it (2 points, about twice the main paper's Fig. 3 gap); the default of every experiment's
#: ``close_margin`` and the value claims assume for records made before that parameter existed
CLOSE_MARGIN = 0.02

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


class ParameterError(ValueError):
    """A parameter value (or name) that an experiment does not accept; the message says why."""


class UnknownExperimentError(ValueError):
    """No experiment of that name is registered."""


def param(default, doc: str = "", *, min=None, gt=None, max=None, lt=None, label: Optional[str] = None,
          paper=None, source: str = "", allow_inf: bool = False, distinct: bool = False):
    """A dataclass field with a default, a ``doc`` string and numeric bounds (``min`` <= v,
    ``gt`` < v, v <= ``max``, v < ``lt``; elementwise for tuples).

    For the generated settings table (:func:`itlin.book.render.settings`): ``label`` (a
    parameter with a label gets a row), ``paper`` (the paper's value, when the paper states
    one and it differs from what ``scale="paper"`` resolves to; by default the paper column
    shows the ``scale="paper"`` value) and ``source`` (where that value comes from: a section,
    a caption, "our choice"). ``allow_inf``: a float parameter that accepts ``inf``; ``distinct``:
    a tuple whose resolved values must not repeat."""
    meta = {"doc": doc, "min": min, "gt": gt, "max": max, "lt": lt, "label": label, "paper": paper,
            "source": source, "allow_inf": bool(allow_inf), "distinct": bool(distinct)}
    if isinstance(default, (list, dict, set)):
        raise TypeError("a parameter default must be immutable: use a tuple, not a list.")
    return dataclasses.field(default=default, metadata=meta)


class Derived(NamedTuple):
    """A row of the settings table computed from the resolved parameters (e.g. the mini-batch
    learning rate, ``learning_rate / rescale``): ``value(resolved) -> value``, placed after the
    parameter named ``after`` (at the end when ``None``)."""

    label: str
    value: Callable[[Mapping], Any]
    source: str = ""
    after: Optional[str] = None


# ------------------------------------------------------------------------------ validation
# pydantic validates each parameter against its annotation and param() bounds (_pydantic_type); the
# validators there read only the book's own forms of a value; _message words pydantic's errors.
_NAME = "\x00"  # the parameter's name in a validator's message, filled in by _message


def _text_list(value):  # plain papermill passes a list as its text, "[1, 100, inf]"; INF_WORDS become strings
    if not isinstance(value, str):
        return value
    words = "|".join(re.escape(w) for w in sorted(INF_WORDS, key=len, reverse=True))
    try:
        return ast.literal_eval(re.sub(rf"(?<![\w'\"+-])({words})(?![\w'\"])", r"'\1'", value.strip(), flags=re.I))
    except (ValueError, SyntaxError):
        raise ValueError(f"{_NAME} must be a list such as [1, 10, 'inf'], got {value!r}.") from None


def _period(value):
    try:
        return parse_period(value, _NAME)
    except TypeError as err:  # pydantic reports ValueErrors only
        raise ValueError(str(err)) from None


def _not_bool(value):
    if isinstance(value, bool):  # pydantic reads True as 1
        raise ValueError(f"{_NAME} must be a number, got {value!r}.")
    return value


def _pydantic_type(tp, meta: Mapping):
    """A parameter's annotation ``tp`` with its :func:`param` bounds, as a type pydantic validates."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Union:  # Optional[X]
        return Optional[_pydantic_type(_bare(tp), meta)]
    if origin is tuple:
        return Annotated[tuple[_pydantic_type(args[0], meta), ...], Field(min_length=1), BeforeValidator(_text_list)]
    if origin is Literal:  # case, and "-" for "_", do not matter
        lower = {str(c).lower(): c for c in args}
        return Annotated[tp, BeforeValidator(lambda v: lower.get(v.strip().lower().replace("-", "_"), v)
                                             if isinstance(v, str) and v not in args else v)]
    if tp in (int, float):
        inf = tp is float and bool(meta.get("allow_inf"))  # nan is still refused: nan >= -inf fails
        low = -math.inf if inf and meta.get("min") is None else meta.get("min")
        return Annotated[tp, Field(ge=low, gt=meta.get("gt"), le=meta.get("max"), lt=meta.get("lt"),
                                   **({"allow_inf_nan": inf} if tp is float else {})), BeforeValidator(_not_bool)]
    if tp is Period:
        return Annotated[Union[int, float], PlainValidator(_period)]
    if tp is Dataset:
        from .. import data

        return Annotated[str, BeforeValidator(data.dataset_name)]
    if tp in (bool, str):
        return Annotated[tp, Strict()]
    raise TypeError(f"unsupported parameter annotation {tp!r}.")


def _bare(tp):  # X for Optional[X]
    return [a for a in typing.get_args(tp) if a is not type(None)][0] if typing.get_origin(tp) is typing.Union else tp


_WANTED = {"greater_than_equal": ">= {min!r}", "greater_than": "> {gt!r}", "less_than_equal": "<= {max!r}",
           "less_than": "< {lt!r}", "int": "an integer", "float": "a number", "bool": "True or False",
           "string": "a string", "tuple": "a list", "finite_number": "a finite number",
           "int_parsing_size": "an integer below 2**63 when written as a float"}


def _message(error: Mapping, fields: Mapping) -> str:
    """One of pydantic's errors (``ValidationError.errors()``) as one sentence that names the parameter
    and says what to fix; ``fields``: name -> (annotation, :func:`param` metadata)."""
    loc, kind, value, ctx = error["loc"], error["type"], error.get("input"), error.get("ctx") or {}
    name, (tp, meta) = str(loc[0]) + "".join(f"[{i}]" for i in loc[1:]), fields[loc[0]]
    if value is None or kind == "too_short":
        return f"{name} must not be {'None' if value is None else 'empty'}."
    if kind == "value_error":  # from the book's validators
        text = str(ctx["error"])
        return text.replace(_NAME, name) if _NAME in text else f"{name}: {text}"
    if kind == "literal_error":
        for _ in loc[1:]:  # an element of a tuple
            tp = typing.get_args(_bare(tp))[0]
        choices = typing.get_args(_bare(tp))
        return (f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}. "
                f"{_suggest(str(value), [str(c) for c in choices])}").rstrip()
    if kind == "float_type" and type(value) is int:  # beyond the float range
        kind, value = "finite_number", math.inf
    if kind == "finite_number" or (isinstance(value, float) and math.isnan(value)):
        value = float(value)
        kind = "float" if math.isnan(value) else kind
    what = _WANTED.get(kind) or _WANTED.get(kind.split("_")[0])
    return f"{name} must be {what.format(**meta)}, got {value!r}." if what else f"{name}: {error['msg']}, got {value!r}."


@functools.cache
def _validator(cls) -> tuple:
    """One validator of all of ``cls``'s parameters (built once per class), and its fields' (annotation, metadata)."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: (hints[f.name], f.metadata) for f in dataclasses.fields(cls)}
    return TypeAdapter(TypedDict(cls.__name__, {k: _pydantic_type(*f) for k, f in fields.items()})), fields


def _validate(adapter: TypeAdapter, fields: Mapping, value, prefix: tuple = ()):
    try:
        return adapter.validate_python(value)
    except ValidationError as err:
        error = err.errors()[0]
        raise ParameterError(_message({**error, "loc": prefix + error["loc"]}, fields)) from None


def coerce(name: str, tp, value, meta: Mapping):
    """``value`` as :meth:`Params.from_dict` validates parameter ``name`` (annotation ``tp``, metadata ``meta``)."""
    return _validate(TypeAdapter(_pydantic_type(tp, meta)), {name: (tp, meta)}, value, (name,))


# ------------------------------------------------------------------------------ Params
def _check_batch_fits(resolved: Mapping) -> None:
    """Every experiment with ``n_train`` and ``batch_size``: a mini-batch cannot hold more
    examples than the training set (checked here, with the other parameters, so that a run is
    refused before the runner writes anything, not when it reaches its data)."""
    n, b = resolved.get("n_train"), resolved.get("batch_size")
    ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (n, b))
    if ints and b > n:
        raise ValueError(f"batch_size={b} is more than n_train={n} training examples; lower batch_size to at most "
                         f"{n} or raise n_train.")


@dataclass(frozen=True)
class Params:
    """Base of every experiment's parameters: a frozen dataclass with ``scale`` and ``seed``.

    Subclasses add fields (:func:`param`) and may set ``SCALES = {scale: {field: value}}`` for
    the fields whose ``None`` means "from scale", and override :meth:`check`. A ``SCALES`` entry
    that is not a parameter (a setting the scale alone decides, such as ``n_test_final``) becomes
    an attribute of the resolved instance; declare it on the class as a ``ClassVar`` with its
    value for the scales that leave it out.

    ``run`` receives an instance with every ``None`` filled in (:meth:`resolve`) and reads it
    by attribute (``params.n_train``); an instance is not a mapping. A helper that ``run`` shares
    with ``claims`` or a chapter reads attributes too, and is given a record's stored settings
    typed again (:meth:`rebuild`), not the plain dict the record keeps.
    """

    SCALES: ClassVar[Mapping[str, Mapping[str, Any]]] = {}
    #: parameters (besides ``scale="paper"``) that the paper column of the settings table is
    #: resolved with, e.g. ``{"dataset": "cifar10"}``
    PAPER: ClassVar[Mapping[str, Any]] = {}
    #: rows of the settings table computed from the resolved parameters
    DERIVED: ClassVar[Sequence[Derived]] = ()
    #: the data, in words, of an experiment without a ``dataset`` parameter (the Findings' setting)
    TASK: ClassVar[str] = ""

    scale: Literal["default", "tiny", "paper"] = param("default", "tiny (tests), default (the book), paper")
    seed: int = param(0, "random seed", min=0, lt=2 ** 32)

    @classmethod
    def names(cls) -> list:
        """The parameter names, in declaration order."""
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_dict(cls, given: Optional[Mapping] = None, *, experiment: str = "?") -> "Params":
        """Validate ``given`` (missing names take their defaults): unknown names (with a "did
        you mean" hint), types, bounds, then :meth:`check` and the checks every experiment shares
        (a ``batch_size`` no larger than ``n_train``). Raises :class:`ParameterError`."""
        given = {} if given is None else given
        if not isinstance(given, Mapping):
            raise TypeError(f"params must be a dict of parameter values, got {type(given).__name__}.")
        names = cls.names()
        for k in given:
            if k not in names:
                raise ParameterError(f"unknown parameter {k!r} for experiment {experiment!r}: {_suggest(k, names)}"
                                     f"known parameters: {', '.join(names)}.")
        values = {f.name: given[f.name] if f.name in given else f.default for f in dataclasses.fields(cls)}
        obj = cls(**_validate(*_validator(cls), values))
        resolved = obj.resolved()
        for f in dataclasses.fields(cls):
            v = resolved.get(f.name)
            if f.metadata.get("distinct") and v is not None and len(set(v)) != len(v):
                raise ParameterError(f"{f.name} has repeated values: {list(v)}")
        try:
            obj.check()
            _check_batch_fits(resolved)
        except ParameterError:
            raise
        except (ValueError, TypeError) as err:
            raise ParameterError(f"experiment {experiment!r}: {err}") from None
        return obj

    def as_dict(self) -> dict:
        """The parameters as given (``None`` kept), tuples as lists."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(self).items()}

    def resolved(self) -> dict:
        """The parameters a run uses: every ``None`` replaced by ``SCALES[scale]``'s value."""
        out = self.as_dict()
        for k, v in self.SCALES.get(self.scale, {}).items():
            if out.get(k) is None:
                out[k] = list(v) if isinstance(v, tuple) else v
        return out

    def resolve(self) -> "Params":
        """The parameters ``run`` receives: a copy with every ``None`` filled from
        ``SCALES[scale]`` (the values of :meth:`resolved`, tuples kept as tuples) and the scale's
        settings that are not parameters set as attributes (lists as tuples). A copy made with
        :func:`dataclasses.replace` has the fields only: resolve it again for those settings."""
        table = {k: tuple(v) if isinstance(v, list) else v for k, v in self.SCALES.get(self.scale, {}).items()}
        fields = set(self.names())
        obj = dataclasses.replace(self, **{k: v for k, v in table.items() if k in fields and getattr(self, k) is None})
        for k, v in table.items():
            if k not in fields:
                object.__setattr__(obj, k, v)
        return obj

    @classmethod
    def rebuild(cls, stored: Mapping) -> "Params":
        """A record's stored settings (``meta["resolved"]``, :meth:`Experiment.resolved`) typed
        again, as ``run`` received them: its fields from ``stored`` (defaults for those it lacks,
        lists as tuples, not validated again: the record ran with them) and its other settings (the
        scale's, or sizes a run measured) as attributes.

        >>> @dataclass(frozen=True)
        ... class P(Params):
        ...     n_train: int = param(10, "training examples")
        >>> p = P.rebuild({"scale": "tiny", "seed": 3, "n_train": 8, "n_test_final": 500})
        >>> p.seed, p.n_train, p.n_test_final
        (3, 8, 500)
        """
        fields, typed = set(cls.names()), {k: tuple(v) if isinstance(v, list) else v for k, v in stored.items()}
        obj = cls(**{k: v for k, v in typed.items() if k in fields})
        for k, v in typed.items():
            if k not in fields:
                object.__setattr__(obj, k, v)
        return obj

    def replace(self, **changes) -> "Params":
        """A copy with ``changes`` to its fields that keeps its other settings
        (:func:`dataclasses.replace` keeps the fields only)."""
        obj, fields = dataclasses.replace(self, **changes), set(self.names())
        for k, v in vars(self).items():
            if k not in fields:
                object.__setattr__(obj, k, v)
        return obj

    def check(self) -> None:
        """Cross-field checks (raise ValueError naming the parameters); none by default."""

    @classmethod
    def paper_resolved(cls) -> dict:
        """The parameters ``scale="paper"`` runs with (and :data:`PAPER`'s), resolved."""
        return cls.from_dict({"scale": "paper", **cls.PAPER}).resolved()

    @classmethod
    def settings(cls, resolved: Mapping, paper: Optional[Mapping] = None) -> list:
        """The settings table as rows ``(label, this run's value, the paper column, source)``:
        one per labelled parameter (declaration order) and one per :data:`DERIVED` entry.
        ``resolved``: what the run used; ``paper``: what the paper column shows (default
        :meth:`paper_resolved`)."""
        paper = cls.paper_resolved() if paper is None else paper
        derived = list(cls.DERIVED)
        rows = []

        def add_derived(after):
            for d in [d for d in derived if d.after == after]:
                rows.append((d.label, d.value(resolved), d.value(paper), d.source))
                derived.remove(d)

        for f in dataclasses.fields(cls):
            m = f.metadata
            if m.get("label"):
                value = m["paper"] if m.get("paper") is not None else paper.get(f.name)
                rows.append((m["label"], resolved.get(f.name), value, m.get("source", "")))
            add_derived(f.name)
        for d in derived:
            rows.append((d.label, d.value(resolved), d.value(paper), d.source))
        return rows

    @classmethod
    def describe(cls) -> str:
        """One line per parameter: name, default, doc."""
        return "\n".join(f"  {f.name} = {f.default!r}" + (f" -- {f.metadata.get('doc')}" if f.metadata.get("doc")
                                                               else "") for f in dataclasses.fields(cls))


def scales_digest(scales: Mapping) -> str:
    """8 hex digits of the scale table (part of an experiment's version)."""
    blob = json.dumps(jsonable(scales), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:8]


# ------------------------------------------------------------------------------ Experiment
@dataclass(frozen=True)
class Experiment:
    """A named experiment (a study of one figure or table): how it runs and what it claims.

    * ``params``: its :class:`Params` class (every parameter typed, bounded and documented;
      labelled ones make the settings table);
    * ``run(params, ctx) -> results``: the computation (data only: arrays, numbers,
      strings; figures and prose are drawn elsewhere), given the experiment's :class:`Params`
      instance validated and resolved (:meth:`Params.resolve`: no ``None`` left for the scale
      to fill);
    * ``summary(record) -> list of dicts``: the rows of its summary table (one dict a row,
      column name to value), rendered by :func:`itlin.book.render.table`;
    * ``claims(record) -> Verdicts``: the paper's claims judged on the record, each
      :class:`~itlin.book.verdicts.Verdict` with a stable ``id`` that chapters pick it by.

    ``version`` (bump it when ``run`` changes its numbers) is stored with a digest of the
    params' ``SCALES``; ``doc`` (one paragraph for ``describe``) defaults to the first paragraph
    of the docstring of ``run``'s module.

    What the book's other layers read of it (:mod:`itlin.book.registry`'s views):

    * ``axes``: the names of the axes of arrays ``run`` stacks itself, for its record files
      (:data:`itlin.book.axes.AXES`): ``(pattern, (axis name, ...))`` entries, the first whose
      ``fnmatch`` pattern matches a result key (settings as ``{K}``) wins;
    * ``tallies``: whether its per-example results may be kept as counts over seeds
      (:data:`itlin.book.opendata.TALLY_READERS`: only a paired gap between two settings reads them);
    * ``pool(records) -> record``: how records made for their own seeds (parts) pool into one;
    * ``plans``: its confirmatory records, ``{record folder: plans.Plan}`` (each folder starting
      with ``<name>-``; :data:`itlin.book.plans.CONFIRMATORY`).
    """

    name: str
    params: type
    run: Callable[[Params, Any], Any]
    version: str = "1"
    doc: str = ""
    summary: Optional[Callable[[Any], list]] = None
    claims: Optional[Callable[[Any], Any]] = None
    axes: tuple = ()
    tallies: bool = False
    pool: Optional[Callable[[Sequence], Any]] = None
    plans: Mapping = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            raise ValueError(f"experiment name {self.name!r} must start with a letter or digit and contain only "
                             "letters, digits, '_', '-' and '.'.")
        if not (isinstance(self.params, type) and issubclass(self.params, Params)):
            raise TypeError(f"experiment {self.name!r}: params must be a Params subclass, got {self.params!r}.")
        for what in ("run", "summary", "claims", "pool"):
            fn = getattr(self, what)
            if not callable(fn) and not (what != "run" and fn is None):
                raise TypeError(f"experiment {self.name!r}: {what} must be callable, got {fn!r}.")
        self._check_declarations()
        self.params.from_dict({}, experiment=self.name)  # the defaults must be valid
        if not self.doc:  # the first paragraph of the module's docstring
            text = (getattr(inspect.getmodule(self.run), "__doc__", None) or "").strip().split("\n\n")[0]
            object.__setattr__(self, "doc", " ".join(text.split()))
        version = str(self.version)
        if self.params.SCALES:
            version = f"{version}.{scales_digest(self.params.SCALES)}"
        object.__setattr__(self, "version", version)

    def _check_declarations(self) -> None:
        for entry in self.axes if isinstance(self.axes, tuple) else [self.axes]:
            if not (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], str)
                    and isinstance(entry[1], tuple) and all(isinstance(n, str) and n for n in entry[1])):
                raise TypeError(f"experiment {self.name!r}: axes must be a tuple of (pattern, (axis name, ...)) entries, "
                                f"e.g. ('grid', ('learning_rate', 'seed')); got {entry!r}.")
        if not isinstance(self.tallies, bool):
            raise TypeError(f"experiment {self.name!r}: tallies must be True or False, got {self.tallies!r}.")
        bad = next((f"{k!r}: {v!r}" for k, v in self.plans.items() if not (isinstance(k, str) and k.startswith(
            self.name + "-") and isinstance(v, Plan))), None) if isinstance(self.plans, Mapping) else repr(self.plans)
        if bad:
            raise TypeError(f"experiment {self.name!r}: plans must map record folders named '{self.name}-...' to "
                            f"plans.Plan, got {bad}.")

    def resolve(self, params: Optional[Mapping] = None) -> dict:
        """Validate ``params`` and fill in defaults: the dict the runner hashes and stores (``run``
        receives the same values as its :class:`Params` instance, :meth:`Params.resolve`)."""
        return self.params.from_dict(params, experiment=self.name).as_dict()

    def defaults(self) -> dict:
        return self.resolve({})

    def resolved(self, record) -> dict:
        """The parameters a record ran with, ``None`` replaced by the scale's values (what
        ``run`` stored as ``meta["resolved"]`` when it did, which may add measured sizes)."""
        stored = getattr(record, "meta", {}).get("resolved")
        if stored is not None:
            return dict(stored)
        return self.params.from_dict(record.params, experiment=self.name).resolved()

    def settings(self, record=None, params: Optional[Mapping] = None) -> list:
        """The settings table's rows (see :meth:`Params.settings`) for a record, or for
        ``params`` before anything runs."""
        resolved = self.resolved(record) if record is not None else \
            self.params.from_dict(params, experiment=self.name).resolved()
        return self.params.settings(resolved)

    def verdicts(self, record):
        """``claims(record)`` as :class:`~itlin.book.verdicts.Verdicts` (picked by id)."""
        from .verdicts import Verdicts

        if self.claims is None:
            raise ValueError(f"experiment {self.name!r} states no claims.")
        return Verdicts(self.claims(record))

    def describe(self) -> str:
        return f"{self.name} (version {self.version})" + (f"\n  {self.doc}" if self.doc else "") + "\n" + \
            self.params.describe()


# ------------------------------------------------------------------------------ registry
def register(experiment: Experiment, *, replace: bool = False) -> Experiment:
    """Add ``experiment`` to the registry (returns it). A second experiment under a taken name
    is an error unless ``replace=True`` or it comes from the same function (a module reloaded)."""
    if not isinstance(experiment, Experiment):
        raise TypeError(f"register needs an Experiment, got {experiment!r}.")
    old = _REGISTRY.get(experiment.name)
    if old is not None and old is not experiment and not replace:
        same = (getattr(old.run, "__module__", None), getattr(old.run, "__qualname__", None)) == \
               (getattr(experiment.run, "__module__", None), getattr(experiment.run, "__qualname__", None))
        if not same:
            raise ValueError(f"an experiment named {experiment.name!r} is already registered "
                             f"(by {getattr(old.run, '__module__', '?')}); pick another name or pass replace=True.")
    _REGISTRY[experiment.name] = experiment
    return experiment


def unregister(name: str) -> None:
    """Remove an experiment (tests use it to clean up)."""
    _REGISTRY.pop(name, None)


__all__ = ["CLOSE_MARGIN", "coerce", "SCALES", "Dataset", "Derived", "Experiment", "ParameterError", "Params", "Period", "UnknownExperimentError",
           "param", "register", "scales_digest", "unregister"]
