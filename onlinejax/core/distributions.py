"""The predictive distributions: :class:`Prediction` (Gaussian) and :class:`StudentTPrediction`.

Each is a ``NamedTuple`` of arrays, so a batch of predictions scans and
vmaps leaf by leaf, with its moments, a central ``interval`` and the scores
``cdf``, ``log_prob`` and ``crps`` in closed forms that stay finite for a
point mass. The mixtures (:class:`onlinejax.wrappers.combination.MixturePrediction`,
:class:`onlinejax.core.student_mixture.StudentTMixture`) duck-type them. This
module imports no learner: the Student-t's special functions come from
:mod:`onlinejax.core.special`.
"""
from __future__ import annotations

from typing import NamedTuple

import statistics

import jax
import jax.numpy as jnp
import numpy as np

from .special import _log_gamma_ratio_excess, student_t_cdf, student_t_quantile

Array = jax.Array

__all__ = ["Prediction", "StudentTPrediction", "normal_quantile", "student_t_abs_moments"]


_INV_SQRT_PI = 1.0 / float(np.sqrt(np.pi))


def normal_quantile(level: float) -> float:
    """Two-sided standard-normal quantile ``z`` with ``P(|Z| <= z) = level``."""
    if not 0.0 < float(level) < 1.0:
        raise ValueError(f"level: must lie in (0, 1), got {level!r}")
    # stdlib, so it stays a Python float even while tracing
    return statistics.NormalDist().inv_cdf(0.5 + 0.5 * float(level))


class Prediction(NamedTuple):
    """A Gaussian predictive distribution ``N(mean, var)``.

    The scores (:meth:`log_prob`, :meth:`cdf`, :meth:`crps`) floor the variance
    at the dtype's ``tiny``, so a zero variance scores as the point mass it
    is, without NaN: a log density that is very negative but finite away from
    the mean, a step CDF, a CRPS of ``|y - mean|``. A variance above ``tiny``
    scores exactly as without the floor.

    Attributes:
      mean: ``[...]`` predictive mean (``[]`` for one item, ``[b]`` for a batch).
      var: ``[...]`` predictive variance of the *observation* (noise included),
        same shape as ``mean``.
    """

    mean: Array
    var: Array

    @property
    def std(self) -> Array:
        """Predictive standard deviation ``sqrt(var)``, shape of ``mean``."""
        return jnp.sqrt(self.var)

    def affine(self, shift: Array, scale: Array) -> "Prediction":
        """The law of ``shift + scale·Y`` (``scale > 0``): ``N(shift + scale·mean, scale²·var)``."""
        return Prediction(shift + scale * self.mean, scale * scale * self.var)

    def interval(self, level: float = 0.95) -> tuple[Array, Array]:
        """Central interval ``mean ± z·std`` with ``z = Φ⁻¹((1 + level)/2)``.

        Args:
          level: coverage probability in (0, 1); a Python float (static).
        Returns:
          ``(lower, upper)``, each of the shape of ``mean``.
        """
        z = normal_quantile(level)
        half = z * self.std
        return self.mean - half, self.mean + half

    def _scored(self, y: Array) -> tuple[Array, Array, Array]:
        """``(y, var, dtype)`` for the scores: ``y`` cast, ``var`` floored at ``tiny`` (a point mass scores finitely)."""
        dt = jnp.result_type(self.mean, self.var)
        return jnp.asarray(y, dt), jnp.maximum(self.var, jnp.finfo(dt).tiny), dt

    def cdf(self, y: Array) -> Array:
        """``Φ((y - μ)/σ)``: the probability integral transform of ``y`` (broadcast against ``mean``).

        With ``var = 0``: the step ``1{y > μ}`` (½ at ``y = μ``).
        """
        y, var, _ = self._scored(y)
        return jax.scipy.special.ndtr((y - self.mean) / jnp.sqrt(var))

    def log_prob(self, y: Array) -> Array:
        """Gaussian log density ``-½[log(2πσ²) + (y - μ)²/σ²]`` of ``y`` (broadcast against ``mean``).

        The squared residual is capped at the dtype's largest finite value, so
        a residual of many standard deviations (a point mass missed) gives a
        very negative, finite log density, never ``-inf``.
        """
        y, var, dt = self._scored(y)
        return -0.5 * (jnp.log(2.0 * jnp.pi * var) + jnp.minimum((y - self.mean) ** 2 / var, jnp.finfo(dt).max))

    def crps(self, y: Array) -> Array:
        """Closed-form CRPS ``σ[z(2Φ(z) - 1) + 2φ(z) - 1/√π]``, ``z = (y - μ)/σ`` (Gneiting & Raftery 2007, eq. 21).

        Where ``z`` overflows (a point mass) the limit ``|y - μ|``.
        """
        y, var, _ = self._scored(y)
        sd = jnp.sqrt(var)
        z = (y - self.mean) / sd
        crps = sd * (z * (2.0 * jax.scipy.stats.norm.cdf(z) - 1.0) + 2.0 * jax.scipy.stats.norm.pdf(z) - _INV_SQRT_PI)
        return jnp.where(jnp.isinf(z), jnp.abs(y - self.mean), crps)


class StudentTPrediction(NamedTuple):
    """A Student-t predictive distribution ``μ + s·T_ν`` (location, scale, degrees of freedom ``ν > 0``).

    The calibration wrappers return it (:func:`onlinejax.wrappers.calibration.conformal`
    with ``df=``): a heavy-tailed predictive whose log density at a residual
    of ``z`` scales falls like ``-(ν+1) log|z|`` instead of ``-z²/2``, so one
    surprise (a discontinuity, a drift) costs tens of nats, not millions.
    :func:`onlinejax.wrappers.baseline.climatology` returns it with ``ν = n - 1``.

    Every ``ν > 0`` is valid and large ``ν`` (the Gaussian limit, up to
    ``1/ε`` and beyond) is computed without cancellation; the moments and
    scores that do not exist are infinite: :attr:`var` is ``+inf`` for
    ``ν <= 2`` and :meth:`crps` is ``+inf`` for ``ν <= 1``. The scores floor
    the scale at ``sqrt(tiny)`` of the dtype (as :class:`Prediction` floors
    its variance at ``tiny``), so a scale of 0 scores as a point mass without
    NaN; a larger scale scores exactly as without the floor.

    Attributes:
      mean: ``[...]`` location ``μ`` (the mean where ``ν > 1``).
      scale: ``[...]`` scale ``s >= 0``.
      df: ``[...]`` degrees of freedom ``ν > 0``, the shape of ``mean`` (so a batch of
        predictions scans and vmaps leaf by leaf).
    """

    mean: Array
    scale: Array
    df: Array

    def affine(self, shift: Array, scale: Array) -> "StudentTPrediction":
        """The law of ``shift + scale·Y`` (``scale > 0``): location ``shift + scale·μ``, scale ``scale·s``, the same ``ν``."""
        return StudentTPrediction(shift + scale * self.mean, scale * self.scale, self.df)

    @property
    def var(self) -> Array:
        """Variance ``s² ν/(ν - 2)``; ``+inf`` for ``ν <= 2``, where the t has no finite variance."""
        finite = self.df > 2.0
        return jnp.where(finite, self.scale * self.scale * self.df / jnp.where(finite, self.df - 2.0, 1.0), jnp.inf)

    @property
    def std(self) -> Array:
        """Standard deviation ``sqrt(var)``."""
        return jnp.sqrt(self.var)

    def interval(self, level: float = 0.95) -> tuple[Array, Array]:
        """Central interval ``μ ± t_ν((1 + level)/2)·s``; ``level`` a Python float in (0, 1)."""
        normal_quantile(level)  # validates level
        half = student_t_quantile(0.5 + 0.5 * float(level), jnp.broadcast_to(self.df, jnp.shape(self.mean))) * self.scale
        return self.mean - half, self.mean + half

    def _scored(self, y: Array) -> tuple[Array, Array, Array]:
        """``(y, z, s)``: ``y`` cast, the scale ``s`` floored at ``sqrt(tiny)`` and ``z = (y - μ)/s``."""
        dt = jnp.result_type(self.mean, self.scale)
        y = jnp.asarray(y, dt)
        s = jnp.maximum(self.scale, np.sqrt(np.finfo(dt).tiny).astype(dt))
        return y, (y - self.mean) / s, s

    def _log1p_z2_over_df(self, z: Array) -> Array:
        """``log(1 + z²/ν)``, with ``z²`` capped at the dtype's largest finite value (finite for a point mass)."""
        return jnp.log1p(jnp.minimum(z * z, jnp.finfo(z.dtype).max) / self.df)

    def cdf(self, y: Array) -> Array:
        """``F_ν((y - μ)/s)`` (:func:`~onlinejax.core.special.student_t_cdf`), broadcast against ``mean``.

        A step at ``μ`` for ``s = 0``.
        """
        _, z, _ = self._scored(y)
        return student_t_cdf(z, self.df)

    def log_prob(self, y: Array) -> Array:
        """Log density ``log Γ((ν+1)/2) - log Γ(ν/2) - ½ log(νπ) - log s - (ν+1)/2 log(1 + z²/ν)`` of ``y``.

        The ratio of gamma functions is taken as ``½ log(ν/2)`` plus its small
        excess (:func:`~onlinejax.core.special._log_gamma_ratio_excess`), which cancels ``½ log ν``
        exactly, so large ``ν`` loses no precision (``jax.scipy.stats.t.logpdf``
        subtracts two ``gammaln`` of order ``ν log ν`` and keeps only their
        resolution). Broadcast against ``mean``.
        """
        _, z, s = self._scored(y)
        nu = self.df
        return (_log_gamma_ratio_excess(0.5 * nu) - 0.5 * np.log(2.0 * np.pi) - jnp.log(s)
                - 0.5 * (nu + 1.0) * self._log1p_z2_over_df(z))

    def crps(self, y: Array) -> Array:
        """Closed-form CRPS (Jordan, Krüger & Lerch 2019, scoringRules, ``crps_t``); ``+inf`` for ``ν <= 1``.

        ``s[z(2F_ν(z) - 1) + 2 f_ν(z)(ν + z²)/(ν - 1) - 2√ν B(½, ν - ½)/((ν - 1) B(½, ν/2)²)]``
        with ``z = (y - μ)/s``. The Beta functions and the density enter
        through :func:`~onlinejax.core.special._log_gamma_ratio_excess` (no cancellation at large
        ``ν``); the constant term tends to ``1/√π``, the Gaussian's. Where
        ``z`` overflows (a point mass) ``s·z`` is ``y - μ``.
        """
        y, z, s = self._scored(y)
        linear, two_pdf, c = _student_t_crps_terms(self.mean, s, self.df, y, z)
        return jnp.where(self.df > 1.0, linear + s * (two_pdf - c), jnp.inf)


def student_t_abs_moments(mean: Array, scale: Array, df: Array, y: Array, z: Array) -> tuple[Array, Array]:
    """``(E|X - y|, ½ E|X - X'|)`` of ``X = μ + s·T_ν`` (``X'`` an independent copy), the two terms of its CRPS.

    ``E|X - y| = s[z(2F_ν(z) - 1) + 2 f_ν(z)(ν + z²)/(ν - 1)]`` and
    ``½ E|X - X'| = 2s√ν B(½, ν - ½)/((ν - 1) B(½, ν/2)²)`` with ``z = (y - μ)/s``
    (Jordan, Krüger & Lerch 2019, ``crps_t``); the Beta functions and the density
    enter through :func:`~onlinejax.core.special._log_gamma_ratio_excess`, so large ``ν`` loses no
    precision (the constant tends to ``s/√π``, the Gaussian's). Where ``z``
    overflows (a point mass) ``s·z`` is ``y - μ``. Both are meaningful for
    ``ν > 1`` only (the t has no mean otherwise); there ``ν`` is replaced by 2 so
    that the values stay finite, and the caller masks them.

    Args:
      mean, scale, df, y, z: broadcast; ``scale > 0`` (floored by the caller),
        ``z = (y - mean)/scale``.
    Returns:
      ``(e_abs, half_pair)``, broadcast.
    """
    linear, two_pdf, c = _student_t_crps_terms(mean, scale, df, y, z)
    return linear + scale * two_pdf, scale * c


def _student_t_crps_terms(mean, scale, df, y, z):
    """``(s·z(2F_ν(z) - 1), 2 f_ν(z)(ν + z²)/(ν - 1), 2√ν B(½, ν - ½)/((ν - 1) B(½, ν/2)²))`` (:func:`student_t_abs_moments`)."""
    nu = jnp.where(df > 1.0, df, 2.0)
    r = _log_gamma_ratio_excess
    log_c = (-0.5 * np.log(np.pi) - jnp.log1p(-1.0 / nu) - 0.5 * jnp.log1p(-0.5 / nu)
             - r(nu - 0.5) + 2.0 * r(0.5 * nu))
    # log[f_ν(z)(ν + z²)/(ν - 1)]: the density's power (ν+1)/2 less the one of (ν + z²)
    log_pdf_term = (r(0.5 * nu) - 0.5 * np.log(2.0 * np.pi) - jnp.log1p(-1.0 / nu)
                    - 0.5 * (nu - 1.0) * jnp.log1p(jnp.minimum(z * z, jnp.finfo(z.dtype).max) / nu))
    sz = jnp.where(jnp.isinf(z), y - mean, scale * z)
    return sz * (2.0 * student_t_cdf(z, nu) - 1.0), 2.0 * jnp.exp(log_pdf_term), jnp.exp(log_c)
