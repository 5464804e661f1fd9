"""The selection-fairness totals of the NumPy references, as the runner reports them."""

from __future__ import annotations

import numpy as np


def selection_totals(pulls: np.ndarray, num_rounds: int) -> dict[str, float]:
    """Jain's index of the selection counts, (sum c)^2 / (N sum c^2) (`metrics.jain_index`),
    and the smallest fraction of rounds a client was selected in.

    Args:
      pulls: f64[N], how many rounds each client was selected in (not all 0).
      num_rounds: T.
    """
    return {
        "jain_index": float(pulls.sum() ** 2 / (pulls.size * np.sum(pulls * pulls))),
        "min_selection_fraction": float(pulls.min() / num_rounds),
    }
