"""The cache and data directories, atomic cache entries, checksums and verified downloads."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from .. import _io

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
