"""Datasets, subsets, file formats, cache behaviour and augmentation (issue 3).

Loaders are tested on small files generated here in the datasets' original formats (IDX for
Fashion-MNIST, the pickled-batch tarball for CIFAR-10), so nothing is downloaded. The only test
that reads real files is skipped where the Debian Fashion-MNIST package is not installed.
"""

import hashlib
import os
import pickle
import random
import tarfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from itlin import data
from itlin.augment import augment, augment_1d


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    """A fresh, empty cache directory for every test (nothing is written to the user's cache);
    no user data directory."""
    c = tmp_path / "cache"
    monkeypatch.setenv("ITLIN_CACHE", str(c))
    monkeypatch.delenv("ITLIN_DATA", raising=False)
    return c


def _files_under(folder: Path):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


# ------------------------------------------------------------------------------ quintic
def test_quintic_grid_formula_and_range():
    ds = data.load("quintic")
    assert ds.x_train.shape == (20, 1) and ds.x_test.shape == (1000, 1)
    assert ds.y_train.shape == (20, 1) and ds.task == "regression" and ds.num_outputs == 1
    lo, hi = ds.meta["interval"]
    assert (lo, hi) == (-3.5, 3.5)
    # evenly spaced, endpoints included
    np.testing.assert_allclose(np.diff(ds.x_train[:, 0]), (hi - lo) / 19, rtol=1e-5)
    assert ds.x_test[0, 0] == lo and ds.x_test[-1, 0] == hi
    x = ds.x_test[:, 0].astype(np.float64)
    np.testing.assert_allclose(ds.y_test[:, 0], x ** 5 / 32 - x ** 3 / 2 + 2 * x - 1, rtol=1e-6, atol=1e-6)
    # outputs inside [-4, 4] (main paper App. C), and the interval keeps all four stationary points
    for y in (ds.y_train, ds.y_test):
        assert y.min() >= -4 and y.max() <= 4
    stationary = np.sqrt(np.roots([5 / 32, -1.5, 2]))  # roots of y' = 5x^4/32 - 3x^2/2 + 2 in x^2
    assert np.all(stationary < hi)
    assert ds.meta["y_range"][0] == pytest.approx(-2.9755859375)
    # a wider interval would leave [-4, 4]
    assert data.quintic(interval=(-3.7, 3.7)).y_test.min() < -4


# ------------------------------------------------------------------------ teacher-student
def test_teacher_student_sizes_determinism_and_teacher():
    a = data.teacher_student(seed=3)
    b = data.load("teacher_student", seed=3)
    c = data.teacher_student(seed=4)
    assert a.x_train.shape == (500, 10) and a.x_test.shape == (10000, 10) and a.y_train.shape == (500, 1)
    np.testing.assert_array_equal(a.x_train, b.x_train)
    np.testing.assert_array_equal(a.y_test, b.y_test)
    assert not np.allclose(a.x_train, c.x_train)
    t = a.meta["teacher"]
    assert t["u"].shape == (5, 10) and t["v"].shape == (5,) and t["scale"] == pytest.approx(1 / 5)
    # the stored teacher reproduces the targets: y = (1/M*) sum_i v_i relu(u_i . x)
    x = a.x_train.astype(np.float64)
    manual = (np.maximum(x @ t["u"].T, 0) @ t["v"]) / 5
    np.testing.assert_allclose(a.y_train[:, 0], manual, rtol=1e-5, atol=1e-5)
    # mean-field teacher scaling: E[y^2] = E[v^2] E[relu(u.x)^2] M* / M*^2 = 1 * (d/2) * 5 / 25 = 1
    # on average over teachers (one teacher's value varies): check the average over 10 seeds
    ms = [float(np.mean(data.teacher_student(seed=s, n_train=1, n_test=4000).y_test ** 2)) for s in range(10)]
    assert 0.5 < np.mean(ms) < 2
    # more training data: same teacher, same test set, nested training set
    big = data.teacher_student(seed=3, n_train=800)
    np.testing.assert_array_equal(big.x_train[:500], a.x_train)
    np.testing.assert_array_equal(big.x_test, a.x_test)
    np.testing.assert_array_equal(big.meta["teacher"]["u"], t["u"])


def test_teacher_student_silu_and_scalings():
    ds = data.teacher_student(n_train=50, n_test=20, activation="silu", beta=2.0, teacher_scaling="ntk")
    t = ds.meta["teacher"]
    x = ds.x_test.astype(np.float64)
    z = x @ t["u"].T
    manual = (z / (1 + np.exp(-2.0 * z))) @ t["v"] / np.sqrt(5)
    np.testing.assert_allclose(ds.y_test[:, 0], manual, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(data.teacher_outputs(t, x)[:, 0], manual, rtol=1e-12)
    with pytest.raises(ValueError, match="teacher_scaling"):
        data.teacher_student(teacher_scaling="bogus")
    with pytest.raises(ValueError, match="activation"):
        data.teacher_student(activation="gelu")


# ------------------------------------------------------------------------------- subsets
def test_balanced_indices_are_balanced_nested_and_deterministic():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 10, size=3000)
    prev = set()
    for n in (1, 7, 10, 55, 100, 999):
        idx = data.balanced_indices(labels, n, seed=5)
        assert len(idx) == n == len(set(idx.tolist()))
        counts = np.bincount(labels[idx], minlength=10)
        assert counts.max() - counts.min() <= 1
        assert prev <= set(idx.tolist())  # nested
        prev = set(idx.tolist())
    np.testing.assert_array_equal(data.balanced_indices(labels, 100, seed=5), data.balanced_indices(labels, 100, seed=5))
    assert not np.array_equal(data.balanced_indices(labels, 100, seed=5), data.balanced_indices(labels, 100, seed=6))


def test_balanced_indices_with_a_short_class_and_errors():
    labels = np.array([0] * 3 + [1] * 50 + [2] * 50)
    idx = data.balanced_indices(labels, 60, seed=0)
    counts = np.bincount(labels[idx])
    assert counts[0] == 3 and abs(counts[1] - counts[2]) <= 1 and counts.sum() == 60
    assert len(data.balanced_indices(labels, len(labels))) == len(labels)
    with pytest.raises(ValueError, match="at most 103"):
        data.balanced_indices(labels, 104)
    with pytest.raises(ValueError, match=">= 1"):
        data.balanced_indices(labels, 0)


def test_dataset_subset_and_validation():
    ds = data.digits()
    sub = ds.subset(n_train=95, n_test=20, seed=1)
    assert sub.n_train == 95 and sub.n_test == 20
    counts = np.bincount(sub.y_train, minlength=10)
    assert counts.max() - counts.min() <= 1
    np.testing.assert_array_equal(sub.x_train, ds.x_train[sub.meta["train_index"]])
    # subsets of a subset keep indices into the full split
    sub2 = sub.subset(n_train=10, seed=2)
    np.testing.assert_array_equal(sub2.x_train, ds.x_train[sub2.meta["train_index"]])
    with pytest.raises(ValueError, match="at most"):
        ds.subset(n_train=10 ** 6)
    with pytest.raises(ValueError, match="task"):
        data.Dataset("x", ds.x_train, ds.y_train, ds.x_test, ds.y_test, "ranking", 10)
    with pytest.raises(ValueError, match="examples"):
        data.Dataset("x", ds.x_train[:3], ds.y_train, ds.x_test, ds.y_test, "classification", 10)


def test_load_dispatch_and_unknown_name(cache):
    assert set(data.DATASETS) >= {"quintic", "teacher_student", "mnist1d", "digits", "fashion_mnist", "cifar10",
                                  "cifar2", "teacher_images"}
    with pytest.raises(ValueError, match="known datasets: cifar10, cifar2, digits"):
        data.load("imagenet")
    ds = data.load("digits", n_train=100, n_test=50, seed=0)
    assert ds.n_train == 100 and ds.n_test == 50
    assert np.bincount(ds.y_train).min() == 10
    same = data.load("digits").subset(n_train=100, n_test=50, seed=0)
    np.testing.assert_array_equal(same.x_train, ds.x_train)
    np.testing.assert_array_equal(same.y_test, ds.y_test)


def test_cache_dir_resolution(tmp_path, monkeypatch):
    monkeypatch.setenv("ITLIN_CACHE", str(tmp_path / "env"))
    assert data.cache_dir() == tmp_path / "env" and (tmp_path / "env").is_dir()
    assert data.cache_dir(tmp_path / "explicit") == tmp_path / "explicit"
    # without ITLIN_CACHE: the platform's user cache (XDG_CACHE_HOME on Linux), here under tmp_path
    monkeypatch.delenv("ITLIN_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    default = data.cache_dir()
    assert default.name == "itlin" and str(default).startswith(str(tmp_path))


# -------------------------------------------------------------------------------- digits
def test_digits_split_normalisation_and_determinism():
    ds = data.digits()
    assert ds.x_train.shape == (1497, 8, 8, 1) and ds.x_test.shape == (300, 8, 8, 1)
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int32
    assert np.all(np.bincount(ds.y_test) == 30)
    # standardised with the training split's statistics
    assert abs(float(ds.x_train.mean())) < 1e-5 and float(ds.x_train.std()) == pytest.approx(1.0, abs=1e-4)
    raw = data.digits(normalize="none")
    assert raw.x_train.max() == 16.0
    np.testing.assert_allclose(data.digits(normalize="unit").x_train, raw.x_train / 16)
    np.testing.assert_allclose((raw.x_train / 16 - ds.meta["mean"][0]) / ds.meta["std"][0], ds.x_train, atol=1e-5)
    np.testing.assert_array_equal(data.digits().x_test, ds.x_test)
    with pytest.raises(ValueError, match="normalize"):
        data.digits(normalize="minmax")


# ------------------------------------------------------------------------------- MNIST-1D
def test_mnist1d_generation_cache_and_global_rng(cache, monkeypatch):
    np.random.seed(123)
    random.seed(123)
    before_np, before_py = np.random.get_state()[1].copy(), random.getstate()
    ds = data.mnist1d(num_samples=500)
    assert ds.x_train.shape == (400, 40, 1) and ds.x_test.shape == (100, 40, 1)
    assert ds.x_train.dtype == np.float32 and set(np.unique(ds.y_train)) <= set(range(10))
    # make_dataset reseeds the global generators: they are restored
    np.testing.assert_array_equal(np.random.get_state()[1], before_np)
    assert random.getstate() == before_py
    cached = [f for f in _files_under(cache) if f.startswith("mnist1d")]
    assert len(cached) == 1 and not any(f.endswith(".part") for f in _files_under(cache))
    # the second load reads the cache: generating again would fail here
    monkeypatch.setattr(data._synthetic, "_generate_mnist1d", lambda *a: pytest.fail("regenerated despite the cache"))
    again = data.mnist1d(num_samples=500)
    np.testing.assert_array_equal(again.x_train, ds.x_train)
    sub = data.mnist1d(num_samples=500, n_train=50, n_test=20, seed=1)
    assert np.bincount(sub.y_train, minlength=10).min() == 5
    std = data.mnist1d(num_samples=500, normalize="standardize")
    assert abs(float(std.x_train.mean())) < 1e-5


def test_mnist1d_generation_is_deterministic(tmp_path):
    a = data.mnist1d(num_samples=200, cache_dir=tmp_path / "a")
    b = data.mnist1d(num_samples=200, cache_dir=tmp_path / "b")  # generated again from scratch
    c = data.mnist1d(num_samples=200, cache_dir=tmp_path / "c", generation_seed=7)
    np.testing.assert_array_equal(a.x_train, b.x_train)
    np.testing.assert_array_equal(a.y_test, b.y_test)
    assert not np.array_equal(a.x_train, c.x_train)


# ------------------------------------------------------------------------------------ IDX
@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.int32, np.float32, np.float64])
@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_idx_roundtrip(tmp_path, dtype, suffix):
    arr = (np.arange(2 * 3 * 4) - 7).reshape(2, 3, 4).astype(dtype)
    if dtype == np.uint8:
        arr = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    path = tmp_path / f"a{suffix}"
    data.write_idx(path, arr)
    back = data.read_idx(path)
    assert back.dtype == np.dtype(dtype) and back.shape == (2, 3, 4)
    np.testing.assert_array_equal(back, arr)


def test_idx_header_layout(tmp_path):
    path = tmp_path / "labels"
    data.write_idx(path, np.array([3, 1, 4], np.uint8))
    raw = path.read_bytes()
    # magic 0x00000801 (ubyte, 1 dimension), then the size 3 as big-endian uint32
    assert raw[:8] == bytes([0, 0, 8, 1, 0, 0, 0, 3]) and raw[8:] == bytes([3, 1, 4])


def test_idx_malformed_files(tmp_path):
    good = bytes([0, 0, 8, 2, 0, 0, 0, 2, 0, 0, 0, 2, 1, 2, 3, 4])
    cases = {
        "magic": (b"\x12\x34" + good[2:], "magic number"),
        "dtype": (good[:2] + b"\x07" + good[3:], "type code 0x07"),
        "truncated": (good[:-1], "truncated"),
        "trailing": (good + b"\x00", "trailing bytes"),
        "header": (good[:6], "truncated IDX header"),
        "tiny": (b"\x00", "shorter than the 4-byte header"),
    }
    for name, (raw, message) in cases.items():
        p = tmp_path / name
        p.write_bytes(raw)
        with pytest.raises(ValueError, match=message):
            data.read_idx(p)
    bad_gz = tmp_path / "bad.gz"
    bad_gz.write_bytes(b"\x1f\x8b" + b"garbage")
    with pytest.raises(ValueError, match="gzip"):
        data.read_idx(bad_gz)
    np.testing.assert_array_equal(data.parse_idx(good), [[1, 2], [3, 4]])


# --------------------------------------------------------------------------- Fashion-MNIST
def _write_fashion(folder: Path, n_train=30, n_test=20, seed=0, gz=True):
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {"train_images": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
              "train_labels": (np.arange(n_train) % 10).astype(np.uint8),
              "test_images": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
              "test_labels": (np.arange(n_test) % 10).astype(np.uint8)}
    for key, (name, _) in data.FASHION_MNIST_FILES.items():
        data.write_idx(folder / (name if gz else name[:-3]), arrays[key])
    return arrays


@pytest.mark.parametrize("gz", [True, False])
def test_fashion_mnist_from_generated_idx(tmp_path, cache, gz):
    arrays = _write_fashion(tmp_path / "fm", gz=gz)
    ds = data.fashion_mnist(data_dir=tmp_path / "fm", normalize="none")
    assert ds.x_train.shape == (30, 28, 28, 1) and ds.x_test.shape == (20, 28, 28, 1)
    np.testing.assert_array_equal(ds.x_train[..., 0], arrays["train_images"])
    np.testing.assert_array_equal(ds.y_test, arrays["test_labels"])
    std = data.fashion_mnist(data_dir=tmp_path / "fm")
    m = arrays["train_images"].mean() / 255
    s = (arrays["train_images"] / 255).std()
    np.testing.assert_allclose(std.x_train[..., 0], (arrays["train_images"] / 255 - m) / s, atol=1e-4)
    sub = data.fashion_mnist(data_dir=tmp_path / "fm", n_train=20, seed=0)
    assert np.all(np.bincount(sub.y_train) == 2)
    # ITLIN_DATA is searched too
    os.environ["ITLIN_DATA"] = str(tmp_path / "fm")
    try:
        assert data.fashion_mnist(search_system=False, download=False).n_train == 30
    finally:
        del os.environ["ITLIN_DATA"]


def test_fashion_mnist_missing_and_malformed(tmp_path, cache):
    folder = tmp_path / "fm"
    _write_fashion(folder)
    (folder / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(data.DatasetUnavailableError, match="t10k-labels-idx1-ubyte.gz"):
        data.fashion_mnist(data_dir=folder)
    with pytest.raises(data.DatasetUnavailableError, match="download=False"):
        data.fashion_mnist(search_system=False, download=False)
    _write_fashion(folder)
    data.write_idx(folder / "train-labels-idx1-ubyte.gz", np.arange(29, dtype=np.uint8) % 10)
    with pytest.raises(ValueError, match="expected 30 labels"):
        data.fashion_mnist(data_dir=folder)
    (folder / "train-images-idx3-ubyte.gz").write_bytes(b"<html>not found</html>")
    with pytest.raises(ValueError, match="magic number"):
        data.fashion_mnist(data_dir=folder)


SYSTEM_FASHION = Path("/usr/share/datasets/fashion-mnist")


@pytest.mark.skipif(not (SYSTEM_FASHION / "train-images-idx3-ubyte.gz").is_file(),
                    reason="Debian package dataset-fashion-mnist not installed")
def test_fashion_mnist_real_files(cache):
    ds = data.fashion_mnist(download=False)
    assert ds.x_train.shape == (60000, 28, 28, 1) and ds.x_test.shape == (10000, 28, 28, 1)
    assert np.all(np.bincount(ds.y_train) == 6000) and np.all(np.bincount(ds.y_test) == 1000)
    assert ds.meta["mean"][0] == pytest.approx(0.2860, abs=1e-3)  # published Fashion-MNIST pixel mean


# ------------------------------------------------------------------------------- CIFAR-10
def _cifar_batch_bytes(x_nhwc, labels, name):
    flat = x_nhwc.transpose(0, 3, 1, 2).reshape(len(x_nhwc), 3072)  # row-major, channel-first rows
    batch = {b"batch_label": name.encode(), b"labels": [int(v) for v in labels], b"data": flat,
             b"filenames": [f"img_{i}.png".encode() for i in range(len(labels))]}
    return pickle.dumps(batch, protocol=2)


def _make_cifar(folder: Path, per_batch=12, n_test=10, skip=(), seed=0):
    """A CIFAR-10 python tarball in the original layout; returns (path, md5, arrays)."""
    rng = np.random.default_rng(seed)
    top = folder / "cifar-10-batches-py"
    top.mkdir(parents=True)
    xs, ys = [], []
    for name in data.CIFAR10_TRAIN_BATCHES + ("test_batch",):
        n = n_test if name == "test_batch" else per_batch
        x = rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
        y = np.arange(n) % 10
        if name not in skip:
            (top / name).write_bytes(_cifar_batch_bytes(x, y, name))
        xs.append(x)
        ys.append(y)
    meta = {b"label_names": [c.encode() for c in data.CIFAR10_CLASSES], b"num_cases_per_batch": per_batch,
            b"num_vis": 3072}
    (top / "batches.meta").write_bytes(pickle.dumps(meta, protocol=2))
    tar_path = folder / "cifar-10-python.tar.gz"
    with tarfile.open(tar_path, "w:gz") as tar:
        tar.add(top, arcname="cifar-10-batches-py")
    md5 = hashlib.md5(tar_path.read_bytes()).hexdigest()
    return tar_path, md5, {"x_train": np.concatenate(xs[:5]), "y_train": np.concatenate(ys[:5]),
                           "x_test": xs[5], "y_test": ys[5]}


def test_cifar10_download_verify_parse_and_cache(tmp_path, cache):
    tar_path, md5, arrays = _make_cifar(tmp_path / "src")
    url = tar_path.as_uri()
    ds = data.cifar10(url=url, md5=md5, normalize="none")
    assert ds.x_train.shape == (60, 32, 32, 3) and ds.x_test.shape == (10, 32, 32, 3)
    np.testing.assert_array_equal(ds.x_train, arrays["x_train"])
    np.testing.assert_array_equal(ds.y_test, arrays["y_test"])
    assert ds.meta["classes"][1] == "automobile"
    # layout check on one pixel: row r, column c, channel k is byte k*1024 + r*32 + c of the row
    flat = arrays["x_train"][0].transpose(2, 0, 1).reshape(-1)
    assert ds.x_train[0, 5, 7, 2] == flat[2 * 1024 + 5 * 32 + 7]
    files = _files_under(cache)
    assert "downloads/cifar-10-python.tar.gz" in files and f"cifar10/arrays-{md5}.npz" in files
    assert not any(f.endswith(".part") or "tmp" in f for f in files)
    # later loads read the cached arrays, not the source
    tar_path.unlink()
    (cache / "downloads" / "cifar-10-python.tar.gz").unlink()
    again = data.cifar10(url=url, md5=md5)
    assert again.x_train.shape == (60, 32, 32, 3)
    assert abs(float(again.x_train.mean())) < 1e-5  # standardised per channel with train statistics
    np.testing.assert_allclose(again.x_train.reshape(-1, 3).std(0), 1.0, atol=1e-4)


def test_cifar10_checksum_mismatch_leaves_nothing(tmp_path, cache):
    tar_path, md5, _ = _make_cifar(tmp_path / "src")
    with pytest.raises(data.ChecksumError, match="md5"):
        data.cifar10(url=tar_path.as_uri(), md5="0" * 32)
    with pytest.raises(data.ChecksumError):
        data.cifar10(url=tar_path.as_uri())  # the official md5 cannot match a generated file
    assert _files_under(cache) == []


def test_cifar10_missing_download_names_file_and_place(tmp_path, cache):
    url = (tmp_path / "nowhere" / "cifar-10-python.tar.gz").as_uri()
    with pytest.raises(data.DatasetUnavailableError) as err:
        data.cifar10(url=url, md5="0" * 32)
    msg = str(err.value)
    assert "cifar-10-python.tar.gz" in msg and str(cache / "downloads") in msg and "data_dir" in msg
    assert _files_under(cache) == []
    with pytest.raises(data.DatasetUnavailableError, match=r"www\.cs\.toronto\.edu.*download=False|download=False"):
        data.cifar10(download=False)
    assert _files_under(cache) == []


def test_cifar10_archive_missing_a_batch(tmp_path, cache):
    tar_path, md5, _ = _make_cifar(tmp_path / "src", skip=("data_batch_3",))
    with pytest.raises(ValueError, match="data_batch_3"):
        data.cifar10(url=tar_path.as_uri(), md5=md5)
    # the verified download is complete; no parsed arrays and no partial files were written
    assert _files_under(cache) == ["downloads/cifar-10-python.tar.gz"]


def test_cifar10_user_supplied_tarball_and_folder(tmp_path, cache):
    tar_path, md5, arrays = _make_cifar(tmp_path / "src")
    ds = data.cifar10(data_dir=tmp_path / "src", md5=md5, normalize="none")
    np.testing.assert_array_equal(ds.x_test, arrays["x_test"])
    ds = data.cifar10(data_dir=tar_path, md5=md5, normalize="none")
    np.testing.assert_array_equal(ds.x_test, arrays["x_test"])
    with pytest.raises(data.ChecksumError, match="md5=None"):
        data.cifar10(data_dir=tar_path)
    # an extracted folder (no checksum to check)
    tar_path.unlink()
    ds = data.cifar10(data_dir=tmp_path / "src", normalize="none")
    np.testing.assert_array_equal(ds.x_train, arrays["x_train"])
    (tmp_path / "src" / "cifar-10-batches-py" / "test_batch").unlink()
    with pytest.raises(data.DatasetUnavailableError, match="test_batch"):
        data.cifar10(data_dir=tmp_path / "src")
    with pytest.raises(data.DatasetUnavailableError, match="neither"):
        data.cifar10(data_dir=tmp_path / "empty")


def test_cifar_batch_rejects_foreign_pickles(tmp_path, cache):
    tar_path, md5, _ = _make_cifar(tmp_path / "src")
    evil = pickle.dumps({b"data": os.getcwd, b"labels": []}, protocol=2)
    (tmp_path / "src" / "cifar-10-batches-py" / "data_batch_1").write_bytes(evil)
    tar_path.unlink()
    with pytest.raises(ValueError, match="never contains"):
        data.cifar10(data_dir=tmp_path / "src")


def test_cifar2_classes_and_targets(tmp_path, cache):
    tar_path, md5, arrays = _make_cifar(tmp_path / "src", per_batch=20)
    # the default is Ortiz-Jimenez et al.'s split (the Ortiz chapters'): classes 0-4 against 5-9
    ds = data.cifar2(url=tar_path.as_uri(), md5=md5)
    assert ds.n_train == arrays["y_train"].size and ds.num_outputs == 2 and ds.task == "classification"
    np.testing.assert_array_equal(ds.y_train, (arrays["y_train"] >= 5).astype(np.int32))
    ortiz = data.cifar2(url=tar_path.as_uri(), md5=md5, target="pm1")
    np.testing.assert_array_equal(ortiz.y_train[:, 0], np.where(arrays["y_train"] >= 5, 1.0, -1.0))
    # two single classes on request
    ds = data.cifar2(url=tar_path.as_uri(), md5=md5, classes=(0, 1))
    keep = np.isin(arrays["y_train"], [0, 1])
    assert ds.n_train == keep.sum() and ds.num_outputs == 2 and ds.task == "classification"
    np.testing.assert_array_equal(ds.y_train, arrays["y_train"][keep])
    assert ds.meta["classes"] == ("airplane", "automobile")
    pm = data.cifar2(url=tar_path.as_uri(), md5=md5, target="pm1", classes=("cat", "dog"))
    keep = np.isin(arrays["y_train"], [3, 5])
    expected = np.where(arrays["y_train"][keep] == 5, 1.0, -1.0)
    assert pm.y_train.shape == (keep.sum(), 1) and pm.task == "regression"
    np.testing.assert_array_equal(pm.y_train[:, 0], expected)
    sub = pm.subset(n_train=6, seed=0)
    assert np.bincount(sub.meta["labels_train"]).tolist() == [3, 3]
    np.testing.assert_array_equal(sub.y_train[:, 0], 2.0 * sub.meta["labels_train"] - 1)
    with pytest.raises(ValueError, match="unknown class"):
        data.cifar2(url=tar_path.as_uri(), md5=md5, classes=("cat", "unicorn"))


# -------------------------------------------------------------------- teacher-labelled images
def test_teacher_images_on_digits(cache):
    ds = data.teacher_images(steps=60)
    assert ds.x_train.shape == (1497, 64) and ds.y_train.shape == (1497, 10) and ds.x_test.shape == (300, 64)
    assert ds.task == "regression" and ds.num_outputs == 10
    np.testing.assert_allclose(ds.y_train.sum(1), 1.0, atol=1e-5)  # softmax outputs
    t = ds.meta["teacher"]
    assert t["w1"].shape == (64, 50) and t["w2"].shape == (50, 10)
    # targets are the softmax of the stored teacher's logits
    logits = np.maximum(ds.x_test @ t["w1"] + t["b1"], 0) @ t["w2"] + t["b2"]
    p = np.exp(logits - logits.max(1, keepdims=True))
    np.testing.assert_allclose(ds.y_test, p / p.sum(1, keepdims=True), atol=1e-5)
    assert t["accuracy_on_its_training_set"] > 0.8
    # inputs are the standardised digits, flattened
    np.testing.assert_allclose(ds.x_train, data.digits().x_train.reshape(1497, -1))
    assert len([f for f in _files_under(cache) if f.startswith("teacher_images")]) == 1
    again = data.teacher_images(steps=60, n_train=100, seed=0)
    assert np.bincount(again.meta["labels_train"]).min() == 10
    np.testing.assert_array_equal(again.y_train, ds.y_train[again.meta["train_index"]])


# ---------------------------------------------------------------------------- augmentation
def test_augment_crops_flips_and_is_deterministic():
    x = jnp.arange(5 * 6 * 7 * 2, dtype=jnp.float32).reshape(5, 6, 7, 2)
    key = jax.random.PRNGKey(0)
    np.testing.assert_array_equal(augment(key, x, pad=0, flip=False), x)
    out = augment(key, x, pad=2)
    assert out.shape == x.shape and out.dtype == x.dtype
    np.testing.assert_array_equal(out, augment(key, x, pad=2))
    assert not np.array_equal(out, augment(jax.random.PRNGKey(1), x, pad=2))
    padded = np.pad(np.asarray(x), ((0, 0), (2, 2), (2, 2), (0, 0)))
    for i in range(5):  # every output is a 6x7 window of the padded image, possibly mirrored
        windows = [padded[i, a:a + 6, b:b + 7] for a in range(5) for b in range(5)]
        assert any(np.array_equal(out[i], w) or np.array_equal(out[i], w[:, ::-1]) for w in windows)
    flipped = np.asarray(augment(jax.random.PRNGKey(3), jnp.tile(x, (20, 1, 1, 1)), pad=0))
    mirrored = [np.array_equal(f, np.asarray(x)[i % 5][:, ::-1]) for i, f in enumerate(flipped)]
    assert 0 < sum(mirrored) < 100  # both outcomes occur
    jitted = jax.jit(lambda k, v: augment(k, v, pad=1))
    assert jitted(key, x).shape == x.shape
    with pytest.raises(ValueError, match="augment_1d"):
        augment(key, x[..., 0])


def test_augment_1d_shifts():
    x = jnp.arange(4 * 10, dtype=jnp.float32).reshape(4, 10, 1)
    out = np.asarray(augment_1d(jax.random.PRNGKey(0), x, max_shift=3))
    for i in range(4):
        assert any(np.array_equal(out[i], np.roll(np.asarray(x[i]), s, axis=0)) for s in range(-3, 4))
    zeros = np.asarray(augment_1d(jax.random.PRNGKey(0), x, max_shift=3, mode="zeros"))
    assert zeros.shape == x.shape
    np.testing.assert_array_equal(augment_1d(jax.random.PRNGKey(0), x, max_shift=0), x)
    with pytest.raises(ValueError, match="augment"):
        augment_1d(jax.random.PRNGKey(0), x[..., 0])
