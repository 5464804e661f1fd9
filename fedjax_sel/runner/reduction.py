"""Fixed-order sums over trials: the determinism and precision contract of the runner.

Each round's per-trial metrics are summed (with their squares) over trials on device,
inside the scan. Floating-point sums depend on their order, so the order is fixed: a
dyadic tree over the global trial index (pairs of adjacent trials, then pairs of pairs,
...), built from elementwise adds that XLA never reorders. A chunk of `trials_per_chunk`
trials (a power of two) is one subtree, a device's block of a chunk (a power of two
too) a subtree of that; the host joins the devices' and the chunks' roots along the same
tree with the same f32 operations. The numbers are therefore the same, bit for bit on
one backend, whatever the chunking or the number of devices.

Precision. A standard deviation over trials comes from the second moment minus the
squared mean, which cancels when the spread is small against the mean: a cumulative
metric after 1e5 rounds can have std/mean below 1e-3, where f32 moments would lose every
digit (the variance is about (mean/std)^2 times smaller than the second moment). So the
sums are kept as double-f32 numbers (`fedjax_sel.ops.double`), an f32 pair (hi, lo)
whose exact sum carries about 48 significant bits, formed without a rounding that
depends on whether XLA fuses a multiply into an add; the host finishes the moments in
float64 (`mean_and_std`). The std's relative error is then about (mean/std)^2 2^-48:
below 1e-6 down to std/mean ~ 1e-4.
"""

from __future__ import annotations

import chex
import jax.numpy as jnp
import numpy as np

from fedjax_sel.ops import double


def tree_sum(x: chex.Array, add=None) -> chex.Array:
    """Sums over the leading axis along a fixed dyadic tree of elementwise adds.

    Zero-pads the axis to a power of two, then adds adjacent pairs until one row is
    left. The result depends only on the values and their positions, not on how XLA
    lowers a reduction, and a sum over an aligned power-of-two block is a subtree of
    the sum over a larger block. A NumPy array is summed on the host, with the same
    f32 operations (the host joins the sums of chunks and devices).

    Args:
      x: the values, summed over axis 0.
      add: the addition, `(a, b) -> a + b` elementwise by default (`ops.double.add` for
        double-f32 numbers); zero must be its identity.
    """
    xp = np if isinstance(x, np.ndarray) else jnp
    add = add or (lambda a, b: a + b)
    n = x.shape[0]
    size = 1 << max(n - 1, 0).bit_length()
    x = xp.concatenate([x, xp.zeros((size - n,) + x.shape[1:], x.dtype)])
    while x.shape[0] > 1:
        x = add(x[0::2], x[1::2])
    return x[0]


def mean_and_std(sums: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean and population std f64[...] over `count` values from their double-f32 sums
    f32[..., 2 (moment), 2 (hi, lo)] (`ops.double.moments` summed with `ops.double.add`)."""
    first = double.to_float64(sums[..., 0, :]) / count
    second = double.to_float64(sums[..., 1, :]) / count
    return first, np.sqrt(np.maximum(second - first * first, 0.0))


def join_chunks(a, b):
    """Joins two chunks' (or devices') sums: (per-round moments f32[T, metrics, 2, 2] in
    double-f32, selection counts f32[N])."""
    return double.add(a[0], b[0]), a[1] + b[1]


class DyadicStack:
    """Joins equal-size chunk sums along the dyadic tree of `tree_sum` (host side).

    `add` joins two items (`join_chunks`); zero items must be its identity.
    """

    def __init__(self, add, levels=(), items=()):
        self.add = add
        self.levels = list(levels)
        self.items = list(items)

    def push(self, item):
        self.levels.append(0)
        self.items.append(item)
        while len(self.levels) > 1 and self.levels[-1] == self.levels[-2]:
            right, left = self.items.pop(), self.items.pop()
            level = self.levels.pop()
            self.levels[-1] = level + 1
            self.items.append(self.add(left, right))

    def total(self):
        # Missing right subtrees are zeros, and x + 0 == x: join from the right.
        acc = self.items[-1]
        for item in reversed(self.items[:-1]):
            acc = self.add(item, acc)
        return acc
