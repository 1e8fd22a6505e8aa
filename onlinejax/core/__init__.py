"""The core layer: the learner protocol and what every other layer builds on.

``base`` re-exports the protocol (``learner``, ``cores``, ``factory_call``, ``tree_summary``), the
predictive distributions (``distributions``, ``special``) and the argument checks (``checks``);
``student_mixture``, ``linalg``, ``window`` and ``batching`` are shared numerics; ``schedule`` (the
tunes' plan), ``registry`` (the grid runner's learner configurations), ``stateful`` and ``checkpoint``
import only the core. Nothing here imports the learners, the wrappers, the evaluation or the runner.
"""

__all__ = ["base", "checkpoint", "registry", "schedule", "stateful", "student_mixture"]
