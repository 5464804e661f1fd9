"""A sweep of registered policies on a registered environment: the logic of `launch/sweep.py`.

Importable without flags: `run` builds the environment and the policies by name
(`fedjax_sel.envs.REGISTRY`, `bandits.REGISTRY`), simulates them, and writes results and
the regret figure; `Progress` prints one line per chunk.
"""

from __future__ import annotations

import json
import os
import sys
import time

import jax

import bandits
import fedjax_sel
from fedjax_sel import envs, validation
from fedjax_sel.runner import checkpoints, processes


class Progress:
    """Prints one line per chunk: percent done, time spent and an estimate of time left.

    A policy's clock starts when the previous policy finished (or at construction), so
    its first chunk, compilation included, is counted.
    """

    def __init__(self, stream=sys.stderr):
        self.stream = stream
        self.start = {}
        self.last = time.perf_counter()

    def __call__(self, policy: str, done: int, total: int) -> None:
        now = time.perf_counter()
        start = self.start.setdefault(policy, self.last)
        self.last = now
        left = (total - done) * (now - start) / done
        print(
            f"  {policy:>16s} {100.0 * done / total:5.1f}%  ({now - start:5.1f} s, "
            f"about {left:4.0f} s left)",
            file=self.stream,
            flush=True,
        )


def run(
    env: str,
    policies: list[str],
    num_clients: int,
    num_selected: int,
    num_rounds: int,
    num_trials: int,
    availability: float = 1.0,
    seed: int = 0,
    trials_per_chunk: int | None = None,
    rounds_per_chunk: int | None = None,
    output_dir: str | None = None,
    progress=None,
    env_options: dict | None = None,
    policy_options: dict[str, dict] | None = None,
) -> fedjax_sel.Results:
    """Builds the environment and policies by name and runs the sweep.

    `env_options` are the environment's parameters beyond the two sizes and
    `availability` (e.g. `{"num_servers": 4}` for dfl_delay), `policy_options` each
    policy's, by policy name.
    Under `output_dir` (if given) it checkpoints after every chunk, so an interrupted
    sweep resumes where it stopped when run again with the same arguments; once the
    results (`results.npz`/`.json`, the tables `results.csv` and `results_totals.csv` of
    `Results.save_csv`) and the figure (cumulative regret, or cumulative reward for an
    environment without an oracle) are written, the checkpoint is removed. In a
    `jax.distributed` job every process runs `run` with the same arguments
    (`fedjax_sel.simulate`), process 0 writes the results, and each process removes its
    own checkpoint files once they are written.

    Raises ValueError on an unknown name, an invalid size, seed or option, an
    `output_dir` that cannot be a directory or that holds the results of another
    configuration, before anything runs or is written.
    """
    if not policies:
        raise ValueError("policies must name at least one policy.")
    if len(set(policies)) != len(policies):
        raise ValueError(f"policies must be distinct, got {policies}.")
    validation.num_selected(num_selected, validation.positive_int("num_clients", num_clients))
    validation.positive_int("num_rounds", num_rounds)
    validation.positive_int("num_trials", num_trials)
    validation.seed("seed", seed)
    if output_dir:
        validation.output_dir("output_dir", output_dir)
    env_options = dict(env_options or {})
    if "availability" in env_options:
        # It would replace `availability`, which the results' config records.
        raise ValueError(
            "env_options must not set availability; pass it as availability "
            "(--availability), the value the results record."
        )
    policy_options = dict(policy_options or {})
    unknown = sorted(set(policy_options) - set(policies))
    if unknown:
        raise ValueError(f"policy_options name policies not in the sweep: {unknown}.")
    environment = _build(
        envs.REGISTRY,
        "env",
        env,
        num_clients,
        num_selected,
        {"availability": availability, **env_options},
    )
    selectors = {
        name: _build(
            bandits.REGISTRY, "policy", name, num_clients, num_selected, policy_options.get(name)
        )
        for name in policies
    }
    if environment.oracle is None:
        privileged = [name for name, s in selectors.items() if s.privileged]
        if privileged:
            raise ValueError(
                f"policies {privileged} play the environment's oracle, which environment "
                f"{env!r} does not have with these options; drop them from policies."
            )
    config = {
        "env": env,
        "num_selected": num_selected,
        "availability": availability,
        "env_options": repr(sorted(env_options.items())),
        "policy_options": repr(sorted((k, sorted(v.items())) for k, v in policy_options.items())),
    }
    if output_dir:
        _check_earlier_results(
            output_dir,
            {
                "policies": list(policies),
                "num_clients": num_clients,
                "num_rounds": num_rounds,
                "num_trials": num_trials,
                "seed": seed,
                "config": config,
            },
        )
    checkpoint_dir = os.path.join(output_dir, "checkpoint") if output_dir else None
    results = fedjax_sel.simulate(
        selectors,
        environment,
        num_rounds=num_rounds,
        num_trials=num_trials,
        seed=seed,
        trials_per_chunk=trials_per_chunk,
        rounds_per_chunk=rounds_per_chunk,
        checkpoint_dir=checkpoint_dir,
        config=config,
        progress=progress,
    )
    if output_dir:
        if jax.process_index() == 0:
            os.makedirs(output_dir, exist_ok=True)
            results.save(os.path.join(output_dir, "results"))
            results.save_csv(os.path.join(output_dir, "results"))
            metric = "cumulative_regret" if environment.oracle is not None else "cumulative_reward"
            fedjax_sel.plot(results, metric, path=os.path.join(output_dir, FIGURE[metric]))
        processes.sync("sweep: results written")
        index, count = jax.process_index(), jax.process_count()
        for name in policies:
            path = os.path.join(checkpoint_dir, checkpoints.filename(name, index, count))
            if os.path.exists(path):
                os.remove(path)
        if not os.listdir(checkpoint_dir):
            os.rmdir(checkpoint_dir)
    return results


def _check_earlier_results(output_dir: str, run: dict) -> None:
    """Raises ValueError if `output_dir` holds results (results.json) of a run whose
    configuration differs from `run` (the keys of `Results.config` it has)."""
    path = os.path.join(output_dir, "results.json")
    if not os.path.exists(path):
        return
    try:
        with open(path) as f:
            earlier = json.load(f)["config"]
        earlier = {k: earlier.get(k) for k in run}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(
            f"output_dir {output_dir!r} holds a results.json that cannot be read ({e}); move "
            f"it away or choose another output_dir. Nothing was run or written."
        ) from None
    differs = sorted(k for k in run if json.dumps(earlier[k]) != json.dumps(run[k]))
    if differs:
        raise ValueError(
            f"output_dir {output_dir!r} holds the results of another configuration (they "
            f"differ in {', '.join(differs)}), which this sweep would overwrite: choose "
            f"another output_dir, or delete its results to replace them. Nothing was run or "
            f"written."
        )


FIGURE = {"cumulative_regret": "regret.png", "cumulative_reward": "reward.png"}
"""The figure `run` writes, by the metric it plots."""


def _build(registry, flag: str, name: str, num_clients: int, num_selected: int, options):
    """`registry.make(name, ...)`, its ValueError completed with what can be set and how."""
    params = ", ".join(registry.parameters(name)) or "none"  # raises on an unknown name
    try:
        return registry.make(name, num_clients, num_selected, **(options or {}))
    except ValueError as e:
        how = "--env_option=NAME=VALUE" if flag == "env" else f"--policy_option={name}.NAME=VALUE"
        raise ValueError(
            f"{registry.kind} {name!r} cannot be built with num_clients={num_clients}, "
            f"num_selected={num_selected} and options {options or {}}: {e} Its parameters: "
            f"{params}; set them with {how} (launch.sweep) or {flag}_options (sweep.run)."
        ) from None
