r"""Quick-Init UCB and conventional UCB over super-arms (Tong et al., Sec. IV-A, Alg. 1).

The arms are the C(N, K) K-subsets of the clients ("super-arms"); a slot plays one, and
its reward is the average opinion of all N clients, eq. (8), read from
`Feedback.info["opinions"]` (f32[N]). The index of arm a at slot t is eq. (11),

.. math:: \Psi_{t,a} = \bar r_{t,a} + \mu \sqrt{\ln t / \Pi_{t,a}},

the arm of largest index is played, and ties within `tolerance` are broken uniformly at
random (spec A10). Quick-Init's cold start (Alg. 1 lines 1-3) splits the clients into
G = N/K random groups, plays them in the first G slots, gives every client the reward of
its group, and pseudo-initialises every super-arm with the mean of its members' values
and a count of 1 (spec A8), so that the UCB phase starts at t = G + 1.

Two forms give the same distribution of selections:

- "dense" keeps every arm's sum, count and mean (f32[A] each, A = C(N, K)): N <= 40 or so;
- "compressed" (spec §3.1, §8.2) keeps what is exact under the pseudo-initialisation:
  arms never played since the cold start share their value with every arm of the same
  composition (how many members each group gives), so it keeps, per composition, its
  value and the number of its arms not yet played, and a table of the arms played (at
  most one new arm a slot, capacity `horizon`). A composition is chosen with
  probability proportional to its tied arms, and a fresh arm of it uniformly, by
  unranking its i-th unplayed arm (no rejection). It runs N = 100, K = 5 (75,287,520
  super-arms, 42,504 compositions), which the paper could not.

Conventional UCB (`super_arm_ucb`) is the dense form without the cold start: every arm
is played once first (an unplayed arm's index is infinite, ties uniform, so the order
is a uniformly random permutation, spec A11), then eq. (11).
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from fedjax_sel import ops, validation
from fedjax_sel.types import Decision, Feedback, Selector

FORMS = ("dense", "compressed")
UNEVEN = ("error", "fill")
DENSE_MAX_ARMS = 2_000_000


def opinions(feedback: Feedback, policy: str) -> chex.Array:
    """f32[N], every client's opinion (`Feedback.info["opinions"]`), or a ValueError."""
    return validation.require_info(
        feedback.info,
        "opinions",
        policy=policy,
        where="Feedback",
        hint="use envs.opinion_surrogate or envs.training(feedback='opinions')",
    )


def num_groups(num_clients: int, num_selected: int, uneven: str) -> int:
    """G, the cold-start groups: N/K, or ceil(N/K) with the A9 rule ("fill").

    Raises:
      ValueError: K does not divide N and `uneven` is "error".
    """
    validation.choice("uneven", uneven, UNEVEN)
    if num_clients % num_selected and uneven == "error":
        raise ValueError(
            f"num_selected={num_selected} does not divide num_clients={num_clients}: the cold "
            "start needs N/K groups of K; pass uneven='fill' (spec A9: the last group is "
            "filled with random clients of earlier groups)."
        )
    return -(-num_clients // num_selected)


def cold_start_groups(key: chex.PRNGKey, num_clients: int, num_selected: int) -> chex.Array:
    """int32[G, K], a random partition of the clients into the cold-start groups.

    When K does not divide N, the last group's empty places take distinct random
    clients of the earlier groups (spec A9).
    """
    n, k = num_clients, num_selected
    groups = -(-n // k)
    perm_key, fill_key = jax.random.split(key)
    perm = jax.random.permutation(perm_key, n).astype(jnp.int32)
    spare = groups * k - n
    if spare:
        fill = jax.random.choice(fill_key, perm[: n - (k - spare)], (spare,), replace=False)
        perm = jnp.concatenate([perm, fill])
    return perm.reshape(groups, k)


def tied_argmax(index: chex.Array, tolerance: float, key: chex.PRNGKey) -> chex.Array:
    """int32[], a uniformly random entry of f32[A] `index` within `tolerance` of its max.

    One random integer, not one per arm: the j-th tied entry for j uniform below the
    number of ties (`ops.random_true`).
    """
    return ops.random_true(index >= jnp.max(index) - tolerance, key)


def _members_mean(value: chex.Array, members: chex.Array) -> chex.Array:
    """f32[A]: each arm's mean of `value` (f32[N]) over its members (int32[A, K]): the
    members' values added in order, times 1 / K in f32. That is what XLA makes of
    `jnp.mean(value[members], axis=1)` at its default options (a division by a constant
    becomes a product with its reciprocal), bit for bit.

    Each member's values are read by a product with its one-hot rows, exact (one term
    of each sum is not 0), in place of a gather: under the runner's `vmap` over trials
    the gather's result is arm-major, and XLA:CPU then kept the arms' sums, f32[trials,
    A], in that layout through the slots, transposing them three times a slot (into and
    out of Quick-Init's `lax.cond`, and in the index), and dense Quick-Init UCB's runs
    took 2.3 to 2.4 times as long (docs/benchmarks.md). `value` must be finite.
    """
    columns = (
        jnp.dot(
            value,
            jax.nn.one_hot(members[:, j], value.shape[-1], dtype=value.dtype).T,
            precision=lax.Precision.HIGHEST,
        )
        for j in range(members.shape[1])
    )
    return functools.reduce(operator.add, columns) * np.float32(1.0 / members.shape[1])


def _mask(members: chex.Array, num_clients: int) -> chex.Array:
    return jnp.zeros((num_clients,), bool).at[members].set(True)


def _common_args(num_clients, num_selected, exploration, tolerance):
    n = validation.positive_int("num_clients", num_clients)
    k = validation.num_selected(num_selected, n)
    if k == n:
        raise ValueError(f"num_selected must be below num_clients={n} (K < N), got {k}.")
    mu = validation.float_in_range("exploration", exploration, 0.0, float("inf"))
    tol = validation.float_in_range("tolerance", tolerance, 0.0, float("inf"))
    return n, k, mu, tol


def _arm_table(n: int, k: int, max_arms: int, hint: str) -> np.ndarray:
    arms = math.comb(n, k)
    if arms > max_arms:
        raise ValueError(
            f"num_clients={n}, num_selected={k} give C({n},{k}) = {arms:,} super-arms, above "
            f"the dense form's max_arms={max_arms:,} (three f32 per arm per trial); {hint}"
        )
    return np.asarray(list(itertools.combinations(range(n), k)), np.int32)


class SuperArmState(NamedTuple):
    """The dense form's state: every super-arm's statistics.

    Attributes:
      t: int32[], the slot being played (set by `select`).
      arm: int32[], the arm played in slot t (A, none, in a cold-start slot).
      groups: int32[G, K], the cold-start groups (unused by conventional UCB).
      value_sum: f32[N], the sum of the rewards of each client's cold-start groups.
      value_count: f32[N], how many cold-start groups each client was in.
      sums: f32[A], each arm's reward sum (its pseudo-sample included; Quick-Init
        pseudo-initialises it as slot N/K + 1 is selected).
      counts: f32[A], Pi_{t,a}, each arm's count (the pseudo-sample counted once).
      means: f32[A], `sums / max(counts, 1)`, each arm's mean reward, divided again for
        the arm played alone (one arm's sum and count change a slot).
    """

    t: chex.Array
    arm: chex.Array
    groups: chex.Array
    value_sum: chex.Array
    value_count: chex.Array
    sums: chex.Array
    counts: chex.Array
    means: chex.Array


def _dense(n, k, mu, tol, members, groups_count, quick_init, policy) -> Selector:
    """Dense super-arm UCB over the arms `members` (int32[A, K]), with or without the
    Quick-Init cold start of `groups_count` slots."""
    members = jnp.asarray(members)
    num_arms = members.shape[0]
    cold_slots = groups_count if quick_init else 0

    def init(key):
        return SuperArmState(
            t=jnp.int32(0),
            arm=jnp.int32(num_arms),
            groups=cold_start_groups(key, n, k),
            value_sum=jnp.zeros((n,), jnp.float32),
            value_count=jnp.zeros((n,), jnp.float32),
            sums=jnp.zeros((num_arms,), jnp.float32),
            counts=jnp.zeros((num_arms,), jnp.float32),
            means=jnp.zeros((num_arms,), jnp.float32),
        )

    def pseudo_init(state):
        # Alg. 1 line 3 (spec A8): every arm the mean of its members' values, count 1.
        value = state.value_sum / jnp.maximum(state.value_count, 1.0)
        sums = _members_mean(value, members)
        return state._replace(sums=sums, counts=jnp.ones_like(state.counts), means=sums)

    def select(state, inp, key):
        t = inp.t.astype(jnp.int32)
        if quick_init:
            # A cond where t is shared by the trials (the runner's scan); else a select.
            state = lax.cond(t == cold_slots + 1, pseudo_init, lambda s: s, state)
        counts = jnp.maximum(state.counts, 1.0)
        bonus = mu * jnp.sqrt(jnp.log(jnp.maximum(t, 1).astype(jnp.float32)) / counts)
        index = jnp.where(state.counts > 0, state.means + bonus, jnp.inf)  # eq. (11)
        arm = tied_argmax(index, tol, key)
        cold = t <= cold_slots
        group = state.groups[jnp.clip(t - 1, 0, groups_count - 1)]
        chosen = jnp.where(cold, group, members[arm])
        decision = Decision(_mask(chosen, n) & inp.available)
        return decision, state._replace(t=t, arm=jnp.where(cold, num_arms, arm))

    def update(state, decision, feedback):
        del decision
        reward = jnp.mean(opinions(feedback, policy))  # eq. (8)
        cold = state.t <= cold_slots
        group = state.groups[jnp.clip(state.t - 1, 0, groups_count - 1)]
        value_sum = state.value_sum.at[group].add(jnp.where(cold, reward, 0.0))
        value_count = state.value_count.at[group].add(jnp.where(cold, 1.0, 0.0))
        sums = state.sums.at[state.arm].add(reward, mode="drop")
        counts = state.counts.at[state.arm].add(1.0, mode="drop")
        # The played arm's mean, the division `select` would make of its sum and count.
        arm = jnp.minimum(state.arm, num_arms - 1)
        mean = sums[arm] / jnp.maximum(counts[arm], 1.0)
        means = state.means.at[state.arm].set(mean, mode="drop")
        return state._replace(
            value_sum=value_sum, value_count=value_count, sums=sums, counts=counts, means=means
        )

    return Selector(init=init, select=select, update=update)


def super_arm_ucb(
    num_clients: int,
    num_selected: int,
    exploration: float = 1.0,
    tolerance: float = 1e-6,
    max_arms: int = DENSE_MAX_ARMS,
) -> Selector:
    """Conventional UCB over super-arms (Tong et al. Sec. VI-B: Quick-Init UCB without
    the quick initiation): each arm once in a uniformly random order, then eq. (11).

    Args:
      num_clients: N >= 2.
      num_selected: K, 1 <= K < N.
      exploration: mu >= 0 of eq. (11) (1 in the paper's experiments).
      tolerance: indices within it of the maximum tie (spec A10), >= 0.
      max_arms: the most super-arms held (f32[A] twice per trial), >= 1.

    Returns:
      A `Selector` whose state is a `SuperArmState`.
    """
    n, k, mu, tol = _common_args(num_clients, num_selected, exploration, tolerance)
    limit = validation.positive_int("max_arms", max_arms)
    members = _arm_table(n, k, limit, "raise max_arms if memory allows.")
    return _dense(n, k, mu, tol, members, -(-n // k), False, "super_arm_ucb")


class CompressedState(NamedTuple):
    """The compressed form's state (spec §8.2). C compositions, P = `horizon` places
    for played arms.

    Attributes:
      t: int32[], the slot being played (set by `select`).
      groups: int32[G, K], the cold-start groups.
      comp_value: f32[C], the pseudo-initial value of every arm of each composition.
      remaining: int32[C], the arms of each composition never played after the cold start.
      played: int32[], the arms in the table.
      played_members: int32[P, K], the played arms' clients.
      played_comp: int32[P], their compositions.
      played_rank: int32[P], their rank within their composition.
      played_sum: f32[P], their reward sums (the pseudo-sample included).
      played_count: f32[P], their counts.
      choice: int32[], the slot's arm: a composition c < C (a fresh arm of it), C + j
        (played arm j), or -1 (a cold-start slot).
      choice_members: int32[K], the slot's clients.
      choice_rank: int32[], the fresh arm's rank within its composition.
    """

    t: chex.Array
    groups: chex.Array
    comp_value: chex.Array
    remaining: chex.Array
    played: chex.Array
    played_members: chex.Array
    played_comp: chex.Array
    played_rank: chex.Array
    played_sum: chex.Array
    played_count: chex.Array
    choice: chex.Array
    choice_members: chex.Array
    choice_rank: chex.Array


def compositions(num_groups: int, num_selected: int) -> np.ndarray:
    """int32[C, G], every composition c in {0..K}^G with sum K (stars and bars)."""
    g, k = num_groups, num_selected
    rows = []
    for bars in itertools.combinations(range(k + g - 1), g - 1):
        edges = (-1, *bars, k + g - 1)
        rows.append([edges[i + 1] - edges[i] - 1 for i in range(g)])
    return np.asarray(rows, np.int32)


def _compressed(n, k, mu, tol, groups_count, horizon, policy) -> Selector:
    comps_np = compositions(groups_count, k)
    binom = np.asarray([math.comb(k, m) for m in range(k + 1)], np.int64)
    sizes = np.prod(binom[comps_np], axis=1)
    if sizes.max() >= 2**31:
        raise ValueError(f"num_selected={k} is too large for the compressed form (K <= 8).")
    if math.comb(n, k) >= 2**31:
        # The tied arms are counted in int32 (the draw among them).
        raise ValueError(
            f"the compressed form counts the C(num_clients, num_selected) = {math.comb(n, k)} "
            f"super-arms in int32; it needs fewer than 2^31 (num_clients={n}, "
            f"num_selected={k})."
        )
    # bool[K+1, max C(K,m), K]: the r-th m-subset of a group's K places (lexicographic).
    subsets = np.zeros((k + 1, int(binom.max()), k), bool)
    for m in range(k + 1):
        for r, places in enumerate(itertools.combinations(range(k), m)):
            subsets[m, r, list(places)] = True
    comps, num_comps = jnp.asarray(comps_np), comps_np.shape[0]
    comp_sizes = jnp.asarray(sizes, jnp.int32)
    binom_j, subsets = jnp.asarray(binom, jnp.int32), jnp.asarray(subsets)
    capacity = horizon - groups_count

    def init(key):
        return CompressedState(
            t=jnp.int32(0),
            groups=cold_start_groups(key, n, k),
            comp_value=jnp.zeros((num_comps,), jnp.float32),
            remaining=comp_sizes,
            played=jnp.int32(0),
            played_members=jnp.zeros((capacity, k), jnp.int32),
            played_comp=jnp.zeros((capacity,), jnp.int32),
            played_rank=jnp.zeros((capacity,), jnp.int32),
            played_sum=jnp.zeros((capacity,), jnp.float32),
            played_count=jnp.ones((capacity,), jnp.float32),
            choice=jnp.int32(-1),
            choice_members=jnp.zeros((k,), jnp.int32),
            choice_rank=jnp.int32(0),
        )

    def fresh_arm(state, comp, rank):
        """int32[K], the sorted clients of arm `rank` of composition `comp` (mixed radix
        over the groups, then the combinatorial number system within each group)."""
        counts = comps[comp]
        radix = binom_j[counts]
        stride = jnp.cumprod(jnp.concatenate([jnp.ones((1,), jnp.int32), radix[:-1]]))
        digits = (rank // stride) % radix
        places = subsets[counts, digits]  # bool[G, K]
        chosen = jnp.zeros((n,), bool).at[state.groups].set(places)
        return jnp.nonzero(chosen, size=k, fill_value=0)[0].astype(jnp.int32)

    def select(state, inp, key):
        t = inp.t.astype(jnp.int32)
        log_t = jnp.log(jnp.maximum(t, 1).astype(jnp.float32))
        fresh = jnp.where(state.remaining > 0, state.comp_value + mu * jnp.sqrt(log_t), -jnp.inf)
        valid = jnp.arange(capacity) < state.played
        count = state.played_count
        played = state.played_sum / count + mu * jnp.sqrt(log_t / count)  # eq. (11)
        played = jnp.where(valid, played, -jnp.inf)
        best = jnp.maximum(jnp.max(fresh), jnp.max(played))
        # Every tied arm equally likely: a composition weighs its unplayed arms.
        weight = jnp.concatenate(
            [
                jnp.where(fresh >= best - tol, state.remaining, 0),
                (played >= best - tol).astype(jnp.int32),
            ]
        )
        edges = jnp.cumsum(weight)
        draw = jax.random.randint(key, (), 0, edges[-1])
        choice = jnp.searchsorted(edges, draw, side="right").astype(jnp.int32)
        offset = draw - (edges[choice] - weight[choice])
        comp = jnp.minimum(choice, num_comps - 1)
        # The offset-th unplayed arm of `comp`: skip the played ranks at or below it.
        ranks = jnp.sort(
            jnp.where(valid & (state.played_comp == comp), state.played_rank, 2**31 - 1)
        )
        rank = offset + jnp.sum(ranks - jnp.arange(capacity) <= offset)
        slot = jnp.clip(choice - num_comps, 0, capacity - 1)
        chosen = jnp.where(
            choice < num_comps, fresh_arm(state, comp, rank), state.played_members[slot]
        )
        cold = t <= groups_count
        chosen = jnp.where(cold, state.groups[jnp.clip(t - 1, 0, groups_count - 1)], chosen)
        decision = Decision(_mask(chosen, n) & inp.available)
        return decision, state._replace(
            t=t, choice=jnp.where(cold, -1, choice), choice_members=chosen, choice_rank=rank
        )

    def update(state, decision, feedback):
        del decision
        reward = jnp.mean(opinions(feedback, policy))  # eq. (8)
        cold = state.t <= groups_count
        column = comps[:, jnp.clip(state.t - 1, 0, groups_count - 1)]
        comp_value = state.comp_value + jnp.where(cold, column * (reward / k), 0.0)
        is_fresh = (state.choice >= 0) & (state.choice < num_comps)
        comp = jnp.where(is_fresh, state.choice, num_comps)  # out of range: dropped
        slot = jnp.where(is_fresh, state.played, capacity)
        again = jnp.where(state.choice >= num_comps, state.choice - num_comps, capacity)
        value = comp_value[jnp.minimum(comp, num_comps - 1)]
        return state._replace(
            comp_value=comp_value,
            remaining=state.remaining.at[comp].add(-1, mode="drop"),
            played=state.played + is_fresh.astype(jnp.int32),
            played_members=state.played_members.at[slot].set(state.choice_members, mode="drop"),
            played_comp=state.played_comp.at[slot].set(comp, mode="drop"),
            played_rank=state.played_rank.at[slot].set(state.choice_rank, mode="drop"),
            played_sum=state.played_sum.at[slot]
            .set(value + reward, mode="drop")
            .at[again]
            .add(reward, mode="drop"),
            played_count=state.played_count.at[slot]
            .set(2.0, mode="drop")
            .at[again]
            .add(1.0, mode="drop"),
        )

    return Selector(init=init, select=select, update=update, max_rounds=horizon)


def quick_init_ucb(
    num_clients: int,
    num_selected: int,
    exploration: float = 1.0,
    form: str = "dense",
    horizon: int = 500,
    tolerance: float = 1e-6,
    uneven: str = "error",
    max_arms: int = DENSE_MAX_ARMS,
) -> Selector:
    """Quick-Init UCB (Tong et al. Alg. 1): an N/K-slot cold start, then eq. (11).

    Args:
      num_clients: N >= 2.
      num_selected: K, 1 <= K < N.
      exploration: mu >= 0 of eq. (11) (1 in the paper's experiments; UCB1 is sqrt 2).
      form: "dense" (every super-arm in memory) or "compressed" (spec §8.2; the same
        distribution of selections, for large N). Module docstring.
      horizon: the compressed form's capacity, >= N/K + 1: the slots it is defined for
        (`Selector.max_rounds`; the runners refuse longer runs, since arms played in
        later slots could not be recorded).
      tolerance: indices within it of the maximum tie (spec A10), >= 0.
      uneven: when K does not divide N, "error", or "fill" (spec A9, dense form only).
      max_arms: the dense form's most super-arms, >= 1.

    Returns:
      A `Selector` whose state is a `SuperArmState` (dense) or `CompressedState`.

    Raises:
      ValueError: on a bad argument, K not dividing N with `uneven="error"`, more
        super-arms than `max_arms` in the dense form (use the compressed form).
    """
    n, k, mu, tol = _common_args(num_clients, num_selected, exploration, tolerance)
    validation.choice("form", form, FORMS)
    validation.positive_int("horizon", horizon)
    groups = num_groups(n, k, uneven)
    if form == "dense":
        limit = validation.positive_int("max_arms", max_arms)
        members = _arm_table(n, k, limit, "use form='compressed' (exact, spec §8.2).")
        return _dense(n, k, mu, tol, members, groups, True, "quick_init_ucb")
    validation.positive_int("max_arms", max_arms)
    if n % k:
        raise ValueError(
            f"form='compressed' needs num_selected={k} to divide num_clients={n} (groups of "
            "equal clients); use form='dense' with uneven='fill'."
        )
    slots = validation.int_in_range("horizon", horizon, groups + 1, 2**30)
    return _compressed(n, k, mu, tol, groups, slots, "quick_init_ucb")
