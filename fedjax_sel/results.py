"""Results of a simulation: per-round curves with confidence bands and per-trial totals.

Saved as `<path>.npz` (arrays) next to `<path>.json` (configuration, versions, names),
both plain formats that reload without this package; as tables, `to_dataframe` and
`totals_dataframe` (pandas, an optional extra), or `save_csv` (no pandas needed).
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
import os
import platform
from collections.abc import Callable

import numpy as np

from fedjax_sel import metrics

# Two-sided 95% normal quantile, for confidence intervals of means over trials.
Z95 = 1.959963984540054

# The layout of what `save` writes, recorded in the .json as "format"; files of fedjax-sel
# 0.1.0 have no "format" and are format 1, the same layout. `load` reads every format up
# to this one and names the version that wrote a newer one.
FORMAT = 2

# The columns of `to_dataframe` and of `save_csv`'s curves.
CURVE_COLUMNS = ("policy", "metric", "round", "mean", "std", "ci")


def _versions() -> dict[str, str]:
    import jax

    import fedjax_sel

    return {
        "fedjax_sel": fedjax_sel.__version__,
        "jax": jax.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
    }


def _pandas():
    try:
        import pandas
    except ImportError:
        raise ImportError(
            "Results.to_dataframe and totals_dataframe need pandas: pip install "
            "'fedjax-sel[pandas]' (or write tables without it with Results.save_csv)."
        ) from None
    return pandas


def write_in_place(
    path: str, write: Callable, mode: str, tmp_suffix: str = ".tmp", **kwargs
) -> None:
    """Calls `write(file)` on `path + tmp_suffix`, then renames it to `path`: a reader
    finds the earlier file or the whole new one (results and checkpoints alike). The
    directory of `path` is made if needed."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + tmp_suffix
    try:
        with open(tmp, mode, **kwargs) as f:
            write(f)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


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
        """(mean f64[T], 95% half-width f64[T]) of a metric's mean over trials: the
        sample std (the stored population std times sqrt(M / (M - 1))), as `final`'s;
        NaN for one trial."""
        c, m = self.curves[policy][metric], self.num_trials
        if m < 2:
            return c["mean"], np.full_like(c["std"], np.nan)
        return c["mean"], Z95 * c["std"] * np.sqrt(m / (m - 1)) / np.sqrt(m)

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

    def curve_columns(self) -> dict[str, np.ndarray]:
        """The curves in long format, one row per (policy, metric, round): the columns of
        `CURVE_COLUMNS`, `round` from 1 and `ci` the 95% half-width of `curve`."""
        columns = {name: [] for name in CURVE_COLUMNS}
        rounds = np.arange(1, self.num_rounds + 1)
        for policy in self.policies:
            for metric in self.curves[policy]:
                mean, ci = self.curve(policy, metric)
                columns["policy"].append(np.full(rounds.size, policy, object))
                columns["metric"].append(np.full(rounds.size, metric, object))
                columns["round"].append(rounds)
                columns["mean"].append(np.asarray(mean, np.float64))
                columns["std"].append(np.asarray(self.curves[policy][metric]["std"], np.float64))
                columns["ci"].append(np.asarray(ci, np.float64))
        return {k: np.concatenate(v) if v else np.array([]) for k, v in columns.items()}

    def total_columns(self) -> dict[str, np.ndarray]:
        """The per-trial totals, one row per (policy, trial): `policy`, `trial` (from 0)
        and one column per total."""
        names = list(dict.fromkeys(t for p in self.policies for t in self.totals[p]))
        columns = {name: [] for name in ["policy", "trial", *names]}
        for policy in self.policies:
            size = len(next(iter(self.totals[policy].values()), ()))
            columns["policy"].append(np.full(size, policy, object))
            columns["trial"].append(np.arange(size))
            for name in names:
                x = self.totals[policy].get(name, np.full(size, np.nan))
                columns[name].append(np.asarray(x, np.float64))
        return {k: np.concatenate(v) if v else np.array([]) for k, v in columns.items()}

    def to_dataframe(self):
        """The curves as a pandas DataFrame in long format (`curve_columns`): columns
        policy, metric, round, mean, std, ci; the numbers are those of `curves`, exactly."""
        return _pandas().DataFrame(self.curve_columns())

    def totals_dataframe(self):
        """The per-trial totals as a pandas DataFrame (`total_columns`): policy, trial and
        one column per total; the numbers are those of `totals`, exactly."""
        return _pandas().DataFrame(self.total_columns())

    def save_csv(self, path: str) -> None:
        """Writes the curves to `<path>.csv` (`curve_columns`) and the per-trial totals to
        `<path>_totals.csv` (`total_columns`), numbers written in full (`repr`), so that
        they read back exactly (`pandas.read_csv` of pandas >= 3, or `float_precision=
        "round_trip"` before)."""
        for suffix, columns in (
            (".csv", self.curve_columns()),
            ("_totals.csv", self.total_columns()),
        ):
            cells = [
                [repr(float(v)) if isinstance(v, np.floating) else str(v) for v in column]
                for column in columns.values()
            ]

            def write(f, columns=columns, cells=cells):
                writer = csv.writer(f)
                writer.writerow(columns)
                writer.writerows(zip(*cells, strict=True))

            write_in_place(path + suffix, write, "w", newline="")

    def save(self, path: str) -> None:
        """Writes `<path>.npz`, then `<path>.json` (the directory made if needed), each
        whole or not at all (written beside and renamed into place), the `.json` holding
        the `.npz`'s SHA-256: an interrupted save leaves the earlier pair, or a new `.npz`
        that `load` refuses beside the earlier `.json`, never a file half written."""
        arrays = {}
        for policy in self.policies:
            for metric, c in self.curves[policy].items():
                arrays[f"curve/{policy}/{metric}/mean"] = c["mean"]
                arrays[f"curve/{policy}/{metric}/std"] = c["std"]
            for total, x in self.totals[policy].items():
                arrays[f"total/{policy}/{total}"] = x
            arrays[f"fraction/{policy}"] = self.selection_fraction[policy]
        buffer = io.BytesIO()
        np.savez_compressed(buffer, **arrays)
        npz = buffer.getvalue()
        write_in_place(path + ".npz", lambda f: f.write(npz), "wb")
        meta = {
            "format": FORMAT,
            "npz_sha256": hashlib.sha256(npz).hexdigest(),
            "config": self.config,
            "created": self.created,
            "versions": self.versions,
            "policies": self.policies,
            "metrics": {p: list(self.curves[p]) for p in self.policies},
            "totals": {p: list(self.totals[p]) for p in self.policies},
        }
        write_in_place(path + ".json", lambda f: json.dump(meta, f, indent=1), "w")

    @classmethod
    def load(cls, path: str) -> Results:
        """Reads what `save(path)` wrote, with this version or an earlier one.

        Raises:
          ValueError: naming the version that wrote the files, if they are of a newer
            format or lack what their format holds; naming the files, if the `.json`
            cannot be read or was written with another `.npz` (an interrupted save).
        """
        try:
            with open(path + ".json") as f:
                meta = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}.json cannot be read as JSON ({e}).") from None
        versions = meta.get("versions", {}) if isinstance(meta, dict) else {}
        wrote = f"fedjax-sel {versions.get('fedjax_sel', '0.1.0 or earlier')}"
        fmt = meta.get("format", 1) if isinstance(meta, dict) else None
        if not isinstance(fmt, int) or fmt > FORMAT:
            import fedjax_sel

            raise ValueError(
                f"{path}.json was written by {wrote} in results format {fmt!r}; fedjax-sel "
                f"{fedjax_sel.__version__} reads formats up to {FORMAT}: load it with a newer "
                f"fedjax-sel."
            )
        want = meta.get("npz_sha256")
        if want is not None:
            with open(path + ".npz", "rb") as f:
                if hashlib.sha256(f.read()).hexdigest() != want:
                    raise ValueError(
                        f"{path}.npz is not the one {path}.json was saved with (a save "
                        "interrupted between the two files?): save the results again."
                    )
        try:
            return cls._read(path, meta)
        except KeyError as e:
            raise ValueError(
                f"{path}.json/.npz, written by {wrote} (results format {fmt}), lack {e}: they "
                f"are incomplete or were not written by Results.save."
            ) from None

    @classmethod
    def _read(cls, path: str, meta: dict) -> Results:
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
