import os

import pytest

# Progress lines stay quiet in the test suite, and JAX stays on the CPU.
os.environ.setdefault("ITLIN_QUIET", "1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from itlin.book import limit_blas_threads  # noqa: E402

limit_blas_threads()  # as the book and the benchmarks do (itlin itself changes nothing on import)


@pytest.fixture(scope="session", autouse=True)
def session_results(tmp_path_factory):
    """One results folder for the whole session (``ITLIN_RESULTS``): an experiment that a test
    module runs at ``scale="tiny"`` is loaded, not recomputed, when its chapter executes with the
    same parameters (and the other way round). Nothing cached outside the session is reused;
    tests that need a fresh folder pass their own ``results_dir``."""
    root = tmp_path_factory.mktemp("results")
    mp = pytest.MonkeyPatch()
    mp.setenv("ITLIN_RESULTS", str(root))
    yield root
    mp.undo()
