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

Modules: ``_dataset`` (the :class:`Dataset` container, subsets, normalisation, binary tasks),
``_files`` (cache, data directories, checksums, downloads), ``_formats`` (IDX and CIFAR-10
readers), ``_synthetic`` (quintic, teacher-student, MNIST-1D), ``_images`` (digits,
Fashion-MNIST, CIFAR-10/2), ``_teachers`` (teacher-labelled images); this file holds the
registry (:func:`load`) and the one ``__all__``.
"""

from __future__ import annotations

from typing import Optional

from ..core._checks import check_seed
from . import _formats, _images, _synthetic
from ._dataset import NORMALIZATIONS, TASKS, Dataset, balanced_indices, class_groups, random_indices, two_class
from ._files import SYSTEM_DATA_DIRS, ChecksumError, DatasetUnavailableError, cache_dir, cache_dir_fn
from ._formats import CIFAR10_CLASSES, CIFAR10_DIR, CIFAR10_TARBALL, CIFAR10_TRAIN_BATCHES, parse_idx, read_idx, write_idx
from ._images import FASHION_MNIST_CLASSES, cifar2, cifar10, digits, fashion_mnist
from ._synthetic import (activation_numpy, arbel_teacher_outputs, arbel_teacher_student, mnist1d, quintic,
                         quintic_function, teacher_outputs, teacher_student)
from ._teachers import teacher_images

# --------------------------------------------------------------------------------------------
# the documented constants (autodoc reads a constant's ``#:`` comment from this file only)
# --------------------------------------------------------------------------------------------

#: The input interval of :func:`quintic` (the paper does not state one).
QUINTIC_INTERVAL = _synthetic.QUINTIC_INTERVAL
#: Official location of the gzipped Fashion-MNIST files, as published by Zalando Research.
FASHION_MNIST_URL = _images.FASHION_MNIST_URL
#: Fashion-MNIST's file name and md5 per part (``part -> (file, md5)``), as published by Zalando Research.
FASHION_MNIST_FILES = _images.FASHION_MNIST_FILES
#: Official CIFAR-10 tarball, as published by its authors (Krizhevsky, 2009).
CIFAR10_URL = _formats.CIFAR10_URL
#: md5 of :data:`CIFAR10_URL`'s tarball, as published by its authors.
CIFAR10_MD5 = _formats.CIFAR10_MD5


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
    "arbel_teacher_outputs",
    "arbel_teacher_student",
    "balanced_indices",
    "cache_dir",
    "cifar10",
    "cifar2",
    "class_groups",
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
