r"""Times Tong et al.'s Quick-Init UCB (compressed form) on the bandit-only surrogate.

  python -m launch.tong_bench --num_clients=100 --num_selected=5 --num_rounds=500 \
      --num_trials=1000 --output=out/bench/tong_quick_init.json

Runs `experiments.tong_trials.run_trials` twice (the first call compiles) and records
each call's wall, CPU and compile seconds and the process's peak resident memory
(`experiments.bench.measure`), with the machine.
"""

from __future__ import annotations

import json
import os

from absl import app, flags

import bandits
import fedjax_sel
from experiments import bench
from experiments.tong_trials import run_trials
from fedjax_sel import envs

_N = flags.DEFINE_integer("num_clients", 100, "N.")
_K = flags.DEFINE_integer("num_selected", 5, "K.")
_T = flags.DEFINE_integer("num_rounds", 500, "Slots T.")
_M = flags.DEFINE_integer("num_trials", 1000, "Trials.")
_FORM = flags.DEFINE_enum("form", "compressed", ["dense", "compressed"], "Quick-Init form.")
_OUTPUT = flags.DEFINE_string("output", None, "JSON output path.")


def main(argv):
    del argv
    fedjax_sel.configure_cpu()
    n, k, t, m = _N.value, _K.value, _T.value, _M.value
    selector = bandits.quick_init_ucb(n, k, form=_FORM.value, horizon=t)
    env = envs.opinion_surrogate(n, k)
    runs = [bench.measure(lambda: run_trials(selector, env, t, m)) for _ in range(2)]
    record = {
        "policy": f"quick_init_ucb ({_FORM.value})",
        "env": "opinion_surrogate",
        "num_clients": n,
        "num_selected": k,
        "num_rounds": t,
        "num_trials": m,
        "first_call": runs[0],
        "second_call": runs[1],
        "machine": bench.machine(),
    }
    print(json.dumps(record, indent=1))
    if _OUTPUT.value:
        os.makedirs(os.path.dirname(_OUTPUT.value) or ".", exist_ok=True)
        with open(_OUTPUT.value, "w") as f:
            json.dump(record, f, indent=1)


if __name__ == "__main__":
    app.run(main)
