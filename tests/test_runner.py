"""The experiment runner (issue 4): validation, stored results, checkpoints, resume, divergence.

Test-only experiments are registered below: a tiny MLP trained on the quintic (a few Ks) and a
run whose learning rate turns NaN at a known step. The SIGKILL test runs the tiny experiment in
a subprocess (this module is its entry point, see ``_subprocess_main``).
"""

import collections
import functools
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from dataclasses import dataclass
from typing import Literal, Optional

import itlin
from itlin.book import experiments, plotting, render, runner, store
from itlin.book.experiments import Dataset, Experiment, ParameterError, Params, Period, param, register

CALLS = collections.Counter()
HERE = Path(__file__).resolve().parent
HOOKS = {}  # test hooks: "callback" -> fn(tag, state, history); "after_stage" -> fn()


# ------------------------------------------------------------------------------ tiny experiments
def mlp_apply(params, x):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return h @ params["w2"] + params["b2"]


def mlp_init(seed, d_in=1, width=8, d_out=1):
    rng = np.random.default_rng(seed)
    return {"w1": jnp.asarray(rng.normal(size=(d_in, width)), jnp.float32),
            "b1": jnp.zeros((width,), jnp.float32),
            "w2": jnp.asarray(rng.normal(size=(width, d_out)) / np.sqrt(width), jnp.float32),
            "b2": jnp.zeros((d_out,), jnp.float32)}


def _callback(tag):
    sleep = float(os.environ.get("ITLIN_TEST_SLEEP", "0") or 0)

    say = bool(os.environ.get("ITLIN_TEST_SAY"))

    def cb(state, history):
        if sleep:
            time.sleep(sleep)
        if say:
            print("AT", tag, int(state.step), flush=True)
        hook = HOOKS.get("callback")
        if hook is not None:
            hook(tag, state, history)

    return cb


@functools.lru_cache(maxsize=None)
def tiny_trainer(K, learning_rate):
    """Trainers are shared between runs in this process only to save compilation time."""
    return itlin.iterative_linearisation(mlp_apply, optax.adam(learning_rate), K, loss="squared")


def run_tiny(p, ctx):
    CALLS["test_tiny"] += 1
    from itlin.data import load

    ds = load(p.dataset)
    x, y, xt, yt = ds.x_train, ds.y_train, ds.x_test[::10], ds.y_test[::10]
    init = ctx.stage("init", lambda: {"params": mlp_init(p.seed), "note": "initial weights"})
    out = {"init_note": init["note"]}
    for K in ctx.progress(p.Ks, desc="K"):
        trainer = tiny_trainer(K, p.learning_rate)
        state = trainer.init(jax.tree_util.tree_map(jnp.asarray, init["params"]))
        tag = f"K={K}"
        res = ctx.fit(tag, trainer, state, x, y, p.steps, batch_size=p.batch_size, chunk_size=8,
                      loop=p.loop, eval_sets={"train": (x, y), "test": (xt, yt)}, eval_every=20, seed=p.seed,
                      callback=_callback(tag))
        out[tag] = {"params": res.state.params, "anchor": res.state.anchor,
                    "opt_state": {str(i): leaf for i, leaf in enumerate(jax.tree_util.tree_leaves(res.state.opt_state))},
                    "history": res.history.arrays()}
    return out


@dataclass(frozen=True)
class TinyParams(Params):
    Ks: tuple[Period, ...] = param((1, 3), "relinearisation periods")
    learning_rate: float = param(0.01, gt=0)
    dataset: Dataset = param("quintic")
    steps: int = param(64, min=1)
    batch_size: Optional[int] = param(8, "None: full batch", min=1)
    loop: Literal["auto", "host", "device"] = param("auto", "the driver's loop (host: one call per step)")


register(Experiment("test_tiny", TinyParams, run_tiny, version="1",
                    doc="Test only: a tiny MLP on the quintic with Adam, for several K."))


def run_diverge(p, ctx):
    """Full-batch SGD whose learning rate becomes NaN for update number nan_at - 1, so the loss
    of step nan_at is the first non-finite one: fit reports "diverged at step nan_at"."""
    CALLS["test_diverge"] += 1
    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 2)).astype(np.float32)
    y = np.sin(x[:, :1]).astype(np.float32)
    s = p.nan_at
    runs = {"stable": 0.05, "unstable": lambda count: jnp.where(count >= s - 2, jnp.nan, 0.05)}
    out = {}
    for tag in p.runs:
        trainer = itlin.iterative_linearisation(mlp_apply, optax.sgd(runs[tag]), p.K, loss="squared")
        res = ctx.fit(tag, trainer, trainer.init(mlp_init(0, d_in=2)), x, y, p.steps,
                      eval_sets={"train": (x, y)}, eval_every=5)
        out[tag] = {"loss": np.asarray(res.history.loss)}
    return out


@dataclass(frozen=True)
class DivergeParams(Params):
    K: Period = param(2)
    nan_at: int = param(23, min=2)
    steps: int = param(40, min=1)
    runs: tuple[Literal["stable", "unstable"], ...] = param(("unstable",))


register(Experiment("test_diverge", DivergeParams, run_diverge,
                    doc="Test only: a learning rate that turns NaN at a known step."))


def run_stage(p, ctx):
    CALLS["test_stage"] += 1

    def sweep():
        CALLS["test_stage/sweep"] += 1
        d = np.asarray(p.dampings)
        return {"dampings": d, "curves": {"eval/test/rmse": np.outer(d, np.arange(3.0))}, "count": 3}

    res = ctx.stage("sweep", sweep)
    hook = HOOKS.get("after_stage")
    if hook is not None:
        hook()
    return {"sweep": res, "meta": {"n": res["count"], "dampings": res["dampings"]}, "status": "completed (stage only)"}


@dataclass(frozen=True)
class StageParams(Params):
    dampings: tuple[float, ...] = param((0.0, 1e-3, 1.0), min=0)


register(Experiment("test_stage", StageParams, run_stage))


def _subprocess_main():
    """Entry point of the subprocess in the SIGKILL and signal tests: argv = results_dir, params
    (JSON)[, "pause": install runner.pause_on_signals and exit 130 on KeyboardInterrupt]."""
    results, params = sys.argv[1], json.loads(sys.argv[2])
    pause = sys.argv[3:] == ["pause"]
    if pause:  # no periodic checkpoint within the test: what a pause keeps, it saved itself
        runner.pause_on_signals()
    try:
        rec = runner.run("test_tiny", params, results_dir=results, checkpoint_every_steps=None if pause else 8,
                         checkpoint_every_seconds=3600 if pause else None)
    except KeyboardInterrupt as stop:
        print("PAUSED", stop, flush=True)
        sys.exit(130)
    print("STATUS", rec.status, flush=True)


@pytest.fixture(autouse=True)
def _clean():
    CALLS.clear()
    HOOKS.clear()
    yield
    HOOKS.clear()


def _equal_results(a: runner.Record, b: runner.Record):
    """Every array equal bit for bit, except wall-clock seconds."""
    assert sorted(a.arrays) == sorted(b.arrays)
    for k in a.arrays:
        if k.endswith("seconds"):
            continue
        assert a.arrays[k].dtype == b.arrays[k].dtype, k
        nan_ok = np.issubdtype(a.arrays[k].dtype, np.inexact)
        assert np.array_equal(a.arrays[k], b.arrays[k], equal_nan=nan_ok), k


FAST = {"Ks": [1, 3], "steps": 48}


def _checkpoint(path):
    from flax import serialization

    outer = serialization.msgpack_restore(Path(path).read_bytes())
    return serialization.msgpack_restore(outer["body"])


def _checkpoint_meta(path):
    return json.loads(_checkpoint(path)["meta"])


# ------------------------------------------------------------------------------ registry
def test_registry_unknown_experiment_lists_known():
    assert "test_tiny" in experiments.names()
    assert experiments.get("test_tiny").name == "test_tiny"
    with pytest.raises(experiments.UnknownExperimentError, match=r"unknown experiment 'test_tiyn'.*did you mean "
                                                                 r"'test_tiny'.*known experiments: .*test_tiny"):
        runner.run("test_tiyn")


def test_register_refuses_a_second_experiment_with_a_taken_name():
    with pytest.raises(ValueError, match="already registered"):
        register(Experiment("test_tiny", Params, lambda p, ctx: {}))


def test_submodules_are_discovered_and_broken_ones_reported(tmp_path, monkeypatch):
    pkg = tmp_path / "more"
    pkg.mkdir()
    (pkg / "test_found.py").write_text(
        "from dataclasses import dataclass\n"
        "from itlin.book.experiments import Experiment, Params, param, register\n"
        "@dataclass(frozen=True)\n"
        "class P(Params):\n"
        "    n: int = param(1)\n"
        "register(Experiment('test_found', P, lambda p, ctx: {}))\n")
    (pkg / "test_broken.py").write_text("raise ImportError('half-written figure module')\n")
    (pkg / "_private.py").write_text("raise AssertionError('private modules are not imported')\n")
    monkeypatch.setattr(experiments, "__path__", list(experiments.__path__) + [str(pkg)])
    monkeypatch.setattr(experiments, "_DISCOVERED", False)
    monkeypatch.setattr(experiments, "_IMPORT_ERRORS", {})
    try:
        assert experiments.get("test_found").defaults()["n"] == 1  # imported by its module's name
        with pytest.warns(RuntimeWarning, match="could not import 'test_broken'"):
            with pytest.raises(experiments.UnknownExperimentError, match="test_broken .*half-written"):
                experiments.get("test_nowhere")
    finally:
        experiments.unregister("test_found")
        for mod in ("test_found", "test_broken"):
            sys.modules.pop(f"itlin.book.experiments.{mod}", None)


def test_bad_defaults_are_caught_at_definition():
    @dataclass(frozen=True)
    class Bad(Params):
        K: Period = param(0)

    with pytest.raises(ValueError, match="K must be >= 1"):
        Experiment("test_bad_default", Bad, lambda p, ctx: {})
    with pytest.raises(TypeError, match="immutable"):
        param([1, 2])
    with pytest.raises(TypeError, match="must be a Params subclass"):
        Experiment("test_bad_params", dict, lambda p, ctx: {})


# ------------------------------------------------------------------------------ validation
@pytest.mark.parametrize("name, params, message", [
    ("test_tiny", {"dataset": "mnist2d"}, "dataset: unknown dataset 'mnist2d'; known datasets: "),
    ("test_diverge", {"K": 0}, "K must be >= 1 (K=1 is plain gradient descent), got 0"),
    ("test_tiny", {"learning_rate": -0.1}, "learning_rate must be > 0, got -0.1"),
    ("test_tiny", {"lr": 0.1}, "unknown parameter 'lr' for experiment 'test_tiny': did you mean 'learning_rate'?"),
    ("test_tiny", {"Ks": [1, 0]}, "Ks[1] must be >= 1"),
    ("test_tiny", {"Ks": [1, None]}, "Ks[1] must not be None"),
    ("test_tiny", {"steps": 2.5}, "steps must be an integer, got 2.5"),
    ("test_tiny", {"scale": "papr"}, "scale must be one of 'default', 'tiny', 'paper'; got 'papr'. did you mean 'paper'?"),
    ("test_tiny", {"seed": -1}, "seed must be >= 0, got -1"),
    ("test_tiny", {"seed": 2 ** 64}, "seed must be < 4294967296"),
    ("test_diverge", {"runs": ["stable", "wobbly"]}, "runs[1] must be one of 'stable', 'unstable'; got 'wobbly'"),
])
def test_bad_parameters_fail_before_any_compute(tmp_path, name, params, message):
    with pytest.raises(ParameterError) as err:
        runner.run(name, params, results_dir=tmp_path)
    assert message in str(err.value)
    assert isinstance(err.value, ValueError)
    assert not CALLS
    assert not any(tmp_path.iterdir())


def test_papermill_style_values_are_normalised():
    exp = experiments.get("test_tiny")
    p = exp.resolve({"Ks": [1, "100", "inf", 1e3], "learning_rate": "1e-3", "dataset": "Quintic", "steps": 1e2,
                     "loop": "Host"})
    assert p["Ks"] == [1, 100, math.inf, 1000] and isinstance(p["Ks"][3], int)
    assert p["learning_rate"] == 1e-3 and p["dataset"] == "quintic" and p["steps"] == 100 and p["loop"] == "host"
    assert exp.resolve({"Ks": "[1, 100, inf]"})["Ks"] == [1, 100, math.inf]
    assert experiments.get("test_diverge").resolve({"K": "inf"})["K"] == math.inf
    # same values, different spellings: same hash
    a = runner.plan("test_tiny", {"Ks": [1, "inf"], "learning_rate": 0.01})
    b = runner.plan("test_tiny", {"Ks": [1.0, math.inf]})
    assert a.hash == b.hash and a.params == b.params
    assert runner.plan("test_tiny", {"Ks": [1, 100]}).hash != a.hash
    # what a chapter forwards: the experiment's names among the notebook's globals
    namespace = {"Ks": [1, 10], "learning_rate": 0.1, "plt": object(), "results": None}
    assert runner.params_from("test_tiny", namespace) == {"Ks": [1, 10], "learning_rate": 0.1}


# ------------------------------------------------------------------------------ store and reload
def test_the_runner_logs_on_standard_error_and_not_inside_a_kernel(tmp_path, capsys, monkeypatch):
    """No progress log on a page (issue 58): the runner's lines go to standard error, where a
    command-line run keeps them, and inside a Jupyter kernel (a chapter being executed) nowhere."""
    from itlin.book import checkpoints

    monkeypatch.delenv("ITLIN_QUIET", raising=False)
    monkeypatch.delenv("CI", raising=False)
    runner.run("test_tiny", FAST, results_dir=tmp_path)
    out, err = capsys.readouterr()
    assert "[itlin] test_tiny:" in err and "[itlin]" not in out
    assert not checkpoints.in_kernel()  # pytest is no kernel
    monkeypatch.setattr(checkpoints, "in_kernel", lambda: True)
    runner.run("test_tiny", FAST, results_dir=tmp_path)                            # loaded
    runner.run("test_tiny", dict(FAST, seed=1), results_dir=tmp_path, force=True)  # and computed
    out, err = capsys.readouterr()
    assert "[itlin]" not in out + err


def test_same_params_load_instead_of_recompute(tmp_path, capsys):
    first = runner.run("test_tiny", FAST, results_dir=tmp_path)
    assert CALLS["test_tiny"] == 1 and not first.loaded
    assert first.status == "completed"
    assert "completed" in capsys.readouterr().err  # the runner's lines go to standard error
    again = runner.run("test_tiny", dict(FAST, learning_rate=0.01), results_dir=tmp_path)  # the default, spelled out
    assert CALLS["test_tiny"] == 1 and again.loaded
    assert "loaded stored result" in capsys.readouterr().err
    _equal_results(first, again)
    assert again.history("K=3").status == "completed"
    assert np.array_equal(again.history("K=3").eval_array("test/rmse"), first["K=3"]["history"]["eval/test/rmse"])
    assert runner.load("test_tiny", FAST, results_dir=tmp_path) is not None
    assert runner.load("test_tiny", dict(FAST, seed=1), results_dir=tmp_path) is None
    runner.run("test_tiny", FAST, results_dir=tmp_path, force=True)
    assert CALLS["test_tiny"] == 2


def test_record_contents_and_layout(tmp_path):
    rec = runner.run("test_tiny", FAST, results_dir=tmp_path)
    p = runner.plan("test_tiny", FAST, results_dir=tmp_path)
    assert rec.path == p.path == tmp_path / "test_tiny" / p.hash
    assert sorted(f.name for f in rec.path.iterdir() if not f.name.startswith(".")) == \
        ["params.json", "record.json", "results.npz"]  # work/ (checkpoints) removed on completion
    info = json.loads((rec.path / "record.json").read_text())
    for key in ("experiment", "version", "hash", "params", "status", "itlin_version", "git_commit", "jax_version",
                "device", "wall_seconds", "arrays_sha256", "runs", "finished_at"):
        assert key in info, key
    assert info["experiment"] == "test_tiny" and info["status"] == "completed"
    assert info["params"]["Ks"] == [1, 3] and info["params"]["dataset"] == "quintic"
    import hashlib

    assert info["arrays_sha256"] == hashlib.sha256((rec.path / "results.npz").read_bytes()).hexdigest()
    import zipfile

    with zipfile.ZipFile(rec.path / "results.npz") as zf:  # written deflated: committed records stay small
        assert {m.compress_type for m in zf.infolist()} == {zipfile.ZIP_DEFLATED}
    assert info["git_commit"] is None or len(info["git_commit"]) == 40
    assert info["device"].startswith("cpu")
    assert info["runs"]["K=3"]["steps"] == 48 and info["runs"]["K=3"]["feature_updates"] == 16
    assert info["runs"]["K=1"]["final"]["test/rmse"] == pytest.approx(float(rec["K=1"]["history"]["eval/test/rmse"][-1]))
    assert str(rec["init_note"]) == "initial weights"
    assert rec.keys() == ["init_note", "K=1", "K=3"]
    for tag in rec.runs:  # each run's history holds exactly its own arrays (read through a one-time index)
        mine = sorted("/".join(p) for p in rec.paths if p[:2] == [runner.FITS_KEY, tag])
        assert mine and sorted(f"{runner.FITS_KEY}/{tag}/{k}" for k in rec.history(tag).arrays()) == mine


@pytest.mark.parametrize("damage", ["truncate", "flip", "record", "edit-status", "edit-metric"])
def test_damaged_results_are_detected_and_recomputed(tmp_path, damage):
    params = {"dampings": [0.5, 2.0]}
    first = runner.run("test_stage", params, results_dir=tmp_path)
    f = first.path / ("results.npz" if damage in ("truncate", "flip") else "record.json")
    data = bytearray(f.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "flip":
        data[len(data) // 2] ^= 0xFF
    elif damage == "record":
        data = data[:10]
    else:  # a well-formed record.json whose status or a metric was edited by hand
        info = json.loads(bytes(data))
        if damage == "edit-status":
            info["status"] = "completed (edited)"
        else:
            info["wall_seconds"] = info["wall_seconds"] + 1.0
        data = json.dumps(info, indent=1).encode()
    f.write_bytes(bytes(data))
    with pytest.warns(RuntimeWarning, match="damaged"):
        again = runner.run("test_stage", params, results_dir=tmp_path)
    assert CALLS["test_stage"] == 2 and not again.loaded
    _equal_results(first, again)
    assert runner.run("test_stage", params, results_dir=tmp_path).loaded


# ------------------------------------------------------------------------------ stages
def test_stage_is_computed_once_and_reloaded_on_resume(tmp_path):
    def crash():
        raise RuntimeError("simulated crash after the stage")

    HOOKS["after_stage"] = crash
    with pytest.raises(RuntimeError, match="simulated crash"):
        runner.run("test_stage", results_dir=tmp_path)
    assert CALLS["test_stage/sweep"] == 1
    HOOKS.clear()
    rec = runner.run("test_stage", results_dir=tmp_path)
    assert CALLS["test_stage/sweep"] == 1 and CALLS["test_stage"] == 2
    assert rec.status == "completed" and rec.status_text == "completed (stage only)" and {k: v for k, v in rec.meta.items() if k != "resolved"} == \
        {"n": 3, "dampings": [0.0, 1e-3, 1.0]}
    assert rec.meta["resolved"]["scale"] == "default"  # the runner stores the resolved parameters
    sweep = rec["sweep"]
    assert set(sweep["curves"]) == {"eval/test/rmse"}  # keys with '/' survive the round trip
    assert np.array_equal(sweep["dampings"], [0.0, 1e-3, 1.0])


# ------------------------------------------------------------------------------ checkpoints
@pytest.mark.parametrize("batch_size, loop", [(8, "auto"), (None, "auto"), (8, "host"), (None, "host")],
                         ids=["minibatch", "fullbatch", "minibatch-hostloop", "fullbatch-hostloop"])
def test_crash_then_resume_equals_uninterrupted(tmp_path, capsys, batch_size, loop):
    params = dict(FAST, batch_size=batch_size, loop=loop)
    ref = runner.run("test_tiny", params, results_dir=tmp_path / "ref", checkpoint_every_steps=None,
                     checkpoint_every_seconds=None)

    def crash(tag, state, history):
        if tag == "K=3" and int(state.step) >= 24:
            raise RuntimeError("simulated crash")

    HOOKS["callback"] = crash
    with pytest.raises(RuntimeError, match="simulated crash"):
        runner.run("test_tiny", params, results_dir=tmp_path / "run", checkpoint_every_steps=16)
    plan = runner.plan("test_tiny", params, results_dir=tmp_path / "run")
    work = plan.path / "work"
    assert {f.name for f in work.iterdir()} == {"fit-K=1.msgpack", "fit-K=3.msgpack", "stage-init.npz",
                                                runner.ELAPSED_FILE}
    assert not plan.complete
    step = _checkpoint_meta(work / "fit-K=3.msgpack")["step"]
    assert 16 <= step < 24  # the latest checkpoint, at a chunk end >= 16 steps after the previous one
    HOOKS.clear()
    capsys.readouterr()
    rec = runner.run("test_tiny", params, results_dir=tmp_path / "run", checkpoint_every_steps=16)
    out = capsys.readouterr().err  # the runner's lines go to standard error
    assert "K=1: finished earlier (completed, step 48); restored" in out
    assert f"resuming K=3 from step {step}" in out
    assert rec.info["resumed"] == {"K=3": step}
    _equal_results(ref, rec)


def test_keyboard_interrupt_saves_a_checkpoint(tmp_path, capsys):
    def interrupt(tag, state, history):
        if tag == "K=1" and int(state.step) == 28:  # chunks end at 8, 16, 20 (evaluation), 28, ...
            raise KeyboardInterrupt

    HOOKS["callback"] = interrupt
    params = {"Ks": [1], "steps": 48}
    with pytest.raises(KeyboardInterrupt):
        runner.run("test_tiny", params, results_dir=tmp_path, checkpoint_every_steps=1000)
    assert "interrupted; checkpoint saved at step 28" in capsys.readouterr().err
    HOOKS.clear()
    rec = runner.run("test_tiny", params, results_dir=tmp_path)
    assert rec.info["resumed"] == {"K=1": 28}
    ref = runner.run("test_tiny", params, results_dir=tmp_path / "ref")
    _equal_results(ref, rec)


def test_time_based_checkpoints(tmp_path):
    seen = []

    def check(tag, state, history):
        ck = runner.plan("test_tiny", {"Ks": [1], "steps": 24}, results_dir=tmp_path).path / "work" / "fit-K=1.msgpack"
        seen.append((int(state.step), _checkpoint_meta(ck)["step"]))

    HOOKS["callback"] = check
    runner.run("test_tiny", {"Ks": [1], "steps": 24}, results_dir=tmp_path, checkpoint_every_steps=None,
               checkpoint_every_seconds=0)
    assert seen == [(8, 8), (16, 16), (20, 20), (24, 24)]  # every chunk: 0 s have always passed


def test_unusable_checkpoint_is_ignored_with_a_warning(tmp_path):
    def crash(tag, state, history):
        if int(state.step) >= 16:
            raise RuntimeError("simulated crash")

    HOOKS["callback"] = crash
    params = {"Ks": [1], "steps": 32}
    with pytest.raises(RuntimeError):
        runner.run("test_tiny", params, results_dir=tmp_path, checkpoint_every_steps=8)
    HOOKS.clear()
    ck = runner.plan("test_tiny", params, results_dir=tmp_path).path / "work" / "fit-K=1.msgpack"
    data = bytearray(ck.read_bytes())
    w1 = np.asarray(_checkpoint(ck)["state"]["params"]["w1"])  # keyed by pytree path, not leaf index
    at = bytes(data).find(w1.tobytes())
    assert at > 0 and w1.shape == (1, 8)
    data[at + 5] ^= 0x01  # one bit of one weight: the checksum must notice
    ck.write_bytes(bytes(data))
    with pytest.warns(RuntimeWarning, match="unusable"):
        rec = runner.run("test_tiny", params, results_dir=tmp_path)
    assert rec.info["resumed"] == {} and rec.status == "completed"
    _equal_results(runner.run("test_tiny", params, results_dir=tmp_path / "ref"), rec)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_pauses_a_background_run_with_a_checkpoint(tmp_path, sig):
    """Started as a shell starts a background job (SIGINT ignored), SIGINT or SIGTERM pauses the
    run: the run in progress saves a checkpoint past the periodic ones, and the same call resumes."""
    params = {"Ks": [1, 3], "steps": 160}
    env = dict(os.environ, ITLIN_QUIET="1", JAX_PLATFORMS="cpu")
    cmd = [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(HERE)!r}); import test_runner; "
                                 "test_runner._subprocess_main()", str(tmp_path), json.dumps(params), "pause"]
    work = runner.plan("test_tiny", params, results_dir=tmp_path).path / "work"
    ignoring = ["sh", "-c", 'trap "" INT; exec "$@"', "sh", *cmd]  # SIGINT ignored, as for a background job
    proc = subprocess.Popen(ignoring, env=dict(env, ITLIN_TEST_SLEEP="0.05", ITLIN_TEST_SAY="1"),
                            stdout=subprocess.PIPE, text=True, stderr=subprocess.STDOUT)
    seen = []
    try:
        for line in proc.stdout:  # the callback says where each run is, chunk by chunk
            seen.append(line)
            if line.startswith("AT K=3 ") and int(line.split()[-1]) >= 40:
                break
        assert not (work / "fit-K=3.msgpack").exists()  # no periodic checkpoint of K=3 yet
        os.kill(proc.pid, sig)
    finally:
        out = "".join(seen) + proc.communicate(timeout=60)[0]
    assert proc.returncode == 130, out
    assert f"PAUSED received {sig.name}" in out and "K=3: interrupted; checkpoint saved at step" in out, out
    saved = int(re.search(r"checkpoint saved at step (\d+)", out).group(1))
    assert 0 < saved < 160

    done = subprocess.run(cmd[:-1], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    # the runner's lines go to standard error, the subprocess's own to standard output
    assert f"resuming K=3 from step {saved}" in done.stderr and "STATUS completed" in done.stdout
    resumed = runner.load("test_tiny", params, results_dir=tmp_path)
    assert resumed.info["resumed"]["K=3"] == saved and resumed.info["sittings"] == 2


@pytest.mark.slow
def test_sigkill_mid_run_then_resume_is_bit_for_bit(tmp_path):
    params = {"Ks": [1, 3], "steps": 160}
    killed_dir, ref_dir = tmp_path / "killed", tmp_path / "ref"
    env = dict(os.environ, ITLIN_QUIET="1", JAX_PLATFORMS="cpu")
    cmd = [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(HERE)!r}); import test_runner; "
                                 "test_runner._subprocess_main()", str(killed_dir), json.dumps(params)]
    ck = runner.plan("test_tiny", params, results_dir=killed_dir).path / "work" / "fit-K=3.msgpack"
    proc = subprocess.Popen(cmd, env=dict(env, ITLIN_TEST_SLEEP="0.05"), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while not ck.exists():  # the second run has checkpointed at least once
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, "no checkpoint appeared"
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        out = proc.communicate(timeout=60)[0]
    assert proc.returncode == -signal.SIGKILL, out
    assert "STATUS" not in out
    assert not runner.plan("test_tiny", params, results_dir=killed_dir).complete

    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "K=1: finished earlier (completed, step 160); restored" in done.stderr
    assert "resuming K=3 from step" in done.stderr and "STATUS completed" in done.stdout

    resumed = runner.load("test_tiny", params, results_dir=killed_dir)
    assert 0 < resumed.info["resumed"]["K=3"] < 160
    # the clock runs over both sittings: the killed one's seconds up to its checkpoint come first
    assert resumed.info["sittings"] == 2 and resumed.info["wall_seconds"] > resumed.info["sitting_seconds"] > 0
    assert render.cost(resumed.info).endswith(" over 2 sittings")
    ref = runner.run("test_tiny", params, results_dir=ref_dir, checkpoint_every_steps=None,
                     checkpoint_every_seconds=None)  # uninterrupted, in this process
    assert ref.info["sittings"] == 1 and ref.info["wall_seconds"] == ref.info["sitting_seconds"]
    _equal_results(ref, resumed)
    assert ref.history("K=3").loss == resumed.history("K=3").loss


# ------------------------------------------------------------------------------ divergence
def test_divergence_at_a_known_step(tmp_path):
    rec = runner.run("test_diverge", results_dir=tmp_path)
    assert rec.status == "diverged" and rec.status_text == "diverged at step 23"
    assert rec.runs["unstable"]["diverged_at"] == 23 and rec.diverged
    h = rec.history("unstable")
    assert len(h.loss) == 22 and np.all(np.isfinite(h.loss))  # curves stop at step s - 1
    assert list(h.eval_array("step")) == [0, 5, 10, 15, 20]
    assert np.array_equal(rec["unstable"]["loss"], h.loss)
    info = json.loads((rec.path / "record.json").read_text())
    assert info["status"] == "diverged at step 23"
    again = runner.run("test_diverge", results_dir=tmp_path)
    assert again.loaded and again.status == "diverged" and again.status_text == "diverged at step 23"


def test_multi_run_status_summary_and_filter(tmp_path):
    rec = runner.run("test_diverge", {"runs": ["stable", "unstable"]}, results_dir=tmp_path)
    assert rec.status == "diverged" and rec.status_text == "1 of 2 runs diverged: unstable at step 23"
    assert rec.runs["stable"]["status"] == "completed"
    kept = plotting.filter_runs(rec.runs)
    assert list(kept.kept) == ["stable"] and kept.dropped == {"unstable": "diverged at step 23"}
    assert kept.summary == "dropped 1 of 2 runs: 1 diverged"
    rmse = rec.runs["stable"]["final"]["train/rmse"]
    strict = plotting.filter_runs(rec.runs, metric="train/rmse", threshold=rmse / 2)
    assert strict.kept == {} and strict.summary == f"dropped 2 of 2 runs: 1 diverged, 1 with train/rmse > {rmse / 2:g}"
    runs = {"a": {"status": "completed", "train/rmse": 0.3}, "b": {"status": "completed", "train/rmse": 3.0},
            "c": {"status": "completed", "train/rmse": float("nan")}, "d": "diverged at step 7"}
    fig9 = plotting.filter_runs(runs, metric="train/rmse", threshold=2.5)
    assert list(fig9.kept) == ["a"] and fig9.counts == {"diverged": 2, "threshold": 1}
    assert str(fig9) == "dropped 3 of 4 runs: 2 diverged, 1 with train/rmse > 2.5"


def test_plot_marks_diverged_runs(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rec = runner.run("test_diverge", {"runs": ["stable", "unstable"]}, results_dir=tmp_path)
    fig, ax = plt.subplots()
    lines = plotting.plot_runs(ax, rec, "loss")
    assert lines["unstable"].get_linestyle() == "--" and lines["stable"].get_linestyle() == "-"
    assert lines["unstable"].get_label() == "unstable (diverged at step 23)"
    crosses = [ln for ln in ax.lines if ln.get_marker() == "x"]
    assert len(crosses) == 1 and crosses[0].get_xdata()[0] == 22  # the last finite loss (step 22)
    plt.close(fig)


def test_interval_rows_draw_each_record_at_its_mean_and_interval():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from itlin.book import verdicts as V

    a = V.judge("c", "", "", V.paired_gap([0.80, 0.82, 0.81], [0.80, 0.80, 0.80]), "close", 0.02)
    b = V.judge("c", "", "", V.paired_gap([0.70, 0.74], [0.75, 0.75]), "close", 0.02)
    fig, ax = plt.subplots()
    plotting.interval_rows(ax, [("first", a, False), ("fresh", b, True)], band=2.0, xlabel="gap (points)")
    bars = ax.containers
    assert len(bars) == 2
    for y, (v, bar) in enumerate(zip((a, b), bars)):
        (x,), (yy,) = bar.lines[0].get_data()
        assert x == pytest.approx(100 * v.mean) and yy == y
        seg = bar.lines[2][0].get_segments()[0]  # the horizontal error bar: mean -/+ half
        assert seg[0][0] == pytest.approx(100 * (v.mean - v.half)) and seg[1][0] == pytest.approx(100 * (v.mean + v.half))
    assert bars[1].lines[0].get_color() == "C3" and bars[0].lines[0].get_color() == "0.35"
    assert [t.get_text() for t in ax.get_yticklabels()] == ["first", "fresh"]
    assert ax.get_ylim() == (1.5, -0.5)  # the first row on top
    band = [p for p in ax.patches if p.get_x() == pytest.approx(-2.0)]
    assert len(band) == 1 and band[0].get_width() == pytest.approx(4.0)
    plt.close(fig)


# ------------------------------------------------------------------------------ misc
def test_default_results_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("ITLIN_RESULTS", str(tmp_path / "r"))
    assert runner.results_dir() == tmp_path / "r"
    monkeypatch.delenv("ITLIN_RESULTS")
    repo = Path(runner.__file__).resolve().parents[2]
    assert runner.results_dir() == repo / "results"  # a source checkout: the repo's results/
    monkeypatch.chdir(tmp_path)
    assert runner.results_dir("rel") == tmp_path / "rel"
    # one rule for a relative ITLIN_RESULTS, wherever a chapter or script runs from
    monkeypatch.setenv("ITLIN_RESULTS", "shared-results")
    assert runner.results_dir() == repo / "shared-results"
    monkeypatch.chdir(repo / "book")
    assert runner.results_dir() == repo / "shared-results"


def test_lock_refuses_a_second_holder(tmp_path):
    with store._locked(tmp_path, print):
        with pytest.raises(runner.RunLockedError, match=str(os.getpid())):
            with store._locked(tmp_path, print, wait=False):
                pass
    with store._locked(tmp_path, print, wait=False):  # free again
        pass


def test_progress_is_quiet_under_ci(tmp_path, monkeypatch):
    monkeypatch.setenv("ITLIN_QUIET", "1")
    p = runner.plan("test_stage", results_dir=tmp_path)
    ctx = runner.RunContext(p, checkpoint_every_steps=None, checkpoint_every_seconds=None, progress=True,
                            verbose=False)
    assert list(ctx.progress([1, 2], desc="K")) == [1, 2]
    ctx.verbose = True
    monkeypatch.delenv("ITLIN_QUIET")
    monkeypatch.delenv("CI", raising=False)
    loud = runner.RunContext(p, checkpoint_every_steps=None, checkpoint_every_seconds=None, progress=True,
                             verbose=True)
    assert list(loud.progress([1, 2], desc="K")) == [1, 2]


def test_open_record_reads_a_finished_run_and_checks_it(tmp_path):
    rec = runner.run("test_stage", results_dir=tmp_path)
    opened = runner.open_record(rec.path)
    assert opened.experiment == "test_stage" and opened.status == rec.status
    assert np.array_equal(opened["sweep"]["curves"]["eval/test/rmse"], rec["sweep"]["curves"]["eval/test/rmse"])
    with pytest.raises(FileNotFoundError, match="holds no finished run"):
        runner.open_record(tmp_path / "nowhere")
    res = rec.path / "results.npz"
    res.write_bytes(res.read_bytes()[:-10])
    with pytest.raises(ValueError, match="does not match the checksum"):
        runner.open_record(rec.path)


def test_a_record_is_covered_by_its_own_checksum(tmp_path):
    rec = runner.run("test_stage", results_dir=tmp_path)
    info = json.loads((rec.path / "record.json").read_text())
    assert info["record_sha256"] == runner.record_digest(info)
    info["status"] = "completed"
    info["runs"] = {}
    (rec.path / "record.json").write_text(json.dumps(info))
    with pytest.raises(ValueError, match="does not match its own checksum"):
        runner.open_record(rec.path)


def test_every_recorded_run_kept_with_the_book_passes_its_checksums():
    runs = runner.recorded_runs()  # raises on a missing or wrong record or array digest
    assert len(runs) >= len(list(runner.recorded_dir().glob("*/record.nc")))


@pytest.mark.parametrize("variable", ["ITLIN_RESULTS", "ITLIN_CACHE"])
def test_unwritable_results_or_cache_folder_fails_before_any_work(tmp_path, monkeypatch, variable):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("ITLIN_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv(variable, str(blocker / "inside"))
    CALLS.clear()
    with pytest.raises(OSError, match=f"not a writable folder.*{variable}") as err:
        runner.run("test_stage", {"dampings": [0.5, 2.0]})
    assert "\n" not in str(err.value)
    assert CALLS.get("test_stage", 0) == 0  # the experiment never started


# ------------------------------------------------------------------------------ never lose a result (issue 26)
def test_a_recompute_that_dies_keeps_the_previous_result(tmp_path):
    # an edited record.json triggers a recompute; the recompute dies (an exception here, a kill
    # in the issue) after its first stage: the intact results.npz of the previous run is still there
    params = {"dampings": [0.5, 2.0]}
    first = runner.run("test_stage", params, results_dir=tmp_path)
    arrays = (first.path / "results.npz").read_bytes()
    info = json.loads((first.path / "record.json").read_text())
    info["wall_seconds"] += 1.0
    (first.path / "record.json").write_text(json.dumps(info))

    def die():
        raise KeyboardInterrupt("killed")

    HOOKS["after_stage"] = die
    with pytest.warns(RuntimeWarning, match="damaged"), pytest.raises(KeyboardInterrupt):
        runner.run("test_stage", params, results_dir=tmp_path)
    assert (first.path / "results.npz").read_bytes() == arrays
    assert not any(n.endswith(runner.NEW_SUFFIX) for n in os.listdir(first.path))
    HOOKS.clear()
    with pytest.warns(RuntimeWarning, match="damaged"):
        again = runner.run("test_stage", params, results_dir=tmp_path)
    _equal_results(first, again)


@pytest.mark.parametrize("killed_after", ["arrays", "record", "old record removed", "arrays swapped"])
def test_a_swap_killed_at_any_point_leaves_a_result(tmp_path, killed_after):
    # the finished run's files are written beside the old ones and then swapped in; a kill at
    # each point of the swap leaves the old result or the new one, and the next run finishes it
    params = {"dampings": [0.5, 2.0]}
    old = runner.run("test_stage", params, results_dir=tmp_path)
    new = runner.run("test_stage", {"dampings": [0.25]}, results_dir=tmp_path / "other")
    d = old.path
    old_arrays = (d / "results.npz").read_bytes()
    new_info = json.loads((new.path / "record.json").read_text())
    new_info.update(params=old.info["params"], hash=old.info["hash"])
    new_info["record_sha256"] = runner.record_digest(new_info)
    (d / "results.npz.new").write_bytes((new.path / "results.npz").read_bytes())
    if killed_after != "arrays":
        (d / "record.json.new").write_text(json.dumps(new_info))
    if killed_after in ("old record removed", "arrays swapped"):
        os.remove(d / "record.json")
    if killed_after == "arrays swapped":
        os.replace(d / "results.npz.new", d / "results.npz")
    store._complete_swap(d)
    assert not any(n.endswith(runner.NEW_SUFFIX) for n in os.listdir(d))
    rec = runner.run("test_stage", params, results_dir=tmp_path)
    assert rec.loaded and CALLS["test_stage"] == 2  # nothing recomputed: a whole result was there
    if killed_after == "arrays":
        assert (d / "results.npz").read_bytes() == old_arrays
    else:
        assert (d / "results.npz").read_bytes() == (new.path / "results.npz").read_bytes()


def test_lock_between_two_processes_and_after_kill_9(tmp_path):
    # the lock (filelock) excludes a second process, names the holder, and is free again once
    # the holder dies by SIGKILL
    code = ("import sys, time; sys.path.insert(0, {here!r}); from itlin.book import store; from pathlib import Path\n"
            "with store._locked(Path({d!r}), print):\n    print('HELD', flush=True); time.sleep(120)\n")
    holder = subprocess.Popen([sys.executable, "-c", code.format(here=str(HERE.parent), d=str(tmp_path))],
                              stdout=subprocess.PIPE, text=True, env=dict(os.environ, JAX_PLATFORMS="cpu"))
    try:
        assert holder.stdout.readline().strip() == "HELD"
        with pytest.raises(runner.RunLockedError, match=f"process {holder.pid} is running"):
            with store._locked(tmp_path, print, wait=False):
                pass
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=60)
        with store._locked(tmp_path, print, wait=False):
            assert (tmp_path / runner.LOCK_PID_FILE).read_text() == str(os.getpid())
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_the_message_while_waiting_for_another_process_names_no_local_path(tmp_path):
    """A chapter prints the runner's messages, and a rendered page must not show the reader's
    folders: while another process holds a run's lock, the message names the run as the others
    do (experiment/hash in the results folder)."""
    from filelock import FileLock

    from itlin.book import store

    folder = tmp_path / "fig9_damping" / "6a64e00bf20575cc"
    folder.mkdir(parents=True)
    other = FileLock(str(folder / store.LOCK_FILE))
    other.acquire()
    (folder / store.LOCK_PID_FILE).write_text("4242")
    said = []

    def say(msg):
        said.append(msg)
        other.release()  # the other process finishes

    with store._locked(folder, say):
        assert (folder / store.LOCK_PID_FILE).read_text() == str(os.getpid())
    assert said == ["waiting for process 4242, which is running this experiment "
                    "(fig9_damping/6a64e00bf20575cc in the results folder)"]
    assert str(tmp_path) not in said[0]
