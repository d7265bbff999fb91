"""One registry per choice: the names a config field accepts, each with the properties the library reads.

A config field whose value picks an implementation (``integrator.solver``, ``integrator.adjoint``,
``planner.kind``, ``fit.method``, ``collision.plane_box``, ``collision.plane_cylinder``, ``collision.box_box``,
``collision.capsule_capsule``, ``collision.capsule_box``)
takes its choices from a :class:`Registry`, and every module that needs to know
something about the choice (is the solver one of MJX's fixed-step integrators? can ``jax.jacfwd``
differentiate the gradient mode?) asks the registry entry, never the name. Adding a choice is one
class (the implementation) and one :meth:`Registry.register` call; validation, ``linearize``,
system identification and the docs' tables follow.

The registries live at the bottom of the layers (the config imports them); the modules that implement
the entries register them (:mod:`diffmjx.integration.method` the solvers and gradient modes, :mod:`diffmjx.mpc.planners`
the planner kinds, :mod:`diffmjx.sysid.identify` the fit methods, :mod:`diffmjx.physics.collision.driver` the
collision rules), and ``import diffmjx`` imports those before any config is checked.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

__all__ = [
    "BOX_BOX_RULES",
    "CAPSULE_BOX_RULES",
    "CAPSULE_CAPSULE_RULES",
    "FIT_METHODS",
    "GRADIENT_MODES",
    "PLANE_BOX_RULES",
    "PLANE_CYLINDER_RULES",
    "PLANNERS",
    "SOLVERS",
    "CollisionRuleEntry",
    "GradientModeEntry",
    "Registry",
    "SolverEntry",
]

T = TypeVar("T")


class Registry(Mapping[str, T], Generic[T]):
    """Name -> entry, in registration order; a config field's choices.

    Arguments:
        field: the config field whose choices these are (``integrator.solver``), for messages.
    """

    def __init__(self, field: str):
        self.field = field
        self._entries: dict[str, T] = {}

    def register(self, name: str, entry: T) -> T:
        """Add ``entry`` under ``name`` and return it.

        Raises:
            ValueError: ``name`` is registered already (names are never silently replaced).
        """
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.field}: a registry name must be a non-empty string, got {name!r}")
        if name in self._entries:
            raise ValueError(f"{self.field}={name!r} is registered already; unregister it first or pick another name")
        self._entries[name] = entry
        return entry

    def unregister(self, name: str) -> T:
        """Remove ``name`` and return its entry (a test's or a user's experiment undone)."""
        entry = self[name]  # an unknown name raises, naming the registered ones
        del self._entries[name]
        return entry

    def where(self, **properties: Any) -> tuple[str, ...]:
        """The names whose entries have every one of ``properties`` (attribute = value)."""
        return tuple(n for n, e in self._entries.items() if all(getattr(e, k) == v for k, v in properties.items()))

    def __getitem__(self, name: str) -> T:
        try:
            return self._entries[name]
        except KeyError:
            raise KeyError(f"{self.field}={name!r} is not registered; choose one of: {', '.join(self)}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.field}: {', '.join(self)})"


@dataclasses.dataclass(frozen=True)
class SolverEntry:
    """An ``integrator.solver`` choice.

    Attributes:
        build: ``(cfg) -> solver``: a Diffrax solver (``cfg`` unused by Diffrax's tableaus), or
            (``fixed_step``) an object with ``period(m, d, layout, dt_hint)`` and ``cfg`` bound,
            like :class:`diffmjx.integration.fixed_step.FixedStep`.
        fixed_step: one of MJX's fixed-step integrators: no Diffrax objects, no adjoint; its
            derivatives are JAX's own through the steps, in either mode.
        embedded: has an embedded error estimate, so an adaptive step-size controller can drive it.
        runge_kutta: an explicit Runge–Kutta tableau whose steps' stages DiffMJX can read (the
            saltation term of :mod:`diffmjx.integration.saltation` in the discretised modes).
    """

    build: Callable[[], Any]
    fixed_step: bool = False
    embedded: bool = True
    runge_kutta: bool = False


@dataclasses.dataclass(frozen=True)
class GradientModeEntry:
    """An ``integrator.adjoint`` choice: how a period's solve is differentiated.

    Attributes:
        build: ``(cfg, solver, stepsize_controller) -> diffrax.AbstractAdjoint`` (``stepsize_controller``
            None: the mode's own from ``cfg``).
        continuous: optimise-then-discretise (the continuous derivative equations): the forward solve
            runs at ``rtol`` itself, without kink control.
        forward: ``jax.jacfwd`` can differentiate it (``linearize``, system identification's
            Jacobians use it as it is; otherwise they switch to ``forward``).
        reverse: ``jax.grad`` can differentiate it (system identification's Adam takes a forward-only
            mode's gradient by ``jax.jacfwd``).
        saltation: where the mode carries the force jump at a touchdown (``integrator.saltation``,
            with a Runge–Kutta solver): ``step`` (each step's derivative), ``adjoint`` (the adjoint
            solve's steps) or ``none``.
    """

    build: Callable[..., Any]
    continuous: bool
    forward: bool
    reverse: bool = True
    saltation: str = "none"


@dataclasses.dataclass(frozen=True)
class CollisionRuleEntry:
    """A ``collision.plane_box``, ``collision.plane_cylinder``, ``collision.box_box``,
    ``collision.capsule_capsule`` or ``collision.capsule_box`` choice: the collision function of that geom-type pair.

    Attributes:
        build: ``(sharpness, apart) -> collider``: an MJX collider (a function with MJX's collision
            signature and its contact count ``ncon``, as ``mujoco.mjx``'s ``primitive_collider`` or
            ``convex_collider`` decorators make them), or None to keep the pair's function of the
            rest of the table (MJX's own, or its smoothed blend under ``collision.smooth``).
            ``sharpness`` is ``collision.sharpness`` under ``collision.smooth`` and None without;
            ``apart`` asks for the contacts that contacts from distance build their rows from
            (the pair's true distance where the bodies are apart), in the forward's contact layout.
    """

    build: Callable[..., Any]


SOLVERS: Registry[SolverEntry] = Registry("integrator.solver")
"""``integrator.solver`` -> :class:`SolverEntry` (registered by :mod:`diffmjx.integration.method`)."""

GRADIENT_MODES: Registry[GradientModeEntry] = Registry("integrator.adjoint")
"""``integrator.adjoint`` -> :class:`GradientModeEntry` (registered by :mod:`diffmjx.integration.method`)."""

PLANNERS: Registry[type] = Registry("planner.kind")
"""``planner.kind`` -> its planner class (registered by :mod:`diffmjx.mpc.planners`; a class like
:class:`diffmjx.mpc.GradientMethod`, with ``init``, ``step`` and ``finish``)."""

FIT_METHODS: Registry[type] = Registry("fit.method")
"""``fit.method`` -> the runner class :func:`diffmjx.sysid.identify` drives (registered by
:mod:`diffmjx.sysid.identify`: ``lm``, ``adam``)."""

PLANE_BOX_RULES: Registry[CollisionRuleEntry] = Registry("collision.plane_box")
"""``collision.plane_box`` -> :class:`CollisionRuleEntry` (registered by :mod:`diffmjx.physics.collision.driver`)."""

PLANE_CYLINDER_RULES: Registry[CollisionRuleEntry] = Registry("collision.plane_cylinder")
"""``collision.plane_cylinder`` -> :class:`CollisionRuleEntry` (registered by :mod:`diffmjx.physics.collision.driver`)."""

BOX_BOX_RULES: Registry[CollisionRuleEntry] = Registry("collision.box_box")
"""``collision.box_box`` -> :class:`CollisionRuleEntry` (registered by :mod:`diffmjx.physics.collision.driver`)."""

CAPSULE_CAPSULE_RULES: Registry[CollisionRuleEntry] = Registry("collision.capsule_capsule")
"""``collision.capsule_capsule`` -> :class:`CollisionRuleEntry` (registered by :mod:`diffmjx.physics.collision.driver`)."""

CAPSULE_BOX_RULES: Registry[CollisionRuleEntry] = Registry("collision.capsule_box")
"""``collision.capsule_box`` -> :class:`CollisionRuleEntry` (registered by :mod:`diffmjx.physics.collision.driver`)."""
