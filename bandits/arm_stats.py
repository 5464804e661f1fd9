"""Per-client empirical statistics shared by the index policies (eqs. 16-17 of Xia et al.)."""

from __future__ import annotations

from typing import NamedTuple

import chex
import jax.numpy as jnp

from fedjax_sel.types import Feedback


class ArmStats(NamedTuple):
    """Observation counts and reward sums of each client.

    Attributes:
      counts: f32[N], times each client's reward was observed (`T_i`).
      sums: f32[N], sum of its observed rewards.
    """

    counts: chex.Array
    sums: chex.Array


def init(num_clients: int) -> ArmStats:
    """All-zero statistics for N clients."""
    zeros = jnp.zeros((num_clients,), jnp.float32)
    return ArmStats(counts=zeros, sums=zeros)


def update(stats: ArmStats, feedback: Feedback) -> ArmStats:
    """Adds the observed clients' rewards; unobserved entries are ignored."""
    obs = feedback.observed
    return ArmStats(
        counts=stats.counts + obs.astype(jnp.float32),
        sums=stats.sums + jnp.where(obs, feedback.reward, 0.0),
    )


def means(stats: ArmStats) -> chex.Array:
    """f32[N], empirical means, 0 for clients never observed."""
    return jnp.where(stats.counts > 0, stats.sums / jnp.maximum(stats.counts, 1.0), 0.0)
