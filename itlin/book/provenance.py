"""Provenance of a run: the git commit, device, processor and clock a record keeps (what can change
a run's last bits). Part of :mod:`itlin.book.runner`, which re-exports these names."""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
import subprocess
from pathlib import Path
from typing import Optional


def _git_commit() -> tuple:
    """``(commit, dirty)`` of the checkout itlin is imported from, or ``(None, None)``."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10)
        if out.returncode != 0:
            return None, None
        commit = out.stdout.strip() or None
        st = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                            capture_output=True, text=True, timeout=10)
        dirty = bool(st.stdout.strip()) if st.returncode == 0 else None
        return commit, dirty
    except Exception:  # git missing, not a repository, timeout: never fail because of git
        return None, None


def processor() -> str:
    """The host processor, as far as it changes a CPU run's numbers: vendor, model name, family,
    model and a digest of the vector-instruction flags of ``/proc/cpuinfo`` (XLA compiles CPU
    code for the host's instruction set, so one program gives other last bits on another
    processor, and training makes them grow). The machine's name where there is no
    ``/proc/cpuinfo``.

    >>> processor() == processor() != ""
    True
    """
    import platform

    fields: dict = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        return platform.processor() or platform.machine() or "unknown"
    flags = sorted(f for f in fields.get("flags", "").split()
                   if f.startswith(("avx", "fma", "f16c", "bmi", "amx", "sse", "vnni", "vaes", "vpclmul")))
    which = hashlib.sha256(" ".join(flags).encode()).hexdigest()[:8]
    return (f"{fields.get('vendor_id', platform.machine())} {fields.get('model name', platform.processor())} "
            f"(family {fields.get('cpu family', '?')}, model {fields.get('model', '?')}, flags {which})")


def cores() -> Optional[int]:
    """The number of cores this process may run on (its CPU affinity; all of the machine's where
    the system does not say): XLA's CPU thread pool is sized from it, and the split of a
    reduction over threads changes the last bits of its result.

    >>> cores() >= 1
    True
    """
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count()


def jaxlib_build() -> Optional[str]:
    """jaxlib's version and the commit it was built from (``"0.10.2 (990e6a0b8413)"``): the
    compiler whose kernels give a CPU run its last bits."""
    try:
        import jaxlib.version as v
    except ImportError:  # pragma: no cover
        return None
    commit = getattr(v, "_git_hash", None)
    return v.__version__ + (f" ({commit[:12]})" if commit else "")


def machine_fields() -> dict:
    """What this machine records about itself besides its device, each of which can change a CPU
    run's last bits: :func:`processor`, ``cores`` (:func:`cores`), ``xla_flags`` (the
    ``XLA_FLAGS`` in force, ``""`` for none) and ``jaxlib`` (:func:`jaxlib_build`)."""
    return {"processor": processor(), "cores": cores(), "xla_flags": os.environ.get("XLA_FLAGS", ""),
            "jaxlib": jaxlib_build()}


def _device() -> dict:
    try:
        import jax

        devs = jax.devices()
        d = devs[0]
        return {"device": f"{d.platform} ({d.device_kind})", "device_count": len(devs), **machine_fields(),
                "jax_version": jax.__version__, "x64": bool(jax.config.read("jax_enable_x64"))}
    except Exception as err:  # pragma: no cover
        return {"device": f"unknown ({err})", "device_count": None, "jax_version": None, "x64": None}


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


__all__ = ["cores", "jaxlib_build", "machine_fields", "processor"]
