"""The "MPC on your own task" example of docs/mpc.md runs as written and reaches its target."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_own_task_example_brings_the_tip_to_the_target(tmp_path):
    text = (ROOT / "docs" / "mpc.md").read_text()
    start = text.index("## MPC on your own task")
    code = re.search(r"```python\n(.*?)```", text[start:], re.S).group(1)
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    mm = float(re.search(r"tip to target after 2 s: (\d+) mm", run.stdout).group(1))
    assert mm < 20, run.stdout  # the suite's reacher tolerance
