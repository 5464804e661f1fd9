"""Two-convolution CNNs of the seed papers.

All share one shape: two 5x5 convolutions with ReLU, each followed by 2x2 max pooling,
then fully connected ReLU layers and a linear output. The presets (see `models.get`):

| preset              | source (CIFAR/FMNIST)  | conv   | pad   | dense    | params      |
|---------------------|------------------------|--------|-------|----------|-------------|
| `cnn_mnist`         | Huang Sec. 6.2, FMNIST | 20, 50 | valid | 500      | 431,080     |
| `cnn_cifar10`       | Huang Sec. 6.2, CIFAR  | 64, 64 | valid | 384, 192 | 797,962     |
| `cnn_cifar10_same`  | Qu Sec. VI-A, CIFAR    | 64, 64 | same  | 384, 192 | 1,756,426   |
| `cnn_cifar10_small` | Chen Sec. 6, CIFAR     | 16, 20 | valid | 596      | 313,802     |

Counts are for 28x28x1 inputs (`cnn_mnist`) and 32x32x3 inputs (the others).

The papers do not state padding; the specs' readings are used (valid for Huang, "same"
for Qu). Chen et al. give only the layer types and the count 313,802; the spec's exact
match (conv 16, conv 20, FC 596) is used, which is not claimed to be the authors' net.
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax.numpy as jnp


def spatial_after(size: int, padding: str) -> int:
    """Side length after (5x5 conv, 2x2 pool) twice; < 1 means the input is too small."""
    for _ in range(2):
        size = (size - 4 if padding == "VALID" else size) // 2
    return size


class CNN(nn.Module):
    """conv5x5 -> ReLU -> maxpool2 -> conv5x5 -> ReLU -> maxpool2 -> dense ReLU ... -> C.

    Attributes:
      features: output channels of the two convolutions.
      dense: widths of the hidden fully connected layers.
      num_classes: C.
      padding: "VALID" or "SAME" for the convolutions.
    """

    features: Sequence[int]
    dense: Sequence[int]
    num_classes: int
    padding: str = "VALID"

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        for channels in self.features:
            x = nn.relu(nn.Conv(channels, (5, 5), padding=self.padding)(x))
            x = nn.max_pool(x, (2, 2), strides=(2, 2))
        x = x.reshape(x.shape[0], -1)
        for width in self.dense:
            x = nn.relu(nn.Dense(width)(x))
        return nn.Dense(self.num_classes)(x)
