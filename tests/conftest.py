import os

# Progress lines stay quiet in the test suite, and JAX stays on the CPU.
os.environ.setdefault("ITLIN_QUIET", "1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from itlin.book import limit_blas_threads  # noqa: E402

limit_blas_threads()  # as the book and the benchmarks do (itlin itself changes nothing on import)
