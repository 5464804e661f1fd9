"""The claims of Xia et al.'s Figures 1, 3, 4, 5 and 7 on small settings (calibrated)."""

from __future__ import annotations

import json

import pytest

from experiments.reproductions import Options, reproduce, xia


def options(tmp_path, trials, rounds):
    return Options(
        setting="calibrated", output_dir=str(tmp_path), num_trials=trials, num_rounds=rounds, seed=0
    )


def test_fig1_cs_ucb_beats_random_and_round_robin(tmp_path):
    numbers = reproduce("xia", "1", options(tmp_path, 8, 300))
    assert numbers["below_baselines"] and numbers["gap_widens"] and numbers["fewer_failed"]
    assert numbers["holds"]
    assert (tmp_path / "xia_fig1_calibrated.png").exists()
    assert json.loads((tmp_path / "xia_fig1_calibrated.json").read_text())["holds"]


def test_fig3_cs_ucb_below_baselines_when_channels_do_not_divide_clients(tmp_path):
    # N = 3 does not divide K = 20: round robin's last group wraps around.
    numbers = xia.run_fig3(options(tmp_path, 8, 300), channels=(3,))
    assert numbers["below_baselines_every_n"]
    gaps = numbers["gap_s"]
    assert gaps["cs_ucb"][0] < min(gaps["random"][0], gaps["round_robin"][0])


def test_fig4_and_fig5_fairness_tradeoff(tmp_path):
    opts = options(tmp_path, 16, 4000)
    fig4 = xia.run_fig4(opts)
    # Larger betas meet every target; the fairness-unaware baseline has the smallest,
    # negative gap and starves client 1; a smaller beta gives a smaller gap.
    assert fig4["larger_betas_meet_fairness"]
    assert fig4["modified_smallest_and_negative"]
    assert fig4["modified_violates_client1"]
    assert fig4["smaller_beta_smaller_gap"]
    fig5 = xia.run_fig5(opts)
    assert fig5["smaller_beta_slower"]
    assert fig5["beta_1e5_violates_throughout"]
    assert fig5["holds"]


def test_fig7_larger_fairness_scale_larger_latency(tmp_path):
    numbers = xia.run_fig7(options(tmp_path, 4, 500), channels=(4,), scales=(0.5, 2.0))
    assert numbers["larger_level_larger_latency"] and numbers["holds"]
    latency = numbers["cumulative_latency_s"]
    assert set(latency) == {"rho=0.5", "rho=2", "modified_cs_ucb", "random", "round_robin"}
    # The fairness-unaware baseline schedules the fastest clients: the lowest latency.
    assert numbers["modified_cs_ucb_lowest"]
    assert latency["modified_cs_ucb"][0] < min(latency["rho=0.5"][0], latency["random"][0])


def test_fig7_with_the_c_min_heuristic(tmp_path):
    # §II.C's targets c_k = varphi N s_k / sum s: a larger varphi, a larger latency.
    numbers = xia.run_fig7(
        options(tmp_path, 4, 500), channels=(4,), scales=(0.1, 0.4), targets="c_min"
    )
    assert numbers["targets"] == "c_min"
    assert set(numbers["r_star_dual"]) == {"varphi=0.1", "varphi=0.4"}
    assert numbers["larger_level_larger_latency"]
    assert (tmp_path / "xia_fig7_c_min_calibrated.png").exists()


def test_fig7_refuses_unknown_targets(tmp_path):
    with pytest.raises(ValueError, match="targets must be 'scale' or 'c_min'"):
        xia.run_fig7(options(tmp_path, 1, 1), targets="rho")
    assert not list(tmp_path.iterdir())
