"""Iterative linearised training (main paper Algorithm 1; Eq. 3-4 and, for any loss, Eq. 7-8).

The trainer takes steps of any optax optimiser on the network linearised at an anchor
``theta_s`` and moves the anchor to the current parameters whenever its schedule says so::

    theta_{t+1} = optimiser step on  L(f(theta_s, X) + J_s (theta_t - theta_s), Y)     (Eq. 3, 7)
    theta_s     = theta_{t+1}   when the schedule relinearises                       (Eq. 4, 8)

With ``K = 1`` this is plain (stochastic) gradient descent; with ``K = inf`` it trains the
linearised network at initialisation. The loss (softmax included) is applied to the linearised
outputs exactly: only the network is linearised. The optimiser's state carries across
relinearisations unless ``reset_optimizer=True``.

Two execution paths, chosen automatically:

* mini-batch (``batch_size`` given): every step evaluates the linearised model on its batch with
  one ``jax.jvp`` and differentiates through it; the anchor is an argument of the compiled loop,
  so relinearising costs nothing but a copy.
* full batch (``batch_size=None``): the linearisation on the whole training set is computed once
  per phase (``jax.linearize``) and reused for every step of the phase, so a step is one tangent
  pass and one transposed pass, with no forward pass of the network. The stored residuals are
  passed to the compiled step as arguments, never folded in as constants.

Steps run in chunks of at most ``chunk_size`` steps (one compiled loop each, or one compiled call
per step for convolutional networks on the CPU: see ``loop``); :func:`fit` strings them together,
evaluates the true network and the linearised model, and stops cleanly on a non-finite loss.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ._checks import check_finite_array, check_same_leading
from ._tree import tree_all_finite, tree_select, tree_sub
from .linearise import linearised_apply
from .losses import get_loss
from .models import Model
from .schedules import ScheduleState, StepInfo, get_schedule


class TrainState(NamedTuple):
    """Everything a run needs to continue (a pytree; save it to checkpoint).

    ``step``: steps done. ``params``: current parameters ``theta_t``. ``anchor``: the
    linearisation point ``theta_s``. ``opt_state``: the optimiser's state. ``model_state``:
    non-trainable state (batch-norm statistics) frozen at the anchor, ``{}`` if none.
    ``schedule``: the schedule's state, including its count of feature updates.
    """

    step: jax.Array
    params: Any
    anchor: Any
    opt_state: Any
    model_state: Any
    schedule: ScheduleState

    @property
    def feature_updates(self) -> int:
        """Relinearisations so far (Definition 1)."""
        return int(self.schedule.updates)


class StepLog(NamedTuple):
    """Per-step record: the loss of the model being trained on the step's batch (before the
    update) and whether the step ended with a relinearisation."""

    loss: jax.Array
    relinearised: jax.Array


def _float_dtype(tree):
    """The floating dtype of a parameter pytree (losses and logs are kept in it)."""
    leaves = [a for a in jax.tree_util.tree_leaves(tree) if jnp.issubdtype(jnp.asarray(a).dtype, jnp.floating)]
    return jnp.result_type(*leaves) if leaves else jnp.float32


def _has_primitive(jaxpr, name: str) -> bool:
    """Whether a jaxpr (or any jaxpr nested in it) uses the primitive ``name``."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == name:
            return True
        for v in eqn.params.values():
            for sub in (v if isinstance(v, (list, tuple)) else [v]):
                inner = getattr(sub, "jaxpr", None)
                if inner is not None and _has_primitive(getattr(inner, "jaxpr", inner), name):
                    return True
    return False


@jax.jit
def _trees_equal(a, b):
    leaves = jax.tree_util.tree_leaves(jax.tree_util.tree_map(lambda u, v: jnp.array_equal(u, v), a, b))
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


def _is_quiet() -> bool:
    return bool(os.environ.get("CI")) or os.environ.get("ITLIN_QUIET", "") not in ("", "0")


@dataclass(frozen=True, eq=False)
class IterativeLinearisation:
    """Iterative linearised training with any optax optimiser (Algorithm 1).

    Args:
      model: an :class:`itlin.models.Model`, or a pure ``apply(params, x)``.
      optimizer: an ``optax.GradientTransformation`` (e.g. ``optax.sgd(1e-3)``).
      schedule: a :class:`itlin.schedules.Schedule` or a period ``K`` (int >= 1 or ``math.inf``).
      loss: ``"cross_entropy"`` (softmax inside the loss, never linearised) or ``"squared"``.
      reduction: ``"mean"`` over the batch (default) or ``"sum"`` (the paper's Eq. 1-6 form).
      batch_size: mini-batch size, or ``None`` for full-batch training.
      augment: optional jittable ``augment(key, x) -> x`` applied to each mini-batch.
      reset_optimizer: re-initialise the optimiser state at every relinearisation.
      chunk_size: steps per compiled loop (a trade between dispatch overhead and memory).
      exact_gd: with ``K = 1`` take the network's own gradient step (identical maths, one pass
        fewer); ``False`` runs ``K = 1`` through the linearised path, which the tests use to
        show that the two agree.
      loop: ``"device"`` runs each chunk as one compiled loop, ``"host"`` as one compiled call
        per step, ``"auto"`` (default) chooses (see :meth:`uses_device_loop`).
    """

    model: Any
    optimizer: optax.GradientTransformation
    schedule: Any = 1
    loss: Any = "cross_entropy"
    reduction: str = "mean"
    batch_size: Optional[int] = None
    augment: Optional[Callable] = None
    reset_optimizer: bool = False
    chunk_size: int = 256
    exact_gd: bool = True
    loop: str = "auto"
    _fns: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self):
        model = self.model
        if not isinstance(model, Model):
            if not callable(model):
                raise TypeError("model must be an itlin Model or a pure apply(params, x) function.")
            model = Model.from_apply(model)
        object.__setattr__(self, "model", model)
        object.__setattr__(self, "loss", get_loss(self.loss, self.reduction))
        object.__setattr__(self, "schedule", get_schedule(self.schedule))
        if not (hasattr(self.optimizer, "init") and hasattr(self.optimizer, "update")):
            raise TypeError(f"optimizer must be an optax GradientTransformation, got {self.optimizer!r}.")
        if self.batch_size is not None:
            if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, (int, np.integer)) \
                    or self.batch_size < 1:
                raise ValueError(f"batch_size must be a positive integer or None (full batch), got {self.batch_size!r}.")
        if not isinstance(self.chunk_size, (int, np.integer)) or self.chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive integer, got {self.chunk_size!r}.")
        if self.augment is not None and self.batch_size is None:
            raise ValueError("augmentation needs mini-batches: set batch_size (full-batch training reuses "
                             "one linearisation of fixed inputs).")
        if self.loop not in ("auto", "device", "host"):
            raise ValueError(f"loop must be 'auto', 'device' or 'host', got {self.loop!r}.")
        self._fns["step"] = jax.jit(self._step_impl)
        self._fns["mb_step"] = jax.jit(self._mb_step)
        self._fns["mb_loop"] = jax.jit(self._mb_loop_impl)
        self._fns["fb_step"] = jax.jit(self._fb_step)
        self._fns["fb_loop"] = jax.jit(self._fb_loop_impl)
        self._fns["linearise"] = jax.jit(self._linearise_impl)
        self._fns["eval"] = jax.jit(self._eval_impl, static_argnames=("linearised",))

    # ------------------------------------------------------------------ state
    @property
    def gd_path(self) -> bool:
        """Whether steps are plain gradient steps of the network (``K = 1`` and ``exact_gd``)."""
        return self.exact_gd and self.schedule.is_gradient_descent

    def init(self, params, model_state=None) -> TrainState:
        """Start a run at ``params`` (also the first anchor), with fresh optimiser state."""
        model_state = {} if model_state is None else model_state
        sched = self.schedule.init(self.model.bind(model_state), params)
        return TrainState(step=jnp.zeros((), jnp.int32), params=params, anchor=params,
                          opt_state=self.optimizer.init(params), model_state=model_state,
                          schedule=sched)

    # ------------------------------------------------------------------ one step
    def _true_loss(self, params, model_state, x, y):
        return self.loss(self.model.apply(params, x, model_state), y)

    def _finish_step(self, state: TrainState, params, opt_state, model_state, loss, true_loss, x):
        step = state.step + 1
        info = StepInfo(step=step, lin_loss=loss, true_loss=true_loss, params=params,
                        apply_fn=self.model.bind(model_state))
        relin, sched = self.schedule.update(state.schedule, info)
        anchor = tree_select(relin, params, state.anchor)
        if self.model.calibrate_fn is not None and not self.gd_path:
            model_state = jax.lax.cond(relin, lambda: self.model.calibrate(params, model_state, x),
                                       lambda: model_state)
        if self.reset_optimizer:
            opt_state = tree_select(relin, self.optimizer.init(params), opt_state)
        new = TrainState(step, params, anchor, opt_state, model_state, sched)
        return new, StepLog(loss, relin)

    def _maybe_true_loss(self, state, x, y):
        dtype = _float_dtype(state.params)
        if not self.schedule.needs_true_loss:
            return jnp.asarray(jnp.nan, dtype=dtype)
        return jax.lax.cond(self.schedule.wants_true_loss(state.step + 1),
                            lambda: self._true_loss(state.params, state.model_state, x, y).astype(dtype),
                            lambda: jnp.asarray(jnp.nan, dtype=dtype))

    def _step_impl(self, state: TrainState, x, y, key=None):
        if self.augment is not None and key is not None:
            x = self.augment(key, x)
        if self.gd_path:
            def loss_fn(p):
                out, new_ms = self.model.train_apply(p, state.model_state, x)
                return self.loss(out, y), new_ms

            (loss, model_state), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
            true_loss = loss
        else:
            apply = self.model.bind(state.model_state)

            def loss_fn(p):
                return self.loss(linearised_apply(apply, state.anchor, p, x), y)

            loss, grads = jax.value_and_grad(loss_fn)(state.params)
            model_state = state.model_state
            true_loss = self._maybe_true_loss(state, x, y)
        updates, opt_state = self.optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        dtype = _float_dtype(state.params)
        return self._finish_step(state, params, opt_state, model_state, loss.astype(dtype), true_loss.astype(dtype), x)

    def step(self, state: TrainState, x, y, key=None):
        """One training step on the batch ``(x, y)``; returns ``(state, StepLog)``.

        ``key`` feeds the augmentation, if any. Jitted; works unchanged on a batch sharded over
        several devices (``jax.sharding``), since it is one SPMD program.
        """
        return self._fns["step"](state, x, y, key)

    # ------------------------------------------------------------------ loops
    def _empty_logs(self, params):
        dtype = _float_dtype(params)
        return (jnp.full((self.chunk_size,), jnp.nan, dtype), jnp.zeros((self.chunk_size,), bool))

    def _mb_step(self, state, X, Y, idx, i, aug_key):
        """Step ``i`` of a chunk of mini-batch steps; batch rows ``idx[i]`` of the training set."""
        b = idx[i]
        key = None if self.augment is None else jax.random.fold_in(aug_key, state.step)
        return self._step_impl(state, X[b], Y[b], key)

    def _linearise_impl(self, model_state, anchor, X):
        """``f(anchor, X)`` and ``delta -> J delta`` with stored residuals (a ``Partial`` pytree,
        so it crosses ``jit`` boundaries as an argument instead of being baked in as constants)."""
        return jax.linearize(lambda p: self.model.bind(model_state)(p, X), anchor)

    def _fb_step(self, state, X, Y, lin_out, lin_jvp):
        """One full-batch step; on the linearised path it reuses the phase's linearisation: one
        tangent pass and one transposed pass, no forward pass of the network."""
        if self.gd_path:
            return self._step_impl(state, X, Y)
        out = lin_out + lin_jvp(tree_sub(state.params, state.anchor))
        loss, g_out = jax.value_and_grad(self.loss)(out, Y)
        (grads,) = jax.linear_transpose(lin_jvp, state.anchor)(g_out)
        true_loss = self._maybe_true_loss(state, X, Y)
        updates, opt_state = self.optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        dtype = _float_dtype(state.params)
        return self._finish_step(state, params, opt_state, state.model_state, loss.astype(dtype),
                                 true_loss.astype(dtype), X)

    def _device_loop(self, step, state, n, stop_at_relin):
        """Up to ``n`` steps in one compiled while loop; stops after a non-finite loss (and after
        a relinearisation when ``stop_at_relin``)."""
        def cond(carry):
            i, st, losses, relins = carry
            prev = jnp.maximum(i - 1, 0)
            go = jnp.logical_or(i == 0, jnp.isfinite(losses[prev]))
            if stop_at_relin:
                go = jnp.logical_and(go, jnp.logical_or(i == 0, ~relins[prev]))
            return jnp.logical_and(i < n, go)

        def body(carry):
            i, st, losses, relins = carry
            st, log = step(st, i)
            return i + 1, st, losses.at[i].set(log.loss), relins.at[i].set(log.relinearised)

        losses, relins = self._empty_logs(state.params)
        i, state, losses, relins = jax.lax.while_loop(cond, body, (jnp.zeros((), jnp.int32), state, losses, relins))
        return state, i, losses, relins

    def _mb_loop_impl(self, state, X, Y, idx, n, aug_key):
        return self._device_loop(lambda st, i: self._mb_step(st, X, Y, idx, i, aug_key), state, n, False)

    def _fb_loop_impl(self, state, X, Y, n, lin_out, lin_jvp):
        return self._device_loop(lambda st, i: self._fb_step(st, X, Y, lin_out, lin_jvp), state, n,
                                 not self.gd_path)

    def uses_device_loop(self, state: TrainState, x) -> bool:
        """Whether chunks run as one compiled loop (``loop="device"``) or as one compiled call
        per step (``"host"``). ``"auto"`` picks the host loop for networks with convolutions on
        the CPU: XLA:CPU runs convolution gradients inside a compiled loop 15-40x slower than at
        the top level of a program, while a per-step call costs only dispatch. On accelerators
        it always picks the device loop."""
        if self.loop != "auto":
            return self.loop == "device"
        devices = getattr(x, "devices", None)
        platforms = {d.platform for d in devices()} if callable(devices) else {jax.default_backend()}
        if platforms != {"cpu"}:
            return True  # the slow path is XLA:CPU's; accelerators run compiled loops well
        if "uses_conv" not in self._fns:
            jaxpr = jax.make_jaxpr(lambda p: self.model.apply(p, x[:1], state.model_state))(state.params)
            self._fns["uses_conv"] = _has_primitive(jaxpr.jaxpr, "conv_general_dilated")
        return not self._fns["uses_conv"]

    def _phase_linearisation(self, state: TrainState, x):
        """The stored linearisation for the current phase, computed once per anchor.

        Reused only for the very same input array and an anchor and model state equal leaf for
        leaf to those it was computed at (one cheap comparison per chunk).
        """
        cached = self._fns.get("phase")
        if cached is not None:
            cx, canchor, cstate, lin = cached
            if cx is x and bool(_trees_equal((canchor, cstate), (state.anchor, state.model_state))):
                return lin
        self._fns.pop("phase", None)  # free the previous residuals first
        lin = self._fns["linearise"](state.model_state, state.anchor, x)
        self._fns["phase"] = (x, state.anchor, state.model_state, lin)
        return lin

    def run_chunk(self, state: TrainState, x, y, n: int, *, seed: int = 0):
        """Run at most ``min(n, chunk_size)`` steps.

        Full batch: the chunk also ends right after a relinearisation (the next chunk
        linearises at the new anchor). Any path: it ends early at a non-finite loss.
        Returns ``(state, logs)`` where ``logs`` is a :class:`StepLog` of numpy arrays for the
        steps taken. Mini-batches are drawn by :func:`batch_indices` from ``(seed, step)``, so a
        run's batches do not depend on how it is cut into chunks, on ``K`` or on restarts.
        """
        n = int(min(n, self.chunk_size))
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}.")
        device = self.uses_device_loop(state, x)
        if self.batch_size is None:
            lin = (None, None) if self.gd_path else self._phase_linearisation(state, x)
            stop_at_relin = not self.gd_path
            if device:
                state, done, losses, relins = self._fns["fb_loop"](state, x, y, jnp.int32(n), *lin)
                done = int(done)
                return state, StepLog(np.asarray(losses[:done]), np.asarray(relins[:done]))
            step = lambda st, i: self._fns["fb_step"](st, x, y, *lin)
        else:
            start = int(state.step)
            idx = np.zeros((self.chunk_size, self.batch_size), np.int32)
            idx[:n] = batch_indices(seed, start, n, x.shape[0], self.batch_size)
            idx = jnp.asarray(idx)
            aug_key = jax.random.PRNGKey(np.uint32(seed) ^ np.uint32(0x5EED))
            stop_at_relin = False
            if device:
                state, done, losses, relins = self._fns["mb_loop"](state, x, y, idx, jnp.int32(n), aug_key)
                done = int(done)
                return state, StepLog(np.asarray(losses[:done]), np.asarray(relins[:done]))
            step = lambda st, i: self._fns["mb_step"](st, x, y, idx, jnp.int32(i), aug_key)
        # One compiled call per step. Each step's loss is read one step late, so the host
        # dispatches step i+1 before waiting for step i: no pipeline bubble per step. A stop
        # (non-finite loss, or a relinearisation in full batch) returns the state right after
        # the step that caused it, as the device loop does; the one extra step already
        # dispatched is discarded.
        logs = []
        prev_state, prev_log = state, None
        for i in range(n):
            if prev_log is not None and stop_at_relin and bool(prev_log.relinearised):
                break  # the next phase needs a new linearisation: end the chunk here
            new_state, log = step(prev_state, i)
            if prev_log is not None and not math.isfinite(float(prev_log.loss)):
                break
            logs.append(log)
            prev_state, prev_log = new_state, log
        state = prev_state
        dtype = np.dtype(_float_dtype(state.params))
        losses = np.asarray([float(l.loss) for l in logs], dtype)
        relins = np.asarray([bool(l.relinearised) for l in logs], bool)
        return state, StepLog(losses, relins)

    def run(self, state: TrainState, x, y, steps: int, *, seed: int = 0):
        """Run ``steps`` steps (several compiled chunks); stops early at a non-finite loss.

        Returns ``(state, StepLog)`` with one entry per step taken.
        """
        losses, relins = [], []
        target = int(state.step) + int(steps)
        while int(state.step) < target:
            state, log = self.run_chunk(state, x, y, target - int(state.step), seed=seed)
            losses.append(log.loss)
            relins.append(log.relinearised)
            if log.loss.size and not np.isfinite(log.loss[-1]):
                break
        cat = (lambda a: np.concatenate(a) if a else np.zeros((0,)))
        return state, StepLog(cat(losses), cat(relins).astype(bool))

    # ------------------------------------------------------------------ evaluation
    def _eval_impl(self, params, anchor, model_state, xb, yb, mask, linearised=True):
        apply = self.model.bind(model_state)
        classify = self.loss.name == "cross_entropy"

        def one(batch):
            x, y, m = batch
            outs = {"": apply(params, x)}
            if linearised:
                outs["_lin"] = linearised_apply(apply, anchor, params, x)
            res = {}
            for tag, out in outs.items():
                res["loss" + tag] = jnp.sum(m * self.loss.per_example(out, y))
                if classify:
                    labels = y if y.ndim == out.ndim - 1 else jnp.argmax(y, axis=-1)
                    res["correct" + tag] = jnp.sum(m * (jnp.argmax(out, -1) == labels))
                else:
                    res["sqerr" + tag] = jnp.sum(m * jnp.sum(((out - y) ** 2).reshape(out.shape[0], -1), -1))
            return res

        sums = jax.lax.map(one, (xb, yb, mask))
        return jax.tree_util.tree_map(lambda a: jnp.sum(a, axis=0), sums)

    def evaluate(self, state: TrainState, x, y, *, batch_size: int = 500, linearised: Optional[bool] = None):
        """Metrics of the true network ``f(theta_t)`` and of the linearised model being trained.

        Returns a dict with ``loss`` and ``accuracy`` (cross-entropy) or ``rmse`` (squared), and
        the same keys with suffix ``_lin`` for the linearised model (Fig. 3 plots both). The
        loss is the mean per-example loss. On the gradient-descent path the two models
        coincide and the ``_lin`` entries repeat the true ones.
        """
        check_same_leading("x", x, "y", y)
        if linearised is None:
            linearised = not self.gd_path
        n = x.shape[0]
        bs = int(min(batch_size, n))
        nb = -(-n // bs)
        pad = nb * bs - n
        xp = jnp.concatenate([jnp.asarray(x), jnp.zeros((pad,) + x.shape[1:], x.dtype)]) if pad else jnp.asarray(x)
        yp = jnp.concatenate([jnp.asarray(y), jnp.zeros((pad,) + y.shape[1:], y.dtype)]) if pad else jnp.asarray(y)
        mask = (jnp.arange(nb * bs) < n).astype(jnp.float32)
        sums = self._fns["eval"](state.params, state.anchor, state.model_state,
                                 xp.reshape((nb, bs) + x.shape[1:]), yp.reshape((nb, bs) + y.shape[1:]),
                                 mask.reshape(nb, bs), linearised=linearised)
        sums = {k: float(v) for k, v in sums.items()}
        tags = ["", "_lin"] if linearised else [""]
        out = {}
        for tag in tags:
            out["loss" + tag] = sums["loss" + tag] / n
            if "correct" + tag in sums:
                out["accuracy" + tag] = sums["correct" + tag] / n
            else:
                out["rmse" + tag] = math.sqrt(sums["sqerr" + tag] / (n * max(1, int(np.prod(y.shape[1:])))))
        if not linearised:
            for k in list(out):
                out[k + "_lin"] = out[k]
        return out


# ---------------------------------------------------------------------- batches
def batch_indices(seed: int, start: int, n: int, num_examples: int, batch_size: int) -> np.ndarray:
    """Example indices of the mini-batches for steps ``start .. start+n-1`` (shape ``(n, B)``).

    Epoch ``e`` is a permutation of the data drawn from ``(seed, e)``; each epoch has
    ``num_examples // batch_size`` batches (the remainder is dropped). The batches of a step
    depend only on the seed and the step number.
    """
    if batch_size > num_examples:
        raise ValueError(f"batch_size {batch_size} is larger than the {num_examples} training examples; "
                         "lower batch_size or use batch_size=None (full batch).")
    per_epoch = num_examples // batch_size
    out = np.empty((n, batch_size), np.int32)
    perm_epoch, perm = -1, None
    for j in range(n):
        epoch, k = divmod(start + j, per_epoch)
        if epoch != perm_epoch:
            perm = np.random.default_rng([int(seed), int(epoch)]).permutation(num_examples)
            perm_epoch = epoch
        out[j] = perm[k * batch_size:(k + 1) * batch_size]
    return out


# ---------------------------------------------------------------------- fit
@dataclass
class History:
    """What a run recorded.

    ``evals``: lists keyed ``step``, ``feature_updates``, ``seconds`` and ``<set>/<metric>``
    (e.g. ``test/accuracy``, ``test/accuracy_lin``), one entry per evaluation. ``loss``: the
    training loss of the model being trained, one value per ``loss_every`` steps (the mean over
    those steps). ``relin_steps``: the steps after which the model was relinearised.
    ``status``: ``"running"``, ``"completed"`` or ``"diverged at step s"``.
    """

    evals: dict = field(default_factory=dict)
    loss: list = field(default_factory=list)
    loss_every: int = 1
    relin_steps: list = field(default_factory=list)
    status: str = "running"
    diverged_at: Optional[int] = None
    _pending: list = field(default_factory=list, repr=False)

    def add_eval(self, record: dict):
        """Append one evaluation (missing keys become NaN, new keys are back-filled with NaN)."""
        for k in set(self.evals) | set(record):
            self.evals.setdefault(k, [math.nan] * (len(self.evals.get("step", []))))
        for k in self.evals:
            self.evals[k].append(record.get(k, math.nan))

    def add_losses(self, losses: np.ndarray):
        """Append per-step losses; they are stored as means over blocks of ``loss_every`` steps."""
        self._pending.extend(np.asarray(losses, np.float64).tolist())
        while len(self._pending) >= self.loss_every:
            block, self._pending = self._pending[:self.loss_every], self._pending[self.loss_every:]
            self.loss.append(float(np.mean(block)))

    def arrays(self) -> dict:
        """The history as a dict of numpy arrays (for saving and plotting)."""
        out = {f"eval/{k}": np.asarray(v, np.float64) for k, v in self.evals.items()}
        out["loss"] = np.asarray(self.loss, np.float64)
        out["loss_pending"] = np.asarray(self._pending, np.float64)
        out["relin_steps"] = np.asarray(self.relin_steps, np.int64)
        return out

    def meta(self) -> dict:
        """The non-array part of the history (status, divergence step, loss_every)."""
        return {"status": self.status, "diverged_at": self.diverged_at, "loss_every": self.loss_every}

    @classmethod
    def from_arrays(cls, arrays: dict, meta: dict) -> "History":
        h = cls(loss_every=int(meta.get("loss_every", 1)), status=meta.get("status", "running"),
                diverged_at=meta.get("diverged_at"))
        h.evals = {k[5:]: list(map(float, v)) for k, v in arrays.items() if k.startswith("eval/")}
        h.loss = list(map(float, arrays.get("loss", [])))
        h._pending = list(map(float, arrays.get("loss_pending", [])))
        h.relin_steps = [int(s) for s in arrays.get("relin_steps", [])]
        return h

    def eval_array(self, key: str) -> np.ndarray:
        """One evaluated quantity (e.g. ``"test/accuracy"``) as a float array, one entry per evaluation."""
        return np.asarray(self.evals.get(key, []), np.float64)


@dataclass
class FitResult:
    state: TrainState
    history: History

    @property
    def status(self) -> str:
        return self.history.status


def fit(trainer: IterativeLinearisation, state: TrainState, x, y, steps: int, *,
        eval_sets: Optional[dict] = None, eval_every: Optional[int] = None, seed: int = 0,
        history: Optional[History] = None, callback: Optional[Callable] = None,
        progress: bool = True, desc: Optional[str] = None, loss_every: Optional[int] = None) -> FitResult:
    """Train for ``steps`` steps (in total, counting steps already in ``state``) with evaluations.

    Args:
      trainer: the :class:`IterativeLinearisation` to run.
      state: from ``trainer.init(params)`` or a checkpoint (then pass its ``history`` too).
      x, y: training data (the whole set; mini-batches are drawn from it).
      steps: total number of steps of the run.
      eval_sets: ``{"train": (x, y), "test": (x, y)}``; each is evaluated for the true network
        and the linearised model at step 0, every ``eval_every`` steps and at the end.
      eval_every: steps between evaluations (default: 20 evaluations per run).
      seed: seeds the mini-batch order and the augmentation.
      history: the history so far when resuming.
      callback: ``callback(state, history)`` after every compiled chunk (checkpointing).
      progress: show a tqdm bar (silent when ``CI`` or ``ITLIN_QUIET`` is set).
      loss_every: record the training loss averaged over this many steps (default: about
        2000 points per run).

    Returns:
      :class:`FitResult` with the final state and the :class:`History`. A non-finite loss stops
      the run with ``history.status == "diverged at step s"``, ``s`` the first step whose loss
      was not finite (non-finite parameters show up in the next step's loss; after the last
      step they are checked directly, giving ``s = steps``). The curves stop at step ``s - 1``.
      The state returned is the start of the chunk that diverged, or of the chunk before it if
      the very first loss of the divergent chunk was not finite: a state whose parameters gave
      a finite loss. ``s`` does not depend on how the run is cut into chunks, so a resumed run
      reports the same step.
    """
    steps = int(steps)
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}.")
    check_same_leading("x", x, "y", y)
    check_finite_array("training inputs x", x)
    eval_sets = eval_sets or {}
    for name, (ex, ey) in eval_sets.items():
        check_same_leading(f"{name} x", ex, f"{name} y", ey)
    eval_every = int(eval_every or max(1, steps // 20))
    if eval_every < 1:
        raise ValueError(f"eval_every must be >= 1, got {eval_every}.")
    if history is None:
        history = History(loss_every=int(loss_every or max(1, steps // 2000)))
    x, y = jnp.asarray(x), jnp.asarray(y)
    t0 = time.perf_counter() - (history.evals.get("seconds", [0.0]) or [0.0])[-1]

    def do_eval(st):
        rec = {"step": int(st.step), "feature_updates": st.feature_updates,
               "seconds": time.perf_counter() - t0}
        for name, (ex, ey) in eval_sets.items():
            for k, v in trainer.evaluate(st, ex, ey).items():
                rec[f"{name}/{k}"] = v
        history.add_eval(rec)

    done_steps = history.evals.get("step", [])
    if not done_steps or done_steps[-1] != int(state.step):
        if int(state.step) == 0 or (int(state.step) % eval_every == 0):
            do_eval(state)

    bar = None
    if progress and not _is_quiet():
        from tqdm.auto import tqdm

        bar = tqdm(total=steps, initial=int(state.step), desc=desc or trainer.schedule.describe(),
                   unit="step", leave=False, dynamic_ncols=True)
    previous = state  # start of the previous chunk: the last state known to give a finite loss
    try:
        while int(state.step) < steps:
            start = int(state.step)
            next_eval = (start // eval_every + 1) * eval_every
            n = min(steps, next_eval) - start
            new_state, log = trainer.run_chunk(state, x, y, n, seed=seed)
            finite = np.isfinite(log.loss)
            if not finite.all():
                bad = int(np.argmin(finite))
                if bad == 0:  # this chunk's starting parameters already give a non-finite loss
                    state = previous
                history.add_losses(log.loss[:bad])
                history.relin_steps.extend((start + 1 + np.flatnonzero(log.relinearised[:bad])).tolist())
                history.diverged_at = start + bad + 1
                history.status = f"diverged at step {history.diverged_at}"
                break
            at_end = int(new_state.step) == steps
            if at_end and not bool(tree_all_finite(new_state.params)):
                # the last step left non-finite parameters (no later loss will show it)
                history.add_losses(log.loss[:-1])
                history.diverged_at = steps
                history.status = f"diverged at step {steps}"
                break
            history.add_losses(log.loss)
            history.relin_steps.extend((start + 1 + np.flatnonzero(log.relinearised)).tolist())
            previous, state = state, new_state
            if bar is not None:
                bar.update(int(state.step) - start)
                bar.set_postfix(loss=f"{log.loss[-1]:.4g}", updates=state.feature_updates, refresh=False)
            if int(state.step) % eval_every == 0 or at_end:
                do_eval(state)
            if callback is not None:
                callback(state, history)
        else:
            history.status = "completed"
    finally:
        if bar is not None:
            bar.close()
    return FitResult(state, history)


__all__ = [
    "FitResult",
    "History",
    "IterativeLinearisation",
    "StepLog",
    "TrainState",
    "batch_indices",
    "fit",
]
