"""The quickstart notebook executes end to end on a small setting."""

import os

import nbformat
from nbclient import NotebookClient

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_quickstart_notebook_executes(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", ROOT)
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    path = os.path.join(ROOT, "colab", "quickstart.ipynb")
    nb = nbformat.read(path, as_version=4)
    params = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(params) == 1
    params[0].source = "NUM_CLIENTS = 12\nNUM_SELECTED = 3\nNUM_ROUNDS = 40\nNUM_TRIALS = 8"
    NotebookClient(
        nb, timeout=600, resources={"metadata": {"path": os.path.dirname(path)}}
    ).execute()
    outputs = "".join(
        o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
    )
    assert "cumulative_regret" in outputs
    assert "Thompson sampling: cumulative regret" in outputs
    assert "(1000, 12)" in outputs
    assert any("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))
