"""The "identify your own model" example of docs/sysid.md and the README runs as written and recovers its values."""

import re
import subprocess
import sys
from pathlib import Path

import mujoco
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _example(path: Path, heading: str) -> str:
    text = path.read_text()
    start = text.index(heading)
    return re.search(r"```python\n(.*?)```", text[start:], re.S).group(1)


def test_readme_and_guide_show_the_same_example():
    assert _example(ROOT / "README.md", "### Identify your own model") == _example(
        ROOT / "docs" / "sysid.md", "## Identify your own model"
    )


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("guide")
    run = subprocess.run(
        [sys.executable, "-c", _example(ROOT / "docs" / "sysid.md", "## Identify your own model")],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout, tmp


def test_the_example_recovers_the_arms_values(fitted):
    out, tmp = fitted
    values = dict(re.findall(r"'([\w:\[\]]+)': ([\d.e-]+)", out))
    for key, true in (("dof_damping:shoulder", 0.5), ("dof_damping:elbow", 0.2), ("actuator_gear:elbow[0]", 5.0)):
        assert float(values[key]) == pytest.approx(true, rel=1e-6), key
    m = mujoco.MjModel.from_binary_path(str(tmp / "arm_fitted.mjb"))
    assert m.dof_damping[1] == pytest.approx(0.2, rel=1e-6)
