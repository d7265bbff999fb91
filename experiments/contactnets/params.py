"""The fitted-parameter file (``docs/results/contactnets_params.json``): write, read and check it.

:func:`save_params_json` writes physical :class:`~experiments.contactnets.CubeParams` with the MuJoCo
options they were fitted with (:func:`model_options`) and the DiffMJX config's overrides
(:func:`~experiments.contactnets.sim_overrides`); :func:`load_params_json` reads one back as
:class:`FittedParams`, refusing a missing or unknown key or a bad value by name. The keys are
exactly :data:`PARAMS_JSON_KEYS`, the options' exactly :data:`OPTION_KEYS`.
"""

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np

from experiments.contactnets.model import CubeParams, check_params

__all__ = ["OPTION_KEYS", "PARAMS_JSON_KEYS", "FittedParams", "load_params_json", "model_options", "save_params_json"]

PARAMS_JSON_KEYS = ("side_length_m", "mass_kg", "solref", "solimp", "friction", "options", "config_overrides")
"""Keys of the fitted-parameter file, exactly these."""
OPTION_KEYS = ("timestep", "solver", "iterations", "ls_iterations", "tolerance", "impratio", "cone")
"""Keys of its ``options``: the MuJoCo options the parameters were fitted with."""
_SOLVER_NAMES = ("pgs", "cg", "newton")  # mjtSolver order
_CONE_NAMES = ("pyramidal", "elliptic")  # mjtCone order


class FittedParams(NamedTuple):
    """A fitted-parameter file's content."""

    params: CubeParams
    options: dict
    config_overrides: dict | list


def model_options(m) -> dict[str, Any]:
    """The MuJoCo options of ``m`` (a ``mujoco.MjModel`` or an ``mjx.Model``) as the file stores them."""
    o = m.opt
    return {
        "timestep": float(o.timestep),
        "solver": _SOLVER_NAMES[int(o.solver)],
        "iterations": int(o.iterations),
        "ls_iterations": int(o.ls_iterations),
        "tolerance": float(o.tolerance),
        "impratio": float(o.impratio),
        "cone": _CONE_NAMES[int(o.cone)],
    }


def _number(key: str, v: Any, *, integer: bool = False) -> None:
    ok = isinstance(v, int) if integer else isinstance(v, (int, float))
    if not ok or isinstance(v, bool) or not math.isfinite(v):
        raise ValueError(f"{key}={v!r} is invalid; expected {'an integer' if integer else 'a finite number'}")


def _exact_keys(d: Mapping, keys, where: str, prefix: str, owner: str) -> None:
    """Refuse a missing or an unknown key of ``d`` (named ``prefix + key``)."""
    for key in keys:
        if key not in d:
            raise ValueError(f"{where}: missing key {prefix + key!r}")
    extra = [k for k in d if k not in keys]
    if extra:
        raise ValueError(f"{where}: unknown key {prefix + extra[0]!r}; {owner} exactly {', '.join(keys)}")


def _check_params_dict(d: Any, where: str) -> FittedParams:
    if not isinstance(d, Mapping):
        raise ValueError(f"{where}: expected a JSON object with keys {', '.join(PARAMS_JSON_KEYS)}")
    _exact_keys(d, PARAMS_JSON_KEYS, where, "", "the keys are")
    for key in ("side_length_m", "mass_kg", "friction"):
        _number(key, d[key])
    for key, n in (("solref", 2), ("solimp", 5)):
        v = d[key]
        if not isinstance(v, list) or len(v) != n:
            raise ValueError(f"{key}={v!r} is invalid; expected a list of {n} numbers")
        for i, x in enumerate(v):
            _number(f"{key}[{i}]", x)
    options = d["options"]
    if not isinstance(options, Mapping):
        raise ValueError(f"options={options!r} is invalid; expected an object with keys {', '.join(OPTION_KEYS)}")
    _exact_keys(options, OPTION_KEYS, where, "options.", "options has")
    for key, positive in (("timestep", True), ("tolerance", False), ("impratio", True)):
        _number(f"options.{key}", options[key])
        if options[key] < 0 or (positive and options[key] == 0):
            raise ValueError(f"options.{key}={options[key]!r} must be {'> 0' if positive else '>= 0'}")
    for key in ("iterations", "ls_iterations"):
        _number(f"options.{key}", options[key], integer=True)
        if options[key] < 1:
            raise ValueError(f"options.{key}={options[key]!r} must be >= 1")
    for key, names in (("solver", _SOLVER_NAMES), ("cone", _CONE_NAMES)):
        if options[key] not in names:
            raise ValueError(f"options.{key}={options[key]!r} is not allowed; choose one of: {', '.join(names)}")
    overrides = d["config_overrides"]
    if not isinstance(overrides, (Mapping, list)):
        raise ValueError(f"config_overrides={overrides!r} is invalid; expected an object or a list")
    params = CubeParams(
        side_length=float(d["side_length_m"]),
        mass=float(d["mass_kg"]),
        solref=np.asarray(d["solref"], np.float64),
        solimp=np.asarray(d["solimp"], np.float64),
        friction=float(d["friction"]),
    )
    check_params(params)
    return FittedParams(params, dict(options), dict(overrides) if isinstance(overrides, Mapping) else list(overrides))


def save_params_json(path: str | Path, params: CubeParams, options: Mapping, config_overrides: Mapping | list) -> dict:
    """Write fitted parameters with the options and DiffMJX overrides they were fitted with.

    Arguments:
        path: the ``.json`` file (e.g. ``docs/results/contactnets_params.json``).
        params: physical :class:`~experiments.contactnets.CubeParams`.
        options: :data:`OPTION_KEYS` (see :func:`model_options`).
        config_overrides: the DiffMJX config's overrides (``{"section.field": value}``, see
            :func:`sim_overrides`, or a list of ``"section.field=value"`` strings).

    Returns:
        The written dict: keys exactly :data:`PARAMS_JSON_KEYS`.

    Raises:
        ValueError: a value that :func:`load_params_json` would refuse (nothing is written).
    """
    p = jax.tree.map(lambda x: np.asarray(x, np.float64), params)
    d = {
        "side_length_m": float(p.side_length),
        "mass_kg": float(p.mass),
        "solref": [float(x) for x in p.solref],
        "solimp": [float(x) for x in p.solimp],
        "friction": float(p.friction),
        "options": dict(options),
        "config_overrides": dict(config_overrides) if isinstance(config_overrides, Mapping) else config_overrides,
    }
    _check_params_dict(d, str(path))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(d, indent=2) + "\n")
    tmp.replace(path)
    return d


def load_params_json(path: str | Path) -> FittedParams:
    """Read and check a fitted-parameter file.

    Returns:
        :class:`FittedParams` ``(params, options, config_overrides)``.

    Raises:
        ValueError: a missing or unknown key, or a bad value, naming it (``options.solver``, ``solimp[4]``, ...).
    """
    path = Path(path)
    try:
        d = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON ({e})") from e
    return _check_params_dict(d, str(path))
