"""Relinearisation schedules: when does iterative linearisation update its features?

Main paper Algorithm 1 relinearises after step ``t`` when ``t mod K == 0`` ("fixed period").
Section 5.1 names adaptive schedules as future work; two are provided here.

A schedule is a small object with pure, jittable methods. After every training step the
trainer calls ``update(state, info)`` and relinearises at the new parameters when it returns
True. Each schedule's state counts the feature updates so far (Definition 1: the number of
relinearisations; the initial linearisation at step 0 is not one), so ``K`` fixed over ``T``
steps gives ``floor(T / K)`` feature updates, ``K = 1`` gives ``T`` and ``K = inf`` gives 0.

Schedules:
  * :class:`FixedPeriod` ``(K)`` -- Algorithm 1. ``K=1`` is gradient descent, ``K=math.inf``
    trains the linearised model at initialisation forever.
  * :class:`AtSteps` ``(steps)`` -- relinearise after the listed steps.
  * :class:`LossDrift` ``(rtol)`` -- relinearise when the linearised model's training loss and
    the true network's loss (same batch, same parameters) differ by more than ``rtol`` relative
    to the true loss: the Taylor model no longer describes the network.
  * :class:`KernelDrift` ``(threshold, probe)`` -- relinearise when the empirical NTK on a probe
    batch has moved by more than ``threshold`` (relative Frobenius distance) since the anchor.

Adaptive schedules take ``check_every`` (measure only every so many steps, since measuring costs
a forward pass or a kernel) and ``max_period`` (relinearise at the latest after that many steps).
"""

from __future__ import annotations

import abc
import math
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from ._checks import check_period, check_positive


class ScheduleState(NamedTuple):
    """State every schedule carries: ``updates`` (feature updates so far, Definition 1),
    ``last`` (the step of the latest relinearisation, 0 at the start) and ``extra``
    (schedule-specific)."""

    updates: jax.Array
    last: jax.Array
    extra: Any


class StepInfo(NamedTuple):
    """What the trainer tells a schedule after one step.

    ``step`` is the number of steps done (after this one); ``lin_loss`` the loss of the model
    being trained (the linearised one) on this step's batch before the update; ``true_loss``
    the true network's loss on the same batch at the same parameters (NaN unless the schedule
    asked for it this step); ``params`` the parameters after the update; ``apply_fn`` the
    network's pure ``apply(params, x)``.
    """

    step: jax.Array
    lin_loss: jax.Array
    true_loss: jax.Array
    params: Any
    apply_fn: Any


class Schedule(abc.ABC):
    """Base class. Subclasses implement ``_decide`` (and ``_init_extra`` if they keep state)."""

    #: the trainer computes the true network's loss on steps where ``wants_true_loss`` is True
    needs_true_loss: bool = False

    def init(self, apply_fn=None, params=None) -> ScheduleState:
        """Initial state (no feature updates yet)."""
        return ScheduleState(jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32),
                             self._init_extra(apply_fn, params))

    def wants_true_loss(self, step) -> jax.Array:
        """Whether the schedule needs the true loss on the step that ends at ``step``."""
        return jnp.asarray(False)

    def update(self, state: ScheduleState, info: StepInfo):
        """Return ``(relinearise, new_state)`` after a step; counts the feature update."""
        relin, extra = self._decide(state, info)
        relin = jnp.asarray(relin, bool)
        new = ScheduleState(state.updates + relin.astype(jnp.int32),
                            jnp.where(relin, info.step, state.last).astype(jnp.int32), extra)
        return relin, new

    # -- to implement ----------------------------------------------------------------------
    def _init_extra(self, apply_fn, params):
        return ()

    @abc.abstractmethod
    def _decide(self, state, info):
        """Return ``(relinearise, new_extra)`` for this step."""

    # -- static facts used by the trainer ------------------------------------------------------
    @property
    def period(self) -> Optional[float]:
        """The fixed period ``K`` if there is one (``math.inf`` for never), else None."""
        return None

    @property
    def is_gradient_descent(self) -> bool:
        """True when every step relinearises (``K = 1``): the trainer may take plain GD steps."""
        return self.period == 1

    def describe(self) -> str:
        """A short label for legends and progress bars (e.g. ``"K=1000"``)."""
        return type(self).__name__

    def spec(self) -> dict:
        """Everything that determines the schedule's decisions, JSON-able (checkpoints are
        fingerprinted with it, so a run is never resumed under another schedule)."""
        return {"kind": type(self).__name__}


class FixedPeriod(Schedule):
    """Relinearise after every ``K``-th step (Algorithm 1). ``K`` is an integer >= 1 or
    ``math.inf``; ``K = 1`` is (stochastic) gradient descent, ``K = inf`` never relinearises."""

    def __init__(self, K):
        self.K = check_period("K", K)

    @property
    def period(self):
        return self.K

    def _decide(self, state, info):
        if math.isinf(self.K):
            return jnp.asarray(False), ()
        return info.step % self.K == 0, ()

    def spec(self):
        """``{"kind": "FixedPeriod", "K": K}``."""
        return {"kind": "FixedPeriod", "K": self.K}

    def expected_updates(self, steps: int) -> int:
        """Feature updates after ``steps`` steps: ``floor(steps / K)`` (Definition 1)."""
        return 0 if math.isinf(self.K) else int(steps) // int(self.K)

    def describe(self):
        """``"K=<period>"`` or ``"K=inf"``."""
        return "K=inf" if math.isinf(self.K) else f"K={self.K}"

    def __repr__(self):
        return f"FixedPeriod({self.describe()[2:]})"


class AtSteps(Schedule):
    """Relinearise after each step listed in ``steps`` (positive integers)."""

    def __init__(self, steps):
        arr = np.asarray(sorted(set(int(s) for s in steps)), dtype=np.int64)
        if arr.size and arr[0] < 1:
            raise ValueError(f"AtSteps needs step numbers >= 1, got {arr[0]}.")
        self.steps = arr

    def _decide(self, state, info):
        if self.steps.size == 0:
            return jnp.asarray(False), ()
        return jnp.any(jnp.asarray(self.steps, jnp.int32) == info.step), ()

    def spec(self):
        """The kind and the full list of steps."""
        return {"kind": "AtSteps", "steps": self.steps.tolist()}

    def describe(self):
        """``"at <n> steps"``."""
        return f"at {self.steps.size} steps"


def _check_adaptive(check_every, max_period):
    check_every = check_period("check_every", check_every)
    if math.isinf(check_every):
        raise ValueError("check_every must be a finite integer >= 1.")
    max_period = check_period("max_period", max_period)
    return check_every, max_period


class LossDrift(Schedule):
    """Relinearise when ``|L_lin - L_true| > rtol * L_true`` on the current batch.

    ``L_lin`` is the loss of the linearised model being trained and ``L_true`` the loss of the
    network at the same parameters on the same batch. Measured every ``check_every`` steps
    (each check costs one forward pass); ``max_period`` caps the time between relinearisations.
    """

    needs_true_loss = True

    def __init__(self, rtol: float, check_every: int = 1, max_period=math.inf):
        self.rtol = check_positive("rtol", rtol)
        self.check_every, self.max_period = _check_adaptive(check_every, max_period)

    def wants_true_loss(self, step):
        """True every ``check_every`` steps (each check costs one forward pass)."""
        return step % self.check_every == 0

    def _decide(self, state, info):
        drift = jnp.abs(info.lin_loss - info.true_loss) > self.rtol * jnp.abs(info.true_loss)
        drift = jnp.where(jnp.isnan(info.true_loss), False, drift)
        late = (info.step - state.last) >= self.max_period if not math.isinf(self.max_period) else False
        return jnp.logical_or(drift, late), ()

    def spec(self):
        """The kind, tolerance, check interval and cap."""
        return {"kind": "LossDrift", "rtol": self.rtol, "check_every": self.check_every,
                "max_period": self.max_period}

    def describe(self):
        """``"loss drift > <rtol>"``."""
        return f"loss drift > {self.rtol:g}"


class KernelDrift(Schedule):
    """Relinearise when the empirical NTK on ``probe`` inputs has moved by more than
    ``threshold``: ``||K(theta) - K(theta_s)||_F / ||K(theta_s)||_F > threshold``.

    The anchor's kernel (``n x n``, traced over outputs) is kept in the schedule state. Each
    check (every ``check_every`` steps) costs one probe Jacobian.
    """

    def __init__(self, threshold: float, probe, check_every: int = 10, max_period=math.inf):
        self.threshold = check_positive("threshold", threshold)
        self.probe = jnp.asarray(probe)
        self.check_every, self.max_period = _check_adaptive(check_every, max_period)

    def _kernel(self, apply_fn, params):
        from .kernels import empirical_ntk

        return empirical_ntk(apply_fn, params, self.probe, trace=True)

    def _init_extra(self, apply_fn, params):
        if apply_fn is None or params is None:
            raise ValueError("KernelDrift.init needs the network's apply function and the initial params.")
        return self._kernel(apply_fn, params)

    def _decide(self, state, info):
        from .kernels import kernel_distance

        k_anchor = state.extra
        check = info.step % self.check_every == 0
        k_now = jax.lax.cond(check, lambda: self._kernel(info.apply_fn, info.params), lambda: k_anchor)
        moved = kernel_distance(k_now, k_anchor) > self.threshold
        late = (info.step - state.last) >= self.max_period if not math.isinf(self.max_period) else False
        relin = jnp.logical_or(jnp.logical_and(check, moved), late)
        if not math.isinf(self.max_period):
            k_now = jax.lax.cond(jnp.logical_and(relin, ~check),
                                 lambda: self._kernel(info.apply_fn, info.params), lambda: k_now)
        return relin, jnp.where(relin, k_now, k_anchor)

    def spec(self):
        """The kind, threshold, check interval, cap and a digest of the probe inputs."""
        import hashlib

        digest = hashlib.sha256(np.asarray(self.probe).tobytes()).hexdigest()[:16]
        return {"kind": "KernelDrift", "threshold": self.threshold, "check_every": self.check_every,
                "max_period": self.max_period, "probe": f"{tuple(self.probe.shape)}:{digest}"}

    def describe(self):
        """``"kernel drift > <threshold>"``."""
        return f"kernel drift > {self.threshold:g}"


def get_schedule(spec) -> Schedule:
    """Build a schedule from a papermill-friendly value.

    ``5``, ``1000``, ``"inf"``, ``math.inf`` or ``None`` give :class:`FixedPeriod`; a
    :class:`Schedule` passes through; a dict ``{"kind": "loss_drift", "rtol": 0.1, ...}`` or
    ``{"kind": "at_steps", "steps": [...]}`` builds an adaptive schedule (``kind`` one of
    ``fixed``, ``at_steps``, ``loss_drift``, ``kernel_drift``).
    """
    if isinstance(spec, Schedule):
        return spec
    if isinstance(spec, dict):
        spec = dict(spec)
        kind = spec.pop("kind", None)
        builders = {"fixed": FixedPeriod, "at_steps": AtSteps, "loss_drift": LossDrift,
                    "kernel_drift": KernelDrift}
        if kind not in builders:
            raise ValueError(f"unknown schedule kind {kind!r}; choose one of {sorted(builders)}.")
        return builders[kind](**spec)
    return FixedPeriod(spec)


__all__ = [
    "AtSteps",
    "FixedPeriod",
    "KernelDrift",
    "LossDrift",
    "Schedule",
    "ScheduleState",
    "StepInfo",
    "get_schedule",
]
