r"""BP-UCB (Tong et al., Sec. V-A, Alg. 2): per-client UCB with a belief-propagation tilt.

The arms are the clients. Client n's reward is its own opinion r_{t,n}
(`Feedback.reward`), used when it is selected and observed (eq. 18); after every slot
all N clients' opinions (`Feedback.info["opinions"]`, read by the "ising" mode only)
feed belief propagation over the client graph, and the K clients of largest index (17),

.. math:: \Psi_{t,n} = \bar r_{t,n} + b_{t,n}(1) / N + \mu \sqrt{\ln t / \Pi_{t,n}},

are selected (gossip agrees on the exact global ranking on a connected graph, spec A7;
ties within `tolerance` broken uniformly at random, A10). The cold start is Quick-Init's
random partition (spec A19); beliefs computed from slot t's opinions enter slot t+1's
index (A20).

Belief propagation (eqs. 4-7, App. B). As printed, the local function (5) and the
compatibility (7) do not depend on the binary state, so every normalised belief is 1/2
(spec A1): `belief_mode="literal"`. The default, `"ising"` (spec §3.4), is the binary
pairwise MRF of App. B (after Mooij and Kappen): evidence phi_n(1) = p_n = clip(r_n^2),
phi_n(0) = 1 - p_n, i.e. a local field theta_n = 1/2 ln(p_n / (1 - p_n)),
and couplings J_in = -C d_in^beta on the graph's edges (C = -30 dB = 1e-3, d in km,
beta = 3.7), run as synchronous log-likelihood-ratio messages (eq. 28) for a fixed
number of iterations (spec §8: `vmap` does not wait on the slowest trial) or, with
`bp_tolerance`, until no message moves by more than it (spec §3.4), optionally
damped, warm-started from the previous slot's messages. kappa_BP (Thm. 2, eq. 34, with
C restored) bounds the contraction: below 1, the fixed point is unique.
"""

from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from bandits.super_arms import cold_start_groups, num_groups, opinions
from fedjax_sel import ops, validation
from fedjax_sel.types import Decision, Selector

BELIEF_MODES = ("ising", "literal")
PAPER_COUPLING = 1e-3  # C = -30 dB
PAPER_EXPONENT = 3.7  # beta


def client_graph(
    num_clients: int, seed: int = 0, neighbors: int = 3, side_km: float = 1.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tong et al.'s client graph (spec A6): N clients uniform in a square of `side_km`,
    each linked to its `neighbors` nearest (symmetrised), joined with the Euclidean
    minimum spanning tree so that the graph is connected.

    Returns:
      (positions f64[N, 2] km, adjacency bool[N, N], distance f64[N, N] km).
    """
    n = validation.positive_int("num_clients", num_clients)
    m = validation.int_in_range("neighbors", neighbors, 0, max(n - 1, 0))
    rng = np.random.default_rng(seed)
    positions = rng.uniform(0.0, side_km, (n, 2))
    distance = np.linalg.norm(positions[:, None] - positions[None], axis=-1)
    adjacency = np.zeros((n, n), bool)
    nearest = np.argsort(distance + np.diag(np.full(n, np.inf)), axis=1)[:, :m]
    adjacency[np.repeat(np.arange(n), m), nearest.ravel()] = True
    from scipy.sparse import csgraph  # SciPy is loaded only where a graph is built.

    adjacency |= csgraph.minimum_spanning_tree(distance).toarray() > 0
    adjacency |= adjacency.T
    np.fill_diagonal(adjacency, False)
    return positions, adjacency, distance


def couplings(
    adjacency: np.ndarray,
    distance: np.ndarray,
    scale: float = PAPER_COUPLING,
    exponent: float = PAPER_EXPONENT,
    ferromagnetic: bool = False,
) -> np.ndarray:
    """f64[N, N], J_in = -C d_in^beta on the edges (App. B; +C d^beta if `ferromagnetic`)."""
    sign = 1.0 if ferromagnetic else -1.0
    return np.where(adjacency, sign * scale * np.asarray(distance) ** exponent, 0.0)


def kappa_bp(adjacency: np.ndarray, coupling: np.ndarray) -> float:
    """kappa_BP = max_l max_{k in N(l)} sum_{i in N(l) \\ k} tanh|J_il| (Thm. 2, eq. 34)."""
    t = np.where(adjacency, np.tanh(np.abs(coupling)), 0.0)
    smallest = np.where(adjacency, t, np.inf).min(axis=0)
    per_node = t.sum(axis=0) - np.where(np.isfinite(smallest), smallest, 0.0)
    return float(per_node.max())


def is_connected(adjacency: np.ndarray) -> bool:
    """Whether the undirected graph bool[N, N] is connected."""
    from scipy.sparse import csgraph

    return csgraph.connected_components(adjacency, directed=False)[0] == 1


def ising_beliefs(
    opinions: chex.Array,
    messages: chex.Array,
    adjacency: chex.Array,
    coupling: chex.Array,
    iterations: int,
    damping: float = 0.0,
    eps: float = 1e-6,
    tolerance: float = 0.0,
) -> tuple[chex.Array, chex.Array]:
    """Belief propagation on the Ising form of eqs. (4)-(7) (spec §3.4).

    With `tolerance` > 0 the sweeps stop after the first that moves no message by more
    than it (the paper's "until they converge", spec §3.4), at most `iterations`; under
    `jax.vmap` the batch sweeps until every member has stopped, a stopped member's
    messages unchanged, so that each member takes the sweeps it takes alone.

    Args:
      opinions: f32[N], r_{t,n}; the evidence is p_n = clip(r_n^2, eps, 1 - eps).
      messages: f32[N, N], nu[k, j], the message k -> j (0 off the edges).
      adjacency: bool[N, N], symmetric.
      coupling: f32[N, N], J.
      iterations: synchronous updates (eq. 28), all of them for `tolerance` 0, else the
        most.
      damping: the previous messages' share in each update, in [0, 1).
      eps: the evidence's clip.
      tolerance: the largest move of a message that ends the sweeps, >= 0.

    Returns:
      (f32[N] b_n(1) = sigmoid(2 (theta_n + sum_k nu[k, n])), f32[N, N] messages).
    """
    p = jnp.clip(opinions**2, eps, 1.0 - eps)  # eq. (5) for the "select" state
    field = 0.5 * jnp.log(p / (1.0 - p))
    link = adjacency.astype(messages.dtype)
    slope = jnp.tanh(coupling)

    def sweep(_, nu):
        total = field + jnp.sum(link * nu, axis=0)
        cavity = total[:, None] - nu.T  # h_j without i's message, [j, i]
        fresh = link * jnp.arctanh(slope * jnp.tanh(cavity))
        return (1.0 - damping) * fresh + damping * nu

    if tolerance > 0:

        def moving(carry):
            i, _, moved = carry
            return (i < iterations) & (moved > tolerance)

        def step(carry):
            i, nu, _ = carry
            fresh = sweep(i, nu)
            return i + 1, fresh, jnp.max(jnp.abs(fresh - nu))

        start = (jnp.int32(0), messages, jnp.float32(jnp.inf))
        _, messages, _ = lax.while_loop(moving, step, start)
    else:
        messages = lax.fori_loop(0, iterations, sweep, messages)
    belief = jax.nn.sigmoid(2.0 * (field + jnp.sum(link * messages, axis=0)))  # eq. (4)
    return belief, messages


class BPUCBState(NamedTuple):
    """BP-UCB's state (one trial).

    Attributes:
      t: int32[], the slot being played (set by `select`).
      groups: int32[G, K], the cold-start groups.
      mean: f32[N], r-bar_{t,n}, each client's mean own opinion (eq. 18).
      count: f32[N], Pi_{t,n}, its selections.
      belief: f32[N], b_{t,n}(1) from the last slot's opinions.
      messages: f32[N, N], the BP messages, warm-started slot to slot.
    """

    t: chex.Array
    groups: chex.Array
    mean: chex.Array
    count: chex.Array
    belief: chex.Array
    messages: chex.Array


def bp_ucb(
    num_clients: int,
    num_selected: int,
    exploration: float = 0.01,
    belief_mode: str = "ising",
    adjacency: chex.Array | None = None,
    distance_km: chex.Array | None = None,
    graph_seed: int = 0,
    coupling_scale: float = PAPER_COUPLING,
    path_loss_exponent: float = PAPER_EXPONENT,
    ferromagnetic: bool = False,
    bp_iterations: int = 30,
    bp_tolerance: float = 0.0,
    damping: float = 0.0,
    tolerance: float = 1e-6,
    uneven: str = "error",
) -> Selector:
    """BP-UCB (Tong et al. Alg. 2, index eq. 17) with Quick-Init's cold start.

    A client never observed (unavailable in its cold-start slot) has an infinite index
    until it is: the paper's cold start observes every client, and eq. (17) has no value
    for a client without observations.

    Args:
      num_clients: N >= 2.
      num_selected: K, 1 <= K < N.
      exploration: mu >= 0 of eq. (17) (0.01 in the paper's experiments; Thm. 3 needs
        mu^2 >= 3/2).
      belief_mode: "ising" (spec §3.4, default) or "literal" (eqs. 5-7 as printed: 1/2).
      adjacency: bool[N, N], the client graph (symmetric, connected); None builds
        `client_graph(N, graph_seed)`, whose distances are then used.
      distance_km: f32[N, N] >= 0, d_in in km, with `adjacency`.
      graph_seed: the seed of the default graph.
      coupling_scale: C (linear, > 0), 1e-3 for the paper's -30 dB.
      path_loss_exponent: beta > 0.
      ferromagnetic: J = +C d^beta instead of App. B's -C d^beta.
      bp_iterations: synchronous BP sweeps per slot, >= 1: all of them (spec §8's fixed
        loop) when `bp_tolerance` is 0, else the most.
      bp_tolerance: >= 0; above 0, a slot's sweeps stop after the first that moves no
        message by more than it (spec §3.4's "stop when max |delta nu| < 1e-6"). On the
        default graph (kappa_BP = 2.3e-4) 1e-6 stops after a few sweeps, and the beliefs
        differ from those of 30 sweeps in their last bits only.
      damping: BP damping in [0, 1).
      tolerance: indices within it tie (spec A10), >= 0.
      uneven: when K does not divide N, "error", or "fill" (spec A9).

    Returns:
      A `Selector` whose state is a `BPUCBState`.

    Raises:
      ValueError: on a bad argument or a disconnected graph (gossip cannot rank).
    """
    n = validation.positive_int("num_clients", num_clients)
    k = validation.num_selected(num_selected, n)
    if k == n:
        raise ValueError(f"num_selected must be below num_clients={n} (K < N), got {k}.")
    mu = validation.float_in_range("exploration", exploration, 0.0, float("inf"))
    validation.choice("belief_mode", belief_mode, BELIEF_MODES)
    scale = validation.positive_float("coupling_scale", coupling_scale)
    exponent = validation.positive_float("path_loss_exponent", path_loss_exponent)
    sweeps = validation.positive_int("bp_iterations", bp_iterations)
    bp_tol = validation.float_in_range("bp_tolerance", bp_tolerance, 0.0, float("inf"))
    damp = validation.float_in_range("damping", damping, 0.0, 1.0)
    if damp == 1.0:
        raise ValueError("damping must lie in [0, 1) (1 never updates the messages), got 1.0.")
    tol = validation.float_in_range("tolerance", tolerance, 0.0, float("inf"))
    validation.int_in_range("graph_seed", graph_seed, 0, 2**31 - 1)
    groups_count = num_groups(n, k, uneven)
    if adjacency is None:
        if distance_km is not None:
            raise ValueError(
                "distance_km is used with an adjacency only (the default graph has its own "
                "distances); pass both, or neither."
            )
        _, adjacency, distance = client_graph(n, graph_seed)
    else:
        adjacency = np.asarray(adjacency)
        if adjacency.shape != (n, n) or adjacency.dtype != np.bool_:
            raise ValueError(
                f"adjacency must be bool[{n}, {n}], got {adjacency.dtype}{adjacency.shape}."
            )
        if not np.array_equal(adjacency, adjacency.T) or adjacency.diagonal().any():
            raise ValueError("adjacency must be symmetric with a zero diagonal.")
        if distance_km is None:
            raise ValueError("distance_km is needed with an adjacency (the couplings, eq. 7).")
        distance = validation.array_in_range("distance_km", distance_km, (n, n), 0.0)
    if not is_connected(adjacency):
        raise ValueError(
            "adjacency: the client graph is disconnected; gossip cannot rank the indices "
            "(Sec. V-A) and BP-UCB needs a connected graph."
        )
    coupling = jnp.asarray(
        couplings(adjacency, distance, scale, exponent, ferromagnetic), jnp.float32
    )
    link = jnp.asarray(adjacency)

    def init(key):
        return BPUCBState(
            t=jnp.int32(0),
            groups=cold_start_groups(key, n, k),
            mean=jnp.zeros((n,), jnp.float32),
            count=jnp.zeros((n,), jnp.float32),
            belief=jnp.full((n,), 0.5, jnp.float32),
            messages=jnp.zeros((n, n), jnp.float32),
        )

    def select(state, inp, key):
        t = inp.t.astype(jnp.int32)
        log_t = jnp.log(jnp.maximum(t, 1).astype(jnp.float32))
        count = jnp.maximum(state.count, 1.0)
        index = state.mean + state.belief / n + mu * jnp.sqrt(log_t / count)  # eq. (17)
        # A client the cold start missed (unavailable in its slot) has no mean yet: it
        # ranks first, as an unplayed arm of UCB does, not as one reward of 0.
        index = jnp.where(state.count > 0, index, jnp.inf)
        # Ties within the tolerance share a value, then a uniformly random order (A10).
        index = jnp.floor(index / tol) if tol > 0 else index
        chosen = ops.masked_top_k(index, inp.available, k, key)
        group = state.groups[jnp.clip(t - 1, 0, groups_count - 1)]
        cold = jnp.zeros((n,), bool).at[group].set(True) & inp.available
        return Decision(jnp.where(t <= groups_count, cold, chosen)), state._replace(t=t)

    def update(state, decision, feedback):
        # A selected client's reward is its own opinion (eq. 18), `Feedback.reward`.
        selected = decision.selected & feedback.observed
        count = state.count + selected
        step = (feedback.reward - state.mean) / jnp.maximum(count, 1.0)
        mean = jnp.where(selected, state.mean + step, state.mean)
        if belief_mode == "literal":
            belief, messages = state.belief, state.messages
        else:
            everyone = opinions(feedback, "bp_ucb")  # every client's opinion feeds BP
            belief, messages = ising_beliefs(
                everyone, state.messages, link, coupling, sweeps, damp, tolerance=bp_tol
            )
        return state._replace(mean=mean, count=count, belief=belief, messages=messages)

    return Selector(init=init, select=select, update=update)
