"""Sweeps over devices and processes (itlin.core.sweep): one device, 8 virtual CPU devices, and two
CPU processes under jax.distributed, all giving the numbers of a Python loop over the grid.

The device count is fixed when JAX starts, so the 8-device and two-process runs are subprocesses
(as in test_parallel.py). The problem is a tiny damped Gauss-Newton sweep in float64: a 2x8 MLP on
8 quintic points, seeds x dampings, a few steps.
"""

import hashlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from itlin.core import sweep as sw

SEEDS = np.arange(3)
DAMPINGS = np.array([1e-2, 1.0, 100.0])
STEPS = 4
#: Tolerance between a sweep on 1 device and the same sweep on 8 devices, 2 processes or in pieces
#: (``chunk``). Each point is computed by the same vmapped program, but with another number of
#: points per device (9 on one device, 2 on each of 8, or 2 per piece), and XLA may pick other
#: kernels, blocking and reassociation of the batched products and reductions for another batch
#: size, so we promise agreement to rounding, not bit for bit. Rounding is then amplified by the
#: damped kernel solve (condition number up to ~1e4 at damping 1e-2): the vmapped program and a
#: loop of one jitted run per point (a real change of kernels: batched vs unbatched products)
#: differ by ~1e-10 relative. On XLA:CPU (JAX 0.10.2) 1 vs 8 devices and the chunked runs were
#: in fact bit for bit equal when measured; the tolerance leaves room for other XLA versions.
RTOL, ATOL = 1e-9, 1e-12

HERE = os.path.dirname(os.path.abspath(__file__))


def problem():
    """``(fn, grid, shape)``: fn(point) trains the MLP from initialisation ``point["seed"]`` with
    damping ``point["damping"]``. Call with float64 enabled."""
    from itlin import data, gauss_newton_fit, models

    ds = data.quintic(n_train=8)
    x, y = jnp.asarray(ds.x_train, jnp.float64), jnp.asarray(ds.y_train, jnp.float64)
    model = models.mlp(width=8, depth=2)
    apply = model.bind()
    # the initialisations are drawn once, outside the sweep, with numpy in the network's parameter
    # structure (compiling flax's init costs more than the whole sweep); fn picks its own by seed
    shapes = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), x[:2])[0])
    leaves, tree = jax.tree_util.tree_flatten(shapes)
    rng = np.random.default_rng(0)
    scale = [1.0 / np.sqrt(a.shape[0]) if a.ndim == 2 else 0.1 for a in leaves]  # LeCun-normal weights
    inits = tree.unflatten([jnp.asarray(c * rng.normal(size=(len(SEEDS),) + a.shape)) for a, c in zip(leaves, scale)])

    def fn(point):
        p0 = jax.tree_util.tree_map(lambda a: a[point["seed"]], inits)
        p, trace = gauss_newton_fit(apply, p0, x, y, STEPS, damping=point["damping"], reduction="sum")
        return {"loss": trace.loss, "rmse": jnp.sqrt(jnp.mean((apply(p, x) - y) ** 2)), "f": apply(p, x)[:, 0]}

    grid, shape = sw.grid_product(seed=SEEDS, damping=DAMPINGS)
    return fn, grid, shape


def digest(out) -> str:
    h = hashlib.sha256()
    for k in sorted(out):
        h.update(k.encode() + np.ascontiguousarray(out[k]).tobytes())
    return h.hexdigest()


# ------------------------------------------------------------------------------ one device
@pytest.fixture(scope="module")
def one_device():
    with jax.enable_x64(True):
        fn, grid, shape = problem()
        out = sw.sweep(fn, grid, mesh=sw.sweep_mesh(jax.devices()[:1]))
        one = jax.jit(fn)
        loop = [one({k: v[i] for k, v in grid.items()}) for i in range(len(grid["seed"]))]
        loop = {k: np.stack([np.asarray(r[k]) for r in loop]) for k in out}
    return fn, grid, shape, out, loop


def test_sweep_equals_a_python_loop_over_the_grid(one_device):
    fn, grid, shape, out, loop = one_device
    g = len(SEEDS) * len(DAMPINGS)
    assert shape == (3, 3) and out["loss"].shape == (g, STEPS) and out["rmse"].shape == (g,)
    assert out["f"].shape == (g, 8) and out["loss"].dtype == np.float64
    for k in out:  # the vmapped program against one jitted run per point: equal to rounding
        np.testing.assert_allclose(out[k], loop[k], rtol=RTOL, atol=ATOL, err_msg=k)
    # the runs differ (the grid really varies seeds and dampings) and reshape back to seeds x dampings
    assert len(np.unique(np.round(out["rmse"], 12))) == g
    assert out["rmse"].reshape(shape)[1, 2] == out["rmse"][1 * 3 + 2]


def test_chunks_give_the_same_numbers_and_compile_once(one_device):
    fn, grid, shape, out, _ = one_device
    traces = []

    def counted(p):
        traces.append(1)  # runs once per trace (compile), not per piece
        return fn(p)

    with jax.enable_x64(True):
        mesh = sw.sweep_mesh(jax.devices()[:1])
        chunked = sw.sweep(counted, grid, mesh=mesh, chunk=2)  # 5 pieces of 2, the last padded
    assert len(traces) == 1
    for k in out:
        assert chunked[k].shape == out[k].shape
        np.testing.assert_allclose(chunked[k], out[k], rtol=RTOL, atol=ATOL, err_msg=k)


def test_padding_is_dropped_and_scalar_outputs_work():
    mesh = sw.sweep_mesh(jax.devices()[:1])
    out = sw.sweep(lambda p: p["a"] * 2, {"a": np.arange(5.0)}, mesh=mesh, chunk=3)  # padded to 6
    assert out.tolist() == [0.0, 2.0, 4.0, 6.0, 8.0]
    out = sw.sweep(lambda a: (a.sum(), a), np.ones((3, 2), np.float32))
    assert out[0].tolist() == [2.0, 2.0, 2.0] and out[1].shape == (3, 2)


def test_bad_input_is_refused_before_any_compute():
    calls = []

    def fn(p):
        calls.append(p)
        return p

    cases = [
        (TypeError, "fn must be callable", lambda: sw.sweep(3, {"a": np.arange(2)})),
        (ValueError, "no common leading axis", lambda: sw.sweep(fn, {"a": np.arange(2), "b": np.arange(3)})),
        (ValueError, "empty", lambda: sw.sweep(fn, {"a": np.zeros((0, 2))})),
        (ValueError, "no arrays", lambda: sw.sweep(fn, {})),
        (ValueError, "scalar", lambda: sw.sweep(fn, {"a": np.arange(2), "b": 1.0})),
        (TypeError, "numbers only", lambda: sw.sweep(fn, {"a": np.array(["x", "y"])})),
        (ValueError, "chunk must be a positive integer", lambda: sw.sweep(fn, {"a": np.arange(2)}, chunk=0)),
        (TypeError, "Mesh", lambda: sw.sweep(fn, {"a": np.arange(2)}, mesh=jax.devices())),
        (ValueError, "at least one named axis", lambda: sw.grid_product()),
        (ValueError, "no values", lambda: sw.grid_product(a=[])),
        (ValueError, "scalar", lambda: sw.grid_product(a=1.0)),
    ]
    for kind, match, call in cases:
        with pytest.raises(kind, match=match) as info:
            call()
        assert "\n" not in str(info.value), str(info.value)  # one line
    assert not calls


def test_grid_product_order_and_vector_axes():
    grid, shape = sw.grid_product(a=[1, 2], b=np.eye(3))
    assert shape == (2, 3) and grid["a"].tolist() == [1, 1, 1, 2, 2, 2]
    assert grid["b"].shape == (6, 3) and grid["b"][4].tolist() == [0.0, 1.0, 0.0]


def test_init_distributed_without_environment_is_one_process(monkeypatch):
    for k in (sw.ENV_COORDINATOR, sw.ENV_NUM_PROCESSES, sw.ENV_PROCESS_ID):
        monkeypatch.delenv(k, raising=False)
    assert sw.init_distributed() == 1 and sw.init_distributed() == 1
    assert sw.is_main_process() and not jax.distributed.is_initialized()
    monkeypatch.setenv(sw.ENV_NUM_PROCESSES, "2")
    with pytest.raises(ValueError, match="JAX_COORDINATOR_ADDRESS, JAX_PROCESS_ID not"):
        sw.init_distributed()


# ------------------------------------------------------------------------------ subprocesses
def _env(**extra):
    env = dict(os.environ, JAX_PLATFORMS="cpu", ITLIN_QUIET="1", **extra)
    env["PYTHONPATH"] = HERE + os.pathsep + env.get("PYTHONPATH", "")
    for k in (sw.ENV_COORDINATOR, sw.ENV_NUM_PROCESSES, sw.ENV_PROCESS_ID):
        env.pop(k, None)
    return env


def _load(path):
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


EIGHT = textwrap.dedent(r'''
    import sys, jax, numpy as np
    jax.config.update("jax_enable_x64", True)
    from itlin.core import sweep as sw
    from test_sweep import problem
    assert jax.device_count() == 8, jax.devices()
    fn, grid, shape = problem()
    out = sw.sweep(fn, grid)                   # 9 points padded to 16: 2 per device
    chunked = sw.sweep(fn, grid, chunk=1)      # 2 pieces of 8
    # the grid axis really is split: each of the 8 devices holds (and computes) 2 of the 16 points
    mesh = sw.sweep_mesh()
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("sweep"))
    padded = {k: np.concatenate([v, np.repeat(v[-1:], 7)]) for k, v in grid.items()}
    res = sw._vmapped(fn, sharding, jax.device_put(padded, sharding))
    shards = res["rmse"].addressable_shards
    assert len(res["rmse"].sharding.device_set) == 8 and sorted(s.device.id for s in shards) == list(range(8))
    assert all(s.data.shape == (2,) for s in shards), [s.data.shape for s in shards]
    # and the devices never talk: no collective in the program (under plain jit partitioning, the
    # Gauss-Newton while_loop's stop flag would be all-reduced over the grid at every step)
    hlo = sw._vmapped.lower(fn, sharding, jax.device_put(padded, sharding)).compile().as_text()
    assert not any(c in hlo for c in ("all-reduce", "all-gather", "collective-permute", "all-to-all",
                                      "reduce-scatter")), "collective in the sweep's program"
    np.savez(sys.argv[1], **out)
    np.savez(sys.argv[2], **chunked)
    print("OK")
''')


def test_eight_virtual_devices_give_the_one_device_numbers(one_device, tmp_path):
    out1 = one_device[3]
    a, b = tmp_path / "eight.npz", tmp_path / "eight_chunked.npz"
    proc = subprocess.run([sys.executable, "-c", EIGHT, str(a), str(b)], capture_output=True, text=True,
                          timeout=300, env=_env(XLA_FLAGS="--xla_force_host_platform_device_count=8"))
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), proc.stdout[-3000:] + proc.stderr[-3000:]
    for path in (a, b):
        out8 = _load(path)
        assert set(out8) == set(out1)
        for k in out1:
            assert out8[k].shape == out1[k].shape
            np.testing.assert_allclose(out8[k], out1[k], rtol=RTOL, atol=ATOL, err_msg=f"{path.name}: {k}")


TWO = textwrap.dedent(r'''
    import io, os, sys, time, jax, numpy as np
    jax.config.update("jax_cpu_collectives_implementation", "gloo")  # JAX's CPU collectives (the default)
    jax.config.update("jax_enable_x64", True)
    from itlin.core import sweep as sw
    from itlin._io import atomic_write
    from test_sweep import digest, problem
    n = sw.init_distributed()                  # from JAX_COORDINATOR_ADDRESS / _NUM_PROCESSES / _PROCESS_ID
    assert n == 2 and sw.init_distributed() == 2, n   # idempotent
    assert jax.local_device_count() == 4 and jax.device_count() == 8, jax.devices()
    path, mode = sys.argv[1], sys.argv[2]
    if mode == "runner":                       # an experiment whose sweep runs on both processes
        from itlin.book import runner
        rec = runner.run("fig9_damping", {"scale": "tiny", "seeds": 3, "dampings": [1.0, 100.0], "gn_steps": 4,
                                          "samples": 2}, results_dir=path, progress=False, verbose=False)
        print("RESULT", jax.process_index(), digest({"t": rec["test_rmse"]}), flush=True)
        # the same call again: process 0 finds the record and sends it; no process recomputes
        # (a process that did would wait forever in the sweep's collectives)
        again = runner.run("fig9_damping", {"scale": "tiny", "seeds": 3, "dampings": [1.0, 100.0], "gn_steps": 4,
                                            "samples": 2}, results_dir=path, progress=False, verbose=False)
        print("AGAIN", jax.process_index(), digest({"t": again["test_rmse"]}), again.loaded, flush=True)
        print("DONE", jax.process_index(), flush=True)
        sys.exit(0)
    fn, grid, shape = problem()
    out = sw.sweep(fn, grid)
    print("RESULT", jax.process_index(), digest(out), flush=True)

    def write(fh):
        buf = io.BytesIO()
        np.savez(buf, **out)
        data = buf.getvalue()
        fh.write(data[:len(data) // 2])
        if mode == "kill":                     # the test kills this process halfway through the write
            fh.flush()
            print("HALF", flush=True)
            time.sleep(120)
        fh.write(data[len(data) // 2:])

    if sw.is_main_process():
        atomic_write(path, write)
    print("DONE", jax.process_index(), flush=True)
''')


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_two(path, mode):
    port = _free_port()
    procs = []
    for pid in range(2):
        env = _env(XLA_FLAGS="--xla_force_host_platform_device_count=4")
        env.update({sw.ENV_COORDINATOR: f"127.0.0.1:{port}", sw.ENV_NUM_PROCESSES: "2", sw.ENV_PROCESS_ID: str(pid)})
        procs.append(subprocess.Popen([sys.executable, "-c", TWO, str(path), mode], env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    return procs


def _stop(procs):
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.communicate(timeout=30)


def test_two_processes_give_the_single_process_result_and_only_process_0_writes(one_device, tmp_path):
    out1 = one_device[3]
    path = tmp_path / "result.npz"
    procs = _start_two(path, "write")
    try:
        outs = [p.communicate(timeout=240) for p in procs]
    finally:
        _stop(procs)
    for p, (so, se) in zip(procs, outs):
        assert p.returncode == 0 and "DONE" in so, so[-3000:] + se[-3000:]
    digests = [next(line.split()[2] for line in so.splitlines() if line.startswith("RESULT")) for so, _ in outs]
    assert digests[0] == digests[1]  # every process returns the same arrays
    assert sorted(os.listdir(tmp_path)) == ["result.npz"]  # one file, no temporary left behind
    out2 = _load(path)
    assert digest(out2) == digests[0]
    for k in out1:
        np.testing.assert_allclose(out2[k], out1[k], rtol=RTOL, atol=ATOL, err_msg=k)


def test_a_process_killed_while_writing_leaves_no_result_file(tmp_path):
    path = tmp_path / "result.npz"
    procs = _start_two(path, "kill")
    try:
        deadline = time.monotonic() + 240
        line = ""
        while "HALF" not in line:  # process 0 is inside the write, its temporary file half written
            line = procs[0].stdout.readline()
            assert line or procs[0].poll() is None, procs[0].stderr.read()[-3000:]
            assert time.monotonic() < deadline, "process 0 never started writing"
        os.kill(procs[0].pid, signal.SIGKILL)
        procs[0].wait(timeout=30)
    finally:
        _stop(procs)
    assert not path.exists()
    left = os.listdir(tmp_path)
    assert len(left) == 1 and left[0].startswith(".result.npz.") and left[0].endswith(".part"), left


def test_an_experiment_on_two_processes_is_recorded_once_by_process_0(tmp_path):
    # fig9's sweep runs on both processes (itlin.sweep inside it); the runner lets process 0
    # alone write the record, and both processes hold the same results
    results = tmp_path / "results"
    procs = _start_two(results, "runner")
    try:
        outs = [p.communicate(timeout=240) for p in procs]
    finally:
        _stop(procs)
    for p, (so, se) in zip(procs, outs):
        assert p.returncode == 0 and "DONE" in so, so[-3000:] + se[-3000:]
    digests = [next(line.split()[2] for line in so.splitlines() if line.startswith("RESULT")) for so, _ in outs]
    assert digests[0] == digests[1]
    again = [next(line.split()[2:] for line in so.splitlines() if line.startswith("AGAIN")) for so, _ in outs]
    assert again == [[digests[0], "True"], [digests[0], "True"]], again  # loaded everywhere, same arrays
    folders = list((results / "fig9_damping").iterdir())
    assert len(folders) == 1 and (folders[0] / "record.json").is_file()


def test_cluster_detection_reads_documented_environment_not_jax_internals(monkeypatch):
    # issue 25: no jax._src import; SLURM and Open MPI launches are found from their variables
    import inspect

    from itlin.core import sweep as sw

    assert "jax._src" not in inspect.getsource(sw)
    for k in sw.SLURM_ENV + sw.OMPI_ENV:
        monkeypatch.delenv(k, raising=False)
    assert sw._detected_cluster() == (False, None)
    for k in sw.SLURM_ENV:
        monkeypatch.setenv(k, "0")
    monkeypatch.setenv("SLURM_NTASKS", "4")
    assert sw._detected_cluster() == (True, 4)
    monkeypatch.setenv("SLURM_NTASKS", "1")
    assert sw._detected_cluster() == (True, 1)  # one process: init_distributed leaves it alone
    assert sw.init_distributed() == 1
    for k in sw.SLURM_ENV:
        monkeypatch.delenv(k)
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "3")
    assert sw._detected_cluster() == (True, 3)
