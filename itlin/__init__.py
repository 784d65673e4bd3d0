"""itlin: iterative linearisation, damped Gauss-Newton and linearised networks in JAX.

On import, itlin limits OpenBLAS/MKL (used by jaxlib's CPU LAPACK calls through SciPy: ``eigh``,
``cholesky``, ``solve``) to one thread. Their thread pools otherwise compete with XLA's own and,
measured on a 2-core machine, turned a 500 x 500 ``eigh`` from 11 ms into up to 1 s and a
kernel-form Gauss-Newton step from 70 ms into 3 s. Set ``ITLIN_BLAS_THREADS`` to another number
(or to ``keep`` to leave the settings alone) before importing itlin.
"""

import os as _os

__version__ = "0.1.0"


def _limit_blas_threads():
    n = _os.environ.get("ITLIN_BLAS_THREADS", "1").strip().lower()
    if n in ("", "keep", "auto"):
        return
    for var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        _os.environ.setdefault(var, n)  # libraries loaded from now on
    try:  # libraries already loaded
        from threadpoolctl import threadpool_limits

        threadpool_limits(int(n), user_api="blas")
    except Exception:  # threadpoolctl missing or a library it cannot drive: nothing to limit
        pass


_limit_blas_threads()
