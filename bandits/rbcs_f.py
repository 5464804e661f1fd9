r"""RBCS-F: Lyapunov fairness queues over contextual lower confidence bounds of exchange time.

T. Huang, W. Lin, W. Wu, L. He, K. Li, A. Y. Zomaya, "An Efficiency-boosting Client
Selection Scheme for Federated Learning with Fairness Guarantee", IEEE TPDS 32(7), 2021.

Each round the server minimises the drift-plus-penalty of P4 (eq. 21),

.. math:: \min_{x_t} V \max_n x_{t,n} \bar\tau_{t,n} - \sum_n Z_{t,n} x_{t,n},
          \quad \sum_n x_{t,n} = \min(m, \textstyle\sum_n I_{t,n}),\ x_{t,n} \leq I_{t,n},

where :math:`Z_{t,n}` is client n's fairness queue (eq. 6) and :math:`\bar\tau_{t,n}` a
lower confidence bound on its exchange time from a per-client ridge regression on the
context (eqs. 17-19). Also here: FedCS with a deadline, the paper's FedCS(3) baseline.

Example (the numerical study of Sec. 6.1)::

  env = fedjax_sel.envs.exchange_time()            # N = 40, m = 8, beta = 0.15
  truth = fedjax_sel.envs.true_coefficients()
  policies = {
      "RBCS-F(20)": bandits.rbcs_f(40, 8, penalty_weight=20.0),
      "FedCS(3)": bandits.fedcs(40, 8, truth, deadline_s=3.0),
      "oracle pi'(20)": bandits.rbcs_f(40, 8, penalty_weight=20.0, known_coefficients=truth),
  }
  results = fedjax_sel.simulate(policies, env, num_rounds=500, num_trials=64)
"""

from __future__ import annotations

from typing import NamedTuple

import chex
import jax.numpy as jnp
import numpy as np

from fedjax_sel import ops, validation
from fedjax_sel.types import Decision, Selector

EXPLORATION_SCHEDULES = ("constant", "theory")


class RBCSFState(NamedTuple):
    r"""Per-client ridge statistics and fairness queues of one trial.

    Attributes:
      inverse: f32[N, d, d], :math:`H_{t-1,n}^{-1}` with
        :math:`H_{t,n} = \lambda I + \sum_{s \leq t} x_{s,n} c_{s,n} c_{s,n}^\top` (eq. 18).
      moment: f32[N, d], :math:`b_{t-1,n} = \sum_{s < t} x_{s,n} \tau_{s,n} c_{s,n}` (eq. 18).
      queue: f32[N], the fairness queues :math:`Z_{t,n}` (eq. 6).
      context: f32[N, d], the contexts of the round being played, kept from `select` for
        the ridge update.
    """

    inverse: chex.Array
    moment: chex.Array
    queue: chex.Array
    context: chex.Array


def rbcs_f(
    num_clients: int,
    num_selected: int,
    penalty_weight: float = 20.0,
    fairness_rate: float = 0.15,
    exploration: float = 0.1,
    ridge: float = 1.0,
    context_dim: int = 3,
    fairness: bool = True,
    clip_at_zero: bool = True,
    exploration_schedule: str = "constant",
    confidence: float = 0.05,
    noise_scale: float = 19.0 / np.sqrt(3.0),
    coefficient_bound: float = float(np.sqrt(18.0)),
    context_bound: float = float(np.sqrt(105.0)),
    known_coefficients: chex.Array | None = None,
) -> Selector:
    r"""RBCS-F (Algorithm 2 of Huang et al.), and its variants by option.

    Round t, for every client at once (Alg. 2 lines 6-10):

    .. math:: \hat\theta_{t,n} = H_{t-1,n}^{-1} b_{t-1,n}, \qquad
              \bar\tau_{t,n} = \max\{c_{t,n}^\top \hat\theta_{t,n}
              - \alpha_t \|c_{t,n}\|_{H_{t-1,n}^{-1}},\ 0\}     \quad \text{(eqs. 18-19)}

    then the exact solution of P4 (Algorithm 1, in the prefix form of
    `ops.prefix_max_cost_top_k`); ties in :math:`Z` are broken at random, which at
    round 1 (all queues 0, all bounds 0) makes the first cohorts uniform. After the round
    (lines 13-17) the selected clients' observed times update
    :math:`H \mathrel{+}= c c^\top` (kept as :math:`H^{-1}`, by Sherman-Morrison) and
    :math:`b \mathrel{+}= \tau c`, and every queue follows eq. (6),
    :math:`Z_{t+1,n} = \max(Z_{t,n} + \beta - x_{t,n}, 0)`, from :math:`Z_{1,n} = 0`.

    Variants: `fairness=False` solves P4 with every queue read as 0 (RBCS without
    fairness: the min(m, available) clients of smallest bound; the queues are still
    kept); `known_coefficients` replaces the bound by the true expected time
    :math:`c^\top\theta^*_n` (the Lyapunov oracle :math:`\pi'(V)` of eq. 39 with
    expected times; with `fairness=False`, the m fastest clients in expectation).

    `update` refuses an observed exchange time (`Feedback.latency`) that is negative, NaN
    or infinite, at once when run eagerly, under `jax.jit` when wrapped in
    `jax.experimental.checkify.checkify` (`validation.check_feedback`).

    Args:
      num_clients: N >= 1.
      num_selected: m, 1 <= m <= N.
      penalty_weight: V >= 0, the weight of the round time against the queues (eq. 10).
      fairness_rate: :math:`\beta` in [0, 1], each client's guaranteed long-run selection
        rate (eq. 2), with :math:`\beta N \leq m`.
      exploration: :math:`\alpha \geq 0`, the constant confidence width (0.1, Table II).
      ridge: :math:`\lambda > 0`, the ridge parameter (eq. 17; 1 in Table II).
      context_dim: d >= 1, the context dimension (3 in Sec. 4.4.2).
      fairness: whether the queues act on the selection (the queues are kept either way).
      clip_at_zero: clip the bound at 0 as eq. (19) does; False follows Alg. 2 line 9,
        which omits the clip.
      exploration_schedule: "constant" uses `exploration` (Table II); "theory" uses
        Lemma 1's :math:`\alpha_t = R\sqrt{d \log((1 + tL^2/\lambda)/\delta)} +
        \sqrt\lambda S` (eq. 20; the paper writes 3 for d).
      confidence: :math:`\delta \in (0, 1)` of the "theory" schedule.
      noise_scale: R > 0, the sub-Gaussian noise scale (eq. 15) of the "theory" schedule;
        the default :math:`K/\sqrt3` is that of Sec. 6.1's uniform noise with K = 19 s.
      coefficient_bound: S > 0, a bound on :math:`\|\theta^*_n\|_2`; default Sec. 6.1's.
      context_bound: L > 0, a bound on :math:`\|c_{t,n}\|_2`; default Sec. 6.1's.
      known_coefficients: f32[N, d] of true :math:`\theta^*_n`, or None to learn them.

    Returns:
      A `Selector` whose state is an `RBCSFState`; it reads `RoundInput.context`
      (f32[N, d]) and the selected clients' `Feedback.latency`.
    """
    n = validation.positive_int("num_clients", num_clients)
    m = validation.num_selected(num_selected, n)
    v = validation.float_in_range("penalty_weight", penalty_weight, 0.0, float("inf"))
    beta = validation.fairness_rate(fairness_rate, n, m)
    alpha = validation.float_in_range("exploration", exploration, 0.0, float("inf"))
    lam = validation.positive_float("ridge", ridge)
    d = validation.positive_int("context_dim", context_dim)
    fairness = validation.boolean("fairness", fairness)
    clip_at_zero = validation.boolean("clip_at_zero", clip_at_zero)
    if exploration_schedule not in EXPLORATION_SCHEDULES:
        raise ValueError(
            f"exploration_schedule must be one of {EXPLORATION_SCHEDULES}, "
            f"got {exploration_schedule!r}."
        )
    delta = validation.float_in_range("confidence", confidence, 0.0, 1.0, low_open=True)
    if delta >= 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}.")
    r = validation.positive_float("noise_scale", noise_scale)
    s = validation.positive_float("coefficient_bound", coefficient_bound)
    big_l = validation.positive_float("context_bound", context_bound)
    theta = None
    if known_coefficients is not None:
        theta = jnp.asarray(
            validation.array_in_range("known_coefficients", known_coefficients, (n, d))
        )

    def init(key):
        del key
        return RBCSFState(
            inverse=jnp.broadcast_to(jnp.eye(d, dtype=jnp.float32) / lam, (n, d, d)),
            moment=jnp.zeros((n, d), jnp.float32),
            queue=jnp.zeros((n,), jnp.float32),
            context=jnp.zeros((n, d), jnp.float32),
        )

    def exploration_at(t):
        if exploration_schedule == "constant":
            return jnp.float32(alpha)
        return theory_exploration(t, d, lam, delta, r, s, big_l)

    def select(state, inp, key):
        c = _checked_context(inp.context, n, d, "rbcs_f")
        if theta is not None:
            bound = jnp.sum(c * theta, axis=1)
        else:
            bound = lower_confidence_bound(state, c, exploration_at(inp.t), clip_at_zero)
        priority = state.queue if fairness else jnp.zeros_like(state.queue)
        selected = ops.prefix_max_cost_top_k(bound, priority, inp.available, m, jnp.float32(v), key)
        return Decision(selected), state._replace(context=c)

    def update(state, decision, feedback):
        validation.check_feedback("rbcs_f", feedback, 0.0, field="latency")
        x = decision.selected
        seen = x & feedback.observed
        c = state.context
        tau = jnp.where(seen, feedback.latency, 0.0)
        return RBCSFState(
            inverse=ops.sherman_morrison_update(state.inverse, c, seen),
            moment=state.moment + tau[:, None] * c,
            queue=jnp.maximum(state.queue + beta - x.astype(jnp.float32), 0.0),
            context=c,
        )

    return Selector(init=init, select=select, update=update)


class FedCSState(NamedTuple):
    r"""FedCS's own estimate of exchange times, when the true coefficients are not given.

    Attributes:
      inverse: f32[N, d, d], :math:`H_{t-1,n}^{-1}` of RBCS-F's ridge regression (eq. 18).
      moment: f32[N, d], :math:`b_{t-1,n}` (eq. 18).
      context: f32[N, d], the contexts of the round being played, kept for the update.
    """

    inverse: chex.Array
    moment: chex.Array
    context: chex.Array


def fedcs(
    num_clients: int,
    num_selected: int,
    known_coefficients: chex.Array | None = None,
    deadline_s: float = 3.0,
    cap_at_num_selected: bool = False,
    context_dim: int = 3,
    ridge: float = 1.0,
) -> Selector:
    r"""FedCS with a deadline, as adapted in Huang et al., Sec. 6.1.1 (FedCS(3)).

    Knowing the contexts and the true coefficients, it selects every available client
    whose expected exchange time :math:`c_{t,n}^\top \theta^*_n` is below the deadline
    (3 s in the paper, chosen so that about 8 clients qualify). The paper caps nothing,
    so the cohort size varies by round and may exceed m; `cap_at_num_selected` keeps the
    m fastest of them instead.

    Without `known_coefficients` (the paper's FedCS(3) is given them; the original
    FedCS of Nishio and Yonetani estimates each client's time from what the client
    reports), the expected time is FedCS's own estimate :math:`c_{t,n}^\top
    \hat\theta_{t,n}`, the per-client ridge regression of RBCS-F (eqs. 17-18) on the
    observed exchange times, with no confidence width. The estimate starts at 0, so every
    available client qualifies until it has been observed. The paper's setting is the one
    with the coefficients; this default only makes `fedcs(N, m)` a usable policy. Its
    `update` refuses an observed exchange time that is negative, NaN or infinite,
    at once when run eagerly, under `jax.jit` when wrapped in
    `jax.experimental.checkify.checkify` (`validation.check_feedback`).

    Args:
      num_clients: N >= 1.
      num_selected: m, 1 <= m <= N (used only with `cap_at_num_selected`).
      known_coefficients: f32[N, d], the true :math:`\theta^*_n`, or None to estimate them.
      deadline_s: the deadline in seconds, > 0.
      cap_at_num_selected: select at most m clients (the fastest qualifying).
      context_dim: d >= 1 of the estimate (3 in Sec. 4.4.2); with `known_coefficients`,
        d is their second dimension.
      ridge: :math:`\lambda > 0` of the estimate (eq. 17; 1 in Table II).

    Returns:
      A `Selector` that reads `RoundInput.context` (f32[N, d]): stateless with
      `known_coefficients`, else with a `FedCSState` updated from `Feedback.latency`.
    """
    n = validation.positive_int("num_clients", num_clients)
    m = validation.num_selected(num_selected, n)
    deadline = validation.positive_float("deadline_s", deadline_s)
    lam = validation.positive_float("ridge", ridge)
    cap_at_num_selected = validation.boolean("cap_at_num_selected", cap_at_num_selected)
    if known_coefficients is None:
        d = validation.positive_int("context_dim", context_dim)
        theta = None
    else:
        shape = np.shape(known_coefficients)
        if len(shape) != 2:
            raise ValueError(f"known_coefficients must have shape (num_clients, d), got {shape}.")
        theta = jnp.asarray(
            validation.array_in_range("known_coefficients", known_coefficients, (n, shape[1]))
        )
        d = theta.shape[1]

    def init(key):
        del key
        if theta is not None:
            return ()
        return FedCSState(
            inverse=jnp.broadcast_to(jnp.eye(d, dtype=jnp.float32) / lam, (n, d, d)),
            moment=jnp.zeros((n, d), jnp.float32),
            context=jnp.zeros((n, d), jnp.float32),
        )

    def select(state, inp, key):
        del key
        c = _checked_context(inp.context, n, d, "fedcs")
        if theta is not None:
            expected = jnp.sum(c * theta, axis=1)
        else:
            expected = lower_confidence_bound(state, c, jnp.float32(0.0), clip_at_zero=False)
            state = state._replace(context=c)
        qualified = inp.available & (expected < deadline)
        if cap_at_num_selected:
            qualified = ops.top_k_mask(-expected, qualified, m)
        return Decision(qualified), state

    def update(state, decision, feedback):
        if theta is not None:
            return state
        validation.check_feedback("fedcs", feedback, 0.0, field="latency")
        seen = decision.selected & feedback.observed
        tau = jnp.where(seen, feedback.latency, 0.0)
        return state._replace(
            inverse=ops.sherman_morrison_update(state.inverse, state.context, seen),
            moment=state.moment + tau[:, None] * state.context,
        )

    return Selector(init=init, select=select, update=update)


def lower_confidence_bound(
    state: RBCSFState | FedCSState,
    context: chex.Array,
    exploration: chex.Array,
    clip_at_zero: bool = True,
) -> chex.Array:
    r"""f32[N], the optimistic exchange times :math:`\bar\tau_{t,n}` (eqs. 18-19).

    .. math:: \bar\tau_{t,n} = \max\{c_{t,n}^\top H_{t-1,n}^{-1} b_{t-1,n}
              - \alpha_t \sqrt{c_{t,n}^\top H_{t-1,n}^{-1} c_{t,n}},\ 0\}

    Args:
      state: the ridge statistics :math:`H^{-1}` and b.
      context: f32[N, d], the round's contexts :math:`c_{t,n}`.
      exploration: f32[], :math:`\alpha_t`.
      clip_at_zero: apply eq. (19)'s clip (Alg. 2 line 9 omits it).
    """
    theta_hat = jnp.einsum("nij,nj->ni", state.inverse, state.moment)
    width_sq = jnp.einsum("ni,nij,nj->n", context, state.inverse, context)
    # Rounding can make the quadratic form of a positive-definite matrix slightly negative.
    width = jnp.sqrt(jnp.maximum(width_sq, 0.0))
    bound = jnp.sum(context * theta_hat, axis=1) - exploration * width
    return jnp.maximum(bound, 0.0) if clip_at_zero else bound


def theory_exploration(
    t: chex.Array,
    context_dim: int,
    ridge: float,
    confidence: float,
    noise_scale: float,
    coefficient_bound: float,
    context_bound: float,
) -> chex.Array:
    r"""f32[], Lemma 1's exploration factor (eq. 20) at round t:

    .. math:: \alpha_t = R\sqrt{d \log\frac{1 + tL^2/\lambda}{\delta}} + \sqrt\lambda S.

    With the bound it gives, :math:`\bar\tau_{t,n} \leq \tau^*_{t,n}` for all t and n with
    probability at least :math:`1 - \delta` (Abbasi-Yadkori et al., 2011, Thm. 2).
    """
    growth = jnp.log((1.0 + jnp.asarray(t, jnp.float32) * context_bound**2 / ridge) / confidence)
    return noise_scale * jnp.sqrt(context_dim * growth) + np.sqrt(ridge) * coefficient_bound


def _checked_context(context, num_clients: int, dim: int, policy: str) -> chex.Array:
    """The round's f32[N, d] context, or a ValueError (at trace time) on a mismatch."""
    validation.require(context, "context", policy=policy)
    if tuple(context.shape) != (num_clients, dim):
        raise ValueError(
            f"RoundInput.context must have shape (num_clients, context_dim) = "
            f"({num_clients}, {dim}), got {tuple(context.shape)}."
        )
    return context
