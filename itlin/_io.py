"""Crash-safe files for the experiment runner and the data cache (no public API).

Every file is written to a temporary name in its destination folder, flushed to disk and moved
into place with ``os.replace``, so a reader sees either the old file or the complete new one,
never a torn write, even if the writer is killed with SIGKILL halfway.

Results are nested dicts of arrays. They are stored in ``.npz`` files (no pickling) with the
tree's key paths in a JSON member ``__structure__``, so that keys containing ``/`` (such as
``eval/test/accuracy`` from :meth:`itlin.History.arrays`) come back exactly as they went in.
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

STRUCTURE_KEY = "__structure__"
META_KEY = "__meta__"
DIGEST_KEY = "__digest__"
_LEAF = "__leaf__"


# --------------------------------------------------------------------------------- writing
def _fsync_dir(folder: Path):
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # not possible on every platform (Windows); the rename is atomic regardless
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path, write: Callable[[Any], None], *, binary: bool = True, fsync: bool = True):
    """Call ``write(fh)`` on a temporary file beside ``path``, then move it to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    try:
        with os.fdopen(fd, "wb" if binary else "w") as fh:
            write(fh)
            fh.flush()
            if fsync:
                os.fsync(fh.fileno())
        umask = os.umask(0)  # mkstemp makes the file private; give it the usual permissions
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
        if fsync:
            _fsync_dir(path.parent)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_json(path, obj, *, fsync: bool = True):
    """Write ``jsonable(obj)`` atomically (keys in insertion order, so run order is kept)."""
    text = json.dumps(jsonable(obj), indent=1, allow_nan=False) + "\n"
    atomic_write(path, lambda fh: fh.write(text.encode("utf-8")), fsync=fsync)


def ensure_writable(path, what: str) -> Path:
    """Create ``path`` if needed and check that a file can be written in it; otherwise raise an
    ``OSError`` whose one-line message names ``what`` (e.g. the environment variable to change)."""
    p = Path(path).expanduser()
    try:
        p.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-check-", dir=p)
        os.close(fd)
        os.remove(probe)
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise OSError(f"{p} is not a writable folder ({reason}); {what}.") from None
    return p


def read_json(path):
    """The JSON object in ``path``, or ``None`` if it is missing or unreadable."""
    try:
        with open(path, "rb") as fh:
            obj = json.loads(fh.read().decode("utf-8"))
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


def file_digest(path, algorithm: str = "sha256") -> str:
    """Hex digest of a file's bytes (read in 1 MiB blocks), by any :mod:`hashlib` algorithm."""
    h = hashlib.new(algorithm)
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sha256_file(path) -> str:
    return file_digest(path, "sha256")


def save_npz(path, arrays: Mapping[str, np.ndarray], *, fsync: bool = True, checksum: bool = True,
             compress: bool = False):
    """Write a flat dict of arrays atomically (an ``.npz``, zip-deflated with ``compress``, which
    :func:`load_npz` reads the same); returns its sha256 (``None`` with ``checksum=False``)."""
    save = np.savez_compressed if compress else np.savez
    atomic_write(path, lambda fh: save(fh, **arrays), fsync=fsync)
    return sha256_file(path) if checksum else None


def load_npz(path) -> dict:
    """All arrays of an ``.npz`` (read fully, so a damaged member raises here, not later)."""
    with np.load(path, allow_pickle=False) as z:
        return {k: np.array(z[k]) for k in z.files}


# --------------------------------------------------------------------------------- json
def jsonable(obj):
    """A JSON-safe copy: infinities and NaN become the strings ``"inf"``/``"-inf"``/``"nan"``,
    tuples become lists, numpy scalars become Python numbers. Raises TypeError otherwise."""
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, numbers.Integral):
        return int(obj)
    if isinstance(obj, numbers.Real):
        v = float(obj)
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return v
    if isinstance(obj, Mapping):
        out = {}
        for k, v in obj.items():
            if not isinstance(k, str):
                raise TypeError(f"JSON keys must be strings, got {k!r}.")
            out[k] = jsonable(v)
        return out
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray) or hasattr(obj, "__array__"):  # numpy or jax arrays
        arr = np.asarray(obj)
        if arr.dtype != object:
            return jsonable(arr.tolist())
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"{obj!r} ({type(obj).__name__}) cannot be stored as JSON.")


# --------------------------------------------------------------------------------- trees
def _as_array(value, where: str) -> np.ndarray:
    if value is None:
        raise TypeError(f"result {where!r} is None; store arrays, numbers or strings.")
    try:
        arr = np.asarray(value)
    except Exception as err:  # e.g. ragged lists
        raise TypeError(f"result {where!r} cannot be stored as an array ({err}).") from err
    if arr.dtype == object:
        raise TypeError(f"result {where!r} is not an array of numbers or strings "
                        f"(got {type(value).__name__}); store arrays, numbers or strings.")
    return arr


def flatten_tree(tree, *, what: str = "result") -> tuple[dict, list]:
    """Flatten a nested dict of arrays into ``({"a/b": array}, [["a", "b"], ...])``.

    A non-dict ``tree`` is a single leaf. Keys must be strings. Raises TypeError for values that
    are not arrays of numbers or strings (object arrays would need pickling).
    """
    flat, paths = {}, []

    def walk(node, path):
        if isinstance(node, Mapping):
            for k, v in node.items():
                if not isinstance(k, str):
                    raise TypeError(f"{what} keys must be strings, got {k!r} under {'/'.join(path) or 'the top'}.")
                walk(v, path + [k])
            return
        name = "/".join(path) if path else _LEAF
        if name in flat or name in (STRUCTURE_KEY, META_KEY):
            raise ValueError(f"{what} key {name!r} is ambiguous (two key paths join to it); rename one.")
        flat[name] = _as_array(node, name)
        paths.append(list(path))

    walk(tree, [])
    return flat, paths


def unflatten_tree(flat: Mapping[str, np.ndarray], paths: list):
    """Inverse of :func:`flatten_tree`."""
    if paths == [[]]:
        return flat[_LEAF]
    root: dict = {}
    for path in paths:
        node = root
        for k in path[:-1]:
            node = node.setdefault(k, {})
        node[path[-1]] = flat["/".join(path)]
    return root


def content_digest(flat: Mapping[str, np.ndarray], paths: list, meta_text: str = "") -> str:
    """sha256 over every array's name, dtype, shape and bytes, the structure and the meta."""
    h = hashlib.sha256()
    h.update(json.dumps(paths).encode())
    h.update(meta_text.encode())
    for name in sorted(flat):
        a = np.ascontiguousarray(flat[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def save_tree(path, tree, meta=None, *, what: str = "result", fsync: bool = True,
              checksum: bool = True, compress: bool = False) -> tuple:
    """Save a nested dict of arrays (and optional JSON ``meta``) to one ``.npz`` atomically.

    Returns ``(sha256, flat, paths)``: the file's checksum (``None`` with ``checksum=False``;
    the content digest stored inside the file protects it either way) and the flattened tree.
    """
    flat, paths = flatten_tree(tree, what=what)
    members = dict(flat)
    members[STRUCTURE_KEY] = np.asarray(json.dumps(paths))
    meta_text = "" if meta is None else json.dumps(jsonable(meta), allow_nan=False)
    if meta is not None:
        members[META_KEY] = np.asarray(meta_text)
    members[DIGEST_KEY] = np.asarray(content_digest(flat, paths, meta_text))
    return save_npz(path, members, fsync=fsync, checksum=checksum, compress=compress), flat, paths


def load_tree(path) -> tuple[dict, list, dict]:
    """``(flat, paths, meta)`` from a file written by :func:`save_tree`; raises ValueError if it
    is damaged (unreadable, or its content does not match the digest stored with it)."""
    try:
        members = load_npz(path)
    except Exception as err:
        raise ValueError(f"{path} is unreadable ({type(err).__name__}: {err})") from err
    for key in (STRUCTURE_KEY, DIGEST_KEY):
        if key not in members:
            raise ValueError(f"{path} has no {key} member (damaged, or not written by itlin).")
    paths = json.loads(str(members.pop(STRUCTURE_KEY)))
    digest = str(members.pop(DIGEST_KEY))
    meta_text = str(members.pop(META_KEY)) if META_KEY in members else ""
    names = {"/".join(p) if p else _LEAF for p in paths}
    if names != set(members):
        raise ValueError(f"{path}: members do not match the stored structure.")
    if content_digest(members, paths, meta_text) != digest:
        raise ValueError(f"{path}: content does not match its digest (damaged).")
    return members, paths, (json.loads(meta_text) if meta_text else {})


__all__ = [
    "atomic_write",
    "content_digest",
    "ensure_writable",
    "file_digest",
    "flatten_tree",
    "jsonable",
    "load_npz",
    "load_tree",
    "read_json",
    "save_npz",
    "save_tree",
    "sha256_file",
    "unflatten_tree",
    "write_json",
]
