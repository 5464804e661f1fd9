"""Golden results: the selections and metrics of fixed-seed runs, recorded from the code
before the selection ops moved to `fedjax_sel.ops`, must not change. One documented change
since: FedCS(3) on `exchange_time` selects fewer than m clients in some rounds, and the
empty slots are now charged as the slowest available client (`envs.cohort`), so its
reward and regret entries were re-recorded; and Beta Thompson sampling's draws
(`ops.sampling.beta`) are now Cheng's rejection sampler (the inverse CDF where a or b
is 1) in place of a ratio of Gamma draws, so its entries ("thompson", not
"thompson_gaussian") were re-recorded (every other entry of their runs unchanged), as
were epsilon-greedy's, whose exploring rounds now take the top k of equal scores (one
selection a round); and the decisions of round robin and the oracle carry their
clients' places (`Decision.indices`), at which the stationary environments now value them
(and the oracle's cohort), so their "bernoulli37" entries were re-recorded. Every other
entry is the original.

Selections (which clients, how often) are compared exactly; floating-point metrics to a
relative 1e-6, since a processor with other vector widths may sum a trial's clients in
another order. They are the CPU program's, and run on a CPU device wherever the tests
run: on an accelerator the selection ops take their portable definitions, whose
tie-breaks draw other random numbers (equal in distribution, tests/test_ops.py).
Regenerate (only for a documented change of results) with `python tests/test_golden.py`.
"""

import os

import jax
import numpy as np
import pytest

import bandits
import fedjax_sel
from fedjax_sel import envs, ops

PATH = os.path.join(os.path.dirname(__file__), "golden", "golden.npz")


def _runs():
    """name -> (env, policies, num_rounds, num_trials)."""
    fair = np.full(20, 0.1)
    truth = envs.true_coefficients(40)
    return {
        "bernoulli37": (
            envs.bernoulli(37, 5, availability=0.8),
            {
                "random": bandits.random(37, 5),
                "round_robin": bandits.round_robin(37, 5),
                "fixed": bandits.fixed(37, [0, 3, 9]),
                "epsilon_greedy": bandits.epsilon_greedy(37, 5, epsilon=0.2),
                "ucb": bandits.ucb(37, 5),
                "thompson": bandits.thompson(37, 5),
                "thompson_gaussian": bandits.thompson(37, 5, prior="gaussian"),
                "oracle": bandits.oracle(),
            },
            30,
            16,
        ),
        "bernoulli1000": (
            envs.bernoulli(1000, 100),
            {"ucb": bandits.ucb(1000, 100), "random": bandits.random(1000, 100)},
            12,
            8,
        ),
        "bernoulli1500": (
            envs.bernoulli(1500, 150, availability=0.9),
            {"ucb": bandits.ucb(1500, 150), "thompson": bandits.thompson(1500, 150)},
            12,
            8,
        ),
        "gaussian100": (
            envs.gaussian(100, 10),
            {
                "ucb": bandits.ucb(100, 10),
                "thompson_gaussian": bandits.thompson(100, 10, prior="gaussian"),
                "group_round_robin": bandits.group_round_robin(100, 10, shuffle=True),
            },
            25,
            16,
        ),
        "wireless": (
            envs.wireless_latency(20, 4),
            {
                "cs_ucb": bandits.cs_ucb(20, 4),
                "modified_cs_ucb": bandits.modified_cs_ucb(20, 4),
                "cs_ucb_q": bandits.cs_ucb_q(20, 4, fair, beta=0.1, availability=1.0),
                "group_round_robin": bandits.group_round_robin(20, 4),
                "oracle": bandits.oracle(),
            },
            30,
            16,
        ),
        "exchange_time": (
            envs.exchange_time(40, 8),
            {
                "rbcs_f": bandits.rbcs_f(40, 8),
                "fedcs": bandits.fedcs(40, 8, truth),
                "random": bandits.random(40, 8),
                "oracle": bandits.oracle(),
            },
            25,
            16,
        ),
        "dfl_delay": (
            envs.dfl_delay(18, 2, num_servers=3),
            {
                "dfl_ccmab": bandits.dfl_ccmab(18, 2, num_servers=3, horizon=30),
                "per_server_random": bandits.per_server_random(18, 2, num_servers=3),
                "per_server_epsilon_greedy": bandits.per_server_epsilon_greedy(
                    18, 2, num_servers=3
                ),
                "oracle": bandits.oracle(),
            },
            30,
            16,
        ),
    }


def _ops_at(n, k):
    """The selection ops at N = n, cohort k, on fixed random inputs batched over 8 rows."""
    kd, km, kk = jax.random.split(jax.random.PRNGKey(n), 3)
    # Scores on a coarse grid, so that ties at the k-th place are common.
    scores = jax.random.randint(kd, (8, n), 0, 7).astype(np.float32)
    mask = jax.random.uniform(km, (8, n)) < 0.9
    keys = jax.random.split(kk, 8)
    return {
        f"masked_top_k/{n}": jax.vmap(lambda s, m, r: ops.masked_top_k(s, m, k, r))(
            scores, mask, keys
        ),
        f"top_k_mask/{n}": jax.vmap(lambda s, m: ops.top_k_mask(s, m, k))(scores, mask),
        f"uniform_subset/{n}": jax.vmap(lambda m, r: ops.uniform_subset(m, k, r))(mask, keys),
        f"gumbel_top_k/{n}": jax.vmap(lambda s, m, r: ops.gumbel_top_k(s, m, k, r))(
            scores, mask, keys
        ),
        f"masked_top_k_one/{n}": ops.masked_top_k(scores[0], mask[0], k, keys[0]),
    }


def _kernel_outputs():
    out = {}
    with jax.default_device(jax.devices("cpu")[0]):
        for n, k in [(37, 5), (100, 10), (1000, 100), (1500, 150)]:
            out.update(_ops_at(n, k))
    return {name: np.asarray(x) for name, x in out.items()}


def _collect(part):
    """The arrays of one part: "ops" (the selection ops) or the name of a run."""
    if part == "ops":
        return _kernel_outputs()
    env, policies, num_rounds, num_trials = _runs()[part]
    results = fedjax_sel.simulate(
        policies,
        env,
        num_rounds=num_rounds,
        num_trials=num_trials,
        seed=3,
        progress=None,
        devices=jax.devices("cpu"),
    )
    arrays = {}
    for policy in results.policies:
        arrays[f"fraction/{part}/{policy}"] = results.selection_fraction[policy]
        for metric, curve in results.curves[policy].items():
            arrays[f"curve/{part}/{policy}/{metric}"] = curve["mean"]
        for total, x in results.totals[policy].items():
            arrays[f"total/{part}/{policy}/{total}"] = x
    return arrays


# The parts, one test each (so that they spread over the test workers).
PARTS = (
    "ops",
    "bernoulli37",
    "bernoulli1000",
    "bernoulli1500",
    "gaussian100",
    "wireless",
    "exchange_time",
    "dfl_delay",
)


def _part_of(name):
    return name.split("/")[1] if name.startswith(("fraction/", "curve/", "total/")) else "ops"


def test_every_run_is_a_part():
    assert set(PARTS) == {"ops", *_runs()}
    with np.load(PATH) as golden:
        assert {_part_of(name) for name in golden.files} == set(PARTS)


@pytest.mark.parametrize("part", PARTS)
def test_golden_results_are_unchanged(part):
    collected = _collect(part)
    with np.load(PATH) as golden:
        names = [name for name in golden.files if _part_of(name) == part]
        assert sorted(names) == sorted(collected)
        for name in names:
            want, got = golden[name], collected[name]
            exact = (
                name.startswith(("fraction/", "masked_top_k", "top_k_mask", "uniform_subset"))
                or name.startswith("gumbel")
                or name.endswith(("/num_selected", "failed"))
            )
            if exact:
                np.testing.assert_array_equal(got, want, err_msg=name)
            else:
                np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=name)


if __name__ == "__main__":
    np.savez_compressed(PATH, **{k: v for part in PARTS for k, v in _collect(part).items()})
