"""`python -m launch.reproduce`: the command line of every paper's figures."""

import json
import os
import subprocess
import sys

import pytest

from experiments import reproductions

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _reproduce(*flags):
    env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
    return subprocess.run(
        [sys.executable, "-m", "launch.reproduce", *flags],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_cli_runs_a_figure_and_prints_its_numbers(tmp_path):
    out = _reproduce(
        "--paper=xia",
        "--figure=1",
        "--num_trials=2",
        "--num_rounds=30",
        f"--output_dir={tmp_path}",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    numbers = json.loads(out.stdout)
    assert numbers["paper"] == "xia" and isinstance(numbers["holds"], bool)
    assert (tmp_path / "xia_fig1_calibrated.json").exists()


@pytest.mark.parametrize(
    "flags, message",
    [
        ((), "--paper and --figure are required"),
        (("--paper=nope", "--figure=1"), "unknown paper 'nope'"),
        (("--paper=huang", "--figure=99"), "unknown figure '99' of huang"),
        (("--paper=qu", "--figure=4a"), "Figure '4a' trains models: --paper=qu_training."),
    ],
)
def test_cli_bad_flags_are_usage_errors(flags, message):
    out = _reproduce(*flags)
    assert out.returncode != 0 and message in out.stderr, out.stderr[-2000:]


def test_every_flagfile_names_an_existing_figure_and_setting():
    root = os.path.join(ROOT, "launch", "flagfiles")
    for name in sorted(os.listdir(root)):
        with open(os.path.join(root, name)) as f:
            flags = dict(line.strip().lstrip("-").split("=", 1) for line in f if "=" in line)
        if "paper" not in flags:  # flagfiles of the other launchers (sweep, benchmarks)
            assert name.startswith(("sweep_", "bench_")), name
            continue
        figure = reproductions.figures(flags["paper"])[flags["figure"]]
        setting = flags.get("setting", "calibrated")
        assert setting in figure.settings, name
        assert name == f"{flags['paper']}_fig{flags['figure']}_{setting}.cfg"
