"""Automatic trial chunking from a memory budget."""

import jax
import numpy as np
import pytest

import bandits
import fedjax_sel
from fedjax_sel import envs, runner

N, K = 10, 2


def kept_bytes(num_rounds, num_trials):
    """What a run keeps whatever the chunking: double-f32 sums of x and x^2 of 12 metrics
    per round, and 7 double-f32 totals per trial."""
    return num_rounds * 12 * 2 * 8 + num_trials * 7 * 8


def test_trial_memory_bytes_by_hand():
    # Bernoulli env state (means f32[N], the oracle's decision bool[N], its places
    # int32[K] and value f32[]; Bernoulli availability keeps no state) = 5N + 4K + 4
    # bytes, UCB state (counts, sums) 8N, running totals 4N + 17 scalars (5 double-f32
    # sums, the selections' cohort, double-f32 total and sum of squares, the largest
    # cohort, the invalid rounds): the carry is 17N + 4K + 72 bytes. A
    # round materialises t (4) + available (N), the decision (N), the new UCB state (8N),
    # and the step's feedback (observed N, reward 4N, latency 4N, success N), env state
    # (5N + 4K + 4) and 5 f32 statistics (20): 25N + 4K + 28 bytes.
    # Estimate: 2 * carry + 2 * round.
    env, ucb = envs.bernoulli(N, K), bandits.ucb(N, K)
    carry, round_ = 17 * N + 4 * K + 72, 25 * N + 4 * K + 28
    assert runner.trial_memory_bytes(env, ucb) == 2 * carry + 2 * round_


def test_chunk_is_the_largest_power_of_two_within_budget_when_it_divides_the_trials():
    env = envs.bernoulli(N, K)
    policies = {"ucb": bandits.ucb(N, K), "random": bandits.random(N, K)}
    per_trial = runner.trial_memory_bytes(env, policies["ucb"])  # the larger of the two
    assert per_trial > runner.trial_memory_bytes(env, policies["random"])
    fixed = kept_bytes(5, 64)
    for budget, expected in ((6_700, 2), (13_200, 8), (40_000, 32), (200_000, 64)):
        chunk = runner.trials_per_chunk_for_budget(policies, env, 5, 64, budget)
        assert chunk == expected
        assert fixed + per_trial * chunk <= budget  # the chunk fits ...
        if chunk < 64:  # ... and is the largest that does
            assert fixed + per_trial * 2 * chunk > budget
    # Never more than the smallest power of two covering the trials.
    assert runner.trials_per_chunk_for_budget(policies, env, 5, 5, 10**12) == 8


@pytest.mark.parametrize(
    "num_trials, fits, expected",
    [
        # ceil(M / c) * (c + 64) for c = 8192, 4096, 2048, 1024, 512:
        # 16512, 12480, 10560, 10880, 11520.
        (10_000, 8192, 2048),
        # c = 2048 covers the 1,025 trials: 1089; c = 1024 ... 64: 2176, 1728, 1600,
        # 1728, 2176.
        (1025, 2048, 2048),
        (1025, 1024, 256),
        # c = 8, 4, 2, 1: 72, 136, 198, 325 (no padding buys a fifth chunk).
        (5, 8, 8),
        (5, 2, 2),
        (64, 64, 64),
    ],
)
def test_chunk_pads_the_trials_least(num_trials, fits, expected):
    env = envs.bernoulli(N, K)
    policies = {"ucb": bandits.ucb(N, K)}
    per_trial = runner.trial_memory_bytes(env, policies["ucb"])
    fixed = kept_bytes(5, num_trials)
    budget = fixed + per_trial * fits  # fits `fits` trials, not twice as many
    chunk = runner.trials_per_chunk_for_budget(policies, env, 5, num_trials, budget)
    assert chunk == expected


def test_results_equal_the_unchunked_run(optimized):
    env = envs.bernoulli(N, K)
    sel = bandits.ucb(N, K)
    per_trial = runner.trial_memory_bytes(env, sel)
    fixed = kept_bytes(6, 7)
    budget = fixed + 3 * per_trial  # room for 2 trials (a power of two), not 4
    chunked = fedjax_sel.simulate(sel, env, 6, 7, seed=1, progress=None, memory_budget_bytes=budget)
    whole = fedjax_sel.simulate(sel, env, 6, 7, seed=1, progress=None)
    assert chunked.config["trials_per_chunk"] == 2
    explicit = fedjax_sel.simulate(sel, env, 6, 7, seed=1, progress=None, trials_per_chunk=2)
    for policy_results in (explicit, whole):
        for total, x in policy_results.totals["policy"].items():
            np.testing.assert_array_equal(chunked.totals["policy"][total], x)
        for metric, curve in policy_results.curves["policy"].items():
            np.testing.assert_array_equal(chunked.curves["policy"][metric]["mean"], curve["mean"])
            np.testing.assert_array_equal(chunked.curves["policy"][metric]["std"], curve["std"])


@pytest.mark.parametrize(
    "num_clients, num_trials, num_devices, expected",
    [
        # 2^21 / 1,000 = 2,097 per device: c = 2048, 1024: 5 * 2112 = 10560, 10 * 1088.
        (1000, 10_000, 1, 2048),
        # 2^21 / 10,000 = 209: c = 128, 64: 8 * 192 = 1536, 16 * 128 = 2048.
        (10_000, 1000, 1, 128),
        # A device per core: 5 * 2^15 client-trials each. Four devices, 65 trials:
        # c = 64 (blocks of 16), 32: 16 * 128 = 2048, 32 * 96 = 3072.
        (10_000, 1000, 4, 64),
        # Two devices, 327: c = 256, 128: 4 * 320 = 1280, 8 * 192 = 1536.
        (1000, 1000, 2, 256),
        # Three devices, 491: c = 256 runs blocks of 128 (384 trials), 128 blocks of 64:
        # 4 * (384 + 64) = 1792, 8 * (192 + 64) = 2048.
        (1000, 1000, 3, 256),
        # 20,971 trials fit: 16,384 covers the 10,000 (10064, against 10560 for 2048).
        (100, 10_000, 1, 16_384),
        # More clients than the bound: one trial at a time, one per device on several
        # (a chunk of 1 on 2 devices would run 2 trials, one of them padding).
        (2**22, 3, 1, 1),
        (10**6, 16, 2, 2),
    ],
)
def test_cpu_chunk_by_hand(num_clients, num_trials, num_devices, expected):
    assert runner.cpu_trials_per_chunk(num_clients, num_trials, num_devices) == expected


@pytest.mark.parametrize(
    "num_clients, num_trials, num_devices, trial_bytes, expected",
    [
        # Dense Quick-Init UCB at N = 20 (746,512 bytes a trial): 2^24 bytes a device
        # hold 22 trials, two devices 44 (of 16,384 by the clients): c = 32, 16:
        # 32 * 96 = 3072, 63 * 80 = 5040.
        (20, 1000, 2, 746_512, 32),
        # One device: 2^28 / 746,512 = 359: c = 256, 128: 4 * 320 = 1280, 8 * 192 = 1536.
        (20, 1000, 1, 746_512, 256),
        # `ucb` at N = 1,000 (84,160 bytes): 398 by the bytes, 327 by the clients.
        (1000, 1000, 2, 84_160, 256),
        # Bigger than the budget: one trial per device.
        (20, 8, 2, 2**25, 2),
    ],
)
def test_cpu_chunk_by_bytes_by_hand(num_clients, num_trials, num_devices, trial_bytes, expected):
    chunk = runner.cpu_trials_per_chunk(num_clients, num_trials, num_devices, trial_bytes)
    assert chunk == expected


@pytest.mark.parametrize(
    "chunk, num_devices, expected",
    [(7, 1, 7), (8, 2, 4), (7, 2, 4), (5, 2, 4), (4, 3, 2), (1, 3, 1), (10, 4, 4), (3, 4, 1)],
)
def test_device_block_by_hand(chunk, num_devices, expected):
    assert runner.device_block(chunk, num_devices) == expected


def test_device_blocks_must_fit_the_bound():
    # Five trials fitting 5 on 3 devices: a chunk of 4 runs 3 blocks of 2 (6 > 5); a
    # chunk of 2 runs blocks of 1: 3 chunks of 3 + 64 = 201, against 5 * 67 for 1.
    assert runner.chunking.least_padded_chunk(5, 5, 3) == 2
    assert runner.chunking.least_padded_chunk(5, 5, 1) == 4  # 2 * 68 = 136, against 3 * 66


def test_cpu_chunk_is_the_default_on_cpu(monkeypatch):
    # With a bound of 64 client-trials, N = 10 allows 6 trials: 4 (2 chunks of 7 trials
    # cost 2 * 68 = 136, against 4 * 66 = 264 for chunks of 2). A budget that fits 2
    # trials is smaller still, and wins.
    monkeypatch.setattr(runner.chunking, "CPU_CHUNK_CLIENT_TRIALS", 64)
    env, sel = envs.bernoulli(N, K), bandits.ucb(N, K)
    default = fedjax_sel.simulate(sel, env, 6, 7, seed=1, progress=None)
    assert default.config["trials_per_chunk"] == 4
    per_trial = runner.trial_memory_bytes(env, sel)
    budget = kept_bytes(6, 7) + 3 * per_trial
    small = fedjax_sel.simulate(sel, env, 6, 7, seed=1, progress=None, memory_budget_bytes=budget)
    assert small.config["trials_per_chunk"] == 2
    given = fedjax_sel.simulate(sel, env, 6, 7, seed=1, progress=None, trials_per_chunk=8)
    assert given.config["trials_per_chunk"] == 8  # an explicit chunk is kept
    for total, x in given.totals["policy"].items():
        np.testing.assert_array_equal(default.totals["policy"][total], x)


def test_bad_budgets():
    env, sel = envs.bernoulli(N, K), bandits.ucb(N, K)
    with pytest.raises(ValueError, match="memory_budget_bytes must be at least"):
        fedjax_sel.simulate(sel, env, 3, 4, progress=None, memory_budget_bytes=100)
    with pytest.raises(ValueError, match="memory_budget_bytes must be an integer >= 1"):
        fedjax_sel.simulate(sel, env, 3, 4, progress=None, memory_budget_bytes=0)
    with pytest.raises(ValueError, match="not both"):
        fedjax_sel.simulate(
            sel, env, 3, 4, progress=None, trials_per_chunk=2, memory_budget_bytes=10**9
        )


def test_eval_shape_only():
    # The estimate traces shapes and runs nothing: no array is created on a device.
    env, sel = envs.bernoulli(N, K), bandits.ucb(N, K)
    before = len(jax.live_arrays())
    runner.trial_memory_bytes(env, sel)
    assert len(jax.live_arrays()) == before


class _Device:
    """A device that reports its memory as an accelerator does (`memory_stats`)."""

    def __init__(self, limit):
        self.limit = limit

    def memory_stats(self):
        return None if self.limit is None else {"bytes_limit": self.limit, "bytes_in_use": 7}


def test_device_memory_is_the_least_device_times_the_devices_of_every_process():
    assert runner.device_memory_bytes([_Device(80), _Device(60)]) == 120
    assert runner.device_memory_bytes([_Device(80), _Device(60)], num_processes=4) == 480
    assert runner.device_memory_bytes([_Device(80), _Device(None)]) is None
    assert runner.device_memory_bytes(jax.devices("cpu")) is None  # CPUs report no limit


def test_accelerator_chunk_fits_a_share_of_the_device_memory():
    env = envs.bernoulli(N, K)
    policies = {"ucb": bandits.ucb(N, K)}
    per_trial = runner.trial_memory_bytes(env, policies["ucb"])
    share = runner.ACCELERATOR_MEMORY_SHARE
    choose = lambda num_devices, memory, chunk=None, budget=None: runner.choose_trials_per_chunk(
        policies, env, 5, 64, chunk, budget, num_devices, "gpu", memory
    )
    # 64 trials, memory whose share fits 13 of them: chunks of 8 on one device; of 16
    # trials (two blocks of 8) on two whose memory together fits 26.
    memory = (kept_bytes(5, 64) + 13 * per_trial) / share
    assert choose(1, memory) == 8
    assert choose(2, 2 * memory) == 16
    assert choose(1, 100 * memory) == 64  # all at once where they fit
    # Not even one trial fits the share: one trial a device.
    assert choose(1, per_trial) == 1
    assert choose(4, per_trial) == 4
    # A device with no known limit: all at once on one, the least padded chunk on several.
    assert choose(1, None) is None
    assert choose(2, None) == 64
    # A chunk or a budget given wins.
    assert choose(1, memory, chunk=2) == 2
    assert choose(1, memory, budget=kept_bytes(5, 64) + 3 * per_trial) == 2


def test_simulate_reads_the_memory_of_the_devices_it_runs_on(monkeypatch):
    seen = []
    read = runner.device_memory_bytes
    monkeypatch.setattr(runner, "device_memory_bytes", lambda *a: seen.append(a) or read(*a))
    env, sel = envs.bernoulli(N, K), bandits.ucb(N, K)
    devices = jax.devices("cpu")[:1]
    fedjax_sel.simulate(sel, env, 2, 3, seed=1, progress=None, devices=devices)
    assert seen == [(devices, 1)]
