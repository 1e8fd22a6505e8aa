"""The grid runner: every registered learner on every stream, in compiled batches (:func:`run_grid`), and
combinations replayed from the members' kept predictions (:func:`replay_combination`).

``grid`` runs the loop; ``grid_inputs`` and ``grid_plan`` prepare the streams and the compiled programs,
``grid_result`` holds the table and ``grid_replay`` the combinations. The runner builds on the evaluation
(streams, metrics, options) and the learner registry (:mod:`onlinejax.core.registry`); nothing below imports it.
"""
from .grid import GridResult, replay_combination, run_grid

__all__ = ["run_grid", "GridResult", "replay_combination", "grid"]
