"""The :class:`Dataset` container, class-balanced subsets, image normalisation and binary tasks.

Normalisation (``normalize=``) is described in :mod:`itlin.data`'s docstring.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional

import numpy as np

from ..core._checks import check_positive_int, check_seed

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
# binary tasks from one dataset: two classes, or two groups of classes
# --------------------------------------------------------------------------------------------

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
