r"""Model exchange times linear in a per-round context: the numerical study of Huang et al.

T. Huang, W. Lin, W. Wu, L. He, K. Li, A. Y. Zomaya, "An Efficiency-boosting Client
Selection Scheme for Federated Learning with Fairness Guarantee", IEEE TPDS 32(7), 2021,
Sec. 6.1. Client n's model exchange time in round t (download, local training, upload)
is linear in a context known before the round (eq. 14):

.. math:: \tau_{t,n} = c_{t,n}^\top \theta^*_n + \varepsilon_{t,n}, \qquad
          c_{t,n} = [1/\mu_{t,n},\ s_{t,n},\ M/B_{t,n}], \qquad
          \theta^*_n = [\tau^b_n,\ \tau^s_n,\ 1/\eta_n],

with :math:`\mu` the available CPU ratio, uniform in [0.5, 2]; :math:`s` a cold-start
flag; :math:`M = 20` Mb the model size; :math:`B` the bandwidth, uniform in [2, 4] MHz;
:math:`\eta = \log(1 + \text{SNR})`. The N clients form four equal speed classes
(Table I: :math:`\tau^b` = 1, 2, 3, 4 s, :math:`\tau^s` = 1 s, SNR = 1000, 100, 10, 1),
clients 0..N/4-1 in class 1. The noise is uniform on :math:`(-\tau^*, \tau^*)`, so
:math:`\tau = 2u\tau^*` with :math:`u \sim U(0, 1)`; every client is available with
probability 0.8, independently over clients and rounds.

A round lasts as long as its slowest selected client (eq. 1), 0 when nobody is
selected. Feedback: the selected clients' exchange times (`latency`), `reward` their
negatives. Round statistics: `latency` the round time f; `expected_reward` the negative
of the largest expected time :math:`c^\top\theta^*` in the cohort, `oracle_reward` the
same for the `oracle` (the min(k, available) clients of smallest expected time). A
cohort smaller than min(k, |A(t)|) counts its empty slots as the slowest available
client, in `expected_reward` and `reward` (a round over fewer clients would otherwise
beat the oracle, `envs.cohort`); `latency` stays the time of the clients selected. The
fairness queues of eq. (6), :math:`Z_{t+1,n} = \max(Z_{t,n} + \beta - x_{t,n}, 0)`,
are a function of the selections alone, so the environment keeps them for every policy
and reports their mean, maximum and sum of squares after each round as extras.

Readings where the paper is open (each a named option, the default first):
  - `cold_start`: "cold_start" sets :math:`s_{t,n} = 1 - x_{t-1,n}` (1 in round 1), as
    the coefficient :math:`\tau^s` is a cold-start time paid by clients that did not train
    in the previous round; "participated" is the literal definition, :math:`s = x_{t-1,n}`.
  - `log_base`: "2" (Shannon rate in bit/s/Hz, matching M in bits and B in Hz) or "e".
"""

from __future__ import annotations

from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sel import validation
from fedjax_sel.envs import availability as availability_lib
from fedjax_sel.envs import cohort
from fedjax_sel.ops import count_true, top_k_mask
from fedjax_sel.types import Decision, Env, Feedback, RoundInput, RoundStats

CONTEXT_DIM = 3
COLD_START_READINGS = ("cold_start", "participated")
LOG_BASES = ("2", "e")
# Table I: local training time at 100% CPU, cold-start time and SNR of each class.
_TRAINING_S = (1.0, 2.0, 3.0, 4.0)
_COLD_START_S = (1.0, 1.0, 1.0, 1.0)
_SNR = (1000.0, 100.0, 10.0, 1.0)


class ExchangeTimeParams(NamedTuple):
    r"""The environment's parameter pytree (`Env.params`).

    Attributes:
      coefficients: f32[N, 3], the true :math:`\theta^*_n` of each client.
      fairness_rate: f32[], :math:`\beta` of the reported fairness queues.
      model_size_mb: f32[], M in Mb.
      bandwidth_low: f32[], low end of the uniform bandwidth B, MHz.
      bandwidth_high: f32[], high end of B, MHz.
      cpu_low: f32[], low end of the uniform CPU ratio :math:`\mu`.
      cpu_high: f32[], high end of :math:`\mu`.
      availability: the availability process's parameters.
    """

    coefficients: chex.Array
    fairness_rate: chex.Array
    model_size_mb: chex.Array
    bandwidth_low: chex.Array
    bandwidth_high: chex.Array
    cpu_low: chex.Array
    cpu_high: chex.Array
    availability: Any


class ExchangeTimeState(NamedTuple):
    r"""One trial's state.

    Attributes:
      coefficients: f32[N, 3], the true :math:`\theta^*_n` of each client.
      availability: the availability process's state (None for Bernoulli availability).
      previous: bool[N], the clients selected in the previous round.
      queue: f32[N], fairness queues :math:`Z_{t,n}` (eq. 6) of the selections so far.
    """

    coefficients: chex.Array
    availability: Any
    previous: chex.Array
    queue: chex.Array


def true_coefficients(num_clients: int = 40, log_base: str = "2") -> np.ndarray:
    r"""f32[N, 3], Table I's :math:`\theta^*_n = [\tau^b, \tau^s, 1/\log(1 + \text{SNR})]`.

    Client n belongs to class floor(4 n / N) (clients 0..N/4-1 in class 1).

    Args:
      num_clients: N >= 1.
      log_base: "2" or "e", the base of :math:`\eta = \log(1 + \text{SNR})`.
    """
    n = validation.positive_int("num_clients", num_clients)
    if log_base not in LOG_BASES:
        raise ValueError(f"log_base must be one of {LOG_BASES}, got {log_base!r}.")
    log = np.log2 if log_base == "2" else np.log
    table = np.stack(
        [_TRAINING_S, _COLD_START_S, 1.0 / log(1.0 + np.asarray(_SNR))], axis=1
    ).astype(np.float32)
    return table[(4 * np.arange(n)) // n]


def exchange_time(
    num_clients: int = 40,
    num_selected: int = 8,
    availability=0.8,
    fairness_rate: float = 0.15,
    model_size_mb: float = 20.0,
    bandwidth_mhz: tuple[float, float] = (2.0, 4.0),
    cpu_ratio: tuple[float, float] = (0.5, 2.0),
    cold_start: str = "cold_start",
    log_base: str = "2",
    coefficients: chex.Array | None = None,
) -> Env:
    r"""The numerical simulation of Huang et al., Sec. 6.1 (see the module docstring).

    Args:
      num_clients: N >= 1 (40 in the paper).
      num_selected: m, 1 <= m <= N, the cohort size of the `oracle` (8 in the paper).
      availability: probability in [0, 1] (or f32[N]) that a client is available (0.8),
        or an availability process (`envs.availability`).
      fairness_rate: :math:`\beta` of the reported fairness queues (eq. 6), in [0, 1]
        with :math:`\beta N \leq m` (0.15).
      model_size_mb: M in Mb, > 0 (20).
      bandwidth_mhz: (low, high) of the uniform bandwidth B in MHz, 0 < low <= high.
      cpu_ratio: (low, high) of the uniform CPU ratio :math:`\mu`, 0 < low <= high.
      cold_start: "cold_start" or "participated", the reading of :math:`s_{t,n}`.
      log_base: "2" or "e", the base of :math:`\eta`.
      coefficients: f32[N, 3] of non-negative :math:`\theta^*_n`; None for Table I.

    Returns:
      An `Env` whose `RoundInput.context` is the f32[N, 3] context :math:`c_{t,n}`.
    """
    n = validation.positive_int("num_clients", num_clients)
    m = validation.num_selected(num_selected, n)
    process = availability_lib.resolve(availability, n)
    beta = validation.fairness_rate(fairness_rate, n, m)
    size = validation.positive_float("model_size_mb", model_size_mb)
    b_low, b_high = validation.real_interval("bandwidth_mhz", bandwidth_mhz, 0.0, low_open=True)
    mu_low, mu_high = validation.real_interval("cpu_ratio", cpu_ratio, 0.0, low_open=True)
    if cold_start not in COLD_START_READINGS:
        raise ValueError(f"cold_start must be one of {COLD_START_READINGS}, got {cold_start!r}.")
    if coefficients is None:
        theta = jnp.asarray(true_coefficients(n, log_base))
    else:
        if log_base not in LOG_BASES:
            raise ValueError(f"log_base must be one of {LOG_BASES}, got {log_base!r}.")
        theta = jnp.asarray(
            validation.array_in_range("coefficients", coefficients, (n, CONTEXT_DIM), 0.0)
        )
    flag_follows_selection = cold_start == "participated"
    f32 = jnp.float32
    defaults = ExchangeTimeParams(
        coefficients=theta,
        fairness_rate=f32(beta),
        model_size_mb=f32(size),
        bandwidth_low=f32(b_low),
        bandwidth_high=f32(b_high),
        cpu_low=f32(mu_low),
        cpu_high=f32(mu_high),
        availability=process.params,
    )

    def reset(key, params=None):
        params = defaults if params is None else params
        # Nobody trained before round 1: all cold (s = 1), or s = 0 when s = x_{t-1}.
        previous = jnp.zeros((n,), bool)
        avail = process.init(key, params.availability)
        return ExchangeTimeState(params.coefficients, avail, previous, jnp.zeros((n,), f32))

    def observe(state, t, key, params=None):
        params = defaults if params is None else params
        k_mu, k_b, k_avail = jax.random.split(key, 3)
        mu = jax.random.uniform(k_mu, (n,), minval=params.cpu_low, maxval=params.cpu_high)
        bandwidth = jax.random.uniform(
            k_b, (n,), minval=params.bandwidth_low, maxval=params.bandwidth_high
        )
        flag = state.previous == flag_follows_selection
        context = jnp.stack(
            [1.0 / mu, flag.astype(jnp.float32), params.model_size_mb / bandwidth], axis=1
        )
        available = process.sample(state.availability, t, k_avail, params.availability)
        return RoundInput(t=jnp.asarray(t, jnp.int32), available=available, context=context)

    def expected_time(state, round_input):
        return jnp.sum(round_input.context * state.coefficients, axis=1)

    def oracle(state, round_input, params=None):
        del params
        return Decision(top_k_mask(-expected_time(state, round_input), round_input.available, m))

    def step(state, round_input, decision, key, params=None):
        params = defaults if params is None else params
        selected = decision.selected
        mean = expected_time(state, round_input)
        tau = 2.0 * jax.random.uniform(key, (n,)) * mean
        best = oracle(state, round_input).selected
        round_time = jnp.max(jnp.where(selected, tau, 0.0))
        # Empty slots count as the slowest available client (module docstring).
        short = cohort.missing(count_true(selected), round_input.available, m) > 0
        charged = selected | (short & round_input.available)
        queue = jnp.maximum(state.queue + params.fairness_rate - selected.astype(jnp.float32), 0.0)
        feedback = Feedback(observed=selected, reward=-tau, latency=tau, success=selected)
        stats = RoundStats(
            expected_reward=-jnp.max(jnp.where(charged, mean, 0.0)),
            oracle_reward=-jnp.max(jnp.where(best, mean, 0.0)),
            reward=-jnp.max(jnp.where(charged, tau, 0.0)),
            latency=round_time,
            num_failed=jnp.float32(0.0),
            extras={
                "mean_queue": jnp.mean(queue),
                "max_queue": jnp.max(queue),
                "queue_square_sum": jnp.sum(queue * queue),
            },
        )
        avail = process.update(state.availability, round_input.available, params.availability)
        new_state = state._replace(availability=avail, previous=selected, queue=queue)
        return feedback, new_state, stats

    return Env(
        reset=reset,
        observe=observe,
        step=step,
        oracle=oracle,
        num_clients=n,
        params=defaults,
        # No cap: FedCS(3) of Sec. 6.1.1 schedules every client it expects within the
        # deadline, more than m at times; m is the oracle's cohort only.
        num_selected=None,
    )
