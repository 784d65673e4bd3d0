"""When to relinearise: relinearisation schedules (main paper Algorithm 1, Definition 1, Section 5.1).

Two kinds, in the spirit of optax's ``count -> value`` schedules:

* a **rule** is a plain function ``step -> bool``: relinearise after step ``step`` (counted
  from 1) when it returns True. :class:`Every` ``(K)`` is Algorithm 1 (``t mod K == 0``;
  ``K = 1`` is gradient descent, ``K = inf`` never relinearises) and :class:`AtSteps` a list of
  steps; any jittable ``lambda step: ...`` works too.
* an **adaptive** schedule is a :class:`Schedule`: a pure ``init(f, params) -> state`` and
  ``update(state, info) -> (relinearise, state)`` pair that sees the step's losses and
  parameters. :func:`loss_drift` relinearises when the linearised and the true loss part;
  :func:`kernel_drift` when the empirical NTK on a probe batch has moved. The main paper leaves
  adaptive schedules to future work.

The trainer counts feature updates itself (Definition 1: relinearisations, not counting the
linearisation at step 0), so a rule ``Every(K)`` over ``T`` steps gives ``floor(T / K)``.

A schedule of your own in a few lines (relinearise densely early, sparsely later)::

    rule = lambda step: (step < 100) | (step % 1000 == 0)
    trainer = itlin.iterative_linearisation(model, optax.sgd(1e-2), rule)
"""

from __future__ import annotations

import hashlib
import math
import numbers
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from ._checks import check_positive, output_shape

#: the spellings of "never relinearise" (any case) that every parser of periods accepts: the
#: trainer's, the book's parameters (lists included) and the stored records'
INF_WORDS = ("inf", "+inf", "infinity", "+infinity", "never")

#: the longest finite period: the trainer counts steps in int32, so a longer one could never fire
MAX_PERIOD = 2 ** 31 - 1


def parse_period(value, name: str = "K"):
    """A relinearisation period: an integer >= 1, or ``math.inf`` for "never".

    The one parser of periods, used by the trainer and by the book's parameters: integers (or
    whole floats such as ``1e5``), ``math.inf``, or the strings in ``itlin.core.schedules.INF_WORDS``. A finite
    period longer than the step counter can count (``MAX_PERIOD``, ``2**31 - 1`` steps) never
    fires, and is refused with a pointer to ``"inf"``. Raises ``ValueError`` (or ``TypeError`` for
    a value that is not a number or a string), with a one-line message.

    >>> parse_period(10), parse_period(1e3), parse_period("inf"), parse_period(float("inf"))
    (10, 1000, inf, inf)
    >>> parse_period(0)
    Traceback (most recent call last):
    ...
    ValueError: K must be >= 1 (K=1 is plain gradient descent), got 0; use "inf" for a model that is never relinearised.
    """
    if isinstance(value, str):
        word = value.strip().lower()
        if word in INF_WORDS:
            return math.inf
        try:
            value = int(word) if word.lstrip("+-").isdigit() else float(word)
        except (ValueError, OverflowError):
            raise ValueError(f'{name} must be an integer >= 1 or "inf", got {value!r}.') from None
    if isinstance(value, (np.ndarray, jax.Array)) and np.ndim(value) == 0 and not isinstance(value, jax.core.Tracer):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f'{name} must be an integer >= 1 or "inf" (never relinearise), got {value!r}.')
    if isinstance(value, numbers.Integral):
        v = int(value)
    else:
        v = float(value)
        if math.isnan(v):
            raise ValueError(f'{name} must be an integer >= 1 or "inf", got nan.')
        if math.isinf(v):
            if v < 0:
                raise ValueError(f'{name} must be an integer >= 1 or "inf", got {value!r}.')
            return math.inf
        if v != int(v):
            raise ValueError(f"{name} must be a whole number of steps, got {value!r}; use an integer such as "
                             f"{max(1, round(v))}.")
        v = int(v)
    if v < 1:
        raise ValueError(f'{name} must be >= 1 (K=1 is plain gradient descent), got {value!r}; use "inf" for '
                         "a model that is never relinearised.")
    if v > MAX_PERIOD:
        shown = str(v) if v < 10 ** 12 else f"an integer of {len(str(v))} digits"
        raise ValueError(f'{name}={shown} is more steps than a run can count ({MAX_PERIOD}); use "inf" for a model '
                         "that is never relinearised.")
    return v


# ------------------------------------------------------------------------------ rules
class _Rule:
    """What the rules :class:`Every` and :class:`AtSteps` share: one field, parsed by ``_parse``
    whether the rule is built by its constructor or by ``of``, and the answer of a rule that
    never fires (:meth:`_never`). Mixed in before the rule's ``NamedTuple`` of fields."""

    __slots__ = ()

    def __new__(cls, value):
        return super().__new__(cls, cls._parse(value))

    @classmethod
    def of(cls, value):
        """The rule from its one argument, parsed as the constructor does (``Every.of(K)`` is
        ``Every(K)``, ``AtSteps.of(steps)`` is ``AtSteps(steps)``)."""
        return cls(value)

    @staticmethod
    def _never(step):
        """False for every step in ``step`` (a scalar or an array of steps)."""
        return jnp.zeros(jnp.shape(step), bool)


class _EveryFields(NamedTuple):
    K: Any


class Every(_Rule, _EveryFields):
    """Relinearise after every ``K``-th step (Algorithm 1); ``K = inf`` never.

    ``K`` is parsed by :func:`parse_period` (an integer >= 1 or ``"inf"``; ``Every.of(K)`` is
    ``Every(K)``) and is a static
    field: a trainer on ``Every(K)`` is compiled once per ``K``. To serve every ``K`` of a sweep
    with one compiled program, use :func:`periodic` (``K`` in the schedule's state).

    >>> rule = Every(3)
    >>> [bool(rule(s)) for s in range(1, 7)]
    [False, False, True, False, False, True]
    >>> Every("inf").name
    'K=inf'
    >>> Every(0)
    Traceback (most recent call last):
    ...
    ValueError: K must be >= 1 (K=1 is plain gradient descent), got 0; use "inf" for a model that is never relinearised.
    """

    __slots__ = ()
    _parse = staticmethod(parse_period)

    def __call__(self, step):
        if math.isinf(self.K):
            return self._never(step)
        return step % int(self.K) == 0

    @property
    def name(self) -> str:
        """``"K=1000"`` or ``"K=inf"``."""
        return "K=inf" if math.isinf(self.K) else f"K={int(self.K)}"

    def updates(self, steps: int) -> int:
        """Feature updates after ``steps`` steps: ``floor(steps / K)`` (Definition 1)."""
        return 0 if math.isinf(self.K) else int(steps) // int(self.K)


class _AtStepsFields(NamedTuple):
    steps: tuple


def _step_numbers(steps) -> tuple:
    try:
        items = list(steps)
    except TypeError:
        raise TypeError(f"AtSteps needs an iterable of step numbers (integers >= 1), got {steps!r}.") from None
    out = set()
    for s in items:
        if isinstance(s, (np.ndarray, jax.Array)) and np.ndim(s) == 0:
            s = s.item()
        if isinstance(s, bool) or not isinstance(s, numbers.Real) or (
                not isinstance(s, numbers.Integral) and not (math.isfinite(s) and s == int(s))):
            raise ValueError(f"AtSteps needs whole step numbers >= 1, got {s!r}.")
        if int(s) < 1:
            raise ValueError(f"AtSteps needs step numbers >= 1 (a relinearisation happens after a step), got "
                             f"{int(s)}.")
        if int(s) > MAX_PERIOD:
            raise ValueError(f"AtSteps step {int(s)} is more steps than a run can count ({MAX_PERIOD}); drop it "
                             "(it would never be reached).")
        out.add(int(s))
    return tuple(sorted(out))


class AtSteps(_Rule, _AtStepsFields):
    """Relinearise after each listed step (integers from 1 to ``MAX_PERIOD``; sorted, repeats
    dropped). ``AtSteps.of(steps)`` is ``AtSteps(steps)``.

    >>> rule = AtSteps([5, 2])
    >>> rule.steps, [int(s) for s in range(1, 7) if rule(s)]
    ((2, 5), [2, 5])
    """

    __slots__ = ()
    _parse = staticmethod(_step_numbers)

    def __call__(self, step):
        if not self.steps:
            return self._never(step)
        return jnp.any(jnp.asarray(self.steps, jnp.int32) == step)

    @property
    def name(self) -> str:
        """``"at <n> steps"``."""
        return f"at {len(self.steps)} steps"


# ------------------------------------------------------------------------------ adaptive
class StepInfo(NamedTuple):
    """What the trainer tells a schedule after one step.

    ``step``: steps done (this one included). ``since``: steps since the latest
    relinearisation (or the start). ``lin_loss``: the trained (linearised) model's loss on the
    step's batch before the update. ``true_loss``: the network's loss on the same batch at the
    same parameters (NaN unless the schedule asked for it this step). ``params``: parameters
    after the update. ``f``: the network's pure ``f(params, x)``.

    >>> import jax.numpy as jnp
    >>> info = StepInfo(step=jnp.asarray(7), since=jnp.asarray(2), lin_loss=jnp.asarray(0.5),
    ...                 true_loss=jnp.asarray(jnp.nan), params=None, f=None)
    >>> int(info.step - info.since)                # the step of the latest relinearisation
    5
    """

    step: jax.Array
    since: jax.Array
    lin_loss: jax.Array
    true_loss: jax.Array
    params: Any
    f: Any


class Schedule(NamedTuple):
    """An adaptive schedule: pure ``init(f, params) -> state`` and ``update(state, info) ->
    (relinearise, state)``, plus ``wants_true_loss(step) -> bool`` (``None``: never) for
    schedules that compare with the network's own loss, a ``name`` for legends, and a ``spec``
    (JSON-able) that tells schedules apart.

    A schedule of one's own: relinearise once the linearised loss has halved since the latest
    relinearisation (the state is that reference loss, NaN before the first step).

    >>> import jax.numpy as jnp
    >>> def update(ref, info):
    ...     ref = jnp.where(jnp.isnan(ref), info.lin_loss, ref)
    ...     relin = info.lin_loss < 0.5 * ref
    ...     return relin, jnp.where(relin, info.lin_loss, ref)
    >>> halved = Schedule(lambda f, params: jnp.asarray(jnp.nan), update, name="loss halved")
    >>> state, decisions = halved.init(None, None), []
    >>> for step, loss in enumerate([1.0, 0.8, 0.4, 0.3, 0.1], start=1):
    ...     info = StepInfo(step, step, jnp.asarray(loss), jnp.asarray(jnp.nan), None, None)
    ...     relin, state = halved.update(state, info)
    ...     decisions.append(bool(relin))
    >>> decisions
    [False, False, True, False, True]
    """

    init: Callable
    update: Callable
    wants_true_loss: Optional[Callable] = None
    name: str = "adaptive"
    spec: tuple = ()
    #: optional ``set(state, **values) -> state``: the values a user may write into the state at
    #: ``trainer.init(params, **values)`` (as :func:`periodic`'s ``period`` and ``horizon``)
    set: Optional[Callable] = None


# ------------------------------------------------------------------------------ the period in the state
class PeriodState(NamedTuple):
    """The state of :func:`periodic`: int32 scalars (or arrays, under ``jax.vmap``).

    ``period``: ``K``, with ``0`` standing for ``K = inf`` (never). ``horizon``: no
    relinearisation after step ``horizon`` or any later step (``MAX_PERIOD``: no limit).
    Write them with ``trainer.init(params, period=K, horizon=steps)``.

    >>> s = periodic(5, horizon=12).init(None, None)
    >>> int(s.period), int(s.horizon)
    (5, 12)
    """

    period: jax.Array
    horizon: jax.Array


def _period_array(K):
    """``K`` (a period or an array of periods; ``inf`` allowed) as int32, ``0`` for ``inf``."""
    if isinstance(K, jax.core.Tracer):  # traced (vmap over K): converted, not checked
        K = jnp.asarray(K)
        if jnp.issubdtype(K.dtype, jnp.floating):
            K = jnp.where(jnp.isinf(K), 0, K)
        return K.astype(jnp.int32)
    arr = np.asarray(K, dtype=object)
    vals = [parse_period(v, "period") for v in arr.reshape(-1)]
    return jnp.asarray(np.asarray([0 if math.isinf(v) else v for v in vals], np.int32).reshape(arr.shape))


def _horizon_array(horizon):
    """``horizon`` (steps of the run; ``None``: no limit) as int32."""
    if horizon is None:
        return jnp.asarray(MAX_PERIOD, jnp.int32)
    if isinstance(horizon, jax.core.Tracer):
        return jnp.asarray(horizon).astype(jnp.int32)
    arr = np.asarray(horizon)
    if arr.dtype.kind not in "iu" or np.any(arr < 1) or np.any(arr > MAX_PERIOD):
        raise ValueError(f"horizon must be the run's number of steps, an integer from 1 to {MAX_PERIOD} (or None "
                         f"for no limit), got {horizon!r}.")
    return jnp.asarray(arr, jnp.int32)


def periodic(K=1, *, horizon: Optional[int] = None) -> Schedule:
    """Relinearise after every ``K``-th step, with ``K`` in the schedule's **state**: one compiled
    step serves every ``K`` (a sweep over periods compiles once), in the spirit of
    ``optax.inject_hyperparams``.

    The decisions are those of :class:`Every` ``(K)`` (Definition 1: ``floor(T / K)`` feature
    updates over ``T`` steps, none at step 0; ``K = inf`` never). With ``horizon=T`` (the run's
    number of steps) it does not relinearise after step ``T`` or later: that last
    relinearisation would change nothing in training but would replace, at the end of the run,
    the linearised model being trained by the network at the same weights. A run of ``T``
    steps then relinearises after steps ``K, 2K, ...`` below ``T``: ``ceil(T / K) - 1`` feature
    updates for a finite ``K > 1``.

    ``K`` and ``horizon`` given here are the defaults of ``trainer.init``; write others into the
    state there: ``trainer.init(params, period=K, horizon=T)`` (``K`` parsed by
    :func:`parse_period`; a traced or array value under ``jax.vmap`` is taken as is, ``inf``
    included). ``K = 1`` steps through the linearised model (relinearised after every step),
    which is gradient descent up to rounding; :class:`Every` ``(1)`` takes the network's own
    gradient steps.

    >>> import jax, jax.numpy as jnp, optax, itlin
    >>> tr = itlin.iterative_linearisation(lambda p, x: x @ p, optax.sgd(0.1), periodic(), loss="squared")
    >>> step = jax.jit(tr.step)                       # compiled once, whatever K is
    >>> for K in (2, 3, "inf"):
    ...     st = tr.init(jnp.zeros(2), period=K, horizon=6)
    ...     for _ in range(6):
    ...         st, log = step(st, jnp.eye(2), jnp.ones(2))
    ...     print(K, st.feature_updates)               # after steps 2, 4 / 3 / never; not after step 6
    2 2
    3 1
    inf 0
    """
    default = (_period_array(K), _horizon_array(horizon))

    def init(f, params):
        return PeriodState(*default)

    def update(state, info):
        period, until = state
        step = jnp.asarray(info.step, jnp.int32)
        fires = jnp.logical_and(period > 0, step % jnp.maximum(period, 1) == 0)
        return jnp.logical_and(fires, step < until), state

    def set_(state, *, period=None, horizon=None):
        return PeriodState(state.period if period is None else _period_array(period),
                           state.horizon if horizon is None else _horizon_array(horizon))

    return Schedule(init, update, None, "K in the state", ("periodic",), set_)


def _check_adaptive(check_every, max_period):
    check_every = parse_period(check_every, "check_every")
    if math.isinf(check_every):
        raise ValueError("check_every must be a finite integer >= 1.")
    return check_every, parse_period(max_period, "max_period")


def _late(info, max_period):
    return info.since >= max_period if not math.isinf(max_period) else jnp.asarray(False)


def loss_drift(rtol: float, check_every: int = 1, max_period=math.inf) -> Schedule:
    """Relinearise when ``|L_lin - L_true| > rtol * |L_true|`` on the step's batch: the Taylor
    model no longer describes the network.

    Measured every ``check_every`` steps (a check costs one forward pass of the network);
    ``max_period`` caps the steps between relinearisations.

    >>> import jax.numpy as jnp
    >>> s = loss_drift(0.1)
    >>> info = StepInfo(jnp.asarray(1), jnp.asarray(1), jnp.asarray(1.2), jnp.asarray(1.0), None, None)
    >>> bool(s.update(s.init(None, None), info)[0])       # 20% apart > 10%
    True
    """
    rtol = check_positive("rtol", rtol)
    check_every, max_period = _check_adaptive(check_every, max_period)

    def update(state, info):
        drift = jnp.abs(info.lin_loss - info.true_loss) > rtol * jnp.abs(info.true_loss)
        drift = jnp.where(jnp.isnan(info.true_loss), False, drift)
        return jnp.logical_or(drift, _late(info, max_period)), state

    return Schedule(lambda f, params: (), update, lambda step: step % check_every == 0,
                    f"loss drift > {rtol:g}", ("loss_drift", rtol, check_every, max_period))


def kernel_drift(threshold: float, probe, check_every: int = 10, max_period=math.inf) -> Schedule:
    """Relinearise when the empirical NTK on the ``probe`` inputs has moved by more than
    ``threshold`` since the anchor: ``||K(theta) - K(theta_s)||_F / ||K(theta_s)||_F``.

    The state is the anchor's kernel (``n x n``, traced over outputs); each check (every
    ``check_every`` steps) costs one probe Jacobian.

    >>> import jax.numpy as jnp
    >>> f = lambda p, x: jnp.tanh(x @ p)
    >>> s = kernel_drift(0.5, jnp.eye(2), check_every=1)
    >>> k0 = s.init(f, jnp.zeros(2))
    >>> info = StepInfo(jnp.asarray(1), jnp.asarray(1), 0.0, jnp.nan, 3.0 * jnp.ones(2), f)
    >>> bool(s.update(k0, info)[0])                       # tanh' fell from 1 to ~0.01
    True
    """
    from .linearise import kernel_distance, ntk

    threshold = check_positive("threshold", threshold)
    probe = jnp.asarray(probe)
    check_every, max_period = _check_adaptive(check_every, max_period)

    def kernel(f, params):
        return ntk(f, params, probe, trace=True)

    def init(f, params):
        if f is None or params is None:
            raise ValueError("kernel_drift needs the network and the initial params to measure the anchor's kernel.")
        output_shape(f, params, probe, "kernel_drift's probe")  # one line if the model cannot take the probe
        return kernel(f, params)

    def update(k_anchor, info):
        check = info.step % check_every == 0
        k_now = jax.lax.cond(check, lambda: kernel(info.f, info.params), lambda: k_anchor)
        late = _late(info, max_period)
        relin = jnp.logical_or(jnp.logical_and(check, kernel_distance(k_now, k_anchor) > threshold), late)
        if not math.isinf(max_period):
            k_now = jax.lax.cond(jnp.logical_and(relin, ~check), lambda: kernel(info.f, info.params), lambda: k_now)
        return relin, jnp.where(relin, k_now, k_anchor)

    digest = hashlib.sha256(np.asarray(probe).tobytes()).hexdigest()[:16]
    return Schedule(init, update, None, f"kernel drift > {threshold:g}",
                    ("kernel_drift", threshold, check_every, max_period, tuple(probe.shape), digest))


def _check_rule(rule):
    """A rule ``step -> bool`` must give a scalar for a scalar step (abstract: no computation).
    A rule that cannot be traced abstractly is left to the trainer."""
    try:
        out = jax.eval_shape(rule, jax.ShapeDtypeStruct((), jnp.int32))
    except Exception:  # noqa: BLE001 - judged when the trainer traces it
        return
    shape = tuple(getattr(out, "shape", ())) if not isinstance(out, (tuple, list, dict)) else None
    if shape != ():
        what = f"shape {shape}" if shape is not None else type(out).__name__
        raise TypeError(f"a schedule rule must return one bool per step (a scalar), got {what}; reduce it (e.g. "
                        "jnp.any) or return step % K == 0.")


def as_schedule(spec) -> Schedule:
    """Any accepted schedule as a :class:`Schedule`: a period (number or ``"inf"``, parsed by
    :func:`parse_period`), a rule ``step -> bool`` (:class:`Every`, :class:`AtSteps` or a
    function), or a :class:`Schedule` (returned as is).

    >>> as_schedule(10).name, as_schedule("never").name
    ('K=10', 'K=inf')
    """
    if isinstance(spec, Schedule):
        return spec
    if isinstance(spec, (Every, AtSteps)):
        rule = spec
    elif callable(spec):
        rule = spec
    else:
        rule = Every.of(spec)

    if not isinstance(rule, (Every, AtSteps)):
        _check_rule(rule)

    def update(state, info):
        decision = jnp.asarray(rule(info.step))
        if decision.shape != ():
            raise TypeError(f"a schedule rule must return one bool per step, got shape {decision.shape}; reduce it "
                            "(e.g. jnp.any) or return step % K == 0.")
        return decision.astype(bool), state

    name = getattr(rule, "name", getattr(rule, "__name__", "rule"))
    spec_ = tuple(rule) if isinstance(rule, (Every, AtSteps)) else (name,)
    return Schedule(lambda f, params: (), update, None, name, (type(rule).__name__,) + spec_)


def period_of(spec) -> Optional[float]:
    """The fixed period ``K`` of a schedule spec (a number, ``"inf"`` or :class:`Every`), else None.

    >>> period_of(1), period_of(Every(5)), period_of(AtSteps.of([3]))
    (1, 5, None)
    """
    if isinstance(spec, Every):
        return spec.K
    if isinstance(spec, (Schedule, AtSteps)) or callable(spec):
        return None
    return parse_period(spec)


__all__ = ["AtSteps", "Every", "INF_WORDS", "MAX_PERIOD", "PeriodState", "Schedule", "StepInfo", "as_schedule",
           "kernel_drift", "loss_drift", "parse_period", "period_of", "periodic"]
