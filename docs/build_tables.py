"""Write the tables of measured figures in the docs from the committed CSV files.

    python docs/build_tables.py            # rewrite every marked table in README.md and docs/*.md
    python docs/build_tables.py --check    # exit 1, naming the file and table, if one differs

A table lives between ``<!-- table: NAME -->`` and ``<!-- /table -->`` in a Markdown file; NAME is
a key of :data:`TABLES`, a function that reads ``docs/results/`` and returns the table's Markdown.
Tables are written, never typed: ``tests/test_docs_tables.py`` fails when one differs from what
this script would write.
"""

from __future__ import annotations

import csv
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
MARKER = re.compile(r"(<!-- table: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /table -->)", re.S)


def _rows(name: str) -> list[dict]:
    with (RESULTS / name).open() as f:
        return list(csv.DictReader(f))


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


METHOD_LABELS = {"diffmjx_lm": "DiffMJX (LM, forward-mode Jacobians)", "mujoco_sysid": "`mujoco.sysid` (C engine, FD)"}


def sysid_recovery() -> str:
    """Per model, noise and method: the largest parameter error (median and worst over starts),
    the held-out errors and the wall time."""
    rows = _rows("sysid_recovery_summary.csv")
    out = [
        "| model | data | method | largest parameter error, median (worst) | fits within 2 % | held-out error, "
        "model timestep (fine step) | wall time, median (setup) |",
        "|---|---|---|---|---|---|---|",
    ]
    keys = list(dict.fromkeys((r["model"], r["noise"], r["method"]) for r in rows))
    for model, noise, method in keys:
        sel = [r for r in rows if (r["model"], r["noise"], r["method"]) == (model, noise, method)]
        err = [100 * float(r["max_rel_error"]) for r in sel]
        ok = sum(e <= 2.0 for e in err)
        held = _median([float(r["heldout_rms"]) for r in sel])
        fine = _median([float(r["heldout_rms_fine"]) for r in sel])
        wall = _median([float(r["wall_s"]) for r in sel])
        setup = [float(r["setup_s"]) for r in sel if r["setup_s"] not in ("", "nan")]
        setup_text = f" ({_median(setup):.0f} s)" if setup else ""
        out.append(
            f"| {model} | {'noisy' if int(noise) else 'noise-free'} | {METHOD_LABELS.get(method, method)} | "
            f"{_median(err):.3g} % ({max(err):.3g} %) | {ok} of {len(sel)} | {held:.3g} ({fine:.3g}) | "
            f"{wall:.1f} s{setup_text} |"
        )
    return "\n".join(out) + "\n"


def contactnets_generic() -> str:
    """The published ContactNets fit against its rerun through the generic path."""
    names = {
        "side_mm": "side (mm)",
        "mass_kg": "mass (kg)",
        "friction": "sliding friction",
        "test_error_mm": "**test error on the 50 test tosses (mm)**",
    }
    out = ["| quantity | published | rerun through the generic path | relative difference |", "|---|---|---|---|"]
    for r in _rows("contactnets_generic.csv"):
        label = names.get(r["quantity"], r["quantity"].replace("solref", "solref[").replace("solimp", "solimp[") + "]")
        out.append(
            f"| {label} | {float(r['published']):.6g} | {float(r['generic_path']):.6g} | "
            f"{100 * float(r['relative_difference']):+.3g} % |"
        )
    return "\n".join(out) + "\n"


def linearize() -> str:
    """Per regime and method: the relative errors of A and B against the converged period, and the
    median time per period."""
    rows = _rows("linearize.csv")
    methods = list(dict.fromkeys(r["method"] for r in rows))
    regimes = list(dict.fromkeys(r["regime"] for r in rows))
    cell = {(r["regime"], r["method"]): r for r in rows}
    out = ["| regime | " + " | ".join(methods) + " |", "|---" * (len(methods) + 1) + "|"]
    for g in regimes:
        vals = []
        for mth in methods:
            r = cell[(g, mth)]
            vals.append(f"{float(r['error_A']):.1e} / {float(r['error_B']):.1e}" if r["finite"] == "True" else "NaN")
        out.append(f"| {g}: error of A / B | " + " | ".join(vals) + " |")
    times = [_median([float(cell[(g, mth)]["ms_per_period"]) for g in regimes]) for mth in methods]
    out.append("| ms per period (median) | " + " | ".join(f"{t:.3g}" for t in times) + " |")
    return "\n".join(out) + "\n"


def contact_mpc() -> str:
    """Per task and method: successes over the starts, the final distance to the target (median and
    worst), the time per plan step (median) and the largest JIT time (the first start compiles; the
    others mostly find the persistent compilation cache)."""
    rows = _rows("contact_mpc.csv")
    out = [
        "| task | method | success (within 30 mm) | final distance to target, median (worst) | "
        "ms per plan step | JIT, largest (s) |",
        "|---|---|---|---|---|---|",
    ]
    for task, method in dict.fromkeys((r["task"], r["method"]) for r in rows):
        sel = [r for r in rows if (r["task"], r["method"]) == (task, method)]
        final = [float(r["final_distance_mm"]) for r in sel]
        ok = sum(r["success"] == "True" for r in sel)
        ms = _median([float(r["ms_per_plan_step"]) for r in sel])
        jit = max(float(r["jit_s"]) for r in sel)
        out.append(
            f"| {task} | {method} | {ok} of {len(sel)} | {_median(final):.0f} mm ({max(final):.0f} mm) | "
            f"{ms:.0f} | {jit:.0f} |"
        )
    return "\n".join(out) + "\n"


TABLES: dict[str, Callable[[], str]] = {
    "sysid_recovery": sysid_recovery,
    "contactnets_generic": contactnets_generic,
    "linearize": linearize,
    "contact_mpc": contact_mpc,
}
"""Table name -> the function that writes it."""


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def render(text: str, where: str) -> str:
    """``text`` with every marked table rewritten."""

    def one(match: re.Match) -> str:
        name = match["name"]
        if name not in TABLES:
            raise KeyError(f"{where}: unknown table {name!r}; docs/build_tables.py knows {', '.join(TABLES)}")
        return match.group(1) + TABLES[name]() + match.group(4)

    return MARKER.sub(one, text)


def stale() -> list[str]:
    """``path: table`` of every marked table that differs from what :func:`render` writes."""
    out = []
    for path in documents():
        text = path.read_text()
        new = render(text, str(path))
        if new != text:
            for old, fresh in zip(MARKER.finditer(text), MARKER.finditer(new)):
                if old.group(0) != fresh.group(0):
                    out.append(f"{path.relative_to(ROOT)}: {old['name']}")
    return out


def main(argv: list[str]) -> int:
    if "--check" in argv:
        bad = stale()
        for b in bad:
            print(f"stale table {b}; run python docs/build_tables.py")
        return 1 if bad else 0
    for path in documents():
        text = path.read_text()
        new = render(text, str(path))
        if new != text:
            path.write_text(new)
            print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
