"""The training reproductions and the training benchmark run end to end on tiny settings."""

import os

import numpy as np
import pytest

from launch import bench_training
from launch.reproduce import Options, reproduce


@pytest.mark.parametrize(
    "paper, figure", [("xia_training", "2"), ("huang_training", "5"), ("chen_training", "5")]
)
def test_training_figure_runs_on_a_small_setting(tmp_path, paper, figure):
    options = Options("calibrated", str(tmp_path), num_trials=1, num_rounds=3)
    numbers = reproduce(paper, figure, options)
    assert isinstance(numbers["holds"], bool)
    accuracies = np.array(list(numbers["final_accuracy"].values()))
    assert np.all((accuracies > 0.0) & (accuracies <= 1.0))
    assert os.path.exists(tmp_path / f"{paper}_fig{figure}_calibrated.png")
    assert os.path.exists(tmp_path / f"{paper}_fig{figure}_calibrated.json")


def test_benchmark_sides_train_the_same_models():
    numbers = bench_training.benchmark(6, 2, 2, 1, 10, 4, 4, 4, map_batch=3)
    assert numbers["max_abs_param_difference"] < 1e-5
    for side in ("vectorized", "mapped", "sequential"):
        assert numbers[f"{side}_rounds_per_s"] > 0
