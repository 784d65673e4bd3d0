"""Data parallelism: the unchanged training step with the batch sharded over two CPU devices.

Runs in a subprocess because the device count must be set before JAX starts.
"""

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(r'''
    import jax, jax.numpy as jnp, numpy as np, optax
    jax.config.update("jax_enable_x64", True)
    assert len(jax.devices()) == 2, jax.devices()
    from itlin import data_mesh, iterative_linearisation, replicate, run, shard_batch
    from nets import TinyMLP, TinyCNN, make

    def check(net, shape, batch_size, K):
        rng = np.random.default_rng(0)
        x = jnp.asarray(rng.normal(size=(32,) + shape))
        y = jnp.asarray(rng.integers(0, 3, size=32).astype(np.int32))
        model, p0, _ = make(net, x)
        tr = iterative_linearisation(model, optax.sgd(0.1, momentum=0.9), K)
        step = jax.jit(tr.step)
        # reference on one device
        st1 = tr.init(p0)
        for _ in range(3):
            st1, _ = step(st1, x, y)
        ref_run, _ = run(tr, tr.init(p0), x, y, 6, batch_size=batch_size, chunk_size=4)
        # the same step with the batch split over the two devices
        mesh = data_mesh()
        xs, ys = shard_batch((x, y), mesh)
        assert len(xs.sharding.device_set) == 2
        st2 = replicate(tr.init(p0), mesh)
        for _ in range(3):
            st2, log = step(st2, xs, ys)
        leaf = jax.tree_util.tree_leaves(st2.params)[0]
        assert len(leaf.sharding.device_set) == 2, leaf.sharding
        for a, b in zip(jax.tree_util.tree_leaves(st1.params), jax.tree_util.tree_leaves(st2.params)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10, atol=1e-12)
        # whole runs with the training set sharded (mini-batches gathered from it)
        run2, _ = run(tr, replicate(tr.init(p0), mesh), xs, ys, 6, batch_size=batch_size, chunk_size=4)
        for a, b in zip(jax.tree_util.tree_leaves(ref_run.params), jax.tree_util.tree_leaves(run2.params)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10, atol=1e-12)

    check(TinyMLP(), (6,), None, 2)
    check(TinyMLP(), (6,), 8, 3)
    check(TinyCNN(), (6, 6, 2), 8, 1)
    try:
        shard_batch(jnp.zeros((7, 2)), data_mesh())
    except ValueError as e:
        assert "multiple of 2" in str(e)
    else:
        raise AssertionError("odd batch accepted")
    print("OK")
''')


def test_training_step_runs_unchanged_with_the_batch_sharded_over_two_devices():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu",
               ITLIN_QUIET="1")
    here = os.path.dirname(os.path.abspath(__file__))
    env["PYTHONPATH"] = here + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("OK")
