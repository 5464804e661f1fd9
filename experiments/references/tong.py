r"""NumPy references of Tong et al.'s Quick-Init UCB and BP-UCB, for speed comparisons.

The setting is the bandit-only headline one of `experiments.reproductions.tong` at its
defaults (setting "calibrated", Figs. 6-9): the warm-start opinion surrogate of
`envs.opinion_surrogate` (spec §8.4 and A12), N = 20 clients, K = 5 per slot, theta_n = 1,
clients 1-5 IID (quality 1) and the others non-IID (quality U(0.2, 0.6), drawn per
trial), the data sizes of spec A14, accuracy 0.60 at quality 0 and 0.88 at quality 1,
rate 0.13. Slot t's selected set S_t sets the model quality (eq. 2's FedAvg weights;
every update arrives),

.. math:: \bar q_t = \sum_{n \in S_t} |D_n| q_n / \sum_{n \in S_t} |D_n|,

the accuracy moves towards the set's target, acc_t = acc_{t-1} + rho (acc_lo +
(acc_hi - acc_lo) q̄_t - acc_{t-1}) + sigma_g eps_t from acc_0 = acc_lo, and every client
reports its opinion r_{t,n} = clip(acc_t + sigma_o eps_{t,n}, 0, 1).

- Quick-Init UCB (Alg. 1, `bandits.quick_init_ucb`) in the dense form the reproduction
  runs at N = 20: all C(20, 5) = 15,504 super-arms' sums and counts in memory. A random
  partition into N/K = 4 cold-start groups played in slots 1-4, each client valued at
  its group's reward (eq. 8), every super-arm pseudo-initialised with the mean of its
  members' values and a count of 1 (spec A8), then the arm of largest index (11),
  mu = 1, ties within 1e-6 uniformly at random (spec A10).
- BP-UCB (Alg. 2, `bandits.bp_ucb`) at its defaults: the same cold start (spec A19),
  then the K clients of largest index (17), mu = 0.01, with the belief b_{t,n}(1) of
  Ising belief propagation (spec §3.4: evidence r^2, couplings J = -C d^beta on the
  graph of 3 nearest neighbours plus the minimum spanning tree, seed 0) from the last
  slot's opinions (A20), ties within 1e-6 uniformly at random. The messages are
  warm-started slot to slot; the synchronous sweeps of eq. (28) stop when no message
  moves by more than 1e-6, or after 30 sweeps, in the jitted policy too (`bp_tolerance`;
  its default runs all 30, the same selections on this graph, kappa_BP being 2.3e-4).

Each reference is one trial, a Python loop over slots, every slot vectorised over the
super-arms or the clients with NumPy; a trial of T = 200 slots (Figs. 7 and 9) takes
tens of milliseconds, so the reproduction's sizes are kept. It agrees with the jitted
policy in distribution, not draw for draw (the random streams differ);
`tests/test_tong_reference.py` checks the agreement of every metric. The metrics are
those of `experiments.tong_trials.run_trials` reduced per trial: the final and the
slot-averaged accuracy (Figs. 7 and 9, spec A25), the cumulative set reward (eq. 8),
the cumulative pseudo-regret against the optimal set {1..5} (spec A24; in the
warm-start form the one-step regret, rho (acc_hi - acc_lo) (q̄* - q̄_t)) and the
selections of an IID client (Fig. 6).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

import bandits
from bandits.belief_propagation import PAPER_COUPLING, PAPER_EXPONENT
from experiments.reproductions.tong import RATE, K
from experiments.tong_trials import run_trials
from fedjax_sel import envs
from fedjax_sel.envs.opinion_surrogate import paper_sizes

NUM_CLIENTS_QUICK_INIT_UCB = 20
NUM_CLIENTS_BP_UCB = 20
NUM_IID = 5  # clients 1-5, quality 1
QUALITY_RANGE = (0.2, 0.6)  # the non-IID clients' qualities
ACCURACY_RANGE = (0.60, 0.88)  # accuracy at quality 0 and 1
NOISE = 0.01  # sigma_g
OPINION_NOISE = 0.01  # sigma_o
QUICK_INIT_EXPLORATION = 1.0  # mu of eq. (11)
BP_UCB_EXPLORATION = 0.01  # mu of eq. (17)
TOLERANCE = 1e-6  # indices within it tie (spec A10)
BP_SWEEPS = 30  # the most synchronous BP sweeps per slot
BP_TOLERANCE = 1e-6  # a sweep moving no message by more than it ends BP
EVIDENCE_CLIP = 1e-6  # p_n = clip(r_n^2, eps, 1 - eps)
GRAPH_SEED = 0  # the reproduction's default (its seed)
GRAPH_NEIGHBORS = 3


class Policy(NamedTuple):
    """A reference policy for one trial, its state in mutable NumPy arrays.

    Attributes:
      select: `(t, rng) -> int64[K]`, the clients of slot t (1-based).
      update: `(selected int64[K], opinions f64[N]) -> None`, records slot t's opinions.
    """

    select: Callable[[int, np.random.Generator], np.ndarray]
    update: Callable[[np.ndarray, np.ndarray], None]


def cold_start_groups(rng: np.random.Generator, num_clients: int, num_selected: int) -> np.ndarray:
    """int64[N/K, K], a uniformly random partition of the clients (Alg. 1, spec A19)."""
    return rng.permutation(num_clients).reshape(-1, num_selected)


@functools.lru_cache(maxsize=4)
def super_arms(num_clients: int, num_selected: int) -> np.ndarray:
    """int64[C(N, K), K], every K-subset of the clients, lexicographic."""
    return np.asarray(list(itertools.combinations(range(num_clients), num_selected)))


def quick_init_ucb(
    groups: np.ndarray,
    exploration: float = QUICK_INIT_EXPLORATION,
    tolerance: float = TOLERANCE,
) -> Policy:
    """Quick-Init UCB (Alg. 1), dense: every super-arm's sum and count.

    Args:
      groups: int[G, K], the cold-start groups (a partition of the N clients).
      exploration: mu of eq. (11).
      tolerance: indices within it of the maximum tie.
    """
    num_groups, k = groups.shape
    members = super_arms(groups.size, k)
    value = np.zeros(groups.size)  # each client's cold-start reward
    sums = np.zeros(members.shape[0])
    counts = np.ones(members.shape[0])
    played = -1  # the arm of the UCB slot, -1 in a cold-start slot
    valued = 0  # the cold-start groups valued so far

    def select(t, rng):
        nonlocal played
        if t <= num_groups:
            return groups[t - 1]
        index = sums / counts + exploration * np.sqrt(np.log(t) / counts)  # eq. (11)
        tied = np.flatnonzero(index >= index.max() - tolerance)
        played = tied[rng.integers(tied.size)]
        return members[played]

    def update(selected, opinions):
        nonlocal valued
        reward = opinions.mean()  # eq. (8)
        if played < 0:
            value[selected] = reward
            valued += 1
            if valued == num_groups:
                # Alg. 1 line 3 (spec A8): an arm is worth its members' mean, count 1.
                sums[:] = value[members].mean(axis=1)
        else:
            sums[played] += reward
            counts[played] += 1.0

    return Policy(select, update)


def client_graph(
    num_clients: int, seed: int = GRAPH_SEED, neighbors: int = GRAPH_NEIGHBORS
) -> tuple[np.ndarray, np.ndarray]:
    """Tong et al.'s client graph (spec A6): N clients uniform in the 1 km square, each
    linked to its `neighbors` nearest, joined with the Euclidean minimum spanning tree.

    Returns:
      (adjacency bool[N, N], distance f64[N, N] km).
    """
    from scipy.sparse import csgraph

    positions = np.random.default_rng(seed).uniform(0.0, 1.0, (num_clients, 2))
    distance = np.linalg.norm(positions[:, None] - positions[None], axis=-1)
    nearest = np.argsort(distance + np.diag(np.full(num_clients, np.inf)), axis=1)[:, :neighbors]
    adjacency = np.zeros((num_clients, num_clients), bool)
    adjacency[np.repeat(np.arange(num_clients), neighbors), nearest.ravel()] = True
    adjacency |= csgraph.minimum_spanning_tree(distance).toarray() > 0
    adjacency |= adjacency.T
    np.fill_diagonal(adjacency, False)
    return adjacency, distance


def ising_beliefs(
    opinions: np.ndarray, messages: np.ndarray, coupling: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Belief propagation on the Ising form of eqs. (4)-(7) (spec §3.4).

    Args:
      opinions: f64[N], r_{t,n}; the evidence is p_n = clip(r_n^2, eps, 1 - eps) (eq. 5).
      messages: f64[N, N], nu[k, j], the message k -> j (0 off the edges).
      coupling: f64[N, N], J (0 off the edges, so that no message flows there).

    Returns:
      (f64[N] b_n(1) = sigmoid(2 (theta_n + sum_k nu[k, n])) (eq. 4), f64[N, N] messages).
    """
    p = np.clip(opinions**2, EVIDENCE_CLIP, 1.0 - EVIDENCE_CLIP)
    field = 0.5 * np.log(p / (1.0 - p))
    slope = np.tanh(coupling)
    for _ in range(BP_SWEEPS):
        cavity = (field + messages.sum(axis=0))[:, None] - messages.T  # h_j less i's message
        fresh = np.arctanh(slope * np.tanh(cavity))  # eq. (28)
        moved = np.abs(fresh - messages).max()
        messages = fresh
        if moved <= BP_TOLERANCE:
            break
    return 1.0 / (1.0 + np.exp(-2.0 * (field + messages.sum(axis=0)))), messages


def top_k_uniform_ties(score: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """The k largest entries of `score` (f64[N]), ties at the k-th place uniformly."""
    n = score.shape[0]
    top = np.argpartition(score, n - k)[n - k :]
    kth = score[top].min()
    above = np.flatnonzero(score > kth)
    tied = np.flatnonzero(score == kth)
    if above.size + tied.size == k:
        return top
    return np.concatenate([above, rng.choice(tied, k - above.size, replace=False)])


def bp_ucb(
    groups: np.ndarray,
    coupling: np.ndarray,
    exploration: float = BP_UCB_EXPLORATION,
    tolerance: float = TOLERANCE,
) -> Policy:
    """BP-UCB (Alg. 2): per-client index (17) with the Ising belief, Quick-Init's cold start.

    Args:
      groups: int[G, K], the cold-start groups (a partition of the N clients).
      coupling: f64[N, N], J = -C d^beta on the graph's edges, 0 elsewhere.
      exploration: mu of eq. (17).
      tolerance: indices within it tie (the index is floored to multiples of it).
    """
    num_groups, k = groups.shape
    n = groups.size
    mean, count = np.zeros(n), np.zeros(n)
    belief = np.full(n, 0.5)
    messages = np.zeros((n, n))

    def select(t, rng):
        if t <= num_groups:
            return groups[t - 1]
        index = mean + belief / n + exploration * np.sqrt(np.log(t) / count)  # eq. (17)
        return top_k_uniform_ties(np.floor(index / tolerance), k, rng)

    def update(selected, opinions):
        nonlocal belief, messages
        count[selected] += 1.0
        mean[selected] += (opinions[selected] - mean[selected]) / count[selected]  # eq. (18)
        belief, messages = ising_beliefs(opinions, messages, coupling)  # used at t + 1 (A20)

    return Policy(select, update)


@functools.lru_cache(maxsize=1)
def paper_coupling() -> np.ndarray:
    """f64[N, N], the BP-UCB couplings of the default graph: J = -C d^beta (App. B)."""
    adjacency, distance = client_graph(NUM_CLIENTS_BP_UCB)
    return np.where(adjacency, -PAPER_COUPLING * distance**PAPER_EXPONENT, 0.0)


def _trial(rng: np.random.Generator, num_rounds: int, n: int, make_policy) -> dict[str, float]:
    """One trial of `make_policy(groups)` on the warm-start surrogate (module docstring)."""
    acc_low, acc_high = ACCURACY_RANGE
    sizes = paper_sizes(n).astype(np.float64)
    quality = np.where(np.arange(n) < NUM_IID, 1.0, rng.uniform(*QUALITY_RANGE, n))
    best = quality[:K] @ sizes[:K] / sizes[:K].sum()  # the optimal set {1..5} (spec A24)
    select, update = make_policy(cold_start_groups(rng, n, K))
    accuracy, accuracy_sum, reward, gap = acc_low, 0.0, 0.0, 0.0
    counts = np.zeros(n)
    for t in range(1, num_rounds + 1):
        chosen = select(t, rng)
        q_bar = quality[chosen] @ sizes[chosen] / sizes[chosen].sum()  # eq. (2)'s weights
        target = acc_low + (acc_high - acc_low) * q_bar
        accuracy += RATE * (target - accuracy) + NOISE * rng.standard_normal()
        opinions = np.clip(accuracy + OPINION_NOISE * rng.standard_normal(n), 0.0, 1.0)
        update(chosen, opinions)
        counts[chosen] += 1.0
        accuracy_sum += accuracy
        reward += opinions.mean()  # eq. (8)
        gap += best - q_bar
    return {
        "final_accuracy": float(accuracy),
        "average_accuracy": accuracy_sum / num_rounds,
        "cumulative_reward": float(reward),
        "cumulative_regret": float(RATE * (acc_high - acc_low) * gap),
        "iid_selections": float(counts[:NUM_IID].mean()),
    }


def numpy_trial_quick_init_ucb(rng: np.random.Generator, num_rounds: int) -> dict[str, float]:
    """One trial of Quick-Init UCB (dense) on the headline surrogate, in plain NumPy."""
    return _trial(rng, num_rounds, NUM_CLIENTS_QUICK_INIT_UCB, quick_init_ucb)


def numpy_trial_bp_ucb(rng: np.random.Generator, num_rounds: int) -> dict[str, float]:
    """One trial of BP-UCB on the headline surrogate, in plain NumPy."""
    coupling = paper_coupling()
    return _trial(rng, num_rounds, NUM_CLIENTS_BP_UCB, lambda g: bp_ucb(g, coupling))


@functools.lru_cache(maxsize=2)
def surrogate(num_clients: int):
    """The reproduction's calibrated surrogate (`tong._env`), built once per N."""
    return envs.opinion_surrogate(num_clients, K, success=1.0, warm_start=True, rate=RATE)


@functools.lru_cache(maxsize=1)
def jitted_quick_init_ucb():
    """The reproduction's Quick-Init UCB at N = 20 (`tong._quick_init`: dense), built once."""
    return bandits.quick_init_ucb(NUM_CLIENTS_QUICK_INIT_UCB, K, form="dense")


@functools.lru_cache(maxsize=2)
def jitted_quick_init_ucb_compressed(num_rounds: int):
    """Quick-Init UCB at N = 20 in the compressed form (spec §8.2), its table of played
    arms sized for `num_rounds` slots (at least the cold start and one slot), built once
    per size."""
    groups = NUM_CLIENTS_QUICK_INIT_UCB // K
    horizon = max(num_rounds, groups + 1)
    return bandits.quick_init_ucb(NUM_CLIENTS_QUICK_INIT_UCB, K, form="compressed", horizon=horizon)


@functools.lru_cache(maxsize=1)
def jitted_bp_ucb():
    """The reproduction's BP-UCB (`bandits.bp_ucb`, graph seed 0), its sweeps stopped as
    the reference's, built once."""
    return bandits.bp_ucb(
        NUM_CLIENTS_BP_UCB,
        K,
        graph_seed=GRAPH_SEED,
        bp_iterations=BP_SWEEPS,
        bp_tolerance=BP_TOLERANCE,
    )


def _jitted_metrics(selector, env, num_trials, num_rounds, seed) -> dict[str, float]:
    """The trial means of `_trial`'s metrics from one `run_trials` program."""
    run = run_trials(selector, env, num_rounds, num_trials, seed=seed)
    return {
        "final_accuracy": float(run.accuracy[-1]),
        "average_accuracy": float(run.accuracy.mean()),
        "cumulative_reward": float(run.reward.sum()),
        "cumulative_regret": float((run.oracle - run.expected).sum()),
        "iid_selections": float(run.counts[:, :NUM_IID].mean()),
    }


def jax_run_quick_init_ucb(
    num_trials: int, num_rounds: int, seed: int
) -> Callable[[], dict[str, float]]:
    """A call running `num_trials` jitted trials of Quick-Init UCB (`run_trials`; the
    program is compiled on the first call and reused): the trial means of the metrics."""
    selector, env = jitted_quick_init_ucb(), surrogate(NUM_CLIENTS_QUICK_INIT_UCB)
    return functools.partial(_jitted_metrics, selector, env, num_trials, num_rounds, seed)


def jax_run_quick_init_ucb_compressed(
    num_trials: int, num_rounds: int, seed: int
) -> Callable[[], dict[str, float]]:
    """As `jax_run_quick_init_ucb`, in the compressed form: the same distribution of
    selections (`bandits.super_arms`), from the arms' compositions and the arms played
    (at most one a slot) in place of all 15,504 arms."""
    selector = jitted_quick_init_ucb_compressed(num_rounds)
    env = surrogate(NUM_CLIENTS_QUICK_INIT_UCB)
    return functools.partial(_jitted_metrics, selector, env, num_trials, num_rounds, seed)


def jax_run_bp_ucb(num_trials: int, num_rounds: int, seed: int) -> Callable[[], dict[str, float]]:
    """A call running `num_trials` jitted trials of BP-UCB (`run_trials`; the program is
    compiled on the first call and reused): the trial means of the metrics."""
    selector, env = jitted_bp_ucb(), surrogate(NUM_CLIENTS_BP_UCB)
    return functools.partial(_jitted_metrics, selector, env, num_trials, num_rounds, seed)
