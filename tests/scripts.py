"""Run a test's Python script in a fresh interpreter (a new process: no state of the test run)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_script(folder: Path, name: str, text: str, *, timeout: float = 300) -> list[str]:
    """Write ``text`` to ``folder/name`` and run it from the repository root; return its lines.

    Fails the test with the end of its stderr when the script fails.
    """
    script = folder / name
    script.write_text(text)
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.splitlines()
