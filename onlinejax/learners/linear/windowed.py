"""Sliding-window Bayesian linear regression with exact rank-1 downdates.

The posterior is always that of the last ``w`` items (thesis 5.2.2 and
5.4.1.4, eq. 5.8–5.11): each ``learn`` evicts the oldest item of a fixed-size
ring buffer by a rank-1 *downdate* of the square-root covariance and absorbs
the new item by a rank-1 update, both ``O(d²)``. Model and posterior are
Bishop's (ch. 3, eq. 3.53–3.54) on the window's items::

    w ~ N(0, diag(alpha)⁻¹),   y | x, w ~ N(xᵀw, 1/beta)
    S⁻¹ = diag(alpha) + beta Σ_window x_i x_iᵀ,   m = beta S Σ_window x_i y_i

The learner in one file
-----------------------
* :class:`WindowedBayesState`: the state;
* :func:`init`: the prior state (empty window);
* :func:`learn_one`: slide the window by one item (downdate the oldest, update the new);
* :func:`predict_one`: the predictive ``N(xᵀm, s²(1 + beta xᵀSx))`` (Bishop eq.
  3.58–3.59, or thesis eq. 4.17's ``s²``);
* :func:`evict`: evict the oldest item;
* :func:`tune`: re-standardise, type-II ML (Bishop 3.5.2) and refit on the window;
* :func:`windowed_bayes_linreg`: validates the static options, binds them and
  returns a :class:`~onlinejax.Learner` whose boundary skips non-finite items
  (``make_learner(skip_nonfinite=True)``): the pure functions assume finite items.

The factory's static options, :class:`~onlinejax.learners.linear.windowed_options.WindowedOptions`
and their checks, are in :mod:`onlinejax.learners.linear.windowed_options` (re-exported here).

What keeps the downdates accurate over millions of items
--------------------------------------------------------
Downdating is the numerically delicate direction: rounding errors of the
update/downdate pairs accumulate like a random walk, so an incrementally
maintained window posterior slowly drifts from the exact one (float32 is
the hard case). Instead of a periodic ``O(Wd² + d³)`` refactorisation —
which under ``vmap`` turns into a ``select`` that pays for the refactorisation
on *every* step — the learner carries a *shadow* factor that receives only
rank-1 updates (never downdates), starting from the prior. As soon as every
item of the window has entered the shadow (``n_shadow == count``) the shadow
*is* the window's posterior built from updates alone; it replaces the main
factor and a new shadow starts from the prior. Hence the main factor has
undergone at most ``W`` downdates since it was built from scratch, whatever
the stream length: the error is bounded by that of ``2W`` rank-1 operations,
not by ``n``. The cost is one extra rank-1 update per item and a cheap
``where`` for the swap; it is branch-free and vmaps.

Predictive variance after changes
---------------------------------
Both bounds scale ``1 + β xᵀSx`` by a noise variance fitted to the whole
window: ``1/β`` (``"bayes"``, ``β`` from the last evidence ``tune``) or the
window's ``RSS/(n - d)`` (``"asymptotic"``, thesis eq. 4.17). After a drift or
on the far side of a discontinuity both are too small: ``β`` was fitted to the
old concept, the residuals of the few new items are averaged with those of the
old ones, and eq. 4.17 ignores that the weights are biased, not just noisy.
The learner's own one-step errors see all of this, so by default
(``onestep_floor=True``) the noise variance is never below the mean squared
*recursive residual* ``(y - μ)²/(1 + β xᵀSx)`` of the items learned since
the last ``tune`` (the last one to two windows of them): the one-step error
of an item scored before it was learned, which for a correct model has the
same mean as the noise variance (Brown, Durbin & Evans 1975, JRSS B 37:149).
A ``tune`` refits the window and clears it, so in the thesis's state machine
(:func:`onlinejax.wrappers.adaptive.adaptive`) it acts in the cold-start and
high-error phases, where the window is changing. The items the bounds still
miss badly are the first (the prior's prediction) and those that a model
frozen in a stable phase predicts at a change, before the alarm.
"""
from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ...core.base import (Learner, LearnerCores, Prediction, StaticOptions, check_int, check_positive, default_float_dtype,
                          describe_factory, make_learner)
from ...core.linalg import prior_sqrt_cov, sqrt_cov_rank1, variance_floor
from ...core.window import RingBuffer, ring_init, ring_oldest, ring_pop_oldest, ring_push
from .evidence import SufficientStats, evidence_fixed_point, posterior_from_stats
from .features import intercept_features, map_features
from .windowed_options import BOUNDS, WindowedOptions, checked_options

Array = jax.Array

__all__ = [
    "WindowedBayesState",
    "windowed_bayes_linreg",
    "init",
    "learn_one",
    "predict_one",
    "evict",
    "tune",
    "window_stats",
    "BOUNDS",
    "WindowedOptions",
]

class WindowedBayesState(NamedTuple):
    """State of :func:`windowed_bayes_linreg` (``d`` features, buffer capacity ``W``).

    Attributes:
      buffer: :class:`~onlinejax.core.window.RingBuffer` with the window's items
        (``x [W, d]`` raw, unscaled; ``y [W]``).
      mean: ``[d]``; cov_sqrt: ``[d, d]``: posterior ``N(m, WWᵀ)`` of the window's items.
      shadow_mean: ``[d]``; shadow_cov_sqrt: ``[d, d]``: posterior of the
        newest ``n_shadow`` items, built by updates only (see module doc).
      n_shadow: ``[]`` int32.
      window: ``[]`` int32 the window length ``w <= W`` (the buffer's capacity):
        once ``w`` items are in the window, each new item evicts the oldest.
      alpha: ``[d]`` prior precisions (of the weights of the *scaled* features);
        beta: ``[]`` noise precision.
      prior_alpha: ``[d]`` the prior precisions given to ``init`` (of the raw
        features' weights); ``tune_evidence=False`` rebuilds ``alpha`` from them.
      scale: ``[d]`` the feature scales ``s`` fixed at the last ``tune``: the
        learner works on ``x / s`` (all 1 before the first tune and with
        ``standardize=False``); see :func:`tune`.
      resid_var: ``[]`` ``s² = RSS/(n - d)`` of the window's residuals under the
        current mean (thesis eq. 4.17); ``Σy²/n`` while ``n <= d + 2``, ``1/beta``
        on an empty window (:func:`_resid_var`).
      onestep_sum: ``[2]`` sums of the squared recursive residuals
        ``(y - μ)²/(1 + β xᵀSx)`` of the items learned in the current and the
        previous epoch of ``window`` learned items since the last ``tune``,
        each scored before it was learned; onestep_n: ``[2]`` their counts (see
        the module doc).
      n_seen, n_skipped: ``[]`` int32 counters.
      options: the factory's ``bounds`` and ``onestep_floor`` (no arrays: part of the tree
        structure, so a checkpoint of one configuration does not load into the other;
        :class:`~onlinejax.core.base.StaticOptions`).
    """

    buffer: RingBuffer
    mean: Array
    cov_sqrt: Array
    shadow_mean: Array
    shadow_cov_sqrt: Array
    n_shadow: Array
    window: Array
    alpha: Array
    prior_alpha: Array
    beta: Array
    scale: Array
    resid_var: Array
    onestep_sum: Array
    onestep_n: Array
    n_seen: Array
    n_skipped: Array
    options: StaticOptions = StaticOptions()


def window_stats(buf: RingBuffer) -> SufficientStats:
    """Sufficient statistics of the window's valid items, computed from scratch (``O(Wd²)``)."""
    w = buf.valid.astype(buf.x.dtype)
    X = buf.x * w[:, None]
    Y = buf.y * w
    return SufficientStats(X.T @ X, X.T @ Y, Y @ Y, jnp.sum(w))


def _resid_var(buf, mean, beta, d, scale):
    """Eq. 4.17's ``s² = RSS/(n - d)``; while ``n <= d + 2``, ``Σy²/n`` (``1/beta`` while that is 0).

    With ``n <= d`` items the fit interpolates and its residuals say nothing
    about the noise, and with one or two residual degrees of freedom ``s²`` is
    often far below the noise; the residual variance of the nested model
    without parameters (prediction 0, the prior mean) is defined from the first
    item on and does not pretend to know the noise (``1/beta`` would claim unit
    noise whatever the targets' scale).
    """
    v = buf.valid
    r = (buf.y - (buf.x / scale) @ mean) * v
    y = buf.y * v
    n = buf.count
    nf = jnp.maximum(n, 1).astype(mean.dtype)
    ms = (y @ y) / nf
    # all-zero targets (a standardised first item) carry no scale: fall back to 1/beta, never to 0;
    # an exact fit is floored at the dtype's resolution of the targets' scale, and a window of zeros
    # (a stuck sensor, standardised) at a tiny positive variance, so that no predictive variance is 0
    s2 = jnp.where(n > d + 2, (r @ r) / jnp.maximum(n - d, 1).astype(mean.dtype),
                   jnp.where((n > 0) & (ms > 0), ms, 1.0 / beta))
    return jnp.maximum(s2, variance_floor(ms))


def _onestep_var(s) -> Array:
    """Mean squared recursive residual of the items learned in the last one to two epochs (0 if none)."""
    n = s.onestep_n[0] + s.onestep_n[1]
    return (s.onestep_sum[0] + s.onestep_sum[1]) / jnp.maximum(n, 1.0)


def _onestep_sums(s: WindowedBayesState, xs: Array, y: Array) -> tuple[Array, Array]:
    """``(onestep_sum, onestep_n)`` after scoring ``(xs, y)`` (``xs`` scaled) before it is learned.

    The item's one-step error is taken under the posterior that predicts it
    (before the eviction) and counted once that posterior rests on ``>= d``
    items (before, the error measures the prior). Epochs of ``window`` learned
    items roll over, so an error counts for one to two windows.
    """
    f = s.cov_sqrt.T @ xs
    use = (s.buffer.count >= s.mean.shape[-1]).astype(xs.dtype)
    r2 = use * (y - xs @ s.mean) ** 2 / (1.0 + s.beta * (f @ f))
    osum, on = s.onestep_sum, s.onestep_n
    roll = on[0] >= s.window
    return (jnp.where(roll, jnp.stack([r2, osum[0]]), osum.at[0].add(r2)),
            jnp.where(roll, jnp.stack([use, on[0]]), on.at[0].add(use)))


def _ridge_floor(n: Array, beta: Array) -> Array:
    """Smallest prior precision of a standardised weight: ``sqrt(eps)·β·n`` (``n`` valid items).

    With unit-RMS features the data precision ``β·XᵀX`` has diagonal ``β·n``;
    directions it determines less well than ``sqrt(eps)`` of that are rounding
    noise in the dtype (jitter from the dtype, as in tinygp): the floor keeps
    the condition number of ``Λ`` under ``1/sqrt(eps)``, so its factor's relative
    error ``~ d·eps·κ`` stays small (``100·eps`` would allow ``κ ~ 10⁶`` and
    errors of order 1 in float32 at ``d = 22``). It binds for priors far weaker
    than the data, such as the thesis's BayesianMLE (prior ``10⁻⁴`` on raw
    weights, i.e. ~10⁻¹² on the scaled ``x²`` weights) on collinear mapped
    features, whose float32 factor would otherwise be rounding noise.
    """
    return jnp.sqrt(jnp.finfo(beta.dtype).eps) * beta * jnp.maximum(n, 1.0)


def _maybe_swap(s: WindowedBayesState) -> WindowedBayesState:
    """Promote the shadow to the main factor once it holds every item of the window (module doc)."""
    swap = s.n_shadow == s.buffer.count
    W0 = prior_sqrt_cov(s.alpha)
    m0 = jnp.zeros_like(s.mean)
    return s._replace(
        mean=jnp.where(swap, s.shadow_mean, s.mean),
        cov_sqrt=jnp.where(swap, s.shadow_cov_sqrt, s.cov_sqrt),
        shadow_mean=jnp.where(swap, m0, s.shadow_mean),
        shadow_cov_sqrt=jnp.where(swap, W0, s.shadow_cov_sqrt),
        n_shadow=jnp.where(swap, 0, s.n_shadow),
    )


def _finish(s: WindowedBayesState, bounds: str) -> WindowedBayesState:
    """After the window changed: the shadow swap, and eq. 4.17's ``s²`` for the asymptotic bounds."""
    s = _maybe_swap(s)
    if bounds == "asymptotic":
        s = s._replace(resid_var=_resid_var(s.buffer, s.mean, s.beta, s.mean.shape[-1], s.scale))
    return s


def _check_window(window, capacity: int) -> None:
    if not isinstance(window, jax.core.Tracer):
        wv = np.asarray(window)
        if wv.shape != () or not np.issubdtype(wv.dtype, np.integer) or not 1 <= int(wv) <= capacity:
            raise ValueError(f"window: must be an integer in [1, capacity = {capacity}], got {window!r}")


def init(n_features: int, capacity: int, alpha=1.0, beta=1.0, window=None, dtype=None, *, bounds: str = "bayes",
         onestep_floor: bool = True) -> WindowedBayesState:
    """The prior state: an empty window, posterior ``N(0, diag(alpha)⁻¹)``, shadow = prior.

    Args:
      n_features: ``d`` (static; the intercept column included).
      capacity: the ring buffer's size ``W`` (static).
      alpha: prior precision, ``[]`` or ``[d]``, > 0.
      beta: noise precision ``[]``, > 0.
      window: the window length ``w``, an integer in ``[1, W]`` (an array in
        the state, so it vmaps); default ``W``.
      dtype: floating dtype; default float32 (float64 when x64 is enabled).
      bounds, onestep_floor: the static options the state is for (those given to
        :func:`learn_one` / :func:`predict_one`), recorded in ``options``.
    Raises:
      ValueError: naming the argument, for out-of-range concrete values.
    """
    check_positive(alpha, "alpha")
    check_positive(beta, "beta")
    window = capacity if window is None else window
    _check_window(window, capacity)
    dt = dtype or default_float_dtype()
    a = jnp.broadcast_to(jnp.asarray(alpha, dt), (n_features,))
    b = jnp.asarray(beta, dt)
    W0 = prior_sqrt_cov(a)
    z = jnp.zeros((n_features,), dt)
    return WindowedBayesState(
        buffer=ring_init(capacity, n_features, dt), mean=z, cov_sqrt=W0, shadow_mean=z, shadow_cov_sqrt=W0,
        n_shadow=jnp.zeros((), jnp.int32), window=jnp.asarray(window, jnp.int32), alpha=a, prior_alpha=a, beta=b,
        scale=jnp.ones((n_features,), dt), resid_var=1.0 / b, onestep_sum=jnp.zeros((2,), dt),
        onestep_n=jnp.zeros((2,), dt), n_seen=jnp.zeros((), jnp.int32), n_skipped=jnp.zeros((), jnp.int32),
        options=StaticOptions.of(bounds=bounds, onestep_floor=bool(onestep_floor)),
    )


def learn_one(state: WindowedBayesState, x: Array, y: Array, *, bounds: str = "bayes",
              onestep_floor: bool = True) -> WindowedBayesState:
    """Slide the window by one finite item (``x: [d]`` raw, ``y: []``) in ``O(d²)``.

    Thesis eq. 5.8–5.11 as square-root rank-1 operations on the scaled input
    ``x/s``: when the window is full the oldest item is downdated out,
    ``S⁻¹ ← S⁻¹ - βx_oldx_oldᵀ``, then the new item is updated in,
    ``S⁻¹ ← S⁻¹ + βxxᵀ`` (Bishop eq. 3.53–3.54 recursively), to the main factor
    and to the shadow; the buffer stores the raw item and the shadow replaces
    the main factor once it holds the whole window (module doc).

    Args:
      state: the current state.
      x: ``[d]`` raw input; y: ``[]`` target. Both finite: the Learner's
        boundary skips non-finite items before this runs.
      bounds: (static) ``"asymptotic"`` also refreshes eq. 4.17's ``s²`` (``O(Wd)``).
      onestep_floor: (static) score the item's recursive residual before
        learning it (:func:`_onestep_sums`).
    Returns:
      The state with the window moved on by one item.
    """
    s = state
    full = s.buffer.count >= s.window
    xo, yo, _ = ring_oldest(s.buffer)
    xo = jnp.where(full, xo, 0.0) / s.scale  # zero vector = exact no-op downdate
    xs = x / s.scale
    r = 1.0 / s.beta
    osum, on = _onestep_sums(s, xs, y) if onestep_floor else (s.onestep_sum, s.onestep_n)
    Wm, m = sqrt_cov_rank1(s.cov_sqrt, s.mean, xo, yo, r, -1.0)
    Wm, m = sqrt_cov_rank1(Wm, m, xs, y, r, 1.0)
    Ws, ms = sqrt_cov_rank1(s.shadow_cov_sqrt, s.shadow_mean, xs, y, r, 1.0)
    new = s._replace(
        buffer=ring_push(s.buffer, x, y, window=s.window), mean=m, cov_sqrt=Wm, shadow_mean=ms, shadow_cov_sqrt=Ws,
        n_shadow=s.n_shadow + 1, n_seen=s.n_seen + 1, onestep_sum=osum, onestep_n=on,
    )
    return _finish(new, bounds)


def evict(state: WindowedBayesState, *, bounds: str = "bayes") -> WindowedBayesState:
    """Evict the oldest item of the window (thesis eq. 5.8–5.11, a rank-1 downdate); no-op on an empty window.

    ``bounds`` (static): as in :func:`learn_one`.
    """
    s = state
    xo, yo, present = ring_oldest(s.buffer)
    xo = jnp.where(present, xo, 0.0) / s.scale  # zero vector = exact no-op downdate
    Wm, m = sqrt_cov_rank1(s.cov_sqrt, s.mean, xo, yo, 1.0 / s.beta, -1.0)
    return _finish(s._replace(buffer=ring_pop_oldest(s.buffer), cov_sqrt=Wm, mean=m), bounds)


def predict_one(state: WindowedBayesState, x: Array, *, bounds: str = "bayes", onestep_floor: bool = True) -> Prediction:
    """Predictive ``N(x'ᵀm, s²(1 + β x'ᵀSx'))`` for a raw ``x: [d]``, ``x' = x/s`` the scaled input.

    ``bounds="bayes"``: ``s² = 1/β``, Bishop eq. 3.58–3.59; ``"asymptotic"``:
    ``s²`` the window's ``RSS/(n - d)``, thesis eq. 4.17 (``βS`` standing for
    ``(XXᵀ)⁻¹``). ``onestep_floor``: ``s²`` is at least the mean squared
    recursive residual since the last ``tune`` (module doc). Both static.
    """
    x = x / state.scale
    f = state.cov_sqrt.T @ x
    q = f @ f
    s2 = state.resid_var if bounds == "asymptotic" else 1.0 / state.beta
    if onestep_floor:
        s2 = jnp.maximum(s2, _onestep_var(state))
    return Prediction(x @ state.mean, s2 * (1.0 + state.beta * q))


def _feature_scale(buf: RingBuffer) -> Array:
    """``[d]`` root mean square of each feature over the window; 1 for a feature that is 0 on the whole window."""
    v = buf.valid.astype(buf.x.dtype)
    ms = jnp.sum(v[:, None] * buf.x ** 2, 0) / jnp.maximum(jnp.sum(v), 1.0)
    rms = jnp.sqrt(ms)
    return jnp.where(rms > jnp.finfo(rms.dtype).tiny, rms, 1.0)  # a zero feature's weight stays at the prior


def tune(state: WindowedBayesState, n_iter: int = 100, *, standardize: bool = True, tune_evidence: bool = True,
         bounds: str = "bayes", prior_floor: float | None = None) -> WindowedBayesState:
    """Refit the model on the window and rebuild both factors from the buffer (``O(Wd² + d³)``).

    1. ``standardize``: fix the scales ``s`` at the features' RMS over the window.
    2. ``tune_evidence``: re-estimate a shared ``alpha`` and ``beta`` by type-II
       ML on the window's statistics of ``x/s`` (Bishop 3.5.2,
       :func:`~onlinejax.learners.linear.evidence.evidence_fixed_point`); otherwise keep
       ``beta`` and ``init``'s prior on the raw weights, ``prior_alpha/s²`` on
       the scaled ones. With ``prior_floor=c`` the evidence estimate is at
       least ``c·prior_alpha/s²``: no raw weight's prior gets more than ``1/c``
       times looser than ``init``'s.
    3. ``standardize``: floor ``alpha`` at :func:`_ridge_floor`.
    4. Posterior from the statistics (Bishop eq. 3.53–3.54); the shadow
       restarts from the prior and the one-step sums are cleared.

    Args:
      state: the current state.
      n_iter: fixed-point iterations of the evidence maximisation (static).
      standardize, tune_evidence, bounds, prior_floor: static options of :func:`windowed_bayes_linreg`.
    """
    s = state
    if standardize:
        s = s._replace(scale=_feature_scale(s.buffer))
    st = window_stats(s.buffer._replace(x=s.buffer.x / s.scale))
    # init's prior on the raw weights w_j = w'_j / s_j, on the scaled ones (a scale between tiny and
    # sqrt(tiny) would overflow s⁻²)
    scale = jnp.maximum(s.scale, jnp.sqrt(jnp.finfo(s.scale.dtype).tiny))
    raw_prior = s.prior_alpha * scale ** -2
    if tune_evidence:
        a, b = evidence_fixed_point(st, jnp.mean(s.alpha), s.beta, n_iter)
        alpha = jnp.broadcast_to(a, s.alpha.shape)
        if prior_floor is not None:
            # a feature that barely varies over the window gets a tiny scale s_j; the shared evidence
            # estimate would then leave its raw weight almost unconstrained, to be extrapolated wildly
            alpha = jnp.maximum(alpha, prior_floor * raw_prior)
    else:  # the model stays: init's prior on the raw weights, and beta
        alpha, b = raw_prior, s.beta
    if standardize:
        alpha = jnp.maximum(alpha, _ridge_floor(st.n, b))
    Wm, m = posterior_from_stats(st, alpha, b)
    s = s._replace(alpha=alpha, beta=b, mean=m, cov_sqrt=Wm, shadow_mean=jnp.zeros_like(m),
                   shadow_cov_sqrt=prior_sqrt_cov(alpha), n_shadow=jnp.zeros_like(s.n_shadow),
                   onestep_sum=jnp.zeros_like(s.onestep_sum), onestep_n=jnp.zeros_like(s.onestep_n))
    # an empty window: main = shadow = prior, consistent with the swap rule
    return s._replace(resid_var=_resid_var(s.buffer, m, b, m.shape[-1], s.scale)) if bounds == "asymptotic" else s


@describe_factory
def windowed_bayes_linreg(n_features: int, window: int, *, alpha=1.0, beta=1.0, intercept: bool = False,
                          options: WindowedOptions = WindowedOptions(), dtype=None) -> Learner:
    """Bayesian linear regression on the last ``window`` items, as a :class:`~onlinejax.Learner`.

    Args:
      n_features: ``d`` (static).
      window: the window length ``w >= 1``: the default of ``init(window=)``.
        It is an array in the state, so windows of different lengths share one
        compiled program (the thesis grid's five windows compile once; a buffer
        larger than ``window``: ``options.capacity``).
      alpha: default prior precision, ``[]`` or ``[d']`` (``d' = d + intercept``).
      beta: default noise precision.
      intercept: append a constant feature (static).
      options: :class:`WindowedOptions` (static): the predictive bound (``"bayes"`` or the thesis's
        ``"asymptotic"``), the tune's standardising and evidence steps, the buffer's capacity, the
        one-step floor and the prior floor.
      dtype: default floating dtype.
    Returns:
      A :class:`Learner` over :func:`init`, :func:`learn_one`,
      :func:`predict_one`, :func:`evict` and :func:`tune` with these options
      bound: ``init(alpha=, beta=, window=, dtype=)``; ``evict(state)``
      evicts the oldest item; ``tune(state, n_iter=100)`` re-estimates
      ``alpha``/``beta`` on the window by type-II ML and rebuilds the factor
      from the buffer. A non-finite item is skipped (``n_skipped`` counts it).
    Raises:
      ValueError: naming the argument or the record's field (``options.capacity: ...``).
      TypeError: ``options`` not a :class:`WindowedOptions`.
    """
    d = check_int(n_features, "n_features", 1)
    w_default = int(window) if not isinstance(window, bool) else 0
    if w_default < 1 or w_default != window:
        raise ValueError(f"window: must be an integer >= 1, got {window!r}")
    o = checked_options(options, w_default)
    check_positive(alpha, "alpha")
    check_positive(beta, "beta")
    dm = d + int(bool(intercept))
    static = dict(bounds=o.bounds, onestep_floor=o.onestep_floor)

    def _init(alpha=alpha, beta=beta, window=w_default, dtype=dtype):
        return init(dm, o.capacity, alpha, beta, window, dtype, **static)

    learner = make_learner(
        init=_init, n_features=dm, skip_nonfinite=True,
        learn_one=partial(learn_one, **static),
        predict_one=partial(predict_one, **static),
        cores=LearnerCores(
            evict=partial(evict, bounds=o.bounds),
            tune=jax.jit(partial(tune, standardize=o.standardize, tune_evidence=o.tune_evidence, bounds=o.bounds,
                                 prior_floor=o.prior_floor),
                         static_argnames="n_iter"),
        ),
    )
    return map_features(intercept_features(d), learner) if intercept else learner
