"""Iterative linearised training (main paper Algorithm 1; Eq. 3-4 and, for any loss, Eq. 7-8).

A trainer takes steps of any optax optimiser on the network linearised at an anchor
``theta_s`` and moves the anchor to the current parameters whenever its schedule says so::

    theta_{t+1} = optimiser step on  L(f(theta_s, X) + J_s (theta_t - theta_s), Y)     (Eq. 3, 7)
    theta_s     = theta_{t+1}   when the schedule relinearises                       (Eq. 4, 8)

``K = 1`` is plain (stochastic) gradient descent; ``K = inf`` trains the linearised network at
initialisation. The loss (softmax included) is applied to the linearised outputs exactly: only
the network is linearised. The optimiser's state carries across relinearisations unless
``reset_optimizer=True``.

In the style of optax, :func:`iterative_linearisation` returns a :class:`Trainer` of pure
functions over a :class:`TrainState` pytree::

    trainer = itlin.iterative_linearisation(model, optax.sgd(1e-2), K)
    state = trainer.init(params)
    state, log = jax.jit(trainer.step)(state, x, y)        # one step on one batch

``step`` is the only way training advances. On a full batch, pass the phase's stored
linearisation (``lin=trainer.linearise(state, x)``, recomputed after each relinearisation): a
step is then one tangent and one transposed pass, with no forward pass of the network. The
drivers in :mod:`itlin.core.loop` (:func:`~itlin.core.loop.fit`,
:func:`~itlin.core.loop.run`) string steps into compiled loops, draw mini-batches, evaluate and
keep a history.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import optax

from ._checks import check_float_params
from ._tree import tree_select
from .linearise import Linearisation, linearise_at, linearised_apply
from .losses import Loss, get_loss
from .model import Model
from .schedules import Schedule, StepInfo, as_schedule, period_of


class TrainState(NamedTuple):
    """Everything a run needs to continue (a pytree: checkpoint it as it is).

    ``step``: steps done. ``params``: ``theta_t``. ``anchor``: the linearisation point
    ``theta_s``. ``opt_state``: the optimiser's. ``model_state``: non-trainable state
    (batch-norm statistics) frozen at the anchor, ``{}`` if none. ``updates``: feature updates
    so far (Definition 1). ``last``: the step of the latest relinearisation (0 at the start).
    ``schedule``: the schedule's own state (``()`` for rules).

    >>> import jax.numpy as jnp, optax
    >>> st = iterative_linearisation(lambda p, x: x @ p, optax.sgd(0.5), 2, loss="squared").init(jnp.zeros(2))
    >>> int(st.step), st.feature_updates, st.anchor.tolist(), int(st.last)
    (0, 0, [0.0, 0.0], 0)
    """

    step: jax.Array
    params: Any
    anchor: Any
    opt_state: Any
    model_state: Any
    updates: jax.Array
    last: jax.Array
    schedule: Any

    @property
    def feature_updates(self) -> int:
        """Relinearisations so far (Definition 1), as a Python int."""
        return int(self.updates)


class StepLog(NamedTuple):
    """One step's record: the trained model's loss on the step's batch (before the update) and
    whether the step ended with a relinearisation.

    >>> import jax.numpy as jnp, optax
    >>> tr = iterative_linearisation(lambda p, x: x @ p, optax.sgd(0.5), 2, loss="squared")
    >>> st, log = tr.step(tr.init(jnp.zeros(2)), jnp.eye(2), jnp.ones(2))
    >>> float(log.loss), bool(log.relinearised)            # mean of 0.5 ||0 - 1||^2; K=2: not yet
    (0.5, False)
    >>> st, log = tr.step(st, jnp.eye(2), jnp.ones(2))
    >>> bool(log.relinearised), st.feature_updates, st.anchor.tolist()
    (True, 1, [0.4375, 0.4375])
    """

    loss: jax.Array
    relinearised: jax.Array


class Trainer(NamedTuple):
    """Pure functions of iterative linearised training, plus the static facts drivers need.

    ``init(params, model_state=None, **schedule_values) -> TrainState`` (``schedule_values``:
    what the schedule lets one write into its state, e.g. ``period=K, horizon=steps`` for
    :func:`itlin.periodic`);
    ``step(state, x, y, key=None, lin=None) -> (TrainState, StepLog)`` (``key`` feeds the
    augmentation; ``lin`` is the phase's stored full-batch linearisation);
    ``linearise(state, x) -> Linearisation`` (that stored linearisation).
    ``gd_path`` is True when steps are the network's own gradient steps (``K = 1``). Hashable,
    so a trainer can be a static argument of ``jax.jit``.

    ``step`` is pure and **not** jitted, as optax's ``update``: wrap it in ``jax.jit`` once and
    call the compiled step in a loop of your own to follow your own batch order (several times
    faster than the Python step; :func:`itlin.fit` and :func:`itlin.run` compile whole chunks
    of steps and take a batch order too, ``batches=``):

    >>> import jax, jax.numpy as jnp, numpy as np, optax
    >>> tr = iterative_linearisation(lambda p, x: x @ p, optax.sgd(0.5), 2, loss="squared")
    >>> x, y = jnp.eye(4), jnp.arange(4.0)
    >>> step = jax.jit(tr.step)                          # one compile; every later call reuses it
    >>> state = tr.init(jnp.zeros(4))
    >>> for idx in np.asarray([[0, 1], [2, 3], [3, 0]]):  # the batches, in my order
    ...     state, log = step(state, x[idx], y[idx])
    >>> tr.name, tr.gd_path, int(state.step), state.feature_updates, state.params.tolist()
    ('K=2', False, 3, 1, [0.0, 0.25, 0.5, 1.3125])
    """

    init: Callable
    step: Callable
    linearise: Callable
    model: Model
    loss: Loss
    schedule: Schedule
    gd_path: bool
    augment: Optional[Callable]
    name: str


def _float_dtype(tree):
    """The floating dtype of a parameter pytree (float32 if it has none)."""
    leaves = [a for a in jax.tree_util.tree_leaves(tree) if jnp.issubdtype(jnp.asarray(a).dtype, jnp.floating)]
    return jnp.result_type(*leaves) if leaves else jnp.float32


def _as_model(model) -> Model:
    """A :class:`~itlin.core.model.Model`, or a bare ``f(params, x)`` wrapped as one."""
    if isinstance(model, Model):
        return model
    if not callable(model):
        raise TypeError("model must be an itlin Model or a pure f(params, x) function.")
    return Model.from_apply(model)


def iterative_linearisation(model, optimizer: optax.GradientTransformation, schedule=1, *,
                            loss="cross_entropy", reduction: str = "mean", augment: Optional[Callable] = None,
                            reset_optimizer: bool = False, exact_gd: bool = True) -> Trainer:
    """Iterative linearised training with any optax optimiser (Algorithm 1).

    Args:
      model: an :class:`itlin.Model`, or a pure ``f(params, x)``.
      optimizer: an optax ``GradientTransformation`` (e.g. ``optax.sgd(1e-3)``).
      schedule: when to relinearise: a period ``K`` (integer >= 1 or ``"inf"``), a rule
        ``step -> bool`` (:class:`itlin.Every`, :class:`itlin.AtSteps`, any function) or an
        adaptive :class:`itlin.Schedule` (:func:`itlin.loss_drift`, :func:`itlin.kernel_drift`).
      loss: every loss of :func:`itlin.get_loss`: ``"cross_entropy"`` (softmax inside the loss,
        never linearised; outputs ``(N, C)``, ``C >= 2``, integer labels ``0..C-1`` or
        probabilities), ``"squared"`` (targets shaped like the outputs),
        ``"binary_cross_entropy"`` (sigmoid, one output per example, 0/1 or +-1 targets), or an
        :class:`itlin.Loss` of one's own.
      reduction: ``"mean"`` over the batch (the library's default everywhere) or ``"sum"``.
      augment: optional jittable ``augment(key, x) -> x`` applied to the batch when ``step``
        gets a ``key``.
      reset_optimizer: re-initialise the optimiser state at every relinearisation.
      exact_gd: with ``K = 1`` take the network's own gradient step (identical maths, one pass
        fewer); ``False`` runs ``K = 1`` through the linearised path (the tests use it to show
        the two agree).

    Returns:
      a :class:`Trainer`.

    >>> import jax, jax.numpy as jnp, optax
    >>> f = lambda p, x: jnp.tanh(x @ p)                   # one output per example
    >>> x, y = jnp.ones((4, 2)), jnp.zeros((4,))
    >>> tr = iterative_linearisation(f, optax.sgd(0.1), 2, loss="squared")
    >>> state = tr.init(jnp.ones(2))
    >>> for _ in range(4):
    ...     state, log = tr.step(state, x, y)
    >>> int(state.step), state.feature_updates              # relinearised after steps 2 and 4
    (4, 2)
    """
    model = _as_model(model)
    loss = get_loss(loss, reduction)
    if not (hasattr(optimizer, "init") and hasattr(optimizer, "update")):
        raise TypeError(f"optimizer must be an optax GradientTransformation, got {optimizer!r}.")
    period = period_of(schedule)
    sched = as_schedule(schedule)
    gd_path = bool(exact_gd) and period == 1

    def init(params, model_state=None, **schedule_values) -> TrainState:
        check_float_params("params", params, "trainer.init")
        model_state = {} if model_state is None else model_state
        zero = jnp.zeros((), jnp.int32)
        sched_state = sched.init(model.bind(model_state), params)
        if schedule_values:
            if sched.set is None:
                raise TypeError(f"trainer.init got {', '.join(sorted(schedule_values))}, but the schedule "
                                f"{sched.name!r} has no state to set; use itlin.periodic() for a period (and horizon) "
                                "given at init.")
            try:
                sched_state = sched.set(sched_state, **schedule_values)
            except TypeError as e:
                raise TypeError(f"trainer.init: {e}; the schedule {sched.name!r} takes "
                                f"{getattr(sched_state, '_fields', 'no')} at init.") from None
        return TrainState(zero, params, params, optimizer.init(params), model_state, zero, zero, sched_state)

    def true_loss_at(state, x, y, dtype):
        if sched.wants_true_loss is None:
            return jnp.asarray(jnp.nan, dtype=dtype)
        return jax.lax.cond(sched.wants_true_loss(state.step + 1),
                            lambda: loss(model.apply(state.params, x, state.model_state), y).astype(dtype),
                            lambda: jnp.asarray(jnp.nan, dtype=dtype))

    def step(state: TrainState, x, y, key=None, lin: Optional[Linearisation] = None):
        if augment is not None and key is not None:
            x = augment(key, x)
        dtype = _float_dtype(state.params)
        model_state = state.model_state
        if gd_path:
            def loss_fn(p):
                out, new_ms = model.train_apply(p, state.model_state, x)
                return loss(out, y), new_ms

            (value, model_state), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
            true_value = value
        elif lin is not None:  # full batch: the phase's stored linearisation
            value, g_out = jax.value_and_grad(loss)(lin(state.params), y)
            grads = lin.vjp(g_out)
            true_value = true_loss_at(state, x, y, dtype)
        else:
            f = model.bind(state.model_state)
            value, grads = jax.value_and_grad(lambda p: loss(linearised_apply(f, state.anchor, p, x), y))(state.params)
            true_value = true_loss_at(state, x, y, dtype)
        upd, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, upd)
        value, true_value = value.astype(dtype), true_value.astype(dtype)

        count = state.step + 1
        info = StepInfo(count, count - state.last, value, true_value, params, model.bind(model_state))
        relin, sched_state = sched.update(state.schedule, info)
        relin = jnp.asarray(relin, bool)
        anchor = tree_select(relin, params, state.anchor)
        if model.calibrate_fn is not None and not gd_path:
            model_state = jax.lax.cond(relin, lambda: model.calibrate(params, model_state, x), lambda: model_state)
        if reset_optimizer:
            opt_state = tree_select(relin, optimizer.init(params), opt_state)
        new = TrainState(count, params, anchor, opt_state, model_state, state.updates + relin.astype(jnp.int32),
                         jnp.where(relin, count, state.last).astype(jnp.int32), sched_state)
        return new, StepLog(value, relin)

    def linearise(state: TrainState, x) -> Linearisation:
        return linearise_at(model.bind(state.model_state), state.anchor, x)

    return Trainer(init, step, linearise, model, loss, sched, gd_path, augment, sched.name)


__all__ = ["StepLog", "TrainState", "Trainer", "iterative_linearisation"]
