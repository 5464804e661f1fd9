r"""Oort's training selector (Lai et al., OSDI 2021), as FedScale runs it.

Faithful to FedScale's `thirdparty/oort/oort.py` (`_training_selector.getTopK`, `pacer`,
`update_client_util`) and its callers (`client_manager.select_participants`, the
aggregator's feedback of kept clients and stragglers), with every constant a named
argument at FedScale's default. Each round t:

1. The first selection is uniformly random, and a round with at most `num_selected`
   available clients takes them all without calling Oort (FedScale's client manager), so
   Oort's own clock `c` counts its calls (t - 1 when every round calls it).
2. Pacer: the mean statistical utility of last round's exploited clients that reported
   (over `1e-4 +` their number) joins a ring buffer of the last `2 W` calls (W =
   `pacer_step`). Every W-th call from 2W on, with U_cur and U_last the sums of the last W
   and the W before: if |U_cur - U_last| <= 0.1 U_last the round threshold (a percentile)
   grows by `pacer_delta` (at most 100); else if it is >= 5 U_last it shrinks by it (at
   least `pacer_delta`).
3. Preferred duration T: the threshold-percentile of every client's last duration
   (sorted ascending, index floor(N threshold / 100)), infinite at threshold 100.
4. Scores of explored available clients (paper eq. 2 with FedScale's normalisation):
   :math:`|(\min(U_i, \mathrm{clip}) - \min U) / \mathrm{range} + \sqrt{0.1 \ln c / L_i}|`,
   times :math:`(T / d_i)^{\alpha}` (`round_penalty` alpha) when the duration d_i > T;
   :math:`U_i` is the utility last reported, :math:`L_i` its round; clip, min and range
   are FedScale's `get_norm` over the available clients of positive utility (explored or
   not): the value at index floor(0.9 L) of them sorted, their minimum times 0.999, and
   max - min (at least 1e-4).
5. Epsilon: :math:`\epsilon_c = \max(0.98\,\epsilon_{c-1}, 0.3)` from 0.9; the cohort m
   splits into floor(m epsilon) to explore and e = min(m - floor(m epsilon), #explored)
   to exploit. Exploitation: the clients scoring at least `cut_off_util` times the
   (e+1)-th best score, extended down the ranking to 10 e + 1 clients if fewer, and e of
   them sampled without replacement with probability proportional to score.
6. Exploration: among the available unexplored clients, the `sample_window` x (their
   number to take) best by initial utility (the client's per-round sample count |B_i|,
   with the same duration penalty on its device profile's duration), and a sample
   without replacement proportional to it.
   When no available client is unexplored, FedScale keeps its previous exploration list
   (and re-selects it, round after round, once every client is explored); so does this
   selector by default, `exhausted="stale"`, with those of the list available and not
   exploited, at most m - e of them (drawn uniformly): FedScale's list plus the
   exploited can exceed m while epsilon still decays, and a cohort is at most m here. With
   `exhausted="exploit"` the exploration slots that too few unexplored clients leave
   empty go to exploitation instead (e = min(m - min(floor(m eps), #unexplored),
   #explored)), as the paper's Algorithm 1 reads when it leaves the case open.

Feedback (`update`): a kept client (`Feedback.success`) reports utility
:math:`U_i = |B_i| \sqrt{\overline{\ell^2}}` (Oort eq. 1): FedScale's code computes the
mean squared loss over the last minibatch only (`utility_loss="last_batch"`, the
default, `Feedback.info["loss_rms_last_batch"]`); the paper's is over every example of the
round (`"round"`, `info["loss_rms"]`). A straggler (observed, over-committed and not kept)
is given the mean utility of the round's kept clients, stamped one round later, as
FedScale's aggregator does. Every observed client's duration is `Feedback.latency`.

Fixed-shape choices where FedScale's Python is undefined or arbitrary (all documented
edge cases): samples draw by Gumbel-top-k (`ops.gumbel_top_k`'s law: successive sampling
proportional to weight, NumPy's `choice(replace=False, p=...)`); ties in a ranking go to
the lower client index (Python's stable sort in client order; FedScale's exploration ranks
a set, whose order for integer ids is ascending); zero-weight clients are never sampled
(NumPy refuses such draws); with no scoring client the cut-off is 0; the blacklist keeps
int(`blacklist_max_len` N) clients (FedScale slices by a float). FedScale computes in
float64, this selector in float32, with the percentile indices, epsilon schedule and
pacer thresholds tabulated in float64 when it is built, so those are exact.

Selecting takes O(N) time and memory per trial with no sort: rankings of a size known only
at run time use `ops.kth_largest_key` and `ops.top_k_mask` with a traced k (on CPU the
selection ops' search, a few counting passes; elsewhere their definition, 32). The
exploration window is ranked only in rounds where some trial of the batch has an
unexplored client (`ops.where_needed`), and a trial samples either its window or its stale
list, in one sample for both (one search in the program instead of two; the same
selections).
"""

from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sel import ops, validation
from fedjax_sel.ops.order import order_key, order_value
from fedjax_sel.types import Decision, Selector

UTILITY_LOSSES = {"last_batch": "loss_rms_last_batch", "round": "loss_rms"}
_ROUND_KEYS = ("num_samples", "duration_s")
_HINT = "use envs.devices, or the training environment with it as delay_env"


class OortState(NamedTuple):
    """One trial's selector state (FedScale's `totalArms` and pacer, as arrays).

    Attributes:
      reward: f32[N], the statistical utility last reported (meaningful where count > 0).
      duration: f32[N], the duration last reported (meaningful where count > 0).
      time_stamp: f32[N], the round of the last report.
      count: int32[N], reports received (kept and straggler rounds).
      successful: bool[N], reported since the pacer last ran.
      explored: bool[N], the last exploration list.
      exploited: bool[N], the last exploitation list.
      threshold: int32[], index of the pacer's round threshold in its table.
      history: f32[2 pacer_step], ring buffer of the exploited clients' mean utility.
      calls: int32[], Oort's calls so far (its clock c).
      selections: int32[], rounds selected so far.
      round: int32[], the round of the last selection.
    """

    reward: chex.Array
    duration: chex.Array
    time_stamp: chex.Array
    count: chex.Array
    successful: chex.Array
    explored: chex.Array
    exploited: chex.Array
    threshold: chex.Array
    history: chex.Array
    calls: chex.Array
    selections: chex.Array
    round: chex.Array


class Ranking(NamedTuple):
    """What one call of Oort decides before it samples (FedScale's `getTopK` up to its
    `np.random.choice` calls): the deterministic half, compared with a transcription of
    FedScale in tests/test_oort.py.

    Attributes:
      threshold: int32[], the pacer's threshold index after this call.
      history: f32[2 pacer_step], the pacer's utility history after this call.
      prefer: f32[], the preferred duration T (inf at threshold 100).
      score: f32[N], the scores (meaningful where `explored`).
      explored: bool[N], the feasible explored clients (the scored ones).
      exploit_len: int32[], e, clients to exploit.
      candidates: bool[N], the clients the exploitation samples from.
      initial: f32[N], the unexplored clients' initial utility with the penalty.
      unexplored: bool[N], the available unexplored clients.
      num_unexplored: int32[], their number.
    """

    threshold: chex.Array
    history: chex.Array
    prefer: chex.Array
    score: chex.Array
    explored: chex.Array
    exploit_len: chex.Array
    candidates: chex.Array
    initial: chex.Array
    unexplored: chex.Array
    num_unexplored: chex.Array


class Config(NamedTuple):
    """Oort's validated settings and float64 tables (`config`)."""

    num_clients: int
    num_selected: int
    round_penalty: float
    cut_off_util: float
    pacer_step: int
    blacklist_rounds: int
    blacklist_cap: int
    loss_key: str
    stale: bool
    explore_len: np.ndarray
    thresholds: np.ndarray
    up: np.ndarray
    down: np.ndarray
    prefer_rank: np.ndarray
    clip_index: np.ndarray
    window_len: np.ndarray


def epsilon_schedule(
    exploration_factor: float, exploration_decay: float, exploration_min: float, num_selected: int
) -> np.ndarray:
    """int32[C]: floor(m epsilon_c) at Oort's calls c = 1..C, with epsilon updated as FedScale
    does (float64, `max(eps * decay, min)` from `exploration_factor`); the last entry holds
    for every later call."""
    lowest = np.floor(num_selected * exploration_min)
    values, eps = [], exploration_factor
    for _ in range(1_000_000):
        eps = max(eps * exploration_decay, exploration_min)
        values.append(np.floor(num_selected * eps))
        if values[-1] <= lowest or exploration_decay == 1.0:
            return np.asarray(values, np.int32)
    raise ValueError(
        f"exploration_decay {exploration_decay} takes epsilon to its floor in more than "
        "1e6 calls; use a smaller decay."
    )


def threshold_table(start: float, delta: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pacer's reachable round thresholds from `start`, moved by +-`delta` in [delta, 100].

    Returns:
      (values f64[S], up int32[S], down int32[S]): the thresholds (`values[0]` = start) and,
      for each, the index of the threshold one relaxation up and one tightening down.
    """
    values, index, up, down = [start], {start: 0}, [], []
    i = 0
    while i < len(values):
        for moved, into in (
            (min(100.0, values[i] + delta), up),
            (max(delta, values[i] - delta), down),
        ):
            if moved not in index:
                index[moved] = len(values)
                values.append(moved)
            into.append(index[moved])
        i += 1
    return np.asarray(values), np.asarray(up, np.int32), np.asarray(down, np.int32)


def config(
    num_clients: int,
    num_selected: int,
    exploration_factor: float,
    exploration_decay: float,
    exploration_min: float,
    round_threshold: float,
    round_penalty: float,
    clip_bound: float,
    cut_off_util: float,
    sample_window: float,
    pacer_step: int,
    pacer_delta: float,
    blacklist_rounds: int,
    blacklist_max_len: float,
    utility_loss: str,
    exhausted: str,
) -> Config:
    """Validates `oort`'s arguments (see there; its defaults are FedScale's) and tabulates
    its float64 floors."""
    n = validation.positive_int("num_clients", num_clients)
    m = validation.num_selected(num_selected, n)
    for name, value in (
        ("exploration_factor", exploration_factor),
        ("exploration_decay", exploration_decay),
        ("exploration_min", exploration_min),
        ("clip_bound", clip_bound),
        ("cut_off_util", cut_off_util),
        ("blacklist_max_len", blacklist_max_len),
    ):
        validation.probability(name, value)
    start = validation.float_in_range("round_threshold", round_threshold, 0.0, 100.0, low_open=True)
    # FedScale samples the exploration list from the window without replacement: a
    # window smaller than the list it is drawn from is an error there.
    window = validation.float_in_range("sample_window", sample_window, 1.0, np.inf)
    delta = validation.float_in_range("pacer_delta", pacer_delta, 0.0, 100.0, low_open=True)
    validation.choice("utility_loss", utility_loss, tuple(UTILITY_LOSSES))
    validation.choice("exhausted", exhausted, ("stale", "exploit"))
    values, up, down = threshold_table(start, delta)
    return Config(
        num_clients=n,
        num_selected=m,
        round_penalty=validation.float_in_range("round_penalty", round_penalty, 0.0, np.inf),
        cut_off_util=float(cut_off_util),
        pacer_step=validation.positive_int("pacer_step", pacer_step),
        blacklist_rounds=validation.int_in_range(
            "blacklist_rounds", blacklist_rounds, -1, 2**31 - 1
        ),
        blacklist_cap=int(blacklist_max_len * n),
        loss_key=UTILITY_LOSSES[utility_loss],
        stale=exhausted == "stale",
        explore_len=epsilon_schedule(exploration_factor, exploration_decay, exploration_min, m),
        thresholds=values,
        up=up,
        down=down,
        prefer_rank=(n - np.minimum(np.floor(n * values / 100.0), n - 1)).astype(np.int32),
        clip_index=np.floor(np.arange(n + 1) * clip_bound).astype(np.int32),
        window_len=np.minimum(np.floor(np.arange(m + 1) * window), n).astype(np.int32),
    )


def init_state(cfg: Config) -> OortState:
    """The state before any round: every client unexplored."""
    n = cfg.num_clients
    zeros = jnp.zeros((n,), jnp.float32)
    none = jnp.zeros((n,), bool)
    return OortState(
        reward=zeros,
        duration=zeros,
        time_stamp=zeros,
        count=jnp.zeros((n,), jnp.int32),
        successful=none,
        explored=none,
        exploited=none,
        threshold=jnp.int32(0),
        history=jnp.zeros((2 * cfg.pacer_step,), jnp.float32),
        calls=jnp.int32(0),
        selections=jnp.int32(0),
        round=jnp.int32(0),
    )


def pace(cfg: Config, state: OortState, reward: chex.Array, calls: chex.Array):
    """FedScale's `pacer` at Oort's call `calls`: (threshold index, history) after it."""
    step = cfg.pacer_step
    hit = state.exploited & state.successful
    util = jnp.sum(jnp.where(hit, reward, 0.0)) / (1e-4 + jnp.sum(hit))
    history = state.history.at[(calls - 1) % (2 * step)].set(util)
    age = (calls - 1 - jnp.arange(2 * step)) % (2 * step)
    current = jnp.sum(jnp.where(age < step, history, 0.0))
    last = jnp.sum(jnp.where(age >= step, history, 0.0))
    change = jnp.abs(current - last)
    due = (calls >= 2 * step) & (calls % step == 0)
    moved = jnp.where(
        change <= last * 0.1,
        jnp.asarray(cfg.up)[state.threshold],
        jnp.where(change >= last * 5.0, jnp.asarray(cfg.down)[state.threshold], state.threshold),
    )
    return jnp.where(due, moved, state.threshold), history


def _value_at(values: chex.Array, mask: chex.Array, k: chex.Array) -> chex.Array:
    """f32[]: the k-th largest of `values` inside `mask` (1 <= k <= |mask|)."""
    return order_value(ops.kth_largest_key(order_key(values, mask), k))


def _penalised(cfg: Config, value, duration, prefer):
    """`value` times (T / duration)^alpha where the duration exceeds T."""
    factor = (prefer / jnp.maximum(1e-4, duration)) ** cfg.round_penalty
    return jnp.where(duration > prefer, value * factor, value)


def rank(
    cfg: Config,
    state: OortState,
    available: chex.Array,
    num_samples: chex.Array,
    profile_duration: chex.Array,
) -> Ranking:
    """Oort's call number `state.calls + 1` up to its samples (module docstring, 2-6):
    `num_samples` and `profile_duration` (f32[N]) stand for the unexplored clients'
    utility and duration, as registered."""
    n, m = cfg.num_clients, cfg.num_selected
    calls = state.calls + 1
    reported = state.count > 0
    reward = jnp.where(reported, state.reward, num_samples)
    duration = jnp.where(reported, state.duration, profile_duration)
    feasible = available
    if cfg.blacklist_rounds >= 0 and cfg.blacklist_cap > 0:
        black = ops.top_k_mask(
            state.count.astype(jnp.float32), state.count > cfg.blacklist_rounds, cfg.blacklist_cap
        )
        feasible = feasible & ~black
    threshold, history = pace(cfg, state, reward, calls)
    prefer = jnp.where(
        jnp.asarray(cfg.thresholds < 100.0)[threshold],
        _value_at(duration, jnp.ones((n,), bool), jnp.asarray(cfg.prefer_rank)[threshold]),
        jnp.inf,
    )
    # FedScale's get_norm over the feasible clients of positive utility.
    positive = feasible & (reward > 0)
    size = jnp.sum(positive, dtype=jnp.int32)
    clip_rank = size - jnp.minimum(jnp.asarray(cfg.clip_index)[size], size - 1)
    clip = jnp.where(size > 0, _value_at(reward, positive, clip_rank), 0.0)
    # The largest and smallest by one reduction each, not a search (the same values).
    high = jnp.where(size > 0, jnp.max(jnp.where(positive, reward, -jnp.inf)), 0.0)
    low = jnp.where(size > 0, jnp.min(jnp.where(positive, reward, jnp.inf)), 0.0)
    low = low * 0.999
    spread = jnp.maximum(high - low, 1e-4)
    # Scores of the explored feasible clients (Oort eq. 2 with the duration penalty).
    explored = feasible & (state.count > 0)
    temporal = jnp.sqrt(0.1 * jnp.log(calls.astype(jnp.float32)) / state.time_stamp)
    score = (jnp.minimum(reward, clip) - low) / spread + temporal
    score = jnp.abs(_penalised(cfg, score, duration, prefer))
    num_explored = jnp.sum(explored, dtype=jnp.int32)
    schedule = jnp.asarray(cfg.explore_len)
    explore_len = schedule[jnp.minimum(calls, len(cfg.explore_len)) - 1]
    unexplored = available & (state.count == 0)
    num_unexplored = jnp.sum(unexplored, dtype=jnp.int32)
    if not cfg.stale:
        explore_len = jnp.minimum(explore_len, num_unexplored)
    exploit_len = jnp.minimum(m - explore_len, num_explored)
    cut_off = jnp.where(
        exploit_len < num_explored,
        _value_at(score, explored, exploit_len + 1) * cfg.cut_off_util,
        0.0,
    )
    admitted = jnp.sum(explored & (score >= cut_off), dtype=jnp.int32)
    pool = jnp.maximum(admitted, jnp.minimum(num_explored, 10 * exploit_len + 1))
    return Ranking(
        threshold=threshold,
        history=history,
        prefer=prefer,
        score=score,
        explored=explored,
        exploit_len=exploit_len,
        candidates=ops.top_k_mask(score, explored, pool),
        initial=_penalised(cfg, reward, duration, prefer),
        unexplored=unexplored,
        num_unexplored=num_unexplored,
    )


def _sample(weights: chex.Array, mask: chex.Array, size: chex.Array, key: chex.Array):
    """bool[N]: `size` clients of `mask` without replacement, P proportional to `weights`
    (the top `size` of log-weights plus Gumbel noise; zero weights never drawn).

    `ops.gumbel_top_k`'s law, but ties go to the lower index (`ops.top_k_mask`): Gumbel
    noise leaves ties of probability zero, and `gumbel_top_k` breaks them with a random
    permutation, a sort when, as here, the size is known only at run time."""
    logits = jnp.log(weights) + jax.random.gumbel(key, weights.shape)
    return ops.top_k_mask(logits, mask, size)


def exploration_window(cfg: Config, ranking: Ranking, take: chex.Array) -> chex.Array:
    """bool[N]: the `sample_window` x `take` unexplored clients of best initial utility."""
    size = jnp.minimum(jnp.asarray(cfg.window_len)[take], ranking.num_unexplored)
    return ops.top_k_mask(ranking.initial, ranking.unexplored, size)


def oort(
    num_clients: int,
    num_selected: int,
    exploration_factor: float = 0.9,
    exploration_decay: float = 0.98,
    exploration_min: float = 0.3,
    round_threshold: float = 30.0,
    round_penalty: float = 2.0,
    clip_bound: float = 0.9,
    cut_off_util: float = 0.05,
    sample_window: float = 5.0,
    pacer_step: int = 20,
    pacer_delta: float = 5.0,
    blacklist_rounds: int = -1,
    blacklist_max_len: float = 0.3,
    utility_loss: str = "last_batch",
    exhausted: str = "stale",
) -> Selector:
    """Oort (module docstring), selecting `num_selected` clients a round; every default is
    FedScale's.

    It reads `RoundInput.info["num_samples"]` (|B_i|, the initial utility) and
    `info["duration_s"]` (the device profile's duration, registered as the initial
    duration, FedScale's `registerDuration`) and, in
    `update`, `Feedback.info["num_samples"]` and the loss statistic of `utility_loss`:
    the `envs.devices` environment and the training environment provide them. Over-
    commitment (FedScale's 1.3) is the environment's: select int(1.3 K) with
    `num_selected` and let the environment keep the K fastest (`envs.devices`).

    Args:
      num_clients: N >= 1.
      num_selected: m, the clients selected a round, 1 <= m <= N.
      exploration_factor: epsilon before the first decay, in [0, 1].
      exploration_decay: epsilon's factor per call, in [0, 1].
      exploration_min: epsilon's floor, in [0, 1].
      round_threshold: the pacer's starting percentile of durations, in (0, 100].
      round_penalty: alpha >= 0, the exponent of the duration penalty.
      clip_bound: the quantile at which utilities are clipped, in [0, 1].
      cut_off_util: the share of the (e+1)-th best score that admits a client, in [0, 1].
      sample_window: >= 1, ranked exploration candidates per client to explore.
      pacer_step: W >= 1, the pacer's window in calls.
      pacer_delta: in (0, 100], the pacer's step in percentiles.
      blacklist_rounds: -1 for none; else clients reported more often are excluded.
      blacklist_max_len: the largest share of clients blacklisted, in [0, 1].
      utility_loss: "last_batch" (FedScale's code) or "round" (the paper's).
      exhausted: "stale" (FedScale's code) or "exploit", what the exploration slots do
        when too few clients are unexplored (module docstring, step 6).

    Returns:
      A `Selector` whose state is an `OortState`.
    """
    cfg = config(**locals())
    m = cfg.num_selected

    def read(where, info, key):
        return validation.require_info(
            info, key, policy="oort", where=where, hint=_HINT, num_clients=cfg.num_clients
        )

    def init(key):
        del key
        return init_state(cfg)

    def call(state, inp, key):
        """One call of FedScale's `getTopK`: the cohort and the state after it."""
        num_samples, duration = (read("RoundInput", inp.info, key) for key in _ROUND_KEYS)
        ranking = rank(cfg, state, inp.available, num_samples, duration)
        exploit_key, explore_key, stale_key = jax.random.split(key, 3)
        exploit = _sample(ranking.score, ranking.candidates, ranking.exploit_len, exploit_key)
        count = ranking.num_unexplored
        room = m - jnp.sum(exploit, dtype=jnp.int32)
        take, some = jnp.minimum(count, room), count > 0
        # With no client unexplored, the window is empty: it is ranked (for the whole
        # batch under `jax.vmap`) only in rounds where some trial has one.
        window = ops.where_needed(
            some,
            lambda ranking, take: exploration_window(cfg, ranking, take),
            lambda ranking, take: jnp.zeros((cfg.num_clients,), bool),
            ranking,
            take,
        )
        weights, pool, size, sample_key = ranking.initial, window, take, explore_key
        if cfg.stale:
            # FedScale's last exploration list, kept whole; of it, the available clients
            # not exploited, at most the room left (uniformly), join the cohort when no
            # client is unexplored. A trial samples the window or this list, never both:
            # one sample, with each trial's weights, pool, size and key.
            left = state.explored & inp.available & ~exploit
            weights = jnp.where(some, weights, 1.0)
            pool = jnp.where(some, window, left)
            size = jnp.where(some, take, room)
            sample_key = jnp.where(some, explore_key, stale_key)
        explore = _sample(weights, pool, size, sample_key)
        explored = jnp.where(some, explore, state.explored) if cfg.stale else explore
        called = state._replace(
            successful=jnp.zeros_like(state.successful),
            explored=explored,
            exploited=exploit,
            threshold=ranking.threshold,
            history=ranking.history,
            calls=state.calls + 1,
        )
        return explore | exploit, called

    def select(state, inp, key):
        oort_key, random_key = jax.random.split(key)
        chosen, called = call(state, inp, oort_key)
        few = ops.count_true(inp.available) <= m
        first = state.selections == 0
        use_oort = ~(few | first)
        random_pick = ops.uniform_subset(inp.available, m, random_key)
        selected = jnp.where(few, inp.available, jnp.where(first, random_pick, chosen))
        state = jax.tree.map(lambda a, b: jnp.where(use_oort, a, b), called, state)
        state = state._replace(selections=state.selections + 1, round=jnp.asarray(inp.t, jnp.int32))
        return Decision(selected), state

    def update(state, decision, feedback):
        del decision
        kept = feedback.observed & feedback.success
        straggler = feedback.observed & ~feedback.success
        num_samples = read("Feedback", feedback.info, "num_samples")
        loss = read("Feedback", feedback.info, cfg.loss_key)
        # One NaN or inf would stay in the state: a NaN utility passes to every straggler
        # of the round (their mean) and drops them from the pool, an inf one flattens
        # every other client's clipped utility to 0.
        validation.check_observed("oort", "info['num_samples']", num_samples, kept, 0.0, np.inf)
        validation.check_observed("oort", f"info['{cfg.loss_key}']", loss, kept, 0.0, np.inf)
        validation.check_feedback("oort", feedback, 0.0, np.inf, field="latency")
        utility = num_samples * loss
        mean = jnp.sum(jnp.where(kept, utility, 0.0)) / jnp.maximum(jnp.sum(kept), 1)
        t = state.round.astype(jnp.float32)
        return state._replace(
            reward=jnp.where(kept, utility, jnp.where(straggler, mean, state.reward)),
            duration=jnp.where(feedback.observed, feedback.latency, state.duration),
            time_stamp=jnp.where(kept, t, jnp.where(straggler, t + 1.0, state.time_stamp)),
            count=state.count + feedback.observed.astype(jnp.int32),
            successful=state.successful | feedback.observed,
        )

    return Selector(init=init, select=select, update=update)
