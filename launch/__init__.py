"""absl-flag entry points: sweep, reproduce, bench."""
