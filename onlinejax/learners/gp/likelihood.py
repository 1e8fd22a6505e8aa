"""Masked window quantities: mean functions, kernel matrix, log marginal likelihood.

A window is ``X [W, d]``, ``y [W]`` and a validity mask ``valid [W]``.
Invalid slots are *decoupled* from the valid ones: their rows and columns of
``K_y = K + σ_n²I`` are the identity and their residuals are zero, so every
formula below holds for the valid items alone while shapes stay static.
"""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from ...core.linalg import lower_triangular_inverse
from .kernels import gram
from .params import GPParams, noise_var

Array = jax.Array

__all__ = [
    "MEANS",
    "mean_coefficients",
    "mean_residuals",
    "masked_kernel_matrix",
    "log_marginal_likelihood",
]

MEANS = ("zero", "average", "ols")


def mean_coefficients(mean, X: Array, y: Array, valid: Array) -> Array:
    """``[d + 1]`` coefficients ``c`` of the mean function ``m(x) = [x, 1]·c`` fitted on the window.

    ``"zero"``: ``c = 0``; ``"average"``: the window's mean target; ``"ols"``:
    least squares with intercept on the window (minimum-norm solution while the
    window has fewer than ``d + 1`` distinct points) — thesis 6.2.1's three GP
    variants.

    ``mean`` is one of :data:`MEANS` (static), or a ``[]`` int array indexing
    :data:`MEANS` (``0`` zero, ``1`` average, ``2`` OLS; traced, so one
    compiled program serves all three and vmaps over them: every fit is then
    computed and the chosen one selected).
    """
    d = X.shape[1]
    w = valid.astype(X.dtype)
    n = jnp.maximum(jnp.sum(w), 1.0)
    zero = jnp.zeros((d + 1,), X.dtype)
    if isinstance(mean, str):
        if mean == "zero":
            return zero
        if mean == "average":
            return zero.at[d].set(jnp.sum(w * y) / n)
        if mean == "ols":
            return _ols_coefficients(X, y, w, n)
        raise ValueError(f"mean: must be one of {MEANS}, got {mean!r}")
    kind = jnp.asarray(mean)
    average = zero.at[d].set(jnp.sum(w * y) / n)
    return jnp.where(kind == 2, _ols_coefficients(X, y, w, n), jnp.where(kind == 1, average, zero))


def mean_index(mean) -> int:
    """Index of a mean function's name in :data:`MEANS` (an int index is checked and returned)."""
    if isinstance(mean, str):
        if mean not in MEANS:
            raise ValueError(f"mean: must be one of {MEANS}, got {mean!r}")
        return MEANS.index(mean)
    k = int(mean)
    if k != mean or not 0 <= k < len(MEANS):
        raise ValueError(f"mean: must be one of {MEANS} or an index 0-{len(MEANS) - 1}, got {mean!r}")
    return k


def _mean_kind(mean) -> Array:
    """``[]`` int32 index into :data:`MEANS` of a name, an int or a (possibly traced, possibly float) array."""
    if isinstance(mean, (str, int)):
        return jnp.asarray(mean_index(mean), jnp.int32)
    if not isinstance(mean, jax.core.Tracer):  # a concrete one is checked, not silently read as "zero"
        if jnp.ndim(mean) != 0:
            raise ValueError(f"mean: expected a name or a scalar index, got shape {jnp.shape(mean)}")
        mean_index(float(mean))
    return jnp.asarray(mean).astype(jnp.int32)


def _ols_coefficients(X: Array, y: Array, w: Array, n: Array) -> Array:
    """Least squares with intercept on the weighted rows: centred Householder QR, SVD when rank-deficient.

    Centring removes the intercept column's collinearity with inputs of
    scale 10–100 (which the normal equations could not afford in float32);
    the QR of the centred ``[W, d]`` inputs then gives the slopes with
    ``κ(X_c)``, not ``κ(X_c)²``. While the window holds fewer than ``d + 1``
    affinely independent points the slopes are not identified and the
    minimum-norm least-squares solution of ``[X, 1]`` (an SVD) is returned,
    as before; under ``lax.map`` or outside ``vmap`` that branch runs only
    then (the QR is the cheaper of the two). A non-finite window gives NaN
    coefficients.
    """
    def min_norm(_):
        Z = jnp.concatenate([X, jnp.ones((X.shape[0], 1), X.dtype)], axis=1) * w[:, None]
        b = w * y
        # LAPACK's SVD never returns on an infinite entry (and a non-finite item the learner will skip
        # still reaches this fit inside jit): solve a finite stand-in and answer NaN
        finite = jnp.all(jnp.isfinite(Z)) & jnp.all(jnp.isfinite(b))
        coef = jnp.linalg.lstsq(jnp.where(finite, Z, 0.0), jnp.where(finite, b, 0.0))[0]
        return jnp.where(finite, coef, jnp.nan)

    if X.shape[0] <= X.shape[1]:  # a window no longer than the input dimension: never identified
        return min_norm(None)
    xm = (w @ X) / n
    ym = (w @ y) / n
    Xc = (X - xm) * w[:, None]
    Q, R = jnp.linalg.qr(Xc)
    diag = jnp.abs(jnp.diag(R))
    full_rank = jnp.min(diag) > jnp.sqrt(jnp.finfo(X.dtype).eps) * jnp.maximum(jnp.max(diag), jnp.finfo(X.dtype).tiny)

    def qr_solution(_):
        beta = jax.scipy.linalg.solve_triangular(R, Q.T @ ((y - ym) * w), lower=False)
        return jnp.concatenate([beta, (ym - xm @ beta)[None]])

    return jax.lax.cond(full_rank, qr_solution, min_norm, None)


def mean_at(coef: Array, x: Array) -> Array:
    """``m(x) = [x, 1]·coef`` for ``x: [d]`` or ``[b, d]``."""
    return x @ coef[:-1] + coef[-1]


def mean_residuals(mean, X: Array, y: Array, valid: Array):
    """Fit the mean function on the window and return ``(coef [d + 1], r [W])``, ``r = (y - m(X))``
    on valid slots and 0 on invalid ones (what the GP factor and likelihood work on)."""
    coef = mean_coefficients(mean, X, y, valid)
    return coef, (y - mean_at(coef, X)) * valid


def masked_kernel_matrix(kernel: Callable, p: GPParams, X: Array, valid: Array) -> Array:
    """``[W, W]`` ``K_y`` on valid slots, identity rows/columns on invalid ones."""
    m = valid.astype(X.dtype)
    K = gram(kernel, p, X, X) * (m[:, None] * m[None, :])
    diag = jnp.where(valid, noise_var(p), 1.0)
    return K + jnp.diag(diag)


def log_marginal_likelihood(kernel: Callable, p: GPParams, X: Array, y: Array, valid: Array,
                            mean: str = "zero") -> Array:
    """``log p(y | X, θ) = -½ rᵀK_y⁻¹r - ½ log|K_y| - n/2 log 2π`` on the window's valid items.

    Thesis eq. 4.29 (Rasmussen & Williams eq. 2.30), with residuals
    ``r = y - m(X)`` of the chosen mean function (held fixed). Differentiable
    in ``p`` (thesis eq. 4.30–4.33 give the same gradient in closed form).

    Args:
      kernel: a pair kernel from :mod:`onlinejax.learners.gp.kernels`.
      p: :class:`GPParams`; X: ``[W, d]``; y: ``[W]``; valid: ``[W]`` bool.
    """
    return residual_log_marginal_likelihood(kernel, p, X, mean_residuals(mean, X, y, valid)[1], valid)


def residual_log_marginal_likelihood(kernel: Callable, p: GPParams, X: Array, r: Array, valid: Array) -> Array:
    """:func:`log_marginal_likelihood` for given residuals ``r: [W]`` (zero on invalid slots).

    The tuner calls this with ``r`` computed once per window (the mean
    function does not depend on ``p``).
    """
    Ky = masked_kernel_matrix(kernel, p, X, valid)
    n = jnp.sum(valid.astype(X.dtype))
    return gaussian_log_density_from_cov(Ky, r) + 0.5 * (r.shape[0] - n) * jnp.log(2.0 * jnp.pi)


@jax.custom_vjp
def gaussian_log_density_from_cov(K: Array, r: Array) -> Array:
    """``log N(r; 0, K) = -½ rᵀK⁻¹r - ½ log|K| - W/2 log 2π`` by Cholesky, ``K: [W, W]``, ``r: [W]``.

    Its gradient is written in closed form (Rasmussen & Williams eq. 5.9, thesis
    eq. 4.30–4.33): ``∂/∂K = ½(ααᵀ - K⁻¹)``, ``∂/∂r = -α`` with ``α = K⁻¹r``,
    and ``K⁻¹ = L⁻ᵀL⁻¹`` from one triangular inverse: cheaper than autodiff
    through the Cholesky factorisation, which the tuner would otherwise pay
    on every iteration.
    """
    return _gauss_fwd(K, r)[0]


def _gauss_fwd(K, r):
    L = jnp.linalg.cholesky(K)
    a = jax.scipy.linalg.cho_solve((L, True), r)
    v = -0.5 * r @ a - jnp.sum(jnp.log(jnp.diag(L))) - 0.5 * r.shape[0] * jnp.log(2.0 * jnp.pi)
    return v, (L, a)


def _gauss_bwd(res, g):
    L, a = res
    # K⁻¹ = L⁻ᵀL⁻¹ from one (blocked) triangular inverse and a product: cheaper on a CPU than
    # cho_solve with an identity right-hand side (two triangular solves)
    Linv = lower_triangular_inverse(L)
    Kinv = Linv.T @ Linv
    return g * 0.5 * (jnp.outer(a, a) - Kinv), -g * a


gaussian_log_density_from_cov.defvjp(_gauss_fwd, _gauss_bwd)
