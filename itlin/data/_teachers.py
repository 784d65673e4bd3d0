"""Images labelled by a trained teacher network (Arbel et al. Appendix C.4)."""

from __future__ import annotations

from typing import Optional

import numpy as np

from ._dataset import Dataset
from ._files import _cached, cache_dir_fn
from ._images import digits, fashion_mnist

# --------------------------------------------------------------------------------------------
# teacher-labelled images (Arbel et al. Appendix C.4)
# --------------------------------------------------------------------------------------------

def _train_image_teacher(x, y, *, hidden, steps, learning_rate, seed, num_classes):
    """One-hidden-layer ReLU network trained with full-batch Adam on cross-entropy; params in numpy."""
    import jax
    import jax.numpy as jnp
    import optax

    d = x.shape[1]
    k1, k2 = jax.random.split(jax.random.PRNGKey(seed))
    params = {"w1": jax.random.normal(k1, (d, hidden), jnp.float32) * jnp.sqrt(2.0 / d),
              "b1": jnp.zeros((hidden,), jnp.float32),
              "w2": jax.random.normal(k2, (hidden, num_classes), jnp.float32) * jnp.sqrt(1.0 / hidden),
              "b2": jnp.zeros((num_classes,), jnp.float32)}
    opt = optax.adam(learning_rate)
    xj, yj = jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.int32)

    def logits_fn(p, xx):
        return jax.nn.relu(xx @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]

    def loss_fn(p):
        return optax.softmax_cross_entropy_with_integer_labels(logits_fn(p, xj), yj).mean()

    @jax.jit
    def run(p):
        def step(carry, _):
            p, s = carry
            loss, g = jax.value_and_grad(loss_fn)(p)
            upd, s = opt.update(g, s, p)
            return (optax.apply_updates(p, upd), s), loss

        (p, _), losses = jax.lax.scan(step, (p, opt.init(p)), None, length=steps)
        return p, losses

    params, losses = run(params)
    params = {k: np.asarray(v) for k, v in params.items()}

    def predict(xx):
        h = np.maximum(np.asarray(xx, np.float32) @ params["w1"] + params["b1"], 0.0)
        return h @ params["w2"] + params["b2"]

    return params, predict, float(losses[-1])


def _softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def teacher_images(*, n_train: Optional[int] = None, n_test: Optional[int] = None, seed: int = 0,
                   base: str = "digits", n_teacher_train: Optional[int] = None, hidden: int = 50,
                   steps: int = 1000, learning_rate: float = 1e-2, data_dir=None, cache_dir=None) -> Dataset:
    """Images labelled by a trained teacher network (Arbel et al. Appendix C.4), on digits or Fashion-MNIST.

    Their construction with ``base`` in place of MNIST: (1) a teacher training set
    ``D_tr u D_ts`` where ``D_ts`` is the base's test split and ``D_tr`` a balanced subset of
    its training split of size ``n_teacher_train`` (default: 3000 as in the paper for
    ``fashion_mnist``; the whole 1497-image training split for ``digits``); (2) a one-hidden-
    layer ReLU teacher with ``hidden=50`` units trained on it with cross-entropy (here:
    full-batch Adam, ``steps`` steps at ``learning_rate``, initialised from ``seed``);
    (3) regression targets ``softmax(f_T(x))`` (``(N, 10)`` float32) for ``D_tr`` (training
    set) and ``D_ts`` (test set). Inputs are the base images standardised (module docstring)
    and flattened to ``(N, pixels)``, the vectors the mean-field student of Eq. 2 takes.

    The result is cached by its settings. The base's original labels are in
    ``meta['labels_train'/'labels_test']`` (so subsets are class-balanced) and the teacher's
    weights in ``meta['teacher']``. ``n_train``/``n_test`` take balanced subsets (seed
    ``seed``) of the student's training/test sets.
    """
    if base not in ("digits", "fashion_mnist"):
        raise ValueError(f"base must be 'digits' or 'fashion_mnist', got {base!r}.")
    if n_teacher_train is None:
        n_teacher_train = 3000 if base == "fashion_mnist" else None
    tag = "all" if n_teacher_train is None else int(n_teacher_train)
    fname = f"teacher_images-v1-{base}-ntr{tag}-h{int(hidden)}-s{int(steps)}-lr{float(learning_rate):g}-seed{int(seed)}.npz"
    path = cache_dir_fn(cache_dir) / fname

    def build():
        src = digits() if base == "digits" else fashion_mnist(data_dir=data_dir, cache_dir=cache_dir)
        if n_teacher_train is not None:
            src = src.subset(n_train=n_teacher_train, seed=seed)
        x_tr = src.x_train.reshape(src.n_train, -1)
        x_te = src.x_test.reshape(src.n_test, -1)
        x_all = np.concatenate([x_tr, x_te])
        y_all = np.concatenate([src.y_train, src.y_test])
        params, predict, loss = _train_image_teacher(x_all, y_all, hidden=hidden, steps=steps,
                                                     learning_rate=learning_rate, seed=seed, num_classes=10)
        logits = predict(x_all)
        acc = float(np.mean(np.argmax(logits, 1) == y_all))
        probs = _softmax(logits.astype(np.float64)).astype(np.float32)
        return {"x_train": x_tr, "x_test": x_te, "y_train": probs[:len(x_tr)], "y_test": probs[len(x_tr):],
                "labels_train": src.y_train, "labels_test": src.y_test,
                "teacher_final_loss": np.float64(loss), "teacher_accuracy": np.float64(acc),
                **{f"teacher_{k}": v for k, v in params.items()}}

    a = _cached(path, build)
    meta = {"base": base, "n_teacher_train": n_teacher_train, "teacher": {
                "hidden": hidden, "steps": steps, "learning_rate": learning_rate, "seed": seed,
                "final_loss": float(a["teacher_final_loss"]), "accuracy_on_its_training_set": float(a["teacher_accuracy"]),
                **{k: a[f"teacher_{k}"] for k in ("w1", "b1", "w2", "b2")}},
            "labels_train": a["labels_train"], "labels_test": a["labels_test"],
            "n_train": int(len(a["x_train"])), "n_test": int(len(a["x_test"])),
            "targets": "softmax of the teacher's logits", "normalize": "standardize, then flattened"}
    ds = Dataset(name="teacher_images", x_train=a["x_train"], y_train=a["y_train"], x_test=a["x_test"],
                 y_test=a["y_test"], task="regression", num_outputs=10, meta=meta)
    if n_train is not None or n_test is not None:
        ds = ds.subset(n_train, n_test, seed=seed)
    return ds
