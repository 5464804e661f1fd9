"""`Results` on hand-built values: `growth_exponent`, the tables, saving and loading."""

import json
import os

import numpy as np
import pandas as pd
import pytest

from fedjax_sel import results as results_lib
from fedjax_sel.results import Results


def _results(curve):
    curve = np.asarray(curve, np.float64)
    return Results(
        config={"num_trials": 1, "num_rounds": curve.size},
        curves={"p": {"cumulative_regret": {"mean": curve, "std": np.zeros_like(curve)}}},
        totals={},
        selection_fraction={},
    )


@pytest.mark.parametrize("alpha", [0.25, 0.5, 2 / 3, 1.0, 1.5])
def test_a_power_law_gives_its_exponent(alpha):
    t = np.arange(1, 4001, dtype=np.float64)
    assert _results(7.0 * t**alpha).growth_exponent("p") == pytest.approx(alpha, abs=1e-9)


def test_a_linear_regret_with_an_offset_gives_one():
    # 500 accumulated in the first 100 rounds, then 0.3 per round: the log-log slope of
    # the whole curve is well below 1, the growth exponent is 1.
    t = np.arange(1, 2001, dtype=np.float64)
    curve = np.minimum(t, 100) * 5.0 + np.maximum(t - 100, 0) * 0.3
    slope = np.polyfit(np.log(t[199:]), np.log(curve[199:]), 1)[0]
    assert slope < 0.8
    assert _results(curve).growth_exponent("p") == pytest.approx(1.0, abs=1e-12)


def test_flat_and_short_curves():
    t = np.arange(1, 101, dtype=np.float64)
    # Regret that stops growing at half time: -inf; none in the mid quarter: NaN.
    assert _results(np.minimum(t, 50)).growth_exponent("p") == -np.inf
    assert np.isnan(_results(np.minimum(t, 10)).growth_exponent("p"))
    assert np.isnan(_results(np.zeros(100)).growth_exponent("p"))
    assert np.isnan(_results([1.0, 2.0, 3.0]).growth_exponent("p"))


def _two_policies():
    rng = np.random.default_rng(0)
    curve = lambda: {"mean": rng.normal(size=5), "std": rng.random(5)}
    return Results(
        config={"num_trials": 3, "num_rounds": 5},
        curves={
            "ucb": {"cumulative_regret": curve(), "reward": curve()},
            "random": {"cumulative_regret": curve(), "reward": curve()},
        },
        totals={
            p: {"cumulative_regret": rng.normal(size=3) / 3, "failures": rng.random(3)}
            for p in ("ucb", "random")
        },
        selection_fraction={p: rng.random(4) for p in ("ucb", "random")},
    )


def _assert_frames_hold(res, curves, totals):
    assert list(curves.columns) == list(results_lib.CURVE_COLUMNS)
    assert len(curves) == 2 * 2 * 5
    for (policy, metric), rows in curves.groupby(["policy", "metric"], sort=False):
        assert rows["round"].tolist() == [1, 2, 3, 4, 5]
        mean, ci = res.curve(policy, metric)
        np.testing.assert_array_equal(rows["mean"].to_numpy(), res.curves[policy][metric]["mean"])
        np.testing.assert_array_equal(rows["std"].to_numpy(), res.curves[policy][metric]["std"])
        np.testing.assert_array_equal(rows["ci"].to_numpy(), ci)
    assert list(totals.columns) == ["policy", "trial", "cumulative_regret", "failures"]
    for policy, rows in totals.groupby("policy", sort=False):
        assert rows["trial"].tolist() == [0, 1, 2]
        for total, x in res.totals[policy].items():
            np.testing.assert_array_equal(rows[total].to_numpy(), x)


def test_dataframes_hold_the_numbers_exactly():
    res = _two_policies()
    _assert_frames_hold(res, res.to_dataframe(), res.totals_dataframe())


def test_csv_reads_back_exactly(tmp_path):
    res = _two_policies()
    path = str(tmp_path / "results")
    res.save_csv(path)
    read = lambda suffix: pd.read_csv(path + suffix)
    _assert_frames_hold(res, read(".csv"), read("_totals.csv"))


def test_ci_is_the_95_percent_half_width():
    res = _two_policies()
    frame = res.to_dataframe()
    row = frame[(frame.policy == "random") & (frame.metric == "reward")].iloc[2]
    std = res.curves["random"]["reward"]["std"][2]
    # The stored std is the population's; the half-width takes the sample std, as the
    # per-trial totals' does (`final`, ddof=1), so the band at the last round of a
    # cumulative metric equals the total's.
    assert row["ci"] == pytest.approx(results_lib.Z95 * std * np.sqrt(3 / 2) / np.sqrt(3))
    values = np.array([1.0, 2.0, 4.0])
    one = Results(
        config={"num_trials": 3, "num_rounds": 1},
        curves={"p": {"x": {"mean": values.mean(keepdims=True), "std": values.std(keepdims=True)}}},
        totals={"p": {"x": values}},
        selection_fraction={"p": np.ones(1)},
    )
    assert one.curve("p", "x")[1][0] == pytest.approx(one.final("p", "x")[1])
    one.config["num_trials"] = 1
    assert np.isnan(one.curve("p", "x")[1][0])


def _save(tmp_path, edit=None):
    res = _two_policies()
    path = str(tmp_path / "results")
    res.save(path)
    if edit is not None:
        with open(path + ".json") as f:
            meta = json.load(f)
        edit(meta)
        with open(path + ".json", "w") as f:
            json.dump(meta, f)
    return res, path


def test_an_interrupted_save_never_leaves_mixed_or_half_written_files(tmp_path, monkeypatch):
    earlier, path = _save(tmp_path)
    later = _two_policies()
    later.config["seed"] = 1
    later.totals["ucb"]["failures"] = later.totals["ucb"]["failures"] + 1.0

    def interrupted(meta, f, **kwargs):
        f.write('{"format": 2, "conf')
        raise KeyboardInterrupt

    monkeypatch.setattr(results_lib.json, "dump", interrupted)
    with pytest.raises(KeyboardInterrupt):
        later.save(path)
    monkeypatch.undo()
    # The new .npz is in place, the earlier .json whole: refused, not read as one run.
    assert sorted(os.listdir(tmp_path)) == ["results.json", "results.npz"]
    with pytest.raises(ValueError, match="results.npz is not the one .*results.json"):
        Results.load(path)
    later.save(path)
    assert Results.load(path).config == later.config
    with open(path + ".json", "w") as f:
        f.write('{"format": 2, "conf')
    with pytest.raises(ValueError, match="results.json cannot be read"):
        Results.load(path)
    assert earlier.config != later.config


def test_save_save_csv_and_plot_make_the_directories_they_write_into(tmp_path):
    # The README's tour saves to "out/run" and plots to a path in a fresh directory.
    import fedjax_sel

    res = _two_policies()
    res.save(str(tmp_path / "out" / "run"))
    res.save_csv(str(tmp_path / "tables" / "run"))
    fedjax_sel.plot(res, "reward", path=str(tmp_path / "figs" / "reward.png"))
    assert sorted(os.listdir(tmp_path / "out")) == ["run.json", "run.npz"]
    assert sorted(os.listdir(tmp_path / "tables")) == ["run.csv", "run_totals.csv"]
    assert os.listdir(tmp_path / "figs") == ["reward.png"]
    assert Results.load(str(tmp_path / "out" / "run")).config == res.config


def test_a_file_without_format_from_the_first_version_loads(tmp_path):
    def first_version(meta):
        del meta["format"]
        del meta["versions"]["fedjax_sel"]

    res, path = _save(tmp_path, first_version)
    loaded = Results.load(path)
    np.testing.assert_array_equal(loaded.totals["ucb"]["failures"], res.totals["ucb"]["failures"])


def test_a_newer_format_names_the_version_that_wrote_it(tmp_path):
    def newer(meta):
        meta["format"] = results_lib.FORMAT + 1
        meta["versions"]["fedjax_sel"] = "9.0.0"

    _, path = _save(tmp_path, newer)
    with pytest.raises(ValueError, match=r"written by fedjax-sel 9.0.0 in results format 3"):
        Results.load(path)


def test_a_file_missing_what_its_format_holds_says_so(tmp_path):
    _, path = _save(tmp_path, lambda meta: meta.pop("totals"))
    with pytest.raises(ValueError, match=r"fedjax-sel 0.1.0 \(results format 2\), lack 'totals'"):
        Results.load(path)
