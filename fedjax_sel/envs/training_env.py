"""Training-backed environment: the global model lives in the state; rounds train it.

Round t: the server sees which clients are available (and, optionally, each client's
local accuracy of the current model); the policy picks a cohort; the k selected
clients are gathered into k fixed slots (a fixed-size gather, never all N), run local
SGD in parallel (`vmap` over slots, or in chunks: `client_chunk`), and their updates
are aggregated (FedAvg, FedSGD, hierarchical or decentralized); the new global model is
evaluated on the test set and the result becomes the feedback.

Latency model (a simple default; the papers' wireless models plug in through
`delay_env`): client i has a mean round latency `mu_i`, drawn per trial uniformly in
`latency_range` (or fixed); each round its latency is the shifted exponential `mu_i (1 -
v + v E)`, `E ~ Exp(1)` (the usual straggler model of distributed computing: a
deterministic part plus an exponential tail; mean `mu_i`), capped at the deadline
`tau_max` when one is set; a client whose raw latency reaches the deadline fails (Xia et
al. eq. 4), and the hierarchical fallback to the Z fastest clients ranks them by their
raw latencies (Qu et al. eq. 6). The round latency is the slowest selected client's.
Availability is Bernoulli per client and round by default, or any process
(`envs.availability`).

A paper's own delay model replaces this one through `delay_env`, any bandit `Env` over
the same clients (e.g. `dfl_delay`, Chen et al.): it then supplies each round's input
(availability, contexts, info), the clients' latencies and success, the feedback, the
oracle and the regret, and the training environment trains the selected cohort on top
and adds the loss and test accuracy to the round's statistics. With
`local_data="delay_env"` each trained client uses as many of its examples as the delay
model's round says, `RoundInput.info.num_samples` (Chen et al.'s D_k(t), which also sets
its computation delay, eq. 11): a uniformly random subset of that size, the same in
every local epoch, its size also the client's aggregation weight (spec A6).

Feedback (`feedback`):
  - "latency": r_i = 1 - tau_i / tau_max (Xia et al. §III.B), needs a deadline;
  - "success": r_i = 1 if client i met the deadline (Qu et al.'s X_n);
  - "accuracy": r_i = test accuracy of the new global model, for every selected i;
  - "loss_decrease": r_i = loss before minus after the round (test loss, or training
    loss with `loss_on="train"`), for every selected i;
  - "opinions": r_i = accuracy of the new model on client i's held-out data, observed
    for every client with held-out data (Tong et al.'s test opinions), also in
    `Feedback.info["opinions"]`.
For "latency" and "success" the expected reward of a client is known in closed form,
so the environment has an oracle and pseudo-regret is defined; for the model-based
feedbacks it has no oracle: `Env.oracle` is None and `RoundStats.oracle_reward` is None
(regret undefined, not zero), `expected_reward` the realized value, and the accuracy and
loss curves are the metrics.

Every feedback's `Feedback.info` carries the training statistics of the round, f32[N],
valid where a client was trained (`observed`; 0 elsewhere unless said otherwise):
  - "loss": the mean minibatch training loss over the client's local steps;
  - "loss_rms": `sqrt(mean loss(k)^2)` over every example k the client trained on this
    round (Oort's statistical utility is `num_samples * loss_rms`, Lai et al. eq. 1);
  - "loss_rms_last_batch": the same over the client's last minibatch alone (what
    FedScale's client reports and its Oort selector reads);
  - "num_samples": |B_i|, the examples client i trains on in a round, its data size with
    epochs and `min(data size, num_steps * batch_size)` with a fixed number of steps
    (FedScale's `trained_unique_samples`), `min(data size, D_i(t))` with
    `local_data="delay_env"`; given for every client.
With a `delay_env` whose feedback info is a dict, its keys are kept and these real values
replace any of the same name (a delay model's surrogates); any other info it returns is
kept under "delay".

Probing (`observe_client_loss`): `RoundInput.info` then carries, for every client, the
loss of the current global model on all its training examples ("loss"), on one minibatch
of `probe_batch_size` of them drawn without replacement each round ("loss_minibatch"),
its number of training examples ("data_size", count_i), its share of them
("data_fraction", count_i / sum_j count_j) and "num_samples" as above: what
Power-of-Choice's candidates report when probed (Cho et al., 2022). With a `delay_env`
these replace the delay model's values of the same names (its other keys are kept; an
info that is not a dict goes under "delay").

Cohort size: `Env.num_selected` is k, and the runner refuses decisions above it. A
decision that still selects more than k clients (a direct call of `step`) trains its k
lowest-indexed clients; the others are not trained, so they are reported failed
(`success` False, counted in `num_failed`) and not observed, never silently dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax

import models
from fedjax_sel import data as fed_data
from fedjax_sel import validation
from fedjax_sel.data.federated import FederatedData
from fedjax_sel.envs import availability as availability_lib
from fedjax_sel.fl import aggregate
from fedjax_sel.fl.client import cohort_update, local_sgd, probe_minibatch
from fedjax_sel.fl.evaluate import evaluate, evaluate_clients
from fedjax_sel.ops import top_k_mask
from fedjax_sel.types import Decision, Env, Feedback, RoundInput, RoundStats
from models.base import Model

ALGORITHMS = ("fedavg", "fedsgd", "hierarchical", "decentralized")
FEEDBACKS = ("latency", "success", "accuracy", "loss_decrease", "opinions")
LOCAL_DATA = ("all", "delay_env")


class TrainingParams(NamedTuple):
    """The environment's parameter pytree (`Env.params`).

    The learning setup (model, data, algorithm, optimizer, step sizes) stays static.

    Attributes:
      mean_latency: f32[N] fixed mu_i, or None to draw them per trial in the range below.
      latency_low: f32[], low end of the uniform mu_i, seconds.
      latency_high: f32[], high end of mu_i.
      latency_spread: f32[], v, the random share of a client's latency.
      deadline_s: f32[] tau_max, or None for no deadline.
      availability: the availability process's parameters (None with a `delay_env`,
        which then carries the process).
      delay: the `delay_env`'s parameters, or None.
    """

    mean_latency: chex.Array | None
    latency_low: chex.Array
    latency_high: chex.Array
    latency_spread: chex.Array
    deadline_s: chex.Array | None
    availability: Any
    delay: Any = None


class TrainingState(NamedTuple):
    """One trial's training run.

    Attributes:
      server: the aggregator's state (global, edge or server models).
      mean_latency: f32[N], mu_i, each client's mean round latency in seconds.
      loss: f32[], test loss of the current global model (training loss with
        `loss_on="train"`).
      delay: the `delay_env`'s state, or None.
      availability: the availability process's state (None for Bernoulli availability).
    """

    server: Any
    mean_latency: chex.Array
    loss: chex.Array
    delay: Any = None
    availability: Any = None


def check_data(data: FederatedData, model: Model, num_clients: int) -> None:
    """ValueError unless `data` holds `num_clients` clients whose features and classes fit
    `model`, with counts in [1, n_max]."""
    if not isinstance(data, FederatedData):
        raise ValueError(
            f"data must be a fedjax_sel.data.FederatedData, got {type(data).__name__}."
        )
    if not isinstance(model, Model):
        raise ValueError(f"model must be a models.Model, got {type(model).__name__}.")
    n = data.x.shape[0]
    if n != num_clients:
        raise ValueError(f"num_clients must equal the data's {n} clients, got {num_clients}.")
    feature_shape = tuple(data.x.shape[2:])
    if feature_shape != tuple(model.input_shape):
        raise ValueError(
            f"data features have shape {feature_shape} but model {model.name!r} expects "
            f"input_shape {tuple(model.input_shape)}."
        )
    for name in ("x_heldout", "x_test"):
        got = tuple(getattr(data, name).shape[2 if name == "x_heldout" else 1 :])
        if got != feature_shape:
            raise ValueError(f"data.{name} features have shape {got}, expected {feature_shape}.")
    if data.num_classes != model.num_classes:
        raise ValueError(
            f"data has {data.num_classes} classes but model {model.name!r} outputs "
            f"{model.num_classes}."
        )
    counts = np.asarray(data.counts)
    if counts.shape != (n,) or np.any(counts < 1) or np.any(counts > data.x.shape[1]):
        raise ValueError(f"data.counts must be int32[{n}] in [1, {data.x.shape[1]}].")


def expected_client_reward(
    mean_latency: chex.Array, spread: float, deadline_s: float, feedback: str
) -> chex.Array:
    r"""Expected reward of each client under the shifted-exponential latency model.

    With :math:`\tau = a + b E`, :math:`E \sim \mathrm{Exp}(1)`, shift
    :math:`a = \mu (1 - v)` and scale :math:`b = \mu v` (`spread` v), and
    :math:`x = \max(D - a, 0)`: :math:`\Pr[\tau < D] = 1 - e^{-x/b}` ("success") and
    :math:`E[\min(\tau, D)] = \min(a, D) + b (1 - e^{-x/b})`, so the "latency" reward
    :math:`1 - \min(\tau, D)/D` has mean :math:`1 - E[\min(\tau, D)]/D`.

    Args:
      mean_latency: f32[N], mu_i.
      spread: v in (0, 1].
      deadline_s: D > 0.
      feedback: "success" or "latency".
    """
    shift, scale = mean_latency * (1.0 - spread), mean_latency * spread
    within = 1.0 - jnp.exp(-jnp.maximum(deadline_s - shift, 0.0) / scale)
    if feedback == "success":
        return within
    return 1.0 - (jnp.minimum(shift, deadline_s) + scale * within) / deadline_s


def synthetic_task(num_clients: int, seed: int = 0) -> tuple[FederatedData, Model]:
    """A small offline task for `training` built from sizes alone (registry, tests).

    Four well-separated 2x2 classes of a Gaussian mixture, split IID over the clients (8
    training examples each, held-out sets from the test set), and logistic regression.
    """
    n = validation.positive_int("num_clients", num_clients)
    pool = fed_data.gaussian_mixture(
        seed=seed,
        num_train=8 * n,
        num_test=max(64, 4 * n),
        num_classes=4,
        image_shape=(2, 2, 1),
        template_size=2,
        noise=0.5,
    )
    indices = fed_data.iid(pool.y, n, seed=seed)
    return fed_data.pack(pool, indices, seed=seed, heldout_from_test=True), models.get(
        "logistic_regression", (2, 2, 1), 4
    )


def training(
    num_clients: int,
    num_selected: int,
    data: FederatedData | None = None,
    model: Model | None = None,
    algorithm: str = "fedavg",
    learning_rate: float = 0.05,
    batch_size: int = 32,
    num_epochs: int | None = 1,
    num_steps: int | None = None,
    optimizer: optax.GradientTransformation | None = None,
    loss: Callable[[chex.Array, chex.Array, chex.Array], chex.Array] | None = None,
    weighting: str = "examples",
    feedback: str = "accuracy",
    latency_range: tuple[float, float] = (1.0, 5.0),
    mean_latency: chex.Array | None = None,
    latency_spread: float = 0.5,
    deadline_s: float | None = None,
    drop_late: bool | None = None,
    availability=1.0,
    num_groups: int = 1,
    client_group: chex.Array | None = None,
    period: int = 5,
    min_updates: int = 1,
    mixing: chex.Array | None = None,
    observe_local_accuracy: bool = False,
    observe_client_loss: bool = False,
    probe_batch_size: int | None = None,
    delay_env: Env | None = None,
    local_data: str = "all",
    loss_on: str = "test",
    client_chunk: int | None = None,
) -> Env:
    """A federated training run as an environment.

    Args:
      num_clients: N, the number of clients of `data`.
      num_selected: k, cohort slots trained per round (1 <= k <= N), `Env.num_selected`;
        a decision that selects more trains its k lowest-indexed clients and reports the
        rest failed (module docstring).
      data: the federated dataset (`x[N, n_max, ...]`, counts, held-out and test sets);
        None, with `model` None, for the small `synthetic_task` (built from sizes alone).
      model: the classifier; its `input_shape` and `num_classes` must fit `data`.
      algorithm: "fedavg" (E local epochs, weighted mean), "fedsgd" (Xia et al. eq. 3:
        one minibatch gradient step per round, `num_steps` steps if given),
        "hierarchical" (Qu et al.) or "decentralized" (Chen et al.).
      learning_rate: local learning rate > 0 (gamma, eta, lambda in the papers).
      batch_size: local minibatch size >= 1 (rho = 2 in Xia et al.).
      num_epochs: local epochs E >= 1, or None with `num_steps`.
      num_steps: fixed local minibatch steps >= 1 instead of epochs.
      optimizer: an optax optimizer replacing plain SGD.
      loss: the masked training loss `(logits, labels, mask) -> f32[]` of local SGD;
        None for the model's own (`models.default_loss`: the hinge loss of
        `linear_svm`) where `model.name` is registered, softmax cross-entropy otherwise.
      weighting: "examples" or "uniform" aggregation weights (FedAvg/FedSGD; the
        hierarchical and decentralized algorithms weight as their papers do).
      feedback: one of `FEEDBACKS` (module docstring).
      latency_range: (low, high), 0 < low <= high, seconds; mu_i ~ U[low, high].
      mean_latency: f32[N] > 0 fixed mu_i instead of drawing them per trial.
      latency_spread: v in (0, 1], the random share of the latency: a client's
        latency is at least mu_i (1 - v) and has standard deviation mu_i v.
      deadline_s: tau_max > 0, or None for no deadline.
      drop_late: drop updates that missed the deadline; None takes each algorithm's
        paper default (FedSGD/FedAvg: drop, Xia spec A20; decentralized: keep, Chen
        spec A9; hierarchical always uses Qu's eq. 6 with its fastest-Z fallback).
      availability: probability in [0, 1] (or f32[N]) that a client is available, or an
        availability process (`envs.availability`); with a `delay_env`, anything but 1
        puts the process on the `delay_env` (`envs.with_availability`).
      num_groups: edge servers M (hierarchical) or servers S (decentralized).
      client_group: int32[N] in [0, num_groups), each client's fixed server; None
        assigns client i to server i mod num_groups. A `Decision.assignment` overrides it,
        and must give every selected client a server in [0, num_groups)
        (`Env.feasible`: the runner refuses other decisions).
      period: T_ES, edge rounds between cloud aggregations (hierarchical).
      min_updates: Z, minimum updates per edge server (hierarchical).
      mixing: f32[S, S] row-stochastic exchange matrix (decentralized); None for the
        paper's exact data-weighted exchange.
      observe_local_accuracy: put each client's held-out accuracy of the current model
        in `RoundInput.info["local_accuracy"]` (for local-accuracy scheduling).
      observe_client_loss: put each client's loss of the current global model (on all
        its training data and on one minibatch), data fraction and `num_samples` in
        `RoundInput.info` (module docstring; for Power-of-Choice). Each round then
        evaluates all N clients, O(N * n_max) forward passes: cheap at the hundreds of
        clients of a training-backed study, not meant for N in the millions.
      probe_batch_size: b >= 1, the examples of the "loss_minibatch" probe; None for
        `batch_size`.
      delay_env: an `Env` over the same N clients whose rounds, latencies, feedback and
        oracle replace the latency model and `feedback` (module docstring); its
        `Feedback.success` marks the updates that arrive in time, and its
        `Feedback.info["uncapped_latency"]`, where it reports one (`envs.hierarchical`),
        the clients' times beyond a deadline that caps `Feedback.latency` (the
        hierarchical fastest-Z fallback ranks the clients by it).
      local_data: "all" (a client trains on all its examples, as `num_epochs` or
        `num_steps` say) or "delay_env" (on `min(data size, D_i(t))` of them, D_i(t) the
        `delay_env`'s `RoundInput.info.num_samples`, int32[N]; module docstring).
      loss_on: "test" (the test loss) or "train" (the training loss of the global model,
        the mean over clients of its mean loss on their training examples, Chen et al.'s
        eq. 1: N n_max forward passes a round) as `RoundStats.loss` and the loss of
        "loss_decrease".
      client_chunk: the layout of the cohort's local training (`fl.cohort_update`):
        None trains every slot of every trial at once (`vmap`, the default on every
        platform, the right one on an accelerator); c >= 1 trains c models at a time
        (`lax.map` over the flattened (trial, slot) axis in `vmap`-ed chunks), equal up
        to float32 rounding and faster on a CPU when a model is large
        (docs/benchmarks_training.md: 2 for the 784-128-10 MLP on a 2-core CPU).

    Returns:
      An `Env` whose `RoundStats` carry the `loss` (`loss_on`) and the test `accuracy`
      of the global model after each round.
    """
    n = validation.positive_int("num_clients", num_clients)
    k = validation.num_selected(num_selected, n)
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}.")
    validation.choice("weighting", weighting, ("examples", "uniform"))
    if feedback not in FEEDBACKS:
        raise ValueError(f"feedback must be one of {FEEDBACKS}, got {feedback!r}.")
    validation.positive_int("batch_size", batch_size)
    if num_epochs is not None:
        validation.positive_int("num_epochs", num_epochs)
    if num_steps is not None:
        validation.positive_int("num_steps", num_steps)
    validation.positive_int("period", period)
    validation.positive_int("min_updates", min_updates)
    if drop_late is not None:
        validation.boolean("drop_late", drop_late)
    validation.boolean("observe_local_accuracy", observe_local_accuracy)
    validation.boolean("observe_client_loss", observe_client_loss)
    probe_batch_size = validation.positive_int(
        "probe_batch_size", batch_size if probe_batch_size is None else probe_batch_size
    )
    if algorithm == "fedsgd":
        num_steps, num_epochs = num_steps or 1, None
    elif num_steps is not None:
        num_epochs = None
    # Checked again by `local_sgd`, here before the default task is built (which traces).
    validation.positive_float("learning_rate", learning_rate)
    low, high = validation.real_interval("latency_range", latency_range, 0.0, low_open=True)
    fixed_latency = None
    if mean_latency is not None:
        fixed_latency = jnp.asarray(
            validation.array_in_range("mean_latency", mean_latency, (n,), 1e-9)
        )
    spread = validation.float_in_range("latency_spread", latency_spread, 0.0, 1.0, low_open=True)
    deadline = None if deadline_s is None else validation.positive_float("deadline_s", deadline_s)
    if feedback in ("latency", "success") and deadline is None:
        raise ValueError(f"feedback={feedback!r} needs a deadline_s.")
    process = availability_lib.resolve(availability, n)
    groups = validation.positive_int("num_groups", num_groups)
    if client_group is None:
        home = jnp.arange(n, dtype=jnp.int32) % groups
    else:
        home = np.asarray(client_group)
        if home.shape != (n,) or np.any(home < 0) or np.any(home >= groups):
            raise ValueError(f"client_group must be int32[{n}] in [0, {groups}), got {home!r}.")
        home = jnp.asarray(home, jnp.int32)
    if algorithm in ("fedavg", "fedsgd"):
        agg = aggregate.fedavg(weighting, True if drop_late is None else drop_late)
    elif algorithm == "hierarchical":
        agg = aggregate.hierarchical(groups, period, min_updates)
    else:
        agg = aggregate.decentralized(groups, mixing, False if drop_late is None else drop_late)
    if data is None and model is None:
        data, model = synthetic_task(n)
    check_data(data, model, n)
    if loss is None and model.name in models.REGISTRY:
        loss = models.default_loss(model.name)
    update_fn = local_sgd(
        model.apply, learning_rate, batch_size, num_epochs, num_steps, optimizer, loss
    )
    if client_chunk is not None:
        validation.positive_int("client_chunk", client_chunk)
    train_cohort = cohort_update(update_fn, client_chunk)
    counts_f = jnp.asarray(data.counts, jnp.float32)
    # |B_i|: every example per epoch, or at most num_steps * batch_size draws.
    num_samples = counts_f if num_steps is None else jnp.minimum(counts_f, num_steps * batch_size)
    data_fraction = counts_f / jnp.sum(counts_f)
    has_oracle = feedback in ("latency", "success")
    local_data = validation.choice("local_data", local_data, LOCAL_DATA)
    loss_on = validation.choice("loss_on", loss_on, ("test", "train"))
    if local_data == "delay_env" and (delay_env is None or observe_client_loss):
        raise ValueError(
            'local_data="delay_env" needs a delay_env and no observe_client_loss (whose '
            '"num_samples" would replace the round\'s D_k(t)).'
        )
    if delay_env is not None:
        if not isinstance(delay_env, Env) or delay_env.num_clients != n:
            raise ValueError(f"delay_env must be an Env over the {n} clients, got {delay_env!r}.")
        if observe_local_accuracy:
            raise ValueError("observe_local_accuracy cannot be combined with a delay_env.")
        if isinstance(availability, availability_lib.Availability) or np.any(
            np.asarray(availability) != 1.0
        ):
            delay_env = availability_lib.with_availability(delay_env, process)
    f32 = jnp.float32
    defaults = TrainingParams(
        mean_latency=fixed_latency,
        latency_low=f32(low),
        latency_high=f32(high),
        latency_spread=f32(spread),
        deadline_s=None if deadline is None else f32(deadline),
        availability=None if delay_env is not None else process.params,
        delay=None if delay_env is None else delay_env.params,
    )

    def model_metrics(params):
        """The model's loss (on `loss_on`'s data) and test accuracy."""
        loss, accuracy = evaluate(model.apply, params, data.x_test, data.y_test)
        if loss_on == "train":
            # F(g) = (1/N) sum_i F_i(g), the mean of the clients' mean losses (Chen eq. 1).
            loss = jnp.mean(evaluate_clients(model.apply, params, data.x, data.y, data.counts)[0])
        return loss, accuracy

    def reset(key, params=None):
        params = defaults if params is None else params
        weights = model.init(jax.random.fold_in(key, 0))
        if params.mean_latency is None:
            mu = jax.random.uniform(
                jax.random.fold_in(key, 1),
                (n,),
                minval=params.latency_low,
                maxval=params.latency_high,
            )
        else:
            mu = params.mean_latency
        delay, avail = None, None
        if delay_env is None:
            avail = process.init(key, params.availability)
        else:
            delay = delay_env.reset(jax.random.fold_in(key, 2), params.delay)
        return TrainingState(agg.init(weights), mu, model_metrics(weights)[0], delay, avail)

    def probe_losses(weights, key):
        """Every client's loss of `weights` on all its training data and on one minibatch
        of `probe_batch_size` examples drawn without replacement (all if fewer)."""
        loss, _ = evaluate_clients(model.apply, weights, data.x, data.y, data.counts)
        n_max = data.x.shape[1]

        def draw(client):
            index, _ = probe_minibatch(
                jax.random.fold_in(key, client), data.counts[client], n_max, probe_batch_size
            )
            return data.x[client, index], data.y[client, index]

        xb, yb = jax.vmap(draw)(jnp.arange(n))
        taken = jnp.minimum(data.counts, probe_batch_size)
        minibatch, _ = evaluate_clients(model.apply, weights, xb, yb, taken)
        return {
            "loss": loss,
            "loss_minibatch": minibatch,
            "data_size": counts_f,
            "data_fraction": data_fraction,
            "num_samples": num_samples,
        }

    def observe(state, t, key, params=None):
        params = defaults if params is None else params
        probe_key = jax.random.fold_in(key, 1)
        if delay_env is not None:
            round_input = delay_env.observe(state.delay, t, key, params.delay)
            if not observe_client_loss:
                return round_input
            info = probe_losses(agg.global_params(state.server), probe_key)
            if isinstance(round_input.info, dict):
                info = {**round_input.info, **info}
            elif round_input.info is not None:
                info["delay"] = round_input.info
            return round_input._replace(info=info)
        available = process.sample(state.availability, t, key, params.availability)
        info, weights = None, agg.global_params(state.server)
        if observe_local_accuracy:
            _, acc = evaluate_clients(
                model.apply, weights, data.x_heldout, data.y_heldout, data.heldout_counts
            )
            info = {"local_accuracy": acc}
        if observe_client_loss:
            info = {**(info or {}), **probe_losses(weights, probe_key)}
        return RoundInput(t=jnp.asarray(t, jnp.int32), available=available, info=info)

    def client_means(state, params):
        return expected_client_reward(
            state.mean_latency, params.latency_spread, params.deadline_s, feedback
        )

    def oracle(state, round_input, params=None):
        params = defaults if params is None else params
        return Decision(top_k_mask(client_means(state, params), round_input.available, k))

    def train(state, decision, time, success, key, used=None):
        """Trains the selected cohort (the k lowest-indexed selected clients), each on all
        its examples or on `used` (int32[N]) of them; `time` (f32[N]) is each client's
        time not capped at the deadline (`fl.Cohort.latency`).

        Returns the new server state, loss and test accuracy, the `Feedback.info` training
        statistics (module docstring) and the bool[N] trained clients.
        """
        selected = decision.selected
        slots = jnp.nonzero(selected, size=k, fill_value=0)[0]
        valid = jnp.arange(k) < jnp.sum(selected)
        counts = jnp.where(valid, data.counts[slots], 0)
        assignment = home if decision.assignment is None else decision.assignment
        group = assignment[slots]
        start = agg.client_params(state.server, group)
        keys = jax.vmap(lambda c: jax.random.fold_in(key, c))(slots)
        args, sizes = (start, data.x, data.y, slots, counts, keys), num_samples
        if used is not None:
            args, sizes = (*args, used[slots]), jnp.minimum(num_samples, used)
            counts = jnp.minimum(counts, used[slots])
        result = train_cohort(*args)
        cohort = aggregate.Cohort(
            valid=valid,
            arrived=success[slots],
            num_examples=counts.astype(jnp.float32),
            group=group,
            latency=time[slots],
        )
        server = agg.update(state.server, result.delta, cohort)
        # Empty slots point at client 0; they are sent out of bounds and dropped.
        index = jnp.where(valid, slots, n)
        scatter = lambda v: jnp.zeros((n,), jnp.float32).at[index].set(v, mode="drop")
        info = {
            "loss": scatter(result.loss),
            "loss_rms": scatter(result.loss_rms),
            "loss_rms_last_batch": scatter(result.last_loss_rms),
            "num_samples": sizes.astype(jnp.float32),
        }
        trained = jnp.zeros((n,), bool).at[index].set(True, mode="drop")
        return server, *model_metrics(agg.global_params(server)), info, trained

    def step_with_delay_env(state, round_input, decision, key, params=None):
        params = defaults if params is None else params
        delay_key, train_key = jax.random.split(key)
        out, delay, stats = delay_env.step(
            state.delay, round_input, decision, delay_key, params.delay
        )
        used = round_input.info.num_samples if local_data == "delay_env" else None
        time = out.latency
        if isinstance(out.info, dict):
            time = out.info.get("uncapped_latency", time)
        server, loss, accuracy, info, trained = train(
            state, decision, time, out.success, train_key, used
        )
        if isinstance(out.info, dict):
            info = {**out.info, **info}
        elif out.info is not None:
            info["delay"] = out.info
        # Selected clients beyond the k slots were not trained: failed, not observed.
        beyond = decision.selected & ~trained
        num_failed = stats.num_failed + jnp.sum(beyond & out.success).astype(jnp.float32)
        out = out._replace(
            observed=out.observed & ~beyond, success=out.success & ~beyond, info=info
        )
        stats = stats._replace(loss=loss, accuracy=accuracy, num_failed=num_failed)
        new_state = TrainingState(server, state.mean_latency, loss, delay, state.availability)
        return out, new_state, stats

    def step(state, round_input, decision, key, params=None):
        params = defaults if params is None else params
        spread_, deadline_ = params.latency_spread, params.deadline_s
        latency_key, train_key = jax.random.split(key)
        noise = jax.random.exponential(latency_key, (n,))
        raw = state.mean_latency * (1.0 - spread_ + spread_ * noise)
        if deadline_ is None:
            latency, success = raw, jnp.ones((n,), bool)
        else:
            latency, success = jnp.minimum(raw, deadline_), raw < deadline_
        server, loss, accuracy, info, trained = train(state, decision, raw, success, train_key)
        weights = agg.global_params(server)
        # Selected clients beyond the k slots were not trained: failed, not observed.
        selected = decision.selected & trained
        success = success & ~(decision.selected & ~trained)

        observed = selected
        if feedback == "latency":
            reward = 1.0 - latency / deadline_
        elif feedback == "success":
            reward = success.astype(jnp.float32)
        elif feedback == "accuracy":
            reward = jnp.full((n,), accuracy)
        elif feedback == "loss_decrease":
            reward = jnp.full((n,), state.loss - loss)
        else:
            _, reward = evaluate_clients(
                model.apply, weights, data.x_heldout, data.y_heldout, data.heldout_counts
            )
            observed = data.heldout_counts > 0
            info["opinions"] = reward

        if has_oracle:
            mean = client_means(state, params)
            best = oracle(state, round_input, params).selected
            value = jnp.sum(jnp.where(selected, reward, 0.0))
            expected = jnp.sum(jnp.where(selected, mean, 0.0))
            best_value = jnp.sum(jnp.where(best, mean, 0.0))
        else:
            value = jnp.sum(jnp.where(observed, reward, 0.0)) / jnp.maximum(jnp.sum(observed), 1)
            expected, best_value = value, None
        stats = RoundStats(
            expected_reward=expected,
            oracle_reward=best_value,
            reward=value,
            latency=jnp.max(jnp.where(selected, latency, 0.0)),
            num_failed=jnp.sum(decision.selected & ~success).astype(jnp.float32),
            loss=loss,
            accuracy=accuracy,
        )
        feedback_out = Feedback(
            observed=observed, reward=reward, latency=latency, success=success, info=info
        )
        avail = process.update(state.availability, round_input.available, params.availability)
        return feedback_out, TrainingState(server, state.mean_latency, loss, None, avail), stats

    def assigned_in_range(decision):
        """bool[]: every selected client's server (`Decision.assignment`) lies in
        [0, num_groups), where the algorithm has servers (else it is not read)."""
        if decision.assignment is None or algorithm in ("fedavg", "fedsgd"):
            return jnp.bool_(True)
        server = decision.assignment
        return jnp.all(~decision.selected | ((server >= 0) & (server < groups)))

    if delay_env is not None:
        delay_oracle = None
        if delay_env.oracle is not None:

            def delay_oracle(state, inp, params=None):
                params = defaults if params is None else params
                return delay_env.oracle(state.delay, inp, params.delay)

        def delay_feasible(state, inp, decision, params=None):
            params = defaults if params is None else params
            if delay_env.feasible is None:
                return assigned_in_range(decision)
            feasible = delay_env.feasible(state.delay, inp, decision, params.delay)
            return feasible & assigned_in_range(decision)

        return Env(
            reset=reset,
            observe=observe,
            step=step_with_delay_env,
            oracle=delay_oracle,
            num_clients=n,
            params=defaults,
            num_selected=k,
            feasible=delay_feasible,
        )
    return Env(
        reset=reset,
        observe=observe,
        step=step,
        oracle=oracle if has_oracle else None,
        num_clients=n,
        params=defaults,
        num_selected=k,
        feasible=lambda state, inp, decision, params=None: assigned_in_range(decision),
    )
