"""Every entry of `bandits.REGISTRY` against the `Selector` contract (after optax's alias_test).

One table drives the checks: each registered policy, built as `bandits.make(name, N, K)`,
runs on a small environment that supplies what it reads (contexts, edge servers, local
accuracies; a plain Bernoulli environment otherwise) and is checked for:

- `init`/`select`/`update` under `jax.jit` and `jax.vmap` over trials, in one program
  per entry (a scan over rounds, as the runner plays them);
- a state of fixed shapes and dtypes across rounds;
- decisions bool[N], inside `available`, at most the cohort size, accepted by the
  setting's `Env.feasible`;
- no host callback in that program (its jaxpr);
- a `ValueError` naming the argument, raised by the factory (so before anything is
  traced), for a bad cohort size and for every negative numeric hyper-parameter.

A policy added to the registry is picked up here; one that needs more than a stationary
environment needs a row in `ENVIRONMENTS`, else its test fails.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bandits
import models
from fedjax_sel import data as fed_data
from fedjax_sel import envs
from fedjax_sel.types import Env

N, K = 9, 2  # 3 edge servers of 3 clients for the hierarchical policies
TRIALS, ROUNDS = 3, 6
SERVERS = 3


class Setting(NamedTuple):
    """An environment a policy can run on, and the most clients it may select a round."""

    env: Env
    max_selected: int


def _stationary() -> Setting:
    return Setting(envs.bernoulli(N, K, means=np.linspace(0.1, 0.9, N)), K)


def _edge_servers() -> Setting:
    # K clients per server: dfl_delay's contexts f32[N, 2] and servers.
    return Setting(envs.dfl_delay(N, K, num_servers=SERVERS), SERVERS * K)


def _devices() -> Setting:
    # FedScale-style devices: RoundInput.info holds the losses and data fractions that
    # loss-based policies read, Feedback.info the training losses.
    return Setting(envs.make("devices", N, K), K)


def _exchange_time() -> Setting:
    return Setting(envs.exchange_time(N, K), K)


def _exchange_time_uncapped() -> Setting:
    # FedCS(3) selects every client under the deadline, uncapped (Huang et al. §6.1.1).
    return Setting(envs.exchange_time(N, K), N)


def _hierarchical() -> Setting:
    # Qu et al.'s network with the synthetic generator: the budgets bound the cohort.
    return Setting(envs.hierarchical(N, K, generator="synthetic"), N)


def _opinions() -> Setting:
    # Every client's test opinion in Feedback.info (Tong et al.'s FL&FA / FL&DA).
    return Setting(envs.opinion_surrogate(N, K), K)


def _training_with_local_accuracy() -> Setting:
    pool = fed_data.gaussian_mixture(
        seed=0, num_train=6 * N, num_test=90, num_classes=2, image_shape=(2, 2, 1)
    )
    data = fed_data.pack(pool, fed_data.iid(pool.y, N, seed=0), seed=0, heldout_from_test=True)
    model = models.get("logistic_regression", (2, 2, 1), 2)
    env = envs.training(N, K, data=data, model=model, batch_size=2, observe_local_accuracy=True)
    return Setting(env, K)


# Policies that need more than a stationary environment; every other entry runs on
# `_stationary`.
ENVIRONMENTS = {
    "cocs": _hierarchical,
    "cocs_literal": _hierarchical,
    "cucb_base": _hierarchical,
    "cucb_super": _hierarchical,
    "edge_linucb": _hierarchical,
    "edge_linucb_disjoint": _hierarchical,
    "edge_random": _hierarchical,
    "bp_ucb": _opinions,
    "bp_ucb_literal": _opinions,
    "cpow_d": _devices,
    "dfl_ccmab": _edge_servers,
    "dfl_ccmab_literal": _edge_servers,
    "fedcs": _exchange_time_uncapped,
    "local_accuracy": _training_with_local_accuracy,
    "oort": _devices,
    "oort_paper": _devices,
    "per_server_epsilon_greedy": _edge_servers,
    "per_server_random": _edge_servers,
    "pow_d": _devices,
    "quick_init_ucb": _opinions,
    "rbcs_f": _exchange_time,
    "rpow_d": _devices,
    "super_arm_ucb": _opinions,
}

CALLBACK_PRIMITIVES = ("callback",)  # pure_callback, io_callback, debug_callback, ...


def _setting(name: str) -> Setting:
    return ENVIRONMENTS.get(name, _stationary)()


def _round(selector, env):
    """One round of one trial, as the runner plays it: `(carry, t) -> (carry, (selected,
    available, accepted))`."""

    def round_fn(carry, t):
        env_state, state, key = carry
        key, obs_key, policy_key, step_key = jax.random.split(key, 4)
        inp = env.observe(env_state, t, obs_key)
        if selector.privileged:
            inp = inp._replace(oracle=env.oracle(env_state, inp))
        decision, selected_state = selector.select(state, inp, policy_key)
        chex.assert_trees_all_equal_shapes_and_dtypes(state, selected_state)  # while traced
        state = selected_state
        accepted = True if env.feasible is None else env.feasible(env_state, inp, decision)
        feedback, env_state, _ = env.step(env_state, inp, decision, step_key)
        state = selector.update(state, decision, feedback)
        return (env_state, state, key), (decision.selected, inp.available, jnp.asarray(accepted))

    return round_fn


def _primitives(jaxpr):
    """The names of every primitive in `jaxpr` and in the jaxprs nested in its equations."""
    for eqn in jaxpr.eqns:
        yield eqn.primitive.name
        for param in eqn.params.values():
            for sub in param if isinstance(param, (tuple, list)) else (param,):
                if hasattr(sub, "eqns"):
                    yield from _primitives(sub)
                elif hasattr(sub, "jaxpr") and hasattr(sub.jaxpr, "eqns"):
                    yield from _primitives(sub.jaxpr)


def _callbacks(fn, *args) -> list[str]:
    names = _primitives(jax.make_jaxpr(fn)(*args).jaxpr)
    return sorted({p for p in names if any(c in p for c in CALLBACK_PRIMITIVES)})


class Played(NamedTuple):
    """ROUNDS rounds of TRIALS trials of one entry (leading axis: trials)."""

    name: str
    setting: Setting
    initial: chex.ArrayTree  # the policy's state after init
    final: chex.ArrayTree  # and after the last round
    selected: jax.Array  # bool[TRIALS, ROUNDS, N]
    available: jax.Array  # bool[TRIALS, ROUNDS, N]
    accepted: jax.Array  # bool[TRIALS, ROUNDS], `Env.feasible` (True where none)
    callbacks: list[str]  # host callbacks in the program
    trials: Callable  # the program: PRNG keys [TRIALS] -> the above
    keys: jax.Array  # its argument


@pytest.fixture(scope="module", params=sorted(bandits.REGISTRY))
def played(request) -> Played:
    """Each entry's rounds as the runner plays them, in one program: `jit` of `vmap` over
    trials of `init` and a `scan` over rounds of observe, select, step and update (the
    state's shapes and dtypes checked after select while traced, and after update by the
    scan)."""
    name = request.param
    selector = bandits.make(name, N, K)
    setting = _setting(name)
    round_fn = _round(selector, setting.env)

    def trials(keys):
        def one(key):
            env_key, init_key, run_key = jax.random.split(key, 3)
            initial = selector.init(init_key)
            start = (setting.env.reset(env_key), initial, run_key)
            carry, outputs = jax.lax.scan(
                round_fn, start, jnp.arange(1, ROUNDS + 1, dtype=jnp.int32)
            )
            return initial, carry[1], outputs

        return jax.vmap(one)(keys)

    keys = jax.random.split(jax.random.PRNGKey(0), TRIALS)
    callbacks = _callbacks(trials, keys)
    initial, final, (selected, available, accepted) = jax.jit(trials)(keys)
    return Played(
        name, setting, initial, final, selected, available, accepted, callbacks, trials, keys
    )


def test_init_select_update_under_jit_and_vmap_with_fixed_state(played):
    name, setting = played.name, played.setting
    chex.assert_trees_all_equal_shapes_and_dtypes(played.initial, played.final)
    selected, available = np.asarray(played.selected), np.asarray(played.available)
    assert selected.shape == (TRIALS, ROUNDS, N) and selected.dtype == np.bool_, name
    assert not np.any(selected & ~available), name
    assert np.all(selected.sum(-1) <= setting.max_selected), (name, selected.sum(-1))


def test_the_rounds_lower_for_an_accelerator(played):
    # The program a GPU would run, lowered here without one: the selection ops'
    # definitions in place of their CPU kernels (`lax.platform_dependent`, which fails
    # to lower where a platform has no branch), JAX's own lowering of every primitive.
    exported = jax.export.export(jax.jit(played.trials), platforms=["cuda"])(played.keys)
    assert exported.platforms == ("cuda",), played.name
    expected = jax.tree.leaves(jax.eval_shape(played.trials, played.keys))
    assert [(a.shape, a.dtype) for a in exported.out_avals] == [
        (x.shape, x.dtype) for x in expected
    ], played.name


def test_scanned_rounds_have_no_host_callback_and_are_accepted(played):
    assert played.callbacks == [], played.name
    assert np.all(np.asarray(played.accepted)), played.name  # where the setting has feasible


def test_callback_check_finds_a_host_callback():
    def traced(x):
        def body(c, _):
            jax.debug.callback(lambda v: None, c)
            return c + 1.0, None

        return jax.lax.scan(body, x, None, length=2)[0]

    assert _callbacks(jax.vmap(traced), jnp.zeros(3)) == ["debug_callback"]


def test_every_entry_has_a_fitting_environment():
    """An entry that reads more than a stationary environment gives must be in the table."""
    stationary = _stationary().env
    inp = stationary.observe(stationary.reset(jax.random.PRNGKey(0)), 1, jax.random.PRNGKey(1))
    for name in bandits.REGISTRY:
        if name in ENVIRONMENTS:
            continue
        selector = bandits.make(name, N, K)
        state = selector.init(jax.random.PRNGKey(0))
        if selector.privileged:
            inp = inp._replace(
                oracle=stationary.oracle(stationary.reset(jax.random.PRNGKey(0)), inp)
            )
        try:
            jax.eval_shape(selector.select, state, inp, jax.random.PRNGKey(2))
        except (ValueError, TypeError, AttributeError) as e:
            pytest.fail(f"policy {name!r} has no fitting environment in ENVIRONMENTS: {e}")
    assert set(ENVIRONMENTS) <= set(bandits.REGISTRY), set(ENVIRONMENTS) - set(bandits.REGISTRY)


@pytest.mark.parametrize("name", sorted(bandits.REGISTRY))
@pytest.mark.parametrize("num_selected", [0, N + 1])
def test_bad_cohort_size_raises_before_tracing(name, num_selected):
    with pytest.raises(ValueError, match="num_selected"):
        bandits.make(name, N, num_selected)


def _numeric_hyperparameters():
    """(policy, argument) for every int or float argument with a non-negative default."""
    for name in sorted(bandits.REGISTRY):
        factory = bandits.REGISTRY[name]
        for arg in bandits.REGISTRY.parameters(name):
            default = inspect.signature(factory).parameters[arg].default
            if isinstance(default, (int, float)) and not isinstance(default, bool):
                if default >= 0:
                    yield name, arg, type(default)


@pytest.mark.parametrize("name, arg, kind", list(_numeric_hyperparameters()))
def test_negative_hyperparameter_raises_before_tracing(name, arg, kind):
    with pytest.raises(ValueError, match=arg):
        bandits.make(name, N, K, **{arg: kind(-1)})


def test_bad_entries_are_rejected():
    with pytest.raises(ValueError, match=r"unknown policy 'nope'; choose from"):
        bandits.make("nope", N, K)
    with pytest.raises(ValueError, match=r"policy 'ucb' takes exploration"):
        bandits.make("ucb", N, K, exploraton=1.0)
