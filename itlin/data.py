"""Datasets as numpy arrays plus metadata, deterministic given a seed and cached on disk.

Every loader returns a :class:`Dataset`: float32 inputs (NHWC for images, ``(N, length,
channels)`` for 1-D signals, ``(N, d)`` for vectors), int32 labels for classification and float32
targets shaped ``(N, outputs)`` for regression. :func:`load` dispatches on a name from
:data:`DATASETS`.

Seeds. ``seed`` picks the training and test subsets (``n_train``/``n_test``) of datasets read
from files, and generates the data of synthetic ones (``teacher_student``). Subsets are
class-balanced (:func:`balanced_indices`) and nested: with one seed, the subset of size ``n`` is
contained in the subset of size ``n + 1``, so a data-scaling curve (main paper Fig. 5) adds
examples rather than redrawing them.

Normalisation of images (``normalize=``): ``"standardize"`` (default) scales pixels to [0, 1]
and then standardises each channel with the mean and standard deviation of all pixels of the
*full* official training split (so every subset of one dataset sees the same transformation);
``"unit"`` only scales to [0, 1]; ``"none"`` keeps raw pixel values as float32. The statistics
used are in ``meta["mean"]`` and ``meta["std"]``.

Files. Generated or parsed arrays are cached under :func:`cache_dir` (``$ITLIN_CACHE``, else the
platform's user cache, e.g. ``~/.cache/itlin``). Files written there are first written under a
temporary name and then renamed, so an interrupted or failed load never leaves a half-written
file behind. Downloads are verified against the checksum published by the dataset's authors
(through ``pooch``) before they are renamed into place. Files you already have are found in
``data_dir=`` or ``$ITLIN_DATA`` (and, for Fashion-MNIST, the Debian ``dataset-fashion-mnist``
location ``/usr/share/datasets/fashion-mnist``).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import pickle
import shutil
import struct
import tarfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from . import _io
from .core._checks import check_positive_int, check_seed

# --------------------------------------------------------------------------------------------
# the Dataset container
# --------------------------------------------------------------------------------------------

TASKS = ("classification", "regression")

# meta entries holding one value per training / test example; subset() keeps them in step
_PER_EXAMPLE_META = {"labels_train": "train", "labels_test": "test"}


@dataclass(frozen=True, eq=False)
class Dataset:
    """A train/test split as numpy arrays, with its description.

    Attributes:
      name: dataset name (as in :data:`DATASETS`).
      x_train, x_test: float32 inputs; images NHWC, 1-D signals ``(N, length, channels)``.
      y_train, y_test: int32 labels ``(N,)`` for classification; float32 targets
        ``(N, num_outputs)`` for regression.
      task: ``"classification"`` or ``"regression"``.
      num_outputs: number of network outputs the task needs (classes, or target dimension).
      meta: free-form description: sizes, normalisation, the interval of the quintic, the
        teacher's weights, ... Entries ``labels_train``/``labels_test`` (class labels of a
        regression dataset built from a classification one) follow :meth:`subset`.
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    task: str
    num_outputs: int
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {self.task!r}.")
        for split in ("train", "test"):
            x, y = getattr(self, f"x_{split}"), getattr(self, f"y_{split}")
            if len(x) != len(y):
                raise ValueError(f"x_{split} has {len(x)} examples but y_{split} has {len(y)}; they must match.")
            if self.task == "classification" and y.ndim != 1:
                raise ValueError(f"classification labels must be 1-D integers, y_{split} has shape {y.shape}.")
            if self.task == "regression" and (y.ndim != 2 or y.shape[1] != self.num_outputs):
                raise ValueError(f"regression targets must be shaped (N, {self.num_outputs}), "
                                 f"y_{split} has shape {y.shape}.")

    @property
    def n_train(self) -> int:
        return int(len(self.x_train))

    @property
    def n_test(self) -> int:
        return int(len(self.x_test))

    @property
    def input_shape(self) -> tuple:
        """Shape of one input (without the batch axis)."""
        return tuple(self.x_train.shape[1:])

    def labels(self, split: str = "train") -> Optional[np.ndarray]:
        """Class labels of a split: ``y`` for classification, ``meta['labels_<split>']`` otherwise."""
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}.")
        if self.task == "classification":
            return getattr(self, f"y_{split}")
        return self.meta.get(f"labels_{split}")

    def subset(self, n_train: Optional[int] = None, n_test: Optional[int] = None, seed: int = 0) -> "Dataset":
        """Class-balanced subsets of the training and/or test split (``None`` keeps a split whole).

        Datasets with class labels (classification, or ``meta['labels_*']``) get balanced, nested
        subsets (:func:`balanced_indices`); others get a seeded random subset. The chosen rows,
        as indices into the loader's full split (composed over repeated subsets), are recorded in
        ``meta['train_index']``/``meta['test_index']``. ``load(name, n_train=n, seed=s)`` equals
        ``load(name).subset(n, seed=s)``.
        """
        check_seed("seed", seed)
        meta = dict(self.meta)
        arrays = {}
        for split, n, stream in (("train", n_train, 0), ("test", n_test, 1)):
            if n is None:
                continue
            labels = self.labels(split)
            total = getattr(self, f"n_{split}")
            if labels is not None:
                idx = balanced_indices(labels, n, seed=(seed, stream))
            else:
                idx = random_indices(total, n, seed=(seed, stream))
            arrays[f"x_{split}"] = getattr(self, f"x_{split}")[idx]
            arrays[f"y_{split}"] = getattr(self, f"y_{split}")[idx]
            for key, s in _PER_EXAMPLE_META.items():
                if s == split and key in meta:
                    meta[key] = np.asarray(meta[key])[idx]
            prev = meta.get(f"{split}_index")
            meta[f"{split}_index"] = idx if prev is None else np.asarray(prev)[idx]
            meta[f"n_{split}"] = int(len(idx))
        meta["subset_seed"] = seed
        return replace(self, meta=meta, **arrays)

    def __repr__(self):
        return (f"Dataset({self.name!r}, task={self.task!r}, train={self.x_train.shape}, "
                f"test={self.x_test.shape}, num_outputs={self.num_outputs})")


# --------------------------------------------------------------------------------------------
# subsets
# --------------------------------------------------------------------------------------------

def _rng(seed) -> np.random.Generator:
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, (tuple, list)):
        return np.random.default_rng([int(s) for s in seed])
    return np.random.default_rng(int(seed))


def _check_count(name, n, total):
    n = check_positive_int(name, n)
    if n > total:
        raise ValueError(f"{name}={n} is larger than the {total} examples available; "
                         f"ask for at most {total} (or None for all of them).")
    return int(n)


def random_indices(total: int, n: int, seed=0) -> np.ndarray:
    """``n`` distinct indices out of ``range(total)``, sorted; nested in ``n`` for one seed."""
    n = _check_count("n", n, total)
    return np.sort(_rng(seed).permutation(total)[:n])


def balanced_indices(labels, n: int, seed=0) -> np.ndarray:
    """Indices of a class-balanced subset of size ``n``, sorted (for the data-scaling figure).

    Every class gets ``n // C`` or ``n // C + 1`` examples (which classes get the extra one is
    drawn from ``seed``). A class with fewer examples than its share gives all it has and the
    others make up the difference, as evenly as possible, so any ``n`` up to ``len(labels)``
    works. Examples within a class are drawn at random. For one seed the subsets are nested:
    the subset of size ``n`` is contained in the subset of size ``n + 1``.
    """
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(f"labels must be 1-D, got shape {labels.shape}.")
    n = _check_count("n", n, len(labels))
    rng = _rng(seed)
    classes, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
    c = len(classes)
    position = np.empty(c, dtype=np.int64)
    position[rng.permutation(c)] = np.arange(c)
    # One example is taken from each class in turn (in a seeded class order), skipping classes
    # that have run out; the first n picks of this fixed sequence are the subset.
    order_keys = np.concatenate([np.arange(k) * c + position[j] for j, k in enumerate(counts)])
    owner = np.repeat(np.arange(c), counts)
    chosen = owner[np.argsort(order_keys, kind="stable")[:n]]
    per_class = np.bincount(chosen, minlength=c)
    picks = []
    for j in range(c):
        members = np.flatnonzero(inverse == j)
        picks.append(members[rng.permutation(len(members))[:per_class[j]]])
    return np.sort(np.concatenate(picks))


# --------------------------------------------------------------------------------------------
# cache and data directories
# --------------------------------------------------------------------------------------------

SYSTEM_DATA_DIRS = (Path("/usr/share/datasets"),)


def cache_dir(path=None) -> Path:
    """The cache directory: ``path`` if given, else ``$ITLIN_CACHE``, else the user cache.

    The user cache follows platform conventions (``pooch.os_cache("itlin")``: ``~/.cache/itlin``
    on Linux, ``~/Library/Caches/itlin`` on macOS). The directory is created if needed; one that
    cannot be written raises an ``OSError`` naming ``ITLIN_CACHE``.
    """
    if path is None:
        env = os.environ.get("ITLIN_CACHE")
        if env:
            path = env
        else:
            import pooch

            path = pooch.os_cache("itlin")
    return _io.ensure_writable(path, "pass cache_dir=... or set ITLIN_CACHE to a writable folder "
                                     "(itlin caches generated and parsed datasets there)")


# the public function is named cache_dir; loaders take an argument of the same name
cache_dir_fn = cache_dir


def _user_data_dirs(data_dir) -> list:
    """Folders with user-supplied files: ``data_dir`` if given, else ``$ITLIN_DATA`` if set."""
    if data_dir is not None:
        return [Path(data_dir).expanduser()]
    env = os.environ.get("ITLIN_DATA")
    return [Path(env).expanduser()] if env else []


def _save_npz(path: Path, arrays: dict):
    """Write a cache entry atomically (temporary file, fsync, rename)."""
    _io.save_npz(path, arrays, checksum=False)


def _load_npz(path: Path) -> Optional[dict]:
    """Arrays of a cached ``.npz``, or ``None`` if absent or unreadable (then it is rebuilt)."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except Exception:  # a corrupt cache entry is rebuilt, never trusted
        return None


def _cached(path: Path, build: Callable[[], dict]) -> dict:
    arrays = _load_npz(path)
    if arrays is None:
        arrays = build()
        _save_npz(path, arrays)
    return arrays


def _md5(path) -> str:
    return _io.file_digest(path, "md5")


class DatasetUnavailableError(FileNotFoundError):
    """A dataset's files are neither on disk nor downloadable; the message says what to fetch."""


class ChecksumError(ValueError):
    """A downloaded or user-supplied file does not have the published checksum."""


def _copy_downloader(url, output_file, pooch_obj=None):
    """pooch downloader for ``file://`` URLs (a local mirror); used by the tests too."""
    from urllib.parse import unquote, urlparse

    src = Path(unquote(urlparse(url).path))
    if not src.is_file():
        raise FileNotFoundError(f"no file at {src}")
    shutil.copyfile(src, output_file)


def _fetch(url: str, fname: str, md5: Optional[str], folder: Path, *, what: str, manual_hint: str) -> Path:
    """Download ``url`` into ``folder/fname`` with checksum verification (pooch).

    pooch downloads to a temporary file in ``folder``, checks its md5 and only then renames it;
    on a mismatch or any failure nothing is left under ``fname``.
    """
    import pooch

    if os.environ.get("ITLIN_QUIET"):
        pooch.get_logger().setLevel("WARNING")
    known = None if md5 is None else f"md5:{md5}"
    downloader = _copy_downloader if url.startswith("file://") else None
    try:
        return Path(pooch.retrieve(url, known_hash=known, fname=fname, path=folder,
                                   downloader=downloader, progressbar=False))
    except ValueError as err:
        if "hash" in str(err).lower():
            raise ChecksumError(
                f"the downloaded {fname} from {url} does not have the published md5 {md5} ({err}). "
                f"Nothing was kept. Try again later, or fetch the file yourself and check it with "
                f"`md5sum {fname}`; {manual_hint}"
            ) from err
        raise
    except Exception as err:  # no network, server error, missing mirror file, ...
        raise DatasetUnavailableError(
            f"could not download {what} ({fname}) from {url}: {type(err).__name__}: {err}. "
            f"Fetch {fname} yourself from {url} (md5 {md5}) and put it at {folder / fname}; {manual_hint}"
        ) from err


# --------------------------------------------------------------------------------------------
# normalisation
# --------------------------------------------------------------------------------------------

NORMALIZATIONS = ("standardize", "unit", "none")


def _image_normalizer(x_train_raw: np.ndarray, max_value: float, normalize: str):
    """Returns ``(fn, meta)``: ``fn(raw) -> float32`` following ``normalize`` (module docstring)."""
    if normalize not in NORMALIZATIONS:
        raise ValueError(f"normalize must be one of {NORMALIZATIONS}, got {normalize!r}.")
    channels = x_train_raw.shape[-1]
    if normalize == "none":
        return (lambda raw: raw.astype(np.float32)), {"normalize": "none"}
    if normalize == "unit":
        return (lambda raw: (raw.astype(np.float32) / np.float32(max_value))), {
            "normalize": "unit", "scale": float(max_value)}
    flat = x_train_raw.reshape(-1, channels)
    if flat.dtype == np.uint8:  # exact statistics from per-channel histograms
        values = np.arange(256, dtype=np.float64) / max_value
        hist = np.stack([np.bincount(flat[:, c], minlength=256) for c in range(channels)]).astype(np.float64)
        total = hist.sum(1)
        mean = hist @ values / total
        var = hist @ (values * values) / total - mean * mean
    else:
        mean = np.zeros(channels)
        sq = np.zeros(channels)
        step = 1 << 22  # chunks keep float64 temporaries small
        for i in range(0, len(flat), step):
            block = flat[i:i + step].astype(np.float64) / max_value
            mean += block.sum(0)
            sq += (block * block).sum(0)
        mean /= len(flat)
        var = sq / len(flat) - mean * mean
    std = np.sqrt(np.maximum(var, 0.0))
    std = np.where(std > 0, std, 1.0)
    scale = (1.0 / (max_value * std)).astype(np.float32)
    shift = (-mean / std).astype(np.float32)

    def fn(raw):
        out = np.asarray(raw).astype(np.float32)  # (raw / max_value - mean) / std, in place
        out *= scale
        out += shift
        return out

    return fn, {"normalize": "standardize", "scale": float(max_value), "mean": mean.tolist(), "std": std.tolist()}


def _classification_dataset(name, x_train_raw, y_train, x_test_raw, y_test, *, max_value, normalize,
                            n_train, n_test, seed, num_classes, meta):
    """Normalise (statistics of the full training split), then take balanced subsets."""
    if normalize is None:  # already normalised by the caller (meta says how)
        norm, norm_meta = (lambda raw: np.asarray(raw, np.float32)), {}
    else:
        norm, norm_meta = _image_normalizer(x_train_raw, max_value, normalize)
    meta = {**meta, **norm_meta, "n_train_full": int(len(y_train)), "n_test_full": int(len(y_test))}
    idx_tr = None if n_train is None else balanced_indices(y_train, n_train, seed=(seed, 0))
    idx_te = None if n_test is None else balanced_indices(y_test, n_test, seed=(seed, 1))
    if idx_tr is not None:
        x_train_raw, y_train = x_train_raw[idx_tr], y_train[idx_tr]
        meta["train_index"] = idx_tr
    if idx_te is not None:
        x_test_raw, y_test = x_test_raw[idx_te], y_test[idx_te]
        meta["test_index"] = idx_te
    meta.update(n_train=int(len(y_train)), n_test=int(len(y_test)), subset_seed=seed)
    return Dataset(name=name, x_train=norm(x_train_raw), y_train=np.asarray(y_train, np.int32),
                   x_test=norm(x_test_raw), y_test=np.asarray(y_test, np.int32),
                   task="classification", num_outputs=num_classes, meta=meta)


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


# --------------------------------------------------------------------------------------------
# scikit-learn digits
# --------------------------------------------------------------------------------------------

def digits(*, n_train: Optional[int] = None, n_test: Optional[int] = None, seed: int = 0, cache_dir=None,
           test_per_class: int = 30, split_seed: int = 0, normalize: str = "standardize") -> Dataset:
    """scikit-learn's bundled 8x8 digits (1797 images, pixel values 0-16), as ``(N, 8, 8, 1)``.

    Split: ``test_per_class`` (30) images of each digit, drawn with ``split_seed`` (0), form a
    balanced test set of 300; the other 1497 images are the training set. ``seed`` only picks
    ``n_train``/``n_test`` subsets. ``normalize`` as in the module docstring (the "unit" scale
    is 16). Bundled with scikit-learn, so nothing is downloaded; the arrays are cached to skip
    importing scikit-learn on later loads.
    """
    def build():
        from sklearn.datasets import load_digits

        d = load_digits()
        return {"images": np.asarray(d.images, np.uint8)[..., None], "labels": np.asarray(d.target, np.int32)}

    a = _cached(cache_dir_fn(cache_dir) / "digits-v1.npz", build)
    images, labels = a["images"], a["labels"]
    counts = np.bincount(labels, minlength=10)
    if test_per_class < 1 or test_per_class >= counts.min():
        raise ValueError(f"test_per_class must be between 1 and {counts.min() - 1}, got {test_per_class}.")
    rng = np.random.default_rng(split_seed)
    test_idx = np.sort(np.concatenate([rng.permutation(np.flatnonzero(labels == c))[:test_per_class]
                                       for c in range(10)]))
    train_mask = np.ones(len(labels), bool)
    train_mask[test_idx] = False
    meta = {"source": "sklearn.datasets.load_digits", "split": f"{test_per_class} test images per class, split_seed={split_seed}",
            "split_seed": split_seed}
    return _classification_dataset("digits", images[train_mask], labels[train_mask], images[test_idx], labels[test_idx],
                                   max_value=16.0, normalize=normalize, n_train=n_train, n_test=n_test, seed=seed,
                                   num_classes=10, meta=meta)


# --------------------------------------------------------------------------------------------
# IDX files (MNIST / Fashion-MNIST format)
# --------------------------------------------------------------------------------------------

_IDX_DTYPES = {0x08: np.dtype(np.uint8), 0x09: np.dtype(np.int8), 0x0B: np.dtype(">i2"),
               0x0C: np.dtype(">i4"), 0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}


def _read_bytes(path) -> bytes:
    path = Path(path)
    with open(path, "rb") as fh:
        raw = fh.read()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, gzip.BadGzipFile) as err:
            raise ValueError(f"{path} looks gzip-compressed but cannot be decompressed ({err}); "
                             "the file is damaged: fetch it again.") from err
    return raw


def parse_idx(raw: bytes, source: str = "<bytes>") -> np.ndarray:
    """Parse the bytes of an IDX file (LeCun's MNIST format, also Fashion-MNIST's).

    Layout: two zero bytes, a type code (0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32,
    0x0D float32, 0x0E float64), the number of dimensions, each dimension as a big-endian
    uint32, then the data big-endian in row-major order. Raises ``ValueError`` naming the
    problem for a malformed file (bad magic number, unknown type, truncated or over-long data).
    """
    if len(raw) < 4:
        raise ValueError(f"{source} is not an IDX file: {len(raw)} bytes is shorter than the 4-byte header.")
    zero, code, ndim = raw[:2], raw[2], raw[3]
    if zero != b"\x00\x00":
        raise ValueError(f"{source} is not an IDX file: its magic number starts with {zero.hex()} instead of 0000 "
                         "(is it an HTML error page, or a file in another format?).")
    if code not in _IDX_DTYPES:
        raise ValueError(f"{source}: unknown IDX data type code 0x{code:02x}; expected one of "
                         f"{', '.join(f'0x{c:02x}' for c in _IDX_DTYPES)}.")
    if ndim == 0:
        raise ValueError(f"{source}: IDX header declares 0 dimensions.")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{source}: truncated IDX header ({len(raw)} bytes, {header} needed for {ndim} dimensions).")
    dims = struct.unpack(f">{ndim}I", raw[4:header])
    dtype = _IDX_DTYPES[code]
    expected = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    got = len(raw) - header
    if got != expected:
        kind = "truncated" if got < expected else "has trailing bytes"
        raise ValueError(f"{source}: IDX data {kind}: header says {dims} of {dtype.name} = {expected} bytes, "
                         f"file has {got}. Fetch the file again.")
    arr = np.frombuffer(raw, dtype=dtype, offset=header).reshape(dims)
    return arr.astype(dtype.newbyteorder("="))


def read_idx(path) -> np.ndarray:
    """Read an IDX file, gzip-compressed (``.gz``, detected from its content) or not."""
    return parse_idx(_read_bytes(path), source=str(path))


def write_idx(path, array, compress: Optional[bool] = None):
    """Write ``array`` as an IDX file (gzip-compressed if ``compress`` or the name ends in .gz).

    The inverse of :func:`read_idx`; useful to build small test files in the original format.
    """
    arr = np.asarray(array)
    codes = {np.dtype(v).newbyteorder("="): k for k, v in _IDX_DTYPES.items()}
    native = arr.dtype.newbyteorder("=")
    if native not in codes:
        raise ValueError(f"IDX cannot store dtype {arr.dtype}; use uint8, int8, int16, int32, float32 or float64.")
    code = codes[native]
    body = (bytes([0, 0, code, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape)
            + arr.astype(_IDX_DTYPES[code]).tobytes())
    path = Path(path)
    if compress is None:
        compress = path.suffix == ".gz"
    data = gzip.compress(body, mtime=0) if compress else body
    path.write_bytes(data)


# --------------------------------------------------------------------------------------------
# Fashion-MNIST
# --------------------------------------------------------------------------------------------

#: Official location of the gzipped Fashion-MNIST files, as published by Zalando Research.
FASHION_MNIST_URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
#: Fashion-MNIST's file name and md5 per part (``part -> (file, md5)``), as published by Zalando Research.
FASHION_MNIST_FILES = {
    "train_images": ("train-images-idx3-ubyte.gz", "8d4fb7e6c68d591d4c3dfef9ec88bf0d"),
    "train_labels": ("train-labels-idx1-ubyte.gz", "25c81989df183df01b3e8a0aad5dffbe"),
    "test_images": ("t10k-images-idx3-ubyte.gz", "bef4ecab320f06d8554ea6380940ec79"),
    "test_labels": ("t10k-labels-idx1-ubyte.gz", "bb300cfdad3c16e7a12a480ee83cd310"),
}
FASHION_MNIST_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
                         "Bag", "Ankle boot")


def _find_fashion_files(folder: Path) -> Optional[dict]:
    """The four files in ``folder`` (or its ``fashion-mnist`` sub-folder), gzipped or not."""
    for base in (folder, folder / "fashion-mnist", folder / "fashion_mnist"):
        found = {}
        for key, (gz_name, _) in FASHION_MNIST_FILES.items():
            for cand in (base / gz_name, base / gz_name[:-3]):
                if cand.is_file():
                    found[key] = cand
                    break
        if len(found) == 4:
            return found
    return None


def _fashion_sources(data_dir, cache: Path, download: bool, search_system: bool) -> tuple:
    if data_dir is not None:
        found = _find_fashion_files(Path(data_dir).expanduser())
        if found is None:
            names = ", ".join(n for n, _ in FASHION_MNIST_FILES.values())
            raise DatasetUnavailableError(f"data_dir={data_dir!s} does not contain the Fashion-MNIST files {names} "
                                          "(gzipped or not); put them there, or leave data_dir unset to search the "
                                          "usual places and download.")
        return found, f"data_dir {data_dir}"
    dirs = _user_data_dirs(None) + (list(SYSTEM_DATA_DIRS) if search_system else [])
    for d in dirs:
        found = _find_fashion_files(d)
        if found is not None:
            return found, str(d)
    folder = cache / "downloads" / "fashion-mnist"
    hint = (f"alternatively put the four files ({', '.join(n for n, _ in FASHION_MNIST_FILES.values())}) in a folder "
            "and pass data_dir=... or set ITLIN_DATA (on Debian/Ubuntu: apt install dataset-fashion-mnist).")
    found = {}
    for key, (name, md5) in FASHION_MNIST_FILES.items():
        target = folder / name
        if target.is_file() and _md5(target) == md5:
            found[key] = target
        elif download:
            found[key] = _fetch(FASHION_MNIST_URL + name, name, md5, folder, what="Fashion-MNIST", manual_hint=hint)
        else:
            raise DatasetUnavailableError(f"Fashion-MNIST file {name} not found (looked in {', '.join(map(str, dirs)) or 'no data folders'} "
                                          f"and {folder}) and download=False; {hint}")
    return found, str(folder)


def _parse_fashion(files: dict) -> dict:
    out = {}
    for split in ("train", "test"):
        images = read_idx(files[f"{split}_images"])
        labels = read_idx(files[f"{split}_labels"])
        if images.ndim != 3 or images.dtype != np.uint8:
            raise ValueError(f"{files[f'{split}_images']}: expected uint8 images (N, rows, cols), got {images.dtype} {images.shape}.")
        if labels.ndim != 1 or len(labels) != len(images):
            raise ValueError(f"{files[f'{split}_labels']}: expected {len(images)} labels, got shape {labels.shape}.")
        if labels.size and (labels.min() < 0 or labels.max() > 9):
            raise ValueError(f"{files[f'{split}_labels']}: labels must be 0-9, found {labels.min()}..{labels.max()}.")
        out[f"x_{split}"] = images[..., None]
        out[f"y_{split}"] = labels.astype(np.int32)
    return out


def fashion_mnist(*, n_train: Optional[int] = None, n_test: Optional[int] = None, seed: int = 0, data_dir=None,
                  cache_dir=None, download: bool = True, search_system: bool = True,
                  normalize: str = "standardize") -> Dataset:
    """Fashion-MNIST (Xiao et al. 2017): 60,000 training and 10,000 test images, 28x28x1, 10 classes.

    Read from IDX files (:func:`read_idx`), searched in order: ``data_dir`` (if given, only
    there), ``$ITLIN_DATA``, the Debian location ``/usr/share/datasets/fashion-mnist``
    (``search_system``), the cache's ``downloads/fashion-mnist``; otherwise downloaded from the
    official URL with md5 verification (``download=True``). Local files are checked
    structurally (magic numbers, dimensions, label range) rather than by checksum: the Debian
    package's files are recompressed, so their gzip checksums differ from the published ones.
    The parsed uint8 arrays are cached, keyed by the files' paths, sizes and modification
    times. ``seed`` picks balanced subsets; ``normalize`` as in the module docstring.
    """
    cache = cache_dir_fn(cache_dir)
    files, source = _fashion_sources(data_dir, cache, download, search_system)
    # parsed arrays are cached under a key naming the four files (path, size, modification time)
    stamp = repr(sorted((k, str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for k, p in files.items()))
    key = hashlib.md5(stamp.encode()).hexdigest()[:16]
    arrays = _cached(cache / "fashion_mnist" / f"arrays-{key}.npz", lambda: _parse_fashion(files))
    meta = {"source": source, "classes": FASHION_MNIST_CLASSES}
    return _classification_dataset("fashion_mnist", arrays["x_train"], arrays["y_train"], arrays["x_test"],
                                   arrays["y_test"], max_value=255.0, normalize=normalize, n_train=n_train,
                                   n_test=n_test, seed=seed, num_classes=10, meta=meta)


# --------------------------------------------------------------------------------------------
# CIFAR-10 and CIFAR-2
# --------------------------------------------------------------------------------------------

#: Official CIFAR-10 tarball, as published by its authors (Krizhevsky, 2009).
CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
#: md5 of :data:`CIFAR10_URL`'s tarball, as published by its authors.
CIFAR10_MD5 = "c58f30108f718f92721af3b95e74349a"
CIFAR10_TARBALL = "cifar-10-python.tar.gz"
CIFAR10_DIR = "cifar-10-batches-py"
CIFAR10_TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


class _CifarUnpickler(pickle.Unpickler):
    """Unpickler that only builds the objects a CIFAR batch contains (no arbitrary code)."""

    _ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
                ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode"),
                ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar")}

    def find_class(self, module, name):
        if (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"CIFAR batch refers to {module}.{name}, which a CIFAR batch never contains.")


def _unpickle(data: bytes, source: str) -> dict:
    try:
        obj = _CifarUnpickler(io.BytesIO(data), encoding="bytes").load()
    except Exception as err:
        raise ValueError(f"{source} is not a readable CIFAR-10 python batch ({type(err).__name__}: {err}).") from err
    if not isinstance(obj, dict):
        raise ValueError(f"{source} should hold a dict, got {type(obj).__name__}.")
    return {(k.decode() if isinstance(k, bytes) else k): v for k, v in obj.items()}


def _cifar_batch(data: bytes, source: str):
    d = _unpickle(data, source)
    if "data" not in d or "labels" not in d:
        raise ValueError(f"{source} lacks the 'data' or 'labels' entry of a CIFAR-10 batch (keys: {sorted(d)}).")
    x = np.asarray(d["data"])
    y = np.asarray(d["labels"], dtype=np.int64)
    if x.dtype != np.uint8 or x.ndim != 2 or x.shape[1] != 3072:
        raise ValueError(f"{source}: 'data' must be uint8 of shape (n, 3072), got {x.dtype} {x.shape}.")
    if y.shape != (x.shape[0],):
        raise ValueError(f"{source}: {x.shape[0]} images but {y.size} labels.")
    if y.size and (y.min() < 0 or y.max() > 9):
        raise ValueError(f"{source}: labels must be 0-9, found {y.min()}..{y.max()}.")
    # rows are 1024 red, 1024 green, 1024 blue values, each a 32x32 image in row-major order
    return x.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1), y.astype(np.int32)


def _assemble_cifar(read: Callable[[str], bytes], source: str) -> dict:
    xs, ys = [], []
    for name in CIFAR10_TRAIN_BATCHES:
        x, y = _cifar_batch(read(name), f"{source}/{name}")
        xs.append(x)
        ys.append(y)
    x_te, y_te = _cifar_batch(read("test_batch"), f"{source}/test_batch")
    meta = _unpickle(read("batches.meta"), f"{source}/batches.meta")
    names = [n.decode() if isinstance(n, bytes) else str(n) for n in meta.get("label_names", CIFAR10_CLASSES)]
    return {"x_train": np.concatenate(xs), "y_train": np.concatenate(ys), "x_test": x_te, "y_test": y_te,
            "label_names": np.asarray(names)}


def _read_cifar_dir(folder: Path) -> dict:
    def read(name):
        p = folder / name
        if not p.is_file():
            raise DatasetUnavailableError(f"{p} is missing: an extracted {CIFAR10_DIR} folder must hold "
                                          f"{', '.join(CIFAR10_TRAIN_BATCHES)}, test_batch and batches.meta.")
        return p.read_bytes()

    return _assemble_cifar(read, str(folder))


def _read_cifar_tarball(path: Path) -> dict:
    try:
        tar = tarfile.open(path, "r:gz")
    except (tarfile.TarError, OSError, EOFError) as err:
        raise ValueError(f"{path} is not a readable .tar.gz archive ({err}); fetch {CIFAR10_TARBALL} again.") from err
    with tar:
        members = {m.name: m for m in tar.getmembers() if m.isfile()}

        def read(name):
            member = members.get(f"{CIFAR10_DIR}/{name}")
            if member is None:
                raise ValueError(f"{path} has no member {CIFAR10_DIR}/{name}: it is not a complete CIFAR-10 python "
                                 f"archive. Fetch {CIFAR10_TARBALL} again from {CIFAR10_URL}.")
            return tar.extractfile(member).read()  # read into memory: nothing is extracted to disk

        return _assemble_cifar(read, str(path))


def _cifar_arrays(data_dir, cache: Path, download: bool, url: str, md5: Optional[str]) -> tuple:
    """Raw uint8 CIFAR-10 arrays and a description of where they came from."""
    arrays_path = cache / "cifar10" / f"arrays-{md5}.npz" if md5 else None
    user_dirs = _user_data_dirs(data_dir)
    # 1. user-supplied: an extracted folder or the tarball (data_dir may point at either)
    for d in user_dirs:
        for folder in (d, d / CIFAR10_DIR):
            if folder.is_dir() and (folder / "batches.meta").is_file():
                return _read_cifar_dir(folder), str(folder)
        for tar_path in (d, d / CIFAR10_TARBALL):
            if tar_path.is_file():
                if md5 is not None:
                    got = _md5(tar_path)
                    if got != md5:
                        raise ChecksumError(
                            f"{tar_path} has md5 {got}, but the CIFAR-10 python tarball has md5 {md5}: the file is "
                            f"damaged or a different file. Fetch it again from {url}, or pass md5=None to skip the check.")
                    cached = _load_npz(arrays_path)
                    if cached is not None:
                        return cached, str(tar_path)
                arrays = _read_cifar_tarball(tar_path)
                if arrays_path is not None:
                    _save_npz(arrays_path, arrays)
                return arrays, str(tar_path)
    if data_dir is not None:
        raise DatasetUnavailableError(f"data_dir={data_dir!s} holds neither {CIFAR10_TARBALL} nor an extracted "
                                      f"{CIFAR10_DIR} folder; put one of them there.")
    # 2. arrays parsed earlier from the verified tarball
    if arrays_path is not None:
        cached = _load_npz(arrays_path)
        if cached is not None:
            return cached, str(arrays_path)
    # 3. the tarball in the cache, downloaded (and verified) if needed
    folder = cache / "downloads"
    hint = (f"or pass data_dir=... (or set ITLIN_DATA) to a folder holding {CIFAR10_TARBALL} or an extracted "
            f"{CIFAR10_DIR} folder.")
    tar_path = folder / CIFAR10_TARBALL
    if not (tar_path.is_file() and (md5 is None or _md5(tar_path) == md5)):
        if not download:
            raise DatasetUnavailableError(
                f"CIFAR-10 is not available offline and download=False. Fetch {CIFAR10_TARBALL} from {url} "
                f"(md5 {md5}) and put it at {tar_path}, {hint}")
        tar_path = _fetch(url, CIFAR10_TARBALL, md5, folder, what="CIFAR-10", manual_hint=hint)
    arrays = _read_cifar_tarball(tar_path)
    if arrays_path is not None:
        _save_npz(arrays_path, arrays)
    return arrays, str(tar_path)


def cifar10(*, n_train: Optional[int] = None, n_test: Optional[int] = None, seed: int = 0, data_dir=None,
            cache_dir=None, download: bool = True, url: str = CIFAR10_URL, md5: Optional[str] = CIFAR10_MD5,
            normalize: str = "standardize") -> Dataset:
    """CIFAR-10 (Krizhevsky 2009): 50,000 training and 10,000 test images, 32x32x3 NHWC, 10 classes.

    Sources, in order: ``data_dir`` (or ``$ITLIN_DATA``) holding an extracted
    ``cifar-10-batches-py`` folder or ``cifar-10-python.tar.gz`` (``data_dir`` may also be
    that folder or file); arrays cached from an earlier load; the tarball in the cache's
    ``downloads`` folder; a download of the official tarball from ``url`` (pooch, verified
    against ``md5``, written under a temporary name and renamed only once verified). A tarball
    from any source must have the md5 ``md5`` (``None`` skips the check and the array cache).
    The batches are read straight from the archive (nothing extracted) with an unpickler that
    admits only what a CIFAR batch contains; the parsed uint8 arrays are cached so that later
    loads skip the archive. ``seed`` picks balanced subsets; ``normalize`` as in the module
    docstring. Offline without the file, raises :class:`DatasetUnavailableError` naming the
    file to fetch and where to put it.
    """
    cache = cache_dir_fn(cache_dir)
    arrays, source = _cifar_arrays(data_dir, cache, download, url, md5)
    names = tuple(str(n) for n in arrays.get("label_names", CIFAR10_CLASSES))
    meta = {"source": source, "classes": names}
    return _classification_dataset("cifar10", arrays["x_train"], arrays["y_train"], arrays["x_test"],
                                   arrays["y_test"], max_value=255.0, normalize=normalize, n_train=n_train,
                                   n_test=n_test, seed=seed, num_classes=10, meta=meta)


def _class_index(ds, c) -> int:
    """A class of ``ds`` given by name or index, as its index; a one-line error otherwise."""
    names = list(ds.meta.get("classes", range(ds.num_outputs)))
    if isinstance(c, str):
        if c not in names:
            raise ValueError(f"unknown class {c!r}; {ds.name} has classes {names}.")
        c = names.index(c)
    if isinstance(c, bool) or not 0 <= int(c) < ds.num_outputs:
        raise ValueError(f"class index {c!r} out of range for {ds.num_outputs} classes.")
    return int(c)


def two_class(ds: Dataset, classes=(0, 1), *, target: str = "label", name: Optional[str] = None) -> Dataset:
    """Binary version of a classification dataset: only ``classes = (a, b)`` (indices or names).

    ``target="label"``: int32 labels 0 (class ``a``) and 1 (class ``b``), ``num_outputs=2``,
    task ``"classification"``. ``target="pm1"``: float32 targets ``(N, 1)`` equal to -1 (``a``)
    and +1 (``b``), task ``"regression"`` — the single-output +-1 form used by Ortiz-Jimenez et
    al. (binary CIFAR-2; energy concentration of the labels, their Appendix E.2). The 0/1 labels
    are kept in ``meta['labels_train'/'labels_test']`` so subsets stay balanced;
    :func:`itlin.accuracy` scores a single output by its sign. Inputs keep the parent's
    normalisation.
    """
    if ds.task != "classification":
        raise ValueError(f"two_class needs a classification dataset, {ds.name!r} is {ds.task}.")
    if target not in ("label", "pm1"):
        raise ValueError(f"target must be 'label' (0/1 labels) or 'pm1' (+-1 single-output targets), got {target!r}.")
    if len(classes) != 2:
        raise ValueError(f"classes must be two classes, got {classes!r}.")
    idx = [_class_index(ds, c) for c in classes]
    names = list(ds.meta.get("classes", range(ds.num_outputs)))
    if idx[0] == idx[1]:
        raise ValueError(f"the two classes must differ, got {classes!r}.")
    return _binary(ds, [idx[0]], [idx[1]], target, name or f"{ds.name}_2class", original_labels=False,
                   classes=tuple(names[i] if i < len(names) else i for i in idx), class_indices=tuple(idx))


def _binary(ds, negative, positive, target: str, name: str, *, original_labels: bool, **meta) -> Dataset:
    """The examples of ``ds`` whose class is in ``negative`` or ``positive``, labelled 0 / 1
    (``target="label"``) or -1 / +1 as one output (``"pm1"``); ``labels_{split}`` in the meta are
    the original classes (``original_labels``) or the 0 / 1 labels; ``meta`` adds entries."""
    out = {}
    for split in ("train", "test"):
        y = np.asarray(getattr(ds, f"y_{split}"))
        keep = np.flatnonzero(np.isin(y, list(negative) + list(positive)))
        lab = np.isin(y[keep], list(positive)).astype(np.int32)
        out[f"x_{split}"] = getattr(ds, f"x_{split}")[keep]
        out[f"labels_{split}"] = y[keep].astype(np.int32) if original_labels else lab
        out[f"y_{split}"] = lab if target == "label" else (2.0 * lab - 1.0).astype(np.float32)[:, None]
    meta = {**ds.meta, "parent": ds.name, "target": target, **meta, "labels_train": out["labels_train"],
            "labels_test": out["labels_test"], "n_train": len(out["labels_train"]), "n_test": len(out["labels_test"])}
    for k in ("train_index", "test_index"):
        meta.pop(k, None)
    return Dataset(name=name, x_train=out["x_train"], y_train=out["y_train"], x_test=out["x_test"],
                   y_test=out["y_test"], task="classification" if target == "label" else "regression",
                   num_outputs=2 if target == "label" else 1, meta=meta)


def cifar2(*, n_train: Optional[int] = None, n_test: Optional[int] = None, seed: int = 0, classes=None,
           target: str = "label", data_dir=None, cache_dir=None, download: bool = True, url: str = CIFAR10_URL,
           md5: Optional[str] = CIFAR10_MD5, normalize: str = "standardize") -> Dataset:
    """Binary CIFAR-2 (Ortiz-Jimenez et al.). Two splits:

    * ``classes=None`` (default): **their split**, CIFAR-10 classes 0-4 against 5-9 (all 60,000
      images; :func:`class_groups`), the one the Ortiz chapters use (with ``target="pm1"``);
    * ``classes=(a, b)``: two single classes (indices or names), e.g. ``(0, 1)``, airplane vs
      automobile: 10,000 training and 2,000 test images (:func:`two_class`).

    ``target="label"``: int32 labels 0/1, two outputs; ``target="pm1"``: single-output +-1
    targets. Inputs are normalised with the statistics of the full CIFAR-10 training split.
    Loading as in :func:`cifar10`; ``seed`` picks balanced subsets.
    """
    full = cifar10(data_dir=data_dir, cache_dir=cache_dir, download=download, url=url, md5=md5, normalize=normalize)
    if classes is None:
        ds = class_groups(full, ((0, 1, 2, 3, 4), (5, 6, 7, 8, 9)), target=target, name="cifar2")
    else:
        ds = two_class(full, classes, target=target, name="cifar2")
    if n_train is not None or n_test is not None:
        ds = ds.subset(n_train, n_test, seed=seed)
    return ds


# --------------------------------------------------------------------------------------------
# teacher-labelled images (Arbel et al. Appendix C.4)
# --------------------------------------------------------------------------------------------

def _train_image_teacher(x, y, *, hidden, steps, learning_rate, seed, num_classes):
    """One-hidden-layer ReLU network trained with full-batch Adam on cross-entropy; params in numpy."""
    import jax
    import jax.numpy as jnp
    import optax

    d = x.shape[1]
    k1, k2 = jax.random.split(jax.random.PRNGKey(seed))
    params = {"w1": jax.random.normal(k1, (d, hidden), jnp.float32) * jnp.sqrt(2.0 / d),
              "b1": jnp.zeros((hidden,), jnp.float32),
              "w2": jax.random.normal(k2, (hidden, num_classes), jnp.float32) * jnp.sqrt(1.0 / hidden),
              "b2": jnp.zeros((num_classes,), jnp.float32)}
    opt = optax.adam(learning_rate)
    xj, yj = jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.int32)

    def logits_fn(p, xx):
        return jax.nn.relu(xx @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]

    def loss_fn(p):
        return optax.softmax_cross_entropy_with_integer_labels(logits_fn(p, xj), yj).mean()

    @jax.jit
    def run(p):
        def step(carry, _):
            p, s = carry
            loss, g = jax.value_and_grad(loss_fn)(p)
            upd, s = opt.update(g, s, p)
            return (optax.apply_updates(p, upd), s), loss

        (p, _), losses = jax.lax.scan(step, (p, opt.init(p)), None, length=steps)
        return p, losses

    params, losses = run(params)
    params = {k: np.asarray(v) for k, v in params.items()}

    def predict(xx):
        h = np.maximum(np.asarray(xx, np.float32) @ params["w1"] + params["b1"], 0.0)
        return h @ params["w2"] + params["b2"]

    return params, predict, float(losses[-1])


def _softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def teacher_images(*, n_train: Optional[int] = None, n_test: Optional[int] = None, seed: int = 0,
                   base: str = "digits", n_teacher_train: Optional[int] = None, hidden: int = 50,
                   steps: int = 1000, learning_rate: float = 1e-2, data_dir=None, cache_dir=None) -> Dataset:
    """Images labelled by a trained teacher network (Arbel et al. Appendix C.4), on digits or Fashion-MNIST.

    Their construction with ``base`` in place of MNIST: (1) a teacher training set
    ``D_tr u D_ts`` where ``D_ts`` is the base's test split and ``D_tr`` a balanced subset of
    its training split of size ``n_teacher_train`` (default: 3000 as in the paper for
    ``fashion_mnist``; the whole 1497-image training split for ``digits``); (2) a one-hidden-
    layer ReLU teacher with ``hidden=50`` units trained on it with cross-entropy (here:
    full-batch Adam, ``steps`` steps at ``learning_rate``, initialised from ``seed``);
    (3) regression targets ``softmax(f_T(x))`` (``(N, 10)`` float32) for ``D_tr`` (training
    set) and ``D_ts`` (test set). Inputs are the base images standardised (module docstring)
    and flattened to ``(N, pixels)``, the vectors the mean-field student of Eq. 2 takes.

    The result is cached by its settings. The base's original labels are in
    ``meta['labels_train'/'labels_test']`` (so subsets are class-balanced) and the teacher's
    weights in ``meta['teacher']``. ``n_train``/``n_test`` take balanced subsets (seed
    ``seed``) of the student's training/test sets.
    """
    if base not in ("digits", "fashion_mnist"):
        raise ValueError(f"base must be 'digits' or 'fashion_mnist', got {base!r}.")
    if n_teacher_train is None:
        n_teacher_train = 3000 if base == "fashion_mnist" else None
    tag = "all" if n_teacher_train is None else int(n_teacher_train)
    fname = f"teacher_images-v1-{base}-ntr{tag}-h{int(hidden)}-s{int(steps)}-lr{float(learning_rate):g}-seed{int(seed)}.npz"
    path = cache_dir_fn(cache_dir) / fname

    def build():
        src = digits() if base == "digits" else fashion_mnist(data_dir=data_dir, cache_dir=cache_dir)
        if n_teacher_train is not None:
            src = src.subset(n_train=n_teacher_train, seed=seed)
        x_tr = src.x_train.reshape(src.n_train, -1)
        x_te = src.x_test.reshape(src.n_test, -1)
        x_all = np.concatenate([x_tr, x_te])
        y_all = np.concatenate([src.y_train, src.y_test])
        params, predict, loss = _train_image_teacher(x_all, y_all, hidden=hidden, steps=steps,
                                                     learning_rate=learning_rate, seed=seed, num_classes=10)
        logits = predict(x_all)
        acc = float(np.mean(np.argmax(logits, 1) == y_all))
        probs = _softmax(logits.astype(np.float64)).astype(np.float32)
        return {"x_train": x_tr, "x_test": x_te, "y_train": probs[:len(x_tr)], "y_test": probs[len(x_tr):],
                "labels_train": src.y_train, "labels_test": src.y_test,
                "teacher_final_loss": np.float64(loss), "teacher_accuracy": np.float64(acc),
                **{f"teacher_{k}": v for k, v in params.items()}}

    a = _cached(path, build)
    meta = {"base": base, "n_teacher_train": n_teacher_train, "teacher": {
                "hidden": hidden, "steps": steps, "learning_rate": learning_rate, "seed": seed,
                "final_loss": float(a["teacher_final_loss"]), "accuracy_on_its_training_set": float(a["teacher_accuracy"]),
                **{k: a[f"teacher_{k}"] for k in ("w1", "b1", "w2", "b2")}},
            "labels_train": a["labels_train"], "labels_test": a["labels_test"],
            "n_train": int(len(a["x_train"])), "n_test": int(len(a["x_test"])),
            "targets": "softmax of the teacher's logits", "normalize": "standardize, then flattened"}
    ds = Dataset(name="teacher_images", x_train=a["x_train"], y_train=a["y_train"], x_test=a["x_test"],
                 y_test=a["y_test"], task="regression", num_outputs=10, meta=meta)
    if n_train is not None or n_test is not None:
        ds = ds.subset(n_train, n_test, seed=seed)
    return ds


# --------------------------------------------------------------------------------------------
# registry
# --------------------------------------------------------------------------------------------

#: The datasets :func:`load` knows, ``name -> function`` returning a :class:`Dataset`.
DATASETS = {
    "quintic": quintic,
    "teacher_student": teacher_student,
    "mnist1d": mnist1d,
    "digits": digits,
    "fashion_mnist": fashion_mnist,
    "cifar10": cifar10,
    "cifar2": cifar2,
    "teacher_images": teacher_images,
}

_ALIASES = {"mnist_1d": "mnist1d", "fashionmnist": "fashion_mnist", "fmnist": "fashion_mnist",
            "cifar_10": "cifar10", "cifar_2": "cifar2", "teacher": "teacher_student"}


def dataset_name(name: str) -> str:
    """The registry's spelling of a dataset name (``"FMNIST"`` -> ``"fashion_mnist"``); a
    ValueError listing the known names otherwise."""
    key = _ALIASES.get(str(name).strip().lower().replace("-", "_"), str(name).strip().lower().replace("-", "_"))
    if key not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; known datasets: {', '.join(sorted(DATASETS))}.")
    return key


def load(name: str, *, n_train: Optional[int] = None, n_test: Optional[int] = None, seed: int = 0,
         cache_dir=None, **kwargs) -> Dataset:
    """Load a dataset by name (see :data:`DATASETS`); extra keyword arguments go to its loader.

    ``n_train``/``n_test``: sizes of the (class-balanced, nested) subsets, ``None`` for the
    dataset's default size. ``seed``: subset choice, or generation for synthetic data (an
    integer from 0 to ``2**32 - 1``; anything else is a one-line error).

    >>> load("quintic", n_train=5).x_train[:, 0].tolist()
    [-3.5, -1.75, 0.0, 1.75, 3.5]
    """
    check_seed("seed", seed)
    return DATASETS[dataset_name(name)](n_train=n_train, n_test=n_test, seed=seed, cache_dir=cache_dir, **kwargs)


__all__ = [
    "CIFAR10_MD5",
    "CIFAR10_URL",
    "ChecksumError",
    "DATASETS",
    "Dataset",
    "DatasetUnavailableError",
    "FASHION_MNIST_FILES",
    "FASHION_MNIST_URL",
    "QUINTIC_INTERVAL",
    "activation_numpy",
    "balanced_indices",
    "cache_dir",
    "cifar10",
    "cifar2",
    "dataset_name",
    "digits",
    "fashion_mnist",
    "load",
    "mnist1d",
    "parse_idx",
    "quintic",
    "quintic_function",
    "random_indices",
    "read_idx",
    "teacher_images",
    "teacher_outputs",
    "teacher_student",
    "two_class",
    "write_idx",
]


# --------------------------------------------------------------------------------------------
# teacher-student with hidden biases, as in Arbel et al.'s code (appended for book/arbel_*.md)
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


__all__ += ["arbel_teacher_outputs", "arbel_teacher_student"]


# --------------------------------------------------------------------------------------------
# binary tasks from groups of classes (appended for book/ntk_eigenfunctions.md and
# book/energy_concentration.md, Ortiz-Jimenez et al.)
# --------------------------------------------------------------------------------------------

def class_groups(ds: Dataset, groups=((0, 1, 2, 3, 4), (5, 6, 7, 8, 9)), *, target: str = "pm1",
                 name: Optional[str] = None) -> Dataset:
    """Binary version of a classification dataset: the classes of ``groups[0]`` against those of ``groups[1]``.

    Ortiz-Jimenez et al.'s "CIFAR-2" is built so in their code: CIFAR-10 classes 0-4 against
    5-9 (the default ``groups``), not two single classes (that is :func:`two_class`).
    Examples of classes in neither group are dropped. ``target="pm1"`` (default): float32
    targets ``(N, 1)``, -1 for ``groups[0]`` and +1 for ``groups[1]``, task ``"regression"``,
    one output (train with the sigmoid cross-entropy ``loss="bce"``; :func:`itlin.accuracy`
    scores a single output by its sign). ``target="label"``: int32 labels 0/1, two outputs.
    The original class labels are kept in ``meta['labels_train'/'labels_test']``, so
    :meth:`Dataset.subset` stays balanced over the original classes (hence over the groups
    when they hold equally many classes); inputs keep the parent's normalisation.

    >>> import numpy as np
    >>> ds = Dataset("toy", np.zeros((4, 2), np.float32), np.array([0, 1, 2, 3]), np.zeros((2, 2), np.float32),
    ...              np.array([3, 0]), "classification", 4)
    >>> b = class_groups(ds, ((0, 1), (2, 3)))
    >>> b.y_train[:, 0].tolist(), b.y_test[:, 0].tolist(), b.meta["labels_train"].tolist()
    ([-1.0, -1.0, 1.0, 1.0], [1.0, -1.0], [0, 1, 2, 3])
    """
    if ds.task != "classification":
        raise ValueError(f"class_groups needs a classification dataset, {ds.name!r} is {ds.task}.")
    if target not in ("label", "pm1"):
        raise ValueError(f"target must be 'label' (0/1 labels) or 'pm1' (+-1 single-output targets), got {target!r}.")
    if len(groups) != 2 or not all(len(g) for g in groups):
        raise ValueError(f"groups must be two non-empty collections of classes, got {groups!r}.")
    index = [sorted({_class_index(ds, c) for c in g}) for g in groups]
    both = set(index[0]) & set(index[1])
    if both:
        raise ValueError(f"classes {sorted(both)} are in both groups; the groups must not overlap.")
    names = list(ds.meta.get("classes", range(ds.num_outputs)))
    return _binary(ds, index[0], index[1], target, name or f"{ds.name}_groups", original_labels=True,
                   groups=[list(g) for g in index],
                   group_names=[[names[i] if i < len(names) else i for i in g] for g in index])


__all__ += ["class_groups"]
