"""Chen, Zhang, Wang and Wang, "MAB-Based Online Client Scheduling for Decentralized FL in the IoT".

Entropy 27(4):439, 2025. The delay figures (4 and 7) of Sec. 7.2 on the delay process of
Sec. 7.1 (`fedjax_sel.envs.dfl_delay`): S = 3 edge servers, N = 2 clients per server,
T = 2000 rounds. The text has no numbers; the claims are the figures' orderings.

Settings: "calibrated" takes the proposed CC-MAB with the exploration scale c_E = 0.01
(`bandits.dfl_ccmab`'s default); "literal" with the paper's E(t) (c_E = 1), which never
stops exploring at this horizon (spec A1). Both use G = G_T (5 at T = 2000) and alpha = 1.
Fig. 4 runs both variants in every setting, as `proposed` (the setting's) and
`proposed_literal` / `proposed_calibrated` (the other), so that one figure shows both.

Figure "4u" is Fig. 4 with cells of unequal sizes, 3, 6 and 9 of the 18 clients
(`UNEQUAL_CELLS`): the paper places its clients at random in the area, so its cells need
not hold 6 each (spec A7); every scheduler and the oracle take the cells' sizes.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np

import bandits
import fedjax_sel
from experiments.reproductions import Figure, Options
from fedjax_sel import envs
from fedjax_sel.plot import pyplot, save

NUM_SERVERS = 3
PER_SERVER = 2
EPSILON = 0.3
SCALES = {"calibrated": 0.01, "literal": 1.0}
FIG7_CLIENTS = (6, 12, 18, 24, 30)
ORDER = ("optimal", "proposed", "epsilon_greedy", "random")
UNEQUAL_CELLS = (3, 6, 9)


def policies(
    num_clients: int,
    num_rounds: int,
    setting: str,
    cell_sizes: tuple[int, ...] | None = None,
) -> dict[str, fedjax_sel.Selector]:
    """The four schedulers of Sec. 7.1, in the paper's order (equal cells by default)."""
    cells = {"num_servers": NUM_SERVERS, "cell_sizes": cell_sizes}
    return {
        "optimal": bandits.oracle(),
        "proposed": bandits.dfl_ccmab(
            num_clients,
            PER_SERVER,
            horizon=num_rounds,
            exploration_scale=SCALES[setting],
            **cells,
        ),
        "epsilon_greedy": bandits.per_server_epsilon_greedy(
            num_clients, PER_SERVER, epsilon=EPSILON, **cells
        ),
        "random": bandits.per_server_random(num_clients, PER_SERVER, **cells),
    }


def exploration_fractions(
    env: fedjax_sel.Env,
    selectors: dict[str, fedjax_sel.Selector],
    num_rounds: int,
    num_trials: int,
    seed: int,
) -> dict[str, float]:
    """Fraction of (trial, server, round) in which each `dfl_ccmab` server explored.

    The policies' own counters (`CCMABState.exploration_rounds`), over `num_trials`
    trials run as one program: `lax.scan` over rounds, `vmap` over trials.
    """

    def trial(selector, key):
        reset_key, init_key, env_key, policy_key = jax.random.split(key, 4)
        env_state = env.reset(reset_key)

        def body(state, t):
            obs_key, step_key = jax.random.split(jax.random.fold_in(env_key, t))
            inp = env.observe(env_state, t, obs_key)
            decision, state = selector.select(state, inp, jax.random.fold_in(policy_key, t))
            feedback, _, _ = env.step(env_state, inp, decision, step_key)
            return selector.update(state, decision, feedback), None

        rounds = jnp.arange(1, num_rounds + 1, dtype=jnp.int32)
        state, _ = jax.lax.scan(body, selector.init(init_key), rounds)
        return state.exploration_rounds

    @jax.jit
    def run(keys):
        return {
            name: jnp.mean(jax.vmap(lambda k, sel=sel: trial(sel, k))(keys)) / num_rounds
            for name, sel in selectors.items()
        }

    fractions = run(jax.random.split(jax.random.PRNGKey(seed), num_trials))
    return {name: float(v) for name, v in fractions.items()}


# A regret is called sub-linear when its growth exponent (`Results.growth_exponent`) is
# below 1 by this much and below the linear baselines' (random, epsilon-greedy) by as much.
SUBLINEAR_MARGIN = 0.2


def sublinear_regret(growth: dict[str, float], policy: str) -> bool:
    """Whether `policy`'s regret growth exponent (`growth`, per policy) is sub-linear:
    below 1 - `SUBLINEAR_MARGIN` and below random's and epsilon-greedy's by the margin."""
    return bool(
        growth[policy] < 1.0 - SUBLINEAR_MARGIN
        and all(growth[policy] < growth[p] - SUBLINEAR_MARGIN for p in ("epsilon_greedy", "random"))
    )


def _fig4(options: Options, cell_sizes: tuple[int, ...] | None = None) -> dict:
    """Fig. 4 on cells of 6 clients each, or of `cell_sizes` (figure "4u")."""
    num_rounds = options.num_rounds or 2000
    num_trials = options.num_trials or 200
    num_clients = NUM_SERVERS * 6
    name = "4" if cell_sizes is None else "4u"
    env = envs.dfl_delay(num_clients, PER_SERVER, num_servers=NUM_SERVERS, cell_sizes=cell_sizes)
    pols = policies(num_clients, num_rounds, options.setting, cell_sizes)
    other = next(s for s in SCALES if s != options.setting)
    pols[f"proposed_{other}"] = policies(num_clients, num_rounds, other, cell_sizes)["proposed"]
    results = fedjax_sel.simulate(pols, env, num_rounds, num_trials, seed=options.seed)
    delay = {p: results.final(p, "cumulative_latency") for p in pols}
    regret = {p: results.final(p, "cumulative_realized_regret") for p in pols}
    growth = {
        p: results.growth_exponent(p, "cumulative_realized_regret") for p in pols if p != "optimal"
    }
    sublinear = sublinear_regret(growth, "proposed")
    learners = {p: pols[p] for p in ("proposed", f"proposed_{other}")}
    explored = exploration_fractions(env, learners, num_rounds, min(num_trials, 32), options.seed)
    means = [delay[p][0] for p in ORDER]
    ordered = bool(all(a < b for a, b in zip(means, means[1:], strict=False)))

    fig, (left, right) = pyplot().subplots(1, 2, figsize=(11, 4))
    fedjax_sel.plot(
        results, "cumulative_latency", list(pols), ax=left, title="(a) cumulative delay"
    )
    fedjax_sel.plot(
        results, "cumulative_realized_regret", list(pols), ax=right, title="(b) regret vs Optimal"
    )
    left.set_ylabel("cumulative delay (s)")
    right.set_ylabel("cumulative delay - Optimal's (s)")
    cells = "" if cell_sizes is None else f", cells of {'/'.join(map(str, cell_sizes))}"
    fig.suptitle(f"Chen et al. Fig. 4, {options.setting}{cells} ({num_trials} trials, 95% CI)")
    save(fig, os.path.join(options.output_dir, f"chen_fig{name}_{options.setting}.png"))
    return {
        "setting": options.setting,
        "cell_sizes": list(cell_sizes or (6,) * NUM_SERVERS),
        "exploration_scale": SCALES[options.setting],
        "num_rounds": num_rounds,
        "num_trials": num_trials,
        "cumulative_delay": {p: {"mean": m, "ci95": h} for p, (m, h) in delay.items()},
        "regret": {p: {"mean": m, "ci95": h} for p, (m, h) in regret.items()},
        "regret_growth_exponent": growth,
        "exploration_fraction": explored,
        "ordering_holds": ordered,
        "sublinear_regret_holds": sublinear,
        "holds": bool(ordered and sublinear),
    }


def fig7_sweep(options: Options, clients: tuple[int, ...] = FIG7_CLIENTS) -> dict:
    """Cumulative delay after T rounds against the number of clients K (Fig. 7).

    Every client keeps the K = 18 shard of 3333 samples, so new clients join rather
    than split the data (spec A10). `clients` must start at N S = 6.
    """
    num_rounds = options.num_rounds or 2000
    num_trials = options.num_trials or 100
    final = {p: [] for p in ORDER}
    half = {p: [] for p in ORDER}
    for k in clients:
        env = envs.dfl_delay(k, PER_SERVER, num_servers=NUM_SERVERS)
        results = fedjax_sel.simulate(
            policies(k, num_rounds, options.setting), env, num_rounds, num_trials, seed=options.seed
        )
        for p in ORDER:
            m, h = results.final(p, "cumulative_latency")
            final[p].append(m)
            half[p].append(h)
    at_full = [final[p][0] for p in ORDER]
    similar = bool(clients[0] == NUM_SERVERS * PER_SERVER and np.ptp(at_full) < 1e-3 * at_full[0])
    learners_decrease = bool(all(final[p][-1] < final[p][0] for p in ORDER if p != "random"))
    random_flat = bool(
        all(
            abs(v - final["random"][0]) <= max(3 * h, 0.02 * v)
            for v, h in zip(final["random"], half["random"], strict=True)
        )
    )
    proposed_best = bool(
        all(
            final["proposed"][i] < min(final["epsilon_greedy"][i], final["random"][i])
            for i in range(1, len(clients))
        )
    )

    fig, ax = pyplot().subplots(figsize=(6, 4))
    for p in ORDER:
        ax.errorbar(clients, final[p], yerr=half[p], marker="o", capsize=3, label=p)
    ax.set_xlabel("number of clients K")
    ax.set_ylabel(f"cumulative delay after {num_rounds} rounds (s)")
    ax.set_title(f"Chen et al. Fig. 7, {options.setting} ({num_trials} trials, 95% CI)")
    ax.legend()
    save(fig, os.path.join(options.output_dir, f"chen_fig7_{options.setting}.png"))
    return {
        "setting": options.setting,
        "exploration_scale": SCALES[options.setting],
        "num_rounds": num_rounds,
        "num_trials": num_trials,
        "num_clients": list(clients),
        "cumulative_delay": {p: final[p] for p in ORDER},
        "ci95": {p: half[p] for p in ORDER},
        "similar_when_all_scheduled_holds": similar,
        "learners_decrease_holds": learners_decrease,
        "random_flat_holds": random_flat,
        "proposed_lowest_holds": proposed_best,
        "holds": similar and learners_decrease and random_flat and proposed_best,
    }


FIGURES = {
    "4": Figure(
        claim=(
            "Cumulative delay over 2000 rounds orders Optimal < proposed CC-MAB < epsilon-greedy"
            " < random, and the proposed method's regret against Optimal grows sub-linearly."
        ),
        run=_fig4,
    ),
    "4u": Figure(
        claim=(
            "Fig. 4's claims with cells of unequal sizes (3, 6 and 9 clients): cumulative "
            "delay orders Optimal < proposed CC-MAB < epsilon-greedy < random, and the "
            "proposed method's regret grows sub-linearly."
        ),
        run=lambda options: _fig4(options, UNEQUAL_CELLS),
    ),
    "7": Figure(
        claim=(
            "Against the number of clients K: all four methods are similar at K = N S = 6; as K"
            " grows every method but random gets faster, and the proposed method stays below"
            " epsilon-greedy and random."
        ),
        run=fig7_sweep,
    ),
}
