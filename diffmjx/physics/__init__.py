"""The physics: what one evaluation of MJX's forward dynamics is made of, as DiffMJX differentiates it.

Bottom up: MuJoCo's impedance spline (:mod:`.impedance`) and the value-with-derivative rule
(:mod:`.rules`), the constraint rows and their solve (:mod:`.constraint`, :mod:`.solver`),
kinematics, the bodies' inertias and motion axes and the passive forces with a cheap derivative
(:mod:`.smooth`), tendons and the joint manifold (:mod:`.tendon`, :mod:`.manifold`), derived model constants (:mod:`.constants`), the smoothed collision stage
(:mod:`.collision`), up-front model checks (:mod:`.checks`), contacts from distance (:mod:`.cfd`)
and the vector field that ties them together (:mod:`.dynamics`). Nothing here knows about time
integration; :mod:`diffmjx.integration` sits on top.
"""

__all__: list[str] = []  # the modules are imported by their paths; the API reference lists each
