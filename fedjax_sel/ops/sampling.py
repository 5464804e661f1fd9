"""Random draws at a subset of positions, and Gamma and Beta draws without a rejection
loop per element.

`uniform_at` and `normal_at` draw a client's number from its own counter, so that an
environment draws only what a round observes and still gives every client the number a
draw over all N would (common random numbers, whatever the others did).

`jax.random.gamma` and `jax.random.beta` run Marsaglia and Tsang's rejection sampler as a
`lax.while_loop` per element, each step splitting the element's own key; under
`jax.vmap` over clients and trials that is a batched loop of per-element key splits.
Here (`gamma`: Marsaglia and Tsang; `beta`: Cheng's algorithm, one attempt where a ratio
of two Gamma draws takes two) every element makes its first attempt in bulk, one hash
giving the attempt's two numbers; the few elements left without a draw are gathered into
a short buffer and go on there, in a loop that runs while one is left in the batch
(`_first_accepted`). Attempt i of element e always takes the same hash, whoever makes it,
so each element's value is its first accepted attempt of one sequence of independent
attempts: the rejection sampler unchanged, and the same numbers however the attempts are
grouped.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.random import threefry2x32_p

from fedjax_sel.ops import places, selection


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
    first, second = _hash(key, index)
    return first ^ second


def _word_pairs(key: jax.Array, size: int, index: jax.Array | None = None):
    """Two independent uniform u32 words for each position of `index` (int32, in
    [0, size)), or for every position 0, ..., size - 1 in order if `index` is None.

    Defined as `jax.random.bits` of two subkeys over `size`, read at `index`. With JAX's
    default PRNG the two words of threefry2x32(key, (0, i)) for position i are used
    instead (the hash that `jax.random.bits` xors into one word): one hash per pair, and
    only the positions asked for are hashed.
    """
    if not _counter_hashed(key):
        first, second = (jax.random.bits(k, (size,)) for k in jax.random.split(key))
        return (first, second) if index is None else (first[index], second[index])
    return _hash(key, lax.iota(jnp.int32, size) if index is None else index)


def _hash(key: jax.Array, index: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The two u32 words of threefry2x32(key, (0, i)) for each i of `index`."""
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    counter = index.astype(jnp.uint32)
    # The key's words batched wherever the counter is (plus a zero that depends on it):
    # under a `vmap` that batches the counter and not the key, JAX 0.10.2's batching of
    # threefry2x32 gives the key a size-1 axis, and its rolled CPU lowering then fails to
    # trace (a loop carry changes shape). Scalars still, so the hash stays as cheap.
    zero = counter.ravel()[0] * np.uint32(0) if counter.size else np.uint32(0)
    words = key[0] + zero, key[1] + zero
    return tuple(threefry2x32_p.bind(*words, jnp.zeros_like(counter), counter))


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


def _open_unit(bits: jax.Array) -> jax.Array:
    """f32 in (0, 1) from the 23 high bits of u32 `bits`: the midpoints of `_unit`'s
    2^23 cells, so that a logarithm of it, or of 1 minus it, is finite."""
    return _unit(bits) + np.float32(2.0**-24)


def _first_accepted(key, attempt, params, spare, share):
    """Each element's first accepted attempt of a rejection sampler, f32[size].

    Attempt i of the element at flat position e takes the two words of one hash of
    (i, e) (`_word_pairs` of `fold_in(key, i)`), so its value does not depend on which
    other elements make attempts alongside it. The attempts are made in three steps,
    which change the cost and not the numbers:

    1. every element makes attempt 0, in bulk (a pass over the elements);
    2. the first `spare` elements without a draw, in flat order (`ops.true_indices`),
       make attempts 1, 2, ... in a buffer of `spare` places until each has one, where
       further passes over every element would run until the batch's last element is
       accepted;
    3. any element still without a draw (more than `spare` were left) goes on in bulk
       passes, from attempt 1; none are left unless the buffer overflowed.

    Args:
      key: a PRNG key.
      attempt: (first_bits, second_bits, *params) -> (value, accepted), elementwise:
        one attempt of the elements whose parameters are `params`, from two uniform
        u32 words each.
      params: f32[size] arrays, the elements' parameters.
      spare: the buffer's places, a Python int >= 0, or None for 32 + size / `share`.
      share: the buffer's default share of the elements, a Python int.
    """
    if spare is not None and (not isinstance(spare, int) or spare < 0):
        raise ValueError(f"spare must be None or an int >= 0, got {spare!r}.")
    size = params[0].shape[0]
    spare = min(32 + size // share if spare is None else spare, size)
    # Materialised once: the buffer gathers the very numbers the bulk attempt used.
    params = lax.optimization_barrier(params)

    def attempt_at(i, index, params, value, done):
        """Attempt i of the elements at `index` (all, if None) without an accepted one."""
        words = lax.optimization_barrier(_word_pairs(jax.random.fold_in(key, i), size, index))
        value_i, accepted = attempt(*words, *params)
        return jnp.where(done, value, value_i), done | accepted

    def attempts(index, params, value, done):
        """Attempts 1, 2, ... while an element of the batch is left without a draw."""
        _, value, done = lax.while_loop(
            lambda state: ~jnp.all(state[2]),
            lambda state: (state[0] + 1, *attempt_at(state[0], index, params, *state[1:])),
            (jnp.int32(1), value, done),
        )
        return value

    value, done = attempt_at(0, None, params, jnp.zeros(size), jnp.zeros(size, bool))
    if spare:
        left = selection.true_indices(~done, spare)
        kept = attempts(
            left, tuple(places.take(p, left, 1.0) for p in params), jnp.zeros(spare), left == size
        )
        value = places.put(value, left, kept)
        done = places.put(done, left, True)
    return attempts(None, params, value, done)


def _gamma_attempt(normal_bits, uniform_bits, d, c):
    """One attempt of Marsaglia and Tsang's sampler of Gamma(d + 1/3), c = 1 / sqrt(9 d):
    x ~ N(0, 1), u ~ U(0, 1), v = (1 + c x)^3, the value d v, accepted when v > 0 and
    either their squeeze, u < 1 - 0.0331 x^4 (most attempts, no logarithm's rounding), or
    their test, log u < x^2 / 2 + d (1 - v + log v)."""
    x, u = _normal(normal_bits), _unit(uniform_bits)
    v = (1.0 + c * x) ** 3
    squeeze = u < 1.0 - 0.0331 * (x * x) * (x * x)
    log_test = jnp.log(u) < 0.5 * x * x + d * (1.0 - v + jnp.log(jnp.maximum(v, 1e-30)))
    # A shape outside [1, inf), or NaN, ends at once (`gamma` makes its value NaN).
    return d * v, ((v > 0) & (squeeze | log_test)) | ~((d > 0.5) & (d < jnp.inf))


def gamma(key: jax.Array, a: jax.Array, spare: int | None = None) -> jax.Array:
    """Gamma(a, 1) draws, `f32[...]` of `a`'s shape, for every a >= 1.

    Marsaglia and Tsang, "A simple method for generating gamma variables", ACM TOMS
    26(3), 2000: d = a - 1/3, c = 1 / sqrt(9 d), x ~ N(0, 1), u ~ U(0, 1),
    v = (1 + c x)^3; accept d v when v > 0 and u < 1 - 0.0331 x^4 (the squeeze) or
    log u < x^2/2 + d - d v + d log v; else make another attempt (`_gamma_attempt`). An
    attempt is accepted with probability 0.951 at a = 1 and more for larger a.

    Each element's value is its first accepted attempt, attempt i of element e taking
    its normal and uniform from the two words of one hash of (i, e): an exact Gamma
    draw, made in bulk with the rejected attempts in a buffer (`_first_accepted`): about
    5% of the elements at a = 1, so a few passes over a buffer a sixteenth of `a`'s size
    by default, where further passes over `a` would run until the batch's last element
    is accepted (4 to 5 of them at 10^6 elements).

    A shape outside [1, inf), or NaN, gives NaN (the method needs a >= 1; `a` is traced,
    so it is not refused), at once: no attempt of it could be accepted.

    Args:
      key: a PRNG key.
      a: shape parameters >= 1.
      spare: the buffer's places, a Python int >= 0; by default 32 + size / 16 (at
        a = 1, 5% of the elements need it, 98 +- 10 of 2,000), at most the size.
    """
    a = jnp.asarray(a, jnp.float32)
    d = (a - 1.0 / 3.0).reshape(-1)
    value = _first_accepted(key, _gamma_attempt, (d, lax.rsqrt(9.0 * d)), spare, 16)
    return jnp.where((a >= 1.0) & (a < jnp.inf), value.reshape(a.shape), jnp.nan)


_LOG_4 = np.float32(np.log(4.0))


def _beta_attempt(first_bits, second_bits, a, b):
    r"""One attempt of Cheng's sampler of Beta(a, b), a, b >= 1, or the inverse CDF
    where the smaller parameter is 1 (always accepted): (value, accepted).

    R. C. H. Cheng, "Generating beta variates with nonintegral shape parameters", CACM
    21(4), 1978, algorithms BA and BB, with p = min(a, b), q = max(a, b), alpha = p + q,
    beta = sqrt((alpha - 2) / (2 p q - alpha)), gamma = p + 1 / beta, u1, u2 ~ U(0, 1):
    v = beta log(u1 / (1 - u1)), w = p e^v, r = gamma v - log 4; accept if
    r + alpha log(alpha / (q + w)) >= log(u1^2 u2), and then the value is w / (q + w) for
    Beta(p, q), q / (q + w) for Beta(q, p). BB adds two squeezes to this test, which only
    spare a scalar loop the logarithms; an attempt made over many elements at once
    computes the test for every element anyway, so it is the test alone.

    Written so that float32 keeps its bits where the terms are large or near 1:
    2 p q - alpha is 2 (p - 1)(q - 1) + (p - 1) + (q - 1) (no cancellation near
    p = q = 1, and beta = 1 at p = q = 1, its limit, where the formula is 0 / 0), w - p is
    p expm1(v), alpha log(alpha / (q + w)) is -alpha log1p((w - p) / alpha) (no
    cancellation at p, q ~ 10^6), and u1, 1 - u1 and u2 are exact (`_open_unit`). The
    three logarithms are taken as one array: XLA on CPU copies the hash that makes u1
    and u2 into each consumer that is a fusion of its own, four copies with three
    separate logarithms.

    At p = 1 and q large an attempt of BA is accepted with probability 0.68 only (0.80 to
    0.94 from p = 2 on), so at p = 1 the exact inverse CDF is taken instead: Beta(1, q) =
    1 - u2^(1/q), Beta(q, 1) = u2^(1/q), a Beta-Bernoulli posterior with no success or
    no failure yet.
    """
    u1, u2 = _open_unit(first_bits), _open_unit(second_bits)
    log_u1, log_v1, log_u2 = jnp.log(jnp.stack([u1, 1.0 - u1, u2]))
    p, q = jnp.minimum(a, b), jnp.maximum(a, b)
    alpha = p + q
    p1, q1 = p - 1.0, q - 1.0
    spread = p1 + q1
    beta = jnp.where(spread > 0, lax.sqrt(spread / jnp.maximum(2.0 * p1 * q1 + spread, 1e-30)), 1.0)
    v = beta * (log_u1 - log_v1)
    excess = p * jnp.expm1(v)  # w - p
    r = (p + 1.0 / beta) * v - _LOG_4
    accepted = r - alpha * jnp.log1p(excess / alpha) >= 2.0 * log_u1 + log_u2
    w = p + excess
    cheng = jnp.where(a == p, w, q) / (q + w)
    root = log_u2 / q
    inverse = jnp.where(a == p, -jnp.expm1(root), jnp.exp(root))
    # A parameter outside [1, inf), or NaN, ends at once (`beta` makes its value NaN).
    return jnp.where(p == 1.0, inverse, cheng), (p == 1.0) | accepted | ~(
        (p >= 1.0) & (q < jnp.inf)
    )


def beta(key: jax.Array, a: jax.Array, b: jax.Array, spare: int | None = None) -> jax.Array:
    """Beta(a, b) draws, `f32` of the broadcast shape of `a` and `b`, for a, b >= 1.

    Cheng's rejection sampler (algorithm BA, CACM 1978), or the inverse CDF where
    min(a, b) = 1 (`_beta_attempt`): an attempt's two uniforms are the two words of one
    hash, and it is accepted always at min(a, b) = 1, with probability 0.68 just above 1,
    0.80 at min(a, b) = 2 (0.94 at a = b = 2) and 0.886 in the limit of large a and b.
    Each element's value is its first accepted attempt, an exact Beta draw, made in
    bulk with the rejected attempts in a buffer (`_first_accepted`). A Beta-Bernoulli
    posterior Beta(1 + S, 1 + F) always has a, b >= 1; where a or b lies outside
    [1, inf) or is NaN the draw is NaN (not refused, being traced), at once: no attempt
    of it could be accepted.

    A ratio of Gamma draws X / (X + Y) would take two Marsaglia-Tsang attempts, each a
    hash, an inverse error function and two logarithms; Cheng's attempt is one hash,
    three logarithms (one array), a `log1p` and three exponentials (two of them for the
    inverse CDF). The buffer's passes run while any element of the batch is left, so
    their cost is the buffer's size times about five passes: an eighth of the elements
    measured faster than a fifth or a quarter (docs/benchmarks.md), though more than an
    eighth is rejected where most posteriors have min(a, b) of 2 to 5 and max(a, b) far
    larger, and the rest then go on in passes over every element.

    Args:
      key: a PRNG key.
      a, b: shape parameters >= 1.
      spare: the buffer's places, a Python int >= 0; by default 32 + size / 8, at most
        the size.
    """
    a, b = jnp.broadcast_arrays(jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32))
    value = _first_accepted(key, _beta_attempt, (a.reshape(-1), b.reshape(-1)), spare, 8)
    valid = (jnp.minimum(a, b) >= 1.0) & (jnp.maximum(a, b) < jnp.inf)
    return jnp.where(valid, value.reshape(a.shape), jnp.nan)
