"""Multi-layer perceptrons over the flattened input."""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax.numpy as jnp


class MLP(nn.Module):
    """Fully connected ReLU network: `vec(x) -> hidden[0] -> ... -> C`.

    `hidden=(128,)` on MNIST is Chen et al.'s MLP, 784-128-10 with 101,770 parameters
    (spec, "Models"); `hidden=(200,)` is the 784-200-10 preset.

    Attributes:
      hidden: widths of the hidden layers.
      num_classes: C.
    """

    hidden: Sequence[int]
    num_classes: int

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        x = x.reshape(x.shape[0], -1)
        for width in self.hidden:
            x = nn.relu(nn.Dense(width)(x))
        return nn.Dense(self.num_classes)(x)
