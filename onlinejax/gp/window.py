"""Sliding-window Gaussian-process regression with incremental Cholesky updates.

Thesis 4.3.1 and 5.4.3 (predict / update / tune, eq. 5.12–5.15). The thesis
kept the explicit inverse of ``K + σ_n²I`` and updated it with block-inverse
formulas; in float32 that is silently wrong once the kernel matrix is
ill-conditioned (issue 3 measured errors up to 18 on unit-scale targets).
Here the window is kept in **time order** (oldest first, empty slots as
decoupled identity rows at the front) with the **inverse Cholesky factor**
``R = L⁻¹`` of ``K_y = K + σ_n²I = LLᵀ`` (so ``K_y⁻¹ = RᵀR`` and every solve
is a matrix-vector product — XLA:CPU's triangular solves cost 1–5 µs each at
W = 64):

* *evict the oldest* = drop the first row/column: the trailing block's
  factor is ``chol(L₂₂L₂₂ᵀ + l₂₁l₂₁ᵀ)``, a rank-1 **update** (never a
  downdate) whose inverse factor has a closed form
  (:func:`onlinejax.linalg.inv_chol_drop_first`);
* *append the newest* = bordering: ``c = Rk``,
  ``δ = sqrt(k(x,x) + σ_n² - cᵀc)`` floored at ``σ_n`` — the exact Schur
  complement of ``K_y`` is ``>= σ_n²``, so the floor is never wrong and a
  duplicate input can never break positive definiteness
  (:func:`onlinejax.linalg.inv_chol_append`);
* no periodic rebuild is needed, however long the stream: whatever its
  rounding, ``R`` is the exact inverse factor of *some* matrix
  ``K̂ = K_y + Δ`` over the items in the window. Eviction removes the first
  row and column of ``K̂`` and appending adds an exact new row and column,
  so a perturbation ``Δ_ij`` made on one step survives only while both
  items ``i`` and ``j`` stay in the window: ``Δ`` is the rounding of the
  last ``W`` steps at most, never an accumulation over the stream (measured
  in float32: the errors after 10⁶ items equal those after 5·10³, see
  ``benchmarks/RESULTS.md``; ``tests/test_gp.py`` checks 10⁵ items). The windowed *linear* learner differs: its
  downdates subtract from a posterior that carries the whole history, so it
  keeps a shadow factor (:mod:`onlinejax.linear.windowed`);
* the noise variance is floored at ``4e-3·σ_f²`` in float32, ``1e-6·σ_f²`` in float64 (see
  :func:`~onlinejax.gp.kernels.noise_floor_rel`), which bounds the condition
  number whatever the tuner proposes. The argument above bounds how long a
  rounding error survives, not how much it is amplified: the factor's error
  grows like ``u·κ^1.8``, so on a nearly rank-one window it compounds over
  the steps until the floor stops it. With the earlier floors (``2048·eps``,
  ``100·eps``) a long-lengthscale window lost all accuracy in ~20 steps.

Per item (:func:`onlinejax.linalg.inv_chol_slide`): the eviction and the
append are one fused step that reads ``R`` three times (matrix-vector
products) and writes it once, with one prefix sum over rows. The state keeps the
*whitened residuals* ``z = Rr`` rather than ``K_y⁻¹r``, so a prediction needs
one matrix-vector product, ``v = Rk``: mean ``m(x) + vᵀz``, latent variance
``k(x, x) - vᵀv``; ``step`` (predict then learn) shares ``k`` and ``v``
between the two. Predictions return the
*observed* variance (latent + noise), so intervals cover targets, not just the
latent function (the thesis's excluded the noise; its "99.9 %" intervals
covered 48–97 %); :func:`latent` removes the noise term.

Scale-free uncertainty. The default hyperparameters (1, 0.1, 1) are
unit-scale guesses, and a tune fits one window; three mechanisms made tuned
windows on raw data overconfident by factors of 10²–10⁷ (issue 23), each
handled here without knowing the data's scale in advance:

* until the first tune, and while a new concept fills the window after a
  drift, the hyperparameters do not describe the targets. The predictive
  variance is multiplied by the window's closed-form estimate ``ĉ >= 1`` of
  the overall scale of ``K_y`` (:func:`window_scale`, O(W) per step);
* a tune started from the unit-scale values on inputs of scale 10–100
  stalled where the likelihood is flat in the lengthscales (every pair of
  points many lengthscales apart) and returned a white-noise fit that
  predicts the mean function everywhere (the zero-mean GP predicts 0). The
  tune now also starts from the window's statistics, and a weak log-normal
  prior keeps each lengthscale near the window's input spread
  (:func:`tune_hyperparameters`);
* with a smooth kernel on a window with a jump, or on noise-free targets,
  the tuned noise sat at the dtype's floor of the signal variance (itself
  collapsed when an OLS mean explained the targets), so the next jump or
  drift scored ``z`` up to 10⁷. A tune keeps the noise variance at least
  ``noise_floor`` times the window's target variance.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.scipy.linalg import solve_triangular

from ..base import Learner, Prediction, check_int, check_positive, default_float_dtype, keep_if, make_learner
from ..linalg import inv_chol_drop_first, inv_chol_slide, lower_triangular_inverse
from .kernels import KERNELS, GPParams, cross, gp_params, noise_var, signal_var
from .likelihood import (MEANS, masked_kernel_matrix, mean_at, mean_index, mean_residuals,
                         residual_log_marginal_likelihood)

Array = jax.Array

#: Default ``gp_window(noise_floor=)``: the noise standard deviation is at least 3.2 % of the
#: window's target standard deviation after a tune. Chosen on stratified thesis-grid samples
#: (W = 64, three means): the best log score of 1e-4, 1e-3, 1e-2; 1e-2 widens intervals further.
NOISE_FLOOR = 1e-3
#: Default ``gp_window(lengthscale_prior=)``: a lengthscale 10× off the input spread costs 0.66 nats.
LENGTHSCALE_PRIOR = 2.0

__all__ = ["GPWindowState", "gp_window", "latent", "tune_hyperparameters", "window_scale", "mean_dof"]


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
      params: :class:`~onlinejax.gp.kernels.GPParams`.
      n_seen, n_skipped, n_tunes: ``[]`` int32.
      mean_kind: ``[]`` int32 index into :data:`~onlinejax.gp.likelihood.MEANS`
        (``0`` zero, ``1`` average, ``2`` OLS); read only by a learner built
        with ``mean_from_state=True``.
      scale: ``[]`` the window's estimate ``ĉ >= 1`` of the overall scale of
        ``K_y`` (:func:`window_scale`), which multiplies the predictive
        variance; 1 with ``gp_window(..., adapt_scale=False)``.
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


def latent(state: GPWindowState, pred: Prediction) -> Prediction:
    """The latent-function predictive (noise variance removed) of an observed-``y`` prediction made from ``state``."""
    return Prediction(pred.mean, jnp.maximum(pred.var - state.scale * noise_var(state.params), 0.0))


def _predictive(s: GPWindowState, x: Array, v: Array, kxx: Array) -> Prediction:
    """Observed-``y`` predictive at ``x`` from ``v = Rk`` (``[W]``) and ``kxx = k(x, x)``: mean ``m(x) + vᵀz``,
    variance ``ĉ·(max(kxx - vᵀv, 0) + σ_n²)`` (R&W eq. 2.25–2.26 with ``K_y⁻¹ = RᵀR``; ``ĉ = s.scale``)."""
    var = jnp.maximum(kxx - v @ v, 0.0) + noise_var(s.params)
    return Prediction(mean_at(s.mean_coef, x) + v @ s.white_resid, s.scale * var)


def mean_dof(mean, n_features: int):
    """Coefficients the mean function fits: 0 (zero), 1 (average), ``d + 1`` (OLS); an array for a traced index."""
    if isinstance(mean, str):
        return {"zero": 0, "average": 1, "ols": n_features + 1}[mean]
    kind = jnp.asarray(mean)
    return jnp.where(kind == 2, n_features + 1, kind)


def window_scale(s: GPWindowState, dof_mean) -> Array:
    """The window's estimate ``ĉ >= 1`` of the overall scale of ``K_y``: ``[]``.

    Multiplying ``K_y`` (signal and noise variance together) by ``c`` leaves
    the predictive mean unchanged and multiplies the predictive variance by
    ``c``. Substituting ``cK_y`` into the log marginal likelihood (R&W eq.
    2.30) and setting its derivative in ``c`` to zero gives the closed-form
    estimate ``ĉ = rᵀK_y⁻¹r / n = |z|²/n`` (kriging's process-variance
    estimate), where ``z = Rr`` are the whitened residuals the state keeps —
    the window's one-step-ahead standardised errors in time order, so ``ĉ``
    is the mean of their squares, O(W) per step. Here, with one prior
    pseudo-observation at ``c = 1`` and the mean function's ``p``
    coefficients taken off the degrees of freedom (REML-style,
    ``p = mean_dof``)::

        ĉ = max(1, (1 + |z|²) / (1 + n - p)).

    At a converged maximum-likelihood tune ``|z|² = n``, so ``ĉ`` is 1 (or
    ``(n + 1)/(n + 1 - p)``) and the tuned model is kept; it grows when the
    window holds targets the hyperparameters do not explain: before the
    first tune (unit-scale defaults on targets of scale 10⁵) and while a new
    concept fills the window after a drift with hyperparameters tuned on
    the old one. It is
    never below 1: a window that fits better than the hyperparameters expect
    does not make the predictions narrower than the tune's noise floor
    allows. While ``n <= p`` the residuals are 0 by construction (the mean
    function interpolates); then the targets' spread stands in,
    ``ĉ = max(1, (1 + Σ(y - ȳ)²/(σ_f² + σ_n²)) / n)``.
    """
    dt = s.y.dtype
    w = s.valid.astype(dt)
    n = jnp.sum(w)
    dof = n - jnp.asarray(dof_mean, dt)
    q = s.white_resid @ s.white_resid
    c_fit = (1.0 + q) / (1.0 + jnp.maximum(dof, 0.0))
    ym = jnp.sum(w * s.y) / jnp.maximum(n, 1.0)
    v0 = signal_var(s.params) + noise_var(s.params)
    c_spread = (1.0 + jnp.sum(w * (s.y - ym) ** 2) / v0) / jnp.maximum(n, 1.0)
    return jnp.maximum(jnp.where(dof >= 1.0, c_fit, c_spread), 1.0)


def _refresh(mean, s: GPWindowState) -> GPWindowState:
    coef, r = mean_residuals(mean, s.X, s.y, s.valid)
    return s._replace(mean_coef=coef, white_resid=s.inv_chol @ r)


def _window_moments(X, y, valid):
    """``(n, sd_x [d], var_y)`` of the window's valid items (population moments; ``n >= 1``)."""
    w = valid.astype(X.dtype)
    n = jnp.maximum(jnp.sum(w), 1.0)
    xm = (w @ X) / n
    sd_x = jnp.sqrt((w @ ((X - xm) ** 2)) / n)
    ym = jnp.sum(w * y) / n
    return n, sd_x, jnp.sum(w * (y - ym) ** 2) / n


def tune_hyperparameters(kernel, mean, params: GPParams, X, y, valid, *, steps: int = 30, restarts: int = 2,
                         learning_rate: float = 0.05, method: str = "lbfgs", n_active=None, noise_floor=0.0,
                         lengthscale_prior=None, from_data: bool = False) -> GPParams:
    """Maximise the window's log marginal likelihood (or posterior, with a prior) over ``params`` with optax.

    The objective is ``log p(y | X, θ) + log p(θ)`` (Rasmussen & Williams
    eq. 5.8 plus a hyperprior: the log of the numerator of their eq. 5.5,
    i.e. type-II MAP), divided by the window's item count, where

    * ``noise_floor = f`` adds ``f·var(y)`` (the window's target variance) to
      the noise variance: the optimiser works on the excess
      ``σ_n² - f·var(y)``, and the returned ``σ_n²`` includes it. A smooth
      kernel fitted to a window with a jump, or to noise-free targets,
      otherwise interpolates with the noise at the dtype's floor
      (:func:`~onlinejax.gp.kernels.noise_floor_rel`): the predictive
      standard deviation becomes a tiny fraction of the targets' spread and
      the next jump or drift scores ``z`` of 10²–10⁷. A nugget relative to
      the data's scale is the usual remedy in GP emulation (Gramacy & Lee
      2012, "Cases for the nugget in modeling computer experiments");
    * ``lengthscale_prior = s`` puts a log-normal prior on each lengthscale,
      ``log ℓ_j ~ N(log sd(x_j), s²)`` with ``sd(x_j)`` the window's input
      spread in dimension ``j`` (none where that spread is 0). The
      likelihood is flat in ``ℓ_j`` once ``ℓ_j`` is far below the inputs'
      spacing (``K ≈ (σ_f² + σ_n²)I``: every ``∂K/∂ℓ_j`` vanishes), and the
      optimiser drifts there to a white-noise fit; the prior pulls it back
      and costs only ``½(log 10/s)²`` nats for a lengthscale 10× off;
    * ``from_data=True`` also considers a start from the window's statistics
      — ``σ_f`` = root mean square of the mean function's residuals,
      ``ℓ_j = sd(x_j)``, ``σ_n`` = 10 % of ``σ_f`` — and begins from
      whichever of it and ``params`` has the better objective. The default
      hyperparameters (1, 0.1, 1) are unit-scale: on inputs of scale 50 and
      targets of scale 10⁵, every pair of points is ~20 lengthscales apart,
      the likelihood is flat in the lengthscales and L-BFGS stopped at a
      white-noise fit (lengthscale where it started, ``σ_f`` orders of
      magnitude short) that predicts the mean function everywhere.

    Runs ``restarts`` starts one after another (``lax.map``; vmapped, the
    starts' L-BFGS line searches ran in lockstep and one W = 64 tune took
    164 ms instead of 2 × 9 ms on a CPU): the start above and
    copies with lengthscales ×0.3 / ×3 and noise ×10 / ×0.1, each for
    at most ``steps`` iterations inside ``lax.while_loop`` (``method="lbfgs"``:
    optax L-BFGS with its zoom line search, stopped early once an iteration
    no longer lowers the loss; ``"adam"``: ``steps`` Adam steps at
    ``learning_rate``), and
    returns the start with the best final objective (NaN runs are ignored;
    if all fail the start is returned, or ``params`` if the objective is not
    finite there). One compiled call; vmaps over windows.
    ``n_active`` (an int32 array, default ``restarts``) runs only the first
    ``n_active`` starts and skips the others, so the number of starts can
    change between calls without recompiling. With the defaults
    (``noise_floor=0``, no prior, ``from_data=False``) this is maximum
    likelihood from ``params``.
    """
    if method not in ("lbfgs", "adam"):
        raise ValueError(f"method: must be 'lbfgs' or 'adam', got {method!r}")
    if not float(noise_floor) >= 0.0:
        raise ValueError(f"noise_floor: must be >= 0, got {noise_floor!r}")
    if lengthscale_prior is not None:
        check_positive(lengthscale_prior, "lengthscale_prior")
    dt = params.log_noise_std.dtype
    n, sd_x, var_y = _window_moments(X, y, valid)
    floor = jnp.asarray(noise_floor, dt) * var_y  # absolute noise-variance floor for this window
    log_floor = jnp.log(jnp.maximum(floor, jnp.finfo(dt).tiny))
    has_floor = floor > 0

    # the mean function does not depend on p: fit it (an SVD for "ols") once, not per evaluation
    r = mean_residuals(mean, X, y, valid)[1]

    # θ: params whose log_noise_std is the log of the *excess* over the floor, σ_n² = exp(2θ_n) + floor
    def to_params(t: GPParams) -> GPParams:
        ln = jnp.where(has_floor, 0.5 * jnp.logaddexp(2.0 * t.log_noise_std, log_floor), t.log_noise_std)
        return t._replace(log_noise_std=ln)

    def from_params(p: GPParams) -> GPParams:
        v = jnp.exp(2.0 * p.log_noise_std)
        return p._replace(log_noise_std=0.5 * jnp.log(jnp.maximum(v - floor, 1e-3 * v)))

    spread = sd_x > 0
    log_sd_x = jnp.log(jnp.where(spread, sd_x, 1.0))

    def log_prior(t: GPParams) -> Array:
        if lengthscale_prior is None:
            return jnp.zeros((), dt)
        u = (t.log_lengthscale - log_sd_x) / lengthscale_prior
        return -0.5 * jnp.sum(jnp.where(spread, u * u, 0.0))

    def loss(t):
        return -(residual_log_marginal_likelihood(kernel, to_params(t), X, r, valid) + log_prior(t)) / n

    base = from_params(params)
    if from_data:
        rms = jnp.sqrt(jnp.sum(r * r) / n)
        ok = rms > 0
        data = GPParams(jnp.where(ok, jnp.log(jnp.where(ok, rms, 1.0)), params.log_signal_std),
                        jnp.where(ok, jnp.log(jnp.where(ok, 0.1 * rms, 1.0)), base.log_noise_std),
                        jnp.where(spread, log_sd_x, params.log_lengthscale).astype(dt))
        l_data, l_base = loss(data), loss(base)
        better = jnp.isfinite(l_data) & ~(l_base <= l_data)
        base = jax.tree_util.tree_map(lambda a, b: jnp.where(better, a, b), data, base)

    offs = jnp.asarray([[0.0, 0.0], [jnp.log(0.3), jnp.log(10.0)], [jnp.log(3.0), jnp.log(0.1)],
                        [0.0, jnp.log(10.0)], [jnp.log(0.3), 0.0], [jnp.log(3.0), 0.0]], dt)
    offs = offs[jnp.arange(restarts) % offs.shape[0]]
    starts = jax.vmap(lambda o: base._replace(log_lengthscale=base.log_lengthscale + o[0],
                                              log_noise_std=base.log_noise_std + o[1]))(offs)
    opt = optax.lbfgs() if method == "lbfgs" else optax.adam(learning_rate)
    vg = optax.value_and_grad_from_state(loss) if method == "lbfgs" else jax.value_and_grad(loss)

    # L-BFGS stops once an iteration no longer lowers the loss (relative change <= 10 eps): past
    # the optimum every zoom line search fails after its full 15 evaluations, so a fixed-length
    # scan spent most of its time there (W = 64: 115 ms -> 24 ms for one start, same optimum)
    ftol = 10.0 * float(jnp.finfo(dt).eps)

    def run(args):
        p0, active = args

        def body(c):
            i, p, st, _, v_old = c
            if method == "lbfgs":
                v, g = vg(p, state=st)
                u, st = opt.update(g, st, p, value=v, grad=g, value_fn=loss)
            else:
                v, g = vg(p)
                u, st = opt.update(g, st, p)
            p_new = optax.apply_updates(p, u)
            finite = jnp.all(jnp.asarray([jnp.all(jnp.isfinite(l)) for l in jax.tree_util.tree_leaves(p_new)]))
            return i + 1, keep_if(finite, p_new, p), st, v_old, v

        def cond(c):
            i, _, _, v_prev, v = c
            stalled = jnp.abs(v_prev - v) <= ftol * jnp.maximum(1.0, jnp.abs(v))
            return active & (i < steps) & ~(stalled & (method == "lbfgs"))

        inf, zero = jnp.asarray(jnp.inf, dt), jnp.zeros((), dt)  # |inf - 0| is not "stalled"
        p = jax.lax.while_loop(cond, body, (jnp.zeros((), jnp.int32), p0, opt.init(p0), inf, zero))[1]
        return p, loss(p)

    n_active = restarts if n_active is None else n_active
    active = jnp.arange(restarts) < n_active
    ps, ls = jax.lax.map(run, (starts, active))
    ls = jnp.where(jnp.isfinite(ls) & active, ls, jnp.inf)
    best = jnp.argmin(ls)
    cand = jax.tree_util.tree_map(lambda a: a[best], ps)
    l_base = loss(base)
    out = keep_if(jnp.isfinite(ls[best]) & ~(ls[best] > l_base), cand, base)
    return keep_if(jnp.isfinite(ls[best]) | jnp.isfinite(l_base), to_params(out), params)


def gp_window(n_features: int, window: int, *, kernel: str = "se", mean: str = "average", signal_std=1.0,
              noise_std=0.1, lengthscale=1.0, freeze_when_full: bool = False, tune_steps: int = 30,
              tune_restarts: int = 2, retune_restarts: int = 1, tune_method: str = "lbfgs",
              mean_from_state: bool = False, noise_floor=NOISE_FLOOR, lengthscale_prior=LENGTHSCALE_PRIOR,
              tune_from_data: bool = True, adapt_scale: bool = True, dtype=None) -> Learner:
    """Sliding-window GP regression as a :class:`~onlinejax.Learner`.

    Args:
      n_features: ``d`` (static).
      window: capacity ``W >= 2`` (static).
      kernel: ``"se"`` (ARD squared exponential), ``"matern32"``, ``"matern52"``.
      mean: ``"zero"``, ``"average"`` (the default) or ``"ols"`` (thesis
        6.2.1 variants). The window's average keeps a GP on data that are not
        centred (raw real streams, a level shift after a drift) from
        reverting to 0 away from the window; an OLS mean fitted on a window
        of 64 items extrapolates linearly and blew up on real data with
        d = 6-10 (``benchmarks/RESULTS.md``, calibration).
      mean_from_state: read the mean function from ``state.mean_kind``, set
        by ``init(mean=...)`` (a name or an index into ``MEANS``, an array
        under ``vmap``; default ``mean``), instead of fixing it at
        construction. The three variants then share one compiled program
        and vmap over the mean (the thesis grid evaluates them so: 15
        programs instead of 45); every learning step and tune fits all three
        means and keeps the chosen one (the OLS fit costs about 3 µs at
        W = 64, d = 2).
      signal_std, noise_std, lengthscale: default hyperparameters (``init`` overrides).
      freeze_when_full: stop learning once the window is full (the batch GP
        baseline trained once on the first ``W`` items).
      tune_steps, tune_restarts, tune_method: see :func:`tune_hyperparameters`.
      retune_restarts: starts used by every tune after the first (at most
        ``tune_restarts``): later tunes begin from parameters already fitted
        to the stream. On 24 thesis-grid streams in the state machine
        (W = 64, OLS mean) 1 instead of 2 gave the same SMSE (0.1056) in 70 %
        of the time.
      noise_floor: a tune keeps the noise variance at least this fraction
        of the window's target variance (static; 0 turns it off; see
        :func:`tune_hyperparameters`).
      lengthscale_prior: standard deviation ``s`` of the tune's log-normal
        prior on each lengthscale around the window's input spread,
        ``log ℓ_j ~ N(log sd(x_j), s²)`` (static; ``None``: maximum likelihood).
      tune_from_data: a tune also starts from the window's statistics
        (``σ_f`` = residuals' root mean square, ``ℓ_j = sd(x_j)``) when that
        start has the better objective than the current hyperparameters.
      adapt_scale: multiply the predictive variance by the window's scale
        estimate ``ĉ >= 1`` (:func:`window_scale`, updated on every step in
        O(W)); ``False`` gives the plain GP predictive of the hyperparameters.
      dtype: default floating dtype.
    Returns:
      A learner; ``init(signal_std=, noise_std=, lengthscale=, dtype=)`` (and ``mean=`` with
      ``mean_from_state``);
      ``downdate(state)`` evicts the oldest item; ``tune(state)`` maximises
      the window's log marginal likelihood plus the hyperprior (type-II
      MAP, see :func:`tune_hyperparameters`) and rebuilds the factor once.
      ``noise_floor=0, lengthscale_prior=None, tune_from_data=False,
      adapt_scale=False`` give the maximum-likelihood GP of the thesis.
    """
    d = check_int(n_features, "n_features", 1)
    W = check_int(window, "window", 2)
    n_starts = check_int(tune_restarts, "tune_restarts", 1)
    n_restarts = min(check_int(retune_restarts, "retune_restarts", 1), n_starts)
    if kernel not in KERNELS:
        raise ValueError(f"kernel: must be one of {tuple(KERNELS)}, got {kernel!r}")
    if mean not in MEANS:
        raise ValueError(f"mean: must be one of {MEANS}, got {mean!r}")
    kfn = KERNELS[kernel]
    gp_params(d, signal_std, noise_std, lengthscale)  # validate defaults
    if not (np.isfinite(noise_floor) and float(noise_floor) >= 0.0):
        raise ValueError(f"noise_floor: must be finite and >= 0, got {noise_floor!r}")
    noise_floor = float(noise_floor)
    if lengthscale_prior is not None:
        check_positive(lengthscale_prior, "lengthscale_prior")
        lengthscale_prior = float(lengthscale_prior)
    adapt_scale, tune_from_data = bool(adapt_scale), bool(tune_from_data)
    static_mean = mean
    mean_from_state = bool(mean_from_state)

    def mean_of(s: GPWindowState):
        return s.mean_kind if mean_from_state else static_mean

    def with_scale(s: GPWindowState) -> GPWindowState:
        if not adapt_scale:
            return s
        return s._replace(scale=window_scale(s, mean_dof(mean_of(s), d)))

    def _init_kwargs(signal_std=signal_std, noise_std=noise_std, lengthscale=lengthscale, dtype=dtype, **kw):
        if kw and (set(kw) != {"mean"} or not mean_from_state):
            raise TypeError(f"init: unexpected arguments {sorted(kw)}"
                            + ("" if mean_from_state else " (mean= needs gp_window(..., mean_from_state=True))"))
        m = kw.get("mean", static_mean)
        if isinstance(m, (str, int)):
            kind = jnp.asarray(mean_index(m), jnp.int32)
        else:  # an array (vmapped grid hyperparameter): the index, possibly as a float
            if not isinstance(m, jax.core.Tracer):  # a concrete one is checked, not silently read as "zero"
                if jnp.ndim(m) != 0:
                    raise ValueError(f"mean: expected a name or a scalar index, got shape {jnp.shape(m)}")
                mean_index(float(m))
            kind = jnp.asarray(m).astype(jnp.int32)
        return _init(signal_std, noise_std, lengthscale, dtype, kind)

    def _init(signal_std, noise_std, lengthscale, dtype, kind):
        dt = dtype or default_float_dtype()
        p = gp_params(d, signal_std, noise_std, lengthscale, dt)
        eye = jnp.eye(W, dtype=dt)
        return GPWindowState(
            X=jnp.zeros((W, d), dt), y=jnp.zeros((W,), dt), valid=jnp.zeros((W,), bool), inv_chol=eye,
            white_resid=jnp.zeros((W,), dt), mean_coef=jnp.zeros((d + 1,), dt),
            params=p, n_seen=jnp.zeros((), jnp.int32), n_skipped=jnp.zeros((), jnp.int32),
            n_tunes=jnp.zeros((), jnp.int32), mean_kind=kind, scale=jnp.ones((), dt),
        )

    def _step(s: GPWindowState, x, y):
        """Predict ``x`` from the current window, then slide the window onto ``(x, y)``."""
        ok = jnp.all(jnp.isfinite(x)) & jnp.isfinite(y)
        p = s.params
        nv = noise_var(p)
        k = cross(kfn, p, s.X, x) * s.valid
        kxx = kfn(p, x, x)
        X = jnp.concatenate([s.X[1:], x[None]])
        Y = jnp.concatenate([s.y[1:], jnp.asarray(y, s.y.dtype)[None]])
        V = jnp.concatenate([s.valid[1:], jnp.ones((1,), bool)])
        coef, r = mean_residuals(mean_of(s), X, Y, V)
        # main: evict the front row (a rank-1 update; identity if empty) and append, fused
        R, z, v = inv_chol_slide(s.inv_chol, k, kxx + nv, nv, r)
        pred = _predictive(s, x, v, kxx)
        new = with_scale(s._replace(X=X, y=Y, valid=V, inv_chol=R, white_resid=z, mean_coef=coef,
                                    n_seen=s.n_seen + 1))
        go = ok & ~jnp.all(s.valid) if freeze_when_full else ok
        return keep_if(go, new, s._replace(n_skipped=s.n_skipped + (~ok))), pred

    def learn_one(s: GPWindowState, x, y):
        return _step(s, x, y)[0]

    def downdate(s: GPWindowState):
        count = jnp.sum(s.valid.astype(jnp.int32))
        j = W - count  # position of the oldest item; the slots before it are empty (identity)
        R = jnp.roll(jnp.roll(s.inv_chol, -j, axis=0), -j, axis=1)  # valid block first, empty slots last
        R = jnp.eye(W, dtype=R.dtype).at[:-1, :-1].set(inv_chol_drop_first(R))
        R = jnp.roll(jnp.roll(R, j + 1, axis=0), j + 1, axis=1)
        V = jnp.roll(jnp.roll(s.valid, -j).at[0].set(False), j)
        new = s._replace(inv_chol=jnp.where(count > 0, R, s.inv_chol), valid=jnp.where(count > 0, V, s.valid))
        return with_scale(_refresh(mean_of(new), new))

    def predict_one(s: GPWindowState, x):
        v = s.inv_chol @ (cross(kfn, s.params, s.X, x) * s.valid)
        return _predictive(s, x, v, kfn(s.params, x, x))

    def tune(s: GPWindowState):
        n_active = jnp.where(s.n_tunes == 0, n_starts, n_restarts)
        p = tune_hyperparameters(kfn, mean_of(s), s.params, s.X, s.y, s.valid, steps=tune_steps, restarts=n_starts,
                                 method=tune_method, n_active=n_active, noise_floor=noise_floor,
                                 lengthscale_prior=lengthscale_prior, from_data=tune_from_data)
        L = jnp.linalg.cholesky(masked_kernel_matrix(kfn, p, s.X, s.valid))
        R = lower_triangular_inverse(L)  # rebuilt once per tune
        return with_scale(_refresh(mean_of(s), s._replace(params=p, inv_chol=R, n_tunes=s.n_tunes + 1)))

    return make_learner(init=_init_kwargs, learn_one=learn_one, predict_one=predict_one, n_features=d,
                        downdate=downdate, downdate_takes_item=False, tune=jax.jit(tune), step_one=_step)
