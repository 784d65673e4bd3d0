"""Issue 26: every bad input gives the right answer or a one-line error that names the argument
and the fix, before any work starts (and issue 25's Loss Hessian as data). One test per case."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import itlin
from itlin import gauss_newton_direction, gauss_newton_fit, gauss_newton_step, get_loss


def _one_line(excinfo):
    msg = str(excinfo.value)
    assert msg and "\n" not in msg, msg
    return msg


def _linear():
    f = lambda p, x: x @ p
    x = jnp.asarray([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    return f, x


# ------------------------------------------------------------------------------ losses carry their Hessian
def test_custom_loss_without_a_hessian_is_refused_by_gauss_newton_with_the_fix():
    f, x = _linear()
    y = jnp.asarray([1.0, 0.0, 2.0])
    bare = itlin.Loss("my_squared", lambda out, t: 0.5 * (out - t) ** 2)
    with pytest.raises(ValueError, match="carries no output Hessian: give it one, Loss") as e:
        gauss_newton_direction(f, jnp.zeros(2), x, y, loss=bare)
    _one_line(e)
    # hessian="identity" needs none: the same step as the built-in squared loss with H = I
    d_bare, _ = gauss_newton_direction(f, jnp.zeros(2), x, y, loss=bare, hessian="identity", damping=0.1)
    d_ref, _ = gauss_newton_direction(f, jnp.zeros(2), x, y, loss="squared", hessian="identity", damping=0.1)
    np.testing.assert_array_equal(d_bare, d_ref)


def test_custom_loss_with_its_hessian_gives_the_builtin_step():
    # a custom softmax cross-entropy with its Hessian as data equals the built-in, both solvers
    f = lambda p, x: x @ p
    x = jax.random.normal(jax.random.PRNGKey(0), (5, 3))
    p0 = 0.3 * jax.random.normal(jax.random.PRNGKey(1), (3, 4))
    y = jnp.asarray([0, 3, 1, 2, 1])
    per = lambda out, t: -jnp.take_along_axis(jax.nn.log_softmax(out), t[:, None], axis=1)[:, 0]

    def hess(out, t):
        p = jax.nn.softmax(out)
        return jax.vmap(jnp.diag)(p) - p[:, :, None] * p[:, None, :]

    mine = itlin.Loss("my_xent", per, hessian=hess)
    for damping in (0.0, 0.2, itlin.ArbelDamping(1.0, 1e-3)):
        d_mine, i_mine = gauss_newton_direction(f, p0, x, y, loss=mine, damping=damping)
        d_ref, i_ref = gauss_newton_direction(f, p0, x, y, loss="cross_entropy", damping=damping)
        np.testing.assert_allclose(d_mine, d_ref, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(i_mine.damping, i_ref.damping, rtol=1e-5)
    # the reduction is kept for a custom loss (it used to be looked up again by name)
    assert get_loss(mine, "sum").per_example is per and get_loss(mine, "sum").reduction == "sum"
    # a scalar Hessian c means c * I per example
    sq = itlin.Loss("my_sq", lambda out, t: 0.5 * jnp.sum((out - t) ** 2, -1), hessian=lambda out, t: 1.0)
    h = sq.hessian_outputs(jnp.zeros((2, 3)), jnp.zeros((2, 3)))
    np.testing.assert_array_equal(h, np.stack([np.eye(3) / 2] * 2))


def test_every_loss_is_listed_in_the_docstrings():
    from itlin.core.losses import LOSSES

    for name, aliases in LOSSES.items():
        for word in (name,) + aliases:
            assert f'"{word}"' in get_loss.__doc__, word
        assert get_loss(name).hessian is not None and get_loss(name).check is not None
        assert f'"{name}"' in itlin.iterative_linearisation.__doc__, name


# ------------------------------------------------------------------------------ the trainer and its drivers
def _trainer(K=2, loss="squared", outputs=1):
    f = (lambda p, x: x @ p)
    tr = itlin.iterative_linearisation(f, optax.sgd(0.1), K, loss=loss)
    return tr, tr.init(jnp.zeros((3, outputs)) if outputs > 1 else jnp.zeros(3))


X = jnp.asarray(np.random.default_rng(0).normal(size=(8, 3)), jnp.float32)
Y = jnp.asarray(np.random.default_rng(1).normal(size=(8,)), jnp.float32)


def _raises(exc, match, fn, *args, **kwargs):
    with pytest.raises(exc, match=match) as e:
        fn(*args, **kwargs)
    return _one_line(e)


def test_cross_entropy_labels_out_of_range_are_refused_everywhere():
    # get_loss(...)(...) on concrete arrays used to give 0.0
    _raises(ValueError, r"class labels must lie in 0\.\.2 .* got -1", get_loss("cross_entropy"),
            jnp.zeros((2, 3)), jnp.asarray([5, -1]))
    _raises(ValueError, r"class labels must lie in 0\.\.2 .* got 5", get_loss("cross_entropy"),
            jnp.zeros((2, 3)), jnp.asarray([0, 5]))
    tr, st = _trainer(loss="cross_entropy", outputs=3)
    bad = jnp.asarray([0, 1, 2, 3, 0, 1, 2, 0])
    _raises(ValueError, "class labels must lie in 0..2", itlin.fit, tr, st, X, bad, 4)
    _raises(ValueError, "class labels must lie in 0..2", itlin.run, tr, st, X, bad, 4)
    _raises(ValueError, "class labels must lie in 0..2", itlin.evaluate, tr, st, X, bad)
    _raises(ValueError, "class labels must lie in 0..2", itlin.fit, tr, st, X, bad % 3, 4,
            eval_sets={"test": (X, -bad)})
    _raises(ValueError, "class labels must lie in 0..2", gauss_newton_step, lambda p, x: x @ p, jnp.zeros((3, 3)),
            X, bad, loss="cross_entropy")
    # in range: accepted, and traced labels are not checked (jit still works)
    ok = jax.jit(lambda f, y: get_loss("cross_entropy")(f, y))(jnp.zeros((2, 3)), jnp.asarray([0, 2]))
    assert float(ok) == pytest.approx(math.log(3))


def test_one_output_model_with_cross_entropy_is_refused_with_the_fix():
    f = lambda p, x: x @ p
    tr = itlin.iterative_linearisation(f, optax.sgd(0.1), 1)  # cross-entropy by default
    x4 = jnp.eye(4)
    msg = _raises(ValueError, "binary_cross_entropy", itlin.fit, tr, tr.init(jnp.zeros(4)), x4,
                  jnp.asarray([0, 1, 2, 1]), 4)
    assert "two outputs" in msg
    _raises(ValueError, "one output per class", get_loss("cross_entropy"), jnp.zeros(4), jnp.asarray([0, 1, 0, 1]))
    # the fix named works: binary cross-entropy on one output
    bce = itlin.iterative_linearisation(f, optax.sgd(0.1), 1, loss="binary_cross_entropy")
    assert itlin.fit(bce, bce.init(jnp.zeros(4)), x4, jnp.asarray([0, 1, 1, 0]), 4).status == "completed"


def test_nan_in_targets_and_in_evaluation_sets_is_a_data_error():
    tr, st = _trainer()
    y_nan = Y.at[3].set(jnp.nan)
    _raises(ValueError, "training targets y contains 1 non-finite", itlin.fit, tr, st, X, y_nan, 4)
    _raises(ValueError, "non-finite", itlin.fit, tr, st, X, Y, 4, eval_sets={"test": (X.at[0, 0].set(jnp.nan), Y)})
    _raises(ValueError, "non-finite", itlin.evaluate, tr, st, X, y_nan)
    trc, stc = _trainer(loss="cross_entropy", outputs=3)
    _raises(ValueError, "non-finite", itlin.evaluate, trc, stc, X.at[1, 1].set(jnp.nan), jnp.zeros(8, jnp.int32))


@pytest.mark.parametrize("K, match", [(0, ">= 1"), (-2, ">= 1"), (2.5, "whole number"), (10 ** 400, 'use "inf"')])
def test_bad_periods_are_refused_on_construction(K, match):
    _raises(ValueError, match, itlin.Every, K)
    _raises(ValueError, match, itlin.iterative_linearisation, lambda p, x: x @ p, optax.sgd(0.1), K)


def test_at_steps_refuses_step_zero_on_direct_construction():
    _raises(ValueError, ">= 1", itlin.AtSteps, (0,))
    _raises(ValueError, "whole step numbers", itlin.AtSteps, (2.5,))
    assert itlin.AtSteps((3, 1, 3)).steps == (1, 3)


@pytest.mark.parametrize("steps, exc, match", [(2.7, ValueError, "steps must be a whole number"),
                                               ("abc", TypeError, "steps must be an integer"),
                                               (-3, ValueError, "steps must be an integer >= 0")])
def test_bad_step_counts_are_refused_by_fit_and_run(steps, exc, match):
    tr, st = _trainer()
    _raises(exc, match, itlin.fit, tr, st, X, Y, steps)
    _raises(exc, match, itlin.run, tr, st, X, Y, steps)


def test_run_with_negative_steps_is_refused_and_zero_steps_does_nothing():
    tr, st = _trainer()
    _raises(ValueError, "steps must be an integer >= 0, got -5", itlin.run, tr, st, X, Y, -5)
    st0, log = itlin.run(tr, st, X, Y, 0)
    assert int(st0.step) == 0 and log.loss.shape == (0,)


def test_empty_data_is_refused_before_work():
    tr, st = _trainer()
    empty_x, empty_y = jnp.zeros((0, 3)), jnp.zeros((0,))
    _raises(ValueError, "training x has no examples", itlin.fit, tr, st, empty_x, empty_y, 2)
    _raises(ValueError, "evaluation x has no examples", itlin.evaluate, tr, st, empty_x, empty_y)
    _raises(ValueError, "x has no examples", itlin.ntk, lambda p, x: x @ p, jnp.zeros(3), empty_x)
    _raises(ValueError, "x has no examples", gauss_newton_step, lambda p, x: x @ p, jnp.zeros(3), empty_x, empty_y)


@pytest.mark.parametrize("bs", [0, -1, 2.5])
def test_evaluate_batch_size_must_be_positive(bs):
    tr, st = _trainer()
    _raises(ValueError, "batch_size must be a positive integer", itlin.evaluate, tr, st, X, Y, batch_size=bs)


def test_chunk_sizes_must_be_positive():
    tr, st = _trainer()
    _raises(ValueError, "chunk_size must be a positive integer", itlin.run, tr, st, X, Y, 3, chunk_size=0)
    _raises(ValueError, "chunk_size must be a positive integer", itlin.ntk, lambda p, x: x @ p, jnp.zeros(3), X,
            chunk_size=0)


def test_wrong_feature_dimension_names_x_and_the_fix():
    tr, st = _trainer()
    _raises(ValueError, "feature dimension", itlin.fit, tr, st, jnp.zeros((8, 4)), Y, 2)
    _raises(ValueError, "feature dimension", itlin.evaluate, tr, st, jnp.zeros((8, 4)), Y)
    _raises(ValueError, "feature dimension", gauss_newton_step, lambda p, x: x @ p, jnp.zeros(3), jnp.zeros((8, 4)), Y)


@pytest.mark.parametrize("seed", [-1, 2 ** 32, 1.5])
def test_bad_seeds_are_refused(seed):
    tr, st = _trainer()
    _raises((ValueError, TypeError), "seed must be an integer from 0 to 2\\*\\*32 - 1", itlin.fit, tr, st, X, Y, 2,
            batch_size=4, seed=seed)


def test_a_given_batch_order_equals_the_default_order_bit_for_bit():
    tr, st = _trainer(K=3)
    steps, B = 11, 4
    order = itlin.batch_indices(7, 0, steps, X.shape[0], B)
    for loop in ("device", "host"):
        ref = itlin.fit(tr, st, X, Y, steps, batch_size=B, seed=7, loop=loop, chunk_size=4)
        given = itlin.fit(tr, st, X, Y, steps, batches=order, loop=loop, chunk_size=4)
        for a, b in zip(jax.tree_util.tree_leaves(ref.state), jax.tree_util.tree_leaves(given.state)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        assert ref.history.loss == given.history.loss
    # and a hand-written loop over the jitted step in the same order
    step = jax.jit(tr.step)
    s = st
    for idx in order:
        s, _ = step(s, X[idx], Y[idx])
    np.testing.assert_allclose(s.params, ref.state.params, rtol=1e-6)
    # validated: too few rows, out-of-range indices, disagreeing batch_size
    _raises(ValueError, "batches has 10 rows", itlin.fit, tr, st, X, Y, steps, batches=order[:10])
    _raises(ValueError, "must index the 8 training examples", itlin.fit, tr, st, X, Y, 2, batches=order + 8)
    _raises(ValueError, "batch_size=2", itlin.fit, tr, st, X, Y, 2, batches=order, batch_size=2)
    _raises(ValueError, "integer array", itlin.run, tr, st, X, Y, 2, batches=[[0.5, 1.0], [1.0, 2.0]])


# ------------------------------------------------------------------------------ the flow's limit
def test_flow_limit_on_a_singular_kernel_is_the_projection_and_agrees_with_flow_params():
    f = lambda p, x: x @ p
    x = jnp.asarray([[1.0], [2.0], [3.0]])
    y = jnp.asarray([1.0, 0.0, 0.0])
    lin = itlin.linearise_at(f, jnp.zeros(1), x)
    flow = itlin.gradient_flow(x @ x.T, lin.outputs, y)       # rank one: two round-off eigenvalues
    expected = np.asarray([1.0, 2.0, 3.0]) / 14.0              # projection of y on span(x)
    np.testing.assert_allclose(flow.predict(jnp.inf), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(f(itlin.flow_params(lin, flow, jnp.inf), x), flow.predict(jnp.inf), rtol=1e-5,
                               atol=1e-6)


# ------------------------------------------------------------------------------ the chapter CLI
BOOK = __import__("pathlib").Path(__file__).resolve().parent.parent / "book"


@pytest.mark.parametrize("case", ["output under a file", "chapter is a folder", "json list", "learning_rate inf",
                                  "dampings with inf", "no output", "unwritable results", "unknown parameter"])
def test_cli_failures_are_one_line_exit_2_and_leave_nothing(tmp_path, monkeypatch, capsys, case):
    from itlin.book import run as cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ITLIN_RESULTS", str(tmp_path / "results"))
    (tmp_path / "afile").write_text("")
    damping, augmentation = str(BOOK / "damping.md"), str(BOOK / "augmentation.md")
    argv = {
        "output under a file": [damping, "afile/out.ipynb"],
        "chapter is a folder": [str(BOOK), "out.ipynb"],
        "json list": [damping, "out.ipynb", "--parameters-json", "[1]"],
        "learning_rate inf": [augmentation, "out.ipynb", "-p", "learning_rate", "inf"],
        "dampings with inf": [damping, "out.ipynb", "-p", "dampings", "[1e-3, inf]"],
        "no output": [damping],
        "unwritable results": [damping, "out.ipynb"],
        "unknown parameter": [damping, "out.ipynb", "-p", "nonsense", "1"],
    }[case]
    if case == "unwritable results":
        monkeypatch.setenv("ITLIN_RESULTS", str(tmp_path / "afile" / "results"))
    before = sorted(p.name for p in tmp_path.iterdir())
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no notebook, record or lock
    if case == "no output":
        assert "python -m itlin.book.run" in err


def test_cli_usage_names_the_real_module(capsys):
    from itlin.book import run as cli

    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "usage: python -m itlin.book.run" in capsys.readouterr().out
    # no "TCP without encryption" warning, nor the closed sockets' traceback of a kernel stopped mid-cell
    assert cli.KERNEL_ARGUMENTS == ["--IPKernelApp.log_level=CRITICAL"]


def test_float_parameters_refuse_non_finite_values_unless_allowed():
    from itlin.book.experiments import ParameterError
    from itlin.book.study import coerce

    with pytest.raises(ParameterError, match="must be a finite number, got inf"):
        coerce("learning_rate", float, "inf", {})
    with pytest.raises(ParameterError, match="must be a finite number"):
        coerce("learning_rate", float, 10 ** 400, {})
    assert coerce("blowup", float, "inf", {"allow_inf": True}) == math.inf
    with pytest.raises(ParameterError, match="must be an integer"):
        coerce("steps", int, 2.7, {})
    assert coerce("steps", int, 10 ** 30, {}) == 10 ** 30


# ------------------------------------------------------------------------------ Gauss-Newton
def test_gauss_newton_bad_inputs_are_one_line_errors_before_work():
    f, x = _linear()
    y = jnp.asarray([1.0, 0.0, 2.0])
    p0 = jnp.zeros(2)
    _raises(ValueError, "learning_rate \\(eta\\) must be finite", gauss_newton_step, f, p0, x, y,
            learning_rate=jnp.asarray(jnp.nan))
    _raises(ValueError, "learning_rate \\(eta\\) must be finite", gauss_newton_fit, f, p0, x, y, 3,
            learning_rate=float("nan"))
    _raises(ValueError, "steps must be an integer >= 1, got 0", gauss_newton_fit, f, p0, x, y, 0)
    _raises(ValueError, "steps must be a whole number", gauss_newton_fit, f, p0, x, y, 2.7)
    _raises(TypeError, "float32 or float64 parameters, got float16", gauss_newton_step, f, p0.astype(jnp.float16),
            x.astype(jnp.float16), y.astype(jnp.float16))
    _raises(ValueError, "non-finite", gauss_newton_step, f, p0, x, y.at[0].set(jnp.nan))
    # a traced learning rate is not checked (jit and vmap still work) and gives the same step
    traced = jax.jit(lambda lr: gauss_newton_step(f, p0, x, y, learning_rate=lr, damping=0.5)[0])(0.5)
    np.testing.assert_allclose(traced, gauss_newton_step(f, p0, x, y, learning_rate=0.5, damping=0.5)[0], rtol=1e-6)


def test_gauss_newton_eigmin_option_is_refused_where_it_cannot_apply_before_work():
    f, x = _linear()
    y = jnp.asarray([1.0, 0.0, 2.0])
    p0 = jnp.zeros(2)
    arbel = itlin.ArbelDamping(1.0, 1e-7)
    _raises(ValueError, "eigmin must be 'eigvalsh' or 'inverse_squaring', got 'lanczos'", gauss_newton_step, f, p0, x,
            y, damping=arbel, solve="cholesky", eigmin="lanczos")
    # solve='eigh' has sigma_min from its decomposition already
    for fn, extra in ((gauss_newton_direction, ()), (gauss_newton_step, ()), (gauss_newton_fit, (3,))):
        _raises(ValueError, "eigmin='inverse_squaring' is for solve='cholesky'.*pass solve='cholesky'", fn, f, p0, x,
                y, *extra, damping=arbel, eigmin="inverse_squaring")
    # a Hessian with a null space (cross-entropy): sigma_min must skip its structural zeros
    labels = jnp.asarray([0, 2, 1])
    p3 = jnp.zeros((2, 3))
    for fn, extra in ((gauss_newton_direction, ()), (gauss_newton_fit, (3,))):
        _raises(ValueError, "needs a Hessian c\\*I .* loss 'cross_entropy' .* use eigmin='eigvalsh'", fn, f, p3, x,
                labels, *extra, loss="cross_entropy", damping=arbel, solve="cholesky", eigmin="inverse_squaring")
    # supported: the squared loss (H = c I) and hessian='identity' whatever the loss (two examples:
    # a non-singular kernel, so that the float32 steps are well posed)
    for loss, target, p, hessian in (("squared", y, p0, "loss"), ("cross_entropy", labels, p3, "identity")):
        d, info = gauss_newton_direction(f, p, x[:2], target[:2], loss=loss, damping=arbel, hessian=hessian,
                                         solve="cholesky", eigmin="inverse_squaring")
        ref, ref_info = gauss_newton_direction(f, p, x[:2], target[:2], loss=loss, damping=arbel, hessian=hessian)
        np.testing.assert_allclose(d, ref, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(info.eigmin, ref_info.eigmin, rtol=1e-4, atol=1e-6)


def test_arbel_damping_reduction_counterexample_of_the_issue():
    # n = 2, width 2, alpha = 0, eps0 = 0.0625 used to differ by 2% between the reductions
    x = jnp.asarray([[1.0, 0.5], [-0.3, 2.0]])
    y = jnp.asarray([[0.3], [-0.7]])
    f = lambda p, x: jnp.tanh(x @ p["w"]) @ p["v"]
    p0 = {"w": jnp.asarray([[0.4, -0.2], [0.1, 0.3]]), "v": jnp.asarray([[0.5], [-0.6]])}
    damping = itlin.ArbelDamping(alpha=0.0, eps0=0.0625)
    d_mean, _ = gauss_newton_direction(f, p0, x, y, damping=damping, reduction="mean")
    d_sum, _ = gauss_newton_direction(f, p0, x, y, damping=damping, reduction="sum")
    for a, b in zip(jax.tree_util.tree_leaves(d_mean), jax.tree_util.tree_leaves(d_sum)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
