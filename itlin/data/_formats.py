"""File formats: IDX files (MNIST / Fashion-MNIST) and CIFAR-10's python batches."""

from __future__ import annotations

import gzip
import io
import pickle
import struct
import tarfile
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from ._files import DatasetUnavailableError

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
# CIFAR-10 python batches
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
