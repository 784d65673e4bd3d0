"""Relinearisation schedules: decisions checked against quantities recomputed by hand."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from itlin.kernels import empirical_ntk, kernel_distance
from itlin.linearise import linearised_apply
from itlin.losses import get_loss
from itlin.schedules import AtSteps, FixedPeriod, KernelDrift, LossDrift, get_schedule
from itlin.train import IterativeLinearisation

from nets import TinyMLP, make


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


def _setup(n=16):
    x = jax.random.normal(jax.random.PRNGKey(0), (n, 6))
    y = jax.random.randint(jax.random.PRNGKey(1), (n,), 0, 3)
    model, p0, _ = make(TinyMLP(), x)
    return model, p0, x, y


def test_fixed_period_counts_and_parsing():
    assert FixedPeriod(1).is_gradient_descent
    assert FixedPeriod(7).expected_updates(50) == 7
    assert FixedPeriod(math.inf).expected_updates(10 ** 9) == 0
    assert get_schedule("inf").period == math.inf
    assert get_schedule(None).period == math.inf
    assert get_schedule(100).period == 100
    assert isinstance(get_schedule({"kind": "loss_drift", "rtol": 0.1}), LossDrift)
    with pytest.raises(ValueError, match="unknown schedule kind"):
        get_schedule({"kind": "sometimes"})
    with pytest.raises(ValueError, match="K must be >= 1"):
        get_schedule(-3)


def test_at_steps_relinearises_exactly_there():
    model, p0, x, y = _setup()
    tr = IterativeLinearisation(model, optax.sgd(0.1), schedule=AtSteps([2, 3, 9]), chunk_size=4)
    st, log = tr.run(tr.init(p0), x, y, 10)
    assert (np.flatnonzero(log.relinearised) + 1).tolist() == [2, 3, 9]
    assert st.feature_updates == 3
    with pytest.raises(ValueError, match=">= 1"):
        AtSteps([0, 4])


@pytest.mark.parametrize("rtol", [1e-4, 1e-2])
def test_loss_drift_decides_from_the_true_and_linearised_losses(rtol):
    model, p0, x, y = _setup()
    loss = get_loss("cross_entropy")
    f = model.bind()
    tr = IterativeLinearisation(model, optax.sgd(0.5), schedule=LossDrift(rtol, check_every=2), batch_size=8)
    st = tr.init(p0)
    decisions, expected = [], []
    for t in range(12):
        xb, yb = x[(t % 2) * 8:(t % 2) * 8 + 8], y[(t % 2) * 8:(t % 2) * 8 + 8]
        lin = float(loss(linearised_apply(f, st.anchor, st.params, xb), yb))
        true = float(loss(f(st.params, xb), yb))
        checked = (t + 1) % 2 == 0
        expected.append(checked and abs(lin - true) > rtol * abs(true))
        st, log = tr.step(st, xb, yb)
        decisions.append(bool(log.relinearised))
        np.testing.assert_allclose(float(log.loss), lin, rtol=1e-12)
    assert decisions == expected
    assert st.feature_updates == sum(expected)
    assert any(expected)  # the test exercises both outcomes over the two tolerances
    if rtol == 1e-2:
        assert not all(e for e, t in zip(expected, range(12)) if (t + 1) % 2 == 0)


def test_loss_drift_max_period_and_full_batch():
    model, p0, x, y = _setup()
    tr = IterativeLinearisation(model, optax.sgd(1e-6), schedule=LossDrift(0.5, max_period=4), chunk_size=16)
    st, log = tr.run(tr.init(p0), x, y, 13)
    # with a tiny step the Taylor model stays exact, so only the cap relinearises
    assert (np.flatnonzero(log.relinearised) + 1).tolist() == [4, 8, 12]


def test_kernel_drift_decides_from_the_probe_kernel():
    model, p0, x, y = _setup()
    f = model.bind()
    probe = x[:4]
    thr = 0.02
    sched = KernelDrift(thr, probe, check_every=3)
    tr = IterativeLinearisation(model, optax.sgd(0.8), schedule=sched, batch_size=16)
    st = tr.init(p0)
    k_anchor = empirical_ntk(f, p0, probe, trace=True)
    np.testing.assert_allclose(st.schedule.extra, k_anchor, rtol=1e-12)
    decisions, expected = [], []
    for t in range(1, 13):
        st, log = tr.step(st, x, y)
        if t % 3 == 0:
            k_now = empirical_ntk(f, st.params, probe, trace=True)
            moved = float(kernel_distance(k_now, k_anchor)) > thr
            if moved:
                k_anchor = k_now
        else:
            moved = False
        expected.append(moved)
        decisions.append(bool(log.relinearised))
    assert decisions == expected and any(expected)
    np.testing.assert_allclose(st.schedule.extra, k_anchor, rtol=1e-10)


def test_adaptive_schedule_arguments_are_checked():
    with pytest.raises(ValueError, match="rtol must be > 0"):
        LossDrift(-0.1)
    with pytest.raises(ValueError, match="check_every must be"):
        LossDrift(0.1, check_every=math.inf)
    with pytest.raises(ValueError, match="threshold must be > 0"):
        KernelDrift(0.0, jnp.zeros((2, 3)))


def test_schedule_specs_tell_schedules_apart():
    assert AtSteps([2, 3]).spec() != AtSteps([2, 4]).spec()
    assert AtSteps([2, 3]).describe() == AtSteps([2, 4]).describe()  # labels may coincide, specs may not
    assert FixedPeriod(5).spec() == {"kind": "FixedPeriod", "K": 5}
    assert LossDrift(0.1).spec() != LossDrift(0.1, check_every=2).spec()
    probe = jnp.arange(6.0).reshape(2, 3)
    assert KernelDrift(0.1, probe).spec() != KernelDrift(0.1, probe + 1).spec()
