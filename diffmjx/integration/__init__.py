"""Time integration over the physics: one control period at a time, in Diffrax's shape.

Bottom up: one period's Diffrax term and step-size controller (:mod:`.term`, :mod:`.stepsize`),
the gradient modes of a period's solve (:mod:`.adjoints`), the adaptive period (:mod:`.period`)
and MJX's fixed-step integrators (:mod:`.fixed_step`), the config turned into an integration
method (:mod:`.method`), and ``step`` / ``rollout`` (:mod:`.integrate`). The tools
(:mod:`diffmjx.jacobians`, :mod:`diffmjx.mpc`, :mod:`diffmjx.sysid`) sit on top.
"""

__all__: list[str] = []  # the modules are imported by their paths; the API reference lists each
