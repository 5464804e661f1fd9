r"""Power-of-Choice: d candidates drawn by data size, the m of highest loss among them.

Cho, Wang and Joshi, "Towards Understanding Biased Client Selection in Federated
Learning" (AISTATS 2022; arXiv 2010.01243, "Client Selection in Federated Learning:
Convergence Analysis and Power-of-Choice Selection Strategies"), and the authors'
reference code. A round of `pow-d`:

1. the server samples a candidate set A of d clients without replacement, client i drawn
   with probability proportional to its data fraction :math:`p_i`;
2. it sends the global model w to the candidates, which report their local loss
   :math:`F_i(w)`;
3. it selects the m = `num_selected` candidates of highest loss, ties broken at random.

Step 1 is `ops.gumbel_top_k` with logits :math:`\log p_i`: the k largest of
:math:`\log p_i + G_i` (i.i.d. standard Gumbel :math:`G_i`) are, in decreasing order, a
draw of successive sampling, the law the authors' code draws with
`np.random.choice(K, p=p, size=d, replace=False)`: the first is i with probability
:math:`p_i / \sum_j p_j` (the Gumbel-max trick), and given the first, the next is the
Gumbel-max draw among the rest, with probability renormalised over them, because the
argmax of independent Gumbels is independent of their maximum, so conditioning on the
rest lying below the first changes nothing about which of them is largest (Kool, van
Hoof and Welling, ICML 2019). The law
is restricted to the available clients of positive data fraction (renormalised there):
a client holding no data is never a candidate, and where fewer than d clients qualify,
all of them are candidates (and fewer than m may be selected).

The variants differ in the loss the server ranks the candidates by:

- `pow-d`: :math:`F_i(w)` on all of the candidate's local data
  (`RoundInput.info["loss"]`, f32[N], from the environment: `envs.devices`);
- `cpow-d` (computation-efficient): the loss on one mini-batch of b examples drawn from
  the candidate's data (`RoundInput.info["loss_minibatch"]`);
- `rpow-d` (computation- and communication-efficient): no probe; the server ranks the
  candidates by the loss each reported when it last took part in training (the mean
  training loss over its local steps, `Feedback.info["loss"]` where `success`), and
  clients never seen by `initial_loss`: +inf by default, as in the authors' code, so
  that unseen candidates go first.

Probes (`Decision.probe`, f32[N]; the environment charges them): the examples each
candidate evaluates before the cohort is chosen.

- `pow-d`: its local data size, `RoundInput.info["data_size"]`.
- `cpow-d`: `min(probe_batch_size, that size)`. The environment estimates
  `info["loss_minibatch"]` on mini-batches of its own `probe_batch_size`: build both
  with the same value, or the charged probes and the estimate disagree.
- `rpow-d`: None (no probes).

Losses are compared in the total order of f32 (`ops.masked_top_k`): a NaN loss ranks
first. `update` of `rpow-d` refuses a NaN, infinite or negative reported loss
(`validation.check_feedback`: eagerly, or under `checkify`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sel import ops, validation
from fedjax_sel.types import Decision, Selector

VARIANTS = ("pow-d", "cpow-d", "rpow-d")
_LOSS_KEY = {"pow-d": "loss", "cpow-d": "loss_minibatch"}


class PowerOfChoiceState(NamedTuple):
    """`rpow-d`'s memory of the losses the clients last reported.

    Attributes:
      stale_loss: f32[N], the mean training loss each client reported in the last round
        it completed (`Feedback.info["loss"]` where `success`); 0 where never.
      seen: bool[N], whether the client has ever reported one.
    """

    stale_loss: chex.Array
    seen: chex.Array


def power_of_choice(
    num_clients: int,
    num_selected: int,
    num_candidates: int | None = None,
    variant: str = "pow-d",
    probe_batch_size: int = 32,
    initial_loss: float = math.inf,
) -> Selector:
    r"""Power-of-Choice client selection, `pow-d`, `cpow-d` or `rpow-d` (module docstring).

    Args:
      num_clients: N >= 1.
      num_selected: cohort size m, 1 <= m <= N.
      num_candidates: d, the candidate set's size, m <= d <= N; None for min(2m, N)
        (the paper's smallest setting, d = 2m). d = m selects by data size alone (no
        loss bias); d = N ranks every available client by loss.
      variant: "pow-d", "cpow-d" or "rpow-d".
      probe_batch_size: b >= 1, the mini-batch on which a `cpow-d` candidate estimates
        its loss (the authors' code: one batch of its training batch size); the
        environment's must be the same (32, the default of `envs.devices`). Unused by
        the other variants.
      initial_loss: `rpow-d`'s loss of a client that has never reported one, in
        [0, inf]; inf (default) ranks unseen candidates first. Unused by the others.

    Returns:
      A `Selector`; its state is a `PowerOfChoiceState` for `rpow-d`, `()` otherwise.

    Raises:
      ValueError: an argument outside its range (before anything is traced); while
        traced, a `RoundInput.info` or `Feedback.info` lacking a key the variant reads.
    """
    n = validation.positive_int("num_clients", num_clients)
    m = validation.num_selected(num_selected, n)
    d = min(2 * m, n) if num_candidates is None else num_candidates
    d = validation.int_in_range("num_candidates", d, m, n)
    variant = validation.choice("variant", variant, VARIANTS)
    batch = validation.positive_int("probe_batch_size", probe_batch_size)
    initial = validation.real("initial_loss", initial_loss)
    if not initial >= 0.0:  # NaN fails too
        raise ValueError(
            f"initial_loss must lie in [0, inf] (inf: unseen clients rank first), "
            f"got {initial_loss!r}."
        )

    def read(where, container, key):
        """f32[N] `container[key]`, or a ValueError naming what is missing."""
        return validation.require_info(
            container,
            key,
            policy=variant,
            where=where,
            hint="use envs.devices or the training environment on it",
            num_clients=n,
        )

    def candidates(inp, key):
        """bool[N], the candidate set A: min(d, #eligible) clients without replacement,
        P proportional to p_i among the available clients with p_i > 0."""
        fraction = read("RoundInput", inp.info, "data_fraction")
        eligible = inp.available & (fraction > 0)
        return ops.gumbel_top_k(jnp.log(fraction), eligible, d, key)

    def highest(score, candidate, key):
        """bool[N]: the m candidates of highest `score`, ties at random, ranked among the
        (at most d) candidates alone: one pass over N gathers them, not a ranking of N."""
        slots = ops.true_indices(candidate, d)
        chosen = ops.masked_top_k(ops.places.take(score, slots, 0.0), slots < n, m, key)
        return ops.places.put(jnp.zeros((n,), bool), slots, chosen)

    def probe(inp, candidate):
        """f32[N], the examples each candidate evaluates (0 elsewhere)."""
        size = read("RoundInput", inp.info, "data_size")
        if variant == "cpow-d":
            size = jnp.minimum(size, batch)
        return jnp.where(candidate, size, 0.0).astype(jnp.float32)

    if variant == "rpow-d":

        def init(key):
            del key
            return PowerOfChoiceState(
                stale_loss=jnp.zeros((n,), jnp.float32), seen=jnp.zeros((n,), bool)
            )

        def select(state, inp, key):
            candidate_key, tie_key = jax.random.split(key)
            candidate = candidates(inp, candidate_key)
            score = jnp.where(state.seen, state.stale_loss, jnp.float32(initial))
            return Decision(highest(score, candidate, tie_key)), state

        def update(state, decision, feedback):
            del decision
            loss = read("Feedback", feedback.info, "loss")
            reported = feedback.observed & feedback.success
            validation.check_observed(variant, "info['loss']", loss, reported, 0.0, np.inf)
            return PowerOfChoiceState(
                stale_loss=jnp.where(reported, loss, state.stale_loss).astype(jnp.float32),
                seen=state.seen | reported,
            )

        return Selector(init=init, select=select, update=update)

    loss_key = _LOSS_KEY[variant]

    def init(key):
        del key
        return ()

    def select(state, inp, key):
        candidate_key, tie_key = jax.random.split(key)
        candidate = candidates(inp, candidate_key)
        loss = read("RoundInput", inp.info, loss_key)
        selected = highest(loss, candidate, tie_key)
        return Decision(selected, probe=probe(inp, candidate)), state

    def update(state, decision, feedback):
        del decision, feedback
        return state

    return Selector(init=init, select=select, update=update)
