"""Gamma and Beta draws for shape parameters >= 1, exact in distribution, without a
rejection loop per element.

`jax.random.gamma` runs Marsaglia and Tsang's rejection sampler as a `lax.while_loop`
per element, each step splitting the element's own key; under `jax.vmap` over clients
and trials that is a batched loop of per-element key splits. Here the attempts draw
their normals and uniforms in bulk: `attempts` of them side by side (one fused pass),
each element keeps its first accepted attempt, and the rare elements with none go on
with further bulk attempts in a loop that runs only while one is left in the batch.
The first accepted attempt of a sequence of independent attempts is an exact draw
(the rejection sampler unchanged), so the distribution does not depend on `attempts`;
the numbers do.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax


def _attempt(key, d, c):
    """One Marsaglia-Tsang attempt per element: (d v, accepted)."""
    normal_key, uniform_key = jax.random.split(key)
    x = jax.random.normal(normal_key, d.shape, d.dtype)
    u = jax.random.uniform(uniform_key, d.shape, d.dtype)
    v = (1.0 + c * x) ** 3
    # Marsaglia and Tsang's squeeze u < 1 - 0.0331 x^4 (most attempts, no logarithm's
    # rounding), else their test log u < x^2 / 2 + d (1 - v + log v); v > 0 for both.
    squeeze = u < 1.0 - 0.0331 * (x * x) * (x * x)
    log_test = jnp.log(u) < 0.5 * x * x + d * (1.0 - v + jnp.log(jnp.maximum(v, 1e-30)))
    return d * v, (v > 0) & (squeeze | log_test)


def gamma(key: jax.Array, a: jax.Array, attempts: int = 3) -> jax.Array:
    """Gamma(a, 1) draws, `f32[...]` of `a`'s shape, for every a >= 1.

    Marsaglia and Tsang, "A simple method for generating gamma variables", ACM TOMS
    26(3), 2000: d = a - 1/3, c = 1 / sqrt(9 d), x ~ N(0, 1), v = (1 + c x)^3, accept
    d v when v > 0 and log u < x^2/2 + d - d v + d log v. An attempt is accepted with
    probability 0.95 at a = 1 and more for larger a, so 3 attempts leave about one
    element in 10^4 to the loop. For a < 1 the result is not a Gamma draw (the method
    needs a >= 1; `a` is not checked, being traced).

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
        draw, accept = _attempt(jax.random.fold_in(key, i), d, c)
        return jnp.where(done, value, draw), done | accept

    value, done = jnp.zeros_like(a), jnp.zeros(a.shape, bool)
    for i in range(attempts):
        value, done = attempt(i, value, done)
    _, value, _ = lax.while_loop(
        lambda state: ~jnp.all(state[2]),
        lambda state: (state[0] + 1, *attempt(*state)),
        (jnp.int32(attempts), value, done),
    )
    return value


def beta(key: jax.Array, a: jax.Array, b: jax.Array, attempts: int = 3) -> jax.Array:
    """Beta(a, b) draws X / (X + Y), X ~ Gamma(a), Y ~ Gamma(b) (`gamma`), for a, b >= 1,
    `f32` of the broadcast shape of `a` and `b`. A Beta-Bernoulli posterior
    Beta(1 + S, 1 + F) always has a, b >= 1."""
    a, b = jnp.broadcast_arrays(jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32))
    x_key, y_key = jax.random.split(key)
    x, y = gamma(x_key, a, attempts), gamma(y_key, b, attempts)
    return x / (x + y)
