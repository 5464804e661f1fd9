r"""Tong et al.'s FL&FA and FL&DA time slots on the training engine (spec §2, §8.3).

Slot t: the selected set S_t (at most K clients) runs L FedAvg communication rounds.
In round l each member k trains E epochs of minibatch SGD (batch B) from the global
model, and its update reaches the server with X_k^l ~ Bernoulli(theta_k) (Sec. II-A,
i.i.d. over clients, rounds and slots); the server averages the arrived local models by
their data sizes, eq. (2),

.. math:: \omega^{l+1} = \sum_{k \in S_t} X_k^l |D_k| \omega_k^l
          / \sum_{k \in S_t} X_k^l |D_k|,

and keeps omega^l when nothing arrives (spec A17). After the L rounds every client n
evaluates the global model on its local test data: its opinion r_{t,n} (Sec. II-C), the
accuracy on its slice of the test set (`FederatedData.x_heldout`; disjoint IID slices of
the test set, spec A13, with `data.pack(..., heldout_from_test=True)`). With
`warm_start` (spec A12's default) slot t starts from slot t-1's model; otherwise every
slot starts from the initial model (the stationary bandit of the theory).

Feedback: `observed` is the selected set; `info["opinions"]` (f32[N]) holds all N
opinions, as the analytics step collects them (FA: uploaded to the server; DA: the
input of belief propagation); `info["arrivals"]` (f32[N]) how many of the L rounds each
client's update arrived; `info["round_loss"]` (f32[L]) the arrived clients' mean local
training loss per round, weighted by |D_k| (0 in a round where none arrived), Fig. 5(a);
`success` marks the selected clients whose update arrived in all L rounds. `reward` is
what a selected client learns:

  - FL&FA (`analytics="fa"`): the set reward, the mean opinion (eq. 8), for every client;
  - FL&DA (`analytics="da"`): its own opinion r_{t,n} (the terms of eq. 18).

`RoundStats.reward` (and `expected_reward`) is the mean opinion, problem (9)'s
objective in both frameworks; `accuracy` and `loss` are the global model's on the whole
test set, `num_failed` the selected updates lost per round (mean over the L rounds).
There is no oracle: the best set's expectation needs the training of every set (spec
A24 takes {1..5} as the optimum; `bandits.fixed` plays it), so regret is undefined and
`RoundStats.oracle_reward` is None. A short cohort trains the clients it has (its empty
slots train nothing and weigh 0 in eq. 2); without an oracle there is no pseudo-regret
for it to make negative. There is no delay model (Sec. II-A): latencies are 0.

The client graph of FL&DA (spec A6, 3-NN plus the minimum spanning tree in the 1 km
square; distances in km, couplings J = -C d^beta) belongs to belief propagation and is
built by `bandits.bp_ucb(N, K, graph_seed=s)`; `quick_init_ucb` and `bp_ucb` run on
this environment unchanged, as on `envs.opinion_surrogate`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import models
from fedjax_sel import data as fed_data
from fedjax_sel import validation
from fedjax_sel.data.federated import FederatedData
from fedjax_sel.envs import availability as availability_lib
from fedjax_sel.envs.training_env import check_data
from fedjax_sel.fl.aggregate import weighted_mean_update
from fedjax_sel.fl.client import local_sgd
from fedjax_sel.fl.evaluate import evaluate, evaluate_clients
from fedjax_sel.types import Env, Feedback, RoundInput, RoundStats
from models.base import Model

ANALYTICS = ("fa", "da")


class GoalDirectedParams(NamedTuple):
    """The environment's parameter pytree (`Env.params`).

    Attributes:
      success: f32[N], theta_n in (0, 1], the probability that an update arrives.
      availability: the availability process's parameters.
    """

    success: chex.Array
    availability: Any


class GoalDirectedState(NamedTuple):
    """One trial's run.

    Attributes:
      model: the global model omega^{t-1} (the initial model without `warm_start`).
      availability: the availability process's state.
    """

    model: Any
    availability: Any


def goal_directed_task(num_clients: int, seed: int = 0) -> tuple[FederatedData, Model]:
    """A small offline task built from sizes alone (registry, tests).

    Four classes of a Gaussian mixture of 2x2 images, split by `data.mixed_sizes` (the
    first min(5, N) clients IID, the others two labels each, unequal sizes; spec A14),
    local test sets as disjoint slices of the test set (A13), and a linear SVM (A15).
    """
    n = validation.positive_int("num_clients", num_clients)
    pool = fed_data.gaussian_mixture(
        seed=seed,
        num_train=48 * n,
        num_test=8 * n,
        num_classes=4,
        image_shape=(2, 2, 1),
        template_size=2,
        noise=0.5,
    )
    sizes = np.random.default_rng(seed).integers(8, 33, n)
    indices = fed_data.mixed_sizes(pool.y, n, seed=seed, num_iid=min(5, n), sizes=sizes)
    task = fed_data.pack(pool, indices, seed=seed, heldout_from_test=True)
    return task, models.get("linear_svm", (2, 2, 1), 4)


def goal_directed(
    num_clients: int,
    num_selected: int,
    analytics: str = "fa",
    data: FederatedData | None = None,
    model: Model | None = None,
    rounds_per_slot: int = 15,
    num_epochs: int = 10,
    batch_size: int = 100,
    learning_rate: float = 0.05,
    success=1.0,
    warm_start: bool = True,
    availability=1.0,
) -> Env:
    """Tong et al.'s slots of L FedAvg rounds judged by every client's opinion.

    Args:
      num_clients: N, the clients of `data`.
      num_selected: K, the most clients a slot trains (1 <= K <= N).
      analytics: "fa" (FL&FA, the server's set reward, eq. 8) or "da" (FL&DA, each
        client's own opinion); module docstring.
      data: the federated dataset; every client needs a local test set
        (`heldout_counts >= 1`). None, with `model` None, for `goal_directed_task`.
      model: the classifier, trained with its own loss (`models.default_loss`: the
        hinge loss for `linear_svm`, spec A15).
      rounds_per_slot: L >= 1 (15 in the paper).
      num_epochs: E >= 1 local epochs per round (10 in the paper).
      batch_size: B >= 1 (100 in the paper).
      learning_rate: the SGD step nu > 0. The paper's 1e-7 is for raw pixels (spec A15);
        on inputs in [0, 1] it is calibrated.
      success: theta_n in (0, 1], a scalar or f32[N] (1 in the paper; Fig. 10 also
        0.75 and 0.5).
      warm_start: slot t starts from slot t-1's model (spec A12), else from the
        initial one.
      availability: probability in [0, 1] (or f32[N]) that a client can be scheduled,
        or an availability process (`envs.availability`); 1 in the paper.

    Returns:
      An `Env` without an oracle (module docstring).
    """
    n = validation.positive_int("num_clients", num_clients)
    k = validation.num_selected(num_selected, n)
    validation.choice("analytics", analytics, ANALYTICS)
    rounds = validation.positive_int("rounds_per_slot", rounds_per_slot)
    validation.positive_int("num_epochs", num_epochs)
    validation.positive_int("batch_size", batch_size)
    validation.positive_float("learning_rate", learning_rate)
    validation.boolean("warm_start", warm_start)
    theta = validation.probabilities("success", success, n)
    if np.any(theta <= 0.0):
        raise ValueError(f"success (theta_n) must lie in (0, 1], got min {theta.min()}.")
    process = availability_lib.resolve(availability, n)
    if data is None and model is None:
        data, model = goal_directed_task(n)
    check_data(data, model, n)
    if np.any(np.asarray(data.heldout_counts) < 1):
        raise ValueError("data.heldout_counts must be >= 1: every client needs local test data.")
    update_fn = local_sgd(
        model.apply,
        learning_rate,
        batch_size,
        num_epochs,
        loss=models.default_loss(model.name),
    )
    sizes = jnp.asarray(data.counts)
    defaults = GoalDirectedParams(
        success=jnp.asarray(theta, jnp.float32), availability=process.params
    )

    def reset(key, params=None):
        params = defaults if params is None else params
        model_state = model.init(jax.random.fold_in(key, 0))
        return GoalDirectedState(model_state, process.init(key, params.availability))

    def observe(state, t, key, params=None):
        params = defaults if params is None else params
        available = process.sample(state.availability, t, key, params.availability)
        return RoundInput(t=jnp.asarray(t, jnp.int32), available=available)

    def train(weights, selected, success_prob, key):
        """L rounds of eq. (2) from `weights` with the selected clients (bool[N]).

        Returns the model, f32[N] arrivals per client and f32[L] mean training losses.
        """
        slots = jnp.nonzero(selected, size=k, fill_value=0)[0]
        valid = jnp.arange(k) < jnp.sum(selected)
        counts = jnp.where(valid, sizes[slots], 0)

        def one_round(weights, r):
            arrive_key, train_key = jax.random.split(jax.random.fold_in(key, r))
            arrived = valid & jax.random.bernoulli(arrive_key, success_prob[slots])
            keys = jax.vmap(lambda c: jax.random.fold_in(train_key, c))(slots)
            result = jax.vmap(update_fn, in_axes=(None, None, None, 0, 0, 0))(
                weights, data.x, data.y, slots, counts, keys
            )
            mass = jnp.where(arrived, counts, 0).astype(jnp.float32)
            weights = weighted_mean_update(weights, result.delta, mass)
            loss = jnp.sum(mass * result.loss) / jnp.maximum(jnp.sum(mass), 1.0)
            return weights, (arrived, loss)

        weights, (arrived, losses) = lax.scan(one_round, weights, jnp.arange(rounds))
        # Empty slots point at client 0; they are sent out of bounds and dropped.
        index = jnp.where(valid, slots, n)
        per_client = (
            jnp.zeros((n,), jnp.float32)
            .at[index]
            .add(jnp.sum(arrived, axis=0).astype(jnp.float32), mode="drop")
        )
        return weights, per_client, losses

    def step(state, round_input, decision, key, params=None):
        params = defaults if params is None else params
        selected = decision.selected
        weights, arrivals, round_loss = train(state.model, selected, params.success, key)
        _, opinions = evaluate_clients(
            model.apply, weights, data.x_heldout, data.y_heldout, data.heldout_counts
        )
        loss, accuracy = evaluate(model.apply, weights, data.x_test, data.y_test)
        value = jnp.mean(opinions)  # eq. (8)
        reward = jnp.full((n,), value) if analytics == "fa" else opinions
        lost = jnp.sum(jnp.where(selected, rounds - arrivals, 0.0)) / rounds
        stats = RoundStats(
            expected_reward=value,
            oracle_reward=None,
            reward=value,
            latency=jnp.float32(0.0),
            num_failed=lost,
            loss=loss,
            accuracy=accuracy,
        )
        feedback = Feedback(
            observed=selected,
            reward=reward,
            latency=jnp.zeros((n,), jnp.float32),
            success=selected & (arrivals == rounds),
            info={"opinions": opinions, "arrivals": arrivals, "round_loss": round_loss},
        )
        avail = process.update(state.availability, round_input.available, params.availability)
        model_state = weights if warm_start else state.model
        return feedback, GoalDirectedState(model_state, avail), stats

    return Env(
        reset=reset,
        observe=observe,
        step=step,
        oracle=None,
        num_clients=n,
        params=defaults,
        num_selected=k,
    )
