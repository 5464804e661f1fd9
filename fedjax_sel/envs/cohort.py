"""What a cohort smaller than the environment could schedule is worth.

The runner accepts any decision that schedules only available clients, at most
`Env.num_selected` of them (and passes `Env.feasible`). An environment whose value falls
with more clients (a bottleneck, a round time) would otherwise rate a short or empty
cohort above its oracle, which schedules min(k, |A(t)|); each environment therefore
charges the slots a decision leaves empty, and documents the charge, so that no decision
the runner accepts has negative pseudo-regret.
"""

from __future__ import annotations

import chex
import jax.numpy as jnp

from fedjax_sel.ops import count_true


def missing(chosen: chex.Array, available: chex.Array, num_selected: int) -> chex.Array:
    """int32[]: how many of the min(k, |A|) slots a decision could fill it leaves empty,
    of bool[N] availabilities and the number of clients the decision selects, `chosen`
    (int32[], `ops.count_true` of its selections); k = `num_selected`."""
    if jnp.ndim(chosen):
        raise ValueError(
            f"chosen must be the number of clients a decision selects, a scalar "
            f"(ops.count_true of its selections), got shape {jnp.shape(chosen)}."
        )
    fillable = jnp.minimum(count_true(available), num_selected)
    return jnp.maximum(fillable - chosen, 0)
