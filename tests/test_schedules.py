"""Relinearisation schedules: decisions checked against quantities recomputed by hand."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import itlin
from itlin import (AtSteps, Every, as_schedule, iterative_linearisation, kernel_distance, kernel_drift, linearised_apply,
                   loss_drift, ntk, parse_period, run)
from itlin.core.losses import get_loss

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
    model, p0, x, y = _setup()
    assert iterative_linearisation(model, optax.sgd(0.1), 1).gd_path
    assert not iterative_linearisation(model, optax.sgd(0.1), 1, exact_gd=False).gd_path
    assert Every(7).updates(50) == 7
    assert Every(math.inf).updates(10 ** 9) == 0
    # one parser: every spelling of infinity that one part accepts, the others accept too
    for word in ("inf", "Infinity", "never", " +inf "):
        assert parse_period(word) == math.inf
        assert as_schedule(word).name == "K=inf"
    assert parse_period(1e5) == 100000 and parse_period("100") == 100
    assert as_schedule(100).name == "K=100"
    for bad, err in ((-3, "K must be >= 1"), (None, 'integer >= 1 or "inf"'), ("math.inf", 'integer >= 1 or "inf"'),
                     (2.5, "whole number"), (float("nan"), "got nan")):
        with pytest.raises((ValueError, TypeError), match=err):
            parse_period(bad)


def test_one_set_of_infinity_spellings_for_periods_lists_and_records():
    # issue 11: K="+inf" parsed while Ks="[1, +inf]" was refused. Every spelling that
    # parse_period accepts is accepted as an element of a list parameter (given as text, as
    # papermill passes it), and every one it refuses is refused there too, with the same value.
    import dataclasses
    from typing import Optional

    from itlin.book.experiments import ParameterError, Params, Period, param
    from itlin.book.experiments.main._rows import as_K
    from itlin.core.schedules import INF_WORDS

    @dataclasses.dataclass(frozen=True)
    class P(Params):
        K: Period = param(1, "a period")
        Ks: Optional[tuple[Period, ...]] = param(None, "periods")

    words = [case(w) for w in INF_WORDS for case in (str.lower, str.upper, str.title)]
    near = ["-inf", "math.inf", "inf.0", "infinite", "nevermore", "+never", "- inf", "∞", "nan", "1e999", "10",
            "1e3", "0", "2.5", "'inf'", "'never'", '"+Infinity"']
    accepted = 0
    for spelling in words + near + [f" {w} " for w in words]:
        try:
            direct = parse_period(spelling.strip("'\""))
        except (TypeError, ValueError):
            direct = None
        try:
            listed = P.from_dict({"Ks": f"[1, {spelling}]"}).Ks[1]
        except ParameterError:
            listed = None
        assert listed == direct, (spelling, direct, listed)
        if direct is not None:
            accepted += 1
            assert P.from_dict({"K": spelling.strip("'\"")}).K == direct
            assert as_K(spelling.strip("'\"")) == float(direct)  # the records' reader agrees too
    assert accepted == 3 * len(INF_WORDS) * 2 + 6  # the words (any case, padded), 1e999, 10, 1e3 and 3 quoted
    assert {"inf", "+inf", "infinity", "+infinity", "never"} <= set(INF_WORDS)


def test_a_plain_function_is_a_rule():
    model, p0, x, y = _setup()
    rule = lambda step: (step < 3) | (step % 5 == 0)
    tr = iterative_linearisation(model, optax.sgd(0.1), rule)
    st, log = run(tr, tr.init(p0), x, y, 11, chunk_size=4)
    assert (np.flatnonzero(log.relinearised) + 1).tolist() == [1, 2, 5, 10]
    assert st.feature_updates == 4


def test_at_steps_relinearises_exactly_there():
    model, p0, x, y = _setup()
    tr = iterative_linearisation(model, optax.sgd(0.1), AtSteps.of([2, 3, 9]))
    st, log = run(tr, tr.init(p0), x, y, 10, chunk_size=4)
    assert (np.flatnonzero(log.relinearised) + 1).tolist() == [2, 3, 9]
    assert st.feature_updates == 3
    with pytest.raises(ValueError, match=">= 1"):
        AtSteps.of([0, 4])


@pytest.mark.parametrize("rtol", [1e-4, 1e-2])
def test_loss_drift_decides_from_the_true_and_linearised_losses(rtol):
    model, p0, x, y = _setup()
    loss = get_loss("cross_entropy")
    f = model.bind()
    tr = iterative_linearisation(model, optax.sgd(0.5), loss_drift(rtol, check_every=2))
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
    tr = iterative_linearisation(model, optax.sgd(1e-6), loss_drift(0.5, max_period=4))
    st, log = run(tr, tr.init(p0), x, y, 13, chunk_size=16)
    # with a tiny step the Taylor model stays exact, so only the cap relinearises
    assert (np.flatnonzero(log.relinearised) + 1).tolist() == [4, 8, 12]


def test_kernel_drift_decides_from_the_probe_kernel():
    model, p0, x, y = _setup()
    f = model.bind()
    probe = x[:4]
    thr = 0.02
    sched = kernel_drift(thr, probe, check_every=3)
    tr = iterative_linearisation(model, optax.sgd(0.8), sched)
    st = tr.init(p0)
    k_anchor = ntk(f, p0, probe, trace=True)
    np.testing.assert_allclose(st.schedule, k_anchor, rtol=1e-12)
    decisions, expected = [], []
    for t in range(1, 13):
        st, log = tr.step(st, x, y)
        if t % 3 == 0:
            k_now = ntk(f, st.params, probe, trace=True)
            moved = float(kernel_distance(k_now, k_anchor)) > thr
            if moved:
                k_anchor = k_now
        else:
            moved = False
        expected.append(moved)
        decisions.append(bool(log.relinearised))
    assert decisions == expected and any(expected)
    np.testing.assert_allclose(st.schedule, k_anchor, rtol=1e-10)


def test_adaptive_schedule_arguments_are_checked():
    with pytest.raises(ValueError, match="rtol must be > 0"):
        loss_drift(-0.1)
    with pytest.raises(ValueError, match="check_every must be"):
        loss_drift(0.1, check_every=math.inf)
    with pytest.raises(ValueError, match="threshold must be > 0"):
        kernel_drift(0.0, jnp.zeros((2, 3)))


def test_schedule_specs_tell_schedules_apart():
    spec = lambda s: as_schedule(s).spec
    assert spec(AtSteps.of([2, 3])) != spec(AtSteps.of([2, 4]))
    assert as_schedule(AtSteps.of([2, 3])).name == as_schedule(AtSteps.of([2, 4])).name  # labels may coincide
    assert spec(5) == spec(Every(5)) == ("Every", 5)
    assert spec(loss_drift(0.1)) != spec(loss_drift(0.1, check_every=2))
    probe = jnp.arange(6.0).reshape(2, 3)
    assert spec(kernel_drift(0.1, probe)) != spec(kernel_drift(0.1, probe + 1))


# ------------------------------------------------------------------------------ the period in the state (issue 25)
def _trajectory(step, st, x, y, steps):
    for t in range(steps):
        b = slice((t % 2) * 8, (t % 2) * 8 + 8)
        st, log = step(st, x[b], y[b])
    return st


def _same_bits(a, b):
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert len(la) == len(lb)
    for u, v in zip(la, lb):
        np.testing.assert_array_equal(np.asarray(u), np.asarray(v))


def test_periodic_serves_every_K_with_one_compiled_step_bit_for_bit_as_Every():
    model, p0, x, y = _setup()
    opt = optax.sgd(0.3)
    tr = iterative_linearisation(model, opt, itlin.periodic())
    traces = []

    def counted(st, xb, yb):
        traces.append(1)
        return tr.step(st, xb, yb)

    step = jax.jit(counted)
    for K in (2, 3, 5, math.inf):
        st = _trajectory(step, tr.init(p0, period=K), x, y, 11)
        ref_tr = iterative_linearisation(model, opt, Every(K))
        ref = _trajectory(jax.jit(ref_tr.step), ref_tr.init(p0), x, y, 11)
        _same_bits((st.step, st.params, st.anchor, st.opt_state, st.updates, st.last),
                   (ref.step, ref.params, ref.anchor, ref.opt_state, ref.updates, ref.last))
        assert st.feature_updates == Every(K).updates(11)  # Definition 1: floor(T / K), none at step 0
    assert len(traces) == 1  # one trace (one compiled program) for every K
    # K = 1: the linearised path relinearised after every step, as Every(1) without the exact-gradient
    # shortcut, bit for bit; and gradient descent up to rounding
    st = _trajectory(step, tr.init(p0, period=1), x, y, 6)
    lin1 = iterative_linearisation(model, opt, 1, exact_gd=False)
    _same_bits(st.params, _trajectory(jax.jit(lin1.step), lin1.init(p0), x, y, 6).params)
    gd = iterative_linearisation(model, opt, 1)
    gd_st = _trajectory(jax.jit(gd.step), gd.init(p0), x, y, 6)
    assert st.feature_updates == 6
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12), st.params,
                           gd_st.params)
    assert len(traces) == 1
    # K = inf never moves the anchor
    st = _trajectory(step, tr.init(p0, period="inf"), x, y, 7)
    assert st.feature_updates == 0
    _same_bits(st.anchor, p0)


def test_periodic_horizon_leaves_no_relinearisation_after_the_last_step_as_the_book_schedule():
    def sparse_schedule(K, steps):  # the fixed schedule the book's experiments used before
        return itlin.AtSteps.of(range(K, steps, K))

    model, p0, x, y = _setup()
    opt = optax.sgd(0.3)
    tr = iterative_linearisation(model, opt, itlin.periodic())
    for K, steps in ((2, 10), (3, 10), (4, 9), (10, 10), (7, 5)):
        ref_tr = iterative_linearisation(model, opt, sparse_schedule(K, steps))
        ref, ref_log = run(ref_tr, ref_tr.init(p0), x, y, steps, batch_size=8, chunk_size=4)
        st, log = run(tr, tr.init(p0, period=K, horizon=steps), x, y, steps, batch_size=8, chunk_size=4)
        _same_bits((st.params, st.anchor, st.updates, st.last), (ref.params, ref.anchor, ref.updates, ref.last))
        np.testing.assert_array_equal(log.relinearised, ref_log.relinearised)
        assert st.feature_updates == math.ceil(steps / K) - 1
        # full batch (the stored linearisation per phase) agrees with the per-step path
        fb, _ = run(tr, tr.init(p0, period=K, horizon=steps), x, y, steps)
        fb_ref, _ = run(ref_tr, ref_tr.init(p0), x, y, steps)
        assert fb.feature_updates == fb_ref.feature_updates
        _same_bits(fb.params, fb_ref.params)


def test_periodic_state_is_vmappable_over_K_and_checked_when_concrete():
    model, p0, x, y = _setup()
    tr = iterative_linearisation(model, optax.sgd(0.3), itlin.periodic())
    Ks = jnp.asarray([2.0, 3.0, jnp.inf])

    def one(K):
        st = tr.init(p0, period=K, horizon=9)
        st, _ = jax.lax.scan(lambda s, _: (tr.step(s, x, y)[0], None), st, None, length=9)
        return st

    batched = jax.vmap(one)(Ks)
    assert batched.updates.tolist() == [4, 2, 0]
    for i, K in enumerate((2, 3, math.inf)):
        alone = one(K)
        jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a[i], b, rtol=1e-12, atol=1e-14),
                               batched.params, alone.params)
    for bad, err in ((0, "period must be >= 1"), (2.5, "whole number"), (-1, ">= 1"), (10 ** 400, "use \"inf\"")):
        with pytest.raises(ValueError, match=err):
            tr.init(p0, period=bad)
    with pytest.raises(ValueError, match="horizon must be"):
        tr.init(p0, period=2, horizon=0)
    with pytest.raises(TypeError, match="no state to set; use itlin.periodic"):
        iterative_linearisation(model, optax.sgd(0.3), 5).init(p0, period=2)
    with pytest.raises(TypeError, match="takes"):
        tr.init(p0, K=2)
