"""Tong et al.'s FL&FA / FL&DA environment (`envs.goal_directed`) against direct computation.

One slot of L FedAvg rounds equals a plain loop of full-batch gradient steps and eq. (2)'s
data-weighted average; the opinions are the new model's accuracies on each client's
test slice; the set reward is their mean (eq. 8); updates arrive at the rate theta.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sel import envs
from fedjax_sel.envs.goal_directed import goal_directed_task
from fedjax_sel.types import Decision

N = 6
SELECTED = (0, 3, 5)


def _slot(env, key=0):
    state = env.reset(jax.random.PRNGKey(0))
    inp = env.observe(state, 1, jax.random.PRNGKey(1))
    decision = Decision(jnp.isin(jnp.arange(N), jnp.array(SELECTED)))
    return jax.jit(env.step)(state, inp, decision, jax.random.PRNGKey(key))


def _hinge_step(kernel, bias, x, y, lr):
    """One full-batch step of the Crammer-Singer hinge loss, in float64 numpy; returns the
    new (kernel, bias) and the loss before the step. Tied rivals share the subgradient."""
    x = x.reshape(len(y), -1).astype(np.float64)
    scores = x @ kernel + bias
    rows = np.arange(len(y))
    others = np.where(np.eye(kernel.shape[1], dtype=bool)[y], -np.inf, scores)
    rival = others == others.max(1, keepdims=True)
    margin = 1.0 + others.max(1) - scores[rows, y]
    active = (margin > 0) / len(y)
    grad = rival * (active / rival.sum(1))[:, None]
    grad[rows, y] -= active
    return kernel - lr * x.T @ grad, bias - lr * grad.sum(0), np.maximum(margin, 0).mean()


def test_a_slot_is_l_rounds_of_fedavg_and_the_opinions_evaluate_the_new_model():
    data, model = goal_directed_task(N)
    rounds, epochs, lr = 3, 2, 0.1
    # One minibatch holds a client's whole data set: the shuffle cannot matter.
    kw = dict(data=data, model=model, rounds_per_slot=rounds, num_epochs=epochs)
    env = envs.make("fl_fa", N, len(SELECTED), batch_size=64, learning_rate=lr, **kw)
    feedback, state, stats = _slot(env)

    kernel, bias = np.zeros((4, 4)), np.zeros(4)  # the SVM's zero initialisation (A15)
    round_loss = []
    for _ in range(rounds):
        local, losses, sizes = [], [], []
        for c in SELECTED:
            count = int(data.counts[c])
            x, y = np.asarray(data.x[c, :count]), np.asarray(data.y[c, :count])
            w, steps = (kernel, bias), []
            for _ in range(epochs):
                *w, value = _hinge_step(*w, x, y, lr)
                steps.append(value)
            local.append(w)
            losses.append(np.mean(steps))
            sizes.append(count)
        share = np.asarray(sizes) / np.sum(sizes)  # eq. (2) with every X = 1
        kernel = sum(s * w[0] for s, w in zip(share, local, strict=True))
        bias = sum(s * w[1] for s, w in zip(share, local, strict=True))
        round_loss.append(np.dot(share, losses))
    got = state.model["Dense_0"]
    np.testing.assert_allclose(got["kernel"], kernel, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got["bias"], bias, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(feedback.info["round_loss"], round_loss, rtol=1e-5)

    # Opinions: each client's accuracy of the new model on its own test slice.
    opinions = np.asarray(feedback.info["opinions"])
    for c in range(N):
        h = int(data.heldout_counts[c])
        logits = model.apply(state.model, data.x_heldout[c, :h])
        assert opinions[c] == np.mean(np.argmax(logits, -1) == np.asarray(data.y_heldout[c, :h]))
    correct = np.argmax(model.apply(state.model, data.x_test), -1) == np.asarray(data.y_test)
    np.testing.assert_allclose(stats.accuracy, correct.mean(), rtol=1e-6)
    # FL&FA: every client learns the set reward, the mean opinion (eq. 8).
    np.testing.assert_allclose(stats.reward, opinions.mean(), rtol=1e-6)
    np.testing.assert_array_equal(stats.expected_reward, stats.reward)
    np.testing.assert_array_equal(feedback.reward, np.full(N, stats.reward))
    np.testing.assert_array_equal(feedback.observed, np.isin(np.arange(N), SELECTED))
    assert stats.oracle_reward is None and float(stats.num_failed) == 0.0


def test_updates_arrive_at_rate_theta_and_a_round_without_arrivals_keeps_the_model():
    theta = np.array([0.3, 0.9, 1.0, 1.0, 1.0, 1e-9], np.float32)
    rounds, slots = 15, 128
    env = envs.make("fl_da", N, 3, success=theta, rounds_per_slot=rounds, num_epochs=1)
    state = env.reset(jax.random.PRNGKey(0))
    inp = env.observe(state, 1, jax.random.PRNGKey(1))
    decision = Decision(jnp.isin(jnp.arange(N), jnp.array([0, 1, 5])))
    keys = jax.random.split(jax.random.PRNGKey(2), slots)
    step = jax.jit(jax.vmap(env.step, in_axes=(None, None, None, 0)))
    feedback, _, stats = step(state, inp, decision, keys)
    arrivals = np.asarray(feedback.info["arrivals"])
    # Each rate from slots x L Bernoulli draws; 4.5 standard errors (two-sided p < 1e-5).
    for c, p in ((0, 0.3), (1, 0.9)):
        rate = arrivals[:, c].mean() / rounds
        assert abs(rate - p) < 4.5 * np.sqrt(p * (1 - p) / (slots * rounds)), (c, rate)
    assert np.all(arrivals[:, 5] == 0) and np.all(arrivals[:, 2:5] == 0)
    np.testing.assert_allclose(stats.num_failed, (3 * rounds - arrivals.sum(1)) / rounds, 1e-6)
    # FL&DA: each client learns its own opinion; the set's value is still their mean.
    np.testing.assert_array_equal(feedback.reward, feedback.info["opinions"])
    np.testing.assert_allclose(stats.reward, feedback.reward.mean(1), rtol=1e-6)
    np.testing.assert_array_equal(feedback.success, arrivals == rounds)

    # theta ~ 0 for the only selected client: nothing arrives, the model stays put.
    _, after, stats = step(state, inp, Decision(jnp.arange(N) == 5), keys)
    same = lambda a, b: np.testing.assert_array_equal(a, np.broadcast_to(b, a.shape))
    jax.tree.map(same, after.model, state.model)
    np.testing.assert_array_equal(stats.num_failed, 1.0)


def test_without_warm_start_every_slot_starts_from_the_initial_model():
    env = envs.make("fl_fa", N, 2, warm_start=False, rounds_per_slot=2, num_epochs=1)
    _, state, _ = _slot(env)
    jax.tree.map(np.testing.assert_array_equal, state.model, env.reset(jax.random.PRNGKey(0)).model)


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        ({"success": 0.0}, "success"),
        ({"success": [0.5] * (N - 1)}, "success"),
        ({"rounds_per_slot": 0}, "rounds_per_slot"),
        ({"warm_start": "yes"}, "warm_start"),
        ({"learning_rate": -1.0}, "learning_rate"),
    ],
)
def test_bad_input_names_the_argument(kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        envs.make("fl_fa", N, 2, **kwargs)


def test_clients_without_local_test_data_are_refused():
    data, model = goal_directed_task(N)
    data = data._replace(heldout_counts=data.heldout_counts.at[2].set(0))
    with pytest.raises(ValueError, match="heldout_counts"):
        envs.make("fl_da", N, 2, data=data, model=model)
