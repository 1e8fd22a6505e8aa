"""Learners built from a picklable spec, shared between adapter instances with their initial states and
compiled predictions (see :mod:`onlinejax.adapters._core`)."""
from __future__ import annotations

import functools
from typing import Callable

import jax

from ..core.base import Learner


def resolve_factory(learner: str | Callable) -> Callable[..., Learner]:
    """``learner`` -> ``factory(n_features, **params) -> Learner``.

    A string names either a function of the package (``"bayes_linreg"``,
    ``"windowed_bayes_linreg"``, ``"gp_window"``, ``"kernel_regression"``, ``"sgd_linreg"``, ...)
    or a configuration registered by :mod:`onlinejax.zoo` (``"GPRegressionOLSMean_WS64"``; these
    take no parameters). A callable is used as it is; it must be picklable (a module-level
    function or a ``functools.partial`` of one, not a lambda) for the adapter to pickle.
    """
    if callable(learner):
        return learner
    if not isinstance(learner, str):
        raise TypeError(f"learner: expected a name or a callable, got {type(learner).__name__}")
    import onlinejax
    from onlinejax.learners import gp
    from onlinejax.learners.kernel_regression import kernel_regression

    if learner == "kernel_regression":  # the module's other names (init, tune, ...) are its pure steps
        return kernel_regression
    for ns in (onlinejax, gp):
        f = getattr(ns, learner, None)
        if callable(f) and not isinstance(f, type):
            return f
    from onlinejax import zoo
    from onlinejax.core.registry import REGISTRY

    known = {**zoo.configurations(), **REGISTRY}  # the zoo's names, and the user's registrations
    if learner in known:
        make = known[learner].make

        def factory(n_features, **params):
            if params:
                raise ValueError(f"learner_params: the registered configuration {learner!r} takes none, got {sorted(params)}")
            return make(n_features)

        return factory
    raise ValueError(f"learner: {learner!r} is neither a function of onlinejax nor a registered configuration")


@functools.lru_cache(maxsize=64)
def _cached_learner(spec, n_features: int, params: tuple) -> Learner:
    return resolve_factory(spec)(n_features, **dict(params))


def build_learner(spec, n_features: int, params: dict) -> Learner:
    """``resolve_factory(spec)(n_features, **params)``, shared between adapter instances.

    A learner is an immutable record of pure, jitted functions, so models (and their clones,
    and every ``fit``) built from the same spec reuse one learner and its compiled code instead
    of compiling again. Specs or parameters that cannot be hashed are built afresh.
    """
    try:
        key = tuple(sorted(params.items()))
        hash((spec, key))
    except TypeError:
        return resolve_factory(spec)(n_features, **params)
    return _cached_learner(spec, int(n_features), key)


_INITIAL: dict = {}


def initial_state(learner: Learner, init_params: dict):
    """``learner.init(**init_params)``, computed once per learner and parameters and then shared.

    States are immutable pytrees, so models (clones, refits, a learner widened to a width used
    before) can start from one. Some ``init`` are costly (the calibrated learners' Student-t
    quantile runs an eager loop that compiles on every call); parameters that cannot be
    hashed are initialised afresh.
    """
    try:
        key = (learner, tuple(sorted(init_params.items())))
        hit = _INITIAL.get(key)
    except TypeError:
        return learner.init(**init_params)
    if hit is None:
        if len(_INITIAL) >= 64:  # bounded: drop the oldest entry
            _INITIAL.pop(next(iter(_INITIAL)))
        hit = _INITIAL[key] = learner.init(**init_params)
    return hit


_PREDICT: dict = {}


def _packed_predict(learner: Learner, packer):
    """``predict(buf, x)``: ``learner.predict`` on a :class:`~onlinejax.core.stateful.StatefulLearner`'s packed state.

    ``StatefulLearner.predict`` returns the ``(mean, var)`` of a Gaussian; the adapters need the
    learner's whole prediction pytree (a Student-t's degrees of freedom, a mixture's members).
    Reading the packed buffer keeps a per-item call at two arrays in, as ``StatefulLearner``
    does. Jitted once per learner and state layout (the packer is shared per layout).
    """
    key = (learner, id(packer))
    hit = _PREDICT.get(key)
    if hit is not None and hit[0] is packer:
        return hit[1]
    fn = jax.jit(lambda buf, x: learner.predict(packer.unpack(buf), x))
    if len(_PREDICT) >= 128:  # bounded: drop the oldest entry
        _PREDICT.pop(next(iter(_PREDICT)))
    _PREDICT[key] = (packer, fn)
    return fn
