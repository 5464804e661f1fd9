"""Selection ops (placeholder re-export while the package is built)."""

from bandits.kernels import *  # noqa: F403
from bandits.kernels import count_true, gumbel_top_k, masked_top_k, top_k_mask, uniform_subset  # noqa: F401
