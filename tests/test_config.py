"""Tests of diffmjx.config: defaults, validation, YAML, overrides and CLI flags."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

import diffmjx
from diffmjx.config import (
    DEFAULT_PRESET,
    CFDConfig,
    Config,
    IntegratorConfig,
    add_cli_arguments,
    config_from_args,
)


def test_config_is_frozen_and_hashable() -> None:
    cfg = Config()
    with pytest.raises(AttributeError):
        cfg.integrator.rtol = 1.0  # type: ignore[misc]
    assert hash(cfg) == hash(Config())


def test_default_preset_matches_defaults() -> None:
    assert Config.from_yaml(DEFAULT_PRESET) == Config()


def test_override_returns_new_config() -> None:
    cfg = Config()
    new = cfg.override(
        "integrator.rtol=1e-6",
        "collision.smooth=true",
        "cfd.solimp=[0, 0.01, 0.1, 1, 2.5]",
        "integrator.dt0=0.002",
        "integrator.max_steps=100",
    )
    assert new.integrator.rtol == 1e-6 and isinstance(new.integrator.rtol, float)
    assert new.collision.smooth is True
    assert new.cfd.solimp == (0.0, 0.01, 0.1, 1.0, 2.5)
    assert new.integrator.dt0 == 0.002
    assert new.integrator.max_steps == 100
    assert cfg == Config() and cfg.integrator.rtol == 1e-7
    assert new.override("integrator.dt0=null").integrator.dt0 is None


def test_exponent_string_parses_as_float() -> None:
    assert Config().override("integrator.atol=1e-6").integrator.atol == 1e-6
    assert Config.from_dict({"integrator": {"rtol": "1e-6"}}).integrator.rtol == 1e-6


def test_yaml_round_trip(tmp_path: Path) -> None:
    cfg = Config().override("integrator.solver=dopri8", "integrator.checkpoints=16", "cfd.enabled=true")
    path = tmp_path / "cfg.yaml"
    text = cfg.to_yaml(path)
    assert path.read_text() == text
    assert Config.from_yaml(path) == cfg
    assert Config.from_dict(cfg.to_dict()) == cfg


def test_empty_yaml_gives_defaults(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("")
    assert Config.from_yaml(path) == Config()


def test_from_dict_keeps_missing_defaults() -> None:
    cfg = Config.from_dict({"integrator": {"solver": "euler"}, "cfd": {"solimp": [0, 0, 1, 1, 1]}})
    assert cfg.integrator.solver == "euler"
    assert cfg.integrator.adjoint == "backsolve"
    assert cfg.cfd.solimp == (0.0, 0.0, 1.0, 1.0, 1.0)
    assert cfg.collision == Config().collision


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (["integrator.solver=rk45"], "integrator.solver"),
        (["integrator.adjoint=magic"], "integrator.adjoint"),
        (["integrator.step_control=pi"], "integrator.step_control"),
        (["integrator.on_budget_exhausted=ignore"], "integrator.on_budget_exhausted"),
        (["solver.gradient=fd"], "solver.gradient"),
        (["solver.impedance_floor=-1e-6"], "solver.impedance_floor"),
        (["solver.impedance_floor=1.0"], "solver.impedance_floor"),
        (["integrator.rtol=-1"], "integrator.rtol"),
        (["integrator.atol=0"], "integrator.atol"),
        (["integrator.pcoeff=-0.1"], "integrator.pcoeff"),
        (["integrator.dt0=0"], "integrator.dt0"),
        (["integrator.max_steps=0"], "integrator.max_steps"),
        (["integrator.substeps=0"], "integrator.substeps"),
        (["integrator.checkpoints=0"], "integrator.checkpoints"),
        (["integrator.backsolve_atol=-1e-3"], "integrator.backsolve_atol"),
        (["collision.sharpness=0"], "collision.sharpness"),
        (["cfd.sharpness=0"], "cfd.sharpness"),
        (["cfd.solimp=[0, 0.01, 0, 1, 2]"], "cfd.solimp[2] (w_c)"),
        (["cfd.solimp=[1, 0.01, 0.1, 1, 2]"], "cfd.solimp[0]"),
        (["cfd.solimp=[0, -0.1, 0.1, 1, 2]"], "cfd.solimp[1]"),
        (["cfd.solimp=[0, 0.01, 0.1, 0, 2]"], "cfd.solimp[3] (midpoint)"),
        (["cfd.solimp=[0, 0.01, 0.1, 1, 0.5]"], "cfd.solimp[4] (power)"),
        (["cfd.solimp=[0, 0.01, 0.1, 1]"], "cfd.solimp"),
        (["collision.smooth=1"], "collision.smooth"),
        (["cfd.enabled=yes please"], "cfd.enabled"),
        (["integrator.rtol=small"], "integrator.rtol"),
        (["integrator.max_steps=10.5"], "integrator.max_steps"),
        (["integrator.solver=3"], "integrator.solver"),
    ],
)
def test_bad_override_names_field(overrides: list[str], field: str) -> None:
    with pytest.raises(ValueError, match=re.escape(field)):
        Config().override(*overrides)


def test_bad_values_in_constructors() -> None:
    with pytest.raises(ValueError, match=r"integrator\.solver.*tsit5, dopri5"):
        IntegratorConfig(solver="rk45")
    with pytest.raises(ValueError, match=r"integrator\.rtol.*> 0"):
        IntegratorConfig(rtol=-1)
    with pytest.raises(ValueError, match=r"integrator\.rtol.*expected float"):
        IntegratorConfig(rtol="1e-3")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"integrator\.atol.*expected float"):
        IntegratorConfig(atol=True)
    with pytest.raises(ValueError, match=r"integrator\.substeps.*expected int"):
        IntegratorConfig(substeps=2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"cfd\.enabled.*expected bool"):
        CFDConfig(enabled=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"cfd\.solimp\[2\] \(w_c\) must be > 0"):
        CFDConfig(solimp=(0.0, 0.01, 0.0, 1.0, 2.0))
    with pytest.raises(ValueError, match=r"cfd\.solimp.*sequence of 5 numbers"):
        CFDConfig(solimp=(0.0, 0.01, 0.1, 1.0, 2.0, 3.0))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"integrator must be of type IntegratorConfig"):
        Config(integrator={"rtol": 1e-3})  # type: ignore[arg-type]


def test_ints_accepted_for_floats() -> None:
    cfg = IntegratorConfig(rtol=1, dt0=2)
    assert cfg.rtol == 1.0 and isinstance(cfg.rtol, float)
    assert cfg.dt0 == 2.0 and isinstance(cfg.dt0, float)


@pytest.mark.parametrize(
    ("assignment", "named"),
    [
        ("integrator.rtol", "integrator.rtol"),
        ("integrator.rtl=1e-3", "integrator.rtl"),
        ("physics.gravity=0", "physics.gravity"),
    ],
)
def test_override_unknown_or_malformed(assignment: str, named: str) -> None:
    with pytest.raises(ValueError, match=re.escape(named)) as info:
        Config().override(assignment)
    assert "integrator.rtol, integrator.atol" in str(info.value)


def test_from_dict_unknown_names() -> None:
    with pytest.raises(ValueError, match=r"'physics'.*integrator, solver, collision, cfd"):
        Config.from_dict({"physics": {}})
    with pytest.raises(ValueError, match=r"collision\.smoth.*smooth, sharpness"):
        Config.from_dict({"collision": {"smoth": True}})


def test_load_preset_then_overrides(tmp_path: Path) -> None:
    path = tmp_path / "preset.yaml"
    path.write_text("integrator:\n  solver: heun\n  rtol: 1e-4\n")
    cfg = Config.load(path, ["integrator.rtol=1e-7"])
    assert cfg.integrator.solver == "heun"
    assert cfg.integrator.rtol == 1e-7
    assert Config.load() == Config()


def test_cli_arguments(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    add_cli_arguments(parser)
    args = parser.parse_args(["--set", "integrator.rtol=1e-3", "--set", "integrator.solver=dopri5"])
    cfg = config_from_args(args)
    assert cfg.integrator.rtol == 1e-3
    assert cfg.integrator.solver == "dopri5"
    assert config_from_args(parser.parse_args([])) == Config()

    path = tmp_path / "p.yaml"
    Config().override("solver.gradient=implicit").to_yaml(path)
    cfg = config_from_args(parser.parse_args(["--preset", str(path), "--set", "cfd.enabled=true"]))
    assert cfg.solver.gradient == "implicit" and cfg.cfd.enabled is True


def test_the_paper_setting_has_one_definition():
    """``Config.paper()`` is ``diffmjx/presets/paper.yaml`` over a base; the sysid presets name it."""
    import diffmjx
    from diffmjx.sysid import SysidConfig

    paper = diffmjx.Config.paper()
    ic, sc, cc = paper.integrator, paper.solver, paper.collision
    assert (ic.adjoint, ic.rtol, ic.atol, ic.solver) == ("checkpoint", 1e-5, 1e-5, "tsit5")
    assert (sc.impedance_floor, sc.min_iterations, sc.max_tolerance, sc.gradient) == (1e-4, 0, 1.0, "unroll")
    assert (cc.plane_box, cc.plane_cylinder, cc.box_box) == ("mjx", "mjx", "mjx")
    assert paper.cfd == diffmjx.Config().cfd
    base = diffmjx.Config().override("integrator.dtmax=0.001", "cfd.enabled=true")
    over = diffmjx.Config.paper(base)
    assert over.integrator.dtmax == 0.001 and over.cfd.enabled and over.integrator.rtol == 1e-5
    assert SysidConfig.load("paper").sim == SysidConfig.load("quick").sim == paper


def test_discretise_then_optimise_solves_its_forward_tighter():
    """``integrator.dto_tighten`` (default 10) divides rtol and atol of the forward solve for the
    checkpoint and forward adjoints; backsolve's and the paper's (1) are rtol itself; the Diffrax
    controller built from the config carries them; below 1 names the field."""
    tol = lambda *o: diffmjx.Config().override(*o).integrator.tolerances()
    assert tol() == (1e-7, 1e-7)  # backsolve
    assert tol("integrator.adjoint=checkpoint") == pytest.approx((1e-8, 1e-8))
    assert tol("integrator.adjoint=forward", "integrator.rtol=1e-6", "integrator.atol=1e-9") == pytest.approx((1e-7, 1e-10))
    assert tol("integrator.adjoint=checkpoint", "integrator.dto_tighten=1") == (1e-7, 1e-7)
    assert diffmjx.Config.paper().integrator.tolerances() == (1e-5, 1e-5)
    ckpt = diffmjx.Config().override("integrator.adjoint=checkpoint")
    pid = diffmjx.diffrax_method(ckpt).stepsize_controller
    assert (pid.rtol, pid.atol) == pytest.approx((1e-8, 1e-8))
    back = diffmjx.diffrax_method(diffmjx.Config())
    assert back.stepsize_controller.rtol == back.adjoint.kwargs["stepsize_controller"].rtol == 1e-7
    with pytest.raises(ValueError, match=r"integrator\.dto_tighten.*>= 1"):
        diffmjx.Config().override("integrator.dto_tighten=0.5")


def test_kink_step_auto_turns_kink_control_on_for_checkpoint_only():
    """``integrator.kink_step=auto`` (the default): min(10 rtol_f, 1e-7) s (rtol_f = rtol /
    dto_tighten) with the checkpoint and forward adjoints, off with backsolve; null is off, a number is that step; anything else names
    the field."""
    ic = diffmjx.Config().integrator
    assert ic.kink_step == "auto" and ic.kink_step_used() is None  # backsolve
    used = lambda *o: diffmjx.Config().override(*o).integrator.kink_step_used()
    assert used("integrator.adjoint=checkpoint") == pytest.approx(1e-7)  # capped at the default rtol
    assert used("integrator.adjoint=forward", "integrator.rtol=1e-9") == pytest.approx(1e-9)  # 10 x rtol / 10
    assert used("integrator.adjoint=checkpoint", "integrator.rtol=1e-5") == pytest.approx(1e-7)  # capped
    assert used("integrator.adjoint=checkpoint", "integrator.kink_step=null") is None
    assert used("integrator.adjoint=checkpoint", "integrator.kink_step=1e-7") == 1e-7
    assert used("integrator.adjoint=checkpoint", "integrator.step_control=constant") is None
    assert ic.kink_step_used(backsolve=False, rtol=1e-9) == pytest.approx(1e-8)  # Diffrax objects given
    assert diffmjx.Config.paper().integrator.kink_step_used() is None  # the paper had none
    for bad in ("fast", "-1e-7", "0"):
        with pytest.raises(ValueError, match=r"integrator\.kink_step.*auto"):
            diffmjx.Config().override(f"integrator.kink_step={bad}")
