import os

import pytest

# Progress lines stay quiet in the test suite, and JAX stays on the CPU.
os.environ.setdefault("ITLIN_QUIET", "1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# XLA compiles without its backend optimisations (unless XLA_FLAGS sets a level): most of the
# suite's time is compiling small programs that then run a few steps, and at level 0 the whole
# suite took 816 s against 1,006 s at the default level (one run each, 2 cores). The tests'
# identities and tolerances hold at either level; compiled code differs in its last bits, so the
# one test against stored digests keeps a reference for each (tests/test_fig45.py). With
# ITLIN_TEST_XLA_DEFAULT=1 the suite compiles as the book runs (XLA's defaults). The chapters'
# kernels inherit the setting (they read the environment when they start).
if not os.environ.get("ITLIN_TEST_XLA_DEFAULT") and "xla_backend_optimization_level" not in os.environ.get(
        "XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0").strip()

from itlin.book import limit_blas_threads  # noqa: E402

limit_blas_threads()  # as the book and the benchmarks do (itlin itself changes nothing on import)


#: the most test processes ``-n auto`` starts: the book's tests (one file, kept on one process)
#: take about ten minutes at any count, and every process holds its own compiled programs
MAX_WORKERS = 4


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (pyproject.toml's default): one process per core, at most :data:`MAX_WORKERS`."""
    return max(1, min(MAX_WORKERS, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                      else os.cpu_count() or 1))


def shared_folder(tmp_path_factory, name: str):
    """A folder of this test session's, the same for every pytest-xdist worker (their temporary
    folders share a parent): the workers of one session compute each experiment once (the
    runner's lock makes a second worker wait for the first, then load its result) and compile
    each program once. Without xdist, a fresh folder under the session's temporary folder."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        folder = tmp_path_factory.getbasetemp().parent / name
        folder.mkdir(exist_ok=True)
        return folder
    return tmp_path_factory.mktemp(name)


@pytest.fixture(scope="session")
def session_folder(tmp_path_factory):
    """``session_folder(name)``: :func:`shared_folder` for tests."""
    return lambda name: shared_folder(tmp_path_factory, name)


@pytest.fixture(scope="session", autouse=True)
def session_results(tmp_path_factory):
    """One results folder for the whole session (``ITLIN_RESULTS``): an experiment that a test
    module runs at ``scale="tiny"`` is loaded, not recomputed, when its chapter executes with the
    same parameters (and the other way round). Nothing cached outside the session is reused;
    tests that need a fresh folder pass their own ``results_dir``."""
    root = shared_folder(tmp_path_factory, "results")
    mp = pytest.MonkeyPatch()
    mp.setenv("ITLIN_RESULTS", str(root))
    # compiled programs shared by this process and the chapters' kernels (JAX's persistent
    # cache), in a folder of this session's: a program compiles once per session
    from itlin.book import share_compiled_programs

    compiled = shared_folder(tmp_path_factory, "xla")
    mp.setenv("ITLIN_COMPILE_CACHE", str(compiled))
    share_compiled_programs(compiled)
    yield root
    mp.undo()


@pytest.fixture(scope="module", autouse=True)
def release_compiled_programs():
    """After each test module, drop JAX's compiled programs. The whole suite compiles thousands
    of them in one process; each keeps memory mappings for its code, and a long run passed
    Linux's default limit of 65,530 mappings per process (``vm.max_map_count``), at which the
    next compilation crashed the interpreter (segmentation fault inside XLA)."""
    yield
    import gc

    import jax

    jax.clear_caches()
    gc.collect()
