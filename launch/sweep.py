r"""Monte Carlo sweep of selection policies on one environment.

  python -m launch.sweep                      # a meaningful default, about a minute on 2 cores
  python -m launch.sweep --env=bernoulli --policies=ucb,thompson,random \
      --num_clients=1000 --num_selected=100 --num_rounds=5000 --num_trials=1000
  python -m launch.sweep --flagfile=launch/flagfiles/sweep_default.cfg
  python -m launch.sweep --distributed ...   # on every process of a job (docs/scale.md)
  python -m launch.sweep --env=dfl_delay --num_clients=30 --num_selected=2 \
      --env_option=num_servers=3 --policies=dfl_ccmab,per_server_random \
      --policy_option=dfl_ccmab.horizon=1000 --num_rounds=1000

Parameters of the environment and the policies beyond the two sizes are set with
`--env_option=NAME=VALUE` and `--policy_option=POLICY.NAME=VALUE` (repeatable; VALUE a
Python literal). Every bad flag is a usage error naming it, raised before anything runs
or is written.

Compiled programs are kept in JAX's persistent compilation cache
(`--compilation_cache_dir`, `launch/compilation_cache.py`): a later run of the same sweep
loads them instead of compiling them, and prints how many it loaded.

Prints progress while it runs and a table at the end (final cumulative regret, mean and
95% interval over trials, per policy, with the other headline metrics); writes
`results.npz`/`results.json`, the tables `results.csv` (curves: policy, metric, round,
mean, std, ci) and `results_totals.csv` (per-trial totals), `regret.png` (`reward.png`
for an environment without an oracle) and a resumable checkpoint to `--output_dir`, which
must not hold the results of another configuration.
"""

from __future__ import annotations

import time

import jax
from absl import app, flags

import fedjax_sel
from experiments import sweep
from fedjax_sel import validation
from launch import compilation_cache

_ENV = flags.DEFINE_string("env", "bernoulli", "Environment name (fedjax_sel.envs.REGISTRY).")
_POLICIES = flags.DEFINE_list(
    "policies",
    "oracle,ucb,thompson,epsilon_greedy,round_robin,random",
    "Comma-separated policy names (bandits.REGISTRY).",
)
_NUM_CLIENTS = flags.DEFINE_integer("num_clients", 100, "Number of clients N.")
_NUM_SELECTED = flags.DEFINE_integer("num_selected", 10, "Clients selected per round k.")
_NUM_ROUNDS = flags.DEFINE_integer("num_rounds", 1000, "Rounds T.")
_NUM_TRIALS = flags.DEFINE_integer("num_trials", 200, "Monte Carlo trials M.")
_AVAILABILITY = flags.DEFINE_float("availability", 1.0, "Probability a client is available.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of every random stream.")
_TRIALS_PER_CHUNK = flags.DEFINE_integer(
    "trials_per_chunk",
    None,
    "Trials run at once (a power of two); default all, or on CPU at most 2^21 / N per device.",
)
_ROUNDS_PER_CHUNK = flags.DEFINE_integer(
    "rounds_per_chunk", None, "Rounds per compiled call (progress, checkpoints); default T/10."
)
_OUTPUT_DIR = flags.DEFINE_string(
    "output_dir", "out/sweep", "Where results and figures go; empty to write nothing."
)
_CACHE_DIR = compilation_cache.define_flag()
_DISTRIBUTED = flags.DEFINE_bool(
    "distributed",
    False,
    "Run as one process of a jax.distributed job (docs/scale.md): every process runs the "
    "same command; process 0 writes the results.",
)
_COORDINATOR = flags.DEFINE_string(
    "coordinator_address",
    None,
    "host:port of process 0, for --distributed; None lets JAX find it (Slurm, Cloud TPU).",
)
_NUM_PROCESSES = flags.DEFINE_integer(
    "num_processes", None, "Processes of the --distributed job; None lets JAX find it."
)
_PROCESS_ID = flags.DEFINE_integer(
    "process_id", None, "This process's index in the --distributed job; None lets JAX find it."
)
_ENV_OPTIONS = flags.DEFINE_multi_string(
    "env_option", [], "NAME=VALUE, a parameter of the environment (repeatable)."
)
_POLICY_OPTIONS = flags.DEFINE_multi_string(
    "policy_option", [], "POLICY.NAME=VALUE, a parameter of one policy (repeatable)."
)


def policy_options(items: list[str]) -> dict[str, dict]:
    """`--policy_option` values `POLICY.NAME=VALUE`, as {policy: {name: value}}."""
    by_policy: dict[str, list[str]] = {}
    for item in items:
        policy, dot, option = item.partition(".")
        if not dot or "=" in policy:
            raise ValueError(f"--policy_option must be POLICY.NAME=VALUE, got {item!r}.")
        by_policy.setdefault(policy, []).append(option)
    return {p: validation.options(f"--policy_option {p}", o) for p, o in by_policy.items()}


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    fedjax_sel.configure_cpu()
    cache = compilation_cache.enable(_CACHE_DIR.value)
    if _DISTRIBUTED.value:
        jax.distributed.initialize(
            coordinator_address=_COORDINATOR.value,
            num_processes=_NUM_PROCESSES.value,
            process_id=_PROCESS_ID.value,
        )
    rounds_per_chunk = _ROUNDS_PER_CHUNK.value
    if rounds_per_chunk is None:
        rounds_per_chunk = max(1, min(_NUM_ROUNDS.value // 10, _NUM_ROUNDS.value))
    start = time.perf_counter()
    print(
        f"sweep: env={_ENV.value} N={_NUM_CLIENTS.value} k={_NUM_SELECTED.value} "
        f"T={_NUM_ROUNDS.value} trials={_NUM_TRIALS.value} policies={','.join(_POLICIES.value)}",
        flush=True,
    )
    try:
        env_options = validation.options("--env_option", _ENV_OPTIONS.value)
        options = policy_options(_POLICY_OPTIONS.value)
        results = sweep.run(
            env=_ENV.value,
            policies=_POLICIES.value,
            num_clients=_NUM_CLIENTS.value,
            num_selected=_NUM_SELECTED.value,
            num_rounds=_NUM_ROUNDS.value,
            num_trials=_NUM_TRIALS.value,
            availability=_AVAILABILITY.value,
            seed=_SEED.value,
            trials_per_chunk=_TRIALS_PER_CHUNK.value,
            rounds_per_chunk=rounds_per_chunk,
            output_dir=_OUTPUT_DIR.value,
            progress=sweep.Progress(),
            env_options=env_options,
            policy_options=options,
        )
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    print()
    print(f"After {results.num_rounds} rounds, mean over {results.num_trials} trials +- 95% CI:")
    print(results.table())
    print()
    if _OUTPUT_DIR.value:
        print(
            f"wrote {_OUTPUT_DIR.value}/results.npz, results.json, results.csv, "
            f"results_totals.csv and the figure"
        )
    else:
        print("wrote nothing (--output_dir is empty)")
    print(compilation_cache.summary(cache))
    print(f"total time {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    app.run(main)
