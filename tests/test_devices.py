"""The heterogeneous-device environment (`envs.devices`) against hand-worked cases, NumPy
loops and the laws of its random parts."""

import json
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sel import envs
from fedjax_sel.envs import availability, devices
from fedjax_sel.types import Decision

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _play(env, decide, num_rounds, seed=0):
    """Plays `num_rounds` rounds with jitted `observe` and `step`; `decide(t, inp, rng)`
    returns the Decision. Returns per round (state before, input, decision, feedback,
    state after, stats), as NumPy trees."""
    observe, step = jax.jit(env.observe), jax.jit(env.step)
    key = jax.random.PRNGKey(seed)
    state = jax.jit(env.reset)(key)
    rng = np.random.default_rng(seed)
    rounds = []
    for t in range(1, num_rounds + 1):
        k_obs, k_step = jax.random.split(jax.random.fold_in(key, t))
        inp = observe(state, t, k_obs)
        decision = decide(t, jax.tree.map(np.asarray, inp), rng)
        feedback, new_state, stats = step(state, inp, decision, k_step)
        rounds.append(jax.tree.map(np.asarray, (state, inp, decision, feedback, new_state, stats)))
        state = new_state
    return rounds


def _all_available(t, inp, rng):
    del t, rng
    return Decision(jnp.asarray(inp.available))


def _fedscale_duration(c, w, batch, steps, model_kbit):
    """FedScale's `get_completion_time`, float64: computation plus communication."""
    c, w = np.asarray(c, np.float64), np.asarray(w, np.float64)
    return 3.0 * batch * steps * c / 1000.0 + (model_kbit + model_kbit) / w


# Hand-built devices: durations 50, 100, 103, 65, 125 s with batch 10, 10 steps, 1000 kbit.
C_MS = np.array([100.0, 200.0, 310.0, 150.0, 250.0], np.float32)
W_KBPS = np.array([100.0, 50.0, 200.0, 100.0, 40.0], np.float32)
HAND = dict(
    compute_ms=C_MS,
    bandwidth_kbps=W_KBPS,
    batch_size=10,
    local_steps=10,
    model_size_kbit=1000.0,
)
HAND_DURATION = _fedscale_duration(C_MS, W_KBPS, 10, 10, 1000.0)


def test_durations_equal_the_fedscale_formula():
    env = devices.devices(5, 5, availability=1.0, mean_session_s=None, **HAND)
    ((_, inp, _, feedback, state, stats),) = _play(env, _all_available, 1)
    np.testing.assert_allclose(HAND_DURATION, [50.0, 100.0, 103.0, 65.0, 125.0])
    np.testing.assert_allclose(feedback.latency, HAND_DURATION, rtol=1e-6)
    np.testing.assert_allclose(inp.info["duration_s"], HAND_DURATION, rtol=1e-6)
    assert feedback.observed.all() and feedback.success.all()
    np.testing.assert_allclose(feedback.reward, 100.0 / (100.0 + HAND_DURATION), rtol=1e-6)
    np.testing.assert_allclose(stats.latency, 125.0, rtol=1e-6)
    np.testing.assert_allclose(state.clock_s, 125.0, rtol=1e-6)
    np.testing.assert_allclose(stats.reward, np.sum(100.0 / (100.0 + HAND_DURATION)), rtol=1e-6)
    assert stats.oracle_reward is None and float(stats.num_failed) == 0.0
    assert {k: float(v) for k, v in stats.extras.items()} == {
        "probe_time_s": 0.0,
        "probed_clients": 0.0,
        "kept": 5.0,
        "stragglers": 0.0,
        "dropped": 0.0,
    }


def test_default_durations_span_one_to_two_orders_of_magnitude():
    env = devices.devices(4000, 10)
    state = env.reset(jax.random.PRNGKey(0))
    inp = env.observe(state, 1, jax.random.PRNGKey(1))
    d = np.asarray(inp.info["duration_s"])
    low, median, high = np.quantile(d, [0.05, 0.5, 0.95])
    assert 10.0 < high / low < 100.0, (low, high)
    assert 50.0 < median < 200.0
    # Heavy-tailed draws: the log-scale of each lognormal is its sigma (sd of the sample
    # standard deviation of 4000 normals: sigma / sqrt(8000), about 0.01).
    np.testing.assert_allclose(np.log(state.compute_ms).std(), 0.8, atol=0.05)
    np.testing.assert_allclose(np.log(state.bandwidth_kbps).std(), 1.0, atol=0.05)
    np.testing.assert_allclose(np.log(state.loss_gap).std(), 1.0, atol=0.05)
    np.testing.assert_allclose(np.median(state.loss_gap), 0.5, rtol=0.1)
    # |B_i| = min(n_i, B L) and p_i = n_i / sum n.
    assert np.asarray(inp.info["num_samples"]).max() == 600.0
    np.testing.assert_allclose(np.sum(inp.info["data_fraction"]), 1.0, rtol=1e-5)


def test_over_commitment_keeps_exactly_the_fastest_completed():
    n, m, k = 10, 7, 3
    env = devices.devices(
        n,
        m,
        num_kept=k,
        availability=availability.markov(0.5, 0.2, n),
        mean_session_s=200.0,
        duration_noise=0.3,
        idle_s=17.0,
    )

    def decide(t, inp, rng):
        del t
        avail = np.flatnonzero(inp.available)
        size = rng.integers(0, min(m, avail.size) + 1)
        selected = np.zeros(n, bool)
        selected[rng.choice(avail, size, replace=False)] = True
        return Decision(jnp.asarray(selected))

    totals = np.zeros(3)
    for before, _, decision, fb, after, stats in _play(env, decide, 40):
        selected = np.asarray(decision.selected)
        observed, success = fb.observed, fb.success
        assert not np.any(observed & ~selected)
        order = np.flatnonzero(observed)[np.argsort(fb.latency[observed], kind="stable")]
        want = np.zeros(n, bool)
        want[order[:k]] = True
        np.testing.assert_array_equal(success, want)
        assert np.all(fb.latency[observed] > 0) and np.all(fb.latency[~observed] == 0)
        round_s = fb.latency[success].max() if success.any() else 17.0
        np.testing.assert_allclose(stats.latency, round_s, rtol=1e-6)
        np.testing.assert_allclose(after.clock_s, before.clock_s + stats.latency, rtol=1e-6)
        kept, stragglers = success.sum(), (observed & ~success).sum()
        dropped = selected.sum() - observed.sum()
        assert float(stats.num_failed) == selected.sum() - kept
        assert float(stats.extras["kept"]) == kept
        assert float(stats.extras["stragglers"]) == stragglers
        assert float(stats.extras["dropped"]) == dropped
        np.testing.assert_allclose(stats.reward, np.sum(fb.reward[success]), rtol=1e-6)
        totals += [stragglers, dropped, not success.any()]
    # The rounds exercised stragglers, dropouts and rounds where nobody was kept.
    assert np.all(totals > 0), totals


def test_dropouts_follow_the_exponential_session_hazard():
    # Durations 50..125 s against mean sessions of 100 and 400 s.
    session = np.array([100.0, 400.0, 100.0, 400.0, 100.0], np.float32)
    env = devices.devices(5, 5, availability=1.0, mean_session_s=session, **HAND)
    state = env.reset(jax.random.PRNGKey(0))
    inp = env.observe(state, 1, jax.random.PRNGKey(1))
    decision = Decision(jnp.ones(5, bool))
    draws = 4000
    keys = jax.random.split(jax.random.PRNGKey(2), draws)
    feedback = jax.jit(jax.vmap(lambda key: env.step(state, inp, decision, key)[0]))(keys)
    completed = np.asarray(feedback.observed).mean(axis=0)
    p = np.exp(-HAND_DURATION / session)
    np.testing.assert_allclose(completed, p, atol=4.0 * np.sqrt(p * (1 - p) / draws).max())


def test_probe_costs_add_exactly():
    # Client 4 is never available: its probe is ignored.
    env = devices.devices(
        5, 5, num_kept=2, availability=[1.0, 1.0, 1.0, 1.0, 0.0], mean_session_s=None, **HAND
    )
    probe = np.array([10.0, 0.0, 40.0, 5.0, 1000.0], np.float32)
    for with_probe in (False, True):

        def decide(t, inp, rng, with_probe=with_probe):
            del t, rng
            return Decision(jnp.asarray(inp.available), probe=probe if with_probe else None)

        ((_, _, _, fb, _, stats),) = _play(env, decide, 1)
        asked = probe[:4] > 0
        cost = 1000.0 / W_KBPS[:4].astype(np.float64) + probe[:4] * C_MS[:4] / 1000.0
        probe_s = cost[asked].max() if with_probe else 0.0
        # Kept: the 2 fastest of clients 0..3 (50 and 65 s); the probes do not change the
        # clients' own latencies.
        np.testing.assert_array_equal(fb.success, [True, False, False, True, False])
        np.testing.assert_allclose(fb.latency[:4], HAND_DURATION[:4], rtol=1e-6)
        np.testing.assert_allclose(stats.extras["probe_time_s"], probe_s, rtol=1e-6)
        np.testing.assert_allclose(stats.latency, probe_s + 65.0, rtol=1e-6)
        assert float(stats.extras["probed_clients"]) == (3.0 if with_probe else 0.0)
    np.testing.assert_allclose(probe_s, 1000.0 / 200.0 + 40.0 * 310.0 / 1000.0)


TRACE_CSV = """\
# three trace clients, cycled every 1000 s; nobody is active in [900, 1000)
# period_s = 1000
client_id,start_s,end_s
0,0,400
0,600,900
1,100,700
2,0,250
2,300,350
2,500,900
2,200,260
"""


def _trace_reference(trace, rows, time_s):
    x = np.mod(np.float32(time_s), np.float32(trace.period_s))
    start, end = np.asarray(trace.start)[rows], np.asarray(trace.end)[rows]
    return np.any((start <= x) & (x < end), axis=-1)


def test_the_trace_environment_reproduces_the_trace(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text(TRACE_CSV)
    trace = devices.load_trace(path, 5)
    # Client 2's overlapping intervals are merged; clients 3 and 4 follow 0 and 1.
    np.testing.assert_array_equal(trace.start, [[0, 600, 0], [100, 0, 0], [0, 300, 500]])
    np.testing.assert_array_equal(trace.end, [[400, 900, 0], [700, 0, 0], [260, 350, 900]])
    rows = np.arange(5) % 3
    env = devices.devices(5, 5, num_kept=2, availability=trace, idle_s=30.0, **HAND)
    dropped = idle = 0
    for before, inp, _, fb, after, stats in _play(env, _all_available, 60):
        clock = before.clock_s
        np.testing.assert_array_equal(inp.available, _trace_reference(trace, rows, clock))
        # A started client completes iff the trace has it active at its completion time.
        finish = np.float32(clock) + inp.info["duration_s"].astype(np.float32)
        alive = np.array([_trace_reference(trace, rows[i], finish[i]) for i in range(5)])
        np.testing.assert_array_equal(fb.observed, inp.available & alive)
        np.testing.assert_array_equal(after.clock_s, np.float32(clock + stats.latency))
        dropped += int(stats.extras["dropped"])
        idle += not fb.success.any()
    assert dropped > 0 and idle > 0, (dropped, idle)


def test_the_trace_decides_at_the_completion_time_after_the_probes(tmp_path):
    # Client 0 is active in [0, 70): its 50 s update completes alone, not after a 30 s probe.
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"period_s": 1000, "intervals": [[0, 0, 70], [1, 0, 1000]]}))
    env = devices.devices(
        5, 5, num_kept=1, availability=devices.load_trace(path, 5), idle_s=30.0, **HAND
    )
    for probe, observed in ((None, True), (np.float32([0, 0, 0, 0, 160]), False)):
        # Client 4 (trace client 0) probes 160 examples: 1000/40 + 160 * 0.25 = 65 s.

        def decide(t, inp, rng, probe=probe):
            return Decision(jnp.asarray(np.arange(5) == 0), probe=probe)

        ((_, inp, _, fb, _, stats),) = _play(env, decide, 1)
        np.testing.assert_array_equal(inp.available, [True, True, True, True, True])
        assert bool(fb.observed[0]) == observed
        want = 50.0 if observed else 65.0 + 30.0
        np.testing.assert_allclose(stats.latency, want, rtol=1e-6)


def test_markov_availability_is_stationary_within_its_confidence_interval():
    # The default process: P(off -> on) = 0.2, P(on -> off) = 0.05, stationary 0.8.
    n, trials, rounds = 40, 16, 150
    env = devices.devices(n, 4)
    a, b = devices.DEFAULT_TURN_ON, devices.DEFAULT_TURN_OFF

    def trial(key):
        def round_fn(state, t):
            k_obs, k_step = jax.random.split(jax.random.fold_in(key, t))
            inp = env.observe(state, t, k_obs)
            _, state, _ = env.step(state, inp, Decision(jnp.zeros(n, bool)), k_step)
            return state, inp.available

        return jax.lax.scan(round_fn, env.reset(key), jnp.arange(1, rounds + 1))[1]

    keys = jax.random.split(jax.random.PRNGKey(0), trials)
    avail = np.asarray(jax.jit(jax.vmap(trial))(keys))  # [trials, rounds, N]
    pi, lam = a / (a + b), 1.0 - a - b
    # Variance of one chain's time average started stationary: pi (1 - pi) / T times
    # 1 + 2 sum_k (1 - k/T) lam^k (the autocorrelation of lag k is lam^k); the chains
    # are independent.
    k = np.arange(1, rounds)
    inflation = 1.0 + 2.0 * np.sum((1.0 - k / rounds) * lam**k)
    sd = math.sqrt(pi * (1.0 - pi) / rounds * inflation / (n * trials))
    assert abs(avail.mean() - pi) < 4.0 * sd, (avail.mean(), pi, sd)
    # Given the states, the transitions from "on" are independent Bernoulli(1 - b).
    on = avail[:, :-1]
    stay = (avail[:, 1:] & on).sum() / on.sum()
    assert abs(stay - (1.0 - b)) < 4.0 * math.sqrt(b * (1.0 - b) / on.sum())


def test_diurnal_availability_follows_the_clock():
    n, draws = 4, 4000
    phase = np.array([0.0, 0.25, 0.5, 0.8], np.float32)
    pattern = devices.diurnal(mean=0.5, amplitude=0.4, period_s=1000.0, phase=phase)
    env = devices.devices(n, 2, availability=pattern)
    state = env.reset(jax.random.PRNGKey(0))
    keys = jax.random.split(jax.random.PRNGKey(1), draws)
    for clock in (0.0, 300.0, 2650.0):
        at = state._replace(clock_s=jnp.float32(clock))
        avail = jax.jit(jax.vmap(lambda k, at=at: env.observe(at, 1, k).available))(keys)
        p = 0.5 + 0.4 * np.cos(2.0 * np.pi * (clock / 1000.0 - phase))
        tol = 4.0 * np.sqrt(p * (1 - p) / draws) + 1e-3
        np.testing.assert_array_less(np.abs(np.asarray(avail).mean(axis=0) - p), tol)


# The loss surrogate: hand-built gaps and data sizes (B L = 100 examples per round).
GAP = np.array([0.2, 1.0, 3.0, 0.5, 0.05], np.float32)
SIZE = np.array([100.0, 300.0, 50.0, 800.0, 250.0], np.float32)
LOSS = dict(loss_gap=GAP, data_size=SIZE, loss_floor=0.1, shared_loss=1.5)


def test_the_loss_surrogate_updates_as_documented():
    env = devices.devices(
        5,
        4,
        num_kept=2,
        availability=1.0,
        mean_session_s=None,
        loss_dispersion=0.0,
        **HAND,
        **LOSS,
    )

    def decide(t, inp, rng):
        # Clients 1, 2, 4 (100, 103, 125 s): 1 and 2 kept, 4 a straggler.
        return Decision(jnp.asarray(np.array([0, 1, 1, 0, 1], bool)))

    (_, inp, _, fb, after, stats), (_, inp2, *_) = _play(env, decide, 2)
    p = SIZE.astype(np.float64) / SIZE.sum()
    loss = 0.1 + 1.5 + GAP.astype(np.float64)
    np.testing.assert_allclose(inp.info["loss"], loss, rtol=1e-6)
    np.testing.assert_allclose(inp.info["loss_minibatch"], loss, rtol=1e-6)  # kappa = 0
    np.testing.assert_allclose(inp.info["data_fraction"], p, rtol=1e-6)
    np.testing.assert_array_equal(inp.info["num_samples"], [100, 100, 50, 100, 100])
    kept = np.array([0, 1, 1, 0, 0], bool)
    np.testing.assert_array_equal(fb.success, kept)
    # Kept clients train their own gap away at 0.3; the shared part falls by 0.02 * 2/2.
    shared = 1.5 * (1.0 - 0.02 * 2 / 2)
    new_loss = 0.1 + shared + GAP * np.where(kept, 0.7, 1.0)
    np.testing.assert_allclose(inp2.info["loss"], new_loss, rtol=1e-6)
    np.testing.assert_allclose(stats.loss, np.sum(p * new_loss), rtol=1e-6)
    # Own loss falls most, everyone's a little.
    drop = loss - new_loss
    assert np.all(drop > 0) and drop[kept].min() > drop[~kept].max()
    # Feedback (kappa = 0: no sampling noise): the trajectory a -> b of each kept client.
    a, b = loss, loss - 0.3 * GAP
    np.testing.assert_allclose(fb.info["loss"], np.where(kept, (a + b) / 2, 0.0), rtol=1e-6)
    rms = np.sqrt((a * a + a * b + b * b) / 3.0)
    np.testing.assert_allclose(fb.info["loss_rms"], np.where(kept, rms, 0.0), rtol=1e-6)
    np.testing.assert_allclose(fb.info["loss_rms_last_batch"], np.where(kept, b, 0.0), rtol=1e-6)
    np.testing.assert_array_equal(
        fb.info["num_samples"], np.where(kept, [100, 100, 50, 100, 100], 0)
    )


def test_losses_fall_over_rounds():
    env = devices.devices(30, 6, num_kept=4, duration_noise=0.2)

    def decide(t, inp, rng):
        avail = np.flatnonzero(inp.available)
        selected = np.zeros(30, bool)
        selected[rng.choice(avail, min(6, avail.size), replace=False)] = True
        return Decision(jnp.asarray(selected))

    rounds = _play(env, decide, 25)
    global_loss = np.array([r[5].loss for r in rounds])
    losses = np.stack([r[1].info["loss"] for r in rounds])
    assert np.all(np.diff(global_loss) <= 0) and global_loss[-1] < 0.9 * global_loss[0]
    assert np.all(np.diff(losses, axis=0) <= 0)
    p = rounds[0][1].info["data_fraction"]
    np.testing.assert_allclose(global_loss[:-1], losses[1:] @ p, rtol=1e-5)


def test_loss_estimates_have_the_documented_noise():
    draws, kappa = 4000, 1.0
    keys = jax.random.split(jax.random.PRNGKey(3), draws)
    # loss_minibatch: unbiased, relative variance kappa^2 / b.
    for b in (4, 64):
        env = devices.devices(5, 4, probe_batch_size=b, **LOSS)
        state = env.reset(jax.random.PRNGKey(0))
        info = jax.jit(jax.vmap(lambda k, env=env, state=state: env.observe(state, 1, k).info))(
            keys
        )
        rel = np.asarray(info["loss_minibatch"]) / np.asarray(info["loss"])
        np.testing.assert_allclose(rel.mean(), 1.0, atol=4.0 * math.sqrt(kappa**2 / b / rel.size))
        # The relative sd of this variance estimate (20000 draws, kurtosis 8) is about 2%.
        np.testing.assert_allclose(rel.var(), kappa**2 / b, rtol=0.12)
    # Feedback: the mean loss is unbiased, the root mean square is above it, and the last
    # batch (10 examples) is noisier than the round (100 examples).
    env = devices.devices(
        5, 5, availability=1.0, mean_session_s=None, loss_dispersion=kappa, **HAND, **LOSS
    )
    state = env.reset(jax.random.PRNGKey(0))
    inp = env.observe(state, 1, jax.random.PRNGKey(1))
    decision = Decision(jnp.ones(5, bool))
    info = jax.jit(jax.vmap(lambda k: env.step(state, inp, decision, k)[0].info))(keys)
    loss, rms, last = (np.asarray(info[x]) for x in ("loss", "loss_rms", "loss_rms_last_batch"))
    a = np.asarray(inp.info["loss"], np.float64)
    b_end = a - 0.3 * GAP
    mid = (a + b_end) / 2
    samples = np.array([100, 100, 50, 100, 100])
    sd = np.sqrt(kappa**2 / samples) * mid / math.sqrt(draws)
    np.testing.assert_array_less(np.abs(loss.mean(axis=0) - mid), 4.0 * sd)
    assert np.all(rms >= loss)
    np.testing.assert_allclose(
        (rms / loss)[0],
        math.sqrt(2.0) * np.sqrt((a * a + a * b_end + b_end**2) / 3.0) / mid,
        rtol=1e-5,
    )
    rel_round = (loss / mid).std(axis=0)
    rel_last = (last / (math.sqrt(2.0) * b_end)).std(axis=0)
    np.testing.assert_allclose(rel_round, np.sqrt(kappa**2 / samples), rtol=0.1)
    np.testing.assert_allclose(rel_last, np.sqrt(kappa**2 / np.minimum(10, samples)), rtol=0.1)
    assert np.all(rel_last > rel_round)


def test_load_trace_formats_agree_and_the_example_ships(tmp_path):
    csv = tmp_path / "t.csv"
    csv.write_text(TRACE_CSV)
    rows = [[0, 0, 400], [0, 600, 900], [1, 100, 700], [2, 0, 250], [2, 300, 350],
            [2, 500, 900], [2, 200, 260]]  # fmt: skip
    js = tmp_path / "t.json"
    js.write_text(json.dumps({"period_s": 1000, "intervals": rows}))
    a, b = devices.load_trace(csv, 3), devices.load_trace(js, 3)
    jax.tree.map(np.testing.assert_array_equal, a, b)
    assert float(a.period_s) == 1000.0
    # The period: the argument's, else the file's, else the largest end.
    assert float(devices.load_trace(csv, 3, period_s=2000.0).period_s) == 2000.0
    js.write_text(json.dumps({"intervals": rows[:3]}))
    assert float(devices.load_trace(js, 3).period_s) == 900.0
    js.write_text(json.dumps({"intervals": rows[2:3]}))
    assert float(devices.load_trace(js, 3).period_s) == 700.0

    example = devices.load_trace(devices.EXAMPLE_TRACE, 16)
    assert example.start.shape[0] == 16 and float(example.period_s) == 86400.0
    # Shipped as package data, and usable by the environment with more clients (cyclic).
    with open(os.path.join(REPO, "pyproject.toml")) as f:
        pyproject = f.read()
    package_data = pyproject.split("[tool.setuptools.package-data]")[1].split("\n[")[0]
    assert '"fedjax_sel.envs" = ["traces/*.csv"]' in package_data
    assert os.path.dirname(devices.EXAMPLE_TRACE).endswith(os.path.join("envs", "traces"))
    env = envs.make("devices", 40, 8, availability=example)
    inp = env.observe(env.reset(jax.random.PRNGKey(0)), 1, jax.random.PRNGKey(1))
    np.testing.assert_array_equal(inp.available[16:32], inp.available[:16])


HEADER = "client_id,start_s,end_s\n"
BAD_TRACES = [
    ("unknown_id.csv", HEADER + "0,0,10\n5,0,10\n", "line 3: client_id"),
    ("negative_id.csv", HEADER + "-1,0,10\n", "line 2: client_id"),
    ("float_id.csv", HEADER + "1.5,0,10\n", "line 2: client_id"),
    ("name_id.csv", HEADER + "a,0,10\n", "line 2: client_id"),
    ("negative_start.csv", HEADER + "0,-5,10\n", "line 2: start_s"),
    ("inverted.csv", HEADER + "0,20,10\n", "line 2: end_s must exceed start_s"),
    ("zero_length.csv", HEADER + "0,10,10\n", "line 2: end_s must exceed start_s"),
    ("past_period.csv", "# period_s=100\n" + HEADER + "0,10,110\n", "line 3: end_s=110"),
    ("bad_period.csv", "# period_s=-1\n" + HEADER, "line 1: period_s"),
    ("not_number.csv", HEADER + "0,x,10\n", "line 2: start_s"),
    ("infinite.csv", HEADER + "0,0,inf\n", "line 2: end_s"),
    ("short_row.csv", HEADER + "0,10\n", "line 2: a row must have 3 fields"),
    ("empty.csv", HEADER, "no active interval"),
    ("blank.csv", "", "empty trace"),
    ("no_header.csv", "0,0,10\n", "line 1: the header"),
    ("empty.json", '{"intervals": []}', "no active interval"),
    ("bad_entry.json", '{"intervals": [[0, 1]]}', "intervals[0]"),
    ("float_id.json", '{"intervals": [[0.0, 0, 1]]}', "intervals[0]: client_id"),
    ("inverted.json", '{"intervals": [[0, 0, 1], [1, 5, 2]]}', "intervals[1]: end_s"),
    ("not_json.json", "{", "not valid JSON"),
    ("no_list.json", '{"period_s": 5}', '"intervals"'),
]


@pytest.mark.parametrize("name, text, match", BAD_TRACES, ids=[b[0] for b in BAD_TRACES])
def test_bad_traces_are_refused_naming_the_line_and_field(
    tmp_path, name, text, match, nothing_traced
):
    path = tmp_path / name
    path.write_text(text)
    with nothing_traced(), pytest.raises(ValueError, match=match.replace("[", r"\[")):
        devices.load_trace(path, 3)


TRACE = devices.Trace(np.float32([[0, 5]]), np.float32([[10, 20]]), np.float32(100))
BAD_FACTORIES = [
    (lambda: devices.load_trace("/nonexistent/trace.csv", 3), "does not exist"),
    (lambda: devices.load_trace(TRACE_CSV, 3), "does not exist"),
    (lambda: devices.devices(10, 4, num_kept=5), "num_kept"),
    (lambda: devices.devices(10, 4, mean_session_s=0.0), "mean_session_s"),
    (lambda: devices.devices(3, 2, mean_session_s=[1.0, 0.0, 2.0]), "mean_session_s"),
    (lambda: devices.devices(3, 2, compute_ms=[1.0, -1.0, 2.0]), "compute_ms"),
    (lambda: devices.devices(3, 2, bandwidth_kbps=[1.0, 0.0, 2.0]), "bandwidth_kbps"),
    (lambda: devices.devices(3, 2, data_size=[1.0, 0.5, 2.0]), "data_size"),
    (lambda: devices.devices(3, 2, loss_gap=[1.0, np.nan, 2.0]), "loss_gap"),
    (lambda: devices.devices(3, 2, own_rate=1.5), "own_rate"),
    (lambda: devices.devices(3, 2, duration_noise=-0.1), "duration_noise"),
    (lambda: devices.devices(3, 2, batch_size=0), "batch_size"),
    (lambda: devices.devices(3, 2, probe_batch_size=2.5), "probe_batch_size"),
    (lambda: devices.diurnal(mean=0.8, amplitude=0.3), "amplitude"),
    (lambda: devices.diurnal(period_s=0.0), "period_s"),
    (lambda: devices.devices(3, 2, availability=devices.diurnal(phase=[0.1, 0.2])), "phase"),
    (lambda: devices.devices(3, 2, availability=devices.diurnal(phase=[0, 0.5, 1])), "phase"),
    (lambda: devices.load_trace(devices.EXAMPLE_TRACE, 8), "client_id"),
    (lambda: devices.devices(3, 2, availability=TRACE._replace(end=np.float32([[10, 2]]))), "end"),
    (lambda: devices.devices(3, 2, availability=TRACE._replace(end=np.float32([[0, 5]]))), "empty"),
    (lambda: devices.devices(3, 2, availability=TRACE._replace(period_s=15.0)), "end"),
    (
        lambda: devices.devices(1, 1, availability=TRACE._replace(start=np.zeros((2, 2)))),
        "more than",
    ),
]


@pytest.mark.parametrize("make, match", BAD_FACTORIES)
def test_bad_arguments_are_refused_before_anything_compiles(make, match, nothing_traced):
    with nothing_traced(), pytest.raises(ValueError, match=match):
        make()
