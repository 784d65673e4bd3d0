"""Synthetic data sets: the quintic, teacher-student regression (also as Arbel et al.'s code builds
it) and the procedural MNIST-1D."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from ._dataset import Dataset, _check_count, _classification_dataset
from ._files import _cached, cache_dir_fn

# --------------------------------------------------------------------------------------------
# quintic (main paper Appendix C, workshop Appendix D)
# --------------------------------------------------------------------------------------------

#: The input interval of :func:`quintic` (the paper does not state one).
QUINTIC_INTERVAL = (-3.5, 3.5)


def quintic_function(x):
    """``y = x^5/32 - x^3/2 + 2x - 1`` (main paper Appendix C)."""
    x = np.asarray(x, dtype=np.float64)
    return x ** 5 / 32.0 - x ** 3 / 2.0 + 2.0 * x - 1.0


def _interval(interval) -> tuple:
    """``(low, high)``: two finite real numbers with ``low < high`` whose quintic fits in float32;
    a one-line ValueError naming ``interval`` otherwise."""
    usage = "interval must be (low, high), two finite numbers with low < high"
    try:
        pair = tuple(interval)
    except TypeError:
        raise ValueError(f"{usage}, got {interval!r}.") from None
    if len(pair) != 2 or any(isinstance(v, (bool, str, bytes)) for v in pair):
        raise ValueError(f"{usage}, got {interval!r}.")
    try:
        lo, hi = (float(v) for v in pair)
    except (TypeError, ValueError):
        raise ValueError(f"{usage}, got {interval!r}.") from None
    if not (np.isfinite(lo) and np.isfinite(hi) and hi > lo):
        raise ValueError(f"{usage}, got {interval!r}.")
    with np.errstate(over="ignore", invalid="ignore"):
        top = np.float32(np.max(np.abs(quintic_function(np.asarray([lo, hi], np.float64)))))
    if not np.isfinite(top):
        raise ValueError(f"interval {interval!r} is too wide: the quintic overflows float32 there; keep |x| below "
                         "1e8 (the papers' outputs stay in [-4, 4]: |x| <= 3.626).")
    return lo, hi


def quintic(*, n_train: Optional[int] = None, n_test: Optional[int] = None, seed: int = 0,
            interval: Sequence[float] = QUINTIC_INTERVAL, cache_dir=None) -> Dataset:
    """The 1-D quintic regression task (main paper Appendix C; workshop version Appendix D).

    ``y = x^5/32 - x^3/2 + 2x - 1`` on ``n_train`` (default 20) evenly spaced training inputs and
    ``n_test`` (default 1000) evenly spaced test inputs, both including the interval's
    endpoints. Inputs ``(N, 1)``, targets ``(N, 1)``, no normalisation.

    The papers say only that the outputs stay in [-4, 4]. We use ``interval=[-3.5, 3.5]``: it
    contains all four stationary points of the quintic (x = +-1.265, where y = 0.619 / -2.619,
    and x = +-2.828, where y = -1) and its outputs span [-2.976, 0.976]. The widest symmetric
    interval with outputs inside [-4, 4] is [-3.626, 3.626] (y(-3.626) = -4). The data are a
    deterministic grid: ``seed`` is accepted for a uniform API and ignored. Not cached (it takes
    microseconds).
    """
    lo, hi = _interval(interval)
    n_tr = 20 if n_train is None else _check_count("n_train", n_train, 10 ** 9)
    n_te = 1000 if n_test is None else _check_count("n_test", n_test, 10 ** 9)
    x_tr = np.linspace(lo, hi, n_tr)
    x_te = np.linspace(lo, hi, n_te)
    y_all = quintic_function(np.linspace(lo, hi, 100001))
    meta = {"interval": (lo, hi), "function": "x**5/32 - x**3/2 + 2*x - 1", "spacing": "evenly spaced, endpoints included",
            "y_range": (float(y_all.min()), float(y_all.max())), "n_train": n_tr, "n_test": n_te}
    return Dataset(name="quintic",
                   x_train=x_tr[:, None].astype(np.float32), y_train=quintic_function(x_tr)[:, None].astype(np.float32),
                   x_test=x_te[:, None].astype(np.float32), y_test=quintic_function(x_te)[:, None].astype(np.float32),
                   task="regression", num_outputs=1, meta=meta)


# --------------------------------------------------------------------------------------------
# teacher-student (Arbel et al. Section 5.1)
# --------------------------------------------------------------------------------------------

def activation_numpy(name: str, beta: float = 1.0):
    """``gamma`` of Arbel et al. Eq. 2 in numpy: ``"relu"`` or ``"silu"`` (``x * sigmoid(beta x)``)."""
    if name == "relu":
        return lambda z: np.maximum(z, 0.0)
    if name == "silu":
        b = float(beta)
        return lambda z: z * (0.5 * (1.0 + np.tanh(0.5 * b * z)))
    raise ValueError(f"activation must be 'relu' or 'silu', got {name!r}.")


def teacher_outputs(teacher: dict, x) -> np.ndarray:
    """Outputs ``(N, 1)`` of a teacher network from ``meta['teacher']`` (Arbel et al. Eq. 10).

    ``f*(x) = scale * sum_i v*_i gamma(u*_i^T x)``.
    """
    u = np.asarray(teacher["u"], np.float64)
    v = np.asarray(teacher["v"], np.float64)
    gamma = activation_numpy(teacher["activation"], teacher.get("beta", 1.0))
    h = gamma(np.asarray(x, np.float64) @ u.T)
    return (float(teacher["scale"]) * (h @ v))[:, None]


_TEACHER_SCALINGS = ("mean_field", "ntk", "none")


def teacher_student(*, n_train: Optional[int] = None, n_test: Optional[int] = None, seed: int = 0,
                    dim: int = 10, teacher_width: int = 5, activation: str = "relu", beta: float = 1.0,
                    teacher_scaling: str = "mean_field", cache_dir=None) -> Dataset:
    """Synthetic teacher-student regression of Arbel et al. Section 5.1.

    Inputs ``x ~ N(0, I_dim)`` (``dim=10``); targets ``y = f*(x)`` from a one-hidden-layer
    teacher of the form of their Eq. 10, ``f*(x) = alpha * sum_{i<=M*} v*_i gamma(u*_i^T x)``
    with ``M* = teacher_width = 5`` units whose weights ``v*_i``, ``u*_i`` are drawn from a
    standard Gaussian, and ``gamma`` ReLU or SiLU(beta). ``n_train`` defaults to 500 and
    ``n_test`` to 10,000 (their N and test size).

    The paper leaves the teacher's output scale ``alpha(M*)`` unstated. ``teacher_scaling``:
    ``"mean_field"`` (default) ``alpha = 1/M*``, the normalisation of the student (Eq. 2);
    with it ReLU targets have ``E[y^2] = dim / (2 M*) = 1`` in Arbel's setting (averaged over
    teachers; one teacher's mean square ranges over roughly 0.15-4). ``"ntk"``: ``1/sqrt(M*)``; ``"none"``: 1.

    Determinism: ``seed`` fixes the teacher, the training inputs and the test inputs through
    three independent streams, so changing ``n_train`` keeps the teacher and the test set and
    gives nested training sets. The teacher (``u`` ``(M*, dim)``, ``v`` ``(M*,)``, ``scale``,
    ``activation``, ``beta``) is in ``meta['teacher']``; :func:`teacher_outputs` evaluates it and
    :func:`itlin.metrics.weighted_cosine_distance` compares a student's hidden weights with
    ``meta['teacher']['u']``. Generated in float64, stored as float32. Not cached (milliseconds).
    """
    n_tr = 500 if n_train is None else _check_count("n_train", n_train, 10 ** 9)
    n_te = 10000 if n_test is None else _check_count("n_test", n_test, 10 ** 9)
    dim = _check_count("dim", dim, 10 ** 9)
    teacher_width = _check_count("teacher_width", teacher_width, 10 ** 9)
    if teacher_scaling not in _TEACHER_SCALINGS:
        raise ValueError(f"teacher_scaling must be one of {_TEACHER_SCALINGS}, got {teacher_scaling!r}.")
    activation_numpy(activation, beta)  # validates the name
    scale = {"mean_field": 1.0 / teacher_width, "ntk": teacher_width ** -0.5, "none": 1.0}[teacher_scaling]
    teacher_rng, train_rng, test_rng = (np.random.default_rng([int(seed), s]) for s in (0, 1, 2))
    u = teacher_rng.standard_normal((teacher_width, dim))
    v = teacher_rng.standard_normal(teacher_width)
    teacher = {"u": u, "v": v, "scale": scale, "activation": activation, "beta": float(beta),
               "scaling": teacher_scaling}
    x_tr = train_rng.standard_normal((n_tr, dim))
    x_te = test_rng.standard_normal((n_te, dim))
    meta = {"dim": dim, "teacher_width": teacher_width, "teacher": teacher, "seed": seed,
            "n_train": n_tr, "n_test": n_te, "input_distribution": "N(0, I)"}
    return Dataset(name="teacher_student",
                   x_train=x_tr.astype(np.float32), y_train=teacher_outputs(teacher, x_tr).astype(np.float32),
                   x_test=x_te.astype(np.float32), y_test=teacher_outputs(teacher, x_te).astype(np.float32),
                   task="regression", num_outputs=1, meta=meta)


# --------------------------------------------------------------------------------------------
# teacher-student with hidden biases, as in Arbel et al.'s code (for book/arbel_*.md)
# --------------------------------------------------------------------------------------------

def arbel_teacher_outputs(teacher: dict, x) -> np.ndarray:
    """Outputs ``(N, 1)`` of a teacher with hidden biases (from :func:`arbel_teacher_student`).

    ``f*(x) = scale * sum_i v*_i gamma(u*_i^T x + b*_i)``, computed in float64.
    """
    u = np.asarray(teacher["u"], np.float64)
    b = np.asarray(teacher["b"], np.float64)
    v = np.asarray(teacher["v"], np.float64)
    gamma = activation_numpy(teacher["activation"], teacher.get("beta", 1.0))
    h = gamma(np.asarray(x, np.float64) @ u.T + b)
    return (float(teacher["scale"]) * (h @ v))[:, None]


def arbel_teacher_student(*, n_train: Optional[int] = None, n_test: Optional[int] = None, seed: int = 0,
                          dim: int = 10, teacher_width: int = 5, activation: str = "relu",
                          beta: float = 1.0) -> Dataset:
    """The teacher-student regression of Arbel et al. (Section 5.1) as their code builds it.

    Differs from :func:`teacher_student` in the teacher, which here has a hidden bias:
    ``f*(x) = (1/M*) sum_{i<=M*} v*_i gamma(u*_i^T x + b*_i)`` with every teacher parameter
    (``u*`` ``(M*, dim)``, ``b*`` and ``v*`` ``(M*,)``) drawn from ``N(0, 1)`` and the output divided
    by ``M* = teacher_width = 5``, as in their ``OneHiddenLayer`` network. Inputs ``x ~ N(0, I_dim)``
    (``dim = 10``); ``n_train`` defaults to 500 and ``n_test`` to 10,000.

    ``seed`` fixes the teacher, the test inputs and the training inputs through three
    independent streams (their code draws the test set before the training set; with separate
    streams the order does not matter). Training sets of different sizes with one seed are
    nested, as in their code, which truncates one pool of inputs. Inputs are stored as float32
    (the module's convention) and the targets are the teacher's float64 outputs *at the stored
    inputs*, rounded to float32. The teacher is in ``meta['teacher']`` (``u``, ``b``, ``v``,
    ``scale``, ``activation``, ``beta``); :func:`arbel_teacher_outputs` evaluates it.
    """
    n_tr = 500 if n_train is None else _check_count("n_train", n_train, 10 ** 9)
    n_te = 10000 if n_test is None else _check_count("n_test", n_test, 10 ** 9)
    dim = _check_count("dim", dim, 10 ** 9)
    teacher_width = _check_count("teacher_width", teacher_width, 10 ** 9)
    activation_numpy(activation, beta)  # validates the name
    teacher_rng, test_rng, train_rng = (np.random.default_rng([int(seed), 7, s]) for s in (0, 1, 2))
    teacher = {"u": teacher_rng.standard_normal((teacher_width, dim)),
               "b": teacher_rng.standard_normal(teacher_width),
               "v": teacher_rng.standard_normal(teacher_width),
               "scale": 1.0 / teacher_width, "activation": activation, "beta": float(beta)}
    x_te = test_rng.standard_normal((n_te, dim)).astype(np.float32)
    x_tr = train_rng.standard_normal((n_tr, dim)).astype(np.float32)
    meta = {"dim": dim, "teacher_width": teacher_width, "teacher": teacher, "seed": seed, "n_train": n_tr,
            "n_test": n_te, "input_distribution": "N(0, I)", "teacher_bias": True,
            "teacher_init": "all parameters N(0, 1), output / teacher_width"}
    return Dataset(name="arbel_teacher_student",
                   x_train=x_tr, y_train=arbel_teacher_outputs(teacher, x_tr).astype(np.float32),
                   x_test=x_te, y_test=arbel_teacher_outputs(teacher, x_te).astype(np.float32),
                   task="regression", num_outputs=1, meta=meta)


# --------------------------------------------------------------------------------------------
# MNIST-1D (procedural, via the mnist1d package)
# --------------------------------------------------------------------------------------------

def _generate_mnist1d(num_samples, train_split, generation_seed):
    import random

    from mnist1d.data import get_dataset_args, make_dataset

    args = get_dataset_args()
    args.num_samples = int(num_samples)
    args.train_split = float(train_split)
    args.seed = int(generation_seed)
    # make_dataset seeds numpy's and Python's global generators; leave them as we found them.
    np_state, py_state = np.random.get_state(), random.getstate()
    try:
        d = make_dataset(args)
    finally:
        np.random.set_state(np_state)
        random.setstate(py_state)
    return {"x_train": np.asarray(d["x"], np.float32), "y_train": np.asarray(d["y"], np.int32),
            "x_test": np.asarray(d["x_test"], np.float32), "y_test": np.asarray(d["y_test"], np.int32)}


def mnist1d(*, n_train: Optional[int] = None, n_test: Optional[int] = None, seed: int = 0, cache_dir=None,
            num_samples: int = 5000, train_split: float = 0.8, generation_seed: int = 42,
            normalize: str = "package") -> Dataset:
    """MNIST-1D (Greydanus), generated with ``mnist1d.data.make_dataset``: 10 classes, length 40.

    With the package's defaults (``num_samples=5000``, ``train_split=0.8``,
    ``generation_seed=42``) this is the standard 4000/1000 split. Inputs are ``(N, 40, 1)``.
    ``normalize="package"`` keeps the package's normalisation (the whole generated set shifted
    and scaled to zero mean, unit standard deviation); ``"standardize"`` re-standardises with
    the training split's statistics. ``seed`` picks balanced ``n_train``/``n_test`` subsets;
    the generated set itself depends only on ``generation_seed``. The generated arrays are
    cached (generation takes about a second); the global numpy/Python RNG states that
    ``make_dataset`` reseeds are restored.
    """
    if normalize not in ("package", "standardize"):
        raise ValueError(f"normalize must be 'package' or 'standardize' for mnist1d, got {normalize!r}.")
    if not 0.0 < float(train_split) < 1.0:
        raise ValueError(f"train_split must be in (0, 1), got {train_split!r}.")
    fname = f"mnist1d-v1-n{int(num_samples)}-split{float(train_split):g}-seed{int(generation_seed)}.npz"
    arrays = _cached(Path(cache_dir_fn(cache_dir)) / fname,
                     lambda: _generate_mnist1d(num_samples, train_split, generation_seed))
    x_tr, x_te = arrays["x_train"][..., None], arrays["x_test"][..., None]
    meta = {"length": int(x_tr.shape[1]), "generation_seed": int(generation_seed), "num_samples": int(num_samples),
            "train_split": float(train_split), "source": "mnist1d.data.make_dataset"}
    if normalize == "standardize":
        m, s = float(x_tr.mean()), float(x_tr.std())
        x_tr, x_te = (x_tr - m) / s, (x_te - m) / s
        meta.update(normalize="standardize", mean=[m], std=[s])
    else:
        meta.update(normalize="package (zero mean, unit std over all generated signals)")
    return _classification_dataset("mnist1d", x_tr, arrays["y_train"], x_te, arrays["y_test"], max_value=1.0,
                                   normalize=None, n_train=n_train, n_test=n_test, seed=seed,
                                   num_classes=10, meta=meta)
