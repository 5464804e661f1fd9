r"""Heterogeneous devices in the FedScale style: speeds, availability, dropouts, over-commitment.

F. Lai, Y. Dai, S. Singapuram, J. Liu, X. Zhu, H. V. Madhyastha, M. Chowdhury, "FedScale:
Benchmarking Model and System Performance of Federated Learning at Scale", ICML 2022, and
its simulator (`ClientMetadata.get_completion_time`, `is_active`, the aggregator's
`tictak_client_tasks`). Bandit-only: no model is trained; a surrogate of the clients'
losses (below) gives loss-based selectors (Oort, Power-of-Choice) something to exploit.
The training-backed environment takes it as its `delay_env` and trains the kept clients.

**Devices.** Client i has a compute speed :math:`c_i` (ms per sample, FedScale's
`compute_speed`), a bandwidth :math:`w_i` (kbit/s) and :math:`n_i` examples, drawn per
trial from heavy-tailed laws, :math:`c_i = \tilde c\, e^{\sigma_c Z}` (lognormal with
median :math:`\tilde c`), likewise :math:`w_i` and :math:`n_i` (rounded, at least 1),
or given as f32[N] arrays. With batch size B, L local steps, model size M kbit
(downloaded and uploaded) and the augmentation factor 3 of the backward pass, client
i's nominal duration is (`get_completion_time`)

.. math:: d_i = 3 B L c_i / 1000 + 2 M / w_i \quad \text{seconds},

and its duration in round t is :math:`d_{t,i} = \varepsilon_{t,i} d_i` with
:math:`\varepsilon = e^{\sigma_d Z - \sigma_d^2/2}` (mean 1; :math:`\sigma_d = 0`, the
default, is FedScale's deterministic duration). :math:`|B_i| = \min(n_i, B L)`
examples are trained (`trained_unique_samples`), :math:`p_i = n_i / \sum_j n_j`.

**Probes.** `Decision.probe` e_i > 0 asks available client i to evaluate the current
model on :math:`e_i` examples before the cohort is chosen (Power-of-Choice's candidates).
It downloads the model and runs forward passes only:
:math:`\pi_i = M / w_i + e_i c_i / 1000`. The probe phase lasts the slowest probe,
:math:`P_t = \max_{i: e_i > 0} \pi_i` (0 without probes), before the round. An
unavailable client cannot be asked; its probe is ignored.

**Round (over-commitment).** The `num_selected` (m) selected clients start at the end of
the probe phase (clock :math:`\tau_t`, the sum of the previous rounds' durations).
Selected client i completes at :math:`\tau_t + P_t + d_{t,i}` unless it drops out
first (below). Of those that complete, the `num_kept` (K) fastest are kept (ties to the
lower index): their updates count (`Feedback.success`). The others that complete are
stragglers: observed, with their duration, not successful. Dropped clients are not
observed. The round lasts

.. math:: D_t = P_t + d_{t,(K)} \quad \text{(the K-th kept completion)},

or :math:`P_t + ` `idle_s` when nobody is kept (the server waits that long before the
next round, so that the wall clock moves on through a trace's offline hours; FedScale's
loop has no such round). A decision selecting more than m clients starts its m
lowest-indexed ones; the others count as failed.

**Availability** at the round's start, three kinds:
  - a round-indexed process (`envs.availability`): a probability or f32[N] of them
    (Bernoulli), a Markov on/off chain (`availability.markov`, the default with
    P(off -> on) = 0.2, P(on -> off) = 0.05, stationary 0.8), any other process;
  - `diurnal(...)`: client i is available with probability
    :math:`a + b \cos(2\pi(\tau_t / T - \phi_i))` at clock :math:`\tau_t` (its own
    phase :math:`\phi_i`, uniform per trial or given), independently each round;
  - a `Trace` (`load_trace`): client i is available iff the clock modulo the trace's
    period lies in one of its active intervals [start, end) (FedScale's `is_active`).

**Dropouts.** A client available at the round's start drops out (not observed) if it is
not active when it would complete. Under a trace, the trace decides at the completion
time :math:`\tau_t + P_t + d_{t,i}` (FedScale's `is_active(roundDuration + clock)`: the
end point only, not the whole interval). Otherwise each client's online session is
exponential with mean :math:`S_i` (`mean_session_s`; None: no dropouts), so it completes
with probability :math:`e^{-(P_t + d_{t,i}) / S_i}`, independently of the process's next
state (a Markov process moves on from the availability the server saw).

**Loss surrogate.** Each client's loss of the global model before round t is

.. math:: \ell_{t,i} = \ell_{\min} + s_t + u_{t,i}, \qquad
          L_t = \textstyle\sum_i p_i \ell_{t,i},

a floor, a shared part :math:`s_t` (:math:`s_1` = `shared_loss`) and the client's own
non-IID gap :math:`u_{1,i} = g_i`, lognormal (heavy-tailed) with median `gap_median` and
log-scale `gap_sigma`, or given. With :math:`S_t` the kept clients, training lowers a
kept client's own gap most and, through the shared model, everyone's loss a little:

.. math:: u_{t+1,i} = (1 - \eta_{\text{own}} 1[i \in S_t])\, u_{t,i}, \qquad
          s_{t+1} = (1 - \eta_{\text{shared}} |S_t| / K)\, s_t,

so losses never rise and the global loss :math:`L_{t+1}` (`RoundStats.loss`) falls by
:math:`\eta_{\text{own}} \sum_{i \in S_t} p_i u_{t,i}` plus the shared part's decrease:
clients of large :math:`p_i u_{t,i}` are worth selecting. Per-example losses of client i
have mean :math:`\ell` and coefficient of variation :math:`\kappa` (`loss_dispersion`);
the mean of b of them is modelled as :math:`\ell e^{\sigma_b Z - \sigma_b^2/2}`,
:math:`\sigma_b^2 = \ln(1 + \kappa^2 / b)` (positive, mean :math:`\ell`, variance
:math:`\kappa^2 \ell^2 / b`).

`RoundInput.info` (every client, before the round):
  - "loss": :math:`\ell_{t,i}`, on all its local data (what a pow-d candidate reports);
  - "loss_minibatch": the mean over b = `probe_batch_size` examples (cpow-d);
  - "num_samples": :math:`|B_i|`; "data_size": :math:`n_i`; "data_fraction": :math:`p_i`;
  - "duration_s": :math:`d_i`, the nominal duration (the device profile FedScale gives
    Oort at registration, `registerDuration`).

`Feedback` (m started clients at most):
  - `observed`: the clients that completed (kept and stragglers); `success`: the kept;
  - `latency`: :math:`d_{t,i}` where observed (0 elsewhere), computation plus
    communication, without the probe;
  - `reward`: the speed reward :math:`r_i = \rho / (\rho + d_{t,i})` in (0, 1) where
    observed (:math:`\rho` = `reward_scale_s`), 0 elsewhere;
  - `info`, valid where `success` (0 elsewhere): along its local steps a kept client's
    loss moves linearly from :math:`a = \ell_{t,i}` to
    :math:`b = a - \eta_{\text{own}} u_{t,i}`; with :math:`\varepsilon` the sampling
    noise of :math:`|B_i|` examples and :math:`\varepsilon'` that of the last batch,
    :math:`\min(B, |B_i|)` examples, independent:
    "loss" = :math:`\varepsilon (a + b)/2`, the mean over the round's examples;
    "loss_rms" = :math:`\varepsilon \sqrt{1 + \kappa^2} \sqrt{(a^2 + ab + b^2)/3}`, the
    root mean square of the per-example losses (>= "loss");
    "loss_rms_last_batch" = :math:`\varepsilon' \sqrt{1 + \kappa^2}\, b`, the same over
    the last batch only (FedScale's code);
    "num_samples": :math:`|B_i|`.

`RoundStats`: `oracle_reward` None (no tractable oracle: regret undefined);
`expected_reward` = `reward` = :math:`\sum_{i \in S_t} r_i` (realized); `latency`
:math:`D_t`; `num_failed` the selected clients not kept; `loss` :math:`L_{t+1}`;
`extras`: "probe_time_s" :math:`P_t`, "probed_clients", "kept", "stragglers", "dropped"
(counts). The wall clock is the runner's cumulative latency.

**Trace files** (`load_trace`), CSV (any name but `.json`)::

    # period_s=86400
    client_id,start_s,end_s
    0,25200,32400
    0,61200,75600
    1,0,3600

`#` lines are comments; `# period_s=<seconds>` sets the trace's period (the argument of
`load_trace` overrides it; without either, the largest `end_s`). The header is required.
Each row is one active interval [start_s, end_s) of a client, 0 <= start_s < end_s <=
period_s; a client's intervals may overlap (merged). JSON:
``{"period_s": 86400, "intervals": [[0, 25200, 32400], [1, 0, 3600]]}``. The trace's
clients are 0..C-1 (C = the largest id + 1 <= N; an id without intervals is never
active); with C < N, client i follows trace client i mod C (FedScale's cyclic mapping,
`user_trace_keys[client_id % len(user_trace)]`). The clock cycles through one period
shared by all clients (FedScale's per-client `finish_time` is one number per trace here),
and intervals are half-open where FedScale's test is closed at both ends (the two differ
on a set of measure zero).
`EXAMPLE_TRACE` is a small trace shipped with the package (16 clients, one day).
"""

from __future__ import annotations

import importlib.resources
import json
import math
import os
import re
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sel import validation
from fedjax_sel.envs import availability as availability_lib
from fedjax_sel.ops import count_true, top_k_mask, true_indices
from fedjax_sel.types import Env, Feedback, RoundInput, RoundStats

EXAMPLE_TRACE = str(importlib.resources.files("fedjax_sel.envs") / "traces" / "example.csv")
"""Path of the example trace shipped with the package (16 clients, period one day)."""

TRACE_HEADER = ("client_id", "start_s", "end_s")
# FedScale's `get_completion_time`: a backward pass costs about twice the forward one.
AUGMENTATION_FACTOR = 3.0
# The default availability: a Markov chain of stationary availability 0.2 / 0.25 = 0.8.
DEFAULT_TURN_ON, DEFAULT_TURN_OFF = 0.2, 0.05
# Folded into the reset key for the diurnal phases, apart from the devices' draws.
_PHASE_SALT = 0x646961
_PERIOD_COMMENT = re.compile(r"^#\s*period_s\s*=\s*(\S+)\s*$")


class Trace(NamedTuple):
    """An availability trace as padded interval arrays (`load_trace`).

    Attributes:
      start: f32[C, J], the start of each trace client's active intervals, seconds into
        the period, sorted and disjoint per client; padding has start = end = 0.
      end: f32[C, J], their ends (exclusive).
      period_s: f32[], the period the clock cycles through.
    """

    start: chex.Array
    end: chex.Array
    period_s: chex.Array


class Diurnal(NamedTuple):
    r"""A diurnal availability pattern (`diurnal`).

    Attributes:
      mean: f32[], a, the mean availability probability.
      amplitude: f32[], b, its swing over a period, a - b >= 0 and a + b <= 1.
      period_s: f32[], T, the period (a day).
      phase: f32[N] :math:`\phi_i` in [0, 1), each client's peak at :math:`\phi_i T`, or
        None to draw them uniformly per trial.
    """

    mean: chex.Array
    amplitude: chex.Array
    period_s: chex.Array
    phase: chex.Array | None


class DevicesParams(NamedTuple):
    """The environment's parameter pytree (`Env.params`); the names of `devices`' arguments.

    Attributes:
      compute_ms, bandwidth_kbps, data_size: f32[N] fixed per-client values, or None to
        draw them per trial from the lognormal laws below.
      compute_ms_median, compute_ms_sigma, bandwidth_kbps_median, bandwidth_kbps_sigma,
        data_size_median, data_size_sigma: f32[], medians and log-scales of those laws.
      model_size_kbit, batch_size, local_steps, augmentation_factor: f32[], M, B, L, 3.
      duration_noise: f32[], sigma_d.
      mean_session_s: f32[N], S_i, or None for no dropouts (or a trace's).
      idle_s: f32[], the length of a round in which nobody is kept (beyond the probes).
      reward_scale_s: f32[], rho of the speed reward.
      loss_floor, shared_loss: f32[], l_min and s_1.
      loss_gap: f32[N] fixed g_i, or None to draw them.
      gap_median, gap_sigma: f32[], the lognormal law of g_i.
      own_rate, shared_rate: f32[], eta_own and eta_shared.
      loss_dispersion: f32[], kappa.
      probe_batch_size: f32[], b of "loss_minibatch".
      availability: the availability's parameters (a process's, a `Diurnal` or a `Trace`).
    """

    compute_ms: chex.Array | None
    bandwidth_kbps: chex.Array | None
    data_size: chex.Array | None
    compute_ms_median: chex.Array
    compute_ms_sigma: chex.Array
    bandwidth_kbps_median: chex.Array
    bandwidth_kbps_sigma: chex.Array
    data_size_median: chex.Array
    data_size_sigma: chex.Array
    model_size_kbit: chex.Array
    batch_size: chex.Array
    local_steps: chex.Array
    augmentation_factor: chex.Array
    duration_noise: chex.Array
    mean_session_s: chex.Array | None
    idle_s: chex.Array
    reward_scale_s: chex.Array
    loss_floor: chex.Array
    shared_loss: chex.Array
    loss_gap: chex.Array | None
    gap_median: chex.Array
    gap_sigma: chex.Array
    own_rate: chex.Array
    shared_rate: chex.Array
    loss_dispersion: chex.Array
    probe_batch_size: chex.Array
    availability: Any


class DevicesState(NamedTuple):
    """One trial's devices, clock and losses.

    Attributes:
      compute_ms: f32[N], c_i, ms per sample.
      bandwidth_kbps: f32[N], w_i.
      data_size: f32[N], n_i (|B_i| and p_i follow from it).
      phase: f32[N] diurnal phases, or None.
      availability: the round-indexed process's state, or None.
      clock_s: f32[], tau_t, the wall clock at the round's start.
      shared_loss: f32[], s_t.
      loss_gap: f32[N], u_{t,i}.
    """

    compute_ms: chex.Array
    bandwidth_kbps: chex.Array
    data_size: chex.Array
    phase: chex.Array | None
    availability: Any
    clock_s: chex.Array
    shared_loss: chex.Array
    loss_gap: chex.Array


def diurnal(
    mean: float = 0.5, amplitude: float = 0.4, period_s: float = 86400.0, phase=None
) -> Diurnal:
    r"""A diurnal availability pattern for `devices(availability=...)`.

    Client i is available with probability :math:`a + b \cos(2\pi(\tau/T - \phi_i))` at
    clock :math:`\tau`, independently each round.

    Args:
      mean: a in [0, 1] (0.5).
      amplitude: b >= 0 with a - b >= 0 and a + b <= 1 (0.4: between 0.1 and 0.9).
      period_s: T > 0 (a day, 86400).
      phase: f32[N] of phases in [0, 1), or None to draw them uniformly per trial
        (checked against N by `devices`).
    """
    a = validation.probability("mean", mean)
    b = validation.float_in_range("amplitude", amplitude, 0.0, 1.0)
    if a - b < 0.0 or a + b > 1.0:
        raise ValueError(
            f"mean - amplitude and mean + amplitude must lie in [0, 1] (probabilities), "
            f"got mean={a}, amplitude={b}."
        )
    period = validation.positive_float("period_s", period_s)
    if phase is not None:
        phase = validation.array_in_range("phase", phase, (np.size(phase),), 0.0, 1.0)
        if phase.size == 0 or np.any(phase >= 1.0):
            raise ValueError("phase must be a non-empty f32[N] with entries in [0, 1).")
    return Diurnal(a, b, period, phase)


def load_trace(path, num_clients: int, period_s: float | None = None) -> Trace:
    """Reads an availability trace file (CSV or JSON, module docstring) into a `Trace`.

    Args:
      path: the file; `.json` is read as JSON, anything else as CSV.
      num_clients: N, the environment's clients: trace ids must lie in [0, N).
      period_s: the period in seconds (> 0), overriding the file's; None takes the
        file's, else the largest end.

    Returns:
      A `Trace` of NumPy arrays over C = (largest id + 1) trace clients.

    Raises:
      ValueError: a missing or unreadable file, a bad header, a row that is not
        three numbers, a client id that is not an integer in [0, N), a negative start,
        an end not above its start or above the period, a trace with no interval at all;
        naming the line (CSV) or entry (JSON) and the field.
    """
    n = validation.positive_int("num_clients", num_clients)
    if period_s is not None:
        period_s = validation.positive_float("period_s", period_s)
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise ValueError(f"trace path must be a non-empty path, got {path!r}.")
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"trace file {path!r} does not exist (or is not a file).")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"trace file {path!r} cannot be read: {e}") from None
    if path.lower().endswith(".json"):
        rows, file_period = _json_rows(text, path)
    else:
        rows, file_period = _csv_rows(text, path)
    period = period_s if period_s is not None else file_period
    ids, starts, ends = [], [], []
    for where, raw_id, raw_start, raw_end in rows:
        ids.append(_client_id(raw_id, n, path, where))
        starts.append(_seconds(raw_start, "start_s", path, where))
        ends.append(_seconds(raw_end, "end_s", path, where))
        if starts[-1] < 0:
            raise ValueError(f"trace {path!r}, {where}: start_s must be >= 0, got {starts[-1]}.")
        if ends[-1] <= starts[-1]:
            raise ValueError(
                f"trace {path!r}, {where}: end_s must exceed start_s (an inverted or empty "
                f"interval), got start_s={starts[-1]}, end_s={ends[-1]}."
            )
        if period is not None and ends[-1] > period:
            raise ValueError(
                f"trace {path!r}, {where}: end_s={ends[-1]} exceeds the period period_s={period}."
            )
    if not rows:
        raise ValueError(f"trace {path!r} has no active interval (empty trace).")
    if period is None:
        period = max(ends)
    return _pad(np.array(ids), np.array(starts), np.array(ends), period)


def _csv_rows(text: str, path: str):
    """(where, id, start, end) rows of a CSV trace and the period of its comment, or None."""
    rows, period, header = [], None, False
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line:
            continue
        if line.startswith("#"):
            match = _PERIOD_COMMENT.match(line)
            if match:
                period = _seconds(match.group(1), "period_s", path, f"line {number}")
                if period <= 0:
                    raise ValueError(
                        f"trace {path!r}, line {number}: period_s must be > 0, got {period}."
                    )
            continue
        fields = [x.strip() for x in line.split(",")]
        if not header:
            if tuple(fields) != TRACE_HEADER:
                raise ValueError(
                    f"trace {path!r}, line {number}: the header must be "
                    f"{','.join(TRACE_HEADER)!r}, got {line!r}."
                )
            header = True
            continue
        if len(fields) != 3:
            raise ValueError(
                f"trace {path!r}, line {number}: a row must have 3 fields "
                f"{','.join(TRACE_HEADER)}, got {line!r}."
            )
        rows.append((f"line {number}", *fields))
    if not header:
        raise ValueError(
            f"trace {path!r} has no header {','.join(TRACE_HEADER)!r} (and no active "
            f"interval: empty trace)."
        )
    return rows, period


def _json_rows(text: str, path: str):
    """(where, id, start, end) rows of a JSON trace and its period, or None."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"trace {path!r} is not valid JSON: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("intervals"), list):
        raise ValueError(
            f'trace {path!r} must be a JSON object with a list "intervals" of '
            f"[client_id, start_s, end_s] (and an optional period_s)."
        )
    period = None
    if doc.get("period_s") is not None:
        period = _seconds(doc["period_s"], "period_s", path, "period_s")
        if period <= 0:
            raise ValueError(f"trace {path!r}: period_s must be > 0, got {period}.")
    rows = []
    for i, entry in enumerate(doc["intervals"]):
        if not isinstance(entry, list) or len(entry) != 3:
            raise ValueError(
                f"trace {path!r}, intervals[{i}]: must be [client_id, start_s, end_s], "
                f"got {entry!r}."
            )
        rows.append((f"intervals[{i}]", *entry))
    return rows, period


def _client_id(raw, num_clients: int, path: str, where: str) -> int:
    """A trace client id: an integer in [0, N) (a CSV digit string or a JSON int)."""
    value = None
    if isinstance(raw, str) and re.fullmatch(r"[+-]?\d+", raw):
        value = int(raw)
    elif isinstance(raw, int) and not isinstance(raw, bool):
        value = raw
    if value is None or not 0 <= value < num_clients:
        raise ValueError(
            f"trace {path!r}, {where}: client_id must be an integer in [0, {num_clients}) "
            f"(the environment's clients), got {raw!r}."
        )
    return value


def _seconds(raw, field: str, path: str, where: str) -> float:
    """A finite number of seconds (a CSV string or a JSON number)."""
    value = None
    if isinstance(raw, str):
        try:
            value = float(raw)
        except ValueError:
            value = None
    elif isinstance(raw, (int, float)) and not isinstance(raw, bool):
        value = float(raw)
    if value is None or not math.isfinite(value):
        raise ValueError(f"trace {path!r}, {where}: {field} must be a finite number, got {raw!r}.")
    return value


def _pad(ids: np.ndarray, starts: np.ndarray, ends: np.ndarray, period: float) -> Trace:
    """Merges each client's intervals and pads them to f32[C, J] (start = end = 0)."""
    num_rows = int(ids.max()) + 1
    merged: list[list[tuple[float, float]]] = [[] for _ in range(num_rows)]
    for c, s, e in sorted(zip(ids.tolist(), starts.tolist(), ends.tolist(), strict=True)):
        if merged[c] and s <= merged[c][-1][1]:
            merged[c][-1] = (merged[c][-1][0], max(merged[c][-1][1], e))
        else:
            merged[c].append((s, e))
    width = max(len(m) for m in merged)
    start = np.zeros((num_rows, width), np.float32)
    end = np.zeros((num_rows, width), np.float32)
    for c, intervals in enumerate(merged):
        for j, (s, e) in enumerate(intervals):
            start[c, j], end[c, j] = s, e
    return Trace(start, end, np.float32(period))


def _check_trace(trace: Trace, num_clients: int) -> Trace:
    """A `Trace` as NumPy arrays, checked: f32[C, J] with C <= N, 0 <= start <= end <=
    period, at least one interval."""
    start = np.asarray(trace.start)
    if start.ndim != 2 or start.shape[0] < 1 or start.shape[1] < 1:
        raise ValueError(f"availability trace start must be f32[C, J], got shape {start.shape}.")
    period = validation.positive_float("availability trace period_s", trace.period_s)
    shape = start.shape
    if shape[0] > num_clients:
        raise ValueError(
            f"availability trace has {shape[0]} clients, more than num_clients={num_clients}."
        )
    start = validation.array_in_range("availability trace start", trace.start, shape, 0.0, period)
    end = validation.array_in_range("availability trace end", trace.end, shape, 0.0, period)
    if np.any(end < start):
        raise ValueError("availability trace has an interval with end < start (inverted).")
    if not np.any(end > start):
        raise ValueError("availability trace has no active interval (empty trace).")
    return Trace(start, end, np.float32(period))


def _trace_active(trace: Trace, rows: chex.Array, time_s: chex.Array) -> chex.Array:
    """bool[...]: whether trace clients `rows` (int32[...]) are active at `time_s` (f32,
    broadcast with `rows`), the time taken modulo the period."""
    x = jnp.mod(time_s, trace.period_s)[..., None]
    return jnp.any((trace.start[rows] <= x) & (x < trace.end[rows]), axis=-1)


def _num_samples(state, params):
    """f32[N], |B_i| = min(n_i, B L): the examples each client trains in a round."""
    return jnp.minimum(state.data_size, params.batch_size * params.local_steps)


def _lognormal(key, shape, median, sigma):
    return median * jnp.exp(sigma * jax.random.normal(key, shape))


def _mean_one(key, shape, sigma):
    """exp(sigma Z - sigma^2 / 2): a positive factor of mean 1 and variance e^{sigma^2} - 1."""
    return jnp.exp(sigma * jax.random.normal(key, shape) - 0.5 * sigma * sigma)


def _optional_array(name, value, n, low=0.0):
    if value is None:
        return None
    return validation.array_in_range(name, value, (n,), low)


def devices(
    num_clients: int = 100,
    num_selected: int = 13,
    num_kept: int | None = None,
    availability=None,
    mean_session_s=3600.0,
    compute_ms=None,
    compute_ms_median: float = 50.0,
    compute_ms_sigma: float = 0.8,
    bandwidth_kbps=None,
    bandwidth_kbps_median: float = 5000.0,
    bandwidth_kbps_sigma: float = 1.0,
    data_size=None,
    data_size_median: float = 200.0,
    data_size_sigma: float = 1.0,
    model_size_kbit: float = 20000.0,
    batch_size: int = 30,
    local_steps: int = 20,
    augmentation_factor: float = AUGMENTATION_FACTOR,
    duration_noise: float = 0.0,
    idle_s: float = 60.0,
    reward_scale_s: float = 100.0,
    loss_floor: float = 0.1,
    shared_loss: float = 1.5,
    loss_gap=None,
    gap_median: float = 0.5,
    gap_sigma: float = 1.0,
    own_rate: float = 0.3,
    shared_rate: float = 0.02,
    loss_dispersion: float = 1.0,
    probe_batch_size: int = 32,
) -> Env:
    """The heterogeneous-device environment (module docstring), bandit-only.

    With the defaults the nominal durations have a median near 100 s and their 5% and
    95% quantiles lie about 15x apart (compute about 90 s, communication 8 s at the
    medians; FedScale's batch 30 and 20 local steps).

    Args:
      num_clients: N >= 1.
      num_selected: m, 1 <= m <= N, the clients a decision may select (the
        over-committed cohort; FedScale: int(1.3 K)), `Env.num_selected`.
      num_kept: K, 1 <= K <= m, the fastest completed clients kept; None for m.
      availability: None for the default Markov chain (P(off -> on) 0.2, P(on -> off)
        0.05); a probability in [0, 1] or f32[N] of them (Bernoulli each round), or any
        round-indexed process (`envs.availability`, e.g. `availability.markov`); a
        `diurnal(...)` pattern; or a `Trace` (`load_trace`).
      mean_session_s: S_i > 0, the mean online session (scalar or f32[N]) of the dropout
        hazard, 3600 s; None for no dropouts. Unused with a trace (the trace decides).
      compute_ms: f32[N] > 0, fixed c_i (ms per sample); None draws them per trial.
      compute_ms_median: median of the lognormal c_i, > 0 (50 ms per sample).
      compute_ms_sigma: its log-scale, >= 0 (0.8).
      bandwidth_kbps: f32[N] > 0, fixed w_i (kbit/s); None draws them.
      bandwidth_kbps_median: median of the lognormal w_i, > 0 (5000 kbit/s).
      bandwidth_kbps_sigma: its log-scale, >= 0 (1.0).
      data_size: f32[N] >= 1, fixed n_i; None draws them.
      data_size_median: median of the lognormal n_i, >= 1 (200 examples).
      data_size_sigma: its log-scale, >= 0 (1.0).
      model_size_kbit: M > 0, the model downloaded and uploaded (20000 kbit = 2.5 MB).
      batch_size: B >= 1 (30, FedScale's default).
      local_steps: L >= 1 (20, FedScale's default).
      augmentation_factor: training cost per sample over the forward pass's, >= 1 (3).
      duration_noise: sigma_d >= 0 of the per-round factor of each duration (0).
      idle_s: >= 0, how long a round in which nobody is kept lasts beyond its probes (60).
      reward_scale_s: rho > 0 of the speed reward rho / (rho + d) (100 s).
      loss_floor: l_min >= 0 (0.1).
      shared_loss: s_1 >= 0, the shared part of the initial loss (1.5).
      loss_gap: f32[N] >= 0, fixed initial gaps g_i; None draws them.
      gap_median: median of the lognormal g_i, > 0 (0.5).
      gap_sigma: its log-scale, >= 0 (1.0).
      own_rate: eta_own in [0, 1], the share of its gap a kept client trains away (0.3).
      shared_rate: eta_shared in [0, 1], the shared part's decrease per full round (0.02).
      loss_dispersion: kappa >= 0, the coefficient of variation of per-example losses (1).
      probe_batch_size: b >= 1, the examples of "loss_minibatch" (32).

    Returns:
      An `Env` without oracle, whose `params` are `DevicesParams`.
    """
    n = validation.positive_int("num_clients", num_clients)
    m = validation.num_selected(num_selected, n)
    k = m if num_kept is None else validation.int_in_range("num_kept", num_kept, 1, m)
    kind, process, avail_params = _availability(availability, n)
    session = None
    if mean_session_s is not None and kind != "trace":
        if np.ndim(mean_session_s) == 0:
            s = validation.positive_float("mean_session_s", mean_session_s)
            session = np.full((n,), s, np.float32)
        else:
            session = _positive_array("mean_session_s", mean_session_s, n)
    f32 = np.float32
    checked = DevicesParams(
        compute_ms=_positive_array("compute_ms", compute_ms, n),
        bandwidth_kbps=_positive_array("bandwidth_kbps", bandwidth_kbps, n),
        data_size=_optional_array("data_size", data_size, n, 1.0),
        compute_ms_median=f32(validation.positive_float("compute_ms_median", compute_ms_median)),
        compute_ms_sigma=f32(_non_negative("compute_ms_sigma", compute_ms_sigma)),
        bandwidth_kbps_median=f32(
            validation.positive_float("bandwidth_kbps_median", bandwidth_kbps_median)
        ),
        bandwidth_kbps_sigma=f32(_non_negative("bandwidth_kbps_sigma", bandwidth_kbps_sigma)),
        data_size_median=f32(
            validation.float_in_range("data_size_median", data_size_median, 1.0, np.inf)
        ),
        data_size_sigma=f32(_non_negative("data_size_sigma", data_size_sigma)),
        model_size_kbit=f32(validation.positive_float("model_size_kbit", model_size_kbit)),
        batch_size=f32(validation.positive_int("batch_size", batch_size)),
        local_steps=f32(validation.positive_int("local_steps", local_steps)),
        augmentation_factor=f32(
            validation.float_in_range("augmentation_factor", augmentation_factor, 1.0, np.inf)
        ),
        duration_noise=f32(_non_negative("duration_noise", duration_noise)),
        mean_session_s=session,
        idle_s=f32(_non_negative("idle_s", idle_s)),
        reward_scale_s=f32(validation.positive_float("reward_scale_s", reward_scale_s)),
        loss_floor=f32(_non_negative("loss_floor", loss_floor)),
        shared_loss=f32(_non_negative("shared_loss", shared_loss)),
        loss_gap=_optional_array("loss_gap", loss_gap, n, 0.0),
        gap_median=f32(validation.positive_float("gap_median", gap_median)),
        gap_sigma=f32(_non_negative("gap_sigma", gap_sigma)),
        own_rate=f32(validation.probability("own_rate", own_rate)),
        shared_rate=f32(validation.probability("shared_rate", shared_rate)),
        loss_dispersion=f32(_non_negative("loss_dispersion", loss_dispersion)),
        probe_batch_size=f32(validation.positive_int("probe_batch_size", probe_batch_size)),
        availability=avail_params,
    )
    # Everything is checked: only now do arrays go to the device (which compiles).
    defaults = jax.tree.map(jnp.asarray, checked)
    if kind == "trace":
        rows = np.arange(n) % avail_params.start.shape[0]

    def reset(key, params=None):
        params = defaults if params is None else params
        k_c, k_w, k_n, k_g = jax.random.split(key, 4)
        c = params.compute_ms
        if c is None:
            c = _lognormal(k_c, (n,), params.compute_ms_median, params.compute_ms_sigma)
        w = params.bandwidth_kbps
        if w is None:
            w = _lognormal(k_w, (n,), params.bandwidth_kbps_median, params.bandwidth_kbps_sigma)
        size = params.data_size
        if size is None:
            raw = _lognormal(k_n, (n,), params.data_size_median, params.data_size_sigma)
            size = jnp.maximum(jnp.round(raw), 1.0)
        gap = params.loss_gap
        if gap is None:
            gap = _lognormal(k_g, (n,), params.gap_median, params.gap_sigma)
        # XLA would otherwise fold the lognormals' medians into the constants the values
        # are later multiplied by, rounding differently from a build with traced params.
        c, w, gap = jax.lax.optimization_barrier((c, w, gap))
        phase, own = None, None
        if kind == "diurnal":
            phase = params.availability.phase
            if phase is None:
                phase = jax.random.uniform(jax.random.fold_in(key, _PHASE_SALT), (n,))
        elif kind == "process":
            own = process.init(key, params.availability)
        return DevicesState(
            compute_ms=c,
            bandwidth_kbps=w,
            data_size=size,
            phase=phase,
            availability=own,
            clock_s=jnp.float32(0.0),
            shared_loss=params.shared_loss,
            loss_gap=gap,
        )

    def observe(state, t, key, params=None):
        params = defaults if params is None else params
        k_avail, k_loss = jax.random.split(key)
        if kind == "process":
            available = process.sample(state.availability, t, k_avail, params.availability)
        elif kind == "diurnal":
            d = params.availability
            angle = 2.0 * jnp.pi * (state.clock_s / d.period_s - state.phase)
            available = jax.random.uniform(k_avail, (n,)) < d.mean + d.amplitude * jnp.cos(angle)
        else:
            trace = params.availability
            rows_now = _trace_active(trace, jnp.arange(trace.start.shape[0]), state.clock_s)
            available = rows_now[rows]
        loss = params.loss_floor + state.shared_loss + state.loss_gap
        kappa2 = params.loss_dispersion * params.loss_dispersion
        sigma_b = jnp.sqrt(jnp.log1p(kappa2 / params.probe_batch_size))
        info = {
            "loss": loss,
            "loss_minibatch": loss * _mean_one(k_loss, (n,), sigma_b),
            "num_samples": _num_samples(state, params),
            "data_size": state.data_size,
            "data_fraction": state.data_size / jnp.sum(state.data_size),
            "duration_s": nominal_duration(state.compute_ms, state.bandwidth_kbps, params),
        }
        return RoundInput(t=jnp.asarray(t, jnp.int32), available=available, info=info)

    def step(state, round_input, decision, key, params=None):
        params = defaults if params is None else params
        k_noise, k_drop, k_loss, k_last = jax.random.split(key, 4)
        selected, available = decision.selected, round_input.available
        # The m lowest-indexed selected clients, in slots; empty slots hold n (dropped
        # by every scatter below).
        index = true_indices(selected, m)
        filled = index < n
        slot = jnp.where(filled, index, 0)
        started = filled & available[slot]
        nominal = nominal_duration(state.compute_ms[slot], state.bandwidth_kbps[slot], params)
        duration = nominal * _mean_one(k_noise, (m,), params.duration_noise)

        probe_s, probed = jnp.float32(0.0), jnp.float32(0.0)
        if decision.probe is not None:
            asked = (decision.probe > 0) & available
            cost = (
                params.model_size_kbit / state.bandwidth_kbps
                + decision.probe * state.compute_ms * 1e-3
            )
            probe_s = jnp.max(jnp.where(asked, cost, 0.0))
            probed = count_true(asked).astype(jnp.float32)

        finish = probe_s + duration
        if kind == "trace":
            alive = _trace_active(
                params.availability, jnp.asarray(rows)[slot], state.clock_s + finish
            )
        elif params.mean_session_s is None:
            alive = jnp.ones((m,), bool)
        else:
            survive = jnp.exp(-finish / params.mean_session_s[slot])
            alive = jax.random.uniform(k_drop, (m,)) < survive
        completed = started & alive
        kept = top_k_mask(-duration, completed, k)
        num_kept = count_true(kept)
        last = jnp.max(jnp.where(kept, duration, 0.0))
        round_s = probe_s + jnp.where(num_kept > 0, last, params.idle_s)
        reward = params.reward_scale_s / (params.reward_scale_s + duration)

        # Loss feedback of the kept clients (module docstring).
        gap = state.loss_gap[slot]
        before = params.loss_floor + state.shared_loss + gap
        after = before - params.own_rate * gap
        samples = _num_samples(state, params)[slot]
        kappa2 = params.loss_dispersion * params.loss_dispersion
        spread = jnp.sqrt(1.0 + kappa2)
        noise = _mean_one(k_loss, (m,), jnp.sqrt(jnp.log1p(kappa2 / samples)))
        last_batch = jnp.minimum(params.batch_size, samples)
        noise_last = _mean_one(k_last, (m,), jnp.sqrt(jnp.log1p(kappa2 / last_batch)))
        mean_loss = noise * 0.5 * (before + after)
        rms = noise * spread * jnp.sqrt((before * before + before * after + after * after) / 3.0)

        def scatter(values, where):
            zero = jnp.zeros((n,), values.dtype)
            return zero.at[jnp.where(where, index, n)].set(values, mode="drop")

        f32 = jnp.float32
        feedback = Feedback(
            observed=scatter(completed, completed),
            reward=scatter(reward, completed),
            latency=scatter(duration, completed),
            success=scatter(kept, kept),
            info={
                "loss": scatter(mean_loss, kept),
                "loss_rms": scatter(rms, kept),
                "loss_rms_last_batch": scatter(noise_last * spread * after, kept),
                "num_samples": scatter(samples, kept),
            },
        )
        new_gap = state.loss_gap.at[jnp.where(kept, index, n)].multiply(
            1.0 - params.own_rate, mode="drop"
        )
        shared = state.shared_loss * (1.0 - params.shared_rate * num_kept.astype(f32) / k)
        global_loss = (
            params.loss_floor
            + shared
            + jnp.sum(state.data_size * new_gap) / jnp.sum(state.data_size)
        )
        total = jnp.sum(jnp.where(kept, reward, 0.0))
        stats = RoundStats(
            expected_reward=total,
            oracle_reward=None,
            reward=total,
            latency=round_s,
            num_failed=(count_true(selected) - num_kept).astype(f32),
            loss=global_loss,
            extras={
                "probe_time_s": probe_s,
                "probed_clients": probed,
                "kept": num_kept.astype(f32),
                "stragglers": count_true(completed & ~kept).astype(f32),
                "dropped": count_true(started & ~alive).astype(f32),
            },
        )
        own = state.availability
        if kind == "process":
            own = process.update(own, available, params.availability)
        new_state = state._replace(
            availability=own,
            clock_s=state.clock_s + round_s,
            shared_loss=shared,
            loss_gap=new_gap,
        )
        return feedback, new_state, stats

    return Env(
        reset=reset,
        observe=observe,
        step=step,
        oracle=None,
        num_clients=n,
        params=defaults,
        num_selected=m,
    )


def nominal_duration(compute_ms, bandwidth_kbps, params: DevicesParams):
    """f32[...], d_i = a B L c_i / 1000 + 2 M / w_i seconds (FedScale's
    `get_completion_time`: computation plus download and upload)."""
    # The constants multiply first, and by 1e-3 rather than divide by 1000 (which XLA
    # rewrites as a multiplication at run time, not when folding), so that a build with
    # them closed over (folded) and one with them traced round alike.
    seconds_per_ms = params.augmentation_factor * params.batch_size * params.local_steps * 1e-3
    return compute_ms * seconds_per_ms + (2.0 * params.model_size_kbit) / bandwidth_kbps


def _availability(availability, n: int):
    """(kind, process or None, parameters) of an `availability` argument."""
    if isinstance(availability, Trace):
        return "trace", None, _check_trace(availability, n)
    if isinstance(availability, Diurnal):
        phase = availability.phase
        if phase is not None:
            phase = validation.array_in_range("phase", phase, (n,), 0.0, 1.0)
            if np.any(phase >= 1.0):
                raise ValueError("phase must have every entry in [0, 1).")
        pattern = diurnal(availability.mean, availability.amplitude, availability.period_s, None)
        return (
            "diurnal",
            None,
            pattern._replace(
                mean=np.float32(pattern.mean),
                amplitude=np.float32(pattern.amplitude),
                period_s=np.float32(pattern.period_s),
                phase=phase,
            ),
        )
    if availability is None:
        process = availability_lib.markov(DEFAULT_TURN_ON, DEFAULT_TURN_OFF, n)
    else:
        process = availability_lib.resolve(availability, n)
    return "process", process, process.params


def _non_negative(name: str, value) -> float:
    return validation.float_in_range(name, value, 0.0, np.inf)


def _positive_array(name: str, value, n: int):
    if value is None:
        return None
    arr = validation.array_in_range(name, value, (n,), 0.0)
    if not np.all(arr > 0):
        raise ValueError(f"{name} must have every entry > 0, got min {arr.min()}.")
    return arr
