"""One process of a two-process `jax.distributed` run on CPU, started by
`tests/test_multiprocess.py`.

  python tests/multiprocess_worker.py SPEC.json PROCESS_ID

SPEC holds the coordinator's port, the run (`simulate`'s arguments as JSON), where to
write the results (`<output>/process<p>`), and optionally where to stop this process as a
kill would (`"kill"`: {"process": p, "at": "progress"|"joined_save"|"barrier", "after": n},
exit code 17 after the n-th such event). A ValueError from `simulate` is written to
`<output>/process<p>.error` (exit code 3).
"""

import json
import os
import sys

# Replaces the test session's flags: the runner's programs compile at XLA's default level.
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402

KILLED = 17


def main(spec_path: str, process_id: int) -> None:
    with open(spec_path) as f:
        spec = json.load(f)
    jax.distributed.initialize(
        coordinator_address=f"localhost:{spec['port']}",
        num_processes=spec.get("num_processes", 2),
        process_id=process_id,
    )
    import bandits
    import fedjax_sel
    from fedjax_sel import envs
    from fedjax_sel.runner import checkpoints, processes

    run = dict(spec["run"])
    run.update(spec.get("overrides", {}).get(str(process_id), {}))
    kill = spec.get("kill")
    events = {"count": 0}
    progress_calls = []

    def event(kind):
        if kill and kill["process"] == process_id and kill["at"] == kind:
            events["count"] += 1
            if events["count"] == kill["after"]:
                os._exit(KILLED)

    def progress(policy, done, total):
        progress_calls.append((policy, done))
        event("progress")

    save_progress = checkpoints.save_progress

    def save_then_maybe_exit(path, state, identity):
        save_progress(path, state, identity)
        if state.joined is not None:
            event("joined_save")

    checkpoints.save_progress = save_then_maybe_exit
    sync = processes.sync

    def sync_then_maybe_exit(name):
        sync(name)
        event("barrier")

    processes.sync = sync_then_maybe_exit

    n, k = run.pop("num_clients"), run.pop("num_selected")
    env = envs.bernoulli(n, k, availability=0.8)
    policies = {name: bandits.make(name, n, k) for name in run.pop("policies")}
    output = os.path.join(spec["output"], f"process{process_id}")
    try:
        results = fedjax_sel.simulate(policies, env, progress=progress, **run)
    except ValueError as e:
        with open(output + ".error", "w") as f:
            f.write(str(e))
        sys.exit(3)
    results.save(output)
    with open(output + ".progress.json", "w") as f:
        json.dump(progress_calls, f)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
