"""The training-backed environment: cohort slots, feedback, a short run, bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bandits
import fedjax_sel
import models
from fedjax_sel import data as fed_data
from fedjax_sel import envs, fl
from fedjax_sel.envs.training_env import expected_client_reward
from fedjax_sel.results import Results
from fedjax_sel.types import Decision, RoundInput

N, CLASSES = 12, 3
FEATURES = (2, 2, 1)
TRAIN_SIZES = [9, 5, 12, 3] * 3


@pytest.fixture(scope="module")
def data():
    # Three well-separated 2x2 templates; unbalanced IID clients, held-out sets cut
    # from the test set (16-17 examples each).
    pool = fed_data.gaussian_mixture(
        seed=0,
        num_train=sum(TRAIN_SIZES),
        num_test=200,
        num_classes=CLASSES,
        image_shape=FEATURES,
        template_size=2,
        noise=0.5,
    )
    indices = fed_data.iid(pool.y, N, seed=0, sizes=TRAIN_SIZES)
    return fed_data.pack(pool, indices, seed=0, heldout_from_test=True)


@pytest.fixture(scope="module")
def model():
    return models.get("logistic_regression", FEATURES, CLASSES)


def _env(data, model, k, **kw):
    kw = {"learning_rate": 0.2, "batch_size": 4, **kw}
    return envs.make("training", N, k, data=data, model=model, **kw)


def _step(env, selected, assignment=None, seed=0):
    state = env.reset(jax.random.PRNGKey(seed))
    inp = env.observe(state, 1, jax.random.PRNGKey(1))
    dec = Decision(jnp.asarray(selected), assignment)
    return state, jax.jit(env.step)(state, inp, dec, jax.random.PRNGKey(2))


def test_unselected_slots_do_not_change_the_model(data, model):
    selected = np.zeros(N, bool)
    selected[[2, 7]] = True
    wide = _env(data, model, 5, feedback="opinions")
    narrow = _env(data, model, 2, feedback="opinions")
    start, (feedback, wide_state, stats) = _step(wide, selected)
    _, (_, narrow_state, _) = _step(narrow, selected)
    for a, b in zip(
        jax.tree.leaves(wide_state.server), jax.tree.leaves(narrow_state.server), strict=True
    ):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    moved = [
        float(jnp.abs(a - b).max())
        for a, b in zip(
            jax.tree.leaves(wide_state.server), jax.tree.leaves(start.server), strict=True
        )
    ]
    assert max(moved) > 1e-3
    # Test opinions: every client's held-out accuracy of the new model, all observed.
    _, acc = fl.evaluate_clients(
        model.apply, wide_state.server, data.x_heldout, data.y_heldout, data.heldout_counts
    )
    np.testing.assert_allclose(feedback.reward, acc, rtol=1e-6)
    assert bool(jnp.all(feedback.observed))
    loss, accuracy = fl.evaluate(model.apply, wide_state.server, data.x_test, data.y_test)
    np.testing.assert_allclose([stats.loss, stats.accuracy], [loss, accuracy], rtol=1e-6)
    # Nobody selected: the model stays exactly as it was.
    _, (_, same, stats) = _step(wide, np.zeros(N, bool))
    for a, b in zip(jax.tree.leaves(same.server), jax.tree.leaves(start.server), strict=True):
        np.testing.assert_array_equal(a, b)
    assert float(stats.latency) == 0.0


def test_decentralized_and_hierarchical_reduce_to_fedavg_in_the_env(data, model):
    # Clients 1, 5 and 9 hold 5 examples each, so FedAvg's weights are uniform too;
    # the fourth slot stays empty.
    selected = np.zeros(N, bool)
    selected[[1, 5, 9]] = True
    fedavg = _env(data, model, 4, drop_late=False)
    dfl = _env(data, model, 4, algorithm="decentralized", num_groups=3)
    # One edge server, cloud every round, no deadline: FedAvg with uniform weights.
    hfl = _env(data, model, 4, algorithm="hierarchical", num_groups=1, period=1)
    _, (_, a, _) = _step(fedavg, selected)
    _, (_, b, _) = _step(dfl, selected)
    _, (_, h, _) = _step(hfl, selected, assignment=jnp.zeros(N, jnp.int32))
    leaves = zip(
        jax.tree.leaves(a.server),
        jax.tree.leaves(b.server),
        jax.tree.leaves(h.server.edge_params),
        strict=True,
    )
    for u, v, w in leaves:
        np.testing.assert_allclose(u, v[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(v[0], v[2], rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(u, w[0], rtol=1e-5, atol=1e-6)
    assert int(h.server.round) == 1


def test_expected_client_reward_matches_monte_carlo():
    mu = np.array([0.5, 2.0, 4.0, 8.0], np.float32)
    spread, deadline = 0.6, 3.0
    rng = np.random.default_rng(0)
    tau = mu * (1 - spread + spread * rng.exponential(size=(200_000, 4)))
    success = expected_client_reward(jnp.asarray(mu), spread, deadline, "success")
    latency = expected_client_reward(jnp.asarray(mu), spread, deadline, "latency")
    # Standard errors are below 1.2e-3; 5e-3 is > 4 of them.
    np.testing.assert_allclose(success, (tau < deadline).mean(0), atol=5e-3)
    np.testing.assert_allclose(
        latency, (1 - np.minimum(tau, deadline) / deadline).mean(0), atol=5e-3
    )
    assert float(success[3]) == 0.0  # the shift 8 * 0.4 exceeds the deadline


def test_short_fedavg_run_learns_and_is_reproducible(data, model):
    env = _env(data, model, 4, feedback="latency", deadline_s=4.0, latency_range=(0.5, 3.0))
    policies = {"ucb": bandits.ucb(N, 4)}
    run = lambda: fedjax_sel.simulate(
        policies, env, num_rounds=12, num_trials=2, seed=3, progress=None
    )
    first, second = run(), run()
    for policy in policies:
        acc = first.curves[policy]["accuracy"]["mean"]
        # Chance is 1/3; 12 rounds of 4 clients reach 0.8 on this well-separated task.
        assert acc[-1] >= 0.8 and acc[0] < acc[-1], acc
        for metric, curve in first.curves[policy].items():
            np.testing.assert_array_equal(curve["mean"], second.curves[policy][metric]["mean"])
        assert fl.rounds_to_accuracy(first, policy, 0.8) <= 12
    assert np.all(first.curves["ucb"]["latency"]["mean"] <= 4.0)
    assert first.curves["ucb"]["cumulative_regret"]["mean"][-1] > 0


def test_time_and_rounds_to_accuracy_by_hand():
    curve = lambda v: {"mean": np.asarray(v, float), "std": np.zeros(len(v))}
    results = Results(
        config={"num_trials": 1, "num_rounds": 4},
        curves={
            "p": {
                "accuracy": curve([0.2, 0.5, 0.7, 0.6]),
                "cumulative_latency": curve([1.0, 3.0, 4.5, 9.0]),
            }
        },
        totals={},
        selection_fraction={},
    )
    assert fl.rounds_to_accuracy(results, "p", 0.5) == 2
    assert fl.time_to_accuracy(results, "p", 0.65) == 4.5
    assert fl.rounds_to_accuracy(results, "p", 0.9) is None
    assert fl.time_to_accuracy(results, "p", 0.9) is None


def test_local_accuracy_selects_the_worst_available_clients(data, model):
    env = _env(data, model, 3, observe_local_accuracy=True)
    state = env.reset(jax.random.PRNGKey(0))
    inp = env.observe(state, 1, jax.random.PRNGKey(1))
    _, acc = fl.evaluate_clients(
        model.apply, state.server, data.x_heldout, data.y_heldout, data.heldout_counts
    )
    np.testing.assert_allclose(inp.info["local_accuracy"], acc)
    selector = bandits.make("local_accuracy", 5, 2)
    available = jnp.array([True, True, False, True, True])
    scores = jnp.array([0.9, 0.4, 0.0, 0.7, 0.5])
    dec, _ = selector.select(
        (),
        RoundInput(jnp.int32(1), available, info={"local_accuracy": scores}),
        jax.random.PRNGKey(0),
    )
    np.testing.assert_array_equal(dec.selected, [False, True, False, False, True])
    with pytest.raises(ValueError, match="observe_local_accuracy"):
        selector.select((), RoundInput(jnp.int32(1), available), jax.random.PRNGKey(0))


@pytest.mark.parametrize(
    "k, kwargs, match",
    [
        (N + 1, {}, "num_selected"),
        (2, {"learning_rate": 0.0}, "learning_rate"),
        (2, {"num_epochs": 0}, "num_epochs"),
        (2, {"num_epochs": -1}, "num_epochs"),
        (2, {"algorithm": "fedprox"}, "algorithm"),
        (2, {"feedback": "latency"}, "deadline_s"),
        (2, {"feedback": "regret"}, "feedback"),
        (2, {"deadline_s": 0.0}, "deadline_s"),
        (2, {"latency_range": (3.0, 1.0)}, "latency_range"),
        (2, {"availability": 1.5}, "availability"),
        (
            2,
            {"algorithm": "hierarchical", "num_groups": 2, "client_group": [0, 2] * 6},
            "client_group",
        ),
    ],
)
def test_bad_arguments_fail_before_compile(data, model, k, kwargs, match):
    with pytest.raises(ValueError, match=match):
        _env(data, model, k, **kwargs)


def test_data_that_does_not_fit_the_model_is_rejected(data, model):
    with pytest.raises(ValueError, match="input_shape"):
        _env(data, models.get("logistic_regression", (2, 3, 1), CLASSES), 2)
    with pytest.raises(ValueError, match="classes"):
        _env(data, models.get("logistic_regression", FEATURES, CLASSES + 1), 2)
    with pytest.raises(ValueError, match="num_clients"):
        envs.make("training", N - 1, 2, data=data, model=model)
    with pytest.raises(ValueError, match="FederatedData"):
        envs.make("training", N, 2, data=(data.x, data.y), model=model)


def test_delay_env_supplies_rounds_latencies_and_feedback(data, model):
    delays = envs.make("dfl_delay", N, 1, num_servers=3, shard_size=50)
    env = _env(data, model, 3, algorithm="decentralized", num_groups=3, delay_env=delays)
    state = env.reset(jax.random.PRNGKey(0))
    inp = env.observe(state, 4, jax.random.PRNGKey(1))
    alone = delays.observe(state.delay, 4, jax.random.PRNGKey(1))
    np.testing.assert_array_equal(inp.context, alone.context)
    decision = env.oracle(state, inp)
    np.testing.assert_array_equal(decision.selected, delays.oracle(state.delay, inp).selected)
    feedback, new, stats = jax.jit(env.step)(state, inp, decision, jax.random.PRNGKey(2))
    delay_key = jax.random.split(jax.random.PRNGKey(2))[0]
    want, _, want_stats = delays.step(state.delay, inp, decision, delay_key)
    np.testing.assert_allclose(feedback.latency, want.latency, rtol=1e-6)
    np.testing.assert_allclose(feedback.reward, want.reward, rtol=1e-6)
    np.testing.assert_allclose(
        [stats.latency, stats.reward, stats.oracle_reward],
        [want_stats.latency, want_stats.reward, want_stats.oracle_reward],
        rtol=1e-6,
    )
    # The exact exchange leaves every server with the global model.
    params = jax.tree.map(lambda g: g[0], new.server)
    loss, accuracy = fl.evaluate(model.apply, params, data.x_test, data.y_test)
    np.testing.assert_allclose([stats.loss, stats.accuracy], [loss, accuracy], rtol=1e-6)
    assert float(jnp.abs(params["Dense_0"]["kernel"]).max()) > 1e-3
    with pytest.raises(ValueError, match="delay_env"):
        _env(data, model, 3, delay_env=envs.make("dfl_delay", 6, 1, num_servers=3))
    with pytest.raises(ValueError, match="observe_local_accuracy"):
        _env(data, model, 3, delay_env=delays, observe_local_accuracy=True)


def test_client_losses_and_a_cohort_above_k(data, model):
    env = _env(data, model, 2, feedback="accuracy")
    assert env.num_selected == 2 and env.oracle is None
    selected = np.zeros(N, bool)
    selected[[1, 4, 9]] = True  # one more than the k = 2 slots
    _, (feedback, _, stats) = _step(env, selected)
    assert stats.oracle_reward is None
    loss = np.asarray(feedback.info["client_loss"])
    assert np.all(loss[[1, 4]] > 0) and np.all(np.delete(loss, [1, 4]) == 0)
    # Client 9 was not trained: failed and unobserved, not dropped silently.
    np.testing.assert_array_equal(np.flatnonzero(feedback.observed), [1, 4])
    assert not feedback.success[9] and stats.num_failed == 1
