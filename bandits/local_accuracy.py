"""Local-accuracy scheduling: the clients on which the current model is worst go first."""

from __future__ import annotations

from fedjax_sel import ops, validation
from fedjax_sel.types import Decision, Selector


def local_accuracy(num_clients: int, num_selected: int) -> Selector:
    """Selects the k available clients of lowest local test accuracy (Xia et al. §V).

    "The clients with lower local test accuracy have higher priority to be chosen in each
    round": the baseline of Xia et al. Figs. 2 and 6. It reads each client's accuracy of
    the current global model from `RoundInput.info["local_accuracy"]` (f32[N]), which a
    training environment fills with `observe_local_accuracy=True`; ties are broken
    uniformly at random.

    Args:
      num_clients: N >= 1.
      num_selected: cohort size k, 1 <= k <= N.

    Returns:
      A stateless `Selector`.
    """
    n = validation.positive_int("num_clients", num_clients)
    k = validation.num_selected(num_selected, n)

    def init(key):
        del key
        return ()

    def select(state, inp, key):
        scores = -validation.require_info(
            inp.info,
            "local_accuracy",
            policy="local_accuracy",
            hint="build the training environment with observe_local_accuracy=True",
        )
        return Decision(ops.masked_top_k(scores, inp.available, k, key)), state

    def update(state, decision, feedback):
        del decision, feedback
        return state

    return Selector(init=init, select=select, update=update)
