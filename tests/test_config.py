"""Tests of diffmjx.config: defaults, validation, YAML, overrides and CLI flags."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
import yaml

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


def test_override_takes_a_list_as_well_and_names_a_non_string() -> None:
    sets = ["integrator.rtol=1e-6", "integrator.atol=1e-6"]
    assert Config().override(sets) == Config().override(*sets)
    assert Config().override(sets).integrator.atol == 1e-6
    with pytest.raises(TypeError, match="section.field=value"):
        Config().override(["integrator.rtol", 1e-6])


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
    """``Config.paper()`` is ``diffmjx/presets/paper.yaml`` over a base; the ContactNets study's
    presets (``experiments/configs/sysid_*.yaml``) name it rather than copy it."""
    import diffmjx

    paper = diffmjx.Config.paper()
    ic, sc, cc = paper.integrator, paper.solver, paper.collision
    assert (ic.adjoint, ic.rtol, ic.atol, ic.solver) == ("checkpoint", 1e-5, 1e-5, "tsit5")
    assert (sc.impedance_floor, sc.min_iterations, sc.max_tolerance, sc.gradient) == (1e-4, 0, 1.0, "unroll")
    assert (cc.plane_box, cc.plane_cylinder, cc.box_box, cc.capsule_capsule, cc.capsule_box) == ("mjx",) * 5
    assert paper.cfd == diffmjx.Config().cfd
    base = diffmjx.Config().override("integrator.dtmax=0.001", "cfd.enabled=true")
    over = diffmjx.Config.paper(base)
    assert over.integrator.dtmax == 0.001 and over.cfd.enabled and over.integrator.rtol == 1e-5
    study = Path(__file__).resolve().parents[1] / "experiments" / "configs"
    for name in ("sysid_paper.yaml", "sysid_quick.yaml"):
        assert yaml.safe_load((study / name).read_text())["sim"] == "paper"
    assert diffmjx.Config.load("paper") == paper


def test_discretise_then_optimise_solves_its_forward_tighter():
    """``integrator.dto_tighten`` (default 10) divides rtol and atol of the forward solve for the
    checkpoint and forward adjoints; backsolve's and the paper's (1) are rtol itself; the Diffrax
    controller built from the config carries them; below 1 names the field."""
    tol = lambda *o: diffmjx.Config().override(*o).integrator.tolerances()
    assert tol() == (1e-7, 1e-7)  # backsolve
    assert tol("integrator.adjoint=checkpoint") == pytest.approx((1e-8, 1e-8))
    assert tol("integrator.adjoint=forward", "integrator.rtol=1e-6", "integrator.atol=1e-9") == pytest.approx(
        (1e-7, 1e-10)
    )
    assert tol("integrator.adjoint=checkpoint", "integrator.dto_tighten=1") == (1e-7, 1e-7)
    assert diffmjx.Config.paper().integrator.tolerances() == (1e-5, 1e-5)
    ckpt = diffmjx.Config().override("integrator.adjoint=checkpoint")
    pid = diffmjx.diffrax_method(ckpt).stepsize_controller
    assert (pid.rtol, pid.atol) == pytest.approx((1e-8, 1e-8))
    back = diffmjx.diffrax_method(diffmjx.Config())
    assert back.stepsize_controller.rtol == back.adjoint.stepsize_controller.rtol == 1e-7
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


def test_kink_step_auto_in_backsolves_backward_solve():
    """With backsolve, kink control acts in the backward solve only: ``auto`` is min(3 rtol_b,
    3e-8) s, rtol_b the backward solve's (``backsolve_rtol``, else ``rtol``); null is off, a number is
    that step; the forward solve has none."""
    step = lambda *o: diffmjx.Config().override(*o).integrator.backward_kink_step()
    assert step() == pytest.approx(3e-8)  # the defaults: rtol 1e-7, capped
    assert step("integrator.backsolve_rtol=1e-9") == pytest.approx(3e-9)
    assert step("integrator.rtol=1e-9", "integrator.atol=1e-9") == pytest.approx(3e-9)
    assert step("integrator.kink_step=null") is None and step("integrator.kink_step=1e-7") == 1e-7
    assert step("integrator.step_control=constant") is None
    assert diffmjx.Config().integrator.backward_kink_step(rtol=1e-10) == pytest.approx(3e-10)  # a controller given
    assert diffmjx.Config.paper().integrator.backward_kink_step() is None


def _preset_classes() -> dict[str, type]:
    """The configs with presets, by kind (imported here: the planner and sysid sit above the core)."""
    from diffmjx.mpc import PlannerConfig
    from diffmjx.sysid import FitConfig

    return {"config": Config, "planner": PlannerConfig, "fit": FitConfig}


SHIPPED_PRESETS = {
    "config": ("cfd_billiard", "cfd_mpc", "cfd_sysid", "default", "paper"),
    "planner": ("paper", "quick"),
    "fit": ("default",),
}


@pytest.mark.parametrize(("kind", "name"), [(k, n) for k, names in SHIPPED_PRESETS.items() for n in names])
def test_every_config_loads_its_presets_by_name_and_by_path(kind: str, name: str) -> None:
    """One mechanism (``diffmjx.config.Preset``): a shipped preset by name, by path as text or as a
    ``Path``, and through ``from_yaml`` gives equal configs, which round-trip through YAML."""
    from diffmjx.config import PRESETS, preset_names, preset_path

    cls = _preset_classes()[kind]
    assert preset_names(kind) == SHIPPED_PRESETS[kind]
    path = PRESETS / (f"{name}.yaml" if kind == "config" else f"{kind}_{name}.yaml")
    assert preset_path(name, kind) == path
    cfg = cls.load(name)
    assert cls.load(path) == cls.load(str(path)) == cls.from_yaml(path) == cfg
    assert cls.from_dict(yaml.safe_load(cfg.to_yaml())) == cfg


def test_config_presets_by_name() -> None:
    """``Config.load`` takes a shipped preset's name as the others do; the CLI's ``--preset`` too."""
    assert Config.load("default") == Config()
    assert Config.load("paper") == Config.paper()
    assert Config.load("cfd_mpc", ["cfd.sharpness=500"]).cfd.sharpness == 500.0
    with pytest.raises(
        ValueError, match="unknown config preset 'fast'; choose one of: cfd_billiard, .*paper or a path"
    ):
        Config.load("fast")
    parser = argparse.ArgumentParser()
    add_cli_arguments(parser)
    assert config_from_args(parser.parse_args(["--preset", "paper"])) == Config.paper()


@pytest.mark.parametrize(
    ("kind", "text", "field", "allowed"),
    [
        ("config", "integrator:\n  rtl: 1.0e-3\n", "integrator.rtl", "integrator has: solver, adjoint"),
        ("config", "physics:\n  gravity: 0\n", "'physics'", "integrator, solver, collision, cfd, muscle"),
        ("planner", "planner:\n  rate: 0.1\n", "planner.rate", "planner has: kind, cfd, horizon"),
        ("planner", "rate: 0.1\n", "planner.rate", "planner has: kind, cfd, horizon"),
        ("planner", "planner:\n  horizon: 8\nmpc:\n  x: 1\n", "'mpc'", "choose one of: planner"),
        ("fit", "stepz: 3\n", "fit.stepz", "fit has: method, horizon"),
        ("fit", "fit:\n  stepz: 3\n", "fit.stepz", "fit has: method, horizon"),
    ],
    ids=lambda v: v.split(":")[0].replace("\n", "") if isinstance(v, str) else None,
)
def test_every_config_refuses_unknown_fields_in_a_file(
    tmp_path: Path, kind: str, text: str, field: str, allowed: str
) -> None:
    """An unknown section or field in a preset file raises, naming it, the allowed ones and the file."""
    cls = _preset_classes()[kind]
    path = tmp_path / "preset.yaml"
    path.write_text(text)
    for read in (cls.from_yaml, cls.load):
        with pytest.raises(ValueError, match=re.escape(field)) as info:
            read(path)
        assert allowed in str(info.value) and str(path) in str(info.value)


@pytest.mark.parametrize("kind", list(SHIPPED_PRESETS))
def test_every_config_reads_an_empty_file_as_defaults_and_lists_its_presets(tmp_path: Path, kind: str) -> None:
    cls = _preset_classes()[kind]
    path = tmp_path / "empty.yaml"
    path.write_text("")
    assert cls.from_yaml(path) == cls.load(path) == cls.load() == cls()
    with pytest.raises(
        ValueError, match=f"unknown {kind} preset 'fast'; choose one of: {', '.join(SHIPPED_PRESETS[kind])}"
    ):
        cls.load("fast")


def test_paper_refuses_unknown_fields(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``Config.paper()`` reads its preset as every preset is read: an unknown field raises."""
    import diffmjx.config

    path = tmp_path / "paper.yaml"
    path.write_text("integrator:\n  adjoint: checkpoint\n  rtl: 1.0e-5\n")
    monkeypatch.setattr(diffmjx.config, "PAPER_PRESET", path)
    for base in (None, Config().override("cfd.enabled=true")):
        with pytest.raises(ValueError, match=r"unknown config field integrator\.rtl; integrator has: solver") as info:
            Config.paper(base)
        assert str(path) in str(info.value)
    path.write_text("integrator:\n  adjoint: checkpoint\nphysics: {}\n")
    with pytest.raises(ValueError, match=r"unknown config section 'physics'"):
        Config.paper()
    path.write_text("integrator:\n  adjoint: checkpoint\n")  # a good one is laid over the base
    over = Config.paper(Config().override("cfd.enabled=true", "integrator.rtol=1e-6"))
    assert (over.integrator.adjoint, over.integrator.rtol, over.cfd.enabled) == ("checkpoint", 1e-6, True)
