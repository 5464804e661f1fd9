"""Makes the repository root importable for the test suite (pytest rootdir conftest)."""
