"""Fitting the plan chooser to a machine: time both plans on synthetic scenarios (:mod:`.sweep`,
with the side-by-side timing of :mod:`.runs`) and re-train the cost model (:func:`calibrate`).

It times the estimators of :mod:`ilargi.models`, so it sits above them; the chooser itself only
reads the trained cost-model files. ``python -m ilargi.calibration sweep|train|calibrate`` runs the same
steps from the shell.
"""

from .calibrate import calibrate

__all__ = ["calibrate"]
