"""`ruff check` on the whole tree passes: the rules pyproject.toml selects (unused imports and variables, undefined
names, lines past 120, mutable defaults, closures that catch a loop variable late, ...) find nothing."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_check_finds_nothing_in_the_tree():
    # --no-cache: no .ruff_cache written into the tree (nor into the throw-away copies break-and-test makes)
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise",
                           str(ROOT)], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, f"ruff check (pyproject.toml's rules) found:\n{proc.stdout}{proc.stderr}"
