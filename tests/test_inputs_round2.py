"""Issue 46: inputs that cannot lie, round two. One test per example of the issue: each ends in
the right answer (checked) or a one-line ValueError/TypeError from itlin that names the argument,
raised before any work. The property tests for the validators are in tests/test_properties.py."""

import jax
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
X = jnp.asarray([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
Y = jnp.asarray([1.0, 0.0, 2.0])


def _mlp(p, x):
    return jnp.tanh(x @ p["w"]) @ p["v"]


def _p1():
    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    return {"w": 0.5 * jax.random.normal(k1, (2, 4)), "v": 0.5 * jax.random.normal(k2, (4,))}


# ------------------------------------------------------------------------------ 1. kernels given to the flow
def test_non_symmetric_kernel_is_refused_and_round_off_asymmetry_is_forgiven():
    with pytest.raises(ValueError, match="kernel is not symmetric") as e:
        itlin.gradient_flow(jnp.asarray([[1.0, 5.0], [0.0, 1.0]]), jnp.zeros(2), jnp.ones(2))
    _one_line(e)
    # an asymmetry at round-off level is the symmetrised kernel's flow (documented)
    k = jnp.asarray([[2.0, 1.0], [1.0 + 1e-7, 2.0]])
    got = itlin.gradient_flow(k, jnp.zeros(2), jnp.ones(2)).predict(1.0)
    ref = itlin.gradient_flow(0.5 * (k + k.T), jnp.zeros(2), jnp.ones(2)).predict(1.0)
    np.testing.assert_allclose(got, ref, rtol=1e-6)


def test_indefinite_kernel_is_refused_naming_its_negative_eigenvalue():
    with pytest.raises(ValueError, match=r"not positive semi-definite: its smallest eigenvalue is -1 ") as e:
        itlin.gradient_flow(jnp.asarray([[1.0, 2.0], [2.0, 1.0]]), jnp.zeros(2), jnp.ones(2))
    _one_line(e)
    # a round-off negative eigenvalue (a computed singular NTK) is taken as 0
    flow = itlin.gradient_flow(jnp.asarray([[1.0, 0.0], [0.0, -1e-9]]), jnp.zeros(2), jnp.ones(2), reduction="sum")
    np.testing.assert_allclose(flow.eigenvalues, [0.0, 1.0], atol=1e-6)
    assert float(flow.eigenvalues.min()) >= 0.0


def test_nan_kernel_and_nan_targets_are_refused():
    with pytest.raises(ValueError, match="kernel contains 1 non-finite") as e:
        itlin.gradient_flow(jnp.asarray([[jnp.nan, 0.0], [0.0, 1.0]]), jnp.zeros(2), jnp.ones(2))
    _one_line(e)
    with pytest.raises(ValueError, match="^y contains"):
        itlin.gradient_flow(jnp.eye(2), jnp.zeros(2), jnp.asarray([1.0, jnp.inf]))


def test_negative_or_nan_time_is_refused_and_inf_is_the_limit():
    flow = itlin.gradient_flow(jnp.eye(2), jnp.zeros(2), jnp.ones(2), reduction="sum")
    for t in (-1.0, float("nan"), jnp.asarray([1.0, -2.0])):
        with pytest.raises(ValueError, match="t must be >= 0") as e:
            flow.predict(t)
        _one_line(e)
    with pytest.raises(ValueError, match="t must be >= 0"):
        flow.dual(-1.0)
    np.testing.assert_allclose(flow.predict(jnp.inf), [1.0, 1.0], rtol=1e-6)


def test_empty_problem_is_refused():
    with pytest.raises(ValueError, match="at least one example") as e:
        itlin.gradient_flow(jnp.zeros((0, 0)), jnp.zeros(0), jnp.zeros(0))
    _one_line(e)


def test_test_kernel_of_the_wrong_width_is_refused():
    flow = itlin.gradient_flow(jnp.eye(2), jnp.zeros(2), jnp.ones(2))
    with pytest.raises(ValueError, match=r"k_test_train must be K\(x_test, X\) of shape \(M\*1, 2\)") as e:
        flow.predict(1.0, jnp.ones((1, 3)), jnp.zeros(1))
    _one_line(e)
    with pytest.raises(ValueError, match="f_test0 must hold the 1 test outputs"):
        flow.predict(1.0, jnp.ones((1, 2)), jnp.zeros(2))


def test_flow_params_with_a_flow_of_another_problem_size_is_refused():
    lin3 = itlin.linearise_at(lin, jnp.zeros(2), X)
    flow2 = itlin.gradient_flow(jnp.eye(2), jnp.zeros(2), jnp.ones(2))
    with pytest.raises(ValueError, match=r"lin's outputs have shape \(3,\), the flow's \(2,\)") as e:
        itlin.flow_params(lin3, flow2, 1.0)
    _one_line(e)


def test_smallest_eigenvalue_of_an_indefinite_matrix_is_refused():
    with pytest.raises(ValueError, match="smallest eigenvalue is -1,") as e:
        itlin.smallest_eigenvalue(jnp.asarray([[1.0, 2.0], [2.0, 1.0]]))
    _one_line(e)
    with pytest.raises(ValueError, match="not symmetric"):
        itlin.smallest_eigenvalue(jnp.asarray([[1.0, 5.0], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="non-finite"):
        itlin.smallest_eigenvalue(jnp.asarray([[jnp.nan, 0.0], [0.0, 1.0]]))
    assert abs(float(itlin.smallest_eigenvalue(jnp.asarray([[2.0, 1.0], [1.0, 2.0]]))) - 1.0) < 1e-5


# ------------------------------------------------------------------------------ 2. Gauss-Newton solve and damping
def test_cholesky_with_zero_damping_is_refused_up_front():
    x1 = jnp.ones((3, 2))  # rank one: K singular
    with pytest.raises(ValueError, match="solve='cholesky' needs damping > 0") as e:
        itlin.gauss_newton_step(lin, jnp.zeros(2), x1, jnp.ones(3), solve="cholesky", damping=0.0)
    _one_line(e)
    with pytest.raises(ValueError, match=r"ArbelDamping\(eps0=0\)"):
        itlin.gauss_newton_fit(lin, jnp.zeros(2), x1, jnp.ones(3), 2, solve="cholesky",
                               damping=itlin.ArbelDamping(1.0, 0.0))


def test_cholesky_that_fails_at_round_off_damping_raises_instead_of_nan():
    x1 = jnp.ones((3, 2))
    with pytest.raises(ValueError, match="solve='cholesky' failed") as e:
        itlin.gauss_newton_step(lin, jnp.zeros(2), x1, jnp.ones(3), solve="cholesky", damping=1e-30)
    _one_line(e)
    # the same damping with eigh is the (damped) minimum-norm step, finite: x1 @ p = 1
    p, _ = itlin.gauss_newton_step(lin, jnp.zeros(2), x1, jnp.ones(3), solve="eigh", damping=1e-30)
    np.testing.assert_allclose(x1 @ p, jnp.ones(3), rtol=1e-5)
    # a damping > 0 with Cholesky is the ridge step
    p, _ = itlin.gauss_newton_step(lin, jnp.zeros(2), jnp.eye(2), jnp.ones(2), solve="cholesky", damping=1.0,
                                   reduction="sum")
    np.testing.assert_allclose(p, [0.5, 0.5], rtol=1e-6)


# ------------------------------------------------------------------------------ 3. dtypes other than floating point
def _trainer(schedule=2, loss="squared"):
    return itlin.iterative_linearisation(lin, optax.sgd(0.1), schedule, loss=loss)


@pytest.mark.parametrize("dtype", [jnp.int32, jnp.complex64])
def test_integer_or_complex_parameters_are_refused_by_fit_gauss_newton_and_ntk(dtype):
    p = jnp.zeros(2, dtype)
    with pytest.raises(TypeError, match=f"needs floating-point params .*got dtype {jnp.dtype(dtype)}") as e:
        _trainer().init(p)
    _one_line(e)
    with pytest.raises(TypeError, match="Gauss-Newton needs floating-point parameters"):
        itlin.gauss_newton_step(lin, p, X, Y)
    with pytest.raises(TypeError, match="ntk needs floating-point params"):
        itlin.ntk_eigh(lin, p, X)
    # a state whose parameters were swapped for integers after init is refused by fit as well
    tr = _trainer()
    state = tr.init(jnp.zeros(2))._replace(params=p)
    with pytest.raises(TypeError, match="training needs floating-point parameters"):
        itlin.fit(tr, state, X, Y, steps=2)


def test_complex_inputs_are_refused_and_integer_inputs_give_the_float_answer():
    tr = _trainer()
    xc = X.astype(jnp.complex64)
    with pytest.raises(TypeError, match="training needs real inputs x, got dtype complex64") as e:
        itlin.fit(tr, tr.init(jnp.zeros(2)), xc, Y, steps=2)
    _one_line(e)
    with pytest.raises(TypeError, match="Gauss-Newton needs real inputs x"):
        itlin.gauss_newton_step(lin, jnp.zeros(2), xc, Y)
    with pytest.raises(TypeError, match="ntk needs real x"):
        itlin.ntk_eigh(lin, jnp.zeros(2), xc)
    with pytest.raises(TypeError, match="Gauss-Newton needs real targets y"):
        itlin.gauss_newton_step(lin, jnp.zeros(2), X, Y.astype(jnp.complex64))
    xi = X.astype(jnp.int32)
    a = itlin.fit(tr, tr.init(jnp.zeros(2)), xi, Y, steps=3).state.params
    b = itlin.fit(tr, tr.init(jnp.zeros(2)), X, Y, steps=3).state.params
    np.testing.assert_allclose(a, b, rtol=1e-6)
    np.testing.assert_allclose(itlin.ntk_eigh(lin, jnp.zeros(2), xi)[0], itlin.ntk_eigh(lin, jnp.zeros(2), X)[0],
                               atol=1e-5)


# ------------------------------------------------------------------------------ 4. shapes of the NTK's pieces
def test_ntk_with_the_wrong_feature_dimension_is_one_line():
    with pytest.raises(ValueError, match=r"cannot be applied to x of shape \(3, 4\)") as e:
        itlin.ntk(_mlp, _p1(), jnp.ones((3, 4)))
    _one_line(e)


def test_ntk_with_a_second_input_set_of_another_feature_size_is_refused():
    with pytest.raises(ValueError, match=r"x1 and x2 must have the same feature shape, got \(2,\) and \(3,\)") as e:
        itlin.ntk(lin, jnp.zeros(2), X, jnp.ones((2, 3)))
    _one_line(e)
    np.testing.assert_allclose(itlin.ntk(lin, jnp.zeros(2), X, X[:2]), X @ X[:2].T, rtol=1e-6)


# ------------------------------------------------------------------------------ 5. schedules
def test_at_steps_beyond_the_int32_counter_is_refused():
    with pytest.raises(ValueError, match="AtSteps step 8589934592 is more steps than a run can count") as e:
        itlin.AtSteps([3, 2 ** 33])
    _one_line(e)
    assert itlin.AtSteps([2 ** 31 - 1]).steps == (2 ** 31 - 1,)


@pytest.mark.parametrize("rule", [lambda s: jnp.asarray([True, False]), lambda s: (s > 1, s > 2)])
def test_a_rule_returning_an_array_is_refused_when_the_trainer_is_built(rule):
    with pytest.raises(TypeError, match="a schedule rule must return one bool per step") as e:
        _trainer(rule)
    _one_line(e)


def test_a_scalar_rule_function_is_the_same_as_every():
    tr_rule, tr_every = _trainer(lambda s: s % 2 == 0), _trainer(itlin.Every(2))
    a = itlin.fit(tr_rule, tr_rule.init(jnp.zeros(2)), X, Y, steps=5)
    b = itlin.fit(tr_every, tr_every.init(jnp.zeros(2)), X, Y, steps=5)
    np.testing.assert_allclose(a.state.params, b.state.params, rtol=1e-6)
    assert a.state.feature_updates == b.state.feature_updates == 2


def test_kernel_drift_with_a_probe_of_another_feature_size_is_refused_at_init():
    tr = _trainer(itlin.kernel_drift(0.1, jnp.ones((2, 3))))
    with pytest.raises(ValueError, match=r"cannot be applied to kernel_drift's probe of shape \(2, 3\)") as e:
        tr.init(jnp.zeros(2))
    _one_line(e)


def test_a_run_past_the_int32_step_counter_is_refused_and_one_up_to_it_ends():
    tr = _trainer()
    with pytest.raises(ValueError, match="more steps than the int32 step counter can count") as e:
        itlin.fit(tr, tr.init(jnp.zeros(2)), X, Y, steps=2 ** 31 + 5)
    _one_line(e)
    near = tr.init(jnp.zeros(2))._replace(step=jnp.asarray(2 ** 31 - 4, jnp.int32))
    with pytest.raises(ValueError, match=r"state.step \+ steps"):
        itlin.run(tr, near, X, Y, 5)
    res = itlin.fit(tr, near, X, Y, steps=2 ** 31 - 1, eval_every=2)  # 3 steps up to the last countable one
    assert int(res.state.step) == 2 ** 31 - 1 and res.status == "completed"


# ------------------------------------------------------------------------------ 6. losses
@pytest.mark.parametrize("field", ["check", "hessian"])
def test_a_loss_whose_check_or_hessian_is_not_callable_is_refused(field):
    with pytest.raises(TypeError, match=f"{field} must be a function") as e:
        itlin.Loss("mine", lambda o, t: 0.5 * (o - t) ** 2, **{field: 3})
    _one_line(e)


def test_a_per_example_loss_that_returns_one_scalar_is_refused_before_training():
    reduced = itlin.Loss("reduced", lambda o, t: jnp.mean((o - t) ** 2))
    tr = _trainer(1, loss=reduced)
    with pytest.raises(ValueError, match=r"per_example must return one loss per example, shape \(3,\)") as e:
        itlin.fit(tr, tr.init(jnp.zeros(2)), X, Y, steps=2)
    _one_line(e)
    with pytest.raises(ValueError, match="per_example must return one loss per example"):
        itlin.gauss_newton_step(lin, jnp.zeros(2), X, Y, loss=reduced, hessian="identity")
    # the per-example form trains and evaluates to the same loss as the built-in squared loss
    mine = itlin.Loss("mine", lambda o, t: 0.5 * (o - t) ** 2)
    tr_m, tr_s = _trainer(1, loss=mine), _trainer(1, loss="squared")
    a = itlin.fit(tr_m, tr_m.init(jnp.zeros(2)), X, Y, steps=3)
    b = itlin.fit(tr_s, tr_s.init(jnp.zeros(2)), X, Y, steps=3)
    np.testing.assert_allclose(a.state.params, b.state.params, rtol=1e-6)
    np.testing.assert_allclose(itlin.evaluate(tr_m, a.state, X, Y)["loss"], itlin.evaluate(tr_s, b.state, X, Y)["loss"],
                               rtol=1e-6)


# ------------------------------------------------------------------------------ 7. sweeps
def test_an_int64_grid_beyond_int32_is_refused_when_64_bit_mode_is_off():
    assert not jax.config.jax_enable_x64
    big = np.asarray([1, 2 ** 40], np.int64)
    with pytest.raises(ValueError, match=r"grid leaf \['n'\] holds 1099511627776, which int64 -> 32 bits") as e:
        itlin.sweep(lambda p: p["n"] + 1, {"n": big})
    _one_line(e)
    with pytest.raises(ValueError, match="float64 -> 32 bits"):
        itlin.sweep(lambda p: p["v"] * 2, {"v": np.asarray([1.0, 1e300])})
    # an int64 grid that fits is swept exactly
    out = itlin.sweep(lambda p: p["n"] + 1, {"n": np.asarray([1, 2 ** 30], np.int64)})
    assert out.tolist() == [2, 2 ** 30 + 1]


# ------------------------------------------------------------------------------ 8. data and models
@pytest.mark.parametrize("interval", [(0, np.inf), (1,), "ab", (2, 1), (0, float("nan")), None, (0, 1e9)])
def test_malformed_or_infinite_quintic_intervals_are_refused(interval):
    from itlin import data

    with pytest.raises(ValueError, match="interval") as e:
        data.load("quintic", interval=interval)
    _one_line(e)


def test_a_finite_quintic_interval_gives_finite_data():
    from itlin import data

    d = data.load("quintic", n_train=3, interval=(0, 2))
    np.testing.assert_allclose(d.x_train[:, 0], [0.0, 1.0, 2.0])
    np.testing.assert_allclose(d.y_train[:, 0], [-1.0, 1 / 32 - 0.5 + 2 - 1, 1.0 - 4.0 + 4.0 - 1.0], rtol=1e-6)


@pytest.mark.parametrize("seed, error", [(-1, ValueError), (2 ** 32, ValueError), (1.5, TypeError)])
def test_bad_seeds_are_refused_by_load_and_subset(seed, error):
    from itlin import data

    with pytest.raises(error, match="seed must be an integer from 0 to 2\\*\\*32 - 1") as e:
        data.load("quintic", seed=seed)
    _one_line(e)
    with pytest.raises(error, match="seed must be"):
        data.load("quintic").subset(5, seed=seed)


@pytest.mark.parametrize("build, name", [(lambda m: m.mlp(widths=(5, 0)), "widths\\[1\\]"),
                                         (lambda m: m.lenet(channels=(5, 0)), "channels\\[1\\]"),
                                         (lambda m: m.lenet1d(channels=0), "channels\\[0\\]"),
                                         (lambda m: m.lenet(dense=(8, 0)), "dense\\[1\\]")])
def test_zero_width_layers_are_refused_when_the_model_is_built(build, name):
    from itlin import models

    with pytest.raises(ValueError, match=f"{name} must be a positive integer") as e:
        build(models)
    _one_line(e)


# ------------------------------------------------------------------------------ 9. the runner and the CLI
BOOK = __import__("pathlib").Path(__file__).resolve().parent.parent / "book"


def _files(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def test_a_batch_larger_than_the_training_set_is_refused_before_the_runner_writes(tmp_path):
    from itlin.book import experiments as E
    from itlin.book import runner

    with pytest.raises(E.ParameterError, match="batch_size=256 is more than n_train=100") as e:
        runner.run("fig2_k_sweep", {"scale": "tiny", "n_train": 100}, results_dir=tmp_path)
    _one_line(e)
    assert _files(tmp_path) == []  # no .lock, .lock.pid, params.json
    # every experiment's own scales pass the shared check
    for name in E.names():
        for scale in ("tiny", "default", "paper"):
            E.get(name).resolve({"scale": scale})


def _cli(tmp_path, monkeypatch, capsys, *args):
    from itlin.book import run

    monkeypatch.setenv("ITLIN_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("ITLIN_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out.ipynb"
    rc = run.main([str(BOOK / "k_sweeps.md"), str(out), *args])
    err = capsys.readouterr().err.strip()
    return rc, err, out


def test_cli_refuses_n_train_below_the_batch_size_with_exit_2_and_leaves_nothing(tmp_path, monkeypatch, capsys):
    rc, err, out = _cli(tmp_path, monkeypatch, capsys, "-p", "scale", "tiny", "-p", "n_train", "100")
    assert rc == 2 and "\n" not in err and "batch_size=256 is more than n_train=100" in err, err
    assert not out.exists()
    assert [f for f in _files(tmp_path) if not f.startswith("cache")] == []


def test_cli_refuses_an_unknown_kernel_with_exit_2_and_leaves_nothing(tmp_path, monkeypatch, capsys):
    rc, err, out = _cli(tmp_path, monkeypatch, capsys, "--kernel", "nosuchkernel")
    assert rc == 2 and "\n" not in err and "no Jupyter kernel named 'nosuchkernel'" in err, err
    assert not out.exists() and _files(tmp_path) == []


def test_cli_refuses_a_parameter_given_twice(tmp_path, monkeypatch, capsys):
    rc, err, out = _cli(tmp_path, monkeypatch, capsys, "-p", "seeds", "2", "-p", "seeds", "3")
    assert rc == 2 and "\n" not in err and "parameter 'seeds' is given twice" in err, err
    assert not out.exists() and _files(tmp_path) == []
