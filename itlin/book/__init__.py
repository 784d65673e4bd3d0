"""The book's machinery, on top of the library: experiments, the runner, plots and widgets.

* :mod:`~itlin.book.study` — the contract between an experiment and its chapter: typed
  parameters (:class:`~itlin.book.study.Params`), :class:`~itlin.book.study.Experiment`, the
  registry; :mod:`~itlin.book.experiments` — the experiments, one module each, grouped by paper;
* :mod:`~itlin.book.runner` — run an experiment once: cached results, checkpoints and resume,
  divergence status; by concern in :mod:`~itlin.book.store` (records on disk, checksums,
  locks), :mod:`~itlin.book.checkpoints`, :mod:`~itlin.book.records` (recorded runs, matching,
  pooling, seed comparison) and :mod:`~itlin.book.provenance`;
* :mod:`~itlin.book.verdicts`, :mod:`~itlin.book.render`, :mod:`~itlin.book.plans` — claims
  judged over seeds (on the gaps and intervals of :mod:`~itlin.book.intervals`), their tables,
  and which records were planned in advance;
  :mod:`~itlin.book.recheck` and :mod:`~itlin.book.verify` (``python -m itlin.book.verify``)
  re-judge the records with this machine's seeds; :mod:`~itlin.book.findings` — the Findings
  page (``python -m itlin.book.findings``);
* :mod:`~itlin.book.chapters` — the computations and texts of the chapters that read as prose;
* :mod:`~itlin.book.run` — execute a chapter with other parameters (``python -m itlin.book.run``);
* :mod:`~itlin.book.plotting`, :mod:`~itlin.book.widgets`, :mod:`~itlin.book.diagrams` — figures,
  static and live demos;
* :mod:`~itlin.book.derivations` — numerical checks behind the derivation chapters;
* :mod:`~itlin.book.benchmarking` — reading benchmark results.

Needs the ``book`` extra (matplotlib, ipywidgets, papermill, jupytext, Jupyter Book). The core
never imports this package. Chapters start with :func:`setup`.
"""

from __future__ import annotations

import contextlib
import os

from . import registry


def _find_experiment(name) -> None:
    """:data:`itlin.book.registry.finder`: experiment ``name``'s module (every one for ``None``)
    imported, so that the layers under the experiments read their declarations without importing them."""
    from . import experiments

    with contextlib.suppress(experiments.UnknownExperimentError):
        experiments.names() if name is None else experiments.get(name)


registry.finder = _find_experiment


def limit_blas_threads(n=None) -> None:
    """Limit OpenBLAS/MKL (behind jaxlib's CPU LAPACK calls: ``eigh``, ``cholesky``, ``solve``)
    to ``n`` threads (default ``$ITLIN_BLAS_THREADS``, else 1; ``"keep"`` leaves them alone).

    Their thread pools otherwise compete with XLA's own: measured on a 2-core machine, a
    500 x 500 ``eigh`` went from 11 ms to up to 1 s and a kernel-form Gauss-Newton step from
    70 ms to 3 s. Importing itlin changes nothing; the book, the tests and the benchmarks call
    this explicitly.
    """
    value = str(os.environ.get("ITLIN_BLAS_THREADS", "1") if n is None else n).strip().lower()
    if value in ("", "keep", "auto"):
        return
    for var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, value)  # libraries loaded from now on
    try:  # libraries already loaded
        from threadpoolctl import threadpool_limits

        threadpool_limits(int(value), user_api="blas")
    except Exception:  # threadpoolctl missing or a library it cannot drive: nothing to limit
        pass


def share_compiled_programs(path=None) -> None:
    """Keep JAX's compiled programs on disk (JAX's own persistent compilation cache), so that the
    chapters of a build, each in its own kernel, and the tests compile a program once: in
    ``path``, else ``$ITLIN_COMPILE_CACHE``, else ``<cache>/xla`` under :func:`itlin.data.cache_dir`
    (``$ITLIN_CACHE`` or the user cache). ``ITLIN_COMPILE_CACHE=off`` leaves JAX's setting alone.

    The cache changes no result (the same program runs); it saves the compile time, up to half of
    a small run on the CPU. Programs that compile in under half a second are not kept."""
    value = str(path if path is not None else os.environ.get("ITLIN_COMPILE_CACHE", "")).strip()
    if value.lower() in ("off", "0", "no", "false"):
        return
    import jax

    if not value:
        from ..data import cache_dir

        value = str(cache_dir() / "xla")
    jax.config.update("jax_compilation_cache_dir", value)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)


def setup() -> None:
    """What every chapter does first: :func:`limit_blas_threads`, :func:`share_compiled_programs`
    and the book's figure style (:func:`itlin.book.plotting.use_house_style`)."""
    limit_blas_threads()
    share_compiled_programs()
    from .plotting import use_house_style

    use_house_style()


__all__ = ["limit_blas_threads", "setup", "share_compiled_programs"]
