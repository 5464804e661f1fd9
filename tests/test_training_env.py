"""The training-backed environment: cohort slots, feedback, a short run, bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import bandits
import fedjax_sel
import models
from fedjax_sel import data as fed_data
from fedjax_sel import envs, fl
from fedjax_sel.envs.training_env import expected_client_reward
from fedjax_sel.results import Results
from fedjax_sel.types import Decision, Env, Feedback, RoundInput, RoundStats

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


@pytest.mark.parametrize("server", [-1, 2, 1])
def test_a_server_out_of_range_is_refused_not_dropped(data, model, server):
    # Hierarchical FL with 2 edge servers: a selected client sent to server -1 or 2 was
    # trained from the nearest edge's model and its update left out of every edge.
    def select(state, inp, key):
        selected = jnp.arange(N) < 2
        return Decision(selected, jnp.where(selected, server, -1).astype(jnp.int32)), state

    policy = fedjax_sel.Selector(
        init=lambda key: (), select=select, update=lambda state, decision, feedback: state
    )
    env = _env(data, model, 2, algorithm="hierarchical", num_groups=2)
    if server == 1:
        assert fedjax_sel.simulate(policy, env, 2, 2, progress=None).num_rounds == 2
        return
    with pytest.raises(ValueError, match=r"does not accept in 4 rounds(.|\n)*Env.feasible"):
        fedjax_sel.simulate(policy, env, 2, 2, progress=None)


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


def test_clients_in_chunks_train_as_the_vmap_layout(data, model):
    # A round of 2 trials x 4 slots in chunks of 3 of the flattened (trial, slot) axis:
    # the same feedback, model and statistics as the default `vmap` of every slot, up
    # to float32 rounding.
    selected = np.zeros((2, N), bool)
    selected[0, [1, 4, 6, 9]] = selected[1, [0, 2, 3, 11]] = True

    def one_round(env):
        def trial(key, chosen):
            state = env.reset(key)
            inp = env.observe(state, 1, key)
            return state.server, env.step(state, inp, Decision(chosen), key)

        return jax.jit(jax.vmap(trial))(jax.random.split(jax.random.PRNGKey(0), 2), selected)

    start, vmapped = one_round(_env(data, model, 4))
    _, chunked = one_round(_env(data, model, 4, client_chunk=3))
    for a, b in zip(jax.tree.leaves(chunked), jax.tree.leaves(vmapped), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    moved = jax.tree.map(lambda a, b: float(jnp.abs(a - b).max()), vmapped[1].server, start)
    assert max(jax.tree.leaves(moved)) > 1e-3


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
        (2, {"probe_batch_size": 0}, "probe_batch_size"),
        (2, {"observe_client_loss": "yes"}, "observe_client_loss"),
        (2, {"client_chunk": 0}, "client_chunk"),
        (2, {"algorithm": "hierarchical", "weighting": "example"}, "weighting"),
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
    loss = np.asarray(feedback.info["loss"])
    assert np.all(loss[[1, 4]] > 0) and np.all(np.delete(loss, [1, 4]) == 0)
    # Client 9 was not trained: failed and unobserved, not dropped silently.
    np.testing.assert_array_equal(np.flatnonzero(feedback.observed), [1, 4])
    assert not feedback.success[9] and stats.num_failed == 1


TRAINING_KEYS = ("loss", "loss_rms", "loss_rms_last_batch", "num_samples")
PROBE_KEYS = ("loss", "loss_minibatch", "data_size", "data_fraction", "num_samples")


def test_training_statistics_in_the_feedback_equal_each_client_update(data, model):
    env = _env(data, model, 3, num_steps=2)
    selected = np.zeros(N, bool)
    selected[[0, 2, 7]] = True  # 9, 12 and 3 examples
    state, (feedback, _, _) = _step(env, selected)
    info = {key: np.asarray(feedback.info[key]) for key in TRAINING_KEYS}
    # |B_i| = min(count, num_steps * batch_size) for every client, trained or not.
    np.testing.assert_array_equal(info["num_samples"], np.minimum(TRAIN_SIZES, 2 * 4))
    update = fl.local_sgd(model.apply, 0.2, 4, num_epochs=None, num_steps=2)
    train_key = jax.random.split(jax.random.PRNGKey(2))[1]
    for c in np.flatnonzero(selected):
        want = update(
            state.server, data.x, data.y, c, data.counts[c], jax.random.fold_in(train_key, c)
        )
        got = [info[key][c] for key in ("loss", "loss_rms", "loss_rms_last_batch")]
        np.testing.assert_allclose(got, [want.loss, want.loss_rms, want.last_loss_rms], rtol=1e-5)
        assert info["loss_rms"][c] > info["loss"][c] > 0
    for key in ("loss", "loss_rms", "loss_rms_last_batch"):
        assert np.all(np.delete(info[key], np.flatnonzero(selected)) == 0.0)


@pytest.mark.parametrize(
    "name, loss, want_loss",
    [
        ("linear_svm", None, models.losses.multiclass_hinge),
        ("logistic_regression", None, models.losses.softmax_cross_entropy),
        ("logistic_regression", models.losses.multiclass_hinge, models.losses.multiclass_hinge),
    ],
)
def test_clients_train_with_the_models_own_loss_or_the_one_given(data, name, loss, want_loss):
    # The global model after one FedAvg round of one client is its start plus that
    # client's update under the loss the model is trained with (the hinge loss of a
    # linear SVM, models.default_loss), exactly; under the other loss it is not.
    svm = models.get(name, FEATURES, CLASSES)
    env = _env(data, svm, 1, loss=loss)
    selected = np.zeros(N, bool)
    selected[2] = True
    state, (_, new_state, _) = _step(env, selected)
    train_key = jax.random.split(jax.random.PRNGKey(2))[1]
    for candidate in (models.losses.multiclass_hinge, models.losses.softmax_cross_entropy):
        update = fl.local_sgd(svm.apply, 0.2, 4, loss=candidate)
        result = update(
            state.server, data.x, data.y, 2, data.counts[2], jax.random.fold_in(train_key, 2)
        )
        want = jax.tree.map(jnp.add, state.server, result.delta)
        equal = jax.tree.map(np.array_equal, new_state.server, want)
        assert all(jax.tree.leaves(equal)) == (candidate is want_loss), candidate


def _edge_model_is_update_of(data, model, state, new_state, client):
    """Whether edge 0's model is the start plus `client`'s update alone (step key 2)."""
    train_key = jax.random.split(jax.random.PRNGKey(2))[1]
    update = fl.local_sgd(model.apply, 0.2, 4, num_epochs=1)
    start = jax.tree.map(lambda e: e[0], state.server.edge_params)
    result = update(
        start, data.x, data.y, client, data.counts[client], jax.random.fold_in(train_key, client)
    )
    want = jax.tree.map(jnp.add, start, result.delta)
    got = jax.tree.map(lambda e: e[0], new_state.server.edge_params)
    return all(jax.tree.leaves(jax.tree.map(np.array_equal, got, want)))


def test_fastest_z_fallback_takes_the_fastest_late_client(data, model):
    # Nobody meets the 1 s deadline; Z = 1, so the edge server waits for the fastest
    # selected client: client 1 (about 2 s), not client 0 (about 10 s), although both
    # report the capped latency of 1 s (Qu et al. eq. 6).
    mean = np.full(N, 5.0, np.float32)
    mean[:2] = [10.0, 2.0]
    env = _env(
        data,
        model,
        2,
        algorithm="hierarchical",
        period=100,
        mean_latency=mean,
        latency_spread=0.01,
        deadline_s=1.0,
        feedback="success",
    )
    selected = np.zeros(N, bool)
    selected[:2] = True
    state, (feedback, new_state, _) = _step(env, selected)
    np.testing.assert_array_equal(feedback.latency[:2], [1.0, 1.0])
    assert not np.any(feedback.success)
    assert _edge_model_is_update_of(data, model, state, new_state, 1)
    assert not _edge_model_is_update_of(data, model, state, new_state, 0)


def test_fastest_z_fallback_on_qus_network_ranks_the_uncapped_times(data, model):
    # envs.hierarchical reports times capped at its deadline and the times themselves
    # (eq. 5) in Feedback.info; with a deadline nobody meets, the edge server takes the
    # selected client of least time, whatever its index.
    delays = envs.make("hierarchical", N, None, num_servers=1, availability=1.0, deadline_s=0.01)
    env = _env(data, model, 4, algorithm="hierarchical", period=100, delay_env=delays)
    selected = np.zeros(N, bool)
    selected[[0, 3, 5, 9]] = True
    assignment = np.where(selected, 0, -1).astype(np.int32)
    state, (feedback, new_state, _) = _step(env, selected, assignment)
    time = np.asarray(feedback.info["uncapped_latency"])
    assert not np.any(feedback.success)
    np.testing.assert_array_equal(
        feedback.latency, np.where(selected, 0.01, 0.0).astype(np.float32)
    )
    assert np.all(time[selected] > 0.01) and np.all(time[~selected] == 0.0)
    fastest = int(np.flatnonzero(selected)[np.argmin(time[selected])])
    assert fastest != 0, time  # the seed's draw; the old rule took the lowest index
    assert _edge_model_is_update_of(data, model, state, new_state, fastest)


def test_observed_client_losses_equal_direct_evaluation(data, model):
    env = _env(data, model, 3, observe_client_loss=True, probe_batch_size=5)
    # One round first, so that the clients' losses of the model differ.
    _, (_, state, _) = _step(env, np.arange(N) < 3)
    inp = env.observe(state, 2, jax.random.PRNGKey(4))
    counts = np.asarray(data.counts)
    np.testing.assert_array_equal(inp.info["num_samples"], counts)
    np.testing.assert_allclose(inp.info["data_fraction"], counts / counts.sum(), rtol=1e-6)
    np.testing.assert_array_equal(inp.info["data_size"], counts)
    loss, _ = fl.evaluate_clients(model.apply, state.server, data.x, data.y, data.counts)
    np.testing.assert_allclose(inp.info["loss"], loss, rtol=1e-6)
    # A minibatch of 5 drawn without replacement is all of a client's data if it has <= 5.
    small = counts <= 5
    np.testing.assert_allclose(inp.info["loss_minibatch"][small], loss[small], rtol=1e-5)
    # Larger clients: the minibatch mean is unbiased, with the variance of sampling 5 of
    # n without replacement, s^2 / 5 * (n - 5) / (n - 1) (s^2 the population variance).
    draws = 400
    keys = jax.random.split(jax.random.PRNGKey(5), draws)
    probe = jax.jit(jax.vmap(lambda key: env.observe(state, 2, key).info["loss_minibatch"]))
    minibatch = np.asarray(probe(keys))
    for c in np.flatnonzero(~small):
        n = counts[c]
        logits = model.apply(state.server, data.x[c, :n])
        each = np.asarray(optax.softmax_cross_entropy_with_integer_labels(logits, data.y[c, :n]))
        var = each.var() / 5 * (n - 5) / (n - 1)
        assert var > 1e-4 and minibatch[:, c].std() > 0
        assert abs(minibatch[:, c].mean() - each.mean()) < 4 * np.sqrt(var / draws)
        # Drawn with replacement, the variance would be (n - 1) / (n - 5) times larger
        # (1.57 to 2 here); 400 draws estimate it to about 7%.
        np.testing.assert_allclose(minibatch[:, c].var(), var, rtol=0.3)
    both = _env(data, model, 3, observe_client_loss=True, observe_local_accuracy=True)
    inp = both.observe(state, 2, jax.random.PRNGKey(4))
    assert set(inp.info) == {"local_accuracy", *PROBE_KEYS}


def _fake_delay_env(n):
    """A delay model with surrogate values under the contract's names: every client is
    available, odd clients' updates arrive late."""
    surrogate = jnp.full((n,), -1.0)

    def reset(key, params=None):
        return jnp.zeros((), jnp.int32)

    def observe(state, t, key, params=None):
        info = {key: surrogate for key in PROBE_KEYS} | {"speed": jnp.arange(n) + 0.5}
        return RoundInput(jnp.asarray(t, jnp.int32), jnp.ones((n,), bool), info=info)

    def step(state, round_input, decision, key, params=None):
        success = decision.selected & (jnp.arange(n) % 2 == 0)
        info = {key: surrogate for key in TRAINING_KEYS[1:]} | {"duration": jnp.arange(n) + 1.0}
        feedback = Feedback(
            decision.selected, success.astype(jnp.float32), jnp.ones((n,)), success, info=info
        )
        zero = jnp.float32(0.0)
        return feedback, state + 1, RoundStats(zero, None, zero, zero, zero)

    return Env(reset, observe, step, None, n)


def test_real_statistics_override_the_delay_envs(data, model):
    kw = {"num_steps": 2, "observe_client_loss": True, "probe_batch_size": 4}
    plain = _env(data, model, 4, **kw)
    delayed = _env(data, model, 4, delay_env=_fake_delay_env(N), **kw)
    selected = np.zeros(N, bool)
    selected[[1, 2, 6, 11]] = True
    # The same key trains the same cohort from the same model in both.
    _, (want, _, _) = _step(plain, selected)
    state, (got, new, _) = _step(delayed, selected)
    inp = delayed.observe(state, 1, jax.random.PRNGKey(1))
    alone = plain.observe(plain.reset(jax.random.PRNGKey(0)), 1, jax.random.PRNGKey(1))
    for key in PROBE_KEYS:
        np.testing.assert_array_equal(inp.info[key], alone.info[key])
    np.testing.assert_array_equal(inp.info["speed"], np.arange(N) + 0.5)
    for key in TRAINING_KEYS:
        np.testing.assert_array_equal(got.info[key], want.info[key])
    np.testing.assert_array_equal(got.info["duration"], np.arange(N) + 1.0)
    assert np.all(np.asarray(got.info["loss_rms"])[selected] > 0)
    # The delay model's success still decides which updates arrive.
    np.testing.assert_array_equal(np.flatnonzero(got.success), [2, 6])
    assert int(new.delay) == 1


def test_training_on_heterogeneous_devices(data, model):
    # FedScale's round: 4 selected, the 3 fastest kept; every client online, no dropouts.
    devices = envs.make(
        "devices",
        N,
        4,
        num_kept=3,
        availability=1.0,
        mean_session_s=None,
        data_size=np.asarray(TRAIN_SIZES, np.float32),
        batch_size=4,
        local_steps=3,
        probe_batch_size=4,
    )
    kw = {"num_steps": 3, "observe_client_loss": True, "probe_batch_size": 4}
    env = _env(data, model, 4, delay_env=devices, **kw)
    state = env.reset(jax.random.PRNGKey(0))
    inp = env.observe(state, 1, jax.random.PRNGKey(1))
    alone = _env(data, model, 4, **kw).observe(state, 1, jax.random.PRNGKey(1))
    for key in PROBE_KEYS:
        np.testing.assert_array_equal(inp.info[key], alone.info[key])
    assert "duration_s" in inp.info  # the device profile passes through
    results = fedjax_sel.simulate(
        {"oort": bandits.make("oort", N, 4)}, env, num_rounds=5, num_trials=2, seed=0, progress=None
    )
    curves = results.curves["oort"]
    assert np.all(curves["extra/kept"]["mean"] <= 3) and np.all(curves["latency"]["mean"] > 0)
    np.testing.assert_allclose(
        curves["failed"]["mean"], curves["num_selected"]["mean"] - curves["extra/kept"]["mean"]
    )
    acc = curves["accuracy"]["mean"]
    assert acc[-1] > max(acc[0], 0.8), acc


def test_local_data_from_the_delay_env_trains_on_exactly_d_k_t_examples():
    # One-hot examples (client c owns features 8c .. 8c + 7) and a linear model without
    # bias from zero weights: an example's row of the weights moves iff it was trained on.
    # One step of client c's D_c(t) examples moves each of their rows by
    # -lr / D_c (1/C - onehot(y)); weighted by D_c(t) / sum D(t) (eqs. 4-5, spec A6), every
    # moved row of the new global model is -lr / sum D(t) (1/C - onehot(y)).
    clients, n_max, classes, lr = 6, 8, 3, 0.3
    x = jnp.eye(clients * n_max).reshape(clients, n_max, clients * n_max)
    y = jnp.arange(clients * n_max).reshape(clients, n_max) % classes
    counts = jnp.full((clients,), n_max, jnp.int32)
    images = fed_data.FederatedData(
        x, y, counts, x[:, :0], y[:, :0], jnp.zeros(clients, jnp.int32), x[0], y[0], classes
    )
    linear = models.base.Model(
        init=lambda key: jnp.zeros((clients * n_max, classes)),
        apply=lambda p, xb: xb @ p,
        name="linear",
        input_shape=(clients * n_max,),
        num_classes=classes,
    )
    delays = envs.make("dfl_delay", clients, 1, num_servers=3, shard_size=n_max)
    env = envs.make(
        "training",
        clients,
        3,
        data=images,
        model=linear,
        algorithm="decentralized",
        num_groups=3,
        learning_rate=lr,
        batch_size=n_max,
        delay_env=delays,
        local_data="delay_env",
    )
    step = jax.jit(env.step)
    for seed in range(5):
        state = env.reset(jax.random.PRNGKey(seed))
        inp = env.observe(state, 1, jax.random.PRNGKey(10 + seed))
        decision = env.oracle(state, inp)
        feedback, new, _ = step(state, inp, decision, jax.random.PRNGKey(seed))
        used = np.asarray(inp.info.num_samples)
        chosen = np.asarray(decision.selected)
        weights = np.asarray(jax.tree.map(lambda g: g[0], new.server))
        moved = np.any(weights != 0, axis=1).reshape(clients, n_max)
        np.testing.assert_array_equal(moved.sum(1), np.where(chosen, used, 0))
        total = used[chosen].sum()
        row = -lr / total * (1 / classes - np.eye(classes)[np.asarray(y).ravel()])
        np.testing.assert_allclose(weights, np.where(moved.reshape(-1, 1), row, 0.0), atol=1e-6)
        np.testing.assert_array_equal(feedback.info["num_samples"], used)
    with pytest.raises(ValueError, match="local_data"):
        envs.make("training", clients, 3, data=images, model=linear, local_data="delay_env")
    with pytest.raises(ValueError, match="local_data"):
        envs.make("training", clients, 3, data=images, model=linear, local_data="some")


def test_loss_on_train_is_the_mean_of_the_clients_mean_losses(data, model):
    # Chen et al. eq. (1): F(g) = (1/N) sum_i F_i(g), F_i the mean over client i's examples
    # (unequal clients here, so this differs from the mean over all examples).
    env = _env(data, model, 3, loss_on="train")
    selected = np.zeros(N, bool)
    selected[[0, 5, 10]] = True
    _, (_, new, stats) = _step(env, selected)
    losses = []
    for i in range(N):
        logits = model.apply(new.server, data.x[i, : data.counts[i]])
        labels = data.y[i, : data.counts[i]]
        losses.append(float(optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()))
    np.testing.assert_allclose(stats.loss, np.mean(losses), rtol=1e-5)
    assert (
        abs(
            float(stats.loss)
            - float(fl.evaluate(model.apply, new.server, data.x_test, data.y_test)[0])
        )
        > 1e-4
    )
    with pytest.raises(ValueError, match="loss_on"):
        _env(data, model, 3, loss_on="heldout")
