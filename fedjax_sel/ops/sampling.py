"""Random draws at a subset of positions, and Gamma and Beta draws without a rejection
loop per element.

`uniform_at` and `normal_at` draw a client's number from its own counter, so that an
environment draws only what a round observes and still gives every client the number a
draw over all N would (common random numbers, whatever the others did).

`jax.random.gamma` runs Marsaglia and Tsang's rejection sampler as a `lax.while_loop`
per element, each step splitting the element's own key; under `jax.vmap` over clients
and trials that is a batched loop of per-element key splits. Here the attempts are drawn
in bulk, one hash giving an attempt's normal and uniform, and the rare elements left
without a draw go on with further bulk attempts in a loop that runs only while one is
left in the batch. The first accepted attempt of a sequence of independent attempts is
an exact draw (the rejection sampler unchanged), so the distribution does not depend on
how many attempts are drawn in bulk; the numbers do.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.random import threefry2x32_p


def _counter_hashed(key: jax.Array) -> bool:
    """Whether `jax.random`'s draws from `key` hash each entry's flat index alone: the
    threefry2x32 implementation with `jax_threefry_partitionable` (JAX's default)."""
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        impl = str(jax.random.key_impl(key))
    else:
        impl = jax.config.jax_default_prng_impl
    return "threefry2x32" in impl and jax.config.jax_threefry_partitionable


def _bits_at(key: jax.Array, index: jax.Array, size: int) -> jax.Array:
    """u32[k]: `jax.random.bits(key, (size,))[index]`, bit for bit (`index` clipped to
    [0, size), as the definition's gather does).

    With JAX's default PRNG (threefry2x32, partitionable), entry i is a function of the
    key and of i alone: the two words of threefry2x32(key, (0, i)), xor-ed. Only the
    entries of `index` are hashed then, so that the cost follows `index`, not `size`;
    with another PRNG the definition itself runs.
    """
    index = jnp.clip(index, 0, size - 1)
    if not _counter_hashed(key):
        return jax.random.bits(key, (size,))[index]
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    counter = index.astype(jnp.uint32)
    bits1, bits2 = threefry2x32_p.bind(key[0], key[1], jnp.zeros_like(counter), counter)
    return bits1 ^ bits2


def _word_pairs(key: jax.Array, shape: tuple[int, ...]) -> tuple[jax.Array, jax.Array]:
    """Two independent uniform u32 words per entry of `shape`.

    Defined as `jax.random.bits` of two subkeys. With JAX's default PRNG the two words
    of threefry2x32(key, (0, i)) for each flat index i are used instead (the same hash
    `jax.random.bits` xors into one word): one hash per pair rather than two.
    """
    if not _counter_hashed(key):
        first, second = jax.random.split(key)
        return jax.random.bits(first, shape), jax.random.bits(second, shape)
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    counter = lax.iota(jnp.uint32, math.prod(shape)).reshape(shape)
    return threefry2x32_p.bind(key[0], key[1], jnp.zeros_like(counter), counter)


def _unit(bits: jax.Array) -> jax.Array:
    """f32 in [0, 1) from the 23 high bits of u32 `bits` (as `jax.random.uniform`)."""
    mantissa = (bits >> np.uint32(9)) | np.uint32(0x3F800000)
    return lax.bitcast_convert_type(mantissa, jnp.float32) - np.float32(1.0)


def _normal(bits: jax.Array) -> jax.Array:
    """f32 N(0, 1) from u32 `bits`, as `jax.random.normal` makes it: sqrt(2) erfinv(u),
    u uniform in (-1, 1)."""
    low = np.nextafter(np.float32(-1.0), np.float32(0.0))
    return np.float32(np.sqrt(2)) * lax.erf_inv(lax.max(low, 2.0 * _unit(bits) + low))


@functools.partial(jax.jit, static_argnames=("size", "minval", "maxval"))
def uniform_at(
    key: jax.Array, index: jax.Array, size: int, minval: float = 0.0, maxval: float = 1.0
) -> jax.Array:
    """`jax.random.uniform(key, (size,), minval=minval, maxval=maxval)[index]`, bit for
    bit, hashing only the entries of `index` (`_bits_at`). Jitted, so that its arithmetic
    rounds as `jax.random.uniform`'s (fused) does, even when called eagerly.

    Args:
      key: a PRNG key (one trial's).
      index: int32[k], positions in [0, size) (others are clipped to it, as the
        definition's gather does).
      size: N, the length of the draw that `index` reads.
      minval, maxval: the range, as for `jax.random.uniform`.

    Returns:
      f32[k].
    """
    low, high = np.float32(minval), np.float32(maxval)
    return lax.max(low, _unit(_bits_at(key, index, size)) * (high - low) + low)


@functools.partial(jax.jit, static_argnames=("size",))
def normal_at(key: jax.Array, index: jax.Array, size: int) -> jax.Array:
    """`jax.random.normal(key, (size,))[index]`, bit for bit, hashing only the entries
    of `index` (`_bits_at`, `_normal`).

    Args:
      key: a PRNG key.
      index: int32[k], positions in [0, size).
      size: N, the length of the draw that `index` reads.

    Returns:
      f32[k].
    """
    return _normal(_bits_at(key, index, size))


def _accepted(x, u, v, d):
    """Marsaglia and Tsang's acceptance of an attempt: v > 0 and either their squeeze,
    u < 1 - 0.0331 x^4 (most attempts, no logarithm's rounding), or their test,
    log u < x^2 / 2 + d (1 - v + log v)."""
    squeeze = u < 1.0 - 0.0331 * (x * x) * (x * x)
    log_test = jnp.log(u) < 0.5 * x * x + d * (1.0 - v + jnp.log(jnp.maximum(v, 1e-30)))
    return (v > 0) & (squeeze | log_test)


def gamma(key: jax.Array, a: jax.Array, attempts: int = 1) -> jax.Array:
    """Gamma(a, 1) draws, `f32[...]` of `a`'s shape, for every a >= 1.

    Marsaglia and Tsang, "A simple method for generating gamma variables", ACM TOMS
    26(3), 2000: d = a - 1/3, c = 1 / sqrt(9 d), x ~ N(0, 1), u ~ U(0, 1),
    v = (1 + c x)^3; accept d v when v > 0 and u < 1 - 0.0331 x^4 (the squeeze) or
    log u < x^2/2 + d - d v + d log v; else make another attempt. An attempt is
    accepted with probability 0.951 at a = 1 and more for larger a.

    Every element makes `attempts` attempts in bulk, each from the two words of one
    hash (`_word_pairs`, materialised once), and keeps its first accepted one; the
    elements with none go on with further bulk attempts in a loop that runs only while
    one is left in the batch. Each element's value is its first accepted attempt of a
    sequence of independent attempts, an exact Gamma draw whatever `attempts` (the
    numbers depend on it). For a < 1 the result is not a Gamma draw (the method needs
    a >= 1; `a` is not checked, being traced).

    Args:
      key: a PRNG key.
      a: shape parameters >= 1.
      attempts: attempts drawn in bulk before the loop, >= 0.
    """
    a = jnp.asarray(a, jnp.float32)
    d = a - 1.0 / 3.0
    c = lax.rsqrt(9.0 * d)

    def attempt(i, value, done):
        """Attempt i for the elements without an accepted one."""
        normal_bits, uniform_bits = lax.optimization_barrier(
            _word_pairs(jax.random.fold_in(key, i), a.shape)
        )
        x, u = _normal(normal_bits), _unit(uniform_bits)
        v = (1.0 + c * x) ** 3
        accept = _accepted(x, u, v, d)
        return jnp.where(done, value, d * v), done | accept

    value, done = jnp.zeros_like(a), jnp.zeros(a.shape, bool)
    for i in range(attempts):
        value, done = attempt(i, value, done)
    _, value, _ = lax.while_loop(
        lambda state: ~jnp.all(state[2]),
        lambda state: (state[0] + 1, *attempt(*state)),
        (jnp.int32(attempts), value, done),
    )
    return value


def beta(key: jax.Array, a: jax.Array, b: jax.Array, attempts: int = 1) -> jax.Array:
    """Beta(a, b) draws X / (X + Y), X ~ Gamma(a), Y ~ Gamma(b) (`gamma`, in one call),
    for a, b >= 1, `f32` of the broadcast shape of `a` and `b`. A Beta-Bernoulli
    posterior Beta(1 + S, 1 + F) always has a, b >= 1."""
    a, b = jnp.broadcast_arrays(jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32))
    x, y = gamma(key, jnp.stack([a, b]), attempts)
    return x / (x + y)
