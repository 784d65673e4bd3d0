"""Image data sets read from files: scikit-learn's digits, Fashion-MNIST, CIFAR-10 and CIFAR-2."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Optional

import numpy as np

from ._dataset import Dataset, _classification_dataset, class_groups, two_class
from ._files import (SYSTEM_DATA_DIRS, ChecksumError, DatasetUnavailableError, _cached, _fetch, _load_npz, _md5,
                     _save_npz, _user_data_dirs, cache_dir_fn)
from ._formats import (CIFAR10_CLASSES, CIFAR10_DIR, CIFAR10_MD5, CIFAR10_TARBALL, CIFAR10_URL, _read_cifar_dir,
                       _read_cifar_tarball, read_idx)

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
