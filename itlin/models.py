"""Networks as pure functions.

Every network in itlin is a :class:`Model`: an ``init(key, x)`` returning ``(params, state)``
and a pure ``apply(params, x, state)`` in inference mode. ``params`` are the trainable weights
(any pytree); ``state`` holds non-trainable collections such as batch-norm statistics (an empty
dict for models without any). The core algorithms only ever see ``apply(params, x)``:
:meth:`Model.bind` closes over a state, which is how batch-norm statistics stay frozen at the
anchor while a model is linearised.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from dataclasses import fields as _dc_fields
from functools import partial
from typing import Any, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np


from .core._checks import check_positive_int
from .core.model import Model  # noqa: E402  (re-exported: the trainer's model type)


# ============================================================================================
# Architectures (issue 3). Flax linen modules with ``__call__(self, x, train: bool = False)``,
# each with a constructor returning a Model, and a registry (:func:`get_model`).
# ============================================================================================

@dataclass(frozen=True, eq=False)
class FlaxModel(Model):
    """A :class:`Model` built from a Flax module, which can also return hidden activations.

    It has the attributes of a :class:`Model`, and:

    Attributes:
      module: the linen module (inference-mode ``apply`` of the model is
        ``module.apply(variables, x, train=False)``).
      layers: names of the activations :meth:`features` can return, input to output.
    """

    module: Any = None
    layers: tuple = ()

    def features(self, params, x, layer: str, state=None):
        """Activations of hidden layer ``layer`` on ``x`` in inference mode (for linear probes).

        Main paper Fig. 6 trains linear classifiers on the first and second layers' features.
        The module records them with ``self.sow("intermediates", name, value)``; see
        :attr:`layers` for the names.
        """
        if layer not in self.layers:
            raise ValueError(f"model {self.name!r} has no layer {layer!r}; choose one of {list(self.layers)}.")
        variables = {"params": params, **({} if state is None else state)}
        _, inter = self.module.apply(variables, x, train=False, mutable=["intermediates"])
        return inter["intermediates"][layer][-1]


def _flax_model(module, name, layers, calibration_module=None, meta=None, ntk_fn=None) -> FlaxModel:
    base = Model.from_flax(module, name, calibration_module=calibration_module, meta=meta)
    fields = {f.name: getattr(base, f.name) for f in _dc_fields(Model)}
    fields["ntk_fn"] = ntk_fn
    return FlaxModel(**fields, module=module, layers=tuple(layers))


def _as_matrix_init(init):
    """Initialiser drawing a conv kernel ``(..., c_in, c_out)`` as a ``(prod(...) * c_in, c_out)`` matrix.

    Same distribution as ``init`` for fan-in scaled initialisers (LeCun, He): the fan-in is the
    product of all but the last dimension either way. It exists because on CPU, XLA takes over a
    second to compile the random-number generator for each new 4-D shape (JAX 0.10, partitionable
    threefry) but milliseconds for a 2-D one, which made initialising a ResNet take ~15 s.
    """
    def matrix_init(key, shape, dtype=jnp.float32):
        rows = int(np.prod(shape[:-1], dtype=np.int64))
        return init(key, (rows, shape[-1]), dtype).reshape(shape)

    return matrix_init


# ---------------------------------------------------------------------------------- LeNet
def pool2(x, kind: str = "max"):
    """Non-overlapping pooling with window 2 and stride 2 over every spatial axis ("VALID": an odd
    trailing row or column is dropped), written as a reshape and a reduction.

    Same values as ``flax.linen.max_pool(x, (2,)*d, strides=(2,)*d)`` (or ``avg_pool``), but its
    derivatives are elementwise masks instead of XLA's ``select_and_scatter``, which on the CPU
    made a LeNet gradient step about twice as slow and its linearised step slower still.
    """
    spatial = x.shape[1:-1]
    even = tuple(s - s % 2 for s in spatial)
    if even != spatial:
        x = x[(slice(None),) + tuple(slice(0, e) for e in even)]
    shape = [x.shape[0]]
    for e in even:
        shape += [e // 2, 2]
    x = x.reshape(shape + [x.shape[-1]])
    axes = tuple(2 + 2 * k for k in range(len(even)))
    return jnp.max(x, axis=axes) if kind == "max" else jnp.mean(x, axis=axes)


class LeNet(nn.Module):
    """The main paper's LeNet variant (Appendix C), in 1-D or 2-D.

    conv(``channels[0]``, kernel 5) - ReLU - pool - conv(``channels[1]``, kernel 5) - ReLU -
    pool - dense 120 - ReLU - dense 84 - ReLU - dense ``num_outputs`` (logits; the softmax
    belongs to the loss). The paper states the kernel size, 50 channels and the dense widths
    but not the pooling or padding: we follow classic LeNet-5 with unpadded ("VALID")
    convolutions and 2x2 (2 in 1-D) pooling of stride 2 after each convolution, using max
    pooling, the "more modern" choice (``pooling="avg"`` gives LeNet-5's average pooling,
    ``"none"`` none). CIFAR-10 32x32: 32 -> 28 -> 14 -> 10 -> 5; Fashion-MNIST 28x28: 28 -> 24 ->
    12 -> 8 -> 4; MNIST-1D length 40: 40 -> 36 -> 18 -> 14 -> 7. Weights use Flax's defaults
    (LeCun-normal kernels, zero biases).

    Sown activations (for :meth:`FlaxModel.features`): ``conv1``, ``conv2`` (after ReLU and
    pooling), ``dense1``, ``dense2`` (after ReLU).
    """

    num_outputs: int = 10
    channels: Sequence[int] = (50, 50)
    kernel_size: int = 5
    dense: Sequence[int] = (120, 84)
    pooling: str = "max"
    ndim: int = 2

    @nn.compact
    def __call__(self, x, train: bool = False):
        want = "NHWC images (N, H, W, C)" if self.ndim == 2 else "signals (N, length, channels)"
        if x.ndim != self.ndim + 2:
            raise ValueError(f"LeNet-{self.ndim}D expects {want}, got shape {x.shape}"
                             + ("; use lenet1d for 1-D signals." if x.ndim == 3 else
                                "; use lenet (2-D) for images." if x.ndim == 4 else "."))
        for i, c in enumerate(self.channels):
            if any(s < self.kernel_size for s in x.shape[1:-1]):
                raise ValueError(f"LeNet input is too small: spatial size {x.shape[1:-1]} before conv{i + 1} "
                                 f"is below the kernel size {self.kernel_size}.")
            x = nn.Conv(c, (self.kernel_size,) * self.ndim, padding="VALID",
                        kernel_init=_as_matrix_init(nn.initializers.lecun_normal()))(x)
            x = nn.relu(x)
            if self.pooling != "none":
                x = pool2(x, self.pooling)
            self.sow("intermediates", f"conv{i + 1}", x)
        x = x.reshape(x.shape[0], -1)
        for i, w in enumerate(self.dense):
            x = nn.relu(nn.Dense(w)(x))
            self.sow("intermediates", f"dense{i + 1}", x)
        return nn.Dense(self.num_outputs)(x)


def _positive_ints(name: str, values) -> tuple:
    """A sequence of layer sizes as a tuple of ints, each >= 1; a one-line ValueError naming
    ``name`` otherwise (a zero-size layer would divide by zero at ``init``)."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise ValueError(f"{name} must be a sequence of positive integers (layer sizes), got {values!r}.")
    out = []
    for i, v in enumerate(values):
        out.append(check_positive_int(f"{name}[{i}]", v.item() if hasattr(v, "item") and np.ndim(v) == 0 else v))
    return tuple(out)


def _lenet(ndim, num_outputs, channels, kernel_size, dense, pooling):
    num_outputs = check_positive_int("num_outputs", num_outputs)
    kernel_size = check_positive_int("kernel_size", kernel_size)
    if isinstance(channels, int):
        channels = (channels, channels)
    channels, dense = _positive_ints("channels", channels), _positive_ints("dense", dense)
    if pooling not in ("max", "avg", "none"):
        raise ValueError(f"pooling must be 'max', 'avg' or 'none', got {pooling!r}.")
    module = LeNet(num_outputs=num_outputs, channels=channels, kernel_size=kernel_size, dense=dense,
                   pooling=pooling, ndim=ndim)
    layers = tuple(f"conv{i + 1}" for i in range(len(channels))) + tuple(f"dense{i + 1}" for i in range(len(dense)))
    meta = {"arch": f"lenet{ndim}d", "channels": channels, "kernel_size": kernel_size, "dense": dense,
            "pooling": pooling, "padding": "VALID", "num_outputs": num_outputs}
    return _flax_model(module, f"lenet{ndim}d" if ndim == 1 else "lenet", layers, meta=meta)


def lenet(num_outputs: int = 10, channels=(50, 50), kernel_size: int = 5, dense=(120, 84),
          pooling: str = "max") -> FlaxModel:
    """2-D LeNet variant of the main paper (Appendix C) for NHWC images (CIFAR-10, Fashion-MNIST).

    ``channels`` may be one integer for both convolutions. See :class:`LeNet` for the pooling.
    """
    return _lenet(2, num_outputs, channels, kernel_size, dense, pooling)


def lenet1d(num_outputs: int = 10, channels=(50, 50), kernel_size: int = 5, dense=(120, 84),
            pooling: str = "max") -> FlaxModel:
    """1-D LeNet variant for signals ``(N, length, channels)`` (MNIST-1D: length 40, 1 channel)."""
    return _lenet(1, num_outputs, channels, kernel_size, dense, pooling)


# ------------------------------------------------------------------------------------ MLP
def get_activation(name: str, beta: float = 1.0):
    """``(gamma, gamma')`` for ``"relu"``, ``"silu"`` (``x * sigmoid(beta x)``, Arbel et al. Sec. 3.1) or ``"tanh"``.

    ``gamma'`` is written out (not differentiated) so closed-form kernels stay plain array code.
    ReLU's derivative at 0 is taken to be 0, as in ``jax.nn.relu``.
    """
    if name == "relu":
        return jax.nn.relu, lambda z: (z > 0).astype(z.dtype)
    if name == "silu":
        def silu(z):
            return z * jax.nn.sigmoid(beta * z)

        def dsilu(z):
            s = jax.nn.sigmoid(beta * z)
            return s + beta * z * s * (1.0 - s)

        return silu, dsilu
    if name == "tanh":
        return jnp.tanh, lambda z: 1.0 - jnp.tanh(z) ** 2
    raise ValueError(f"activation must be 'relu', 'silu' or 'tanh', got {name!r}.")


class MLP(nn.Module):
    """Fully connected network: ``len(widths)`` hidden layers, then a linear output layer.

    Inputs are flattened beyond the batch axis. Sown activations: ``hidden1`` ... ``hiddenK``.
    ``init_scheme="flax"``: Flax's default (LeCun-normal weights, zero biases); ``"torch"``: PyTorch's
    ``nn.Linear`` default (weights and biases uniform on ``[-1/sqrt(fan_in), 1/sqrt(fan_in)]``).
    """

    widths: Sequence[int] = (50, 50, 50, 50, 50)
    num_outputs: int = 1
    activation: str = "relu"
    beta: float = 1.0
    init_scheme: str = "flax"

    def _dense(self, features, fan_in):
        if self.init_scheme == "flax":
            return nn.Dense(features)
        bound = 1.0 / math.sqrt(fan_in)
        uniform = lambda key, shape, dtype=jnp.float32: jax.random.uniform(key, shape, dtype, -bound, bound)
        return nn.Dense(features, kernel_init=uniform, bias_init=uniform)

    @nn.compact
    def __call__(self, x, train: bool = False):
        if x.ndim < 2:
            raise ValueError(f"MLP expects a batch (N, ...) of inputs, got shape {x.shape}; "
                             "for scalar inputs use x[:, None].")
        act, _ = get_activation(self.activation, self.beta)
        x = x.reshape(x.shape[0], -1)
        for i, w in enumerate(self.widths):
            x = act(self._dense(w, x.shape[-1])(x))
            self.sow("intermediates", f"hidden{i + 1}", x)
        return self._dense(self.num_outputs, x.shape[-1])(x)


def mlp(num_outputs: int = 1, width: int = 50, depth: int = 5, widths=None, activation: str = "relu",
        beta: float = 1.0, init: str = "flax") -> FlaxModel:
    """MLP with ``depth`` hidden layers of ``width`` units (or explicit ``widths``).

    The default is the quintic network of the main paper (Appendix C: "a 5 layer MLP with 50
    neurons per layer with ReLU activations"): we read "5 layers with 50 neurons" as five hidden
    layers of 50 (the single-output layer cannot have 50 neurons), i.e. six weight matrices.
    ``init``: ``"flax"`` (LeCun-normal weights, zero biases) or ``"torch"`` (PyTorch's default,
    uniform weights and biases); the paper states no initialisation.
    """
    if init not in ("flax", "torch"):
        raise ValueError(f"init must be 'flax' or 'torch', got {init!r}.")
    if widths is None:
        width = check_positive_int("width", width)
        depth = check_positive_int("depth", depth)
        widths = (width,) * depth
    widths = _positive_ints("widths", widths)
    num_outputs = check_positive_int("num_outputs", num_outputs)
    get_activation(activation, beta)  # validate the name
    module = MLP(widths=widths, num_outputs=num_outputs, activation=activation, beta=float(beta), init_scheme=init)
    meta = {"arch": "mlp", "widths": widths, "num_outputs": num_outputs, "activation": activation, "beta": beta,
            "init": init}
    ntk = partial(mlp_ntk, activation=activation, beta=float(beta))
    return _flax_model(module, "mlp", tuple(f"hidden{i + 1}" for i in range(len(widths))), meta=meta, ntk_fn=ntk)


@partial(jax.jit, static_argnames=("activation", "trace"))
def _mlp_ntk(params, x1, x2, beta, activation, trace):
    act, dact = get_activation(activation, beta)
    layers = [params[f"Dense_{i}"] for i in range(len(params))]

    def forward(x):
        a = x.reshape(x.shape[0], -1)
        acts, pre = [a], []
        for layer in layers[:-1]:
            z = a @ layer["kernel"] + layer["bias"]
            a = act(z)
            pre.append(z)
            acts.append(a)
        return acts, pre

    def signals(acts, pre, n):
        """``D_l`` (N, C, width_l): derivative of each output in layer l's pre-activations."""
        c = layers[-1]["kernel"].shape[1]
        d = jnp.broadcast_to(jnp.eye(c, dtype=acts[0].dtype), (n, c, c))
        out = [None] * len(layers)
        for i in range(len(layers) - 1, -1, -1):
            out[i] = d
            if i > 0:
                d = jnp.einsum("ncw,vw->ncv", d, layers[i]["kernel"]) * dact(pre[i - 1])[:, None, :]
        return out

    acts1, pre1 = forward(x1)
    d1 = signals(acts1, pre1, x1.shape[0])
    if x2 is None:
        acts2, d2 = acts1, d1
    else:
        acts2, pre2 = forward(x2)
        d2 = signals(acts2, pre2, x2.shape[0])
    n1, n2 = x1.shape[0], acts2[0].shape[0]
    c = layers[-1]["kernel"].shape[1]
    k = 0.0
    for a1, a2, g1, g2 in zip(acts1, acts2, d1, d2):
        gram = a1 @ a2.T + 1.0  # inputs of the layer (kernel) and the constant 1 (bias)
        if trace:
            k = k + gram * jnp.einsum("ncw,mcw->nm", g1, g2)
        else:
            k = k + gram[:, None, :, None] * jnp.einsum("ncw,mdw->ncmd", g1, g2)
    return k if trace else k.reshape(n1 * c, n2 * c)


def mlp_ntk(params, x1, x2=None, *, activation: str = "relu", beta: float = 1.0, trace: bool = False):
    """Empirical NTK of the :func:`mlp` in closed form, layer by layer.

    For dense layers ``z_l = a_{l-1} W_l + b_l`` the Jacobian of output ``c`` of example ``n`` in
    ``(W_l, b_l)`` is ``(a_{l-1,n}, 1) (x) D_{l,n,c}`` with ``D_l`` the derivative in the
    pre-activations, so ``K = sum_l (A_{l-1} A_{l-1}^T + 1) * (D_l D_l^T)``: ``O(N^2 width)`` per
    layer instead of ``O(N^2 width^2)`` for Jacobians. Same layout as
    :func:`itlin.ntk` (``(N1*C, N2*C)`` example-major, or ``(N1, N2)`` with
    ``trace``); equal to it to rounding (tested in float64).
    """
    if x2 is not None and x2.shape[1:] != x1.shape[1:]:
        raise ValueError(f"x1 and x2 must have the same input shape, got {x1.shape[1:]} and {x2.shape[1:]}.")
    return _mlp_ntk(params, x1, x2, beta, activation, bool(trace))


# ----------------------------------------------------------------------- mean-field network
class MeanFieldNet(nn.Module):
    """One-hidden-layer network in the mean-field scaling (Arbel et al. Eq. 2).

    ``f(x) = (1/M) sum_i v_i gamma(u_i^T x)`` with params ``u`` ``(M, d)`` initialised
    ``N(0, tau0^2)`` and readout ``v`` ``(M, num_outputs)`` initialised at 0 (their Section 5.1).
    No biases (augment ``x`` with a constant for one). Outputs ``(N, num_outputs)``. Sown
    activation: ``hidden`` (``gamma(x u^T)``, ``(N, M)``).
    """

    width: int = 5000
    num_outputs: int = 1
    tau0: float = 1.0
    activation: str = "relu"
    beta: float = 1.0

    @nn.compact
    def __call__(self, x, train: bool = False):
        if x.ndim != 2:
            raise ValueError(f"the mean-field network takes vectors (N, d), got shape {x.shape}; "
                             "flatten images first (x.reshape(len(x), -1)).")
        tau0 = self.tau0
        u = self.param("u", lambda k, s: tau0 * jax.random.normal(k, s), (self.width, x.shape[1]))
        v = self.param("v", nn.initializers.zeros, (self.width, self.num_outputs))
        act, _ = get_activation(self.activation, self.beta)
        h = act(x @ u.T.astype(x.dtype))
        self.sow("intermediates", "hidden", h)
        return (h @ v.astype(h.dtype)) / self.width


def mean_field(width: int = 5000, num_outputs: int = 1, tau0: float = 1.0, activation: str = "relu",
               beta: float = 1.0) -> FlaxModel:
    """The student network of Arbel et al. (Eq. 2; M=5000, ``tau0`` from 1e-3 to 1e3 in their Fig. 1).

    ``activation`` is ``"relu"`` or ``"silu"`` (with ``beta``). Its NTK in closed form is
    :func:`mean_field_ntk`.
    """
    width = check_positive_int("width", width)
    num_outputs = check_positive_int("num_outputs", num_outputs)
    if not (isinstance(tau0, (int, float)) and tau0 > 0 and math.isfinite(tau0)):
        raise ValueError(f"tau0 (std of the hidden weights at init) must be a positive number, got {tau0!r}.")
    get_activation(activation, beta)  # validates the name (Arbel et al. use "relu" and "silu")
    module = MeanFieldNet(width=width, num_outputs=num_outputs, tau0=float(tau0), activation=activation,
                          beta=float(beta))
    meta = {"arch": "mean_field", "width": width, "num_outputs": num_outputs, "tau0": float(tau0),
            "activation": activation, "beta": float(beta), "output_scale": "1/M"}
    ntk = partial(mean_field_ntk, activation=activation, beta=float(beta))
    return _flax_model(module, "mean_field", ("hidden",), meta=meta, ntk_fn=ntk)


def mean_field_features(params, x, activation: str = "relu", beta: float = 1.0):
    """Hidden features ``Gamma(u) = gamma(x u^T)`` ``(N, M)`` of the mean-field net (Arbel et al. Eq. 8)."""
    act, _ = get_activation(activation, beta)
    return act(x @ params["u"].T)


@partial(jax.jit, static_argnames=("activation", "trace"))
def _mean_field_ntk(params, x1, x2, beta, activation, trace):
    act, dact = get_activation(activation, beta)
    u, v = params["u"], params["v"]
    m, c = v.shape
    z1, z2 = x1 @ u.T, x2 @ u.T
    g1, g2 = act(z1), act(z2)
    d1, d2 = dact(z1), dact(z2)
    gram = x1 @ x2.T
    scale = 1.0 / (m * m)
    readout = g1 @ g2.T  # derivative in v: same for every output
    if trace or c == 1:
        w = jnp.sum(v * v, axis=1)  # sum_c v_ic^2
        hidden = (d1 * w) @ d2.T
        return scale * ((c if trace else 1) * readout + hidden * gram)
    # full (N1*C, N2*C) kernel, example-major: block (n, m) is a C x C matrix
    a1 = d1[:, :, None] * v[None]  # (N1, M, C)
    a2 = d2[:, :, None] * v[None]
    hidden = jnp.einsum("nic,mid->ncmd", a1, a2) * gram[:, None, :, None]
    eye = jnp.eye(c, dtype=readout.dtype)
    full = readout[:, None, :, None] * eye[None, :, None, :] + hidden
    n1, n2 = x1.shape[0], x2.shape[0]
    return scale * full.reshape(n1 * c, n2 * c)


def mean_field_ntk(params, x1, x2=None, *, activation: str = "relu", beta: float = 1.0, trace: bool = False):
    """Closed-form empirical NTK of the mean-field network (Arbel et al. Eq. 2; kernel of their App. A).

    With ``Gamma_k = gamma(X_k u^T)`` and ``Gamma'_k = gamma'(X_k u^T)`` (``(N_k, M)``), the
    Jacobian of ``f(x) = (1/M) sum_i v_i gamma(u_i^T x)`` is ``gamma(u_i^T x)/M`` in ``v_i`` and
    ``v_i gamma'(u_i^T x) x / M`` in ``u_i``, so for one output

        ``K = (1/M^2) [Gamma_1 Gamma_2^T + (Gamma'_1 diag(v^2) Gamma'_2^T) * (X_1 X_2^T)]``

    (``*`` elementwise), which costs ``O(N_1 N_2 M)`` with plain matrix products. For ``C``
    outputs the readout term is the same for each output and zero across outputs, and the
    hidden term couples outputs ``c, c'`` through ``diag(v_c v_c')``; the result is
    ``(N_1*C, N_2*C)`` example-major, as :func:`itlin.ntk` returns
    (``O(N_1 N_2 M C^2)``), or ``(N_1, N_2)`` with ``trace=True`` (sum over outputs) or
    ``C == 1`` (``O(N_1 N_2 M)``). Jitted; at Arbel et al.'s scale (N=500, d=10, M=5000) it takes
    ~0.1 s on two CPU cores against ~15 s for the autodiff Jacobian route.
    """
    if x2 is None:
        x2 = x1
    for name, x in (("x1", x1), ("x2", x2)):
        if getattr(x, "ndim", None) != 2 or x.shape[1] != params["u"].shape[1]:
            raise ValueError(f"{name} must be shaped (N, {params['u'].shape[1]}) for hidden weights u of shape "
                             f"{params['u'].shape}; got {getattr(x, 'shape', None)}.")
    get_activation(activation, beta)  # validates the name
    params = {"u": params["u"], "v": jnp.reshape(params["v"], (params["v"].shape[0], -1))}
    return _mean_field_ntk(params, x1, x2, beta, activation, bool(trace))


# ------------------------------------------------------------------------------- ResNet-18
_HE = _as_matrix_init(nn.initializers.he_normal())


class BasicBlock(nn.Module):
    """ResNet basic block: two 3x3 convolutions with an identity (or 1x1 projection) shortcut.
    ``dims`` is the number of spatial axes (2: images ``(N, H, W, C)``; 1: signals
    ``(N, length, C)``, kernels 3 and 1)."""

    features: int
    strides: int = 1
    batch_norm: bool = True
    bn_momentum: float = 0.9
    dims: int = 2

    @nn.compact
    def __call__(self, x, train: bool = False):
        conv = partial(nn.Conv, use_bias=not self.batch_norm, kernel_init=_HE)

        def norm(name):
            if not self.batch_norm:
                return lambda y: y
            return nn.BatchNorm(use_running_average=not train, momentum=self.bn_momentum, epsilon=1e-5, name=name)

        s, k3, k1, pad = (self.strides,) * self.dims, (3,) * self.dims, (1,) * self.dims, ((1, 1),) * self.dims
        y = conv(self.features, k3, strides=s, padding=pad, name="conv1")(x)
        y = nn.relu(norm("bn1")(y))
        y = conv(self.features, k3, padding=pad, name="conv2")(y)
        y = norm("bn2")(y)
        shortcut = x
        if self.strides != 1 or x.shape[-1] != self.features:
            shortcut = conv(self.features, k1, strides=s, padding="VALID", name="proj")(x)
            shortcut = norm("proj_bn")(shortcut)
        return nn.relu(y + shortcut)


class ResNet18(nn.Module):
    """ResNet-18 with the CIFAR stem (He et al. 2016; main paper Fig. 4).

    3x3 convolution of stride 1 (no max-pool), then 4 stages of 2 basic blocks with widths
    ``width * (1, 2, 4, 8)`` (64/128/256/512 by default) and strides 1, 2, 2, 2, global average
    pooling and a dense output layer. With ``batch_norm`` each convolution (bias-free) is
    followed by batch norm (running-average ``bn_momentum``, epsilon 1e-5); in inference mode
    (``train=False``) it uses the stored statistics, so outputs of one example do not depend on
    the rest of the batch and the statistics are frozen while the network is linearised. Without
    batch norm the convolutions have biases. Convolutions use He-normal initialisation.
    Sown activations: ``stem``, ``stage1`` ... ``stage4``, ``pool``.
    """

    num_outputs: int = 10
    width: int = 64
    batch_norm: bool = True
    bn_momentum: float = 0.9
    stage_sizes: Sequence[int] = (2, 2, 2, 2)

    dims: int = 2

    def _check(self, x):
        if x.ndim != 4:
            raise ValueError(f"ResNet-18 expects NHWC images (N, H, W, C), got shape {x.shape}.")

    @nn.compact
    def __call__(self, x, train: bool = False):
        self._check(x)
        x = nn.Conv(self.width, (3,) * self.dims, padding=((1, 1),) * self.dims, use_bias=not self.batch_norm,
                    kernel_init=_HE, name="stem_conv")(x)
        if self.batch_norm:
            x = nn.BatchNorm(use_running_average=not train, momentum=self.bn_momentum, epsilon=1e-5,
                             name="stem_bn")(x)
        x = nn.relu(x)
        self.sow("intermediates", "stem", x)
        for i, blocks in enumerate(self.stage_sizes):
            for j in range(blocks):
                strides = 2 if (i > 0 and j == 0) else 1
                x = BasicBlock(self.width * 2 ** i, strides, self.batch_norm, self.bn_momentum, self.dims,
                               name=f"stage{i + 1}_block{j + 1}")(x, train=train)
            self.sow("intermediates", f"stage{i + 1}", x)
        x = jnp.mean(x, axis=tuple(range(1, 1 + self.dims)))
        self.sow("intermediates", "pool", x)
        return nn.Dense(self.num_outputs, name="out")(x)


def resnet18(num_outputs: int = 10, width: int = 64, batch_norm: bool = True, bn_momentum: float = 0.9) -> FlaxModel:
    """ResNet-18 (CIFAR stem) with or without batch norm (main paper Fig. 4 / Appendix C).

    ``width`` is the first stage's width (64 for the standard network; small values give cheap
    test networks). With batch norm, ``calibrate`` runs a training-mode pass of the same network
    with running-average momentum 0, so the stored statistics become exactly the batch's own
    (use it to refresh the statistics at a new linearisation point); ``train_apply`` updates them
    with momentum ``bn_momentum``; ``apply`` uses them frozen.
    """
    num_outputs = check_positive_int("num_outputs", num_outputs)
    width = check_positive_int("width", width)
    if not 0.0 <= bn_momentum < 1.0:
        raise ValueError(f"bn_momentum must be in [0, 1), got {bn_momentum!r}.")
    module = ResNet18(num_outputs=num_outputs, width=width, batch_norm=bool(batch_norm), bn_momentum=float(bn_momentum))
    calib = module.clone(bn_momentum=0.0) if batch_norm else None
    meta = {"arch": "resnet18", "width": width, "widths": tuple(width * 2 ** i for i in range(4)),
            "batch_norm": bool(batch_norm), "bn_momentum": float(bn_momentum), "num_outputs": num_outputs,
            "stem": "3x3 conv stride 1, no max-pool"}
    name = "resnet18" if batch_norm else "resnet18_nobn"
    return _flax_model(module, name, ("stem", "stage1", "stage2", "stage3", "stage4", "pool"),
                       calibration_module=calib, meta=meta)


# -------------------------------------------------------------------------------- registry
#: The models :func:`get_model` builds by name, ``name -> constructor`` returning a :class:`Model`.
MODELS = {
    "lenet": lenet,
    "lenet1d": lenet1d,
    "mlp": mlp,
    "mean_field": mean_field,
    "resnet18": resnet18,
}


def get_model(name: str, **kwargs) -> Model:
    """Build a model by name (:data:`MODELS`); keyword arguments go to its constructor.

    ``"resnet18_nobn"`` is ``resnet18`` with ``batch_norm=False``; ``"lenet2d"`` is ``lenet``.
    """
    key = str(name).strip().lower().replace("-", "_")
    if key == "resnet18_nobn":
        kwargs.setdefault("batch_norm", False)
        key = "resnet18"
    key = {"lenet2d": "lenet", "meanfield": "mean_field", "resnet": "resnet18"}.get(key, key)
    if key not in MODELS:
        raise ValueError(f"unknown model {name!r}; known models: {', '.join(sorted(MODELS) + ['resnet18_nobn'])}.")
    return MODELS[key](**kwargs)


# ------------------------------------------------------------------------- ResNet-18, 1-D
# (appended for book/energy_concentration.md: Ortiz-Jimenez et al.'s third model on 1-D signals)

class BasicBlock1D(BasicBlock):
    """:class:`BasicBlock` for signals ``(N, length, channels)``: two convolutions of kernel 3 with
    an identity (or kernel-1 projection) shortcut."""

    dims: int = 1


class ResNet18_1D(ResNet18):
    """:class:`ResNet18` for 1-D signals (MNIST-1D): the same stages, blocks, widths, strides and
    batch norm, with kernels of 3 (stem and blocks) and 1 (projections) instead of 3x3 and 1x1,
    and global average pooling over the length. Length 40: 40 -> 40 -> 20 -> 10 -> 5.
    Sown activations: ``stem``, ``stage1`` ... ``stage4``, ``pool``."""

    dims: int = 1

    def _check(self, x):
        if x.ndim != 3:
            raise ValueError(f"ResNet-18 (1-D) expects signals (N, length, channels), got shape {x.shape}"
                             + ("; use resnet18 for images." if x.ndim == 4 else "."))


def resnet18_1d(num_outputs: int = 10, width: int = 64, batch_norm: bool = True,
                bn_momentum: float = 0.9) -> FlaxModel:
    """ResNet-18 for signals ``(N, length, channels)`` (:class:`ResNet18_1D`), with or without batch norm.

    The 1-D counterpart of :func:`resnet18`, as :func:`lenet1d` is of :func:`lenet`: it lets
    Ortiz-Jimenez et al.'s three architectures (MLP, LeNet, ResNet-18) run on MNIST-1D. Batch
    norm, ``calibrate`` and ``train_apply`` behave as in :func:`resnet18`; ``width`` is the first
    stage's width (64 standard; small values give the narrow networks of a CPU budget).
    """
    num_outputs = check_positive_int("num_outputs", num_outputs)
    width = check_positive_int("width", width)
    if not 0.0 <= bn_momentum < 1.0:
        raise ValueError(f"bn_momentum must be in [0, 1), got {bn_momentum!r}.")
    module = ResNet18_1D(num_outputs=num_outputs, width=width, batch_norm=bool(batch_norm),
                         bn_momentum=float(bn_momentum))
    calib = module.clone(bn_momentum=0.0) if batch_norm else None
    meta = {"arch": "resnet18_1d", "width": width, "widths": tuple(width * 2 ** i for i in range(4)),
            "batch_norm": bool(batch_norm), "bn_momentum": float(bn_momentum), "num_outputs": num_outputs,
            "kernel": 3, "stem": "kernel-3 conv stride 1, no max-pool"}
    name = "resnet18_1d" if batch_norm else "resnet18_1d_nobn"
    return _flax_model(module, name, ("stem", "stage1", "stage2", "stage3", "stage4", "pool"),
                       calibration_module=calib, meta=meta)


# ----------------------------------------------------------- batch norm from the batch (Fig. 4)
# (appended for book/resnet_and_data.md: the third way to treat batch norm while linearised)

def batch_stats_model(model: Model) -> Model:
    """``model`` applied in training mode everywhere: batch norm normalises with the statistics
    of the batch it is applied to, and the running averages are never used or updated.

    Linearising this model linearises batch norm itself: its batch statistics depend on the
    weights, so they are part of the function whose Jacobian the linearised model uses (what the
    main paper's Section 4 calls "linearising the BatchNorm layer"). The other two treatments
    need no helper: :func:`resnet18` as it is freezes the statistics at the anchor and
    recalibrates them at each relinearisation, and ``dataclasses.replace(model,
    calibrate_fn=None)`` freezes them for good.

    ``apply`` is ``model.train_apply`` with the state update discarded, so an example's output
    depends on the rest of its batch, at evaluation too (each evaluation batch is normalised by
    its own statistics); ``train_apply`` is the same function with the state unchanged, so
    ``K = 1`` trains exactly as the network's training mode does; there is nothing to calibrate.
    ``init`` is ``model``'s (the unused statistics stay in the state, so the same
    ``(params, state)`` serve both models). :meth:`FlaxModel.features` is not carried over (it
    would read inference-mode activations). A model without a training mode (no state) is
    returned unchanged.

    >>> import jax, jax.numpy as jnp
    >>> net = resnet18_1d(num_outputs=2, width=2)
    >>> x = jax.random.normal(jax.random.PRNGKey(0), (4, 8, 1))
    >>> params, state = net.init(jax.random.PRNGKey(1), x)
    >>> bm = batch_stats_model(net)
    >>> bool(jnp.allclose(bm.apply(params, x, state), net.train_apply(params, state, x)[0]))
    True
    """
    if not isinstance(model, Model):
        raise TypeError(f"batch_stats_model needs an itlin Model, got {type(model).__name__}.")
    train = model.train_apply_fn
    if train is None:
        return model

    def apply_fn(params, state, x):
        return train(params, state, x)[0]

    return Model(name=f"{model.name}_batchstats", init_fn=model.init_fn, apply_fn=apply_fn, train_apply_fn=None,
                 calibrate_fn=None, ntk_fn=None, meta={**model.meta, "batch_norm_mode": "batch statistics"})


__all__ = [
    "BasicBlock", "BasicBlock1D", "FlaxModel", "LeNet", "MeanFieldNet", "MLP", "Model", "MODELS", "ResNet18",
    "ResNet18_1D", "batch_stats_model", "get_activation", "get_model", "lenet", "lenet1d", "mean_field",
    "mean_field_features", "mean_field_ntk", "mlp", "mlp_ntk", "resnet18", "resnet18_1d",
]
