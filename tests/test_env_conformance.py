"""Every registered environment against the `Env` contract, one row per `envs.REGISTRY` entry.

Built from sizes alone; reset/observe/step/oracle under `jit` and `vmap` over trials with
fixed shapes and dtypes across rounds; `vmap` over parameters equal to separately built
environments; bad input refused with a `ValueError` naming the argument, in Python.
"""

import contextlib
import itertools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bandits
import fedjax_sel
from fedjax_sel import envs, runner
from fedjax_sel.envs import availability
from fedjax_sel.envs.hierarchical import PRESETS
from fedjax_sel.ops import assignment as assign_ops
from fedjax_sel.types import Decision, Env

N, K, TRIALS, ROUNDS = 12, 2, 3, 4

# Per entry: other parameter values (beside availability) for the `vmap` over parameters,
# and an argument that must be finite.
VARIANTS = {
    "bernoulli": ({"means_range": (0.2, 0.6)}, "means_range[1]", {"means_range": (0.0, np.inf)}),
    "beta": ({"concentration": 4.0}, "concentration", {"concentration": np.inf}),
    "devices": (
        {"model_size_kbit": 10000.0, "duration_noise": 0.2, "shared_rate": 0.1},
        "model_size_kbit",
        {"model_size_kbit": np.inf},
    ),
    "dfl_delay": ({"tau_max": 2.0, "area_m": 300.0}, "tau_max", {"tau_max": np.inf}),
    "exchange_time": (
        {"model_size_mb": 10.0, "bandwidth_mhz": (1.0, 3.0)},
        "model_size_mb",
        {"model_size_mb": np.inf},
    ),
    "hierarchical": ({"deadline_s": 4.0}, "deadline_s", {"deadline_s": np.inf}),
    "fl_da": ({"success": 0.5}, "learning_rate", {"learning_rate": np.inf}),
    "fl_fa": ({"success": 0.5}, "learning_rate", {"learning_rate": np.inf}),
    "gaussian": ({"stddev": 2.0, "means_range": (-1.0, 1.0)}, "stddev", {"stddev": np.inf}),
    "opinion_surrogate": ({"noise": 0.02, "rate": 0.3}, "noise", {"noise": np.inf}),
    "training": (
        {"latency_range": (2.0, 3.0), "latency_spread": 0.25},
        "learning_rate",
        {"learning_rate": np.inf},
    ),
    "wireless_latency": ({}, "deadline_s", {"deadline_s": np.inf}),
}
NAMES = sorted(envs.REGISTRY)
# Entries whose default build has no oracle (model-based rewards: regret undefined).
WITHOUT_ORACLE = ("devices", "fl_da", "fl_fa", "training")
# fl_da is fl_fa's code but for the reward it reports (tests/test_goal_directed.py); the
# compile-heavy parameter sweep runs once for both.
SWEPT = [n for n in NAMES if n != "fl_da"]


def test_every_entry_has_a_row():
    assert sorted(VARIANTS) == NAMES


def _run(env: Env, keys, params=None, optimized=False):
    """ROUNDS rounds of one trial per key (oracle decisions), under jit and vmap, scanned
    as the runner plays them (a state that changes shape or dtype fails the scan): per
    round, (input, decision, feedback, state after, stats) with a leading trial axis.
    `optimized`: compiled with the runner's compiler options, which the `optimized`
    fixture (conftest.py) sets to the code users run, for comparisons of last bits."""

    def trial(key, params):
        def round_fn(state, t):
            obs_key, step_key = jax.random.split(jax.random.fold_in(key, t))
            inp = env.observe(state, t, obs_key, params)
            decision = _oracle(env, state, inp, params)
            feedback, state, stats = env.step(state, inp, decision, step_key, params)
            return state, (inp, decision, feedback, state, stats)

        rounds = jnp.arange(1, ROUNDS + 1, dtype=jnp.int32)
        return jax.lax.scan(round_fn, env.reset(key, params), rounds)[1]

    program = jax.jit(jax.vmap(trial, in_axes=(0, None)))
    if optimized:
        options = dict(runner.programs.compiler_options(jax.default_backend()))
        program = program.lower(keys, params).compile(compiler_options=options)
    stacked = program(keys, params)
    return [jax.tree.map(lambda x, i=i: x[:, i], stacked) for i in range(ROUNDS)]


def _oracle(env, state, inp, params):
    if env.oracle is not None:
        return env.oracle(state, inp, params)
    return Decision(jnp.arange(N) < K)


def _signature(tree):
    return jax.tree.map(lambda x: (x.shape, x.dtype), tree)


@pytest.mark.parametrize("name", NAMES)
def test_contract_under_jit_and_vmap(name, optimized):
    env = envs.make(name, N, K)
    assert isinstance(env, Env) and env.num_clients == N
    # A cohort cap where one is declared (None: any cohort, e.g. exchange_time's FedCS).
    assert env.num_selected is None or 1 <= env.num_selected <= N
    keys = jax.random.split(jax.random.PRNGKey(0), TRIALS)
    rounds = _run(env, keys, optimized=True)
    first = _signature(rounds[0])
    for later in rounds[1:]:
        assert _signature(later) == first
    inp, decision, feedback, state, stats = rounds[0]
    assert inp.available.shape == (TRIALS, N) and inp.available.dtype == jnp.bool_
    assert inp.t.dtype == jnp.int32
    assert decision.selected.shape == (TRIALS, N)
    for field in ("observed", "success"):
        assert getattr(feedback, field).shape == (TRIALS, N)
        assert getattr(feedback, field).dtype == jnp.bool_
    for field in ("reward", "latency"):
        assert getattr(feedback, field).shape == (TRIALS, N)
        assert getattr(feedback, field).dtype == jnp.float32
    for field in ("expected_reward", "reward", "latency", "num_failed"):
        assert getattr(stats, field).shape == (TRIALS,), field
    if env.oracle is None:
        assert stats.oracle_reward is None
    else:
        assert stats.oracle_reward.shape == (TRIALS,)
        # The oracle's own decision has zero pseudo-regret.
        for *_, s in rounds:
            np.testing.assert_allclose(s.oracle_reward, s.expected_reward, rtol=1e-6)
    # Defaults closed over (omitted) and passed traced (a jit argument): the same bits in
    # the code users run (at the suite's LLVM level 0 they may differ in the last bit).
    explicit = _run(env, keys, env.params, optimized=True)
    jax.tree.map(np.testing.assert_array_equal, explicit, rounds)


@pytest.mark.parametrize("name", SWEPT)
def test_vmap_over_params_equals_separate_envs(name):
    other, _, _ = VARIANTS[name]
    env_a = envs.make(name, N, K, availability=0.9)
    env_b = envs.make(name, N, K, availability=0.6, **other)
    keys = jax.random.split(jax.random.PRNGKey(1), TRIALS)
    stacked = jax.tree.map(lambda a, b: jnp.stack([a, b]), env_a.params, env_b.params)
    swept = jax.jit(jax.vmap(lambda p: _run(env_a, keys, p)))(stacked)
    for i, env in enumerate((env_a, env_b)):
        jax.tree.map(lambda s, a, i=i: _same(s[i], a), swept, _run(env, keys))


def _same(got, want):
    """Equal; floats to a few ulp (a batch axis may change XLA's vectorization)."""
    if jnp.issubdtype(want.dtype, jnp.floating):
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    "kwargs, argument",
    [
        ({"num_selected": 0}, "num_selected"),
        ({"availability": 1.5}, "availability"),
        ({"availability": np.inf}, "availability"),
        ({"availability": [0.5] * (N - 1)}, "availability"),
    ],
)
def test_bad_input_is_refused_before_tracing(name, kwargs, argument):
    kwargs = {"num_clients": N, "num_selected": K, **kwargs}
    with _no_tracing(), pytest.raises(ValueError, match=re.escape(argument)):
        envs.make(name, **kwargs)


@pytest.mark.parametrize("name", NAMES)
def test_infinite_values_are_refused(name):
    _, argument, kwargs = VARIANTS[name]
    with _no_tracing(), pytest.raises(ValueError, match=re.escape(argument)):
        envs.make(name, N, K, **kwargs)


@contextlib.contextmanager
def _no_tracing():
    """Fails if JAX traces or compiles anything inside the block."""
    events = []

    def listener(event, duration, **kwargs):
        del duration, kwargs
        if "trace" in event or "compile" in event:
            events.append(event)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert not events, events


def test_oracle_is_exact_under_a_composed_availability_process():
    # The environment's own availability is 1; the Markov process decides.
    env = envs.with_availability(
        envs.bernoulli(20, 4, availability=1.0), availability.markov(0.3, 0.4, 20)
    )
    results = fedjax_sel.simulate(
        {"oracle": bandits.oracle()}, env, num_rounds=40, num_trials=4, seed=0, progress=None
    )
    np.testing.assert_array_equal(results.totals["oracle"]["cumulative_regret"], 0.0)


def test_oracle_equals_brute_force_over_cohorts():
    n, k = 7, 3
    env = envs.with_availability(envs.bernoulli(n, k), availability.markov(0.5, 0.5, n))
    key = jax.random.PRNGKey(3)
    state = env.reset(key)
    for t in range(1, 9):
        inp = env.observe(state, t, jax.random.fold_in(key, t))
        means = np.asarray(state.env.means)
        avail = np.flatnonzero(np.asarray(inp.available))
        best = max(
            (sum(means[list(c)]) for c in itertools.combinations(avail, min(k, len(avail)))),
            default=0.0,
        )
        decision = env.oracle(state, inp)
        assert not np.any(np.asarray(decision.selected) & ~np.asarray(inp.available))
        _, state, stats = env.step(state, inp, decision, jax.random.fold_in(key, 100 + t))
        np.testing.assert_allclose(stats.oracle_reward, best, rtol=1e-6)
        np.testing.assert_allclose(stats.expected_reward, best, rtol=1e-6)


def test_the_lazy_training_factory_survives_an_import_of_its_module():
    # Importing the module by its path must not put a module where `envs.training`, the
    # factory, is expected (a submodule of that name would shadow it).
    import fedjax_sel.envs.training_env as module

    assert envs.training is module.training and callable(envs.training)
    assert envs.TrainingState is module.TrainingState


def _random_decision(name: str, env: Env, inp, key) -> Decision:
    """A random subset of the available clients, of a size uniform in 0..cohort; in the
    hierarchical network, random values on the subset's covered pairs packed within the
    budgets by the greedy solver: a random feasible assignment, short ones included."""
    size_key, order_key, value_key, solver_key = jax.random.split(key, 4)
    size = jax.random.randint(size_key, (), 0, (env.num_selected or N) + 1)
    scores = jnp.where(inp.available, jax.random.uniform(order_key, (N,)), -1.0)
    subset = inp.available & (jnp.argsort(jnp.argsort(-scores)) < size)
    if name != "hierarchical":
        return Decision(subset)
    covered = (inp.connectivity > 0) & subset[:, None]
    num_servers = covered.shape[1]
    budgets = jnp.full(num_servers, PRESETS["mnist"]["budget"])
    value = jax.random.uniform(value_key, covered.shape)
    pairs = assign_ops.greedy(value, inp.info["cost"], covered, budgets, solver_key)
    return Decision(jnp.any(pairs, axis=1), assign_ops.assignment_of(pairs))


def _random_accepted_regrets(name: str, env: Env, key, num_decisions=64):
    """Pseudo-regrets f32[ROUNDS, num_decisions] of random decisions of every size from 0 to
    the cohort (`_random_decision`), and whether the environment accepts each
    (`Env.feasible`), over ROUNDS rounds of one trial."""

    def round_fn(state, t):
        obs_key, step_key, decision_key = jax.random.split(jax.random.fold_in(key, t), 3)
        inp = env.observe(state, t, obs_key)

        def one(k):
            decision = _random_decision(name, env, inp, k)
            _, _, stats = env.step(state, inp, decision, step_key)
            ok = True if env.feasible is None else env.feasible(state, inp, decision)
            return stats.oracle_reward - stats.expected_reward, jnp.asarray(ok)

        regret, ok = jax.vmap(one)(jax.random.split(decision_key, num_decisions))
        _, state, _ = env.step(state, inp, env.oracle(state, inp), step_key)
        return state, (regret, ok)

    rounds = jnp.arange(1, ROUNDS + 1, dtype=jnp.int32)
    return jax.lax.scan(round_fn, env.reset(key), rounds)[1]


@pytest.mark.parametrize("name", [n for n in NAMES if n not in WITHOUT_ORACLE])
def test_no_accepted_decision_beats_the_oracle(name):
    """Any decision the runner accepts, short and empty cohorts included, has pseudo-regret
    >= 0 (up to f32 rounding of the values compared)."""
    # Negative means too, where the family has them: empty slots are then worth less than 0.
    extra = {"means_range": (-1.0, 1.0)} if name == "gaussian" else {}
    env = envs.make(name, N, K, availability=0.7, **extra)
    keys = jax.random.split(jax.random.PRNGKey(11), TRIALS)
    regrets, accepted = jax.jit(jax.vmap(lambda k: _random_accepted_regrets(name, env, k)))(keys)
    regrets, accepted = np.asarray(regrets), np.asarray(accepted)
    assert accepted.mean() > 0.2  # the property is tested on many decisions
    assert regrets[accepted].min() >= -1e-6 * max(1.0, np.abs(regrets).max())


def test_a_short_cohort_is_charged_its_empty_slots():
    """Hand-worked: wireless latency rates an empty cohort 0 (a client at the deadline),
    Gaussian arms with a negative mean charge an empty slot that mean."""
    env = envs.wireless_latency(4, 2)
    state = env.reset(jax.random.PRNGKey(0))
    inp = env.observe(state, 1, jax.random.PRNGKey(1))
    empty = Decision(jnp.zeros(4, bool))
    _, _, stats = env.step(state, inp, empty, jax.random.PRNGKey(2))
    assert float(stats.expected_reward) == 0.0 and float(stats.reward) == 0.0
    assert float(stats.oracle_reward) > 0.0

    means = jnp.array([0.5, -0.25, -1.0, 0.75])
    env = envs.gaussian(4, 3, means=means)
    state = env.reset(jax.random.PRNGKey(0))
    inp = env.observe(state, 1, jax.random.PRNGKey(1))
    one = Decision(jnp.array([False, False, False, True]))
    _, _, stats = env.step(state, inp, one, jax.random.PRNGKey(2))
    # 0.75 plus two empty slots at the lowest mean, -1.0; the oracle has 0.75 + 0.5 - 0.25.
    assert float(stats.expected_reward) == 0.75 - 2.0
    assert float(stats.oracle_reward) == 1.0
