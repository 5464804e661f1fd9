r"""Round delays of decentralized FL with edge servers (Chen, Zhang, Wang and Wang, Entropy 2025).

S edge servers, one per cell, each schedule exactly min(N, K_s) of the K_s clients of
their own cell every round (the access constraint (13c), read as |A_s(t)| = N, spec A8).
Cells are equal by default, client k in cell `k // (K / S)`; `cell_sizes` gives cells of
unequal sizes K_s, cell s holding the K_s clients after the first K_1 + ... + K_{s-1}
(the paper places clients at random, so its cells need not be equal; spec A7). A
scheduled client's delay is download + upload + local computation, capped at the
deadline (eqs. 6-11):

.. math::
    \tau_k(t) = \min\Big\{\frac{m}{B R^D_k(t)} + \frac{m}{B R^U_k(t)}
      + \frac{s_k D_k(t)}{\varphi\,\eta_k(t)},\ \tau_{max}\Big\},\qquad
    R_k(t) = \log_2\!\Big(1 + \frac{p\,|h_k(t)|^2}{\sigma^2}\Big),

with Rayleigh block fading :math:`|h_k(t)|^2 = PL(d_k)^{-1}\,|\xi|^2`,
:math:`|\xi|^2 \sim \mathrm{Exp}(1)` independently per client, round and link,
PL[dB] = 128.1 + 37.6 log10(d / km), and :math:`\eta_k(t) = 1 / (1 + I_k(t))`. The round
delay is the slowest scheduled client over all servers, eq. (12); training is
synchronous.

Before choosing, the servers observe the two context features of Sec. 5.1 (D = 2): the
number of active programs :math:`I_k(t) \sim U\{0..I_{max}\}` and the amount of local
data :math:`D_k(t) \sim U\{1..D_k\}`, as `context = (I / I_max, D_k(t) / D_max)`; both
integers are also in `RoundInput.info`. Fading, distances and CPU speeds are hidden.

Reward and regret. A client's feedback reward is its negative delay,
:math:`-\tau_k(t)`, and a round's reward is the negative round delay; `latency` is the
delay itself, so the runner's `cumulative_latency` is the cumulative delay
:math:`\sum_t \tau_t(a(t))` of Figs. 4 and 7 and its regret, oracle reward minus reward,
is delay minus the oracle's delay, eqs. (18)-(19). Two oracles:

- `regret_reference="realized"` (default): the paper's "Optimal client selection"
  baseline of Sec. 7.1, which knows every client's realised delay and lets each server
  schedule its N fastest clients; regret is the realised gap of Fig. 4(b),
  :math:`\tau_t(a(t)) - \tau_t(a^{opt}(t))`, and `regret == realized_regret`.
- `regret_reference="expected"`: the a*(t) of Theorem 1, the N clients of smallest
  expected delay :math:`\mu_k(x_k^t)` per server. The expectation over fading is taken
  as the delay at the mean channel gain (|xi|^2 = 1): the communication terms are about
  1e-3 s next to a computation of 0.1-5 s at the Sec. 7.1 parameters, so this is exact
  up to that term (spec A4, A11).

Because the per-server maximum is monotone, scheduling each cell's N smallest delays
minimises the global maximum (12), so both oracles are exact per-server top-N.

A decision with more than N clients in a cell is not accepted (`Env.feasible`; the
runner refuses it). A cell given fewer than min(N, |A_s(t)|) clients counts its empty
slots as the cell's slowest available client, in `expected_reward` and `reward` (a round
over fewer clients would otherwise beat the oracle, `envs.cohort`); `latency` stays the
delay of the clients scheduled.

Geometry (not given by the paper; spec A7): the square area is cut into S equal vertical
strips with the server at each strip's centre and the cell's clients uniform in it,
distances clipped below at `min_distance_m`; with unequal cells the strips stay equal and
hold different numbers of clients. A trial's instance (positions, CPU speeds
:math:`s_k \sim U[10, 30] \times 10^6` cycles per sample, fading key) is drawn by
`reset`; the fading of round t comes from `fold_in(channel_key, t)`, so the realised
oracle and `step` see the same channels and every policy faces the same draws.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sel import validation
from fedjax_sel.envs import availability as availability_lib
from fedjax_sel.envs.latency import path_loss_db
from fedjax_sel.ops import grouped_top_k_mask
from fedjax_sel.types import Decision, Env, Feedback, RoundInput, RoundStats

NOISE_MODES = ("psd_times_bandwidth", "literal")
REGRET_REFERENCES = ("realized", "expected")


class DelayParams(NamedTuple):
    """Fixed parameters of the delay model (Sec. 7.1, Table 1), in SI units.

    Attributes:
      model_bits: m, bits of one model transfer (eqs. 7, 9).
      bandwidth_hz: B, bandwidth of one channel (eqs. 7, 9).
      uplink_power_w: p^U, client transmit power (eq. 10).
      downlink_power_w: p^D, server transmit power (eq. 8).
      noise_w: sigma^2, noise power (eqs. 8, 10).
      compute_hz: phi, CPU cycles per second (eq. 11).
      tau_max: deadline in seconds that caps each delay (eq. 6).
    """

    model_bits: float
    bandwidth_hz: float
    uplink_power_w: float
    downlink_power_w: float
    noise_w: float
    compute_hz: float
    tau_max: float


class DFLDelayParams(NamedTuple):
    """The environment's parameter pytree (`Env.params`).

    Attributes:
      delay: `DelayParams` of f32[] leaves, the delay model's constants (the noise power
        already in watts: `noise_dbm` and `noise_mode` are resolved by the factory).
      cycles_low: f32[], low end of s_k, cycles per sample.
      cycles_high: f32[], high end of s_k.
      area_m: f32[], side of the square area (m).
      min_distance_m: f32[], distance clip (m).
      availability: the availability process's parameters.
    """

    delay: DelayParams
    cycles_low: chex.Array
    cycles_high: chex.Array
    area_m: chex.Array
    min_distance_m: chex.Array
    availability: Any


class DFLDelayState(NamedTuple):
    """One trial's instance.

    Attributes:
      path_gain: f32[K], PL(d_k)^{-1}, the large-scale channel gain.
      cycles_per_sample: f32[K], s_k.
      channel_key: PRNG key of the small-scale fading, folded with the round.
      availability: the availability process's state (None for Bernoulli availability).
    """

    path_gain: chex.Array
    cycles_per_sample: chex.Array
    channel_key: chex.PRNGKey
    availability: Any = None


class DFLRound(NamedTuple):
    """The integer context of a round (`RoundInput.info`).

    Attributes:
      activity: int32[K], I_k(t), active programs.
      num_samples: int32[K], D_k(t), local samples used this round.
    """

    activity: chex.Array
    num_samples: chex.Array


def path_gain_from_distance(distance_m: chex.Array) -> chex.Array:
    """f32[...]: 10^(-PL/10) with PL[dB] = 128.1 + 37.6 log10(d / km) (Sec. 7.1)."""
    pl_db = path_loss_db(distance_m / 1000.0)
    return 10.0 ** (-pl_db / 10.0)


def client_delays(
    params: DelayParams,
    state: DFLDelayState,
    info: DFLRound,
    fading_up: chex.Array,
    fading_down: chex.Array,
) -> tuple[chex.Array, chex.Array]:
    """Every client's uncapped and capped delay for given fading, eqs. (6)-(11).

    Args:
      params: the delay model's constants.
      state: the trial's instance.
      info: the round's activity I_k(t) and data D_k(t).
      fading_up: f32[K], |xi^U|^2 of each client's uplink.
      fading_down: f32[K], |xi^D|^2 of each client's downlink.

    Returns:
      (raw f32[K], capped f32[K]) delays in seconds; raw may be inf at zero fading.
    """
    snr_up = params.uplink_power_w * state.path_gain * fading_up / params.noise_w
    snr_down = params.downlink_power_w * state.path_gain * fading_down / params.noise_w
    per_hz = params.model_bits / params.bandwidth_hz
    upload = per_hz / jnp.log2(1.0 + snr_up)  # (9)-(10)
    download = per_hz / jnp.log2(1.0 + snr_down)  # (7)-(8)
    availability = 1.0 / (1.0 + info.activity.astype(jnp.float32))  # eta_k(t)
    compute = (
        state.cycles_per_sample
        * info.num_samples.astype(jnp.float32)
        / (params.compute_hz * availability)
    )  # (11)
    raw = download + upload + compute
    return raw, jnp.minimum(raw, params.tau_max)  # (6)


def dfl_delay(
    num_clients: int = 18,
    num_selected: int = 2,
    num_servers: int = 3,
    tau_max: float = 5.0,
    bandwidth_hz: float = 1e6,
    model_bits: float = 5e3,
    uplink_power_w: float = 0.01,
    downlink_power_w: float = 1.0,
    noise_dbm: float = -173.0,
    noise_mode: str = "psd_times_bandwidth",
    compute_hz: float = 2e11,
    cycles_per_sample_range: tuple[float, float] = (10e6, 30e6),
    max_activity: int = 10,
    shard_size: int = 3333,
    area_m: float = 500.0,
    min_distance_m: float = 10.0,
    regret_reference: str = "realized",
    availability=1.0,
    cell_sizes: tuple[int, ...] | None = None,
) -> Env:
    """The delay process of Chen et al., Secs. 3.2 and 7.1 (see the module docstring).

    Defaults are the paper's Sec. 7.1 setting: S = 3, K = 18, N = 2, B = 1 MHz (the
    text's "1 Mbps"), p^U = 10 mW, p^D = 1 W, phi = 2e11 cycles/s, tau_max = 5 s,
    m = 5e3 (read as bits), and D_k = 60000 / 18 = 3333 MNIST samples per client.

    Args:
      num_clients: K, a multiple of `num_servers` unless `cell_sizes` is given.
      num_selected: N, clients scheduled per server, 1 <= N <= K / S (or the largest
        cell); a smaller cell schedules all its clients.
      num_servers: S >= 1.
      tau_max: deadline tau_max > 0 (s), eq. (6).
      bandwidth_hz: B > 0.
      model_bits: m > 0; 5e3 literal, 5e6 reads m as kbit (spec A4).
      uplink_power_w: p^U > 0.
      downlink_power_w: p^D > 0.
      noise_dbm: -173, a density in dBm/Hz under "psd_times_bandwidth" or a power in
        dBm under "literal".
      noise_mode: "psd_times_bandwidth" (default; sigma^2 = N0 B, Table 1 calls -173
        a spectral density) or "literal" (sigma^2 = -173 dBm as in the text).
      compute_hz: phi > 0.
      cycles_per_sample_range: (low, high), 0 < low <= high, range of s_k.
      max_activity: I_max in [1, 2^31 - 2]; I_k(t) ~ U{0..I_max}, the first context feature is
        I / I_max.
      shard_size: D_k = D_max in [1, 2^31 - 2] samples per client; D_k(t) ~ U{1..D_k} (spec A5).
      area_m: side of the square area (m), > 0.
      min_distance_m: distance clip (m), > 0.
      regret_reference: "realized" or "expected" (see the module docstring).
      availability: probability in [0, 1] (or f32[K]) that a client is available, or an
        availability process (`envs.availability`); 1 in the paper. A server with fewer
        than N available clients schedules those it has (the oracle too).
      cell_sizes: K_s of each cell, S integers >= 1 summing to K; None for equal cells.

    Returns:
      An `Env` whose `RoundInput.info` is a `DFLRound` and whose oracle schedules each
      server's N fastest clients.
    """
    s, n, sizes, cell = validation.cells(num_clients, num_servers, num_selected, cell_sizes)
    k_total = cell.size
    low, high = validation.real_interval(
        "cycles_per_sample_range", cycles_per_sample_range, 0.0, low_open=True
    )
    validation.float_in_range("noise_dbm", noise_dbm, -400.0, 100.0)
    noise_mode = validation.choice("noise_mode", noise_mode, NOISE_MODES)
    reference = validation.choice("regret_reference", regret_reference, REGRET_REFERENCES)
    bandwidth = validation.positive_float("bandwidth_hz", bandwidth_hz)
    noise_dbm_total = noise_dbm + (10 * np.log10(bandwidth) if noise_mode == NOISE_MODES[0] else 0)
    params = DelayParams(
        model_bits=validation.positive_float("model_bits", model_bits),
        bandwidth_hz=bandwidth,
        uplink_power_w=validation.positive_float("uplink_power_w", uplink_power_w),
        downlink_power_w=validation.positive_float("downlink_power_w", downlink_power_w),
        noise_w=float(10 ** ((noise_dbm_total - 30) / 10)),
        compute_hz=validation.positive_float("compute_hz", compute_hz),
        tau_max=validation.positive_float("tau_max", tau_max),
    )
    # Both are drawn below max + 1 in int32.
    i_max = validation.int_in_range("max_activity", max_activity, 1, 2**31 - 2)
    d_max = validation.int_in_range("shard_size", shard_size, 1, 2**31 - 2)
    side = validation.positive_float("area_m", area_m)
    d_min = validation.positive_float("min_distance_m", min_distance_m)
    process = availability_lib.resolve(availability, k_total)
    f32 = jnp.float32
    defaults = DFLDelayParams(
        delay=DelayParams(*(f32(v) for v in params)),
        cycles_low=f32(low),
        cycles_high=f32(high),
        area_m=f32(side),
        min_distance_m=f32(d_min),
        availability=process.params,
    )

    def reset(key, params=None):
        params = defaults if params is None else params
        pos_key, cpu_key, channel_key = jax.random.split(key, 3)
        u = jax.random.uniform(pos_key, (k_total, 2))
        # Cell c is the strip [c * strip, (c + 1) * strip) x [0, side), server at its centre.
        strip = params.area_m / s
        dx = (u[:, 0] - 0.5) * strip
        dy = (u[:, 1] - 0.5) * params.area_m
        distance = jnp.maximum(jnp.hypot(dx, dy), params.min_distance_m)
        cycles = jax.random.uniform(
            cpu_key, (k_total,), minval=params.cycles_low, maxval=params.cycles_high
        )
        return DFLDelayState(
            path_gain=path_gain_from_distance(distance),
            cycles_per_sample=cycles,
            channel_key=channel_key,
            availability=process.init(key, params.availability),
        )

    def observe(state, t, key, params=None):
        params = defaults if params is None else params
        # A key of its own for availability, so that the context draws are those of an
        # always-available run (fold_in(key, 1) was data_key itself).
        act_key, data_key, availability_key = jax.random.split(key, 3)
        available = process.sample(state.availability, t, availability_key, params.availability)
        info = DFLRound(
            activity=jax.random.randint(act_key, (k_total,), 0, i_max + 1),
            num_samples=jax.random.randint(data_key, (k_total,), 1, d_max + 1),
        )
        context = jnp.stack([info.activity / i_max, info.num_samples / d_max], -1)
        return RoundInput(
            t=jnp.asarray(t, jnp.int32),
            available=available,
            context=context.astype(jnp.float32),
            info=info,
        )

    def realized(state, inp, params):
        up, down = jax.random.exponential(
            jax.random.fold_in(state.channel_key, inp.t), (2, k_total)
        )
        return client_delays(params.delay, state, inp.info, up, down)

    def expected(state, inp, params):
        ones = jnp.ones((k_total,), jnp.float32)
        return client_delays(params.delay, state, inp.info, ones, ones)[1]

    def best(ref, inp):
        selected = grouped_top_k_mask(-ref, inp.available, n, s, sizes)
        return Decision(selected=selected, assignment=jnp.where(selected, cell, -1))

    def oracle(state, inp, params=None):
        params = defaults if params is None else params
        if reference == "realized":
            return best(realized(state, inp, params)[1], inp)
        return best(expected(state, inp, params), inp)

    def per_cell(flags):
        """int32[S]: the entries set in each cell of bool[K]."""
        return jax.ops.segment_sum(flags.astype(jnp.int32), cell, num_segments=s)

    def feasible(state, inp, decision, params=None):
        del state, inp, params
        return jnp.all(per_cell(decision.selected) <= n)  # (13c)

    def step(state, inp, decision, key, params=None):
        del key  # the round's fading is a function of (channel_key, t), see `realized`
        params = defaults if params is None else params
        raw, tau = realized(state, inp, params)
        ref = tau if reference == "realized" else expected(state, inp, params)
        selected = decision.selected
        chosen = best(ref, inp).selected
        round_delay = jnp.max(jnp.where(selected, tau, 0.0))  # (12)
        # Empty slots count as the cell's slowest available client (module docstring).
        short = per_cell(selected) < jnp.minimum(per_cell(inp.available), n)
        charged = selected | (short[cell] & inp.available)
        feedback = Feedback(
            observed=selected,
            reward=-tau,
            latency=tau,
            success=selected & (raw <= params.delay.tau_max),
        )
        stats = RoundStats(
            expected_reward=-jnp.max(jnp.where(charged, ref, 0.0)),
            oracle_reward=-jnp.max(jnp.where(chosen, ref, 0.0)),
            reward=-jnp.max(jnp.where(charged, tau, 0.0)),
            latency=round_delay,
            num_failed=jnp.sum(selected & (raw > params.delay.tau_max)).astype(jnp.float32),
        )
        avail = process.update(state.availability, inp.available, params.availability)
        return feedback, state._replace(availability=avail), stats

    # Each server schedules up to N of its cell: S N clients in all.
    return Env(
        reset=reset,
        observe=observe,
        step=step,
        oracle=oracle,
        num_clients=k_total,
        params=defaults,
        num_selected=n * s,
        feasible=feasible,
    )
