"""Sliding-window Gaussian-process regression with incremental Cholesky updates.

Thesis 4.3.1 and 5.4.3 (predict / update / tune, eq. 5.12–5.15).

The module's anatomy (the GP's state, init, learn, predict and formulas are
all here; the helpers they call are named in each docstring):

* :class:`GPWindowState` — the window, its inverse Cholesky factor, the
  whitened residuals, the mean function and the hyperparameters;
* :func:`init` — the empty window;
* :func:`predict_one` — the predictive at one input (R&W eq. 2.25–2.26);
* :func:`step_one` — predict one item, then slide the window onto it;
  :func:`learn_one` is its state; :func:`evict` evicts the oldest item;
* :func:`tune` — type-II MAP hyperparameters
  (:func:`onlinejax.learners.gp.hyperparameters.tune_hyperparameters`, in named pieces
  in :mod:`onlinejax.learners.gp.hyperparameters`) and one rebuild of the factor;
* :func:`latent` — the latent-function predictive; the scale-free variance is
  :func:`onlinejax.learners.gp.scale.window_scale` (:mod:`onlinejax.learners.gp.scale`);
* the factory :func:`gp_window` validates the static options, binds them to
  the functions above (``functools.partial``) and hands them to
  :func:`~onlinejax.core.base.make_learner`, whose boundary skips an item whose
  ``x`` or ``y`` is not finite (``skip_nonfinite=True``).
  Its option records :class:`~onlinejax.learners.gp.window_options.GPHyper` and
  :class:`~onlinejax.learners.gp.window_options.GPWindowOptions` are in
  :mod:`onlinejax.learners.gp.window_options` (re-exported here).

The kernels (SE-ARD, thesis eq. 4.27; Matérn, R&W eq. 4.17) and the
hyperparameters :class:`~onlinejax.learners.gp.params.GPParams` are in
:mod:`onlinejax.learners.gp.kernels`; the masked mean functions, kernel matrix and
log marginal likelihood (thesis eq. 4.29, R&W eq. 2.30) in
:mod:`onlinejax.learners.gp.likelihood`; the factor's update in
:mod:`onlinejax.core.linalg`.

The factor
----------
The thesis kept the explicit inverse of ``K + σ_n²I`` and updated it with
block-inverse formulas; in float32 that is silently wrong once the kernel
matrix is ill-conditioned. Here the window is kept in **time
order** (oldest first, empty slots as decoupled identity rows at the front)
with the **inverse Cholesky factor** ``R = L⁻¹`` of ``K_y = K + σ_n²I = LLᵀ``
(so ``K_y⁻¹ = RᵀR`` and every solve is a matrix-vector product, which on a
CPU is cheaper than a triangular solve):

* *evict the oldest* = drop the first row/column: the trailing block's
  factor is ``chol(L₂₂L₂₂ᵀ + l₂₁l₂₁ᵀ)``, a rank-1 **update** (never a
  downdate) whose inverse factor has a closed form
  (:func:`onlinejax.core.linalg.inv_chol_drop_first`);
* *append the newest* = bordering: ``c = Rk``,
  ``δ = sqrt(k(x,x) + σ_n² - cᵀc)`` floored at ``σ_n`` — the exact Schur
  complement of ``K_y`` is ``>= σ_n²``, so the floor is never wrong and a
  duplicate input can never break positive definiteness
  (:func:`onlinejax.core.linalg.inv_chol_append`);
* no periodic rebuild is needed, however long the stream (but see the
  last point): whatever its
  rounding, ``R`` is the exact inverse factor of *some* matrix
  ``K̂ = K_y + Δ`` over the items in the window. Eviction removes the first
  row and column of ``K̂`` and appending adds an exact new row and column,
  so a perturbation ``Δ_ij`` made on one step survives only while both
  items ``i`` and ``j`` stay in the window: ``Δ`` is the rounding of the
  last ``W`` steps at most, never an accumulation over the stream
  (``tests/test_gp.py`` checks 10⁵ items). The windowed *linear* learner
  differs: its downdates subtract from a posterior that carries the whole
  history, so it keeps a shadow factor (:mod:`onlinejax.learners.linear.windowed`);
* the noise variance is floored at ``4e-3·σ_f²`` in float32, ``1e-6·σ_f²``
  in float64, plus a tenth of that for a sum's other terms' amplitudes
  (:func:`~onlinejax.learners.gp.params.noise_floor_rel`,
  :func:`~onlinejax.learners.gp.params.noise_var`), which
  bounds the condition number whatever the tuner proposes. The argument
  above bounds how long a rounding error survives, not how much it is
  amplified: the factor's error grows like ``u·κ^1.8``, so on a nearly
  rank-one window it compounds over the steps until the floor stops it;
* a kernel that grows with the inputs (``linear()`` on collinear lags of a
  trend several sd out) can still push ``κ`` past what the floor assumes, so a
  step checks its factor: the new item's Schur complement ``k(x,x) + σ_n² -
  vᵀv`` is ``>= σ_n²`` exactly, and one below ``σ_n²/2`` shows a factor that
  lost its accuracy, which the step rebuilds from the window (a Cholesky, as
  a tune does; lazily under ``vmap``).

Per item (:func:`onlinejax.core.linalg.inv_chol_slide`): the eviction and the
append are one fused step that reads ``R`` three times (matrix-vector
products) and writes it once, with one prefix sum over rows. The state keeps
the *whitened residuals* ``z = Rr`` rather than ``K_y⁻¹r``, so a prediction
needs one matrix-vector product, ``v = Rk``: mean ``m(x) + vᵀz``, latent
variance ``k(x, x) - vᵀv``; :func:`step_one` (predict then learn) shares
``k`` and ``v`` between the two. Predictions return the *observed* variance
(latent + noise), so intervals cover targets, not just the latent function
(the thesis's excluded the noise and under-covered); :func:`latent` removes
the noise term.

The predictive variance is scaled by the window's ``ĉ >= 1``, and a tune starts
from the window's statistics with a lengthscale prior and a noise floor, so the
intervals do not depend on the data's scale (:mod:`onlinejax.learners.gp.scale`).
"""
from __future__ import annotations

from functools import partial
from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp

from ...core.checks import check_record
from ...core.base import (Learner, LearnerCores, Prediction, check_int, default_float_dtype, describe_factory, keep_if,
                          make_learner)
from ...core.batching import cond_if_any
from ...core.linalg import inv_chol_drop_first, inv_chol_slide, lower_triangular_inverse, variance_floor
from .hyperparameters import (LENGTHSCALE_PRIOR, LINE_SEARCH_STEPS, NOISE_FLOOR, GPTuneOptions, TuneWindow,  # noqa
                              _finite_tree, _log_prior, _restart_starts, _window_moments, checked_tune_options,
                              excess_to_params, params_to_excess, restart_plan, select_restart, tune_hyperparameters,
                              tune_objective, tune_restart, tune_start, tune_window)
from .kernels import cross, gp_params, resolve_kernel, squared_exponential  # noqa
from .params import GPParams, noise_var, signal_var  # noqa
from .likelihood import (MEANS, _mean_kind, masked_kernel_matrix, mean_at, mean_index, mean_residuals,  # noqa
                         residual_log_marginal_likelihood)
from .scale import mean_dof, window_scale
from .window_options import GPHyper, GPWindowOptions

Array = jax.Array

__all__ = ["GPWindowState", "gp_window", "GPHyper", "GPTuneOptions", "GPWindowOptions", "init", "predict_one", "step_one",
           "learn_one", "evict", "tune", "latent", "window_scale", "tune_hyperparameters", "LENGTHSCALE_PRIOR"]


class GPWindowState(NamedTuple):
    """State of :func:`gp_window` (window capacity ``W``, ``d`` inputs).

    Attributes:
      X: ``[W, d]``; y: ``[W]``; valid: ``[W]`` bool — time order, oldest first,
        empty slots at the front.
      inv_chol: ``[W, W]`` ``R = L⁻¹`` for the lower Cholesky factor ``L`` of the
        masked ``K_y`` (so ``K_y⁻¹ = RᵀR``; every solve is a matrix-vector product).
      white_resid: ``[W]`` whitened residuals ``z = R (y - m(X))`` on the window
        (``K_y⁻¹r = Rᵀz``).
      mean_coef: ``[d + 1]`` mean function ``m(x) = [x, 1]·mean_coef``.
      params: :class:`~onlinejax.learners.gp.params.GPParams`.
      n_seen, n_skipped, n_tunes: ``[]`` int32.
      mean_kind: ``[]`` int32 index into :data:`~onlinejax.learners.gp.likelihood.MEANS`
        (``0`` zero, ``1`` average, ``2`` OLS); read only by the functions
        called with ``mean=None`` (:attr:`GPWindowOptions.mean_from_state`).
      scale: ``[]`` the window's estimate ``ĉ >= 1`` of the overall scale of
        ``K_y`` (:func:`window_scale`), which multiplies the predictive
        variance; 1 without :attr:`GPWindowOptions.adapt_scale`.
    """

    X: Array
    y: Array
    valid: Array
    inv_chol: Array
    white_resid: Array
    mean_coef: Array
    params: GPParams
    n_seen: Array
    n_skipped: Array
    n_tunes: Array
    mean_kind: Array
    scale: Array


# --------------------------------------------------------------------------
# init
# --------------------------------------------------------------------------
def init(n_features: int, window: int, signal_std=1.0, noise_std=0.1, lengthscale=1.0, dtype=None, *,
         mean="average", kernel=None) -> GPWindowState:
    """The empty window.

    Args:
      n_features: ``d`` (static); window: capacity ``W`` (static).
      signal_std, noise_std: ``σ_f``, ``σ_n`` (``[]``, > 0); lengthscale: ``ℓ``, ``[]`` or ``[d]``, > 0
        (stored as logs, :func:`~onlinejax.learners.gp.kernels.gp_params`).
      dtype: floating dtype; default float32 (float64 when x64 is enabled).
      mean: the mean function stored in ``mean_kind``: a name of :data:`MEANS`, its index, or a
        ``[]`` array index (under ``vmap``).
      kernel: the learner's kernel when it is a :class:`~onlinejax.learners.gp.kernels.Kernel` with
        hyperparameters of its own (their defaults go into ``params.extra``); else ignored.
    Returns:
      :class:`GPWindowState` with every slot empty: ``inv_chol = I`` (the
      decoupled identity rows), ``z = 0``, ``m = 0``, ``scale = 1``.
    Raises:
      ValueError: naming the argument, for a bad ``mean`` or a non-positive hyperparameter.
    """
    d, W = int(n_features), int(window)
    kind = _mean_kind(mean)
    dt = dtype or default_float_dtype()
    p = gp_params(d, signal_std, noise_std, lengthscale, dt, kernel=kernel)
    return GPWindowState(
        X=jnp.zeros((W, d), dt), y=jnp.zeros((W,), dt), valid=jnp.zeros((W,), bool), inv_chol=jnp.eye(W, dtype=dt),
        white_resid=jnp.zeros((W,), dt), mean_coef=jnp.zeros((d + 1,), dt),
        params=p, n_seen=jnp.zeros((), jnp.int32), n_skipped=jnp.zeros((), jnp.int32),
        n_tunes=jnp.zeros((), jnp.int32), mean_kind=kind, scale=jnp.ones((), dt),
    )


def _learner_init(n_features: int, window: int, default_mean: str, mean_from_state: bool, kernel, signal_std,
                  noise_std, lengthscale, dtype, /, **kw) -> GPWindowState:
    """:func:`init` behind ``gp_window(...).init``: ``mean=`` only with ``mean_from_state``."""
    if kw and (set(kw) != {"mean"} or not mean_from_state):
        raise TypeError(f"init: unexpected arguments {sorted(kw)}" + ("" if mean_from_state else
                        " (mean= needs gp_window(..., window_options=GPWindowOptions(mean_from_state=True)))"))
    return init(n_features, window, signal_std, noise_std, lengthscale, dtype, mean=kw.get("mean", default_mean),
                kernel=kernel)


# --------------------------------------------------------------------------
# predict
# --------------------------------------------------------------------------
def latent(state: GPWindowState, pred: Prediction) -> Prediction:
    """The latent-function predictive (noise variance removed) of an observed-``y`` prediction made from ``state``.

    ``var - ĉ·σ_n²`` floored at 0 (``ĉ = state.scale``), the shapes of ``pred``.
    """
    return Prediction(pred.mean, jnp.maximum(pred.var - state.scale * noise_var(state.params), 0.0))


def _predictive(s: GPWindowState, x: Array, v: Array, kxx: Array) -> Prediction:
    """Observed-``y`` predictive at ``x`` from ``v = Rk`` (``[W]``) and ``kxx = k(x, x)``: mean ``m(x) + vᵀz``,
    variance ``ĉ·(max(kxx - vᵀv, 0) + σ_n²)`` (R&W eq. 2.25–2.26 with ``K_y⁻¹ = RᵀR``; ``ĉ = s.scale``), at least
    :func:`~onlinejax.core.linalg.variance_floor` of the mean (a window of identical targets has ``ĉ = 0``)."""
    var = jnp.maximum(kxx - v @ v, 0.0) + noise_var(s.params)
    mean = mean_at(s.mean_coef, x) + v @ s.white_resid
    return Prediction(mean, jnp.maximum(s.scale * var, variance_floor(mean * mean)))


def predict_one(state: GPWindowState, x: Array, *, kernel: Callable = squared_exponential) -> Prediction:
    """The predictive distribution of ``y`` at ``x: [d]`` from the window (``mean``, ``var``: ``[]``).

    Thesis eq. 5.12–5.13, R&W eq. 2.25–2.26 with ``K_y⁻¹ = RᵀR``: with
    ``k = k(X, x)`` (:func:`~onlinejax.learners.gp.kernels.cross`, zero on empty slots)
    and ``v = Rk``,

        mean = m(x) + vᵀz,     var = ĉ·(max(k(x, x) - vᵀv, 0) + σ_n²)

    (observed ``y``: noise included; ``ĉ = state.scale``, :func:`window_scale`).

    Args:
      state: :class:`GPWindowState`; x: ``[d]``.
      kernel: a pair kernel ``kernel(params, x1, x2) -> []`` (static), as in
        :mod:`onlinejax.learners.gp.kernels`.
    """
    v = state.inv_chol @ (cross(kernel, state.params, state.X, x) * state.valid)
    return _predictive(state, x, v, kernel(state.params, x, x))


# --------------------------------------------------------------------------
# learn
# --------------------------------------------------------------------------
def _mean_of(s: GPWindowState, mean: Optional[str]):
    """The static mean function's name, or the state's traced ``mean_kind`` when ``mean`` is None."""
    return s.mean_kind if mean is None else mean


def _with_scale(s: GPWindowState, mean: Optional[str], adapt_scale: bool) -> GPWindowState:
    """``s`` with ``scale = ĉ`` (:func:`window_scale`) when ``adapt_scale``, else ``s`` unchanged."""
    if not adapt_scale:
        return s
    return s._replace(scale=window_scale(s, mean_dof(_mean_of(s, mean), s.X.shape[1])))


def _refresh(mean, s: GPWindowState) -> GPWindowState:
    """Refit the mean function on the window and recompute ``z = R(y - m(X))``."""
    coef, r = mean_residuals(mean, s.X, s.y, s.valid)
    return s._replace(mean_coef=coef, white_resid=s.inv_chol @ r)


def step_one(state: GPWindowState, x: Array, y: Array, *, kernel: Callable = squared_exponential,
             mean: Optional[str] = "average", adapt_scale: bool = True,
             freeze_when_full: bool = False) -> tuple[GPWindowState, Prediction]:
    """Predict ``y`` at ``x`` from the current window, then slide the window onto ``(x, y)``.

    The prediction is :func:`predict_one`'s; the update (thesis eq.
    5.14–5.15, done on the inverse factor) evicts the oldest slot and
    appends the item in one fused step,
    :func:`onlinejax.core.linalg.inv_chol_slide`: with ``k = k(X, x)`` and ``v = Rk``
    (shared with the prediction), the new factor is that of ``K_y`` without its
    first row and column and bordered by ``[k'; k(x, x) + σ_n²]``; the mean
    function is refitted on the new window
    (:func:`~onlinejax.learners.gp.likelihood.mean_residuals`), ``z = Rr`` recomputed
    and ``ĉ`` updated (:func:`window_scale`).

    Args:
      state: :class:`GPWindowState`; x: ``[d]``; y: ``[]`` — finite (the
        learner's boundary skips a non-finite item,
        :func:`onlinejax.core.base.skip_nonfinite`).
      kernel: pair kernel (static). mean: a name of :data:`MEANS`, or None to
        read ``state.mean_kind`` (static). adapt_scale: keep ``ĉ``, else 1
        (static). freeze_when_full: return the state unchanged once the window
        is full (the batch-GP baseline; static).
    Returns:
      ``(state, Prediction)`` with ``mean``, ``var``: ``[]``.
    """
    s = state
    p = s.params
    nv = noise_var(p)
    k = cross(kernel, p, s.X, x) * s.valid
    kxx = kernel(p, x, x)
    X = jnp.concatenate([s.X[1:], x[None]])
    Y = jnp.concatenate([s.y[1:], jnp.asarray(y, s.y.dtype)[None]])
    V = jnp.concatenate([s.valid[1:], jnp.ones((1,), bool)])
    coef, r = mean_residuals(_mean_of(s, mean), X, Y, V)
    # evict the front row (a rank-1 update; identity if empty) and append, fused
    R, z, v = inv_chol_slide(s.inv_chol, k, kxx + nv, nv, r)
    pred = _predictive(s, x, v, kxx)
    new = _with_scale(s._replace(X=X, y=Y, valid=V, inv_chol=R, white_resid=z, mean_coef=coef,
                                 n_seen=s.n_seen + 1), mean, adapt_scale)
    # the exact Schur complement is >= σ_n²: one below σ_n²/2 shows a factor that has lost its accuracy
    lost = kxx - v @ v < -0.5 * nv
    new = _rebuilt_where(partial(_rebuilt, kernel=kernel, mean=mean, adapt_scale=adapt_scale), lost, new)
    if freeze_when_full:
        new = keep_if(~jnp.all(s.valid), new, s)
    return new, pred


@partial(jax.custom_jvp, nondiff_argnums=(0,))
def _rebuilt_where(rebuild: Callable, lost: Array, s: GPWindowState) -> GPWindowState:
    """``rebuild(s)`` where ``lost`` (lazily under ``vmap``, :func:`~onlinejax.core.batching.cond_if_any`), else ``s``.

    Differentiated as the identity: in exact arithmetic the rebuilt factor is the one it replaces, so the
    derivative of the state is its own (and the lazy branch has no reverse-mode rule of its own).
    """
    return cond_if_any(rebuild)(lost, s)


@_rebuilt_where.defjvp
def _rebuilt_where_jvp(rebuild, primals, tangents):
    lost, s = primals
    return _rebuilt_where(rebuild, lost, s), tangents[1]


def learn_one(state: GPWindowState, x: Array, y: Array, *, kernel: Callable = squared_exponential,
              mean: Optional[str] = "average", adapt_scale: bool = True,
              freeze_when_full: bool = False) -> GPWindowState:
    """Slide the window onto one finite item (``x: [d]``, ``y: []``): :func:`step_one`'s state.

    Same static options as :func:`step_one` (the prediction is not computed once compiled).
    """
    return step_one(state, x, y, kernel=kernel, mean=mean, adapt_scale=adapt_scale,
                    freeze_when_full=freeze_when_full)[0]


def evict(state: GPWindowState, *, mean: Optional[str] = "average", adapt_scale: bool = True) -> GPWindowState:
    """Evict the oldest item of the window (no-op on an empty window).

    The oldest valid slot ``j`` is rotated to the front, the valid block's
    factor loses its first row and column
    (:func:`onlinejax.core.linalg.inv_chol_drop_first`, a rank-1 update) and the
    slot becomes an empty identity row; the mean function, ``z`` and ``ĉ``
    are refreshed. Static ``mean`` / ``adapt_scale`` as in :func:`step_one`.
    """
    s = state
    W = s.valid.shape[0]
    count = jnp.sum(s.valid.astype(jnp.int32))
    j = W - count  # position of the oldest item; the slots before it are empty (identity)
    R = jnp.roll(jnp.roll(s.inv_chol, -j, axis=0), -j, axis=1)  # valid block first, empty slots last
    R = jnp.eye(W, dtype=R.dtype).at[:-1, :-1].set(inv_chol_drop_first(R))
    R = jnp.roll(jnp.roll(R, j + 1, axis=0), j + 1, axis=1)
    V = jnp.roll(jnp.roll(s.valid, -j).at[0].set(False), j)
    new = s._replace(inv_chol=jnp.where(count > 0, R, s.inv_chol), valid=jnp.where(count > 0, V, s.valid))
    return _with_scale(_refresh(_mean_of(new, mean), new), mean, adapt_scale)


# --------------------------------------------------------------------------
# tune: type-II MAP hyperparameters of the window
# --------------------------------------------------------------------------
def tune(state: GPWindowState, *, kernel: Callable = squared_exponential, mean: Optional[str] = "average",
         tune_options: GPTuneOptions = GPTuneOptions(), adapt_scale: bool = True,
         initial: GPHyper = GPHyper()) -> GPWindowState:
    """Re-estimate the hyperparameters on the window and rebuild the factor once.

    :func:`tune_hyperparameters` (type-II MAP, R&W eq. 5.5/5.8) under ``tune_options`` (:class:`GPTuneOptions`)
    with the starts of :func:`~onlinejax.learners.gp.hyperparameters.restart_plan` (``restarts`` on the first
    tune, ``min(retune_restarts, restarts)`` on later ones, which begin from parameters already fitted to the
    stream; ``retune_from_initial`` also starts the second from ``initial``, the factory's :class:`GPHyper`, not
    ``init``'s overrides; the count is an
    array, so it does not recompile); then ``R = chol(K_y)⁻¹`` from scratch
    (:func:`~onlinejax.learners.gp.likelihood.masked_kernel_matrix`,
    :func:`onlinejax.core.linalg.lower_triangular_inverse`), the mean function,
    ``z`` and ``ĉ`` refreshed and ``n_tunes`` incremented. A window whose
    targets have no spread (at :func:`~onlinejax.core.linalg.variance_floor` of
    their mean) keeps the hyperparameters it had. All options are
    static, their defaults :func:`gp_window`'s; ``kernel``, ``mean`` and
    ``adapt_scale`` as in :func:`step_one`.
    """
    m = _mean_of(state, mean)
    o = checked_tune_options(tune_options)  # at trace time: a direct call gets the field named too
    n_active, second = restart_plan(o, state.n_tunes, lambda: gp_params(
        state.X.shape[1], initial.signal_std, initial.noise_std, initial.lengthscale, state.X.dtype, kernel=kernel))
    p = tune_hyperparameters(kernel, m, state.params, state.X, state.y, state.valid, tune_options=o,
                             n_active=n_active, second=second)
    # targets without spread (a stuck sensor) say nothing about the hyperparameters: a likelihood fitted to
    # them drives the noise and signal variances to 0, and the next items are learned into a singular factor
    _, _, var_y = _window_moments(state.X, state.y, state.valid)
    y_mean = jnp.sum(state.valid * state.y) / jnp.maximum(jnp.sum(state.valid), 1)
    p = keep_if(var_y > variance_floor(y_mean * y_mean), p, state.params)
    return _rebuilt(state._replace(params=p, n_tunes=state.n_tunes + 1), kernel=kernel, mean=mean,
                    adapt_scale=adapt_scale)


def _rebuilt(s: GPWindowState, *, kernel: Callable, mean: Optional[str], adapt_scale: bool) -> GPWindowState:
    """The factor ``R = chol(K_y)⁻¹`` rebuilt from the window, then the mean function, ``z`` and ``ĉ``."""
    L = jnp.linalg.cholesky(masked_kernel_matrix(kernel, s.params, s.X, s.valid))
    s = s._replace(inv_chol=lower_triangular_inverse(L))
    return _with_scale(_refresh(_mean_of(s, mean), s), mean, adapt_scale)


# --------------------------------------------------------------------------
# the learner
# --------------------------------------------------------------------------
@describe_factory
def gp_window(n_features: int, window: int, *, kernel="se", mean: str = "average", initial: GPHyper = GPHyper(),
              tune_options: GPTuneOptions = GPTuneOptions(), window_options: GPWindowOptions = GPWindowOptions(),
              dtype=None) -> Learner:
    """Sliding-window GP regression as a :class:`~onlinejax.Learner`.

    Binds the static options to :func:`init`, :func:`step_one`,
    :func:`learn_one`, :func:`predict_one`, :func:`evict` and :func:`tune`.
    The options come in three immutable, hashable records (equal records
    build the same learner, so its programs compile once).

    Args:
      n_features: ``d`` (static).
      window: capacity ``W >= 2`` (static).
      kernel: ``"se"`` (ARD squared exponential, thesis eq. 4.27),
        ``"matern32"``, ``"matern52"`` (R&W eq. 4.17), a pair kernel
        ``kernel(params, x1, x2) -> []`` with ``params`` a
        :class:`~onlinejax.learners.gp.params.GPParams` and ``x1, x2: [d]`` (tinygp
        style, like the built-ins in :mod:`onlinejax.learners.gp.kernels`; lifted to
        matrices with ``vmap``), or a :class:`~onlinejax.learners.gp.kernels.Kernel`:
        :func:`~onlinejax.learners.gp.kernels.periodic` and sums and products such as
        ``as_kernel("se") + periodic(12.0)``, whose own hyperparameters
        (periods, the second term's amplitude and lengthscales) start at their
        defaults in ``state.params.extra`` and are tuned with the rest.
      mean: ``"zero"``, ``"average"`` (the default) or ``"ols"`` (thesis
        6.2.1 variants). The window's average keeps a GP on data that are not
        centred (raw real streams, a level shift after a drift) from
        reverting to 0 away from the window; an OLS mean fitted on one window
        extrapolates linearly, which is unstable on real data with many
        inputs (``benchmarks/RESULTS.md``, calibration).
      initial: :class:`GPHyper`, the initial hyperparameters ``σ_f``, ``σ_n``,
        ``ℓ`` (``init`` overrides them).
      tune_options: :class:`GPTuneOptions`, the tune's starts, iterations,
        optimiser, noise floor, lengthscale prior and data start.
      window_options: :class:`GPWindowOptions`: ``freeze_when_full``,
        ``mean_from_state``, ``adapt_scale``.
      dtype: default floating dtype.
    Returns:
      A learner; ``init(signal_std=, noise_std=, lengthscale=, dtype=)`` (and ``mean=`` with
      ``mean_from_state``);
      ``evict(state)`` evicts the oldest item; ``tune(state)`` maximises
      the window's log marginal likelihood plus the hyperprior (type-II
      MAP, see :func:`tune_hyperparameters`) and rebuilds the factor once.
      ``step`` and ``learn`` never change the hyperparameters: they stay at
      ``init``'s values until ``tune`` is called. To tune when the stream
      asks for it, wrap the learner in :func:`onlinejax.wrappers.adaptive.adaptive`
      (a tune at the start and after each drift alarm); to tune on a fixed
      schedule in your own ``jit``/``vmap``, call ``tune`` between blocks of
      items (``docs/getting_started.md``, "A GP in your own jit").
      An item whose ``x`` or ``y`` is not finite is skipped inside ``jit``
      (``n_skipped`` counts it).
      ``tune_options=GPTuneOptions(noise_floor=0.0, lengthscale_prior=None, from_data=False)``
      with ``window_options=GPWindowOptions(adapt_scale=False)`` gives the
      maximum-likelihood GP of the thesis.
    Raises:
      ValueError: naming the argument or the record's field (``tune_options.steps: ...``), for a bad
        static option or default.
    """
    d = check_int(n_features, "n_features", 1)
    W = check_int(window, "window", 2)
    kfn = resolve_kernel(kernel, d)
    if mean not in MEANS:
        raise ValueError(f"mean: must be one of {MEANS}, got {mean!r}")
    initial = check_record(initial, GPHyper, "initial").checked(d)
    tune_options = checked_tune_options(tune_options)
    wo = check_record(window_options, GPWindowOptions, "window_options").checked()
    core_mean = None if wo.mean_from_state else mean  # None: read state.mean_kind
    opts = dict(kernel=kfn, mean=core_mean, adapt_scale=wo.adapt_scale)
    learn_opts = dict(opts, freeze_when_full=wo.freeze_when_full)

    def _init(signal_std=initial.signal_std, noise_std=initial.noise_std, lengthscale=initial.lengthscale, dtype=dtype,
              **kw):
        return _learner_init(d, W, mean, wo.mean_from_state, kfn, signal_std, noise_std, lengthscale, dtype, **kw)

    return make_learner(init=_init, learn_one=partial(learn_one, **learn_opts),
                        predict_one=partial(predict_one, kernel=kfn), n_features=d,
                        cores=LearnerCores(step_one=partial(step_one, **learn_opts),
                                           evict=partial(evict, mean=core_mean, adapt_scale=wo.adapt_scale),
                                           tune=jax.jit(partial(tune, **opts, tune_options=tune_options,
                                                                initial=initial))),
                        skip_nonfinite=True)
