"""Results of a simulation: per-round curves with confidence bands and per-trial totals.

Saved as `<path>.npz` (arrays) next to `<path>.json` (configuration, versions, names),
both plain formats that reload without this package.
"""

from __future__ import annotations

import dataclasses
import json
import platform

import numpy as np

from fedjax_sel import metrics

# Two-sided 95% normal quantile, for confidence intervals of means over trials.
Z95 = 1.959963984540054


def _versions() -> dict[str, str]:
    import jax

    return {"jax": jax.__version__, "numpy": np.__version__, "python": platform.python_version()}


@dataclasses.dataclass
class Results:
    """What `fedjax_sel.simulate` returns.

    Attributes:
      config: the run's configuration (policies, sizes, seed, user config).
      curves: policy -> metric -> {"mean": f64[T], "std": f64[T]}, over trials per round.
      totals: policy -> total -> f64[M], each trial's value after the last round.
      selection_fraction: policy -> f64[N], each client's mean fraction of rounds selected.
      created: timestamp of the run.
      versions: library versions of the run.
    """

    config: dict
    curves: dict
    totals: dict
    selection_fraction: dict
    created: str = ""
    versions: dict = dataclasses.field(default_factory=_versions)

    @property
    def policies(self) -> list[str]:
        return list(self.curves)

    @property
    def num_trials(self) -> int:
        return int(self.config["num_trials"])

    @property
    def num_rounds(self) -> int:
        return int(self.config["num_rounds"])

    def curve(self, policy: str, metric: str) -> tuple[np.ndarray, np.ndarray]:
        """(mean f64[T], 95% half-width f64[T]) of a metric's mean over trials."""
        c = self.curves[policy][metric]
        return c["mean"], Z95 * c["std"] / np.sqrt(self.num_trials)

    def final(self, policy: str, total: str = "cumulative_regret") -> tuple[float, float]:
        """(mean, 95% half-width) over trials of a per-trial total."""
        x = np.asarray(self.totals[policy][total], np.float64)
        half = Z95 * x.std(ddof=1) / np.sqrt(x.size) if x.size > 1 else float("nan")
        return float(x.mean()), float(half)

    def growth_exponent(self, policy: str, metric: str = "cumulative_regret") -> float:
        """1 + log2(r_late / r_mid), r the mean increase per round of a cumulative metric
        over the last half of the rounds (late) and over the quarter before (mid).

        A curve c t^alpha gives alpha, so a sub-linear regret gives less than 1 and a
        linear one 1, whatever it accumulated in the first quarter (a log-log slope of
        the whole curve is below 1 for a linear regret with an offset). NaN for fewer
        than 4 rounds or no increase in the mid quarter.
        """
        mean = self.curves[policy][metric]["mean"]
        t = mean.size
        if t < 4:
            return float("nan")
        quarter, half = t // 4, t // 2
        mid = (mean[half - 1] - mean[quarter - 1]) / (half - quarter)
        late = (mean[t - 1] - mean[half - 1]) / (t - half)
        if not mid > 0:
            return float("nan")
        return float(1.0 + np.log2(max(late, 0.0) / mid)) if late > 0 else float("-inf")

    def table(self, totals: list[str] | None = None) -> str:
        """A plain-text table: each policy's per-trial totals as mean +- 95% half-width.

        Args:
          totals: the columns; None for those of `metrics.TABLE_TOTALS` the run has.
        """
        if totals is None:
            have = set.intersection(*(set(t) for t in self.totals.values())) if self.totals else ()
            totals = [name for name in metrics.TABLE_TOTALS if name in have]
        header = ["policy"] + totals
        rows = [header]
        for policy in self.policies:
            cells = [policy]
            for total in totals:
                mean, half = self.final(policy, total)
                cells.append(f"{mean:.4g} +- {half:.2g}")
            rows.append(cells)
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        lines = [
            "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
        ]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)

    def save(self, path: str) -> None:
        """Writes `<path>.npz` and `<path>.json`."""
        arrays = {}
        for policy in self.policies:
            for metric, c in self.curves[policy].items():
                arrays[f"curve/{policy}/{metric}/mean"] = c["mean"]
                arrays[f"curve/{policy}/{metric}/std"] = c["std"]
            for total, x in self.totals[policy].items():
                arrays[f"total/{policy}/{total}"] = x
            arrays[f"fraction/{policy}"] = self.selection_fraction[policy]
        np.savez_compressed(path + ".npz", **arrays)
        meta = {
            "config": self.config,
            "created": self.created,
            "versions": self.versions,
            "policies": self.policies,
            "metrics": {p: list(self.curves[p]) for p in self.policies},
            "totals": {p: list(self.totals[p]) for p in self.policies},
        }
        with open(path + ".json", "w") as f:
            json.dump(meta, f, indent=1)

    @classmethod
    def load(cls, path: str) -> Results:
        """Reads what `save(path)` wrote."""
        with open(path + ".json") as f:
            meta = json.load(f)
        with np.load(path + ".npz") as a:
            curves = {
                p: {
                    m: {"mean": a[f"curve/{p}/{m}/mean"], "std": a[f"curve/{p}/{m}/std"]}
                    for m in meta["metrics"][p]
                }
                for p in meta["policies"]
            }
            totals = {
                p: {t: a[f"total/{p}/{t}"] for t in meta["totals"][p]} for p in meta["policies"]
            }
            fractions = {p: a[f"fraction/{p}"] for p in meta["policies"]}
        return cls(
            config=meta["config"],
            curves=curves,
            totals=totals,
            selection_fraction=fractions,
            created=meta["created"],
            versions=meta["versions"],
        )
