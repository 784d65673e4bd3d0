"""Small networks for the core tests, defined here so the identities do not depend on itlin.models."""

import flax.linen as nn
import jax
import jax.numpy as jnp

from itlin.models import Model


class TinyMLP(nn.Module):
    width: int = 16
    out: int = 3

    @nn.compact
    def __call__(self, x, train: bool = False):
        x = x.reshape(x.shape[0], -1)
        x = jnp.tanh(nn.Dense(self.width)(x))
        x = nn.relu(nn.Dense(self.width)(x))
        return nn.Dense(self.out)(x)


class TinyCNN(nn.Module):
    out: int = 3

    @nn.compact
    def __call__(self, x, train: bool = False):
        x = nn.relu(nn.Conv(4, (3, 3))(x))
        x = nn.avg_pool(x, (2, 2), (2, 2))
        x = nn.relu(nn.Conv(4, (3, 3))(x))
        x = x.reshape(x.shape[0], -1)
        return nn.Dense(self.out)(x)


class TinyBN(nn.Module):
    bn_momentum: float = 0.9

    @nn.compact
    def __call__(self, x, train: bool = False):
        x = nn.Dense(8)(x)
        x = nn.BatchNorm(use_running_average=not train, momentum=self.bn_momentum)(x)
        return nn.Dense(2)(nn.relu(x))


def to64(tree):
    return jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64), tree)


def make(module, x, seed=0, name="net"):
    model = Model.from_flax(module, name)
    params, state = model.init(jax.random.PRNGKey(seed), x)
    return model, to64(params), state
