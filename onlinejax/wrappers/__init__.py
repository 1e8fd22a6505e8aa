"""The wrappers: learners built around other learners, over the core and the learners.

``changepoint`` (BOCPD), ``detectors`` and ``adaptive`` (a state machine that re-tunes on drift),
``standardize`` (online-standardised inputs and targets, with ``scaler``'s running statistics),
``calibration`` (conformal and quantile recalibration), ``combination`` (BMA, EWA, fixed share,
stacking), ``baseline`` (climatology) and ``hedge`` (a learner hedged with the climatology).
"""

__all__ = ["adaptive", "adaptive_state", "baseline", "calibration", "changepoint", "combination", "detectors", "hedge",
           "standardize"]
