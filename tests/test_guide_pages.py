"""The guide pages docs/gradient-modes.md, docs/gpu.md and docs/troubleshooting.md run as written.

Each page's ```python blocks, concatenated, run in a fresh process (``sys.executable -c``, in a
temporary folder), once per page; gpu.md runs with two forced host devices, so its sharded batch
really is split. Every ```text block that directly follows a ```python block is that code's output
and must appear line for line in what the run printed; the values each page teaches are checked as
numbers: the gradient against central differences of the converged solve, the batch's
accelerations against ``depth / timeconst**2``. The library's warning texts that troubleshooting.md
quotes without running them must be the library's own.

Cost: the three runs are the cold compiles of a forward-mode gradient, a converged forward solve and a
vmapped forward-dynamics call of the smallest scene (``sphere_drop``); nothing runs twice.
"""

import ast
import itertools
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
BLOCK = re.compile(r"```(\w*)\n(.*?)```", re.S)
GRADIENT_TOLERANCE = 5e-3  # relative, gradient-modes.md: "below 5e-3" (measured 6.0e-4)


def _blocks(page: str) -> list[tuple[str, str, int, int]]:
    """``(language, body, start, end)`` of every fenced block of ``page``, in order."""
    text = (DOCS / page).read_text()
    return [(m.group(1), m.group(2), m.start(), m.end()) for m in BLOCK.finditer(text)]


def _code(page: str) -> str:
    return "\n".join(body for lang, body, _, _ in _blocks(page) if lang == "python")


def _shown_outputs(page: str) -> list[str]:
    """Lines of the ```text blocks that directly follow a ```python block (blank lines between only)."""
    text = (DOCS / page).read_text()
    blocks = _blocks(page)
    lines = []
    for (lang, _, _, end), (nxt, body, start, _) in itertools.pairwise(blocks):
        if lang == "python" and nxt == "text" and not text[end:start].strip():
            lines += [ln for ln in body.splitlines() if ln.strip()]
    return lines


def _run(page: str, tmp_path: Path, xla_flags: str = "") -> str:
    env = dict(os.environ)
    if xla_flags:  # the suite's own flags (conftest.py) are kept
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {xla_flags}".strip()
    run = subprocess.run(
        [sys.executable, "-c", _code(page)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
    )
    out = run.stdout + run.stderr
    assert run.returncode == 0, f"{page}:\n{out[-4000:]}"
    for line in _shown_outputs(page):
        assert line in out, f"{page} shows {line!r}, which the run did not print:\n{out[-4000:]}"
    return out


def _number(pattern: str, out: str) -> float:
    found = re.search(pattern, out)
    assert found, f"{pattern!r} not printed:\n{out[-3000:]}"
    return float(found.group(1))


def test_pages_are_linked_and_have_code():
    index, nav = (DOCS / "index.md").read_text(), (ROOT / "mkdocs.yml").read_text()
    for page in ("gradient-modes.md", "gpu.md", "troubleshooting.md"):
        assert f"({page})" in index and f": {page}" in nav, page
        assert _code(page).strip(), page


def test_gradient_modes_page_checks_a_gradient_against_central_differences(tmp_path):
    out = _run("gradient-modes.md", tmp_path)
    ad = _number(r"forward mode:\s+([-+\d.e]+)", out)
    ref = _number(r"reference:\s+([-+\d.e]+)", out)
    agreement = _number(r"the two steps agree to ([\d.e+-]+)\)", out)
    assert math.isfinite(ad) and math.isfinite(ref) and ref != 0.0
    assert agreement < 1e-4  # the reference is converged in the difference step
    assert abs(ad - ref) / abs(ref) < GRADIENT_TOLERANCE, (ad, ref)


def test_gpu_page_shards_a_batch_over_two_devices(tmp_path):
    out = _run("gpu.md", tmp_path, "--xla_force_host_platform_device_count=2")
    assert "backend cpu, 2 device(s), default float float64" in out
    assert "devices 2, batch 16, result laid out as P('batch',)" in out
    rows = re.findall(r"height ([\d.]+) m  timeconst ([\d.]+) s  qacc (\S+) m/s\^2", out)
    assert len(rows) == 8, out[-3000:]
    z, tc, qacc = np.array(rows, dtype=float).T
    radius = 0.05
    apart = z > radius
    assert apart.sum() == 4 and np.all(qacc[apart] == 0.0)
    # at rest below solimp's width: depth / timeconst^2 (printed to six digits)
    np.testing.assert_allclose(qacc[~apart], (radius - z[~apart]) / tc[~apart] ** 2, rtol=1e-6)
    assert "quick preset: sample_batch 8; on a GPU: None, shard True" in out
    assert "segments laid out as P('batch',) over {'batch': 2}; parameters as P()" in out


def _warning_parts(module: Path) -> list[str]:
    """The literal text of every ``warnings.warn`` message in ``module`` (an f-string's literal pieces)."""
    parts = []
    for node in ast.walk(ast.parse(module.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "warn" and node.args:
            msg = node.args[0]
            pieces = msg.values if isinstance(msg, ast.JoinedStr) else [msg]
            parts += [p.value for p in pieces if isinstance(p, ast.Constant) and len(p.value) > 3]
    return parts


def test_troubleshooting_page_shows_the_librarys_messages(tmp_path):
    out = _run("troubleshooting.md", tmp_path)
    assert "TouchdownJumpWarning: contacts of 'floor' (0.9), 'ball' (0.9) start with solimp[0] > 0" in out
    assert "integrator.solver='foo' is not allowed; choose one of: tsit5" in out
    assert "gradient at the target: [nan nan nan]" in out and "FloatingPointError: invalid value (nan)" in out
    page = (DOCS / "troubleshooting.md").read_text()
    quoted = {module: _warning_parts(module) for module in sorted((ROOT / "diffmjx" / "sysid").glob("*.py"))}
    assert sum(map(bool, quoted.values())) >= 2, "the sysid modules' warnings (identify, mass) were not found"
    for module, parts in quoted.items():
        for part in parts:
            assert part in page, f"troubleshooting.md does not quote {module.name}'s warning text {part!r}"


@pytest.mark.parametrize("page", ["gradient-modes.md", "gpu.md", "troubleshooting.md"])
def test_shown_outputs_are_found(page):
    assert _shown_outputs(page), f"{page}: no ```text output block directly after a ```python block"
