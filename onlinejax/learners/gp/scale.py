"""The window's scale estimate ``ĉ``: predictive variances that do not depend on the data's scale.

Scale-free uncertainty
----------------------
The default hyperparameters (1, 0.1, 1) are unit-scale guesses, and a tune
fits one window; three mechanisms made tuned windows on raw data
overconfident, each handled without knowing the data's scale in
advance:

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
  (:func:`~onlinejax.learners.gp.hyperparameters.tune_hyperparameters`);
* with a smooth kernel on a window with a jump, or on noise-free targets,
  the tuned noise sat at the dtype's floor of the signal variance (itself
  collapsed when an OLS mean explained the targets), so the next jump or
  drift scored huge ``z``. A tune keeps the noise variance at least
  ``GPTuneOptions.noise_floor`` times the window's target variance.

The first is :func:`window_scale` (with :func:`mean_dof`), kept in the state by
:func:`onlinejax.learners.gp.window.step_one`; the other two are fields of the tune's
options, :class:`onlinejax.learners.gp.hyperparameters.GPTuneOptions`.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from .params import noise_var, signal_var

Array = jax.Array

__all__ = ["window_scale"]


def mean_dof(mean, n_features: int):
    """Coefficients the mean function fits: 0 (zero), 1 (average), ``d + 1`` (OLS); an array for a traced index."""
    if isinstance(mean, str):
        return {"zero": 0, "average": 1, "ols": n_features + 1}[mean]
    kind = jnp.asarray(mean)
    return jnp.where(kind == 2, n_features + 1, kind)


def window_scale(s, dof_mean) -> Array:
    """The window's estimate ``ĉ >= 1`` of the overall scale of ``K_y``: ``[]``.

    ``s`` is a :class:`~onlinejax.learners.gp.window.GPWindowState`; ``dof_mean`` the mean function's coefficients.

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
    ``p = dof_mean``, :func:`mean_dof`)::

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
