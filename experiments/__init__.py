"""The experiments behind the launch scripts: benchmarks, NumPy references, paper figures.

Importable without flags, so that tests and notebooks call the same code as
`python -m launch.<script>` (the scripts in `launch/` only parse flags):

- `experiments.references`: NumPy references of the policies, timed against JAX;
- `experiments.bench`: the throughput suite against those references, and timing helpers;
- `experiments.sweep`: a sweep of registered policies on a registered environment;
- `experiments.training_benchmark`: one training round against a plain NumPy round;
- `experiments.figures`: data, runs and numbers shared by the training figures;
- `experiments.reproductions`: each seed paper's figures (`reproduce(paper, figure, ...)`).
"""
