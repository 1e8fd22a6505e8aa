"""One learner over many streams and a batch of hyperparameters, in one flat ``vmap``.

This is the layer that :func:`~onlinejax.runner.run_grid`, the command
line's drift run, the notebooks and the README call: ``S`` streams ``X: [S,
n, d]``, ``Y: [S, n]`` times ``H`` hyperparameter settings become ``S·H``
independent (stream, setting) pairs under a *single* ``vmap`` of
:func:`~onlinejax.evaluation.progressive_validation` (or its delayed form),
scored by :func:`stream_scores`.

Why one flat ``vmap`` and not ``vmap(vmap(...))``: the learners' rare
expensive branches (a refit, a hyperparameter tune) go through
:func:`onlinejax.core.batching.cond_if_any`, which runs the branch only when some
pair in the batch needs it. Under a nested ``vmap`` the outer one batches
those ``while`` loops, so every pair pays for every other pair's tune.
"""
from __future__ import annotations

import functools
import threading
import time
from concurrent.futures import Future
from typing import Mapping, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..core.checks import check_record
from ..core.base import Learner, Prediction, default_float_dtype, is_concrete, tree_repr
from ..wrappers.hedge import inner_prediction
from ..core.schedule import TunePlan, with_tune_plan
from .delayed import delayed_progressive_validation, schedule_from_delays
from .metrics import log_score_skill, prequential, score
from .progressive import missing_items, progressive_validation
from .options import ItemWeights, StreamsOptions, checked_record

__all__ = [
    "StreamsResult",
    "compiled_scores",
    "evaluate_streams",
    "predictions_program",
    "scores_program",
    "streams_program",
]


class StreamsResult(NamedTuple):
    """What :func:`evaluate_streams` returns.

    Attributes:
      metrics: ``{name: [H, S]}`` (``[S]`` without ``hyper``): the prequential
        metrics of :mod:`~onlinejax.evaluation.metrics` over the weighted
        items, the log-score ``skill`` against the Student-t climatology
        (``mlpd_clim``), the same over ``weights.stable`` (``*_st``), and
        ``n_skipped``: items with a missing value, neither learned nor scored.
      predictions: with ``keep_predictions``, the predictions themselves, each
        made before its item was learned: the learner's own distribution (a
        :class:`~onlinejax.core.base.Prediction`, a Student-t or a mixture) with
        leaves ``[H, S, n]`` (``[S, n]``), so ``predictions.mean``,
        ``predictions.interval(0.9)``, ``predictions.cdf(Y)`` (the PIT) and
        ``predictions.log_prob(Y)`` are the ones the metrics scored; else ``None``.
    """

    metrics: dict
    predictions: Prediction | None

    def __repr__(self) -> str:  # shapes and scalar values, not every element
        return tree_repr(self)


#: The per-item moments a program keeps with ``keep_predictions`` (besides the prediction itself), in this
#: order; ``inner_*`` are the learner's inside a climatology hedge (:func:`~onlinejax.wrappers.hedge.inner_prediction`).
KEPT = ("mean", "var", "pit", "inner_mean", "inner_var")

def _scalar(a: np.ndarray):
    """A host array element as a Python scalar, a whole-number float as an int."""
    v = a.item()
    if isinstance(v, float) and v.is_integer() and abs(v) < 2 ** 31:
        return int(v)
    return v


def _check_hyper(learner: Learner, vals: Mapping, dtype) -> None:
    """Run ``learner.init``'s own value checks on the host for each distinct setting of ``vals``.

    Inside the vmapped ``init`` of :func:`hyper_states` every value is traced, so
    ``init``'s checks (``check_positive``, ``check_in_range``, ``check_int``, …)
    see nothing, and an ``alpha <= 0``, a NaN or a ``window`` of 2.5 would run
    into NaN or plausible-looking metrics. Calling ``init`` once per setting
    with concrete values applies the very rules ``init`` applies, including
    those that bind several keys together.

    Args:
      vals: ``{init keyword: [H] host array}``. A floating array is cast to
        ``dtype`` first (the value the state will hold); its whole numbers are
        passed as ints, since a list like ``[4, 2.5]`` is promoted to floats
        and ``init`` may require an integer (``window``).
    Raises:
      ValueError: ``"hyper['key']: …"`` for the first invalid value, naming the
        key when ``init``'s message names it, else the setting.
    """
    cols = {k: (v.astype(dtype) if np.issubdtype(v.dtype, np.floating) else v) for k, v in vals.items()}
    H = len(next(iter(cols.values())))
    seen = set()
    for h in range(H):
        setting = {k: _scalar(v[h]) for k, v in cols.items()}  # Python scalars: init checks them as a user's
        key = tuple(setting.items())
        if key in seen:
            continue
        seen.add(key)
        try:
            learner.init(dtype=dtype, **setting)
        except ValueError as e:
            msg = str(e)
            named = [k for k in setting if msg.startswith(f"{k}:")]
            if named:
                k = named[0]
                raise ValueError(f"hyper[{k!r}]: {msg[len(k) + 1:].strip()} (setting {h})") from e
            raise ValueError(f"hyper: setting {h} {setting}: {msg}") from e


def hyper_states(learner: Learner, hyper: Mapping | None, dtype) -> object:
    """States with a leading axis ``[H]``: ``learner.init(**{k: v[h]})`` for each setting ``h`` (``H = 1`` without ``hyper``).

    Args:
      hyper: ``{init keyword: [H] values}`` (1-d, one length) or ``None``.
    Raises:
      ValueError: the values are not 1-d sequences of one length, or (given
        concrete values) ``learner.init`` refuses one of the settings
        (``"hyper['key']: …"``, e.g. ``alpha <= 0``, a NaN, a non-integer ``window``).
    """
    if not hyper:
        return jax.tree_util.tree_map(lambda a: a[None], learner.init(dtype=dtype))
    vals = {k: jnp.asarray(v, dtype) for k, v in hyper.items()}
    H = {v.shape for v in vals.values()}
    if len(H) != 1 or len(next(iter(H))) != 1:
        raise ValueError(f"hyper: every value must be a 1-d sequence of one length, got shapes {sorted(H)}")
    if is_concrete(*hyper.values()):
        _check_hyper(learner, {k: np.asarray(v) for k, v in hyper.items()}, dtype)
    return jax.vmap(lambda kw: learner.init(dtype=dtype, **kw))(vals)


def stream_scores(acc, Y, preds, w_all, w_st) -> dict:
    """One stream's row metrics: ``acc``'s metrics and the log-score skill, over ``w_all`` and (``*_st``) ``w_st``.

    Args:
      acc: an :class:`~onlinejax.evaluation.metrics.Accumulator` (e.g. ``prequential(level)``).
      Y: ``[n]`` targets; preds: predictions with leaves ``[n]``;
      w_all, w_st: ``[n]`` item weights (0 leaves an item out).
    """
    a = score(acc, Y, preds, w_all)
    st = score(acc, Y, preds, w_st)
    for m, w in ((a, w_all), (st, w_st)):
        sk = log_score_skill(Y, preds, w)
        m.update(skill=sk["skill"], mlpd_clim=sk["mlpd_clim"], mlpd_from=sk["mlpd_from"])
    return {**a, **{f"{k}_st": v for k, v in st.items()}}


def _one_stream(learner: Learner, delay: int | None):
    """One (stream, setting) pair's predictions, each made before its item was learned."""

    def run(state, X, Y):
        if delay:
            sched = schedule_from_delays(np.full(X.shape[0], float(delay)))
            return delayed_progressive_validation(learner, state, X, Y, sched).predictions
        return progressive_validation(learner, state, X, Y).predictions

    return run


def _map_in_groups(run, args, width: int):
    """``lax.map`` over groups of about ``width`` pairs, each group vmapped; the groups evened out.

    ``lax.map`` compiles a remainder group as a second copy of the whole
    program, so the groups are made equal and the last one is padded with
    copies of the last pair (fewer than the number of groups).
    """
    N = jax.tree_util.tree_leaves(args)[0].shape[0]
    groups = -(-N // width)
    even = -(-N // groups)
    pad = groups * even - N
    if pad:
        args = jax.tree_util.tree_map(lambda a: jnp.concatenate([a, jnp.repeat(a[-1:], pad, 0)]), args)
    out = jax.lax.map(lambda a: run(*a), args, batch_size=even)
    return jax.tree_util.tree_map(lambda a: a[:N], out)


def predictions_program(learner: Learner, *, delay: int | None = None, width: int | None = None):
    """The pure function that runs ``H`` settings on ``C`` streams: the learner's half of :func:`streams_program`.

    Returns ``fn(states, X, Y) -> (predictions, present)`` with ``states``
    leaves ``[H, ...]`` (:func:`hyper_states`), ``X: [C, n, d]``, ``Y: [C, n]``;
    ``predictions`` is the learner's own prediction pytree with leaves
    ``[C, H, n, ...]`` and ``present`` ``[C, n]`` marks the items without a
    missing value. The ``C·H`` (stream, setting) pairs run under one flat
    ``vmap`` (module docstring).

    Args:
      delay: ``None`` for progressive validation, ``k >= 1`` for every label ``k`` items late.
      width: pairs vmapped together (``None``: all; ``1``: none, one pair
        after another, so the learners' ``lax.cond`` stays a branch; else
        groups of about ``width`` run one after another).
    """
    run = _one_stream(learner, delay)

    def per_streams(states, X, Y):
        H = jax.tree_util.tree_leaves(states)[0].shape[0]
        C = X.shape[0]
        st = jax.tree_util.tree_map(lambda a: jnp.tile(a, (C,) + (1,) * (a.ndim - 1)), states)
        rep = lambda a: jnp.repeat(a, H, axis=0)  # noqa: E731
        args = (st, rep(X), rep(Y))
        if width is None or width >= C * H:
            out = jax.vmap(run)(*args)
        elif width == 1:
            out = jax.lax.map(lambda a: run(*a), args)
        else:
            out = _map_in_groups(run, args, width)
        preds = jax.tree_util.tree_map(lambda a: a.reshape((C, H) + a.shape[1:]), out)
        return preds, ~missing_items(X, Y)

    return per_streams


def scores_program(*, level: float = 0.95, keep_moments: bool = False):
    """The pure function that scores kept predictions: the metrics' half of :func:`streams_program`.

    It depends on the predictions' type and shapes alone, not on the learner,
    so every learner whose predictions have the same type and shapes shares
    one compiled scores program (:func:`compiled_scores`).

    Returns ``fn(Y, predictions, present, w_all, w_st) -> {name: [C, H, ...]}``
    with ``Y, present, w_all, w_st: [C, n]`` and ``predictions`` leaves
    ``[C, H, n, ...]`` (:func:`predictions_program`); an item not ``present``
    is not scored. The metrics are :func:`stream_scores`'.

    Args:
      level: central interval level (static).
      keep_moments: also return :data:`KEPT`'s per-item moments, ``[C, H, n]``
        each (``"pit"``: the prediction's own CDF at the target).
    """
    acc = prequential(level)

    def one(y, p, wa, ws):
        out = stream_scores(acc, y, p, wa, ws)
        if keep_moments:
            inner = inner_prediction(p)
            out.update(mean=p.mean, var=p.var, pit=p.cdf(y), inner_mean=inner.mean, inner_var=inner.var)
        return out

    def scores(Y, preds, present, w_all, w_st):
        w_all, w_st = w_all * present, w_st * present  # missing values: not learned, not scored
        over_settings = jax.vmap(one, in_axes=(None, 0, None, None))
        return jax.vmap(over_settings)(Y, preds, w_all, w_st)

    return scores


_SCORES_LOCK = threading.Lock()
_SCORES: dict = {}


def compiled_scores(args, *, level: float = 0.95, keep_moments: bool = False, sharding=None):
    """:func:`scores_program` compiled ahead of time for ``args``' shapes and dtypes, once per process.

    Every learner (and replayed combination) whose predictions have the same
    type and shapes is scored by the same executable, so a grid compiles its
    metrics once per prediction shape instead of once per configuration.
    Threads that ask for one program at once compile it once.

    Args:
      args: ``(Y, predictions, present, w_all, w_st)`` as :func:`scores_program`
        takes them: arrays or :class:`jax.ShapeDtypeStruct` s.
      sharding: optional :class:`jax.sharding.NamedSharding` of every argument's
        leading (streams) axis over a mesh: each device scores its own rows.
    Returns:
      ``(executable, stages)``: a :class:`jax.stages.Compiled`, and the
      ``(trace, lower, XLA compile)`` seconds if this call compiled it, else ``None``.
    """
    leaves, tree = jax.tree_util.tree_flatten(args)
    key = (float(level), bool(keep_moments), tree, tuple((tuple(a.shape), np.dtype(a.dtype)) for a in leaves), sharding)
    with _SCORES_LOCK:
        fut, mine = _SCORES.get(key), key not in _SCORES
        if mine:
            fut = _SCORES[key] = Future()
    if not mine:
        return fut.result(), None
    try:
        fn = scores_program(level=level, keep_moments=keep_moments)
        if sharding is not None:  # rows are independent: nothing to communicate
            fn = jax.shard_map(fn, mesh=sharding.mesh, in_specs=sharding.spec, out_specs=sharding.spec,
                               check_vma=False)
        avals = jax.tree_util.tree_unflatten(tree, [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding)
                                                    for a in leaves])
        t0 = time.perf_counter()
        traced = jax.jit(fn).trace(*avals)
        t1 = time.perf_counter()
        lowered = traced.lower()
        t2 = time.perf_counter()
        exe = lowered.compile()
        stages = (t1 - t0, t2 - t1, time.perf_counter() - t2)
    except BaseException as e:
        with _SCORES_LOCK:
            del _SCORES[key]
        fut.set_exception(e)
        raise
    fut.set_result(exe)
    return exe, stages


def streams_program(learner: Learner, *, level: float = 0.95, delay: int | None = None,
                    keep_predictions: bool = False, width: int | None = None):
    """The pure function that scores ``H`` settings on ``C`` streams: jit it, ``shard_map`` it, lower it.

    Returns ``fn(states, X, Y, w_all, w_st) -> {name: [C, H, ...]}`` with
    ``states`` leaves ``[H, ...]`` (:func:`hyper_states`), ``X: [C, n, d]``,
    ``Y, w_all, w_st: [C, n]``: :func:`predictions_program` followed by
    :func:`scores_program` in one program. The runners compile the two halves
    apart, so that learners share the scores' program.

    Args:
      level: central interval level (static); delay: ``None`` for
        progressive validation, ``k >= 1`` for every label ``k`` items late.
      keep_predictions: also return ``"mean"``, ``"var"``, ``"pit"`` ``[C, H, n]``, ``"inner_mean"`` and
        ``"inner_var"`` (those of the learner inside a climatology hedge,
        :func:`~onlinejax.wrappers.hedge.inner_prediction`; else the same as ``"mean"``, ``"var"``) and
        ``"prediction"``, the predictions themselves (a prediction pytree with leaves ``[C, H, n, ...]``).
      width: as in :func:`predictions_program`.
    """
    predict = predictions_program(learner, delay=delay, width=width)
    scores = scores_program(level=level, keep_moments=keep_predictions)

    def per_streams(states, X, Y, w_all, w_st):
        preds, present = predict(states, X, Y)
        out = scores(Y, preds, present, w_all, w_st)
        return {**out, "prediction": preds} if keep_predictions else out

    return per_streams


@functools.lru_cache(maxsize=64)
def _compiled(learner: Learner, delay: int | None, width: int | None = None):
    """The jitted :func:`predictions_program`, kept per (learner, options) so repeated calls reuse its executables."""
    return jax.jit(predictions_program(learner, delay=delay, width=width))


def _item_weights(weights, name: str, shape: tuple, dtype) -> np.ndarray:
    """``weights`` broadcast to ``shape``; ``ValueError`` naming ``name`` unless they are finite and >= 0."""
    w = np.asarray(weights, dtype)
    try:
        w = np.broadcast_to(w, shape)
    except ValueError:
        raise ValueError(f"{name}: expected shape {shape} or one that broadcasts to it, got {w.shape}") from None
    if not np.all(np.isfinite(w) & (w >= 0)):
        raise ValueError(f"{name}: must be finite and >= 0 (0 leaves an item out)")
    return w


def evaluate_streams(learner: Learner, X, Y, hyper: Mapping | None = None, *,
                     options: StreamsOptions = StreamsOptions(), weights: ItemWeights = ItemWeights(),
                     keep_predictions: bool = False, dtype=None, tune_plan: TunePlan | None = None) -> StreamsResult:
    """Evaluate ``learner`` on ``S`` streams × ``H`` hyperparameter settings in one compiled program.

    Each (stream, setting) pair starts from ``learner.init(**setting)`` and is
    run by progressive validation (predict each item, then learn it; with
    ``options.delay``, learn it ``delay`` items later) and scored like a grid row.

    Args:
      learner: a :class:`~onlinejax.core.base.Learner` for ``d`` inputs.
      X: ``[S, n, d]`` inputs; Y: ``[S, n]`` targets. An item with a missing
        (non-finite) value in ``x`` or ``y`` is neither learned nor scored
        (:func:`~onlinejax.evaluation.progressive_validation`); ``metrics["n_skipped"]`` counts them.
      hyper: optional ``{init keyword: [H] values}``, e.g. ``{"alpha": [1e-3, 1e-1, 10.0]}``.
      options: :class:`~onlinejax.evaluation.options.StreamsOptions`: the interval ``level``,
        the label ``delay`` and the ``vmap_width`` (default: progressive validation, level 0.95,
        every pair in one vmap).
      weights: :class:`~onlinejax.evaluation.options.ItemWeights`: the items' weights in the
        metrics and in the ``*_st`` metrics (default: every item).
      keep_predictions: also return the predictions (:class:`StreamsResult`).
      dtype: state dtype (default: float32, or float64 under x64).
      tune_plan: optional :class:`~onlinejax.core.schedule.TunePlan`: when the
        state machines inside ``learner`` run their tunes (:func:`~onlinejax.core.schedule.with_tune_plan`;
        ``None``: as the learner was built).
    Returns:
      :class:`StreamsResult` with metrics ``[H, S]`` (``[S]`` without ``hyper``).
    Raises:
      ValueError: naming the argument: bad shapes, an ``options.delay``
        that is not an int ``>= 1``, negative or non-finite ``weights.all``, or a ``hyper`` value ``learner.init``
        refuses (``"hyper['alpha']: must be finite and > 0, ..."``), checked
        on the host for each distinct setting before anything is compiled.

    Example:
      >>> import jax.numpy as jnp
      >>> from onlinejax.learners.linear import bayes_linreg
      >>> X = jnp.ones((3, 50, 2)); Y = X.sum(-1) + 0.1 * jnp.sin(jnp.arange(50.0))
      >>> res = evaluate_streams(bayes_linreg(2), X, Y, hyper={"alpha": [0.1, 1.0]})
      >>> res.metrics["smse"].shape
      (2, 3)
    """
    learner = with_tune_plan(learner, tune_plan)
    dtype = np.dtype(dtype or default_float_dtype())
    X, Y = np.asarray(X, dtype), np.asarray(Y, dtype)
    if X.ndim != 3 or X.shape[2] != learner.n_features or Y.shape != X.shape[:2]:
        raise ValueError(f"X, Y: expected shapes [S, n, {learner.n_features}] and [S, n], "
                         f"got {X.shape} and {Y.shape}")
    options = checked_record(options, StreamsOptions, "options")
    check_record(weights, ItemWeights, "weights")
    w_all = _item_weights(1.0 if weights.all is None else weights.all, "weights.all", Y.shape, dtype)
    w_st = _item_weights(w_all if weights.stable is None else weights.stable, "weights.stable", Y.shape, dtype)
    states = hyper_states(learner, hyper, dtype)
    predictions, present = _compiled(learner, options.delay, options.vmap_width)(states, X, Y)
    args = (Y, predictions, present, w_all, w_st)
    out = compiled_scores(args, level=options.level)[0](*args)
    out = jax.tree_util.tree_map(lambda a: jnp.swapaxes(a, 0, 1) if hyper else a[:, 0], out)
    preds = None
    if keep_predictions:
        preds = jax.tree_util.tree_map(lambda a: jnp.swapaxes(a, 0, 1) if hyper else a[:, 0], predictions)
    skipped = np.count_nonzero(~(np.isfinite(Y) & np.isfinite(X).all(-1)), axis=-1)
    out["n_skipped"] = np.broadcast_to(skipped, out["smse"].shape)
    return StreamsResult(out, preds)
