"""Thompson sampling: Beta-Bernoulli and Gaussian posteriors, top k of the samples."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from bandits import arm_stats
from fedjax_sel import ops, validation
from fedjax_sel.ops import sampling
from fedjax_sel.types import Decision, Selector

PRIORS = ("beta", "gaussian")


def thompson(
    num_clients: int,
    num_selected: int,
    prior: str = "beta",
    prior_scale: float = 1.0,
) -> Selector:
    r"""Combinatorial Thompson sampling (Wang and Chen, ICML 2018), one sample per client.

    - `prior="beta"` (rewards in [0, 1]): client i's posterior is
      :math:`\mathrm{Beta}(1 + S_i, 1 + T_i - S_i)` with :math:`S_i` the sum of its
      observed rewards. For Bernoulli rewards this is the exact posterior; for rewards in
      [0, 1] it is the fractional update, which keeps `update` deterministic. The draw
      is `ops.sampling.beta` (exact: Cheng's rejection sampler, or the inverse CDF where
      a or b is 1, the rejected attempts in a buffer; a, b >= 1 here).
    - `prior="gaussian"`: :math:`\theta_i \sim N(S_i / (T_i + 1), v^2 / (T_i + 1))`
      (Agrawal and Goyal, 2013) with `v = prior_scale`.

    The k available clients of largest sample are selected.

    `update` refuses rewards the posterior cannot take (NaN, or outside [0, 1] for
    "beta", infinite for "gaussian") of observed clients: at once when run eagerly, and
    under `jax.jit` when wrapped in `jax.experimental.checkify.checkify`
    (`validation.check_feedback`; without checkify the check compiles to nothing).

    Args:
      num_clients: N >= 1.
      num_selected: cohort size k, 1 <= k <= N.
      prior: "beta" or "gaussian".
      prior_scale: v > 0, the Gaussian posterior's scale (unused for "beta").

    Returns:
      A `Selector` whose state is an `arm_stats.ArmStats`.
    """
    n = validation.positive_int("num_clients", num_clients)
    k = validation.num_selected(num_selected, n)
    if prior not in PRIORS:
        raise ValueError(f"prior must be one of {PRIORS}, got {prior!r}.")
    v = validation.positive_float("prior_scale", prior_scale)
    reward_range = (0.0, 1.0) if prior == "beta" else (-np.inf, np.inf)

    def init(key):
        del key
        return arm_stats.init(n)

    def sample(state, key):
        if prior == "beta":
            a = 1.0 + state.sums
            b = 1.0 + state.counts - state.sums
            return sampling.beta(key, a, b)
        scale = v / jnp.sqrt(state.counts + 1.0)
        return state.sums / (state.counts + 1.0) + scale * jax.random.normal(key, (n,))

    def select(state, inp, key):
        sample_key, tie_key = jax.random.split(key)
        theta = sample(state, sample_key)
        return Decision(ops.masked_top_k(theta, inp.available, k, tie_key)), state

    def update(state, decision, feedback):
        del decision
        validation.check_feedback("thompson", feedback, *reward_range)
        return arm_stats.update(state, feedback)

    return Selector(init=init, select=select, update=update)
