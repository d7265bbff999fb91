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


def _section(path: Path, heading: str) -> str:
    """Every ```python block of the section under ``heading``, in order (later blocks go on from earlier ones)."""
    text = path.read_text()
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return "\n".join(re.findall(r"```python\n(.*?)```", text[start : end if end > 0 else None], re.S))


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("guide")
    run = subprocess.run(
        [sys.executable, "-c", _section(ROOT / "docs" / "sysid.md", "## Identify your own model")],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout, tmp


def test_the_example_recovers_the_arms_values(fitted):
    """The fit, and the two fits from other starts that reuse its program (three values printed each)."""
    out, tmp = fitted
    found = re.findall(r"'([\w:\[\]]+)': ([\d.e-]+)", out)
    assert len(found) == 9, out[-2000:]
    for key, value in found:
        true = {"dof_damping:shoulder": 0.5, "dof_damping:elbow": 0.2, "actuator_gear:elbow[0]": 5.0}[key]
        assert float(value) == pytest.approx(true, rel=1e-5), key
    m = mujoco.MjModel.from_binary_path(str(tmp / "arm_fitted.mjb"))
    assert m.dof_damping[1] == pytest.approx(0.2, rel=1e-6)
