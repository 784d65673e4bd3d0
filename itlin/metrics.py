"""Metrics of the three papers: feature quality, NTK spectra and alignment.

- :func:`weighted_cosine_distance` (Arbel et al. Eq. 9) and :func:`linear_refit` /
  :func:`mean_field_refit_test_loss` (Arbel et al. Eq. 8, "Test-LRfit").
- :func:`linear_probe_accuracy` / :func:`layer_probe_accuracy` (main paper Fig. 6).
- :func:`energy_concentration` (Ortiz-Jimenez et al. Table 1) and :func:`eigenvector_alignment`,
  :func:`target_alignment` (their Lemma 1 and Appendix E.3).
- How training moves kernels, weights and filters: :func:`kernel_rotation`, :func:`alignment_gain`,
  :func:`energy_curve`, :func:`weight_distances`, :func:`iterations_to`, :func:`first_layer_kernel`,
  :func:`closest_fraction`, :func:`spike_score`, :func:`blown_up`; fits: :func:`log_slopes`, :func:`two_line_fit`;
  :func:`ntk_gram`, a one-output NTK Gram matrix in memory-bounded blocks.

Accuracy, RMSE and the empirical NTK are the core's (:func:`itlin.accuracy`, :func:`itlin.rmse`,
:func:`itlin.ntk`). Inputs may be numpy or JAX arrays. Functions that solve linear systems or
eigenproblems work in float64 numpy on the host (deterministic, and accurate where float32
kernels are ill-conditioned) and return Python floats or numpy arrays.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from .core._divergence import diverged as _diverged


# ------------------------------------------------------------------------------ Arbel et al.
def _unit_cosines(u, u_star, what: str):
    """Weights ``p_i = ||u_i||^2 / sum_k ||u_k||^2`` of the student units ``u`` ``(M, d)``, the
    cosines ``(M, M*)`` between them and the teacher units ``u_star`` ``(M*, d)``, and which student
    units have non-zero weights; ``what`` names the quantity in the errors."""
    u = np.asarray(u, np.float64)
    u_star = np.asarray(u_star, np.float64)
    if u.ndim != 2 or u_star.ndim != 2 or u.shape[1] != u_star.shape[1]:
        raise ValueError(f"u must be (M, d) and u_star (M*, d) with the same d; got {u.shape} and {u_star.shape}.")
    sq = np.sum(u * u, axis=1)
    if sq.sum() == 0:
        raise ValueError(f"all student weights are zero: {what} is undefined.")
    t_norm = np.linalg.norm(u_star, axis=1)
    if np.any(t_norm == 0):
        raise ValueError(f"a teacher unit has zero weights; its direction (and {what}) is undefined.")
    norm = np.sqrt(sq)
    cos = (u @ u_star.T) / (np.where(norm > 0, norm, 1.0)[:, None] * t_norm[None, :])
    return sq / sq.sum(), cos, norm > 0


def weighted_cosine_distance(u, u_star) -> float:
    """Weighted cosine distance between student and teacher hidden weights (Arbel et al. Eq. 9).

    ``WCD(u, u*) = 2 sum_i p_i (1 - max_j cos(u_i, u*_j))`` with ``p_i = ||u_i||^2 / sum_k ||u_k||^2``,
    for student weights ``u`` ``(M, d)`` and teacher weights ``u*`` ``(M*, d)``. It is 0 when
    every student unit with non-zero weights points along some teacher unit, at most 4, and it
    ignores units with zero weights (``p_i = 0``).
    """
    p, cos, live = _unit_cosines(u, u_star, "the weighted cosine distance")
    return float(2.0 * np.sum(p * (1.0 - np.where(live, cos.max(axis=1), 1.0))))


def _as_2d(name, y):
    y = np.asarray(y, np.float64)
    if y.ndim == 1:
        return y[:, None]
    if y.ndim != 2:
        raise ValueError(f"{name} must be (N,) or (N, outputs), got shape {y.shape}.")
    return y


def linear_refit(features_train, y_train, features_test, y_test, *, rcond: Optional[float] = None) -> dict:
    """Minimum-norm least-squares re-fit of a linear read-out on frozen features (Arbel et al. Eq. 8).

    Solves ``min ||w|| s.t. w minimises ||Phi_train w - Y||`` (``w = Phi^T (Phi Phi^T)^+ Y``,
    Eq. 8 with ``Phi = Gamma(u)^T``) by SVD in float64, and reports the losses of their Eq. 1,
    ``(1/2N) sum_n ||f(x_n) - y_n||^2``, on both sets. With more features than training
    examples (their over-parameterised setting) the training loss is ~0 and the test loss
    measures how good the features are ("Test-LRfit", Section 5.2).

    Returns ``{"weights", "train_loss", "test_loss"}``.
    """
    phi_tr = np.asarray(features_train, np.float64).reshape(len(features_train), -1)
    phi_te = np.asarray(features_test, np.float64).reshape(len(features_test), -1)
    y_tr, y_te = _as_2d("y_train", y_train), _as_2d("y_test", y_test)
    if len(phi_tr) != len(y_tr) or len(phi_te) != len(y_te):
        raise ValueError(f"features and targets must have the same number of examples: train {len(phi_tr)} vs "
                         f"{len(y_tr)}, test {len(phi_te)} vs {len(y_te)}.")
    if phi_tr.shape[1] != phi_te.shape[1]:
        raise ValueError(f"train and test features differ in size: {phi_tr.shape[1]} vs {phi_te.shape[1]}.")
    w, *_ = np.linalg.lstsq(phi_tr, y_tr, rcond=rcond)

    def loss(phi, y):
        r = phi @ w - y
        return float(0.5 * np.mean(np.sum(r * r, axis=1)))

    return {"weights": w, "train_loss": loss(phi_tr, y_tr), "test_loss": loss(phi_te, y_te)}


def mean_field_refit_test_loss(params, x_train, y_train, x_test, y_test, *, activation: str = "relu",
                               beta: float = 1.0) -> float:
    """Test-LRfit of a mean-field network (Arbel et al. Section 5.2): re-fit ``v`` on ``Gamma(u)``.

    Freezes the hidden weights ``params['u']``, fits the read-out by minimum-norm least squares on
    the training features ``gamma(X u^T)`` (Eq. 8; the ``1/M`` output scale only rescales ``v``)
    and returns the test loss ``(1/2N) sum ||f - y||^2``.
    """
    from itlin.models import mean_field_features

    f_tr = mean_field_features(params, jnp.asarray(x_train), activation, beta)
    f_te = mean_field_features(params, jnp.asarray(x_test), activation, beta)
    return linear_refit(f_tr, y_train, f_te, y_test)["test_loss"]


# --------------------------------------------------------------------- main paper: probes
def linear_probe_accuracy(features_train, labels_train, features_test, labels_test, **probe_kwargs) -> float:
    """Test accuracy of a linear classifier trained on frozen features (main paper Fig. 6): the
    mean of :func:`linear_probe_correct` (its arguments and options).

    >>> rng = np.random.default_rng(0)
    >>> f, y = rng.normal(size=(40, 3)), np.repeat([0, 1], 20)
    >>> f[:, 0] += 8 * y                                      # the first feature separates the classes
    >>> linear_probe_accuracy(f[::2], y[::2], f[1::2], y[1::2])
    1.0
    """
    return float(np.mean(linear_probe_correct(features_train, labels_train, features_test, labels_test,
                                              **probe_kwargs)))


def linear_probe_correct(features_train, labels_train, features_test, labels_test, *, method: str = "ridge",
                         ridge: float = 1e-3, max_iter: int = 1000) -> np.ndarray:
    """Whether a linear classifier trained on frozen features classifies each test example right
    (booleans, one per test row): what :func:`linear_probe_accuracy` averages, kept per example so
    that two probes scored on the same test examples can be compared with paired noise
    (``itlin.book.verdicts.paired_accuracy_se``).

    Features are flattened and standardised with the training set's mean and standard
    deviation. ``method="ridge"`` (default): ridge regression of one-hot labels with an
    intercept, ``lambda = ridge * N_train`` (so ``ridge`` is relative to the standardised
    features' scale), solved in closed form in float64 (primal or dual, whichever system is
    smaller); predictions by arg-max. ``method="logistic"``: multinomial logistic regression
    (scikit-learn, L-BFGS, ``C = 1 / (ridge * N_train)``). Both are deterministic.
    """
    x_tr = np.asarray(features_train, np.float64).reshape(len(features_train), -1)
    x_te = np.asarray(features_test, np.float64).reshape(len(features_test), -1)
    y_tr, y_te = np.asarray(labels_train), np.asarray(labels_test)
    if y_tr.ndim != 1 or y_te.ndim != 1 or len(y_tr) != len(x_tr) or len(y_te) != len(x_te):
        raise ValueError("labels must be 1-D integers, one per feature row: got "
                         f"{y_tr.shape} for {len(x_tr)} train rows and {y_te.shape} for {len(x_te)} test rows.")
    if x_tr.shape[1] != x_te.shape[1]:
        raise ValueError(f"train and test features differ in size: {x_tr.shape[1]} vs {x_te.shape[1]}.")
    if ridge <= 0:
        raise ValueError(f"ridge must be > 0, got {ridge!r}.")
    mean = x_tr.mean(0)
    std = x_tr.std(0)
    std = np.where(std > 0, std, 1.0)
    x_tr = (x_tr - mean) / std
    x_te = (x_te - mean) / std
    classes = np.unique(y_tr)
    lam = ridge * len(x_tr)
    if method == "ridge":
        onehot = (y_tr[:, None] == classes[None, :]).astype(np.float64)
        offset = onehot.mean(0)
        t = onehot - offset  # features are centred, so the intercept is the label mean
        n, d = x_tr.shape
        if d <= n:
            w = np.linalg.solve(x_tr.T @ x_tr + lam * np.eye(d), x_tr.T @ t)
        else:
            w = x_tr.T @ np.linalg.solve(x_tr @ x_tr.T + lam * np.eye(n), t)
        pred = classes[np.argmax(x_te @ w + offset, axis=1)]
    elif method == "logistic":
        from sklearn.linear_model import LogisticRegression

        clf = LogisticRegression(C=1.0 / lam, max_iter=max_iter)
        clf.fit(x_tr, y_tr)
        pred = clf.predict(x_te)
    else:
        raise ValueError(f"method must be 'ridge' or 'logistic', got {method!r}.")
    return pred == y_te


def correct_examples(trainer, state, x, y, batch_size: int = 500) -> np.ndarray:
    """Whether the model a trainer's ``state`` is training (its linearisation at the anchor; the
    network itself for ``K=1``) classifies each example of ``(x, y)`` right: booleans, one per
    example, the per-example accuracy that two runs scored on one test set are compared with
    (``itlin.book.verdicts.paired_accuracy_se``).

    >>> import itlin, optax
    >>> tr = itlin.iterative_linearisation(lambda p, x: x @ p, optax.sgd(0.1), 1)
    >>> correct_examples(tr, tr.init(jnp.eye(2)), jnp.array([[1.0, 0.0], [1.0, 0.0]]), jnp.array([0, 1])).tolist()
    [True, False]
    """
    out = [np.asarray(_correct_jit(trainer, state.params, state.anchor, state.model_state,
                                   jnp.asarray(x[i:i + batch_size]), jnp.asarray(y[i:i + batch_size])))
           for i in range(0, int(x.shape[0]), batch_size)]
    return np.concatenate(out) if out else np.zeros(0, bool)


@partial(jax.jit, static_argnums=0)
def _correct_jit(trainer, params, anchor, model_state, x, y):
    from .core.linearise import linearised_apply

    f = trainer.model.bind(model_state)
    out = f(params, x) if trainer.gd_path else linearised_apply(f, anchor, params, x)
    return jnp.argmax(out, -1) == y


def _batched_features(model, params, x, layer, state, batch_size):
    out = [np.asarray(_features_jit(model, params, jnp.asarray(x[i:i + batch_size]), layer, state))
           for i in range(0, len(x), batch_size)]
    return np.concatenate(out)


@partial(jax.jit, static_argnums=(0, 3))
def _features_jit(model, params, x, layer, state):  # one compiled program per model, layer and batch shape
    return model.features(params, x, layer, state=state)


def layer_probe_accuracy(model, params, layer: str, x_train, y_train, x_test, y_test, **kwargs) -> float:
    """Linear-probe test accuracy on the activations of ``layer`` of ``model`` (main paper Fig. 6):
    the mean of :func:`layer_probe_correct` (its arguments and options)."""
    return float(np.mean(layer_probe_correct(model, params, layer, x_train, y_train, x_test, y_test, **kwargs)))


def layer_probe_correct(model, params, layer: str, x_train, y_train, x_test, y_test, *, state=None,
                        batch_size: int = 1000, **probe_kwargs) -> np.ndarray:
    """Per test example, whether a linear probe on the activations of ``layer`` of ``model``
    classifies it right (main paper Fig. 6).

    ``model`` is a :class:`itlin.models.FlaxModel` (``model.layers`` lists the layer names, e.g.
    ``"conv1"``, ``"conv2"`` for the LeNet); activations are computed in inference mode in
    batches of ``batch_size``, then :func:`linear_probe_correct` (``probe_kwargs``) is applied.
    """
    if not hasattr(model, "features"):
        raise TypeError("layer_probe_accuracy needs a model with a features(params, x, layer) method, such as "
                        "those built by itlin.models (lenet, mlp, resnet18, ...).")
    f_tr = _batched_features(model, params, x_train, layer, state, batch_size)
    f_te = _batched_features(model, params, x_test, layer, state, batch_size)
    return linear_probe_correct(f_tr, y_train, f_te, y_test, **probe_kwargs)


# -------------------------------------------------------------------- Ortiz-Jimenez et al.
def _sym_eigh(kernel):
    k = np.asarray(kernel, np.float64)
    if k.ndim != 2 or k.shape[0] != k.shape[1]:
        raise ValueError(f"kernel must be a square matrix, got shape {k.shape}.")
    s, v = np.linalg.eigh(0.5 * (k + k.T))
    order = np.argsort(s)[::-1]  # largest first
    return s[order], v[:, order]


def _flatten_targets(kernel_size, y, name="y"):
    y = np.asarray(y, np.float64)
    if y.shape[0] == kernel_size:
        return y.reshape(kernel_size, -1)
    if y.size == kernel_size:  # (N, C) targets against an (N*C, N*C) example-major kernel
        return y.reshape(kernel_size, 1)
    raise ValueError(f"{name} of shape {y.shape} does not match a kernel of size {kernel_size}: give one row "
                     "per kernel row (N, ...) or N*C values for an (N*C, N*C) kernel.")


def energy_concentration(kernel, y, k: int = 50) -> float:
    """Energy of the targets on the top-``k`` eigenvectors of a kernel Gram matrix (Ortiz-Jimenez et al.).

    ``||Phi_k^T y||_2 / ||y||_2`` with ``Phi_k`` the orthonormal eigenvectors of the ``k``
    largest eigenvalues (their Table 1: ``k = 50``, NTK Gram matrix on the training samples,
    +-1 labels of CIFAR-2). Targets ``(N,)`` or ``(N, C)`` against an ``(N, N)`` kernel
    (Frobenius norms), or ``(N, C)`` flattened against an ``(N*C, N*C)`` kernel. A value of 1
    means the targets lie in the span of the top ``k`` eigenvectors.
    """
    s, v = _sym_eigh(kernel)
    yy = _flatten_targets(len(s), y)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= len(s):
        raise ValueError(f"k must be an integer between 1 and {len(s)} (the kernel size), got {k!r}.")
    norm = np.linalg.norm(yy)
    if norm == 0:
        raise ValueError("y is zero: its energy concentration is undefined.")
    return float(np.linalg.norm(v[:, :k].T @ yy) / norm)


def eigenvector_alignment(kernel_a, kernel_b, k: Optional[int] = None, *, relative: bool = False) -> np.ndarray:
    """Alignment of the eigenvectors of kernel A with kernel B: Rayleigh quotients ``phi_i^T B phi_i``.

    ``phi_i`` are the unit eigenvectors of ``kernel_a`` ordered by decreasing eigenvalue (first
    ``k``, default all). Ortiz-Jimenez et al. (Appendix E.3, Figs. 6-7) plot this alignment of
    the eigenfunctions of the NTK at initialisation with the NTK after training. With
    ``kernel_b = kernel_a`` it returns A's eigenvalues. ``relative=True`` divides by
    ``trace(B)`` (the sum of the quotients over all of A's eigenvectors), which makes kernels of
    different scale comparable. Note: their alignment of a function,
    ``alpha(f) = E_{x,x'} f(x) Theta(x,x') f(x')`` (Lemma 1), of an eigenfunction normalised to
    ``E f^2 = 1`` on N samples is this quotient divided by N (see :func:`target_alignment`).
    """
    _, v = _sym_eigh(kernel_a)
    b = np.asarray(kernel_b, np.float64)
    if b.shape != (len(v), len(v)):
        raise ValueError(f"kernel_b must have the shape of kernel_a {(len(v), len(v))}, got {b.shape}.")
    if k is not None:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= len(v):
            raise ValueError(f"k must be an integer between 1 and {len(v)}, got {k!r}.")
        v = v[:, :k]
    q = np.einsum("ni,nm,mi->i", v, 0.5 * (b + b.T), v)
    if relative:
        q = q / np.trace(b)
    return q


def target_alignment(kernel, f) -> float:
    """Alignment ``alpha(f) = E_{x,x'}[f(x) Theta(x, x') f(x')]`` over the N samples (Ortiz-Jimenez et al. Lemma 1).

    Empirical form ``f^T K f / N^2`` for values ``f`` ``(N,)`` of the function at the samples of
    the Gram matrix ``K`` (or ``(N, C)`` flattened against an ``(N*C, N*C)`` kernel, summed over
    outputs against an ``(N, N)`` one). For the NTK this equals ``||E_x[f(x) grad f(x)]||^2``.
    """
    k = np.asarray(kernel, np.float64)
    if k.ndim != 2 or k.shape[0] != k.shape[1]:
        raise ValueError(f"kernel must be a square matrix, got shape {k.shape}.")
    ff = _flatten_targets(len(k), f, name="f")
    n = np.asarray(f).shape[0]
    return float(np.sum(ff * (k @ ff)) / (n * n))


# ------------------------------------------------------- appended for book/arbel_*.md
def min_cosine_distance(u, u_star) -> float:
    """The weighted distance Arbel et al.'s code logs as "weighted_dist" (their figures' WCD axis).

    ``sum_i p_i min_j sqrt(2 (1 - cos(u_i, u*_j)))`` with ``p_i = ||u_i||^2 / sum_k ||u_k||^2``
    (student ``u`` ``(M, d)``, teacher ``u*`` ``(M*, d)``; ``2 (1 - cos)`` clamped at 0). The paper's
    Eq. 9 (:func:`weighted_cosine_distance`) instead averages ``2 (1 - max_j cos)``, without the
    square root. Both are 0 when every weighted unit points along a teacher unit; this one is at
    most 2. A unit with zero weights counts with weight 0.
    """
    p, cos, _ = _unit_cosines(u, u_star, "the distance")
    return float(np.sum(p * np.sqrt(np.clip(2.0 * (1.0 - cos), 0.0, None)).min(axis=1)))


# ------------------------------------- traceable twins for a jitted training loop (moved from Arbel et al.'s engine)
def cosine_distance_jax(u, u_star, *, code: bool = False):
    """:func:`weighted_cosine_distance` (Eq. 9; ``code=True``: :func:`min_cosine_distance`, what
    their code logs) in ``jax.numpy``, traceable inside ``jit`` and without the checks: a unit
    with zero weights counts with weight 0, teacher units must be non-zero."""
    sq = jnp.sum(u * u, axis=1)
    norm = jnp.sqrt(sq)
    cos = (u @ u_star.T) / (jnp.where(norm > 0, norm, 1.0)[:, None] * jnp.linalg.norm(u_star, axis=1)[None, :])
    d = jnp.sqrt(jnp.clip(2.0 * (1.0 - cos), 0.0, None)).min(axis=1) if code else 2.0 * (1.0 - cos.max(axis=1))
    return jnp.sum(sq / jnp.sum(sq) * jnp.where(norm > 0, d, 0.0))


def refit_test_loss_jax(act, u, x, y, xt, yt, cutoff: float = 1e-10):
    """Test-LRfit (Arbel et al. Eq. 8) in ``jax.numpy``, traceable: ``0.5 mean (pred - yt)^2`` of
    the readout re-fitted by minimum-norm least squares on ``Phi = act(x u^T)``, the eigenvalues
    of ``Phi Phi^T`` below ``cutoff`` of the largest dropped (their code's rule; on the host,
    :func:`linear_refit` with ``rcond = sqrt(cutoff)``)."""
    phi = act(x @ u.T)
    s, vec = jnp.linalg.eigh(phi @ phi.T)
    keep = s > cutoff * s[-1]
    inv = jnp.where(keep, 1.0 / jnp.where(keep, s, 1.0), 0.0)
    w = phi.T @ (vec @ (inv[:, None] * (vec.T @ y)))
    r = act(xt @ u.T) @ w - yt
    return 0.5 * jnp.mean(r * r)


# ------------------------------------------------- kernel-target alignment (appended for Ortiz-Jimenez et al.)
def kernel_target_alignment(kernel, y, *, centered: bool = True) -> float:
    """Kernel-target alignment ``<K, y y^T>_F / (||K||_F ||y y^T||_F)`` of a Gram matrix with targets.

    ``centered=True`` (default) centres the kernel in feature space first, ``K_c = H K H`` with
    ``H = I - 11^T/N``, and the targets, ``y_c = H y`` (Cortes, Mohri & Rostamizadeh 2012);
    ``centered=False`` is the plain alignment of Cristianini et al. (2002). The plain form is
    dominated by the near-constant top eigenvector of an NTK, which balanced +-1 labels barely
    touch; the centred form measures how the kernel's variable part lines up with the labels. A
    value of 1 means ``K`` is proportional to ``y y^T``. ``y`` is ``(N,)`` or ``(N, C)``
    (``<K, Y Y^T>`` summed over outputs) against an ``(N, N)`` kernel. Computed in float64.

    >>> import numpy as np
    >>> y = np.array([1.0, -1.0, 1.0, -1.0])
    >>> round(kernel_target_alignment(np.outer(y, y) + 2.0, y), 6), round(kernel_target_alignment(np.eye(4), y), 3)
    (1.0, 0.577)
    """
    k = np.asarray(kernel, np.float64)
    if k.ndim != 2 or k.shape[0] != k.shape[1]:
        raise ValueError(f"kernel must be a square matrix, got shape {k.shape}.")
    yy = np.asarray(y, np.float64)
    if yy.ndim == 1:
        yy = yy[:, None]
    if yy.ndim != 2 or yy.shape[0] != k.shape[0]:
        raise ValueError(f"y of shape {np.shape(y)} does not match a kernel of size {k.shape[0]}: give (N,) or (N, C).")
    if centered:
        k = k - k.mean(0, keepdims=True)
        k = k - k.mean(1, keepdims=True)
        yy = yy - yy.mean(0, keepdims=True)
    t = yy @ yy.T
    denom = np.linalg.norm(k) * np.linalg.norm(t)
    if denom == 0:
        raise ValueError("the kernel or the targets are zero (after centring): the alignment is undefined.")
    return float(np.sum(k * t) / denom)


# ------------------------------------------- kernels, weights and trajectories (moved from the book's experiments)
def first_layer_kernel(params) -> np.ndarray:
    """The first convolution's kernel of a LeNet or ResNet-18 of :mod:`itlin.models`, filters
    first: ``(filters, *window, in_channels)``, float64 (main paper Fig. 7 shows these filters)."""
    for name in ("Conv_0", "stem_conv"):  # LeNet, ResNet-18
        if name in params:
            return np.moveaxis(np.asarray(params[name]["kernel"], np.float64), -1, 0)
    raise ValueError(f"no first convolution (Conv_0 or stem_conv) in the parameters: {sorted(params)}.")


def closest_fraction(traj, steps, target) -> float:
    """Where along a trajectory of weights ``traj`` (one per snapshot, at ``steps``) they are
    closest to ``target`` (Euclidean), as a fraction of the last step (main paper Fig. 7: the large
    K's final filters are K=1's "about 10%" of the way through training).

    >>> t = np.array([[0.0], [1.0], [2.0], [3.0]])
    >>> closest_fraction(t, np.array([0, 10, 20, 30]), np.array([1.1]))
    0.3333333333333333
    """
    traj, steps = np.asarray(traj, np.float64), np.asarray(steps, np.float64)
    d = np.linalg.norm(traj.reshape(len(traj), -1) - np.asarray(target, np.float64).reshape(1, -1), axis=1)
    return float(steps[int(np.argmin(d))] / steps[-1])


def kernel_rotation(k, k0) -> float:
    """``1 - <K, K0>_F / (||K||_F ||K0||_F)``: how far a kernel turned, whatever its size (Fort et
    al., 2020); :func:`itlin.kernel_distance` gives how far it moved, size included.

    >>> kernel_rotation(np.eye(2) * 3, np.eye(2)), kernel_rotation(np.diag([1.0, 0]), np.diag([0, 1.0]))
    (0.0, 1.0)
    """
    k, k0 = np.asarray(k, np.float64), np.asarray(k0, np.float64)
    value = 1.0 - np.sum(k * k0) / (np.linalg.norm(k) * np.linalg.norm(k0))
    return float(value) if value > 1e-12 else 0.0  # rounding leaves ~1e-15 for an unmoved kernel


def weight_distances(p0, p1) -> tuple:
    """``(||theta_1 - theta_0||_2, 1 - cos(theta_0, theta_1))`` over all weights of two parameter
    trees (Ortiz-Jimenez et al. Figs. 4-5: how far training moved the weights).

    >>> weight_distances({"a": np.array([1.0, 0.0])}, {"a": np.array([0.0, 1.0])})
    (1.4142135623730951, 1.0)
    """
    from jax.flatten_util import ravel_pytree

    a, b = (np.asarray(ravel_pytree(p)[0], np.float64) for p in (p0, p1))
    return float(np.linalg.norm(b - a)), float(1.0 - a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def energy_curve(vectors, y, kmax: int) -> np.ndarray:
    """``||Phi_k^T y|| / ||y||`` for ``k = 1 .. kmax`` (``vectors``: orthonormal eigenvectors by
    decreasing eigenvalue, as :func:`itlin.kernel_eigh` gives them); entry ``k - 1`` is
    :func:`energy_concentration` with ``k``, for every ``k`` from one projection.

    >>> energy_curve(np.eye(3), np.array([3.0, 0.0, 4.0]), 3).tolist()
    [0.6, 0.6, 1.0]
    """
    y = np.asarray(y, np.float64).reshape(-1)
    proj = np.asarray(vectors)[:, :kmax].T @ y
    return np.sqrt(np.cumsum(proj ** 2)) / np.linalg.norm(y)


def alignment_gain(vectors, eigvals, kernel_end) -> dict:
    """How training changed the alignment of the initial eigenvectors (Ortiz-Jimenez et al. Figs.
    6-7): ``a_end = phi_i^T Theta_T phi_i / tr Theta_T`` (:func:`eigenvector_alignment` with
    ``relative=True``, from a given eigendecomposition ``vectors``, ``eigvals`` of ``Theta_0``) and
    ``gain``, ``a_end`` over its value at initialisation, ``lambda_i / tr Theta_0``.

    >>> g = alignment_gain(np.eye(2), np.array([3.0, 1.0]), np.diag([1.0, 1.0]))
    >>> g["a_end"].tolist(), g["gain"].tolist()
    ([0.5, 0.5], [0.6666666666666666, 2.0])
    """
    v, kt = np.asarray(vectors, np.float64), np.asarray(kernel_end, np.float64)
    a_end = np.sum(v * (0.5 * (kt + kt.T) @ v), axis=0) / np.trace(kt)
    return {"a_end": a_end, "gain": a_end / (np.asarray(eigvals, np.float64) / np.sum(eigvals))}


def iterations_to(epoch_loss, threshold: float, steps_per_epoch: int) -> np.ndarray:
    """Iterations until the epoch-mean training loss (last axis: epochs) first falls to
    ``threshold``, counted at the end of that epoch; ``inf`` where it never does
    (Ortiz-Jimenez et al. Figs. 4-5).

    >>> iterations_to(np.array([[0.5, 0.2, 0.05], [0.5, 0.4, 0.3]]), 0.1, 7).tolist()
    [21.0, inf]
    """
    hit = np.asarray(epoch_loss, np.float64) <= threshold
    return np.where(hit.any(-1), (np.argmax(hit, axis=-1) + 1.0) * steps_per_epoch, np.inf)


# ----------------------------------------------- the NTK Gram matrix in blocks (moved from the Ortiz experiments)
def ntk_block_size(num_params: int, memory_mb: float, n: int) -> int:
    """Inputs per block of :func:`ntk_gram`: the two blocks of per-example Jacobians (float32,
    ``num_params`` numbers per input) fit in ``memory_mb``; at least 1, at most ``n``.

    >>> ntk_block_size(1000, 1.0, 500), ntk_block_size(10 ** 9, 1.0, 500)
    (131, 1)
    """
    return int(max(1, min(n, (memory_mb * 2 ** 20) // (2 * 4 * max(int(num_params), 1)))))


@partial(jax.jit, static_argnums=(0,))
def _ntk_block(model, params, state, x1, x2):
    from .core.linearise import ntk

    return ntk(model.bind(state), params, x1, x2)


def ntk_gram(model, params, state, x, *, memory_mb: float = 512.0) -> np.ndarray:
    """The empirical NTK Gram matrix ``J J^T`` (float64, ``(N, N)``) of a one-output
    :class:`itlin.Model` at ``params`` on ``x`` (model state frozen), from the upper blocks of
    :func:`itlin.ntk` on :func:`ntk_block_size` inputs (the last zero-padded: one shape, one
    compilation), mirrored: the Gram matrices of Ortiz-Jimenez et al. on thousands of inputs."""
    from .core._tree import num_params

    n = int(x.shape[0])
    b = ntk_block_size(num_params(params), memory_mb, n)
    nb = -(-n // b)
    x = np.asarray(x)
    xp = np.concatenate([x, np.zeros((nb * b - n,) + x.shape[1:], x.dtype)])
    out = np.zeros((nb * b, nb * b), np.float64)
    for i in range(nb):
        for j in range(i, nb):
            k = np.asarray(_ntk_block(model, params, state, xp[i * b:(i + 1) * b], xp[j * b:(j + 1) * b]), np.float64)
            out[i * b:(i + 1) * b, j * b:(j + 1) * b] = k
            if j != i:
                out[j * b:(j + 1) * b, i * b:(i + 1) * b] = k.T
    return out[:n, :n]


# ------------------------------------------------------------ fits (moved from the quintic demo)
def two_line_fit(x, y) -> dict:
    """The least-squares fit of ``y`` by ``a_± x + b_±`` on each side of 0 (the span of a zero-bias
    ReLU network's Jacobian with a scalar input, so the best a ``K = inf`` model of the main
    paper's quintic can do): ``rmse``, the coefficients, ``jump`` (``b_+ - b_-``) and ``max_residual``.

    >>> fit = two_line_fit([-2.0, -1.0, 1.0, 2.0], [-3.0, -1.0, 4.0, 5.0])
    >>> round(fit["rmse"], 6), round(fit["jump"], 6)
    (0.0, 2.0)
    """
    x, y = np.asarray(x, np.float64).reshape(-1), np.asarray(y, np.float64).reshape(-1)
    out, res = {}, np.zeros_like(y)
    for side, m in (("minus", x < 0), ("plus", x >= 0)):
        if m.sum() < 2:
            raise ValueError("two_line_fit needs at least two points on each side of 0.")
        A = np.stack([x[m], np.ones(m.sum())], axis=1)
        coef = np.linalg.lstsq(A, y[m], rcond=None)[0]
        out[f"a_{side}"], out[f"b_{side}"] = float(coef[0]), float(coef[1])
        res[m] = y[m] - A @ coef
    return {**out, "rmse": float(np.sqrt(np.mean(res ** 2))), "jump": out["b_plus"] - out["b_minus"],
            "max_residual": float(np.abs(res).max())}


def log_slopes(x, values) -> np.ndarray:
    """Least-squares slopes of ``log10 values`` ``(K, ..., S)`` against ``log10 x`` ``(K,)``, one
    per trailing index (e.g. per seed): ``(..., S)``; a zero value gives ``-inf`` in its fit
    (Arbel et al. Figs. 4-5: how test losses scale with the width and the number of samples).

    >>> log_slopes([1.0, 10.0, 100.0], np.array([[2.0, 1.0], [20.0, 0.1], [200.0, 0.01]])).round(12).tolist()
    [1.0, -1.0]
    """
    lx = np.log10(np.asarray(x, np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.log10(np.asarray(values, np.float64))
    xc = (lx - lx.mean()).reshape((-1,) + (1,) * (y.ndim - 1))
    return np.sum(xc * (y - y.mean(axis=0)), axis=0) / np.sum(xc * xc)


def index_window(j: int, factor: float, n: int) -> np.ndarray:
    """Indices ``i`` with ``j / factor <= i <= j * factor`` (and ``1 <= i < n``).

    >>> index_window(16, 2.0, 60).tolist() == list(range(8, 33)), int(index_window(64, 2.0, 60)[-1])
    (True, 59)
    """
    return np.arange(max(1, int(math.ceil(j / factor))), min(n - 1, int(math.floor(j * factor))) + 1)


def spike_score(values, j: int, factor: float) -> dict:
    """How far ``values[j]`` (e.g. the alignment gain of eigenfunction ``j``, Ortiz-Jimenez et al.
    Figs. 6-7) stands out of its window (:func:`index_window`), on a log scale: ``z`` = (log
    value_j - median of the other log values in the window) / their robust standard deviation
    (1.4826 x median absolute deviation), ``ratio`` = value_j over the window's median,
    ``largest`` = value_j is the window's maximum (NaN scores where any value is not positive).

    >>> g = np.exp(np.linspace(-0.1, 0.1, 20)); g[6] = 5.0
    >>> s = spike_score(g, 6, 2.0); s["z"] > 10, round(s["ratio"], 1), s["largest"]
    (True, 5.1, True)
    """
    g = np.asarray(values, np.float64)
    w = index_window(j, factor, g.size)
    others = np.log(g[w[w != j]])
    if others.size < 2 or not np.all(np.isfinite(others)) or not np.isfinite(g[j]) or g[j] <= 0:
        return {"z": math.nan, "ratio": math.nan, "largest": False}
    med = np.median(others)
    mad = 1.4826 * np.median(np.abs(others - med))
    z = (math.log(g[j]) - med) / mad if mad > 0 else math.inf
    return {"z": float(z), "ratio": float(g[j] / math.exp(med)), "largest": bool(math.log(g[j]) > others.max())}


def blown_up(trace, blowup: float) -> np.ndarray:
    """Over the last axis of RMSE traces (first: the initial RMSE; NaN: after the run stopped),
    whether the loss (RMSE squared) exceeded ``blowup`` times its start or was not finite.

    >>> blown_up(np.array([[1.0, 5.0, 0.1], [1.0, 11.0, 0.1], [1.0, np.inf, np.nan]]), 100.0)
    array([False,  True,  True])
    """
    t = np.asarray(trace, float)
    return (~np.isnan(t) & _diverged(t ** 2, t[..., :1] ** 2, float(blowup), floor=np.finfo(float).tiny)).any(axis=-1)


__all__ = [
    "alignment_gain", "blown_up", "closest_fraction", "correct_examples", "cosine_distance_jax",
    "eigenvector_alignment", "energy_concentration", "energy_curve", "first_layer_kernel", "index_window",
    "iterations_to", "kernel_rotation", "kernel_target_alignment", "layer_probe_accuracy",
    "layer_probe_correct", "linear_probe_accuracy", "linear_probe_correct", "linear_refit", "log_slopes",
    "mean_field_refit_test_loss", "min_cosine_distance", "ntk_block_size", "ntk_gram", "refit_test_loss_jax",
    "spike_score", "target_alignment", "two_line_fit", "weight_distances", "weighted_cosine_distance",
]
