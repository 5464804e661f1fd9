"""Selection ops: the fixed-shape building blocks of every policy and oracle.

Depends on jax and numpy only. Each op acts on one trial's arrays (`f32[N]`); `jax.vmap`
adds trial or edge-server axes.

- `masked_top_k`, `uniform_subset`, `gumbel_top_k`, `top_k_mask`, `kth_largest_key`,
  `count_true`, `true_indices`, `nth_true`, `random_true` (`selection`): each defined
  portably in a few lines (`selection.portable_*`, `order.kth_largest_key`), and run by a
  sort-free backend on CPU (`_xla_cpu`), chosen by platform when the program is lowered.
  The cohort size k is a Python int or a traced int32[].
- `grouped_masked_top_k`, `grouped_uniform_subset`, `grouped_top_k_mask`: k per
  contiguous group, equal or of given sizes; `budgeted_top_k`, `grouped_budgeted_top_k`:
  clients in score order within a budget, per group (`grouped`).
- `assignment`: clients to edge servers under a knapsack budget per server
  (`max_cardinality`, `greedy`, `knapsack`), one server per client.
- `sherman_morrison_update` (`linalg`), `prefix_max_cost_top_k` (`latency`),
  `order_key` (`order`: the f32 total order as u32 that every op ranks by),
  `where_needed` (`batching`: a conditional that stays one under `jax.vmap`).
- `sampling.gamma`, `sampling.beta`: exact Gamma and Beta draws for shapes >= 1,
  a first attempt of a rejection sampler (Marsaglia and Tsang's; Cheng's for Beta) in
  bulk over the whole batch, the rejected ones' further attempts in a short buffer (no
  per-element rejection loop);
  `sampling.uniform_at`, `sampling.normal_at`: JAX's uniform and normal draws over N,
  at a few positions only;
- `places.take`, `places.add`, `places.put`: per-client arrays read and updated at a
  cohort's places (`Decision.indices`), O(k).
"""

from fedjax_sel.ops import assignment, places, sampling
from fedjax_sel.ops.batching import where_needed
from fedjax_sel.ops.grouped import (
    budgeted_top_k,
    grouped_budgeted_top_k,
    grouped_masked_top_k,
    grouped_top_k_mask,
    grouped_uniform_subset,
)
from fedjax_sel.ops.latency import prefix_max_cost_top_k
from fedjax_sel.ops.linalg import sherman_morrison_update
from fedjax_sel.ops.order import order_key
from fedjax_sel.ops.selection import (
    count_true,
    gumbel_top_k,
    kth_largest_key,
    masked_top_k,
    nth_true,
    random_true,
    top_k_mask,
    true_indices,
    uniform_subset,
)

__all__ = [
    "assignment",
    "budgeted_top_k",
    "count_true",
    "grouped_budgeted_top_k",
    "grouped_masked_top_k",
    "grouped_top_k_mask",
    "grouped_uniform_subset",
    "gumbel_top_k",
    "kth_largest_key",
    "masked_top_k",
    "nth_true",
    "order_key",
    "places",
    "prefix_max_cost_top_k",
    "random_true",
    "sampling",
    "sherman_morrison_update",
    "top_k_mask",
    "true_indices",
    "uniform_subset",
    "where_needed",
]
