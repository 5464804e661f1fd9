"""Non-learning baselines: random, round robin, a fixed cohort, and the oracle."""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sel import ops, validation
from fedjax_sel.types import Decision, Selector


def _stateless(select_fn, privileged: bool = False) -> Selector:
    """A selector whose state is empty and whose update ignores the feedback."""

    def init(key):
        del key
        return ()

    def select(state, round_input, key):
        return select_fn(round_input, key), state

    def update(state, decision, feedback):
        del decision, feedback
        return state

    return Selector(init=init, select=select, update=update, privileged=privileged)


def random(num_clients: int, num_selected: int) -> Selector:
    """Selects k clients uniformly at random among the available ones each round.

    Args:
      num_clients: N >= 1.
      num_selected: cohort size k, 1 <= k <= N.
    """
    k = validation.num_selected(num_selected, validation.positive_int("num_clients", num_clients))
    return _stateless(lambda inp, key: Decision(ops.uniform_subset(inp.available, k, key)))


def round_robin(num_clients: int, num_selected: int) -> Selector:
    """Cycles through the clients in index order, k per round.

    Round `t` (1-based) schedules clients `(t-1)k, ..., (t-1)k + k - 1` (mod N); those
    of them not available leave their slot empty. The decision carries their places
    (`Decision.indices`).

    Args:
      num_clients: N >= 1.
      num_selected: cohort size k, 1 <= k <= N.
    """
    n = validation.positive_int("num_clients", num_clients)
    k = validation.num_selected(num_selected, n)
    # (t - 1) k mod N without overflowing int32 at long horizons: bit b of (t - 1) mod N
    # weighs 2^b k mod N, and the weights are summed mod N (uint32: below 2N < 2^32).
    weights = [(k << b) % n for b in range(max(n - 1, 1).bit_length())]

    def block_start(t):
        rest = ((t - 1) % n).astype(jnp.uint32)
        total = jnp.uint32(0)
        for b, weight in enumerate(weights):
            total = (total + ((rest >> b) & 1) * jnp.uint32(weight)) % jnp.uint32(n)
        return total.astype(jnp.int32)

    def select(inp, key):
        del key
        offset = block_start(inp.t)
        in_block = (jnp.arange(n) - offset) % n < k
        block = (offset + jnp.arange(k)) % n
        return Decision(in_block & inp.available, indices=jnp.where(inp.available[block], block, n))

    return _stateless(select)


def fixed(num_clients: int, clients: Sequence[int]) -> Selector:
    """Always schedules the same clients (those available).

    Args:
      num_clients: N >= 1.
      clients: distinct client indices in [0, N).
    """
    n = validation.positive_int("num_clients", num_clients)
    idx = np.asarray(clients)
    if idx.ndim != 1 or idx.size == 0 or not np.issubdtype(idx.dtype, np.integer):
        raise ValueError(f"clients must be a non-empty list of integers, got {clients!r}.")
    if idx.min() < 0 or idx.max() >= n or len(set(idx.tolist())) != idx.size:
        raise ValueError(f"clients must be distinct indices in [0, {n - 1}], got {clients!r}.")
    chosen = jnp.zeros((n,), bool).at[idx].set(True)
    return _stateless(lambda inp, key: Decision(chosen & inp.available))


def oracle(num_clients: int | None = None, num_selected: int | None = None) -> Selector:
    """Plays the environment's oracle decision (best given expectations).

    A privileged selector: the runner fills `RoundInput.oracle` with `env.oracle`'s
    decision for it, so its pseudo-regret is exactly zero.

    Args:
      num_clients: N >= 1 or None; only validated (the decision is the environment's),
        so that the oracle is built like every policy, `factory(num_clients, num_selected)`.
      num_selected: k, 1 <= k <= N, or None; only validated, as `num_clients`.
    """
    if num_clients is not None:
        n = validation.positive_int("num_clients", num_clients)
        if num_selected is not None:
            validation.num_selected(num_selected, n)
    elif num_selected is not None:
        validation.positive_int("num_selected", num_selected)

    def select(inp, key):
        del key
        if inp.oracle is None:
            raise ValueError(
                "bandits.oracle needs RoundInput.oracle; run it through fedjax_sel.simulate "
                "with an environment that has an oracle."
            )
        return inp.oracle

    return _stateless(select, privileged=True)


def group_round_robin(num_clients: int, num_selected: int, shuffle: bool = False) -> Selector:
    """Round robin as Xia et al. (2020, §V.B, after [41]) define it: fixed groups in turn.

    The clients are divided into kappa = ceil(K/N) groups of N, group g holding clients
    gN, ..., gN + N - 1 (mod K, so that the last group wraps around to the first clients
    when N does not divide K), and round t schedules group (t - 1) mod kappa. Unlike
    `round_robin`, the groups do not drift when N does not divide K. Unavailable members
    leave their slot empty.

    Args:
      num_clients: K >= 1.
      num_selected: N channels, 1 <= N <= K.
      shuffle: group a uniformly random permutation of the clients, drawn per trial,
        instead of the index order (the compute speed of §V.A grows with the index).

    Returns:
      A `Selector` whose state is the i32[K] order in which clients are grouped.
    """
    n = validation.positive_int("num_clients", num_clients)
    k = validation.num_selected(num_selected, n)
    shuffle = validation.boolean("shuffle", shuffle)
    groups = -(-n // k)
    slots = jnp.arange(n)

    def init(key):
        if shuffle:
            return jax.random.permutation(key, n).astype(jnp.int32)
        return slots.astype(jnp.int32)

    def select(state, inp, key):
        del key
        start = ((inp.t - 1) % groups) * k
        in_group = (slots - start) % n < k
        members = jnp.zeros((n,), bool).at[state].set(in_group)
        return Decision(members & inp.available), state

    def update(state, decision, feedback):
        del decision, feedback
        return state

    return Selector(init=init, select=select, update=update)


def set_round_robin(
    num_clients: int,
    num_selected: int,
    num_sets: int = 5,
    first_set: Sequence[int] | None = None,
) -> Selector:
    """Round robin over predefined client sets (Tong et al. Sec. VI-B).

    Slot t schedules set (t - 1) mod `num_sets`. The paper's five sets are
    {1, 2, 11, 16, 20} (`first_set=(0, 1, 10, 15, 19)`, 0-based) and four sets "chosen
    randomly": every set not given is a uniform K-subset drawn once per trial (spec A23;
    sets may overlap). With `num_sets=1` and no `first_set` it is Fig. 5(c)'s "set 2", a
    random set fixed for the whole trial.

    Args:
      num_clients: N >= 1.
      num_selected: K, 1 <= K <= N.
      num_sets: sets in the cycle, >= 1.
      first_set: K distinct client indices in [0, N) for the first set, or None.

    Returns:
      A `Selector` whose state is the bool[num_sets, N] sets.
    """
    n = validation.positive_int("num_clients", num_clients)
    k = validation.num_selected(num_selected, n)
    sets = validation.positive_int("num_sets", num_sets)
    first = None
    if first_set is not None:
        idx = np.asarray(first_set)
        if (
            idx.shape != (k,)
            or not np.issubdtype(idx.dtype, np.integer)
            or len(set(idx.tolist())) != k
            or idx.min() < 0
            or idx.max() >= n
        ):
            raise ValueError(
                f"first_set must be {k} distinct client indices in [0, {n - 1}], got {first_set!r}."
            )
        first = jnp.zeros((n,), bool).at[idx].set(True)

    def init(key):
        keys = jax.random.split(key, sets)
        drawn = jax.vmap(lambda r: ops.uniform_subset(jnp.ones((n,), bool), k, r))(keys)
        return drawn if first is None else drawn.at[0].set(first)

    def select(state, inp, key):
        del key
        return Decision(state[(inp.t - 1) % sets] & inp.available), state

    def update(state, decision, feedback):
        del decision, feedback
        return state

    return Selector(init=init, select=select, update=update)
