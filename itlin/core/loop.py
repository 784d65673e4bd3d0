"""Drivers: string a trainer's steps into compiled loops, draw mini-batches, evaluate, keep a history.

The trainer (:mod:`itlin.core.train`) defines one pure step; everything here is plumbing on
top of it:

* :func:`run` advances a run by a number of steps (mini-batch or full batch) and returns the
  per-step log: chunks of steps as one compiled loop on accelerators, or one compiled call per
  step where that is faster (convolutions on the CPU, see :func:`device_loop`). Full batch,
  it linearises once per phase and reuses that linearisation for every step of the phase.
* :func:`evaluate` measures the network ``f(theta_t)`` and the linearised model being trained.
* :func:`fit` does both: a run of ``steps`` steps with evaluations every ``eval_every``, a
  :class:`History` (defined in :mod:`itlin.core.history`, re-exported here), a callback per
  chunk (checkpointing), and a clean stop at divergence.

A run diverges when its loss is not finite or, if ``blowup`` is given, exceeds ``blowup`` times
its first loss; it stops there, says at which step, and keeps the last good state.
"""

from __future__ import annotations

import functools
import math
import time
from functools import partial
from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from . import _memory
from ._checks import (check_finite_array, check_float_params, check_nonempty, check_positive, check_positive_int,
                      check_real_dtype, check_same_leading, check_seed, check_steps, output_shape)
from ._divergence import diverged
from ._tree import tree_all_finite
from .history import STATUSES, History, Status
from .linearise import linearised_apply
from .schedules import MAX_PERIOD
from .train import StepLog, Trainer, TrainState, _float_dtype

#: steps per compiled loop (a trade between dispatch overhead and the size of the step logs)
CHUNK = 256


# ---------------------------------------------------------------------------- batches
def batch_indices(seed: int, start: int, n: int, num_examples: int, batch_size: int) -> np.ndarray:
    """Example indices of the mini-batches for steps ``start .. start+n-1`` (shape ``(n, B)``).

    Epoch ``e`` is a permutation drawn from ``(seed, e)``; each epoch has
    ``num_examples // batch_size`` batches (the remainder is dropped). A step's batch depends
    only on the seed and the step number, not on how a run is cut into chunks or restarted.

    >>> batch_indices(0, 0, 2, 4, 2).shape
    (2, 2)
    >>> sorted(batch_indices(0, 0, 2, 4, 2).ravel().tolist())   # one epoch: every example once
    [0, 1, 2, 3]
    """
    check_seed("seed", seed)
    batch_size = check_positive_int("batch_size", batch_size)
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


def _aug_key(seed: int):
    return jax.random.PRNGKey(np.uint32(seed) ^ np.uint32(0x5EED))


# ---------------------------------------------------------------------------- one step, compiled
def _batch_step(trainer: Trainer, state, X, Y, idx, i, aug_key, lin):
    """Step ``i`` of a chunk: mini-batch rows ``idx[i]`` (``idx=None``: the full batch)."""
    if idx is None:
        return trainer.step(state, X, Y, None, lin)
    b = idx[i]
    key = None if trainer.augment is None else jax.random.fold_in(aug_key, state.step)
    return trainer.step(state, X[b], Y[b], key, lin)


_one_step = jax.jit(_batch_step, static_argnums=0)


@partial(jax.jit, static_argnums=0, static_argnames=("size", "stop_at_relin"))
def _compiled_chunk(trainer: Trainer, state, X, Y, idx, n, aug_key, lin, *, size: int, stop_at_relin: bool):
    """Up to ``n`` steps in one compiled while loop; stops after a non-finite loss, and after a
    relinearisation when ``stop_at_relin`` (the next phase needs a new stored linearisation)."""
    dtype = _float_dtype(state.params)

    def cond(carry):
        i, st, losses, relins = carry
        prev = jnp.maximum(i - 1, 0)
        go = jnp.logical_or(i == 0, jnp.isfinite(losses[prev]))
        if stop_at_relin:
            go = jnp.logical_and(go, jnp.logical_or(i == 0, ~relins[prev]))
        return jnp.logical_and(i < n, go)

    def body(carry):
        i, st, losses, relins = carry
        st, log = _batch_step(trainer, st, X, Y, idx, i, aug_key, lin)
        return i + 1, st, losses.at[i].set(log.loss), relins.at[i].set(log.relinearised)

    carry = (jnp.zeros((), jnp.int32), state, jnp.full((size,), jnp.nan, dtype), jnp.zeros((size,), bool))
    i, state, losses, relins = jax.lax.while_loop(cond, body, carry)
    return state, i, losses, relins


_linearise = jax.jit(lambda trainer, state, x: trainer.linearise(state, x), static_argnums=0)


def _has_primitive(jaxpr, name: str) -> bool:
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == name:
            return True
        for v in eqn.params.values():
            for sub in (v if isinstance(v, (list, tuple)) else [v]):
                inner = getattr(sub, "jaxpr", None)
                if inner is not None and _has_primitive(getattr(inner, "jaxpr", inner), name):
                    return True
    return False


def device_loop(trainer: Trainer, state: TrainState, x, loop: str = "auto") -> bool:
    """Whether chunks run as one compiled loop (``loop="device"``) or one compiled call per step
    (``"host"``). ``"auto"`` picks the host loop for networks with convolutions on the CPU
    (XLA:CPU runs convolution gradients inside a compiled loop 15-40x slower than at the top
    level of a program, while a per-step call costs only dispatch) and the device loop
    everywhere else.

    >>> import itlin, jax.numpy as jnp, optax
    >>> tr = itlin.iterative_linearisation(lambda p, x: x @ p, optax.sgd(0.1), loss="squared")
    >>> device_loop(tr, tr.init(jnp.zeros(2)), jnp.ones((3, 2)))
    True
    """
    if loop not in ("auto", "device", "host"):
        raise ValueError(f"loop must be 'auto', 'device' or 'host', got {loop!r}.")
    if loop != "auto":
        return loop == "device"
    devices = getattr(x, "devices", None)
    platforms = {d.platform for d in devices()} if callable(devices) else {jax.default_backend()}
    if platforms != {"cpu"}:
        return True
    spec = lambda t: jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(jnp.shape(a), jnp.result_type(a)), t)
    return not _uses_conv(trainer.model, spec(state.params), spec(state.model_state),
                          jax.ShapeDtypeStruct((1,) + tuple(x.shape[1:]), x.dtype))


@functools.lru_cache(maxsize=256)
def _uses_conv_cached(model, params_spec, state_spec, x_spec) -> bool:
    jaxpr = jax.make_jaxpr(lambda p, s, xx: model.apply(p, xx, s))(
        jax.tree_util.tree_unflatten(*params_spec), jax.tree_util.tree_unflatten(*state_spec), x_spec)
    return _has_primitive(jaxpr.jaxpr, "conv_general_dilated")


def _uses_conv(model, params_spec, state_spec, x_spec) -> bool:
    """Whether ``model`` convolves, traced once per model and shapes (a memo, like jit's own)."""
    flat = lambda t: (jax.tree_util.tree_structure(t), tuple(jax.tree_util.tree_leaves(t)))
    p_def, p_leaves = flat(params_spec)
    s_def, s_leaves = flat(state_spec)
    return _uses_conv_cached(model, (p_def, p_leaves), (s_def, s_leaves), x_spec)


# ---------------------------------------------------------------------------- chunks and runs
class _Runner:
    """The stateful part of a driver (local to one :func:`run` or :func:`fit` call): the
    phase's stored linearisation and the loop choice. Never stored on a trainer."""

    def __init__(self, trainer: Trainer, x, y, *, batch_size, seed, loop, chunk_size, batches=None):
        self.trainer, self.x, self.y = trainer, x, y
        self.batch_size, self.seed, self.chunk_size = batch_size, int(seed), int(chunk_size)
        self.batches = batches
        self.loop = loop
        self.device = None
        self.lin, self.lin_state = None, None

    def _phase(self, state):
        """The stored linearisation of the current phase: computed once per anchor (and model
        state), reused while both are equal leaf for leaf to those it was computed at."""
        if self.lin is None or not bool(_same((state.anchor, state.model_state), self.lin_state)):
            self.lin = None  # free the previous residuals first
            self.lin = _linearise(self.trainer, state, self.x)
            self.lin_state = (state.anchor, state.model_state)
        return self.lin

    def chunk(self, state: TrainState, n: int):
        """At most ``min(n, chunk_size)`` steps; a full-batch chunk also ends right after a
        relinearisation, and any chunk at a non-finite loss. Returns ``(state, StepLog)``."""
        n = min(check_positive_int("n", n), self.chunk_size)
        tr = self.trainer
        if self.device is None:
            self.device = device_loop(tr, state, self.x, self.loop)
        full = self.batch_size is None
        lin = None if (not full or tr.gd_path) else self._phase(state)
        stop_at_relin = full and not tr.gd_path
        idx = None
        if not full:
            idx = np.zeros((self.chunk_size, self.batch_size), np.int32)
            start = int(state.step)
            if self.batches is not None:
                idx[:n] = self.batches[start:start + n]
            else:
                idx[:n] = batch_indices(self.seed, start, n, self.x.shape[0], self.batch_size)
            idx = jnp.asarray(idx)
        aug_key = _aug_key(self.seed)
        if self.device:
            state, done, losses, relins = _compiled_chunk(tr, state, self.x, self.y, idx, jnp.int32(n), aug_key, lin,
                                                          size=self.chunk_size, stop_at_relin=stop_at_relin)
            done = int(done)
            return state, StepLog(np.asarray(losses[:done]), np.asarray(relins[:done]))
        # One compiled call per step, each loss read one step late, so the host dispatches
        # step i+1 before waiting for step i. A stop (non-finite loss, or a relinearisation in
        # full batch) returns the state right after the step that caused it, as the device loop
        # does; the one extra step already dispatched is discarded.
        logs, prev_state, prev_log = [], state, None
        for i in range(n):
            if prev_log is not None and stop_at_relin and bool(prev_log.relinearised):
                break
            new_state, log = _one_step(tr, prev_state, self.x, self.y, idx, jnp.int32(i), aug_key, lin)
            if prev_log is not None and not math.isfinite(float(prev_log.loss)):
                break
            logs.append(log)
            prev_state, prev_log = new_state, log
        dtype = np.dtype(_float_dtype(prev_state.params))
        return prev_state, StepLog(np.asarray([float(l.loss) for l in logs], dtype),
                                   np.asarray([bool(l.relinearised) for l in logs], bool))


@jax.jit
def _same(a, b):
    leaves = jax.tree_util.tree_leaves(jax.tree_util.tree_map(lambda u, v: jnp.array_equal(u, v), a, b))
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


def _check_examples(trainer: Trainer, state: TrainState, x, y, what: str):
    """``x`` and ``y`` of one data set: examples, finite values, targets the loss can take for
    the model's outputs (label range, shapes). Cheap and abstract: no computation of the model."""
    check_nonempty(f"{what} x", x)
    check_nonempty(f"{what} y", y)
    check_same_leading(f"{what} x", x, f"{what} y", y)
    check_float_params("parameters", state.params, what)
    check_real_dtype("inputs x", x, what)
    check_real_dtype("targets y", y, what)
    check_finite_array(f"{what} inputs x", x)
    check_finite_array(f"{what} targets y", y)
    out_shape = _output_shape(trainer.model, state.params, state.model_state, x, f"{what} x")
    try:
        trainer.loss.check_targets(out_shape, y)
    except ValueError as e:
        raise ValueError(f"{what} set: {e}") from None


@functools.lru_cache(maxsize=256)
def _output_shape_cached(model, params_spec, state_spec, x_spec, what):
    params = jax.tree_util.tree_unflatten(*params_spec)
    state = jax.tree_util.tree_unflatten(*state_spec)
    return output_shape(lambda ps, xx: model.apply(ps[0], xx, ps[1]), (params, state), x_spec, what)


def _output_shape(model, params, model_state, x, what):
    """The model's output shape on ``x`` (abstract), traced once per model and shapes."""
    spec = lambda t: jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(jnp.shape(a), jnp.result_type(a)), t)
    flat = lambda t: (jax.tree_util.tree_structure(t), tuple(jax.tree_util.tree_leaves(t)))
    try:
        key = (flat(spec(params)), flat(spec(model_state)), jax.ShapeDtypeStruct(x.shape, x.dtype))
        hash(key)
    except TypeError:  # an unhashable leaf: no memo
        return output_shape(model.bind(model_state), params, x, what)
    return _output_shape_cached(model, key[0], key[1], key[2], what)


def _check_batches(batches, n_examples, batch_size, needed):
    """A given batch order as an int32 array ``(steps, B)`` of example indices."""
    try:
        arr = np.asarray(batches if hasattr(batches, "shape") else list(batches))
    except (TypeError, ValueError):
        raise TypeError("batches must be an integer array (steps, batch_size) of example indices, or an iterable of "
                        "equal-length index rows.") from None
    if arr.ndim != 2 or arr.dtype.kind not in "iu" or arr.shape[1] == 0:
        raise ValueError(f"batches must be an integer array (steps, batch_size) of example indices, got "
                         f"{'dtype ' + str(arr.dtype) + ' and ' if arr.dtype.kind not in 'iu' else ''}shape "
                         f"{arr.shape}.")
    if batch_size is not None and arr.shape[1] != batch_size:
        raise ValueError(f"batches hold {arr.shape[1]} examples per step but batch_size={batch_size}; drop batch_size "
                         "(it is taken from batches) or make them agree.")
    if arr.size and (arr.min() < 0 or arr.max() >= n_examples):
        raise ValueError(f"batches must index the {n_examples} training examples (0..{n_examples - 1}), got "
                         f"{int(arr.min()) if arr.min() < 0 else int(arr.max())}.")
    if arr.shape[0] < needed:
        raise ValueError(f"batches has {arr.shape[0]} rows but the run needs one per step up to step {needed}; give "
                         "row t for step t + 1 (counting from the run's first step).")
    return arr.astype(np.int32), int(arr.shape[1])


def _check_countable(last_step: int, what: str):
    """The step counter is int32: a run may not go past ``MAX_PERIOD`` (it would wrap and never end)."""
    if last_step > MAX_PERIOD:
        raise ValueError(f"{what} = {last_step} is more steps than the int32 step counter can count ({MAX_PERIOD}); "
                         "train for fewer steps.")


def _prepare(trainer: Trainer, state: TrainState, x, y, *, batch_size, seed, chunk_size, batches, last_step):
    """Every check of :func:`run` and :func:`fit` before any work; returns ``(x, y, batch_size,
    batches)`` with arrays converted."""
    if not isinstance(trainer, Trainer):
        raise TypeError(f"trainer must come from itlin.iterative_linearisation, got {type(trainer).__name__}.")
    check_seed("seed", seed)
    check_positive_int("chunk_size", chunk_size)
    try:
        x, y = jnp.asarray(x), jnp.asarray(y)
    except TypeError as e:
        raise TypeError(f"x and y must be arrays: {str(e).splitlines()[0]}") from None
    _check_examples(trainer, state, x, y, "training")
    if batches is not None:
        batches, batch_size = _check_batches(batches, x.shape[0], batch_size, last_step)
    if batch_size is not None:
        check_positive_int("batch_size", batch_size, none_means="full batch")
        if batch_size > x.shape[0]:
            raise ValueError(f"batch_size={batch_size} is more than the {x.shape[0]} training examples; lower it or "
                             "use batch_size=None (full batch).")
    elif trainer.augment is not None:
        raise ValueError("augmentation needs mini-batches: set batch_size (full-batch training reuses one "
                         "linearisation of fixed inputs).")
    return x, y, batch_size, batches


def run(trainer: Trainer, state: TrainState, x, y, steps: int, *, batch_size: Optional[int] = None, seed: int = 0,
        loop: str = "auto", chunk_size: int = CHUNK, batches=None):
    """Advance ``state`` by ``steps`` steps (an integer >= 0); stops early at a non-finite loss.

    Mini-batches of ``batch_size`` are drawn by :func:`batch_indices` from ``(seed, step)``,
    or taken from ``batches``, a given batch order: an integer array ``(T, B)`` (or an iterable
    of index rows) whose row ``t`` holds the example indices of step ``t + 1`` of the run
    (``T`` at least the last step reached; ``B`` is then the batch size). ``batch_size=None``
    and no ``batches`` is full batch. Returns ``(state, StepLog)`` with one entry per step taken.

    >>> import itlin, jax.numpy as jnp, optax
    >>> tr = itlin.iterative_linearisation(lambda p, x: x @ p, optax.sgd(0.1), 5, loss="squared")
    >>> state, log = run(tr, tr.init(jnp.zeros(2)), jnp.eye(2), jnp.ones(2), 12)
    >>> int(state.step), state.feature_updates, log.loss.shape
    (12, 2, (12,))
    >>> order = [[0], [1], [1]]                           # my own batch order: one example per step
    >>> state, log = run(tr, tr.init(jnp.zeros(2)), jnp.eye(2), jnp.ones(2), 3, batches=order)
    >>> [round(v, 6) for v in state.params.tolist()]     # 0.1 * 1; 0.1 * 1 + 0.1 * (1 - 0.1)
    [0.1, 0.19]
    """
    steps = check_steps("steps", steps, allow_zero=True)
    target = int(state.step) + steps
    _check_countable(target, f"state.step + steps ({int(state.step)} + {steps})")
    x, y, batch_size, batches = _prepare(trainer, state, x, y, batch_size=batch_size, seed=seed,
                                         chunk_size=chunk_size, batches=batches, last_step=target)
    r = _Runner(trainer, x, y, batch_size=batch_size, seed=seed, loop=loop, chunk_size=chunk_size, batches=batches)
    losses, relins = [], []
    while int(state.step) < target:
        state, log = r.chunk(state, target - int(state.step))
        losses.append(log.loss)
        relins.append(log.relinearised)
        if log.loss.size and not np.isfinite(log.loss[-1]):
            break
    cat = (lambda a: np.concatenate(a) if a else np.zeros((0,)))
    return state, StepLog(cat(losses), cat(relins).astype(bool))


# ---------------------------------------------------------------------------- evaluation
@partial(jax.jit, static_argnums=0, static_argnames=("linearised",))
def _eval_sums(trainer: Trainer, params, anchor, model_state, xb, yb, mask, *, linearised: bool):
    f = trainer.model.bind(model_state)
    loss = trainer.loss
    classify = loss.classifies

    def one(batch):
        x, y, m = batch
        outs = {"": f(params, x)}
        if linearised:
            outs["_lin"] = linearised_apply(f, anchor, params, x)
        res = {}
        for tag, out in outs.items():
            res["loss" + tag] = jnp.sum(m * loss.per_example(out, y))
            if classify and loss.name == "binary_cross_entropy":  # one output: its sign
                res["correct" + tag] = jnp.sum(m * ((out.reshape(-1) > 0) == (y.reshape(-1) > 0)))
            elif classify:
                labels = y if y.ndim == out.ndim - 1 else jnp.argmax(y, axis=-1)
                res["correct" + tag] = jnp.sum(m * (jnp.argmax(out, -1) == labels))
            else:
                res["sqerr" + tag] = jnp.sum(m * jnp.sum(((out - y) ** 2).reshape(out.shape[0], -1), -1))
        return res

    sums = jax.lax.map(one, (xb, yb, mask))
    return jax.tree_util.tree_map(lambda a: jnp.sum(a, axis=0), sums)


def evaluate(trainer: Trainer, state: TrainState, x, y, *, batch_size: int = 500,
             linearised: Optional[bool] = None) -> dict:
    """Metrics of the network ``f(theta_t)`` and of the linearised model being trained.

    ``loss`` (mean per-example loss) and ``accuracy`` (cross-entropy) or ``rmse`` (squared),
    and the same keys with suffix ``_lin`` for the linearised model. On the gradient-descent
    path the two coincide and the ``_lin`` entries repeat the network's.

    >>> import itlin, jax.numpy as jnp, optax
    >>> tr = itlin.iterative_linearisation(lambda p, x: x @ p, optax.sgd(0.1), loss="squared")
    >>> evaluate(tr, tr.init(jnp.zeros(2)), jnp.eye(2), jnp.ones(2))
    {'loss': 0.5, 'rmse': 1.0, 'loss_lin': 0.5, 'rmse_lin': 1.0}
    """
    batch_size = check_positive_int("batch_size", batch_size)
    x, y = jnp.asarray(x), jnp.asarray(y)
    _check_examples(trainer, state, x, y, "evaluation")
    return _evaluate(trainer, state, x, y, batch_size=batch_size, linearised=linearised)


def _evaluate(trainer: Trainer, state: TrainState, x, y, *, batch_size: int = 500,
              linearised: Optional[bool] = None) -> dict:
    """:func:`evaluate` on inputs already checked (``fit`` checks its evaluation sets once)."""
    if linearised is None:
        linearised = not trainer.gd_path
    n = x.shape[0]
    bs = int(min(batch_size, n))
    nb = -(-n // bs)
    pad = nb * bs - n
    xp = jnp.concatenate([jnp.asarray(x), jnp.zeros((pad,) + x.shape[1:], x.dtype)]) if pad else jnp.asarray(x)
    yp = jnp.concatenate([jnp.asarray(y), jnp.zeros((pad,) + y.shape[1:], y.dtype)]) if pad else jnp.asarray(y)
    mask = (jnp.arange(nb * bs) < n).astype(jnp.float32)
    sums = _eval_sums(trainer, state.params, state.anchor, state.model_state, xp.reshape((nb, bs) + x.shape[1:]),
                      yp.reshape((nb, bs) + y.shape[1:]), mask.reshape(nb, bs), linearised=bool(linearised))
    sums = {k: float(v) for k, v in sums.items()}
    out = {}
    for tag in (["", "_lin"] if linearised else [""]):
        out["loss" + tag] = sums["loss" + tag] / n
        if "correct" + tag in sums:
            out["accuracy" + tag] = sums["correct" + tag] / n
        else:
            out["rmse" + tag] = math.sqrt(sums["sqerr" + tag] / (n * max(1, int(np.prod(y.shape[1:])))))
    if not linearised:
        for k in list(out):
            out[k + "_lin"] = out[k]
    return out


# ---------------------------------------------------------------------------- fit
#: bytes a number kept in a History's lists takes: an 8-byte list slot and a 24-byte Python float
_HISTORY_NUMBER = 32


def _check_history_memory(steps: int, loss_every: int, eval_every: int, eval_sets: int) -> None:
    """What :func:`fit`'s History will add over ``steps`` steps (a training loss per ``loss_every``
    steps, an evaluation of ``3 + 4 * eval_sets`` numbers every ``eval_every`` steps) against the
    machine's memory."""
    steps = max(steps, 0)
    losses, evals = steps // loss_every, steps // eval_every + 2
    numbers = losses + evals * (3 + 4 * eval_sets)
    _memory.check(f"fit's History ({losses:,} training losses at loss_every={loss_every:,} and {evals:,} evaluations "
                  f"at eval_every={eval_every:,})", numbers * _HISTORY_NUMBER,
                  lambda have: "keep fewer points: raise loss_every and eval_every (by default about 2000 losses and "
                               "20 evaluations per run), or train in segments (fit again from the returned state)")


class FitResult(NamedTuple):
    """The final state and the :class:`History` of :func:`fit`.

    >>> import itlin, jax.numpy as jnp, optax
    >>> tr = itlin.iterative_linearisation(lambda p, x: x @ p, optax.sgd(0.5), 1, loss="squared")
    >>> res = fit(tr, tr.init(jnp.zeros(2)), jnp.eye(2), jnp.ones(2), 4)
    >>> str(res.status), int(res.state.step), res.state.feature_updates, len(res.history.loss)
    ('completed', 4, 4, 4)
    """

    state: TrainState
    history: History

    @property
    def status(self) -> str:
        """``"completed"`` or ``"diverged"`` (then ``history.diverged_at`` is the step)."""
        return self.history.status


def fit(trainer: Trainer, state: TrainState, x, y, steps: int, *, batch_size: Optional[int] = None,
        eval_sets: Optional[dict] = None, eval_every: Optional[int] = None, seed: int = 0,
        history: Optional[History] = None, callback: Optional[Callable] = None,
        progress: Optional[Callable] = None, loss_every: Optional[int] = None, blowup: Optional[float] = None,
        loop: str = "auto", chunk_size: int = CHUNK, batches=None) -> FitResult:
    """Train for ``steps`` steps in total (counting steps already in ``state``), with evaluations.

    Args:
      trainer, state: from :func:`itlin.iterative_linearisation` and ``trainer.init`` (or a
        checkpoint; then pass its ``history`` too).
      x, y: the training set (mini-batches are drawn from it).
      steps: total steps of the run (at most ``MAX_PERIOD``, ``2**31 - 1``: the step counter is int32).
      batch_size: mini-batch size; ``None`` for full batch.
      batches: a given batch order instead of the one drawn from ``seed``: an integer array
        ``(T, B)`` (or an iterable of index rows), row ``t`` the example indices of step
        ``t + 1``, ``T >= steps`` (see :func:`run`).
      eval_sets: ``{"train": (x, y), "test": (x, y)}``, each evaluated (network and linearised
        model) at step 0, every ``eval_every`` steps and at the end.
      eval_every: steps between evaluations (default: 20 per run).
      seed: seeds the mini-batch order and the augmentation.
      history: the history so far, when resuming.
      callback: ``callback(state, history)`` after every chunk (checkpointing).
      progress: ``progress(step, steps, loss, feature_updates)`` after every chunk.
      loss_every: keep the training loss averaged over this many steps (default: about 2000
        points per run).
      blowup: also count as divergence a training loss above ``blowup`` times the run's first
        loss (``None``: only non-finite losses).
      loop, chunk_size: see :func:`device_loop` and ``itlin.core.loop.CHUNK``.

    The History's size is checked before any step: its losses and evaluations (32 bytes a number)
    must fit in the machine's memory, or the call is refused with a one-line ValueError naming
    ``loss_every`` and ``eval_every``; ``ITLIN_MEMORY_LIMIT`` (bytes, e.g. ``8e9`` or ``8G``;
    ``inf`` for no check) overrides the limit.

    Returns:
      :class:`FitResult`. A divergence at step ``s`` (the first step whose loss was not finite,
      or blew up) stops the run with ``history.status == "diverged"`` and
      ``history.diverged_at == s``; the curves
      stop at step ``s - 1`` and the state returned is one whose parameters gave a good loss.
      ``s`` does not depend on how the run is cut into chunks, so a resumed run reports the
      same step.

    >>> import itlin, jax.numpy as jnp, optax
    >>> tr = itlin.iterative_linearisation(lambda p, x: x @ p, optax.sgd(0.5), "inf", loss="squared")
    >>> data = (jnp.eye(2), jnp.ones(2))
    >>> res = fit(tr, tr.init(jnp.zeros(2)), *data, 40, eval_every=20, eval_sets={"train": data})
    >>> str(res.status), res.history.evals["step"], res.history.evals["train/rmse_lin"][-1] < 1e-3
    ('completed', [0, 20, 40], True)
    """
    steps = check_steps("steps", steps, allow_zero=True)
    _check_countable(steps, "steps")
    x, y, batch_size, batches = _prepare(trainer, state, x, y, batch_size=batch_size, seed=seed,
                                         chunk_size=chunk_size, batches=batches, last_step=steps)
    eval_sets = dict(eval_sets or {})
    for name, pair in eval_sets.items():
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise TypeError(f"eval_sets[{name!r}] must be a pair (x, y), got {type(pair).__name__}.")
        ex, ey = jnp.asarray(pair[0]), jnp.asarray(pair[1])
        _check_examples(trainer, state, ex, ey, f"eval_sets[{name!r}]")
        eval_sets[name] = (ex, ey)
    eval_every = max(1, steps // 20) if eval_every is None else \
        check_positive_int("eval_every", eval_every, none_means="20 evaluations per run")
    if blowup is not None:
        check_positive("blowup", blowup)
        if not float(blowup) > 1:
            raise ValueError(f"blowup must be a factor > 1 (or None), got {blowup!r}.")
    if loss_every is not None:
        check_positive_int("loss_every", loss_every, none_means="about 2000 points per run")
    if history is None:
        history = History(loss_every=int(loss_every or max(1, steps // 2000)))
    _check_history_memory(steps - int(state.step), history.loss_every, eval_every, len(eval_sets))
    t0 = time.perf_counter() - (history.evals.get("seconds", [0.0]) or [0.0])[-1]
    r = _Runner(trainer, x, y, batch_size=batch_size, seed=seed, loop=loop, chunk_size=chunk_size, batches=batches)

    def do_eval(st):
        rec = {"step": int(st.step), "feature_updates": st.feature_updates, "seconds": time.perf_counter() - t0}
        for name, (ex, ey) in eval_sets.items():
            for k, v in _evaluate(trainer, st, ex, ey).items():
                rec[f"{name}/{k}"] = v
        history.add_eval(rec)

    done_steps = history.evals.get("step", [])
    if not done_steps or done_steps[-1] != int(state.step):
        if int(state.step) == 0 or int(state.step) % eval_every == 0:
            do_eval(state)

    first = history.loss[0] if history.loss else (history.pending[0] if history.pending else None)
    previous = state  # start of the previous chunk: the last state known to give a good loss
    while int(state.step) < steps:
        start = int(state.step)
        n = min(steps, (start // eval_every + 1) * eval_every) - start
        new_state, log = r.chunk(state, n)
        if first is None and log.loss.size:
            first = float(log.loss[0])
        factor = float(blowup) if blowup is not None and first is not None and math.isfinite(first) else None
        good = ~diverged(log.loss, first, factor, floor=np.finfo(np.float32).tiny)
        if not good.all():
            bad = int(np.argmin(good))
            if bad == 0:  # this chunk's starting parameters already give a bad loss
                state = previous
            history.add_losses(log.loss[:bad])
            history.relin_steps.extend((start + 1 + np.flatnonzero(log.relinearised[:bad])).tolist())
            history.mark_diverged(start + bad + 1)
            break
        at_end = int(new_state.step) == steps
        if at_end and not bool(tree_all_finite(new_state.params)):
            history.add_losses(log.loss[:-1])  # the last step left non-finite parameters
            history.mark_diverged(steps)
            break
        history.add_losses(log.loss)
        history.relin_steps.extend((start + 1 + np.flatnonzero(log.relinearised)).tolist())
        previous, state = state, new_state
        if progress is not None:
            progress(int(state.step), steps, float(log.loss[-1]), state.feature_updates)
        if int(state.step) % eval_every == 0 or at_end:
            do_eval(state)
        if callback is not None:
            callback(state, history)
    else:
        history.mark_completed()
    return FitResult(state, history)


__all__ = ["CHUNK", "STATUSES", "FitResult", "History", "Status", "batch_indices", "device_loop", "evaluate", "fit", "run"]
