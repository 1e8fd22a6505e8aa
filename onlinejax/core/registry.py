"""Named learner configurations: :class:`GridLearner` and the registry that maps names to them.

A configuration is a name, a family (for summaries) and ``make(n_features) ->
Learner``, plus how the grid runner should batch it. The registry is a plain
dict filled *explicitly*: :func:`onlinejax.zoo.register_all` registers the
thesis's and the recommended configurations; users add their own with
:func:`register_learner`. Nothing is registered on import, and this module
imports nothing above the core (the evaluation and the zoo import it).
"""
from __future__ import annotations

from typing import Callable, Mapping, NamedTuple, Sequence

from .base import Learner, check_int, check_record

__all__ = [
    "GridLearner",
    "GridLearnerOptions",
    "REGISTRY",
    "grid_learner",
    "register_learner",
    "registered_learners",
]


class GridLearner(NamedTuple):
    """A learner configuration for the grid runner (:func:`onlinejax.runner.run_grid`).

    Attributes:
      name: row label, e.g. ``"GPRegressionOLSMean_WS64"``.
      family: group for summaries, e.g. ``"GPRegression"``.
      make: ``make(n_features) -> Learner`` (called once per input dimension).
      score_from: items before this index are not scored (a batch baseline's
        training set; see :func:`onlinejax.wrappers.baseline.train_once`).
      hyper: optional ``{init_kwarg: [H] values}``; each value becomes its own
        row (``name[kwarg=value]``, or ``labels[h]``), vmapped inside the same program.
      labels: optional row labels for the ``H`` values of ``hyper``.
      init_kwargs: optional ``{init_kwarg: value}`` this configuration's
        state is built with (``learner.init(**init_kwargs)``).
      program: optional key: configurations with the same ``program``,
        ``family`` and ``score_from`` must build the same learner up to
        their ``init_kwargs`` (the same keys for each); the grid runner then
        compiles one program per stream shape for all of them and vmaps over
        their ``init_kwargs`` (e.g. the thesis's three GP mean functions at
        one window size). Their compile time is reported under the first one's name.
      vmap_bytes: optional override of the grid runner's default
        ``vmap_bytes`` for this configuration on CPU devices (``1``: one
        (stream, hyperparameter) pair at a time). Under ``vmap`` every
        stream of a group pays for a costly step (a GP's ``O(W²)``
        learning) whenever any stream of the group takes it, so on a CPU
        learners with such steps run faster unbatched
        (``benchmarks/grid.py``). Accelerators ignore it (there every stream
        of a chunk is vmapped, or ``run_grid``'s ``layout.vmap_bytes`` applies
        when given).
      description: one line for people (``python -m onlinejax --list-learners``).
    """

    name: str
    family: str
    make: Callable[[int], Learner]
    score_from: int = 0
    hyper: Mapping[str, Sequence] | None = None
    labels: Sequence[str] | None = None
    init_kwargs: Mapping[str, float] | None = None
    program: str | None = None
    vmap_bytes: int | None = None
    description: str = ""


class GridLearnerOptions(NamedTuple):
    """How the grid runner scores and batches one configuration (:func:`grid_learner`'s ``options=``).

    An immutable, hashable record; the defaults score every item and batch as the runner decides.
    The fields mean what :class:`GridLearner`'s of the same names do.

    Attributes:
      score_from: items before this index are not scored (an int >= 0, default 0; a batch
        baseline's training set, :func:`onlinejax.wrappers.baseline.train_once`).
      program: ``None`` (default) or a key shared by configurations that build the same learner up to
        their ``init_kwargs``: the grid runner compiles one program per stream shape for all of them.
      vmap_bytes: ``None`` (default: the runner's) or an int >= 1 overriding the grid runner's
        ``vmap_bytes`` for this configuration on CPU devices (``1``: one pair at a time).
    """

    score_from: int = 0
    program: str | None = None
    vmap_bytes: int | None = None

    def checked(self, name: str = "options") -> "GridLearnerOptions":
        """The record with its values checked (``ValueError`` naming the field)."""
        return GridLearnerOptions(check_int(self.score_from, f"{name}.score_from", 0),
                                  None if self.program is None else str(self.program),
                                  None if self.vmap_bytes is None else check_int(self.vmap_bytes,
                                                                                 f"{name}.vmap_bytes", 1))


#: Registered configurations, ``name -> GridLearner``.
REGISTRY: dict[str, GridLearner] = {}


def grid_learner(name: str, family: str, make: Callable[[int], Learner], *,
                 hyper: Mapping[str, Sequence] | None = None, init_kwargs: Mapping[str, float] | None = None,
                 options: GridLearnerOptions = GridLearnerOptions(), description: str = "") -> GridLearner:
    """A checked :class:`GridLearner` (see its attributes); not registered.

    Args:
      name, family, make: as :class:`GridLearner`'s.
      hyper: optional ``{init keyword: [H] values}``, one row each, vmapped in one program.
      init_kwargs: optional ``{init keyword: value}`` the configuration's state is built with.
      options: :class:`GridLearnerOptions`: ``score_from``, ``program``, ``vmap_bytes``.
      description: one line for people (``python -m onlinejax --list-learners``).
    Raises:
      TypeError: ``make`` is not callable.
      ValueError: both ``hyper`` and ``init_kwargs``/``options.program`` are given, or
        ``options.score_from``/``options.vmap_bytes`` are not integers in range.
    """
    if not callable(make):
        raise TypeError(f"make: expected a callable n_features -> Learner, got {type(make).__name__}")
    score_from, program, vmap_bytes = check_record(options, GridLearnerOptions, "options").checked("options")
    if hyper is not None and (init_kwargs is not None or program is not None):
        raise ValueError("register_learner: give either hyper or init_kwargs/options.program, not both")
    return GridLearner(str(name), str(family), make, score_from, dict(hyper) if hyper is not None else None, None,
                       dict(init_kwargs) if init_kwargs is not None else None, program, vmap_bytes, str(description))


def register(gl: GridLearner) -> GridLearner:
    """Add ``gl`` to :data:`REGISTRY` (replacing one of the same name) and return it."""
    if not isinstance(gl, GridLearner):
        raise TypeError(f"gl: expected a GridLearner, got {type(gl).__name__}")
    REGISTRY[gl.name] = gl
    return gl


def register_learner(name: str, family: str, make: Callable[[int], Learner], **options) -> GridLearner:
    """Build a configuration with :func:`grid_learner` (same arguments), register it and return it."""
    return register(grid_learner(name, family, make, **options))


def registered_learners(names: Sequence[str] | str | None = None) -> list[GridLearner]:
    """Registered configurations: all, or those named, or those whose name or family contains a substring.

    Args:
      names: ``None`` (all), a list of exact names, or a comma-separated
        string of substrings (``"GP,Kernel"``).
    Raises:
      ValueError: for a name or substring that matches nothing (including
        when nothing is registered yet: call :func:`onlinejax.zoo.register_all`).
    """
    if not REGISTRY:
        raise ValueError("learners: the registry is empty; call onlinejax.zoo.register_all() "
                         "or register_learner(...) first")
    if names is None:
        return list(REGISTRY.values())
    if isinstance(names, str):
        out = []
        for part in (p.strip() for p in names.split(",") if p.strip()):
            hit = [g for g in REGISTRY.values() if part.lower() in g.name.lower() or part.lower() == g.family.lower()]
            if not hit:
                raise ValueError(f"learners: {part!r} matches no registered learner (e.g. {next(iter(REGISTRY))})")
            out += [g for g in hit if g not in out]
        return out
    missing = [n for n in names if n not in REGISTRY]
    if missing:
        raise ValueError(f"learners: unknown {missing}")
    return [REGISTRY[n] for n in names]
