"""itlin: iterative linearisation, damped Gauss-Newton and linearised networks in JAX.

The five-line use (a period ``K``: ``K = 1`` is gradient descent, ``K = "inf"`` trains the
network linearised at initialisation, anything between relinearises every ``K`` steps)::

    import itlin, optax
    trainer = itlin.iterative_linearisation(f, optax.sgd(1e-2), K)   # f(params, x) -> logits
    result = itlin.fit(trainer, trainer.init(params), x, y, steps=1000, batch_size=256)
    result.history.evals["train/accuracy_lin"], result.state.feature_updates

Also: :func:`linearise` (``f_lin`` with ``f``'s signature), :func:`linearise_at` (stored ``J v``
and ``J^T r``), :func:`ntk`, :func:`gauss_newton_step` / :func:`gauss_newton_fit` (damped
Gauss-Newton in kernel form), :func:`gradient_flow` (the closed-form flow of a linearised
model, Appendix B), :func:`sweep` (a grid of runs as one vmapped program sharded over every
device, across hosts after :func:`init_distributed`). Every loss is a mean over examples unless ``reduction="sum"`` is passed, and
time in the flow is ``learning_rate * steps`` on that loss.

Layers: this package's flat namespace is the core (jax, optax and numpy only). Research support
(:mod:`itlin.data`, :mod:`itlin.models`, :mod:`itlin.metrics`, :mod:`itlin.augment`; needs the
``research`` extra) and the book's machinery (:mod:`itlin.book`; the ``book`` extra) are
imported only when used.
"""

import importlib as _importlib

from .core._tree import num_params
from .core.flow import GradientFlow, flow_params, gradient_flow
from .core.gauss_newton import (ArbelDamping, Cholesky, ConstantDamping, Descent, DescentState, Eigh, Eigvalsh,
                                GaussNewtonDirection, GNInfo, GNResult, GNTrace, GradientDirection, IdentityHessian,
                                InverseSquaring, KernelForm, LossHessian, PrimalForm, Stop, gauss_newton_direction, gauss_newton_fit, gauss_newton_step, get_damping,
                                smallest_eigenvalue)
from .core.linearise import (Linearisation, jacobian, kernel_distance, kernel_eigh, linearise, linearise_at,
                             linearised_apply, ntk, ntk_eigh)
from .core.loop import FitResult, History, Status, batch_indices, device_loop, evaluate, fit, run
from .core.losses import Loss, accuracy, get_loss, rmse
from .core.model import Model
from .core.parallel import data_mesh, replicate, shard_batch
from .core.schedules import (AtSteps, Every, PeriodState, Schedule, StepInfo, as_schedule, kernel_drift, loss_drift,
                             parse_period, periodic)
from .core.sweep import grid_product, init_distributed, is_main_process, sweep, sweep_mesh
from .core.train import StepLog, Trainer, TrainState, iterative_linearisation

__version__ = "0.2.0"

_LAZY = ("augment", "book", "data", "metrics", "models")


def __getattr__(name):
    """``itlin.data``, ``itlin.models``, ... are imported on first use (they need more than the core)."""
    if name in _LAZY:
        return _importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'itlin' has no attribute {name!r}")


__all__ = [
    "ArbelDamping", "AtSteps", "Cholesky", "ConstantDamping", "Descent", "DescentState", "Eigh", "Eigvalsh", "Every",
    "FitResult", "GNInfo", "GNResult", "GNTrace", "GaussNewtonDirection", "GradientDirection", "GradientFlow", "History", "IdentityHessian", "InverseSquaring", "KernelForm",
    "Linearisation", "Loss", "LossHessian", "Model", "PeriodState", "PrimalForm", "Schedule", "Status", "StepInfo", "StepLog", "Stop",
    "TrainState", "Trainer", "accuracy", "as_schedule", "batch_indices", "data_mesh", "device_loop", "evaluate", "fit",
    "flow_params", "gauss_newton_direction", "gauss_newton_fit", "gauss_newton_step", "get_damping", "get_loss",
    "gradient_flow", "grid_product", "init_distributed", "is_main_process", "iterative_linearisation", "jacobian",
    "kernel_distance", "kernel_drift", "kernel_eigh", "linearise", "linearise_at", "linearised_apply", "loss_drift",
    "ntk", "ntk_eigh", "num_params", "parse_period", "periodic", "replicate", "rmse", "run", "shard_batch",
    "smallest_eigenvalue", "sweep", "sweep_mesh",
]
