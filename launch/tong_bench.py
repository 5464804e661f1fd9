r"""Times Tong et al.'s policies: Quick-Init UCB on the bandit-only surrogate, or every
policy on the FL&FA slots with training.

  python -m launch.tong_bench --num_clients=100 --num_selected=5 --num_rounds=500 \
      --num_trials=1000 --output=out/bench/tong_quick_init.json
  python -m launch.tong_bench --env=fl_fa --num_clients=20 --num_rounds=200 \
      --num_trials=100 --output=out/bench/tong_fl_fa.json

Runs `experiments.tong_trials.run_trials` twice per policy (the first call compiles) and
records each call's wall, CPU and compile seconds and the process's peak resident memory
(`experiments.bench.measure`), with the machine. `fl_fa` trains on the offline digits
split of `experiments.reproductions.tong_training` (L = 15, E = 10, B = 100) and times
the policies of Fig. 7.
"""

from __future__ import annotations

import json
import os

from absl import app, flags

import bandits
from experiments import bench
from experiments.reproductions import tong, tong_training
from experiments.tong_trials import run_trials
from fedjax_sel import data, envs, validation

_N = flags.DEFINE_integer("num_clients", 100, "N.", lower_bound=2)
_K = flags.DEFINE_integer("num_selected", 5, "K.", lower_bound=1)
_T = flags.DEFINE_integer(
    "num_rounds", 500, "Slots T (the compressed form: at least N/K + 1).", lower_bound=1
)
_M = flags.DEFINE_integer("num_trials", 1000, "Trials.", lower_bound=1)
_FORM = flags.DEFINE_enum("form", "compressed", ["dense", "compressed"], "Quick-Init form.")
_ENV = flags.DEFINE_enum("env", "opinion_surrogate", ["opinion_surrogate", "fl_fa"], "Slots.")
_OUTPUT = flags.DEFINE_string("output", None, "JSON output path.")


def _timed(selector, env, t, m) -> dict:
    runs = [bench.measure(lambda: run_trials(selector, env, t, m)) for _ in range(2)]
    return {"first_call": runs[0], "second_call": runs[1]}


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    n, k, t, m = _N.value, _K.value, _T.value, _M.value
    # The factories check the rest (K < N, N/K groups), refused as usage errors below.
    if _ENV.value == "opinion_surrogate" and _FORM.value == "compressed" and t <= n // k:
        raise app.UsageError(
            f"--num_rounds must be at least N/K + 1 = {n // k + 1} with --form=compressed (its "
            f"horizon: the cold start and one slot), got {t}."
        )
    if _OUTPUT.value:
        try:
            validation.output_file("--output", _OUTPUT.value)
        except ValueError as e:
            raise app.UsageError(str(e)) from None
    bench.configure()
    try:
        record = _record(n, k, t, m)
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    print(json.dumps(record, indent=1))
    if _OUTPUT.value:
        os.makedirs(os.path.dirname(_OUTPUT.value) or ".", exist_ok=True)
        with open(_OUTPUT.value, "w") as f:
            json.dump(record, f, indent=1)


def _record(n: int, k: int, t: int, m: int) -> dict:
    """The timings of the flags' policies (module docstring), with the machine."""
    record = {"env": _ENV.value, "num_clients": n, "num_selected": k}
    record.update(num_rounds=t, num_trials=m)
    if _ENV.value == "opinion_surrogate":
        selector = bandits.quick_init_ucb(n, k, form=_FORM.value, horizon=t)
        record["policy"] = f"quick_init_ucb ({_FORM.value})"
        record.update(_timed(selector, envs.opinion_surrogate(n, k), t, m))
    else:
        if k != tong.K:
            raise app.UsageError(f"--num_selected must be {tong.K} with --env=fl_fa (Fig. 7).")
        digits = data.load("digits", n, "mixed_sizes", num_iid=k, heldout_from_test=True)
        env = tong_training.fl_env(digits, "fa", k)
        policies = tong._policies(tong.FA_POLICIES, n, t, seed=0)
        record["policies"] = {name: _timed(p, env, t, m) for name, p in policies.items()}
    record["machine"] = bench.machine()
    return record


if __name__ == "__main__":
    app.run(main)
