"""Fixed-order sums over trials: the determinism contract of the runner.

Each round's per-trial metrics are summed (and their squares) over trials on device,
inside the scan. Floating-point sums depend on their order, so the order is fixed: a
dyadic tree over the global trial index (pairs of adjacent trials, then pairs of pairs,
...), built from elementwise adds that XLA never reorders. A chunk of `trials_per_chunk`
trials (a power of two) is one subtree, a device's block of a chunk (a power of two
too) a subtree of that; the host joins the devices' and the chunks' roots along the same
tree. The numbers are therefore the same, bit for bit on one backend, whatever the
chunking or the number of devices.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


def tree_sum(x: chex.Array) -> chex.Array:
    """Sums over the leading axis along a fixed dyadic tree of elementwise adds.

    Zero-pads the axis to a power of two, then adds adjacent pairs until one row is
    left. The result depends only on the values and their positions, not on how XLA
    lowers a reduction, and a sum over an aligned power-of-two block is a subtree of
    the sum over a larger block. A NumPy array is summed on the host, with the same
    f32 adds (the host joins the sums of chunks and devices).
    """
    xp = np if isinstance(x, np.ndarray) else jnp
    n = x.shape[0]
    size = 1 << max(n - 1, 0).bit_length()
    x = xp.concatenate([x, xp.zeros((size - n,) + x.shape[1:], x.dtype)])
    while x.shape[0] > 1:
        x = x[0::2] + x[1::2]
    return x[0]


def exact_square(x: chex.Array) -> chex.Array:
    """x * x of x rounded to 12 significant bits, so that every square is exact in f32.

    XLA may contract `a * a + b` into a fused multiply-add for some shapes and not for
    others; with exact squares both round alike, keeping second moments independent of
    the chunking. The rounding changes a variance by a relative 2^-11 at most.
    """
    x = lax.reduce_precision(x, exponent_bits=8, mantissa_bits=11)
    return x * x


class DyadicStack:
    """Joins equal-size chunk sums along the dyadic tree of `tree_sum` (host side)."""

    def __init__(self, levels=(), items=()):
        self.levels = list(levels)
        self.items = list(items)

    def push(self, item):
        self.levels.append(0)
        self.items.append(item)
        while len(self.levels) > 1 and self.levels[-1] == self.levels[-2]:
            right, left = self.items.pop(), self.items.pop()
            level = self.levels.pop()
            self.levels[-1] = level + 1
            self.items.append(jax.tree.map(np.add, left, right))

    def total(self):
        # Missing right subtrees are zeros, and x + 0 == x: join from the right.
        acc = self.items[-1]
        for item in reversed(self.items[:-1]):
            acc = jax.tree.map(np.add, item, acc)
        return acc
