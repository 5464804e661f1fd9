r"""A bandit-only surrogate of goal-directed FL (Tong et al.): set rewards without training.

The surrogate of the Tong spec §8.4 for thousands of trials and the regret theorems.
Client n has a data quality q_n (1 for the `num_iid` IID clients, the first ones, and
uniform in `quality_range` for the non-IID rest, drawn per trial unless fixed), a data
size |D_n| and a success probability theta_n (Sec. II-A). In slot t the selected set S
trains; each member's update arrives with X_n ~ Bernoulli(theta_n), and the model's
quality is the data-weighted mean of the arrived clients' qualities (the FedAvg weights
of eq. 2),

.. math:: \bar q_t = \sum_{n \in S} X_n |D_n| q_n / \sum_{n \in S} X_n |D_n|

(0 when no update arrives, spec A17). A cohort smaller than min(K, |A(t)|) is charged its
empty slots (`envs.cohort`): each counts as an update that always arrives, of quality 0
and the largest client's weight max_n |D_n|. Filling such a slot with any available
client (quality >= 0, weight <= max |D|) can only raise q̄ in every arrival pattern, so a
short or empty cohort is worth at most some full one, and never beats the oracle where the
oracle is exact (theta = 1); an empty cohort is worth `acc_low`. The set's accuracy target is
`acc_low + (acc_high - acc_low) * q̄_t`. Stationary form (the paper's `reset` reading,
spec A12): `acc_t` is the target plus Gaussian noise `noise`. Warm-start form: `acc_t =
acc_{t-1} + rate * (target - acc_{t-1}) + noise`, starting from `acc_low`. Every client
then reports its opinion (eq. 8's terms), `r_{t,n} = clip(acc_t + opinion_noise * eps_n,
0, 1)`; with `law="bernoulli"` the opinions are instead i.i.d. Bernoulli(E[acc_t]), so
that the set reward's expectation is exact for the theorem checks.

Feedback: `reward` holds every client's opinion, `observed` the selected clients (their
own opinion is their reward, FL&DA); `info["opinions"]` (f32[N]) holds all N opinions,
whose mean is the FL&FA reward (eq. 8). `RoundStats.expected_reward` is the exact
expected set reward E[mean opinion] (2^k arrival patterns of the selected clients; for
Gaussian opinions, the mean of each pattern's opinion clipped to [0, 1],
`clipped_normal_mean`, which is its accuracy while that lies several noise sds inside
[0, 1]), `reward` the realized mean opinion, `accuracy` the slot's accuracy.

Oracle: the k available clients maximising the long-run weighted quality
`sum theta|D| q / sum theta|D|` (Dinkelbach's iteration on top-k, exact for that
ratio). It is the exact best set when theta is 1 (every experiment but Fig. 10); for
theta < 1 the expected value of a set is not a ratio of sums, and the oracle is that
proxy's best set, valued exactly. In the warm-start form the regret is one-step
(the best set from the current accuracy).
"""

from __future__ import annotations

import itertools
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from fedjax_sel import validation
from fedjax_sel.envs import availability as availability_lib
from fedjax_sel.envs import cohort
from fedjax_sel.ops import count_true, top_k_mask
from fedjax_sel.types import Decision, Env, Feedback, RoundInput, RoundStats

LAWS = ("gaussian", "bernoulli")
_DINKELBACH_STEPS = 16


class OpinionSurrogateParams(NamedTuple):
    """The surrogate's parameters (a pytree; `vmap` may run over it).

    Attributes:
      quality: f32[N] fixed q_n, or None to draw the non-IID ones per trial.
      quality_low: f32[], low end of the non-IID qualities' uniform range.
      quality_high: f32[], high end of that range.
      sizes: f32[N], |D_n|.
      success: f32[N], theta_n in (0, 1].
      acc_low: f32[], accuracy at quality 0.
      acc_high: f32[], accuracy at quality 1.
      noise: f32[], sigma_g, the slot accuracy's noise.
      opinion_noise: f32[], sigma_o, each opinion's noise.
      rate: f32[], rho, the warm-start form's step towards the set's target.
      availability: the availability process's parameters.
    """

    quality: chex.Array | None
    quality_low: chex.Array
    quality_high: chex.Array
    sizes: chex.Array
    success: chex.Array
    acc_low: chex.Array
    acc_high: chex.Array
    noise: chex.Array
    opinion_noise: chex.Array
    rate: chex.Array
    availability: Any


class OpinionSurrogateState(NamedTuple):
    """One trial's instance.

    Attributes:
      quality: f32[N], q_n.
      accuracy: f32[], the last slot's accuracy (the warm-start form's starting point).
      availability: the availability process's state.
    """

    quality: chex.Array
    accuracy: chex.Array
    availability: Any


def clipped_normal_mean(mean: chex.Array, std: chex.Array) -> chex.Array:
    r"""E[clip(X, 0, 1)] for X ~ N(mean, std^2), elementwise: with a = -mean / std and
    b = (1 - mean) / std,

    .. math:: \mathrm{mean}\,(\Phi(b) - \Phi(a)) + \mathrm{std}\,(\varphi(a) -
       \varphi(b)) + 1 - \Phi(b),

    and clip(mean, 0, 1) where std is 0. Within several std of the ends' far side it is
    `mean` to the last bit of f32 (Phi rounds to 0 and 1, phi to below half an ulp)."""
    safe = jnp.where(std > 0, std, 1.0)
    a, b = -mean / safe, (1.0 - mean) / safe
    cdf_a, cdf_b = jax.scipy.special.ndtr(a), jax.scipy.special.ndtr(b)
    pdf = jax.scipy.stats.norm.pdf
    value = mean * (cdf_b - cdf_a) + safe * (pdf(a) - pdf(b)) + (1.0 - cdf_b)
    return jnp.where(std > 0, value, jnp.clip(mean, 0.0, 1.0))


def paper_sizes(num_clients: int, seed: int = 0) -> np.ndarray:
    """f32[N] data sizes of spec A14: Uniform{1000..4000} scaled by 20/N."""
    rng = np.random.default_rng(seed)
    return (rng.integers(1000, 4001, num_clients) * (20.0 / num_clients)).astype(np.float32)


def opinion_surrogate(
    num_clients: int,
    num_selected: int,
    quality: chex.Array | None = None,
    num_iid: int = 5,
    quality_range: tuple[float, float] = (0.2, 0.6),
    sizes: chex.Array | None = None,
    success=1.0,
    accuracy_range: tuple[float, float] = (0.60, 0.88),
    noise: float = 0.01,
    opinion_noise: float = 0.01,
    warm_start: bool = False,
    rate: float = 0.15,
    law: str = "gaussian",
    availability=1.0,
    seed: int = 0,
) -> Env:
    """The bandit-only surrogate of Tong et al.'s FL&FA / FL&DA slots (spec §8.4).

    Args:
      num_clients: N >= 1.
      num_selected: K, 1 <= K <= min(N, 12) (the expected reward enumerates 2^K
        arrival patterns).
      quality: f32[N] in [0, 1], fixed q_n; None draws them per trial: 1 for the first
        `num_iid` clients, uniform in `quality_range` for the others.
      num_iid: clients of quality 1 (the paper's IID clients 1..5), 0 <= num_iid <= N.
      quality_range: (low, high) in [0, 1] for the non-IID qualities.
      sizes: f32[N] > 0, |D_n|; None takes `paper_sizes(N, seed)`.
      success: theta_n in (0, 1], a scalar or f32[N] (Sec. II-A).
      accuracy_range: (acc_low, acc_high), the accuracy at quality 0 and 1, in [0, 1].
      noise: sigma_g >= 0 of the slot accuracy.
      opinion_noise: sigma_o >= 0 of each client's opinion.
      warm_start: the warm-start form (spec A12), else stationary.
      rate: rho in (0, 1], the warm-start step.
      law: "gaussian" opinions around the accuracy, or "bernoulli" opinions of the
        expected accuracy (exact expectations, theorem checks).
      availability: probability in [0, 1] (or f32[N]) that a client is available, or an
        availability process (`envs.availability`).
      seed: the seed of the default sizes, in [0, 2^32).
    """
    n = validation.positive_int("num_clients", num_clients)
    k = validation.num_selected(num_selected, n)
    validation.int_in_range("num_selected", k, 1, 12)
    iid = validation.int_in_range("num_iid", num_iid, 0, n)
    seed = validation.seed("seed", seed)
    q_low, q_high = validation.real_interval("quality_range", quality_range, 0.0, 1.0)
    if quality is not None:
        quality = jnp.asarray(validation.array_in_range("quality", quality, (n,), 0.0, 1.0))
    if sizes is None:
        sizes = paper_sizes(n, seed)
    sizes = validation.array_in_range("sizes", sizes, (n,), 1e-6)
    theta = validation.probabilities("success", success, n)
    if np.any(theta <= 0.0):
        raise ValueError(f"success (theta_n) must lie in (0, 1], got min {theta.min()}.")
    a_low, a_high = validation.real_interval("accuracy_range", accuracy_range, 0.0, 1.0)
    sigma_g = validation.float_in_range("noise", noise, 0.0, float("inf"))
    sigma_o = validation.float_in_range("opinion_noise", opinion_noise, 0.0, float("inf"))
    rho = validation.float_in_range("rate", rate, 0.0, 1.0, low_open=True)
    validation.choice("law", law, LAWS)
    process = availability_lib.resolve(availability, n)
    f32 = jnp.float32
    defaults = OpinionSurrogateParams(
        quality=quality,
        quality_low=f32(q_low),
        quality_high=f32(q_high),
        sizes=jnp.asarray(sizes),
        success=jnp.asarray(theta),
        acc_low=f32(a_low),
        acc_high=f32(a_high),
        noise=f32(sigma_g),
        opinion_noise=f32(sigma_o),
        rate=f32(rho),
        availability=process.params,
    )
    # f32[2^K, K]: every arrival pattern X of the K cohort slots.
    patterns = jnp.asarray(list(itertools.product((0.0, 1.0), repeat=k)), jnp.float32)

    def pattern_qualities(selected, available, quality, params):
        """(f32[2^K], f32[2^K]): each arrival pattern's probability and q̄ for the
        selected clients (bool[N]), the empty slots of a short cohort charged (module
        docstring)."""
        slots = jnp.nonzero(selected, size=k, fill_value=0)[0]
        size = jnp.sum(selected)
        valid = jnp.arange(k) < size
        empty = ~valid & (jnp.arange(k) < size + cohort.missing(count_true(selected), available, k))
        theta_s = jnp.where(valid, params.success[slots], jnp.where(empty, 1.0, 0.0))
        weight = jnp.where(valid, params.sizes[slots], jnp.where(empty, jnp.max(params.sizes), 0.0))
        prob = jnp.prod(patterns * theta_s + (1.0 - patterns) * (1.0 - theta_s), axis=1)
        total = patterns @ weight
        ratio = (patterns @ (weight * jnp.where(valid, quality[slots], 0.0))) / jnp.maximum(
            total, 1e-30
        )
        return prob, jnp.where(total > 0, ratio, 0.0)

    def goal(state, q_bar, params):
        """The accuracy's expectation given q̄ (module docstring)."""
        target = params.acc_low + (params.acc_high - params.acc_low) * q_bar
        if warm_start:
            return state.accuracy + params.rate * (target - state.accuracy)
        return target

    def expected_reward(state, selected, available, params):
        """E[mean opinion] of the selected clients: the expected accuracy (`law=
        "bernoulli"`, each opinion's probability), or, for the Gaussian law, each arrival
        pattern's mean of an opinion clipped to [0, 1], an opinion being normal about the
        pattern's accuracy with the slot's and its own noise (`clipped_normal_mean`)."""
        prob, q_bar = pattern_qualities(selected, available, state.quality, params)
        if law == "bernoulli":
            return goal(state, jnp.sum(prob * q_bar), params)
        spread = jnp.sqrt(params.noise**2 + params.opinion_noise**2)
        return jnp.sum(prob * clipped_normal_mean(goal(state, q_bar, params), spread))

    def reset(key, params=None):
        params = defaults if params is None else params
        if params.quality is not None:
            q = params.quality
        else:
            drawn = jax.random.uniform(
                jax.random.fold_in(key, 0),
                (n,),
                minval=params.quality_low,
                maxval=params.quality_high,
            )
            q = jnp.where(jnp.arange(n) < iid, 1.0, drawn)
        avail = process.init(jax.random.fold_in(key, 1), params.availability)
        return OpinionSurrogateState(q, params.acc_low, avail)

    def observe(state, t, key, params=None):
        params = defaults if params is None else params
        available = process.sample(state.availability, t, key, params.availability)
        return RoundInput(t=jnp.asarray(t, jnp.int32), available=available)

    def oracle(state, round_input, params=None):
        params = defaults if params is None else params
        weight = params.success * params.sizes

        def improve(_, ratio):
            chosen = top_k_mask(weight * (state.quality - ratio), round_input.available, k)
            mass = jnp.sum(jnp.where(chosen, weight, 0.0))
            return jnp.sum(jnp.where(chosen, weight * state.quality, 0.0)) / jnp.maximum(
                mass, 1e-30
            )

        ratio = lax.fori_loop(0, _DINKELBACH_STEPS, improve, jnp.float32(0.0))
        return Decision(top_k_mask(weight * (state.quality - ratio), round_input.available, k))

    def step(state, round_input, decision, key, params=None):
        params = defaults if params is None else params
        arrive_key, acc_key, opinion_key = jax.random.split(key, 3)
        selected = decision.selected
        arrived = selected & jax.random.bernoulli(arrive_key, params.success)
        empty = cohort.missing(count_true(selected), round_input.available, k)
        mass = jnp.sum(jnp.where(arrived, params.sizes, 0.0)) + empty * jnp.max(params.sizes)
        q_bar = jnp.where(
            mass > 0,
            jnp.sum(jnp.where(arrived, params.sizes * state.quality, 0.0))
            / jnp.maximum(mass, 1e-30),
            0.0,
        )
        accuracy = goal(state, q_bar, params) + params.noise * jax.random.normal(acc_key, ())
        expected = expected_reward(state, selected, round_input.available, params)
        if law == "gaussian":
            opinions = accuracy + params.opinion_noise * jax.random.normal(opinion_key, (n,))
            opinions = jnp.clip(opinions, 0.0, 1.0)
        else:
            opinions = jax.random.bernoulli(opinion_key, expected, (n,)).astype(jnp.float32)
        best = oracle(state, round_input, params).selected
        stats = RoundStats(
            expected_reward=expected,
            oracle_reward=expected_reward(state, best, round_input.available, params),
            reward=jnp.mean(opinions),
            latency=f32(0.0),
            num_failed=jnp.sum(selected & ~arrived).astype(jnp.float32),
            accuracy=accuracy,
        )
        feedback = Feedback(
            observed=selected,
            reward=opinions,
            latency=jnp.zeros((n,), jnp.float32),
            success=arrived,
            info={"opinions": opinions},
        )
        avail = process.update(state.availability, round_input.available, params.availability)
        return feedback, OpinionSurrogateState(state.quality, accuracy, avail), stats

    return Env(
        reset=reset,
        observe=observe,
        step=step,
        oracle=oracle,
        num_clients=n,
        params=defaults,
        num_selected=k,
    )
