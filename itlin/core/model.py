"""Networks as pure functions: the :class:`Model` the trainer takes.

A model is an ``init(key, x) -> (params, state)`` and a pure ``apply(params, x, state)`` in
inference mode. ``params`` are the trainable weights (any pytree); ``state`` holds
non-trainable collections such as batch-norm statistics (an empty dict for models without).
The core algorithms only ever see ``f(params, x)``: :meth:`Model.bind` closes over a state,
which is how batch-norm statistics stay frozen at the anchor while a model is linearised.

This module needs no neural-network library: :meth:`Model.from_flax` calls a Flax module's own
``init``/``apply``. The architectures of the papers are in :mod:`itlin.models`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional


@dataclass(frozen=True, eq=False)
class Model:
    """A network as pure functions (compared and hashed by identity, so it can be a static
    argument of a jitted function).

    >>> import jax.numpy as jnp
    >>> m = Model.from_apply(lambda p, x: x @ p, init=lambda key, x: jnp.zeros(x.shape[1]))
    >>> params, state = m.init(None, jnp.ones((1, 3)))
    >>> m.bind(state)(params + 1.0, jnp.ones((2, 3))).tolist()
    [3.0, 3.0]

    Attributes:
      name: short name used in records and plots.
      init_fn: ``init_fn(key, x) -> (params, state)``.
      apply_fn: ``apply_fn(params, state, x) -> outputs`` in inference mode (state frozen).
      train_apply_fn: ``(params, state, x) -> (outputs, new_state)`` in training mode (batch
        statistics from the batch, running averages updated), or ``None`` when the model has
        no such mode (then it equals ``apply_fn`` with the state unchanged). For a model with an
        empty state the two modes agree.
      calibrate_fn: ``(params, state, x) -> new_state``: statistics of ``params`` measured on
        ``x`` (used to refresh batch-norm statistics at a new anchor), or ``None``.
      ntk_fn: optional closed-form empirical NTK ``ntk_fn(params, x1, x2=None)`` with the
        layout of :func:`itlin.ntk` (cheaper than Jacobians; used by
        Gauss-Newton), or ``None``.
      meta: free-form description (architecture hyper-parameters), recorded with results.
    """

    name: str
    init_fn: Callable
    apply_fn: Callable
    train_apply_fn: Optional[Callable] = None
    calibrate_fn: Optional[Callable] = None
    ntk_fn: Optional[Callable] = None
    meta: dict = field(default_factory=dict)

    def init(self, key, x):
        """Initialise ``(params, state)`` for inputs shaped like ``x`` (a batch)."""
        return self.init_fn(key, x)

    def apply(self, params, x, state=None):
        """Outputs of the network in inference mode; ``state`` defaults to no state."""
        return self.apply_fn(params, {} if state is None else state, x)

    def bind(self, state=None) -> Callable:
        """A pure ``apply(params, x)`` with ``state`` frozen (the form the core algorithms take)."""
        frozen = {} if state is None else state

        def apply(params, x):
            return self.apply_fn(params, frozen, x)

        return apply

    def train_apply(self, params, state, x):
        """Training-mode outputs and updated state (batch statistics from this batch)."""
        if self.train_apply_fn is None:
            return self.apply_fn(params, state, x), state
        return self.train_apply_fn(params, state, x)

    def calibrate(self, params, state, x):
        """State measured at ``params`` on ``x``; unchanged for models without state."""
        if self.calibrate_fn is None:
            return state
        return self.calibrate_fn(params, state, x)

    @classmethod
    def from_apply(cls, apply: Callable, name: str = "custom", init: Optional[Callable] = None,
                   meta: Optional[dict] = None) -> "Model":
        """Wrap a pure ``apply(params, x)`` (no state). ``init(key, x) -> params`` is optional."""

        def init_fn(key, x):
            if init is None:
                raise ValueError(f"model {name!r} was built from a bare apply function and has no init; "
                                 "pass init=... to Model.from_apply or initialise the params yourself.")
            return init(key, x), {}

        return cls(name=name, init_fn=init_fn, apply_fn=lambda p, s, x: apply(p, x), meta=meta or {})

    @classmethod
    def from_flax(cls, module, name: str, calibration_module=None, meta: Optional[dict] = None) -> "Model":
        """Wrap a Flax linen module whose ``__call__(x, train: bool = False)`` returns outputs.

        Non-``params`` collections (e.g. ``batch_stats``) become the model state. For batch norm,
        pass ``calibration_module``: the same module with running-average momentum 0, whose
        training-mode pass therefore stores the batch's own statistics.
        """

        def init_fn(key, x):
            variables = module.init(key, x, train=False)
            variables = dict(variables)
            params = variables.pop("params")
            return params, variables

        def apply_fn(params, state, x):
            return module.apply({"params": params, **state}, x, train=False)

        def train_apply_fn(params, state, x):
            out, new_state = module.apply({"params": params, **state}, x, train=True,
                                          mutable=list(state.keys()))
            return out, dict(new_state)

        def calibrate(params, state, x):
            _, new_state = calibration_module.apply({"params": params, **state}, x, train=True,
                                                    mutable=list(state.keys()))
            return dict(new_state)

        calibrate_fn = calibrate if calibration_module is not None else None

        return cls(name=name, init_fn=init_fn, apply_fn=apply_fn, train_apply_fn=train_apply_fn,
                   calibrate_fn=calibrate_fn, meta=meta or {})


__all__ = ["Model"]
