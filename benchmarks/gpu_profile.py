"""Where the time goes on an accelerator: the kernel-form Gauss-Newton step at Arbel et al.'s
scale taken apart, and the per-step cost of the headline experiments' trainers at paper width.

    python benchmarks/gpu_profile.py --json gpu_profile.json

Part 1 (float64, N=500, d=10, M=5000, P=55,000): the parts of a damped Gauss-Newton step (the
closed-form NTK, the Jacobian by ``jacrev``, ``J J^T``, a full ``eigh``, eigenvalues alone, a
Cholesky solve, the final ``J^T z``) and whole steps built three ways: the naive one (Jacobian,
``J J^T``, ``eigh``), the kernel form with ``eigh``, the kernel form with eigenvalues alone
for the damping and a Cholesky solve for the system, and the kernel form with no
eigendecomposition at all (``sigma_min`` by :func:`itlin.smallest_eigenvalue`, inverse squaring,
then the Cholesky solve). All the steps are checked against each other before they are timed;
the ``sigma_min`` variants against a float64 ``eigh``.

Part 2: median milliseconds per training step of the trainers that the Fig. 2, 3 and 8
experiments build at paper width (50 channels), timed over whole compiled chunks, so that a
recorded run can be sized to the time a device is lent for.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import optax


def _block(x):
    return jax.block_until_ready(x)


def _time(fn, *args, repeats: int = 20):
    _block(fn(*args))
    t = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        _block(fn(*args))
        t.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(t)


def profile_gauss_newton(repeats: int) -> dict:
    from itlin import data, models, smallest_eigenvalue

    with jax.enable_x64(True):
        ds = data.teacher_student(n_train=500, n_test=10)
        x, y = jnp.asarray(ds.x_train, jnp.float64), jnp.asarray(ds.y_train, jnp.float64)
        model = models.mean_field(width=5000, tau0=1.0)
        p0, _ = model.init(jax.random.PRNGKey(0), x[:2])
        p0 = {"u": jnp.asarray(p0["u"], jnp.float64),
              "v": 0.1 * jax.random.normal(jax.random.PRNGKey(1), p0["v"].shape, jnp.float64)}
        f = model.bind()
        flat0, unravel = jax.flatten_util.ravel_pytree(p0)
        n = x.shape[0]

        def resid(p):
            return (f(p, x) - y).reshape(-1) / n  # mean squared loss, as the benchmark

        ntk = jax.jit(lambda p: models.mean_field_ntk(p, x))
        jac = jax.jit(lambda p: jax.jacrev(lambda v: f(unravel(v), x).reshape(-1))(jax.flatten_util.ravel_pytree(p)[0]))
        K = _block(ntk(p0))
        J = _block(jac(p0))
        g = resid(p0)
        parts = {
            "closed_form_ntk": _time(ntk, p0, repeats=repeats),
            "jacrev_jacobian": _time(jac, p0, repeats=repeats),
            "J_JT": _time(jax.jit(lambda a: a @ a.T), J, repeats=repeats),
            "eigh": _time(jax.jit(jnp.linalg.eigh), K, repeats=repeats),
            "eigvalsh": _time(jax.jit(jnp.linalg.eigvalsh), K, repeats=repeats),
            "cholesky_solve": _time(jax.jit(lambda k, r: jax.scipy.linalg.cho_solve(
                jax.scipy.linalg.cho_factor(k + 1e-3 * jnp.eye(n)), r)), K, g, repeats=repeats),
            "vjp_JT_z": _time(jax.jit(lambda p, z: jax.vjp(lambda q: f(q, x).reshape(-1), p)[1](z)), p0, g,
                              repeats=repeats),
        }

        def naive(p):
            flat, unr = jax.flatten_util.ravel_pytree(p)
            Jm = jax.jacrev(lambda v: f(unr(v), x).reshape(-1))(flat)
            s, V = jnp.linalg.eigh(Jm @ Jm.T)
            lam = jnp.maximum(s[0], 1e-7)
            z = V @ ((V.T @ resid(p)) / (s + lam))
            return unr(flat - Jm.T @ z)

        def kernel_eigh(p):
            k = ntk(p)
            s, V = jnp.linalg.eigh(0.5 * (k + k.T))
            lam = jnp.maximum(s[0], 1e-7)
            z = V @ ((V.T @ resid(p)) / (s + lam))
            (d,) = jax.vjp(lambda q: f(q, x).reshape(-1), p)[1](z)
            return jax.tree_util.tree_map(lambda a, b: a - b, p, d)

        def kernel_chol(p):
            k = ntk(p)
            k = 0.5 * (k + k.T)
            lam = jnp.maximum(jnp.linalg.eigvalsh(k)[0], 1e-7)
            z = jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(k + lam * jnp.eye(n)), resid(p))
            (d,) = jax.vjp(lambda q: f(q, x).reshape(-1), p)[1](z)
            return jax.tree_util.tree_map(lambda a, b: a - b, p, d)

        def kernel_chol_inverse_squaring(p):
            k = ntk(p)
            k = 0.5 * (k + k.T)
            lam = jnp.maximum(smallest_eigenvalue(k), 1e-7)
            z = jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(k + lam * jnp.eye(n)), resid(p))
            (d,) = jax.vjp(lambda q: f(q, x).reshape(-1), p)[1](z)
            return jax.tree_util.tree_map(lambda a, b: a - b, p, d)

        variants = {}
        for vname, fn in (("eigh_jacobi", lambda k: jax.lax.linalg.eigh(k, implementation=jax.lax.linalg.EighImplementation.JACOBI)[1][0]),
                          ("eigh_smallest_only", lambda k: jax.lax.linalg.eigh(k, subset_by_index=(0, 1))[1][0]),
                          ("eigvalsh_float32", lambda k: jnp.linalg.eigvalsh(k.astype(jnp.float32))[0]),
                          ("inverse_squaring", smallest_eigenvalue),
                          ("inverse_squaring_float32", lambda k: smallest_eigenvalue(k.astype(jnp.float32)))):
            try:
                got = float(jax.jit(fn)(K))
                variants[vname] = {"ms": _time(jax.jit(fn), K, repeats=repeats),
                                   "relative_error": abs(got - float(jnp.linalg.eigvalsh(K)[0])) / float(jnp.linalg.eigvalsh(K)[0])}
            except Exception as err:  # noqa: BLE001 - an unsupported variant is a finding
                variants[vname] = {"error": f"{type(err).__name__}: {str(err)[:200]}"}
        parts["sigma_min_variants"] = variants
        steps = {"naive": jax.jit(naive), "kernel_eigh": jax.jit(kernel_eigh),
                 "kernel_eigvalsh_cholesky": jax.jit(kernel_chol),
                 "kernel_cholesky_inverse_squaring": jax.jit(kernel_chol_inverse_squaring)}
        ref = jax.flatten_util.ravel_pytree(steps["naive"](p0))[0]
        agree = {name: float(jnp.linalg.norm(jax.flatten_util.ravel_pytree(fn(p0))[0] - ref) / jnp.linalg.norm(ref - flat0))
                 for name, fn in steps.items()}
        step_ms = {name: _time(fn, p0, repeats=repeats) for name, fn in steps.items()}
    return {"gn_parts_ms": parts, "gn_steps_ms": step_ms, "gn_steps_relative_difference_to_naive": agree,
            "gn_speedup": {name: step_ms["naive"] / v for name, v in step_ms.items()}}


def profile_trainers(chunk: int, repeats: int) -> dict:
    from itlin import data, models
    from itlin.book.experiments.main import _setup as S
    from itlin import iterative_linearisation, run as itlin_run

    out = {}
    configs = []
    m1 = data.load("mnist1d")
    configs += [("fig2 full mnist1d K=1", m1, "mnist1d", dict(schedule=1), optax.sgd(1e-3)),
                ("fig2 full mnist1d K=inf", m1, "mnist1d", dict(schedule=S.schedule(10 ** 9)), optax.sgd(1e-3)),
                ("fig2 mini mnist1d K=1", m1, "mnist1d", dict(schedule=1, batch_size=256), optax.sgd(1e-4)),
                ("fig2 mini mnist1d K=inf", m1, "mnist1d", dict(schedule=S.schedule(10 ** 9), batch_size=256),
                 optax.sgd(1e-4))]
    try:
        fm = data.load("fashion_mnist")
    except Exception as err:  # noqa: BLE001 - report and go on
        out["fashion_mnist_error"] = f"{type(err).__name__}: {err}"
        fm = None
    if fm is not None:
        aug = S.augmenter("fashion_mnist")
        configs += [("fig3 fashion K=1 aug", fm, "fashion_mnist", dict(schedule=1, batch_size=256, augment=aug),
                     optax.sgd(1e-3, momentum=0.9)),
                    ("fig3 fashion K=inf aug", fm, "fashion_mnist",
                     dict(schedule=S.schedule(10 ** 9), batch_size=256, augment=aug), optax.sgd(1e-3, momentum=0.9)),
                    ("fig8 fashion Adam K=inf", fm, "fashion_mnist",
                     dict(schedule=S.schedule(10 ** 9), batch_size=256), optax.adam(1e-3))]
    for name, ds, dsname, kw, opt in configs:
        model = S.model_for(dsname, 50, ds.num_outputs)
        x, y = jnp.asarray(ds.x_train), jnp.asarray(ds.y_train)
        params, mstate = model.init(jax.random.PRNGKey(0), x[:2])
        n = chunk if kw.get("batch_size") else max(10, chunk // 10)
        batch_size = kw.pop("batch_size", None)
        tr = iterative_linearisation(model, opt, kw.pop("schedule"), **kw)
        st = S.init_state(tr, params, mstate, 10 ** 9, 2 ** 31 - 1)  # K = inf: no relinearisation in the run
        t0 = time.perf_counter()
        st, _ = itlin_run(tr, st, x, y, n, batch_size=batch_size, chunk_size=n)
        _block(st.params)
        first = time.perf_counter() - t0
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            st, log = itlin_run(tr, st, x, y, n, batch_size=batch_size, chunk_size=n)
            _block(st.params)
            times.append((time.perf_counter() - t0) / max(len(log.loss), 1))
        med = statistics.median(times)
        out[name] = {"ms_per_step": 1e3 * med, "first_chunk_s": first, "steps_per_chunk": n}
        print(f"{name:34s} {1e3 * med:8.3f} ms/step  (first chunk {first:.1f} s)", flush=True)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--chunk", type=int, default=1000)
    ap.add_argument("--only", nargs="*", choices=["gn", "trainers"])
    args = ap.parse_args(argv)
    from itlin.book import limit_blas_threads

    limit_blas_threads()
    only = set(args.only or ["gn", "trainers"])
    res = {"device": str(jax.devices()[0].device_kind), "jax": jax.__version__}
    if "gn" in only:
        res.update(profile_gauss_newton(max(args.repeats, 10)))
        print(json.dumps({k: res[k] for k in res if k.startswith("gn_")}, indent=1), flush=True)
    if "trainers" in only:
        res["trainers"] = profile_trainers(args.chunk, args.repeats)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=2, sort_keys=True)


if __name__ == "__main__":
    main()
