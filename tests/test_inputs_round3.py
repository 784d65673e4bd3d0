"""Issue 59: records that cannot be lost or damaged silently, round three of bad inputs. One test per
class of the issue's probes: each ends in the right answer (checked), or in a one-line error that
names the file or argument and the fix, raised before any work and before any file changes. The
hypothesis properties of joining parts are at the end."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import optax
import pytest

import itlin


def _one_line(excinfo):
    msg = str(excinfo.value)
    assert msg and "\n" not in msg, msg
    return msg


lin = lambda p, x: x @ p  # noqa: E731
X, Y = jnp.eye(2), jnp.ones(2)


# ------------------------------------------------------------------------------ arguments taken without a word
def test_ntk_fn_with_the_primal_form_is_refused_and_kept_by_the_kernel_form():
    kernel = lambda p, x: x @ x.T  # noqa: E731 - the NTK of x @ p, in closed form
    for call in (itlin.gauss_newton_step, itlin.gauss_newton_direction):
        with pytest.raises(ValueError, match="ntk_fn is used by the kernel form only") as e:
            call(lin, jnp.zeros(2), X, Y, form=itlin.PrimalForm(), ntk_fn=kernel)
        _one_line(e)
    with pytest.raises(ValueError, match="drop ntk_fn or pass form=KernelForm"):
        itlin.gauss_newton_fit(lin, jnp.zeros(2), X, Y, 3, method="primal", ntk_fn=kernel)
    with pytest.raises(TypeError, match="ntk_fn must be a function"):
        itlin.gauss_newton_step(lin, jnp.zeros(2), X, Y, ntk_fn="closed form")
    # the kernel form uses it: the undamped step is J^T K^+ g, so a kernel twice as large halves it
    p1, _ = itlin.gauss_newton_step(lin, jnp.zeros(2), X, Y, ntk_fn=kernel)
    p2, _ = itlin.gauss_newton_step(lin, jnp.zeros(2), X, Y, ntk_fn=lambda p, x: 2.0 * x @ x.T)
    np.testing.assert_allclose(np.asarray(p2), 0.5 * np.asarray(p1), rtol=1e-6)


def test_an_old_diverged_status_reads_the_same_in_the_record_and_its_history():
    from pathlib import Path

    from itlin.book.experiments.main._rows import run_summary
    from itlin.book.store import Record, run_status

    runs = {"old K=1 seed=0": {"status": "diverged at step 5", "loss_every": 1, "steps": 5, "feature_updates": 5},
            "new K=1 seed=1": {"status": "diverged", "diverged_at": 7, "loss_every": 1, "steps": 7,
                               "feature_updates": 7},
            "done K=1 seed=2": {"status": "completed", "diverged_at": None, "loss_every": 1, "steps": 9,
                                "feature_updates": 9}}
    rec = Record("x", {}, "x", Path("."), {}, [], {"runs": runs})
    assert rec.diverged
    for tag, at in (("old K=1 seed=0", 5), ("new K=1 seed=1", 7), ("done K=1 seed=2", None)):
        h = rec.history(tag)
        assert run_status(runs[tag]) == (h.status, h.diverged_at) == ("completed" if at is None else "diverged", at)
        row = run_summary(rec, tag)
        assert row["diverged_at"] == at and row["status"] == h.describe()
    only_old = Record("x", {}, "x", Path("."), {}, [], {"runs": {"a": runs["old K=1 seed=0"]}})
    assert only_old.diverged and only_old.history("a").diverged


# ------------------------------------------------------------------------------ sizes that exhaust memory
def test_a_gauss_newton_trace_too_large_for_memory_is_refused_before_allocation(monkeypatch):
    monkeypatch.delenv("ITLIN_MEMORY_LIMIT", raising=False)
    with pytest.raises(ValueError, match=r"gauss_newton_fit \(1,000,000,000,000 steps' trace of losses, 4\.0 TB") as e:
        itlin.gauss_newton_fit(lin, jnp.zeros(2), X, Y, 10 ** 12)
    assert "steps per call" in _one_line(e)
    monkeypatch.setenv("ITLIN_MEMORY_LIMIT", "1k")  # the user's limit: 1000 steps of float32 need 4 kB
    with pytest.raises(ValueError, match=r"more than the 1\.0 kB of ITLIN_MEMORY_LIMIT; run at most 246 steps per call"):
        itlin.gauss_newton_fit(lin, jnp.zeros(2), X, Y, 1000)
    _, trace = itlin.gauss_newton_fit(lin, jnp.zeros(2), X, Y, 200, tol=1e-12)  # 800 bytes fit
    assert int(trace.steps) == 1
    monkeypatch.setenv("ITLIN_MEMORY_LIMIT", "inf")  # no check; the int32 step counter still bounds a call
    with pytest.raises(ValueError, match="more than the int32 step counter counts"):
        itlin.gauss_newton_fit(lin, jnp.zeros(2), X, Y, 2 ** 31)
    monkeypatch.setenv("ITLIN_MEMORY_LIMIT", "lots")
    with pytest.raises(ValueError, match="ITLIN_MEMORY_LIMIT='lots' is not a number of bytes"):
        itlin.gauss_newton_fit(lin, jnp.zeros(2), X, Y, 10)


def test_a_fit_whose_history_cannot_fit_is_refused_before_the_first_step(monkeypatch):
    monkeypatch.delenv("ITLIN_MEMORY_LIMIT", raising=False)
    tr = itlin.iterative_linearisation(lin, optax.sgd(0.5), 1, loss="squared")
    state = tr.init(jnp.zeros(2))
    monkeypatch.setattr("itlin.core._memory._physical", lambda: 16e9)  # a 16 GB machine
    with pytest.raises(ValueError, match=r"fit's History \(2,147,483,647 training losses at loss_every=1") as e:
        itlin.fit(tr, state, X, Y, 2 ** 31 - 1, loss_every=1)
    assert "raise loss_every and eval_every" in _one_line(e)
    monkeypatch.setenv("ITLIN_MEMORY_LIMIT", "8k")
    with pytest.raises(ValueError, match="more than the 8.0 kB of ITLIN_MEMORY_LIMIT"):
        itlin.fit(tr, state, X, Y, 100, loss_every=1, eval_every=1, eval_sets={"train": (X, Y)})
    res = itlin.fit(tr, state, X, Y, 100, loss_every=10, eval_every=50)  # 10 losses, 4 evaluations: 0.5 kB
    assert res.status == "completed" and len(res.history.loss) == 10


def test_a_sweep_whose_outputs_cannot_fit_is_refused_with_the_chunk_that_fits(monkeypatch):
    monkeypatch.delenv("ITLIN_MEMORY_LIMIT", raising=False)
    monkeypatch.setattr("itlin.core._memory._physical", lambda: 128e9)  # a 128 GB machine
    fn = lambda p: jnp.zeros(10 ** 5) * p["a"]  # noqa: E731 - 400 kB of outputs a point
    with pytest.raises(ValueError, match=r"sweep's outputs \(1,000,000 points, 400\.0 kB each, gathered on the host\) "
                                         r"needs at least 400\.0 GB, more than the 128\.0 GB") as e:
        itlin.sweep(fn, {"a": np.arange(10 ** 6, dtype=np.float32)})
    assert "slices of the grid of at most 320,000 points" in _one_line(e)
    # one program's points on a device: 4 MB where a device has 2 MB; chunk as the error says, and it runs
    real = itlin.core._memory.limit
    monkeypatch.setattr("itlin.core._memory.limit",
                        lambda device=None: (2e6, "the memory of GPU 0") if device is not None else real(None))
    small = lambda p: jnp.ones(250) * p["a"]  # noqa: E731 - 1 kB of outputs a point, 4 bytes of inputs
    grid = {"a": np.arange(4000, dtype=np.float32)}
    with pytest.raises(ValueError, match=r"sweep \(4,000 points per device, 1\.0 kB of inputs and outputs each\) needs "
                                         r"at least 4\.0 MB, more than the 2\.0 MB of the memory of GPU 0; pass "
                                         r"chunk=1992 ") as e:
        itlin.sweep(small, grid)
    _one_line(e)
    out = itlin.sweep(small, grid, chunk=1992)
    np.testing.assert_array_equal(out, np.arange(4000, dtype=np.float32)[:, None] * np.ones(250, np.float32))
