"""Bad input, table-driven: every registry entry, the policies' feedback and each CLI.

Each row names the call, the exception it must raise and the text the message must
contain (the argument or flag). Every case also asserts that nothing was written (the
case runs in an empty working directory, which stays empty) and, for factories, that
nothing was traced or compiled: the error is raised in Python before any JAX function
runs. CLI cases run in-process through each launcher's `main`, its absl flags parsed by
`FLAGS(argv)` and reset between cases.
"""

from __future__ import annotations

import importlib
import math
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl import app, flags
from jax.experimental import checkify

import bandits
import fedjax_sel
from fedjax_sel import envs, validation
from fedjax_sel.types import Decision, Feedback

INF, NAN = math.inf, math.nan
N, K = 12, 2  # sizes every registry entry accepts (dfl_delay: 3 cells of 4)
SPECIAL_SIZES = {"exchange_time": (40, 8)}


@pytest.fixture
def empty_cwd(tmp_path, monkeypatch):
    """Runs the case in an empty directory and checks that it stays empty."""
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    yield work
    assert sorted(os.listdir(work)) == [], "the case wrote files"


def _sizes(name):
    return SPECIAL_SIZES.get(name, (N, K))


# ---------------------------------------------------------------------------------------
# Factories: every registry entry, by name, gets the GENERIC rows; SPECIFIC rows test
# their own arguments. (kind, entry, overrides, argument named)
# `overrides` replace the sizes (num_clients / num_selected) or add keyword arguments.

GENERIC = [
    ({"num_clients": "12"}, "num_clients"),
    ({"num_clients": True}, "num_clients"),
    ({"num_selected": 2.5}, "num_selected"),
    # Also where the factory imports its module on call (was: TypeError from it).
    ({"misspelt_option": 1}, "misspelt_option"),
]

SPECIFIC = [
    ("policy", "cs_ucb_q", {"fairness": ["a"] * N}, "fairness"),
    ("policy", "cs_ucb_q", {"fairness": NAN}, "fairness"),
    ("policy", "cs_ucb_q", {"beta": INF}, "beta"),
    ("policy", "cs_ucb_q", {"queue_from_first_round": "yes"}, "queue_from_first_round"),
    ("policy", "cs_ucb_q", {"availability": None}, "availability"),
    ("policy", "dfl_ccmab", {"horizon": INF}, "horizon"),
    ("policy", "dfl_ccmab", {"alpha": NAN}, "alpha"),
    ("policy", "dfl_ccmab_literal", {"grid": 0}, "grid"),
    ("policy", "epsilon_greedy", {"epsilon": True}, "epsilon"),
    ("policy", "epsilon_greedy", {"epsilon": "0.1"}, "epsilon"),
    ("policy", "epsilon_greedy", {"epsilon": None}, "epsilon"),
    ("policy", "fedcs", {"deadline_s": INF}, "deadline_s"),
    ("policy", "fedcs", {"known_coefficients": [["a"] * 3] * N}, "known_coefficients"),
    ("policy", "fedcs", {"cap_at_num_selected": 1}, "cap_at_num_selected"),
    ("policy", "group_round_robin", {"shuffle": "no"}, "shuffle"),
    ("policy", "per_server_epsilon_greedy", {"epsilon": NAN}, "epsilon"),
    ("policy", "per_server_random", {"num_servers": 5}, "num_servers"),
    ("policy", "rbcs_f", {"penalty_weight": INF}, "penalty_weight"),
    ("policy", "rbcs_f", {"fairness": "False"}, "fairness"),
    ("policy", "rbcs_f", {"exploration": 1 + 0j}, "exploration"),
    ("policy", "thompson", {"prior_scale": NAN}, "prior_scale"),
    ("policy", "thompson", {"prior": "uniform"}, "prior"),
    ("policy", "thompson_gaussian", {"prior_scale": INF}, "prior_scale"),
    ("policy", "ucb", {"exploration": INF}, "exploration"),
    ("policy", "ucb", {"exploration": "1.5"}, "exploration"),
    ("policy", "ucb", {"exploration": np.complex64(1.0)}, "exploration"),
    ("env", "bernoulli", {"means": ["a"] * N}, "means"),
    ("env", "bernoulli", {"means": [NAN] * N}, "means"),
    ("env", "bernoulli", {"means_range": (0.0, INF)}, "means_range[1]"),
    ("env", "bernoulli", {"availability": NAN}, "availability"),
    ("env", "bernoulli", {"availability": "0.5"}, "availability"),
    ("env", "beta", {"concentration": True}, "concentration"),
    ("env", "beta", {"means_range": (0.5, 0.2)}, "means_range"),
    ("env", "dfl_delay", {"tau_max": INF}, "tau_max"),
    ("env", "dfl_delay", {"noise_dbm": "x"}, "noise_dbm"),
    ("env", "dfl_delay", {"cycles_per_sample_range": (1e7, INF)}, "cycles_per_sample_range[1]"),
    ("env", "dfl_delay", {"shard_size": 2**31 - 1}, "shard_size"),  # was: int32 overflow in jit
    ("env", "dfl_delay", {"max_activity": 2**31 - 1}, "max_activity"),
    ("env", "exchange_time", {"model_size_mb": INF, "fairness_rate": 0.1}, "model_size_mb"),
    ("env", "exchange_time", {"bandwidth_mhz": (2.0, NAN)}, "bandwidth_mhz[1]"),
    ("env", "exchange_time", {"cpu_ratio": "fast"}, "cpu_ratio"),
    ("env", "gaussian", {"stddev": INF}, "stddev"),
    ("env", "gaussian", {"stddev": "1"}, "stddev"),
    ("env", "gaussian", {"means_range": (0.0, INF)}, "means_range[1]"),
    ("env", "gaussian", {"means": [1.0] * (N - 1) + [None]}, "means"),
    ("env", "opinion_surrogate", {"success": [1.0] * (N - 1)}, "success"),  # was: NumPy's
    ("env", "opinion_surrogate", {"success": "a"}, "success"),  # broadcast or float error
    ("env", "opinion_surrogate", {"quality_range": 0.3}, "quality_range"),  # was: TypeError
    ("env", "opinion_surrogate", {"accuracy_range": (0.5,)}, "accuracy_range"),  # IndexError
    ("env", "opinion_surrogate", {"seed": 2**64}, "seed"),  # was: accepted
    ("env", "opinion_surrogate", {"seed": 1.5}, "seed"),
    ("env", "training", {"learning_rate": INF}, "learning_rate"),
    ("env", "training", {"batch_size": 0}, "batch_size"),
    ("env", "training", {"latency_range": (1.0, INF)}, "latency_range[1]"),
    ("env", "training", {"observe_local_accuracy": "yes"}, "observe_local_accuracy"),
    ("env", "wireless_latency", {"deadline_s": INF}, "deadline_s"),
    ("env", "wireless_latency", {"deadline_s": NAN}, "deadline_s"),
    ("env", "wireless_latency", {"geometry_seed": 2**32 + 1}, "geometry_seed"),
    ("env", "wireless_latency", {"geometry_seed": -1}, "geometry_seed"),
    ("env", "wireless_latency", {"per_client_metrics": None}, "per_client_metrics"),
]

# What a variant binds is its name's (was: silently overridden, cpow_d running pow-d).
SPECIFIC += [
    ("policy", "cpow_d", {"variant": "pow-d"}, "variant"),
    ("policy", "thompson_gaussian", {"prior": "beta"}, "prior"),
    ("env", "fl_fa", {"analytics": "da"}, "analytics"),
]

REGISTRIES = {"policy": bandits.REGISTRY, "env": envs.REGISTRY}
FACTORY_CASES = [
    (kind, name, overrides, arg)
    for kind, registry in REGISTRIES.items()
    for name in sorted(registry)
    for overrides, arg in GENERIC
] + SPECIFIC


@pytest.mark.parametrize(
    "kind, name, overrides, arg",
    FACTORY_CASES,
    ids=[f"{k}-{n}-{'-'.join(o)}" for k, n, o, _ in FACTORY_CASES],
)
def test_factory_refuses_bad_argument(kind, name, overrides, arg, empty_cwd, nothing_traced):
    num_clients, num_selected = _sizes(name)
    kwargs = dict(overrides)
    num_clients = kwargs.pop("num_clients", num_clients)
    num_selected = kwargs.pop("num_selected", num_selected)
    with nothing_traced(), pytest.raises(ValueError) as info:
        REGISTRIES[kind].make(name, num_clients, num_selected, **kwargs)
    assert arg in str(info.value), str(info.value)


PUBLIC_FACTORIES = [
    (lambda: envs.wireless_latency(20, 5, deadline_s=INF), "deadline_s"),
    (lambda: envs.gaussian(10, 2, stddev=INF), "stddev"),
    (lambda: envs.bernoulli(10, 2, means_range=(0, INF)), "means_range"),
    (lambda: envs.availability.markov(NAN, 0.5, 10), "turn_on"),
    (lambda: envs.availability.bernoulli("0.5", 10), "availability"),
    (lambda: bandits.fixed(10, clients=[1.5]), "clients"),
    (lambda: bandits.ucb(10, 2, exploration=NAN), "exploration"),
    (lambda: bandits.modified_cs_ucb(10, np.float32(2)), "num_selected"),
]


@pytest.mark.parametrize("make, arg", PUBLIC_FACTORIES, ids=[a for _, a in PUBLIC_FACTORIES])
def test_public_factory_refuses_bad_argument(make, arg, empty_cwd, nothing_traced):
    with nothing_traced(), pytest.raises(ValueError, match=arg):
        make()


# ---------------------------------------------------------------------------------------
# Validation helpers: the cases no factory reaches on its own.


@pytest.mark.parametrize(
    "value, ok",
    [
        (0, True),
        (2**32 - 1, True),
        (np.uint32(7), True),
        (2**32, False),
        (2**32 + 1, False),
        (2**64, False),
        (-1, False),
        (1.0, False),
        (True, False),
        ("1", False),
    ],
)
def test_seed_accepts_exactly_the_integers_below_two_to_the_32(value, ok):
    if ok:
        assert validation.seed("seed", value) == int(value)
    else:
        with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 4294967295\]"):
            validation.seed("seed", value)


@pytest.mark.parametrize("value", ["1", b"1", 1j, None, True, np.bool_(False), [1.0]])
def test_real_refuses_what_is_not_a_real_number(value):
    with pytest.raises(ValueError, match="x must be a real number"):
        validation.real("x", value)


def test_real_accepts_numpy_and_jax_scalars():
    assert validation.real("x", np.float32(0.5)) == 0.5
    assert validation.real("x", jnp.asarray(3)) == 3.0


# ---------------------------------------------------------------------------------------
# Feedback of the policies with an assumed range: refused eagerly, free under jit, and
# caught by checkify.

FEEDBACK_CASES = [
    ("thompson", "reward", NAN),
    ("thompson", "reward", 1.5),
    ("thompson", "reward", -0.5),
    ("thompson_gaussian", "reward", INF),
    ("ucb", "reward", NAN),
    ("ucb", "reward", -INF),
    ("epsilon_greedy", "reward", NAN),
    ("cs_ucb", "reward", 2.0),
    ("cs_ucb_q", "reward", NAN),
    ("per_server_epsilon_greedy", "reward", INF),
    ("dfl_ccmab", "latency", -1.0),
    ("fedcs", "latency", NAN),
]
POLICY_NAME = {"thompson_gaussian": "thompson"}


def _feedback(field, value, observed=True):
    """Feedback of N clients, client 3 carrying `value` in `field` (observed or not)."""
    reward = np.full((N,), 0.5, np.float32)
    latency = np.ones((N,), np.float32)
    {"reward": reward, "latency": latency}[field][3] = value
    obs = np.ones((N,), bool)
    obs[3] = observed
    return Feedback(
        observed=jnp.asarray(obs),
        reward=jnp.asarray(reward),
        latency=jnp.asarray(latency),
        success=jnp.asarray(obs),
    )


def _policy(name):
    return bandits.make(name, N, K)


@pytest.mark.parametrize("name, field, value", FEEDBACK_CASES)
def test_policy_refuses_bad_feedback_eagerly(name, field, value):
    selector = _policy(name)
    state = selector.init(jax.random.PRNGKey(0))
    decision = Decision(jnp.ones((N,), bool))
    with pytest.raises(ValueError) as info:
        selector.update(state, decision, _feedback(field, value))
    message = str(info.value)
    assert repr(POLICY_NAME.get(name, name)) in message and f"Feedback.{field}" in message
    assert "client index (3,)" in message, message
    # An unobserved client's value is undefined, hence never refused.
    selector.update(state, decision, _feedback(field, value, observed=False))


@pytest.mark.parametrize("name, field, value", FEEDBACK_CASES[:3] + FEEDBACK_CASES[-2:])
def test_bad_feedback_under_jit_is_caught_by_checkify_only(name, field, value):
    selector = _policy(name)
    state = selector.init(jax.random.PRNGKey(0))
    decision = Decision(jnp.ones((N,), bool))
    bad = _feedback(field, value)
    jax.jit(selector.update)(state, decision, bad)  # no check without checkify
    err, _ = jax.jit(checkify.checkify(selector.update))(state, decision, bad)
    assert err.get() is not None and f"Feedback.{field}" in err.get()
    err, _ = jax.jit(checkify.checkify(selector.update))(state, decision, _feedback(field, 0.5))
    assert err.get() is None


@pytest.mark.parametrize(
    "name", ["thompson", "ucb", "epsilon_greedy", "cs_ucb", "cs_ucb_q", "dfl_ccmab", "rbcs_f"]
)
def test_jitted_update_compiles_no_check(name):
    """Without checkify the check leaves nothing in the compiled program: XLA's is-finite,
    which the checkified program holds, is absent from it."""
    selector = _policy(name)
    state = selector.init(jax.random.PRNGKey(0))
    args = (state, Decision(jnp.ones((N,), bool)), _feedback("reward", 0.5))
    plain = jax.jit(selector.update).lower(*args).compile().as_text()
    checked = jax.jit(checkify.checkify(selector.update)).lower(*args).compile().as_text()
    assert "is-finite" in checked and "is-finite" not in plain
    assert "callback" not in plain.lower()


# ---------------------------------------------------------------------------------------
# CLIs, in-process. (launcher, argv, text the message must contain)

CLI_CASES = [
    ("launch.sweep", ["--env=dfl_delay", "--policies=random"], "num_servers"),
    ("launch.sweep", ["--env=dfl_delay", "--env_option=num_servers=7"], "num_servers"),
    ("launch.sweep", ["--env=training", "--policies=oracle"], "oracle"),
    ("launch.sweep", ["--env=nope"], "unknown environment 'nope'"),
    ("launch.sweep", ["--policies=ucb,nope"], "unknown policy 'nope'"),
    ("launch.sweep", ["--policies=ucb", "--policy_option=ucb.exploration=inf"], "exploration"),
    ("launch.sweep", ["--policies=ucb", "--policy_option=ucb=2"], "--policy_option"),
    ("launch.sweep", ["--policies=ucb", "--policy_option=thompson.prior_scale=2"], "thompson"),
    ("launch.sweep", ["--env_option=stddev"], "--env_option"),
    ("launch.sweep", ["--num_clients=0"], "num_clients"),
    ("launch.sweep", ["--num_clients=-5"], "num_clients"),
    ("launch.sweep", ["--num_selected=0"], "num_selected"),
    ("launch.sweep", ["--num_rounds=-3"], "num_rounds"),
    ("launch.sweep", ["--num_trials=0"], "num_trials"),
    ("launch.sweep", ["--seed=-1"], "seed"),
    ("launch.sweep", ["--seed=4294967297"], "seed"),
    ("launch.sweep", ["--availability=nan"], "availability"),
    ("launch.sweep", ["--output_dir=afile"], "output_dir='afile' is an existing file"),
    ("launch.sweep", ["--output_dir=afile/sub"], "which is a file"),
    ("launch.sweep", ["extra"], "unexpected arguments"),
    ("launch.sweep", ["--env=training", "--env_option=bogus=1"], "bogus"),
    ("launch.reproduce", ["--paper=xia", "--figure=1", "--num_trials=0"], "num_trials"),
    ("launch.reproduce", ["--paper=xia", "--figure=1", "--num_rounds=-1"], "num_rounds"),
    ("launch.reproduce", ["--paper=xia", "--figure=1", "--seed=4294967297"], "seed"),
    ("launch.reproduce", ["--paper=xia", "--figure=1", "--output_dir=afile"], "output_dir"),
    ("launch.reproduce", ["--paper=nope", "--figure=1"], "unknown paper"),
    ("launch.bench", ["--num_clients=abc"], "--num_clients"),
    ("launch.bench", ["--num_clients=0"], "--num_clients"),
    ("launch.bench", ["--num_trials=-1"], "--num_trials"),
    ("launch.bench", ["--seed=4294967297"], "--seed"),
    ("launch.bench", ["--output=afile/b.json"], "--output"),
    ("launch.bench", ["--policies=nope"], "policies"),
    ("launch.memory_run", ["--output=afile/m.json"], "--output"),
    ("launch.memory_run", ["--checkpoint_dir=afile"], "--checkpoint_dir"),
    ("launch.memory_run", ["--seed=4294967297"], "--seed"),
    ("launch.memory_run", ["--num_clients=5"], "--num_clients"),
    ("launch.sweep", ["--env_option=availability=0.1"], "availability"),
    ("launch.sweep", ["--compilation_cache_dir=afile"], "--compilation_cache_dir='afile'"),
    ("launch.reproduce", ["--compilation_cache_dir=afile/c"], "--compilation_cache_dir"),
    ("launch.bench", ["--policies="], "--policies must name at least one policy"),
    ("launch.tong_bench", ["--num_trials=0"], "--num_trials"),
    ("launch.tong_bench", ["--num_clients=10", "--num_selected=10"], "num_selected must be below"),
    (
        "launch.tong_bench",
        ["--num_clients=10", "--num_selected=2", "--num_rounds=5"],
        "--num_rounds",
    ),
    ("launch.tong_bench", ["--num_clients=10", "--num_selected=3", "--form=dense"], "divide"),
    ("launch.tong_bench", ["--output=afile/t.json"], "--output"),
    ("launch.tong_bench", ["extra"], "unexpected arguments"),
    ("launch.qu_speed", ["--trials_per_chunk=3"], "trials_per_chunk"),
    ("launch.qu_speed", ["extra"], "unexpected arguments"),
    ("launch.xia_speed", ["--trials_per_chunk=3"], "trials_per_chunk"),
    ("launch.xia_speed", ["--trials_per_chunk=0"], "trials_per_chunk"),
    ("launch.bench_training", ["--num_selected=0"], "--num_selected"),
    ("launch.bench_training", ["--num_clients=0"], "--num_clients"),
    ("launch.bench_training", ["--batch_size=0"], "--batch_size"),
    ("launch.bench_training", ["--output=afile/t.json"], "--output"),
]


def _launcher(module_name):
    """Imports launcher `module_name` afresh, with only its own flags defined.

    The launchers define flags of the same names in absl's global FLAGS, so the flags
    of any launcher loaded before are removed first.
    """
    # Copies: removing a flag edits the lists being walked.
    for module, defined in list(flags.FLAGS.flags_by_module_dict().items()):
        if module.startswith("launch."):
            for flag in list(defined):
                if flag.name in flags.FLAGS:
                    delattr(flags.FLAGS, flag.name)
    sys.modules.pop(module_name, None)
    module = importlib.import_module(module_name)
    if hasattr(module, "_define_flags"):
        module._define_flags()
    return module


@pytest.fixture
def cli_cwd(tmp_path, monkeypatch):
    """An empty working directory but for a file named `afile`; nothing may be added."""
    work = tmp_path / "cwd"
    work.mkdir()
    (work / "afile").write_text("a file, not a directory")
    monkeypatch.chdir(work)
    monkeypatch.setattr(fedjax_sel, "configure_cpu", lambda *a, **k: None)
    yield work
    assert sorted(os.listdir(work)) == ["afile"], "the case wrote files"
    assert (work / "afile").read_text() == "a file, not a directory"


@pytest.mark.parametrize(
    "module_name, argv, text", CLI_CASES, ids=[f"{m}{' '.join(a)}" for m, a, _ in CLI_CASES]
)
def test_cli_refuses_bad_flag(module_name, argv, text, cli_cwd):
    module = _launcher(module_name)
    try:
        with pytest.raises((app.UsageError, flags.Error)) as info:
            module.main(flags.FLAGS([module_name, *argv]))
    finally:
        flags.FLAGS.unparse_flags()
    assert text in str(info.value), str(info.value)


# Cases of `fedjax_sel.simulate`'s own arguments, as (keyword arguments, argument named).
SIMULATE_CASES: list[tuple[dict, str]] = [
    ({"seed": 2**32 + 1}, "seed"),  # was: silently the run of seed 1
    ({"seed": 2**64}, "seed"),  # was: OverflowError from inside JAX
    ({"seed": -1}, "seed"),
    ({"seed": 1.5}, "seed"),
    ({"seed": "0"}, "seed"),
    ({"seed": True}, "seed"),
    ({"num_rounds": 0}, "num_rounds"),
    ({"num_rounds": 2.0}, "num_rounds"),
    ({"num_rounds": 2**24 + 1}, "num_rounds"),
    ({"num_trials": 0}, "num_trials"),
    ({"num_trials": None}, "num_trials"),
    ({"rounds_per_chunk": 0}, "rounds_per_chunk"),  # was: silently all rounds at once
    ({"rounds_per_chunk": 5}, "rounds_per_chunk"),
    ({"trials_per_chunk": 3}, "trials_per_chunk"),
    ({"trials_per_chunk": 0}, "trials_per_chunk"),
    ({"memory_budget_bytes": 0}, "memory_budget_bytes"),
    ({"trials_per_chunk": 2, "memory_budget_bytes": 10**9}, "memory_budget_bytes"),
    ({"devices": ["cpu"]}, "devices"),  # was: AttributeError
    ({"devices": "cpu"}, "devices"),
    # Under a file; was: NotADirectoryError.
    ({"checkpoint_dir": os.path.join(__file__, "ckpt")}, "checkpoint_dir"),
    ({"checkpoint_dir": ""}, "checkpoint_dir"),
    ({"progress": 3}, "progress"),  # was: TypeError after the first chunk
    ({"config": {"array": np.zeros(2)}}, "config"),
    ({"config": [1, 2]}, "config"),  # was: TypeError
    ({"config": {"x": float("nan")}}, "config"),  # was: a checkpoint never resumed
    ({"devices": jax.devices()[:1] * 2}, "devices"),  # was: AssertionError inside JAX
    ({"policies": {}}, "policies"),
    ({"policies": {"ucb": "ucb"}}, "policies"),
    ({"env": "bernoulli"}, "env"),
]


@pytest.mark.parametrize("kwargs, arg", SIMULATE_CASES)
def test_simulate_refuses_bad_argument(kwargs, arg, empty_cwd, nothing_traced):
    call = dict(
        policies={"random": bandits.random(N, K)},
        env=envs.bernoulli(N, K),
        num_rounds=4,
        num_trials=2,
    )
    call.update(kwargs)
    with nothing_traced(), pytest.raises(ValueError, match=arg):
        fedjax_sel.simulate(**call)


def _training_results():
    curve = {"mean": np.array([0.2, 0.5, 0.8]), "std": np.zeros(3)}
    return fedjax_sel.Results(
        config={"num_trials": 1, "num_rounds": 3},
        curves={"p": {"accuracy": curve, "loss": curve, "cumulative_latency": curve}},
        totals={},
        selection_fraction={},
    )


# Data and FL helpers' own arguments, as (call, argument named). Seeds were handed to
# NumPy or JAX as given (None drew a fresh split each call, 2^32 + 1 the split of seed 1);
# flags were read by truthiness ("False" meant True); a target out of range read as never
# reached.
DATA_FL_CASES = [
    (lambda: fedjax_sel.data.iid(np.arange(20) % 4, 4, seed=None), "seed"),
    (lambda: fedjax_sel.data.dirichlet(np.arange(20) % 4, 4, seed=-1), "seed"),
    (lambda: fedjax_sel.data.load("digits", 4, seed=2**32 + 1), "seed"),
    (lambda: fedjax_sel.data.load_digits(seed=1.5), "seed"),
    (lambda: fedjax_sel.data.gaussian_mixture(seed=2**32 + 1), "seed"),
    (lambda: fedjax_sel.data.synthetic_leaf(4, seed=2**32 + 1), "seed"),
    (lambda: fedjax_sel.data.synthetic_leaf(4, iid="no"), "iid"),
    (
        lambda: fedjax_sel.data.pack(
            fedjax_sel.data.load_digits(), [np.arange(5), np.arange(5, 10)], heldout_from_test="no"
        ),
        "heldout_from_test",
    ),
    (lambda: fedjax_sel.fl.fedavg(drop_late="False"), "drop_late"),
    (lambda: fedjax_sel.fl.decentralized(2, drop_late="False"), "drop_late"),
    (lambda: fedjax_sel.fl.rounds_to_accuracy(_training_results(), "p", 1.5), "target"),
    (lambda: fedjax_sel.fl.time_to_accuracy(_training_results(), "p", math.nan), "target"),
    (lambda: fedjax_sel.fl.time_to_loss(_training_results(), "p", -0.1), "target"),
    (lambda: fedjax_sel.fl.rounds_to_accuracy(_training_results(), "q", 0.5), "unknown policy"),
]


@pytest.mark.parametrize("call, arg", DATA_FL_CASES, ids=[a for _, a in DATA_FL_CASES])
def test_data_and_fl_helpers_refuse_bad_arguments(call, arg):
    import fedjax_sel.data  # noqa: F401 (lazy in fedjax_sel)
    import fedjax_sel.fl  # noqa: F401

    with pytest.raises(ValueError, match=arg):
        call()
    # The valid calls they stand for give what they document.
    assert fedjax_sel.fl.rounds_to_accuracy(_training_results(), "p", 0.5) == 2
    assert fedjax_sel.fl.time_to_loss(_training_results(), "p", 0.2) == 0.2
