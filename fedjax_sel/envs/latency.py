"""Latency models shared by the wireless environments.

The 3GPP macro-cell path loss that Xia et al. (§V.A) and Chen et al. (Sec. 7.1) both use.
The links' Shannon-rate times stay in each environment: each paper's time is computed in
its own order of operations (`bits / (B log2(1 + snr))` for Xia, `(bits / B) / log2(...)`
for Chen), and sharing one would change the last bits of one paper's recorded numbers.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def path_loss_db(distance_km):
    """PL[dB] = 128.1 + 37.6 log10(d), d in km.

    Args:
      distance_km: distances in km: a JAX array (traced too), or anything NumPy takes.

    Returns:
      The path loss in dB, of the same shape: a JAX array for JAX input, NumPy (f64 for
      Python floats) otherwise.
    """
    xp = jnp if isinstance(distance_km, jax.Array) else np
    return 128.1 + 37.6 * xp.log10(distance_km)
