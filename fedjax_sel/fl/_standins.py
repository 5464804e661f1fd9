"""Small synthetic federated data and flax classifiers, needing no files.

Stand-ins used by the training reproductions, the benchmark and the tests until the
dataset sources (`fedjax_sel.data`) and the model zoo (`models`) are available: a
Gaussian-cluster classification task split over clients by given label proportions,
and dense (logistic regression / MLP) and small convolutional flax classifiers behind
the `models.Model` interface.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sel.data.federated import FederatedData
from models.base import Model


def dirichlet_proportions(
    seed: int, num_clients: int, num_classes: int, alpha: float
) -> np.ndarray:
    """f32[N, C] label proportions, each row ~ Dir(alpha * 1) (Hsu et al., 2019)."""
    key = jax.random.PRNGKey(seed)
    return np.asarray(jax.random.dirichlet(key, jnp.full((num_classes,), alpha), (num_clients,)))


def gaussian_clusters(
    seed: int,
    num_clients: int,
    examples_per_client: int | Sequence[int],
    proportions: np.ndarray | None = None,
    feature_shape: tuple[int, ...] = (16,),
    num_classes: int = 10,
    separation: float = 1.0,
    heldout_per_client: int = 20,
    num_test: int = 500,
) -> FederatedData:
    """Classes are isotropic unit Gaussians around random centres.

    Class c has centre `separation * m_c`, `m_c ~ N(0, I)`; an example of class c is
    `centre_c + N(0, I)`. Client i draws its labels from `proportions[i]` (uniform when
    None); the test set is class-balanced in expectation.

    Args:
      seed: the seed of every draw.
      num_clients: N.
      examples_per_client: n_i, one int for all or one per client.
      proportions: f32[N, C] label proportions per client, or None for IID.
      feature_shape: shape of one example.
      num_classes: C.
      separation: scale of the class centres (larger is easier).
      heldout_per_client: held-out examples per client, same label proportions.
      num_test: test examples.

    Returns:
      A `FederatedData` padded to the largest client.
    """
    counts = np.broadcast_to(np.asarray(examples_per_client, np.int32), (num_clients,))
    if proportions is None:
        proportions = np.full((num_clients, num_classes), 1.0 / num_classes, np.float32)
    n_max = int(counts.max())
    dim = int(np.prod(feature_shape))
    keys = jax.random.split(jax.random.PRNGKey(seed), 6)
    centres = separation * jax.random.normal(keys[0], (num_classes, dim))
    logp = jnp.log(jnp.maximum(jnp.asarray(proportions, jnp.float32), 1e-30))

    @functools.partial(jax.jit, static_argnums=1)
    def draw(key, size, rows):
        label_key, noise_key = jax.random.split(key)
        y = jax.random.categorical(label_key, logp[rows][:, None, :], shape=(rows.shape[0], size))
        x = centres[y] + jax.random.normal(noise_key, y.shape + (dim,))
        return x.reshape(y.shape + tuple(feature_shape)), y.astype(jnp.int32)

    clients = jnp.arange(num_clients)
    x, y = draw(keys[1], n_max, clients)
    pad = jnp.arange(n_max)[None, :] < counts[:, None]
    x = jnp.where(pad.reshape(pad.shape + (1,) * len(feature_shape)), x, 0.0)
    y = jnp.where(pad, y, 0)
    x_h, y_h = draw(keys[2], heldout_per_client, clients)
    y_test = jax.random.randint(keys[3], (num_test,), 0, num_classes)
    x_test = centres[y_test] + jax.random.normal(keys[4], (num_test, dim))
    return FederatedData(
        x=x,
        y=y,
        counts=jnp.asarray(counts),
        x_heldout=x_h,
        y_heldout=y_h,
        heldout_counts=jnp.full((num_clients,), heldout_per_client, jnp.int32),
        x_test=x_test.reshape((num_test,) + tuple(feature_shape)),
        y_test=y_test.astype(jnp.int32),
        num_classes=num_classes,
    )


class _Dense(nn.Module):
    hidden: tuple[int, ...]
    num_classes: int

    @nn.compact
    def __call__(self, x):
        x = x.reshape((x.shape[0], -1))
        for width in self.hidden:
            x = nn.relu(nn.Dense(width)(x))
        return nn.Dense(self.num_classes)(x)


class _Conv(nn.Module):
    channels: tuple[int, ...]
    hidden: int
    num_classes: int

    @nn.compact
    def __call__(self, x):
        for c in self.channels:
            x = nn.relu(nn.Conv(c, (3, 3), padding="SAME")(x))
            x = nn.max_pool(x, (2, 2), (2, 2))
        x = nn.relu(nn.Dense(self.hidden)(x.reshape((x.shape[0], -1))))
        return nn.Dense(self.num_classes)(x)


def _wrap(module: nn.Module, name: str, input_shape, num_classes: int) -> Model:
    def init(key):
        return module.init(key, jnp.zeros((1,) + tuple(input_shape)))

    return Model(
        init=init,
        apply=module.apply,
        name=name,
        input_shape=tuple(input_shape),
        num_classes=num_classes,
    )


def dense_classifier(input_shape, num_classes: int, hidden: tuple[int, ...] = ()) -> Model:
    """Multinomial logistic regression (`hidden=()`) or a ReLU MLP."""
    name = "mlp_" + "_".join(map(str, hidden)) if hidden else "logistic_regression"
    return _wrap(_Dense(tuple(hidden), num_classes), name, input_shape, num_classes)


def conv_classifier(input_shape, num_classes: int, channels=(8, 16), hidden: int = 32) -> Model:
    """A small CNN: 3x3 conv + 2x2 max-pool blocks, one hidden dense layer."""
    return _wrap(_Conv(tuple(channels), hidden, num_classes), "small_cnn", input_shape, num_classes)
