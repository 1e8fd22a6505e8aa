"""Widening a learner's state exactly when new named features arrive (see :mod:`onlinejax.adapters._core`)."""
from __future__ import annotations

import jax
import numpy as np


#: Learners whose state :func:`grow_state` widens exactly: conjugate Bayesian linear regression without
#: forgetting (a weight whose input has been 0 so far is still at its prior), standardised and calibrated.
GROWABLE = ("bayes_linreg", "calibrated_bayes_linreg")


def can_grow(spec, learner_params: dict, init_params: dict) -> bool:
    """Whether the learner named ``spec`` widens exactly: one of :data:`GROWABLE`, without forgetting,
    with a shared (scalar) prior precision."""
    if not isinstance(spec, str) or spec not in GROWABLE or learner_params.get("forgetting") is not None:
        return False
    return all(np.ndim(p.get("alpha", 1.0)) == 0 for p in (learner_params, init_params))


def _insert(a, axes, d_old: int, k: int, fill=0.0):
    """``a`` with ``k`` entries of ``fill`` inserted at index ``d_old`` of each of ``axes``."""
    a = np.asarray(a)
    for ax in axes:
        shape = list(a.shape)
        shape[ax] = k
        a = np.concatenate([np.take(a, range(d_old), ax), np.full(shape, fill, a.dtype),
                            np.take(a, range(d_old, a.shape[ax]), ax)], axis=ax)
    return a


def _grow_linear(s, d_old: int, k: int):
    """A :class:`~onlinejax.learners.linear.bayes.BayesLinRegState` with ``k`` new weights at their prior,
    inserted after the ``d_old`` input weights (before an intercept): ``N(0, 1/alpha)``, independent
    of the others, no data in the statistics. ``None`` without a shared ``alpha`` or with forgetting."""
    alpha = np.asarray(s.alpha)
    if not (np.all(alpha == alpha[0]) and float(s.forgetting) == 1.0):
        return None
    W = _insert(s.cov_sqrt, (0, 1), d_old, k)
    new = np.arange(d_old, d_old + k)
    W[new, new] = 1.0 / np.sqrt(alpha[0])  # S = WWᵀ gets the prior variance there, no covariance
    g = s.stats
    return s._replace(mean=_insert(s.mean, (0,), d_old, k), cov_sqrt=W, alpha=_insert(alpha, (0,), d_old, k, alpha[0]),
                      stats=g._replace(gram=_insert(g.gram, (0, 1), d_old, k), xty=_insert(g.xty, (0,), d_old, k)))


def _grow(s, d_old: int, k: int):
    from ..wrappers.calibration import CalibratedState
    from ..learners.linear.bayes import BayesLinRegState
    from ..wrappers.standardize import StandardizeState

    if isinstance(s, BayesLinRegState):
        return _grow_linear(s, d_old, k)
    if isinstance(s, StandardizeState):  # an input never seen: mean 0, no spread
        inner, initial = _grow(s.inner, d_old, k), _grow(s.initial, d_old, k)  # initial: what a restart starts from
        if inner is None or initial is None:
            return None
        sc, per_input = s.scaler, lambda a: _insert(a, (0,), d_old, k)  # noqa: E731
        # the wrapper's own [d] fields (runs, the last input): a new input has been 0 and started nothing
        own = {f: per_input(getattr(s, f)) for f in s._fields
               if f not in ("inner", "initial", "scaler", "kept", "log_track") and np.ndim(getattr(s, f)) == 1}
        kept = None if s.kept is None else s.kept._replace(x=_insert(s.kept.x, (1,), d_old, k))  # the items kept
        t, seen = s.log_track, bool(np.asarray(s.log_track.count) > 0)  # a 0 counted is no positive value
        log_track = t._replace(logs=_insert(t.logs, (1,), d_old, k),
                               lo=_insert(t.lo, (0,), d_old, k, 0.0 if seen else np.inf),
                               positive=_insert(t.positive, (0,), d_old, k, not seen))
        return s._replace(inner=inner, initial=initial, kept=kept, log_track=log_track,
                          scaler=sc._replace(x_mean=per_input(sc.x_mean), x_var=per_input(sc.x_var)), **own)
    if isinstance(s, CalibratedState):  # the calibrators see predictions only
        inner = _grow(s.inner, d_old, k)
        return None if inner is None else s._replace(inner=inner)
    return None


def grow_state(state, template, d_old: int, d_new: int):
    """The state of a learner of ``d_old`` inputs as that of the same learner of ``d_new`` inputs whose
    extra inputs have been 0 for every item so far, or ``None`` where that is not known exactly.

    Exact for the :data:`GROWABLE` learners: with the extra inputs 0 the posterior of their weights
    is the prior, independent of the rest (Bishop eq. 3.53-3.54 with zero columns), and a
    standardiser has seen mean 0 and no spread there. The posterior's square root differs from a
    wide learner's by a rotation (``S = WWᵀ`` is the same), so later results agree to rounding. With
    moving statistics that carry the posterior into new coordinates (``StandardizeOptions(reexpress=)``, the
    default learner's) a wide learner's unseen weights have their prior in the target's scale of the
    first items, a grown one's in today's: the two then differ by that prior, not by rounding.

    Args:
      state: the current state; template: ``init()`` of the wider learner (its layout and dtypes).
    """
    wide = _grow(state, d_old, d_new - d_old)
    if wide is None:
        return None
    leaves, tree = jax.tree_util.tree_flatten(wide)
    like, tree_t = jax.tree_util.tree_flatten(template)
    if tree != tree_t or [np.shape(v) for v in leaves] != [np.shape(t) for t in like]:
        return None
    return jax.tree_util.tree_map(lambda v, t: jax.numpy.asarray(v, t.dtype), wide, template)
