"""The :class:`Learner` record, the factory that builds one from pure cores, and what describes a learner.

:func:`make_learner` wraps a learner family's single-item cores and its optional ones (a
:class:`LearnerCores` record: batch cores, a fused step, ``downdate``, ``evict``, ``tune``) in the
checked boundary of :mod:`onlinejax.core.checks` and jit-compiles them;
:func:`describe_factory` makes a public factory record its call
(:class:`~onlinejax.core.factory_call.FactoryCall`, shown by ``repr``) and return the same learner for
equal arguments (:func:`~onlinejax.core.factory_call.reuse_equal_calls`); :func:`pass_through` gives a
wrapper the inner learner's ``tune``, ``downdate`` and ``evict``. :class:`DeferredStep` and
:class:`StaticOptions` are parts of a learner and of its state. The recorded call and the cache are in
:mod:`onlinejax.core.factory_call`; :func:`~onlinejax.core.tree_summary.tree_repr` and
:func:`~onlinejax.core.tree_summary.tree_nbytes`, which summarise a state, in :mod:`onlinejax.core.tree_summary`
(both re-exported here).
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

import dataclasses
import functools
import inspect

import jax
import jax.numpy as jnp
import numpy as np

from .checks import check_record, coerce_x, coerce_xy, state_dtype
from .cores import _skip_with_prediction, full_precision, sequential, skip_nonfinite
from .distributions import Prediction
from .factory_call import FactoryCall, map_nested, reuse_equal_calls  # noqa: F401 (map_nested re-exported)
from .tree_summary import tree_nbytes, tree_repr  # noqa: F401 (re-exported)

Array = jax.Array
State = Any

__all__ = ["Learner", "DeferredStep", "FactoryCall", "StaticOptions", "LearnerCores", "make_learner",
           "pass_through", "describe_factory", "reuse_equal_calls", "map_nested", "tree_repr", "tree_nbytes"]


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class StaticOptions:
    """The static options a state was built for, carried in the tree's *structure*, not its leaves.

    A state field of this type has no arrays: ``jit``, ``vmap`` and ``scan`` pass it through
    unchanged, and two states built for different options have different tree structures, so
    :func:`~onlinejax.core.checkpoint.load_checkpoint` refuses a file saved under other options
    (e.g. ``bounds="bayes"`` into a ``bounds="asymptotic"`` learner, whose arrays look alike).

    Attributes:
      items: ``((name, value), ...)`` with hashable values.
    """

    items: tuple = ()

    @classmethod
    def of(cls, **options) -> "StaticOptions":
        """``StaticOptions.of(bounds="bayes")``; the names are sorted."""
        return cls(tuple(sorted(options.items())))


class DeferredStep(NamedTuple):
    """A learner's step with its rare, costly part split off, for runners that loop over items between them.

    A state machine that tunes at the end of each learning phase carries
    the tune as a branch of every step; on XLA:CPU even an untaken branch
    costs a learner of a large state about a microsecond per item
    (``benchmarks/state_machine.py``). With this split a runner steps
    items in an inner loop that has no such branch and applies the rare part
    between such loops (:func:`onlinejax.evaluation.progressive_validation`
    does, for one stream at a time).

    Contract: for every state ``s`` and item ``(x, y)``,
    ``learner.step(s, x, y)`` equals ``t, p = step(s, x, y)`` followed by
    ``t = apply(t) if due(s, t) else t``, returning ``(t, p)``.

    Attributes:
      step: ``(state, x, y) -> (state, Prediction)`` with the boundary of
        :attr:`Learner.step`, the rare part left pending.
      due: ``(state_before, state_after) -> bool []``: whether the item left
        the rare part pending.
      apply: ``state -> state``: the rare part.
    """

    step: Callable[[State, Any, Any], tuple[State, "Prediction"]]
    due: Callable[[State, State], Array]
    apply: Callable[[State], State]


class Learner(NamedTuple):
    """An online learner: a record of pure functions (optax style).

    Attributes:
      init: ``init(**hyperparameters) -> state``; hyperparameters that do not
        change shapes are arrays in the state, so ``jax.vmap(lambda a:
        learner.init(alpha=a))(alphas)`` builds a batch of learners.
      learn: ``learn(state, x, y) -> state`` with ``x: [d]``, ``y: []`` or a
        mini-batch ``x: [b, d]``, ``y: [b]``.
      predict: ``predict(state, x) -> Prediction`` with ``x: [d]`` (``mean``
        and ``var`` are ``[]``) or ``x: [b, d]`` (``[b]``).
      step: ``step(state, x, y) -> (state, Prediction)``: predict ``y`` from
        ``x`` *before* learning from it, then learn; one compiled call (the
        fast path for research code that drives a learner from a Python loop).
        It equals ``pred = predict(state, x); update(state, x, y, pred)``.
      n_features: ``d``, the input width the learner expects (static).
      downdate: optional ``downdate(state, x, y) -> state``: remove an item
        previously learned (a growing posterior's exact inverse of ``learn``),
        ``x: [d]``, ``y: []``.
      tune: optional ``tune(state, **options) -> state``: re-estimate the
        hyperparameters from the learner's own data and rebuild the state.
      description: the call that built the learner (``"windowed_bayes_linreg(3, 64)"``),
        set by the public factories (:func:`describe_factory`); used by ``repr``.
      deferred: optional :class:`DeferredStep`, ``step`` with its rare part
        (a state machine's tune) split off; runners may use it instead of ``step``.
      update: ``update(state, x, y, pred) -> state``: learn the item given
        ``pred = predict(state, x)``, the prediction that was issued for it
        (optax's ``update`` receives what the caller computed). Wrappers judge
        that prediction (calibrators score it, the state machine's detector
        tests it) instead of predicting again, so a caller whose ``x`` changed
        between the two calls (River's scaler in front) or who learns later
        still has the issued prediction judged. ``x: [d]`` with ``pred``'s
        leaves ``[]``, or a batch ``x: [b, d]`` with ``[b]`` leaves.
      factory_call: the :class:`FactoryCall` that built the learner (set by the public factories with
        :func:`describe_factory`, like ``description``), or ``None``.
      evict: optional ``evict(state) -> state``: a window evicts its oldest
        item, which it holds itself (passing the item would invite states
        that disagree with the window).
    """

    init: Callable[..., State]
    learn: Callable[[State, Any, Any], State]
    predict: Callable[[State, Any], Prediction]
    step: Callable[[State, Any, Any], tuple[State, Prediction]]
    n_features: int
    downdate: Optional[Callable[..., State]] = None
    tune: Optional[Callable[..., State]] = None
    description: Optional[str] = None
    deferred: Optional[DeferredStep] = None
    update: Optional[Callable[[State, Any, Any, Any], State]] = None
    factory_call: Optional[FactoryCall] = None
    evict: Optional[Callable[[State], State]] = None

    def __repr__(self) -> str:
        extra = [m for m in ("downdate", "evict", "tune") if getattr(self, m) is not None]
        what = self.description or "make_learner(...)"
        return f"Learner({what}; n_features={self.n_features}" + (f"; with {', '.join(extra)})" if extra else ")")


def _short_repr(v) -> str:
    """A value in a factory call's description: learners by their description, big arrays by shape."""
    if isinstance(v, Learner):
        return v.description or "Learner(...)"
    if isinstance(v, (np.ndarray, jax.Array)) and np.size(v) > 4:
        return f"array{list(np.shape(v))}"
    if callable(v) and hasattr(v, "__qualname__"):
        return v.__qualname__
    text = repr(v)
    if hasattr(v, "_fields") and all(isinstance(a, (bool, int, float, str, type(None))) for a in v):
        return text  # a record of options (TunePlan, MachineOptions): cut short, two configurations would read alike
    return text if len(text) <= 60 else text[:57] + "..."


def describe_factory(factory: Callable[..., "Learner"]) -> Callable[..., "Learner"]:
    """Decorate a public learner factory so that its learners' ``repr`` shows the call that built them.

    ``windowed_bayes_linreg(3, 64, intercept=True)`` then prints as
    ``Learner(windowed_bayes_linreg(3, 64, intercept=True); n_features=4; with evict, tune)``;
    wrappers nest (``standardize(gp_window(2, 64))``). Signature and docstring are kept.
    The call itself is kept in ``Learner.factory_call``.
    Calls with equal hashable arguments return the same :class:`Learner`
    (:func:`reuse_equal_calls`), so building a configuration again does not compile its programs again.
    """

    @reuse_equal_calls
    @functools.wraps(factory)
    def build(*args, **kwargs):
        out = factory(*args, **kwargs)
        call = ", ".join([_short_repr(a) for a in args] + [f"{k}={_short_repr(v)}" for k, v in kwargs.items()])
        made = FactoryCall(build, args, kwargs)
        out = out._replace(description=f"{factory.__name__}({call})", factory_call=made)
        made.built = _built_fields(out)
        return out

    return build


def _built_fields(learner: Learner) -> tuple:
    """The learner's fields other than ``factory_call``: what tells a learner as built from a changed copy."""
    return tuple(v for k, v in zip(learner._fields, learner) if k != "factory_call")


class LearnerCores(NamedTuple):
    """The optional cores of :func:`make_learner`, as one record; each ``None`` takes its default.

    The cores see ``x: [d]``/``[b, d]`` and ``y: []``/``[b]`` already cast to the state's dtype.
    Every one given is traced under :func:`~onlinejax.core.cores.full_precision` and, except ``tune``
    (which its factory jits with its own static arguments), jit-compiled.

    Attributes:
      learn_batch: ``learn_batch(state, X [b, d], Y [b]) -> state``; default a scan over
        ``learn_one`` (exactly sequential learning). With ``skip_nonfinite`` a given
        ``learn_batch`` must skip non-finite items by itself.
      predict_batch: ``predict_batch(state, X [b, d]) -> Prediction`` with ``[b]`` leaves; default
        ``vmap(predict_one)``.
      step_one: ``step_one(state, x, y) -> (state, Prediction)``, for learning that needs the
        prediction of the same item (it is then computed once); default ``predict_one`` followed by
        ``learn_one``. A mini-batch ``step`` scans ``step_one`` when it is given, so that the batch
        predictions are the sequential ones.
      update_one: ``update_one(state, x, y, pred) -> state`` learns the item given the prediction
        ``predict_one(state, x)`` issued for it (a wrapper judges that prediction); default
        ``learn_one`` (a learner whose learning does not use its prediction). With ``update_one``
        and no ``step_one``, ``step_one`` is ``predict_one`` followed by ``update_one`` (the item is
        predicted once). A mini-batch ``update`` scans ``update_one`` over the items and their
        predictions.
      downdate: ``downdate(state, x [d], y []) -> state`` removes a given item, checked like
        ``learn``'s; default none.
      evict: ``evict(state) -> state`` evicts a window's oldest item; default none.
      tune: ``tune(state, **options) -> state`` re-estimates the hyperparameters from the learner's
        own data; default none.

    A wrapper's ``downdate``, ``evict`` and ``tune`` come from :func:`pass_through`:
    ``LearnerCores(update_one=..., **pass_through(inner))``.
    """

    learn_batch: Optional[Callable] = None
    predict_batch: Optional[Callable] = None
    step_one: Optional[Callable] = None
    update_one: Optional[Callable] = None
    downdate: Optional[Callable] = None
    evict: Optional[Callable] = None
    tune: Optional[Callable] = None


def make_learner(
    *,
    init: Callable[..., State],
    learn_one: Callable,
    predict_one: Callable,
    n_features: int,
    cores: LearnerCores = LearnerCores(),
    skip_nonfinite: bool = False,
) -> Learner:
    """Wrap pure single-item/batch cores into a :class:`Learner` with a checked boundary.

    Every function is traced under :func:`~onlinejax.core.cores.full_precision` (matrix products in
    full float32 precision on GPUs too).

    Args:
      init: ``init(**hyperparameters) -> state``.
      learn_one: ``learn_one(state, x [d], y []) -> state``, ``x`` and ``y`` already cast to the
        state's dtype.
      predict_one: ``predict_one(state, x [d]) -> Prediction`` with ``[]`` leaves.
      n_features: ``d``, the input width the boundary checks (static).
      cores: the optional cores, a :class:`LearnerCores` (batch cores, ``step_one``,
        ``update_one``, ``downdate``, ``evict``, ``tune``); each ``None`` takes its default.
      skip_nonfinite: the boundary owns the non-finite skip: inside ``jit``/``vmap``/``scan``
        (where the concrete check cannot raise) an item whose ``x`` or ``y`` is NaN/inf leaves the
        state unchanged except its ``n_skipped`` counter (:func:`~onlinejax.core.cores.skip_nonfinite`).
        The cores then assume finite items. It wraps ``learn_one``, ``step_one`` and ``update_one``;
        a custom ``learn_batch`` must skip by itself.
    Returns:
      The :class:`Learner`. An empty mini-batch (``x: [0, d]``) is a no-op at its boundary:
      ``learn`` returns the state unchanged.
    Raises:
      TypeError: ``cores`` not a :class:`LearnerCores`; a ``downdate`` that does not take
        ``(state, x, y)`` or an ``evict`` that does not take ``(state)``.
    """
    check_record(cores, LearnerCores, "cores")
    learn_batch, predict_batch, step_one, update_one, downdate, evict, tune = cores
    if update_one is not None and step_one is None:
        step_one = _predict_then_update(predict_one, update_one)
    if skip_nonfinite:
        learn_one, step_one, update_one = _skipping(learn_one, step_one, update_one)
    learn_batch = learn_batch or sequential(learn_one)
    predict_batch = predict_batch or jax.vmap(predict_one, in_axes=(None, 0))
    j_learn_one, j_learn_batch = jax.jit(learn_one), jax.jit(learn_batch)
    j_pred_one, j_pred_batch = jax.jit(predict_one), jax.jit(predict_batch)
    j_step_one, j_step_batch = map(jax.jit, _step_cores(learn_one, learn_batch, predict_one, predict_batch, step_one))
    j_update_one, j_update_batch = map(jax.jit, _update_cores(learn_one, learn_batch, update_one))

    def learn(state, x, y):
        x, y = coerce_xy(x, y, n_features, state_dtype(state))
        if x.ndim == 2 and x.shape[0] == 0:  # an empty batch teaches nothing
            return state
        return (j_learn_batch if x.ndim == 2 else j_learn_one)(state, x, y)

    def predict(state, x):
        x, batched = coerce_x(x, n_features, state_dtype(state))
        return (j_pred_batch if batched else j_pred_one)(state, x)

    def step(state, x, y):
        x, y = coerce_xy(x, y, n_features, state_dtype(state))
        if x.ndim == 2 and x.shape[0] == 0:
            return state, j_pred_batch(state, x)
        return (j_step_batch if x.ndim == 2 else j_step_one)(state, x, y)

    def update(state, x, y, pred):
        x, y = coerce_xy(x, y, n_features, state_dtype(state))
        if x.ndim == 2 and x.shape[0] == 0:
            return state
        pred = _checked_prediction(pred, y.shape, state_dtype(state))
        return (j_update_batch if x.ndim == 2 else j_update_one)(state, x, y, pred)

    dd = None if downdate is None else _checked_downdate(downdate, n_features)
    ev = None if evict is None else _checked_evict(evict)
    # around the boundary, not only the cores: derivative rules (a Cholesky's JVP, a custom_vmap's
    # re-trace) emit their products when a transformation reaches the call, outside the cores' traces
    init, learn, predict, step, update = map(full_precision, (init, learn, predict, step, update))
    dd, ev, tune = (None if f is None else full_precision(f) for f in (dd, ev, tune))
    return Learner(init=init, learn=learn, predict=predict, step=step, n_features=n_features, downdate=dd, tune=tune,
                   update=update, evict=ev)


def _skipping(learn_one, step_one, update_one):
    """The cores with :func:`~onlinejax.core.cores.skip_nonfinite` applied (``None`` stays ``None``)."""
    return (skip_nonfinite(learn_one), None if step_one is None else skip_nonfinite(step_one, returns_prediction=True),
            None if update_one is None else _skip_with_prediction(update_one))


def _predict_then_update(predict_one, update_one):
    """``step_one``: the item predicted once, then learned with that prediction."""

    def step_one(state, x, y):
        pred = predict_one(state, x)
        return update_one(state, x, y, pred), pred

    return step_one


def _step_cores(learn_one, learn_batch, predict_one, predict_batch, step_one):
    """``(step_one, step_batch)``: the given ``step_one`` (a batch scans it), or predict before learning."""
    if step_one is None:

        def step_one(state, x, y):
            return learn_one(state, x, y), predict_one(state, x)

        def step_batch(state, X, Y):
            return learn_batch(state, X, Y), predict_batch(state, X)

        return step_one, step_batch
    return step_one, lambda state, X, Y: jax.lax.scan(lambda s, xy: step_one(s, *xy), state, (X, Y))


def _update_cores(learn_one, learn_batch, update_one):
    """``(update_one, update_batch)``: the given ``update_one`` (a batch scans it), or ``learn`` ignoring ``pred``."""
    if update_one is None:
        return (lambda state, x, y, pred: learn_one(state, x, y)), (lambda state, X, Y, preds: learn_batch(state, X, Y))

    def update_batch(state, X, Y, preds):
        return jax.lax.scan(lambda s, xyp: (update_one(s, *xyp), None), state, (X, Y, preds))[0]

    return update_one, update_batch


def _checked_prediction(pred, shape: tuple, dtype):
    """The boundary of ``update``'s ``pred``: a prediction pytree whose leaves match ``y``'s batch shape, cast to ``dtype``.

    ``mean`` and ``var`` are ``[]`` for one item and ``[b]`` for a batch;
    other leaves may carry one trailing axis (a mixture's components).
    """
    if not hasattr(pred, "mean") or not hasattr(pred, "var"):
        raise TypeError(f"pred: expected the prediction predict() returned, got {type(pred).__name__}")
    for name in ("mean", "var"):
        if tuple(jnp.shape(getattr(pred, name))) != tuple(shape):
            raise ValueError(f"pred: {name} of shape {jnp.shape(getattr(pred, name))} does not match y's shape "
                             f"{tuple(shape)}")
    for leaf in jax.tree_util.tree_leaves(pred):
        if tuple(jnp.shape(leaf))[:len(shape)] != tuple(shape) or jnp.ndim(leaf) > len(shape) + 1:
            raise ValueError(f"pred: leaves of shape {jnp.shape(leaf)} do not match y's shape {tuple(shape)}")
    return jax.tree_util.tree_map(lambda a: jnp.asarray(a, dtype) if jnp.issubdtype(jnp.result_type(a),
                                                                                    jnp.floating) else a, pred)


def _takes(fn: Callable, n: int) -> bool:
    """Whether ``fn`` can be called with ``n`` positional arguments (True when its signature is unknown)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return True
    try:
        sig.bind(*range(n))
    except TypeError:
        return False
    return True


def _checked_downdate(downdate: Callable, n_features: int) -> Callable:
    """The boundary of ``downdate(state, x, y)``: the item checked like ``learn``'s (one item only), then jit."""
    if not _takes(downdate, 3):
        raise TypeError("downdate: must take (state, x, y) and remove that item; a window that evicts its "
                        "oldest item passes it as evict=")
    j_dd = jax.jit(downdate)

    def dd(state, x, y):
        x, y = coerce_xy(x, y, n_features, state_dtype(state))
        if x.ndim == 2:
            raise ValueError("x: downdate takes one item, got a batch")
        return j_dd(state, x, y)

    return dd


def _checked_evict(evict: Callable) -> Callable:
    """The boundary of ``evict(state)``: its signature checked, then jit."""
    if not _takes(evict, 1):
        raise TypeError("evict: must take (state) and evict the oldest item; removing a given item is downdate=")
    j_ev = jax.jit(evict)
    return lambda state: j_ev(state)


def _inner_field(state):
    return state.inner


def _with_inner(state, inner_state):
    return state._replace(inner=inner_state)


def pass_through(inner: Learner, get: Callable = _inner_field, put: Callable = _with_inner,
                 map_item: Optional[Callable] = None) -> dict:
    """A wrapper's ``tune``, ``downdate`` and ``evict``: the inner learner's, applied to the inner state.

    Every wrapper passes these operations through the same way,
    ``make_learner(..., cores=LearnerCores(..., **pass_through(learner)))``; the wrapper's own part of
    the state is left as it is (a calibrator is neither tuned nor downdated).

    Args:
      inner: the wrapped :class:`Learner`.
      get: ``get(state) -> inner_state``; by default ``state.inner``.
      put: ``put(state, inner_state) -> state``; by default ``state._replace(inner=inner_state)``.
      map_item: optional ``map_item(state, x [d], y []) -> (x', y')``: the item in the inner
        learner's coordinates (features, a standardiser's scale), for ``downdate``.
    Returns:
      ``{"tune": ..., "downdate": ..., "evict": ...}``, keyword arguments of
      :class:`LearnerCores`; ``None`` for each operation the inner learner lacks.
    """

    def tune(state, **options):
        return put(state, inner.tune(get(state), **options))

    def downdate(state, x, y):
        xy = (x, y) if map_item is None else map_item(state, x, y)
        return put(state, inner.downdate(get(state), *xy))

    def evict(state):
        return put(state, inner.evict(get(state)))

    return {"tune": None if inner.tune is None else tune, "downdate": None if inner.downdate is None else downdate,
            "evict": None if inner.evict is None else evict}
