r"""Contextual combinatorial MAB scheduling per edge server (Chen, Zhang, Wang and Wang, 2025).

"MAB-Based Online Client Scheduling for Decentralized Federated Learning in the IoT",
Entropy 27(4):439, Secs. 5-6. Each edge server is a player whose arms are the clients
of its cell; it schedules N of them per round to minimise the round delay.

The context space [0, 1]^D is cut into a uniform grid of G^D cells (Sec. 5.1). For each
client and grid cell the policy keeps a counter C_k^t(g) and the sample mean of the
delays observed there, the estimator of eqs. (15) and (23). In round t, server s
explores when one of its clients is under-explored in its current grid cell, eq. (16),

.. math:: \mathcal{E}_{s,t} = \{k \in \mathcal{K}_s : C_k^t(g_k^t) < E(t)\},

scheduling N random members of :math:`\mathcal{E}_{s,t}` when there are more than N,
else all of them and the remaining slots by smallest estimated delay; otherwise it
exploits, scheduling its N clients of smallest estimated delay, which solves (17)
exactly. Ties are broken uniformly at random. Servers decide independently, so in one
round some may explore while others exploit.

Parameters (Sec. 6.2): :math:`E(t) = t^{2\alpha/(3\alpha+D)} \ln t` and
:math:`G_T = \lceil T^{1/(3\alpha+D)} \rceil`, from the regret bound of Theorem 1.

Two departures from the printed design, both from the implementation spec:

- The threshold is :math:`\max(1, c_E\, t^{z} \ln t)`. The floor is needed because
  E(1) = 0 would let round 1 exploit estimators that have no observation (spec A2); it
  makes every never-observed (client, grid cell) pair under-explored.
- The scale :math:`c_E` (`exploration_scale`). With the literal :math:`c_E = 1`, alpha = 1,
  D = 2 and T = 2000, G_T = 5 and E(2000) = 159, while a cell has only N T = 4000
  slots for 6 clients x 25 grid cells (about 27 each): exploration never ends and the
  policy is random selection (spec A1). The default :math:`c_E = 0.01` lets exploration
  end after a few observations per pair; `exploration_scale=1.0` (registered as
  `dfl_ccmab_literal`) is the paper's literal design.

Clients are laid out as in `fedjax_sel.envs.dfl_delay`: client k belongs to server
`k // (K / S)`, or, with `cell_sizes`, server s holds the K_s clients after the first
K_1 + ... + K_{s-1} (cells as rows of a padded array; a cell smaller than N schedules
all its clients). The policy observes the capped delays `Feedback.latency` of its
scheduled clients (semi-bandit feedback, Sec. 5.1).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp

from fedjax_sel import ops, validation
from fedjax_sel.types import Decision, Selector


class CCMABState(NamedTuple):
    """Per-client, per-grid-cell delay statistics.

    Attributes:
      counts: f32[K, G^D], C_k^t(g), observations of client k in grid cell g.
      sums: f32[K, G^D], sum of those observed delays (s); the mean is eq. (15).
      grid_cell: int32[K], g_k^t of the round being played, set by `select`.
      exploration_rounds: f32[S], rounds in which each server explored (diagnostic).
    """

    counts: chex.Array
    sums: chex.Array
    grid_cell: chex.Array
    exploration_rounds: chex.Array


def grid_size(horizon: int, alpha: float = 1.0, context_dim: int = 2) -> int:
    r"""G_T = ceil(T^{1/(3 alpha + D)}) (Sec. 6.2), exactly at perfect powers.

    Computed as the least integer G >= 1 with G^{3 alpha + D} >= T, so that e.g.
    T = 32, alpha = 1, D = 2 gives 2, not the 3 that floating-point rounding of
    32^{0.2} could give.
    """
    horizon = validation.positive_int("horizon", horizon)
    alpha = validation.positive_float("alpha", alpha)
    context_dim = validation.positive_int("context_dim", context_dim)
    power = 3.0 * alpha + context_dim
    g = max(1, math.ceil(horizon ** (1.0 / power)))
    while g > 1 and (g - 1) ** power >= horizon:
        g -= 1
    while g**power < horizon:
        g += 1
    return g


def exploration_threshold(
    t: chex.Array, alpha: float = 1.0, context_dim: int = 2, scale: float = 1.0
) -> chex.Array:
    r"""max(1, c_E t^{2 alpha/(3 alpha + D)} ln t), the threshold E(t) of Sec. 6.2.

    Args:
      t: the round (>= 1), scalar or array.
      alpha: Hoelder exponent of Assumption 2 (21), > 0.
      context_dim: D >= 1.
      scale: c_E > 0; 1 is the paper's E(t).

    Returns:
      f32 array shaped like `t`.
    """
    t = jnp.asarray(t, jnp.float32)
    z = 2.0 * alpha / (3.0 * alpha + context_dim)
    return jnp.maximum(1.0, scale * t**z * jnp.log(t))


def grid_index(context: chex.Array, grid: int) -> chex.Array:
    """int32[K]: flat grid cell of each context, sum_i g_i G^{D-1-i} (Sec. 5.1).

    Each dimension of [0, 1] is cut into `grid` equal parts; coordinate i is
    g_i = min(floor(x_i G), G - 1), so x_i = 1 falls in the last part. A coordinate
    within a relative 1e-6 below a part's lower edge counts in that part: the
    environment's contexts I / I_max and D / D_max that lie on an edge come out of XLA
    one rounding below it (a division by a constant is a product with its reciprocal:
    1111 / 3333 gives 0.33333331, 1/3 rounded is 0.33333334), and a ratio of integers up
    to 10^5 that is not on an edge lies farther from it than that.

    Args:
      context: f32[K, D] in [0, 1].
      grid: G >= 1.
    """
    scaled = context * grid * jnp.float32(1.0 + 1e-6)
    coords = jnp.clip(jnp.floor(scaled).astype(jnp.int32), 0, grid - 1)
    weights = grid ** jnp.arange(context.shape[-1] - 1, -1, -1, dtype=jnp.int32)
    return jnp.sum(coords * weights, axis=-1)


def dfl_ccmab(
    num_clients: int,
    num_selected: int,
    num_servers: int = 3,
    horizon: int = 2000,
    alpha: float = 1.0,
    context_dim: int = 2,
    exploration_scale: float = 0.01,
    grid: int | None = None,
    cell_sizes: tuple[int, ...] | None = None,
) -> Selector:
    """CC-MAB delay estimation and scheduling, run independently by every edge server.

    `update` refuses an observed delay (`Feedback.latency`) that is negative, NaN or
    infinite, at once when run eagerly, under `jax.jit` when wrapped in
    `jax.experimental.checkify.checkify` (`validation.check_feedback`).

    Args:
      num_clients: K, a multiple of `num_servers` unless `cell_sizes` is given.
      num_selected: N, clients scheduled per server, 1 <= N <= K / S (or the largest
        cell).
      num_servers: S >= 1.
      horizon: T >= 1, the number of rounds that sets G_T.
      alpha: Hoelder exponent of Assumption 2 (21), > 0; the paper gives no value,
        1 (Lipschitz) is the spec's reading.
      context_dim: D >= 1, the context's dimension (2 in the paper).
      exploration_scale: c_E > 0 in E(t) = max(1, c_E t^z ln t); 1 is the literal
        design (see the module docstring).
      grid: G >= 1 parts per context dimension; None for G_T.
      cell_sizes: K_s of each cell, S integers >= 1 summing to K; None for equal cells.

    Returns:
      A `Selector` whose state is a `CCMABState` and whose decisions carry each
      scheduled client's server in `assignment`.
    """
    s, n, sizes, server = validation.cells(num_clients, num_servers, num_selected, cell_sizes)
    k_total = server.size
    alpha = validation.positive_float("alpha", alpha)
    d = validation.positive_int("context_dim", context_dim)
    scale = validation.positive_float("exploration_scale", exploration_scale)
    g = grid_size(horizon, alpha, d) if grid is None else validation.positive_int("grid", grid)
    num_cells = g**d

    def init(key):
        del key
        zeros = jnp.zeros((k_total, num_cells), jnp.float32)
        return CCMABState(
            counts=zeros,
            sums=zeros,
            grid_cell=jnp.zeros((k_total,), jnp.int32),
            exploration_rounds=jnp.zeros((s,), jnp.float32),
        )

    def select(state, inp, key):
        cell = grid_index(validation.require(inp.context, "context", policy="dfl_ccmab"), g)
        count = jnp.take_along_axis(state.counts, cell[:, None], 1)[:, 0]
        total = jnp.take_along_axis(state.sums, cell[:, None], 1)[:, 0]
        estimate = total / jnp.maximum(count, 1.0)  # (15)
        under = (count < exploration_threshold(inp.t, alpha, d, scale)) & inp.available  # (16)
        # Under-explored clients tie at +inf: all of them when they fit, else N at random;
        # free slots go to the smallest estimated delays, solving (17).
        score = jnp.where(under, jnp.inf, -estimate)
        selected = ops.grouped_masked_top_k(score, inp.available, n, key, s, sizes)
        exploring = jax.ops.segment_max(under, server, num_segments=s)
        state = state._replace(
            grid_cell=cell,
            exploration_rounds=state.exploration_rounds + exploring.astype(jnp.float32),
        )
        return Decision(selected=selected, assignment=jnp.where(selected, server, -1)), state

    def update(state, decision, feedback):
        del decision
        validation.check_feedback("dfl_ccmab", feedback, 0.0, field="latency")
        hit = (jnp.arange(num_cells) == state.grid_cell[:, None]) & feedback.observed[:, None]
        delay = jnp.where(feedback.observed, feedback.latency, 0.0)
        return state._replace(
            counts=state.counts + hit,
            sums=state.sums + jnp.where(hit, delay[:, None], 0.0),
        )

    return Selector(init=init, select=select, update=update)
