"""The Sec. 6.1 figures of Huang et al. run end to end on a small setting."""

from __future__ import annotations

import json
import os

import pytest

from experiments import reproductions

SMALL = dict(num_trials=4, num_rounds=200, seed=0)


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("huang"))
    options = reproductions.Options(setting="calibrated", output_dir=out, **SMALL)
    # The figures share one cached simulation of the same size.
    return out, {f: reproductions.reproduce("huang", f, options) for f in ("2", "3", "4")}


def test_every_figure_writes_its_png_and_json(outputs):
    out, numbers = outputs
    for figure, result in numbers.items():
        assert isinstance(result["holds"], bool)
        assert os.path.getsize(result["png"]) > 0
        with open(os.path.join(out, f"huang_fig{figure}_calibrated.json")) as f:
            assert json.load(f)["holds"] == result["holds"]


def test_fig3_time_ordering_holds_on_a_small_setting(outputs):
    result = outputs[1]["3"]
    assert result["holds_faster_than_random"] and result["holds_higher_v_faster"]
    assert result["holds_fedcs_fastest"]


def test_fig4_pull_record_holds_on_a_small_setting(outputs):
    result = outputs[1]["4"]
    assert result["holds_high_v_uneven"] and result["holds_fedcs_most_uneven"]


def test_fig2_higher_v_higher_queue_on_a_small_setting(outputs):
    assert outputs[1]["2"]["holds_higher_v_higher_queue"]


def test_flagfiles_name_existing_figures():
    root = os.path.join(os.path.dirname(__file__), os.pardir, "launch", "flagfiles")
    names = sorted(n for n in os.listdir(root) if n.startswith("huang_fig"))
    assert names
    for name in names:
        with open(os.path.join(root, name)) as f:
            flags = dict(line.strip().lstrip("-").split("=", 1) for line in f if "=" in line)
        assert flags["paper"] == "huang"
        assert flags["figure"] in reproductions.figures("huang")
        assert name == f"huang_fig{flags['figure']}_{flags['setting']}.cfg"
