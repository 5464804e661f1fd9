"""Double-f32 arithmetic: numbers as f32 pairs (hi, lo) whose exact sum is the value.

A pair carries about 48 significant bits where JAX computes in f32 (float64 is off by
default in JAX, and slow or absent on accelerators). Additions use Knuth's error-free TwoSum,
products are split into parts whose products are exact in f32, so a result never
depends on whether XLA fuses a multiply into the addition that follows: the same inputs
give the same bits in every program. Numbers are f32[..., 2] (the trailing axis is
(hi, lo)); `add` takes NumPy or JAX arrays alike (the host joins what devices summed
with the same operations), `to_float64` NumPy ones. The runner uses them for sums over trials
and rounds that must not lose the spread of a metric to rounding.
"""

from __future__ import annotations

import chex
import jax.numpy as jnp
import numpy as np
from jax import lax


def _xp(x):
    return np if isinstance(x, np.ndarray) else jnp


def two_sum(a: chex.Array, b: chex.Array) -> tuple[chex.Array, chex.Array]:
    """(s, e) with s = fl(a + b) and s + e = a + b exactly (Knuth's TwoSum; additions only,
    which XLA does not reassociate)."""
    s = a + b
    v = s - a
    return s, (a - (s - v)) + (b - v)


def add(x: chex.Array, y: chex.Array) -> chex.Array:
    """x + y of double-f32 numbers, f32[..., 2] (hi, lo) each; the result normalised
    (|lo| <= ulp(hi) / 2), with an error of about 2^-44 (|x| + |y|): relative to the
    result where x and y have the same sign, and up to 2^-24 of it where they nearly
    cancel (the low parts are added in f32). Zero is its identity on normalised
    numbers."""
    xp = _xp(x)
    s, e = two_sum(x[..., 0], y[..., 0])
    e = e + (x[..., 1] + y[..., 1])
    hi = s + e
    return xp.stack([hi, e - (hi - s)], -1)


def from_f32(x: chex.Array) -> chex.Array:
    """f32[...] as double-f32 numbers f32[..., 2] (lo = 0)."""
    return jnp.stack([x, jnp.zeros_like(x)], -1)


def from_int32(x: chex.Array) -> chex.Array:
    """int32[...] (|x| < 2^30) as double-f32 numbers f32[..., 2], exactly."""
    hi = x.astype(jnp.float32)
    return jnp.stack([hi, (x - hi.astype(jnp.int32)).astype(jnp.float32)], -1)


def sum_int27(x: chex.Array) -> chex.Array:
    """The sum of int32[n] x in [0, 2^27), n < 2^21, as a double-f32 number f32[2],
    exactly: three 9-bit fields of x summed in int32 (none overflows), each added at its
    scale. A sum in int32 alone wraps once it reaches 2^31 (`from_int32` is exact below
    2^30)."""
    total = from_int32(jnp.int32(0))
    for shift in (18, 9, 0):
        field = from_int32(jnp.sum((x >> shift) & 511))
        total = add(total, field * np.float32(2.0**shift))
    return total


def _split(x: chex.Array) -> tuple[chex.Array, chex.Array]:
    """x = head + tail exactly, each with at most 12 significant bits, so that the product
    of any two such parts is exact in f32."""
    head = lax.reduce_precision(x, exponent_bits=8, mantissa_bits=11)
    return head, x - head


def square(x: chex.Array) -> chex.Array:
    """x * x of double-f32 numbers f32[..., 2], as double-f32, to about 2^-46 relative.

    hi and lo are split into 12-bit parts, hi = a + b and lo = c + d, so that every
    product below is exact in f32: whether or not XLA fuses a product into the addition
    that follows, the rounding is the same. a*a, 2ab and the rest are joined with
    error-free additions; the terms of 2*hi*lo (about 2^-23 of the square) are added in
    f32, and lo*lo lies below every rounding.
    """
    a, b = _split(x[..., 0])
    c, d = _split(x[..., 1])
    cross = ((2.0 * a * c + 2.0 * a * d) + 2.0 * b * c) + 2.0 * b * d
    total = add(from_f32(a * a), from_f32(2.0 * a * b))
    return add(total, from_f32(b * b + cross))


def moments(x: chex.Array) -> chex.Array:
    """(x, x^2) of double-f32 numbers f32[..., 2], as f32[..., 2 (moment), 2 (hi, lo)]."""
    return jnp.stack([x, square(x)], -2)


def to_float64(x: np.ndarray) -> np.ndarray:
    """The value of double-f32 numbers f32[..., 2] as f64[...] (exact for normalised ones)."""
    return x[..., 0].astype(np.float64) + x[..., 1].astype(np.float64)
