"""Paper reproductions, one module per paper, discovered by `launch.reproduce`.

A module `launch/reproductions/<paper>.py` defines `FIGURES`, a mapping from a figure
name ("1", "3", ...) to a `launch.reproduce.Figure`.
"""
