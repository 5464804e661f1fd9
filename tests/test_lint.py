"""The code base is ruff clean (lint and format)."""

import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _ruff(*args):
    exe = shutil.which("ruff") or os.path.join(os.path.dirname(sys.executable), "ruff")
    return subprocess.run([exe, *args], cwd=ROOT, capture_output=True, text=True)


def test_ruff_check_is_clean():
    out = _ruff("check", ".")
    assert out.returncode == 0, out.stdout[-4000:]


def test_ruff_format_is_clean():
    out = _ruff("format", "--check", ".")
    assert out.returncode == 0, out.stdout[-4000:]
