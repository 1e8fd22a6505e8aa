"""Sliding-window kernel regression: Nadaraya–Watson (the thesis) and ridged local linear.

Thesis 4.3.2 (kernel density estimate eq. 4.37–4.39, the Nadaraya–Watson
estimator eq. 4.42, bounds eq. 4.43, leave-one-out bandwidth choice 4.3.2.4)
and 5.4.4 (Algorithms 3 and 4).

Kernel and bandwidth
--------------------
The Gaussian kernel with bandwidth matrix ``H`` (Wand & Jones' convention,
``H`` is the kernel's covariance) is ``K_H(u) = |H|^{-1/2} (2π)^{-d/2}
exp(-½ uᵀH⁻¹u)``. The state stores a *whitening* matrix ``A`` with
``H⁻¹ = AᵀA``, so the quadratic form is ``q = ‖A u‖²`` computed from the
difference (no cancellation). This is the only reading under which the
thesis's tuning rule ``H = α·COV`` (Algorithm 4, COV the window's input
covariance) is dimensionally consistent: the kernel's lengthscales become
``sqrt(α)`` times the inputs' standard deviations.

What is maintained per item (Algorithm 3, corrected)
----------------------------------------------------
For every point ``i`` of the window the thesis keeps its density sum
``D_i = Σ_j k(x_i, x_j)`` and contribution sum ``C_i = Σ_j k(x_i, x_j) y_j``
over the window (``k = exp(-½q)``, self term ``k(x_i, x_i) = 1``
included). ``learn`` subtracts the evicted point's terms and adds the new
point's, ``O(W d²)``; the new point's own sums are computed over the *whole*
remaining window plus itself (the thesis code's loops skipped the newest
point). These sums give the in-window fit ``C_i / D_i``, hence the residual
variance used by the bounds, in ``O(W)``. Every sum is computed from scratch
when its point enters and receives at most ``2W`` additions before the point
leaves, so rounding error is bounded by ``~2W·eps`` relative to ``D_i >= 1``
whatever the stream length: no periodic refresh is needed.

Predictions
-----------
Weights are computed relative to the nearest window point ``m``,
``w_j ∝ exp(-½ (q_j - q_m))``, whose term is exactly 1 before normalising,
so equidistant points (e.g. duplicates) share the weight equally and a query
far from the window gets the average of its nearest targets, the
estimator's limit. (A log-sum-exp of ``-½ q`` does not: at ``q ≈ 10⁸``
float32 cannot hold ``log k`` next to ``q/2``, so ``k`` equidistant points
would each get weight 1 and their targets would be summed; beyond
``|x| ~ 10¹⁹`` ``q`` overflows to NaN.) The gaps ``q_j - q_m`` are computed from the
window points' offsets to their mean, not from ``x_j - x`` (which rounds
the window's detail away for a far query), and scaled so that they stay
finite for any finite query; ``q_m`` itself may overflow, which only says
that the density is 0 there.
Bounds (:class:`KernelRegressionOptions`'s ``bounds``):

* ``"asymptotic"`` (default): ``Var[m̂(x)] = ‖K‖₂² σ̂² / (n |H|^{1/2} f̂(x))``
  (Härdle, *Applied Nonparametric Regression*, Thm 4.2.1, the source the thesis
  cites as [31]); with the Gaussian kernel ``‖K‖₂² = (4π)^{-d/2}`` this is
  ``2^{-d/2} σ̂² / Σ_j exp(-½ q_j)``. (``d`` counts the inputs the kernel
  uses: a column the tune found constant has an infinite bandwidth, below.)
* ``"exact"``: the finite-sample variance of the linear smoother given the
  inputs, ``σ̂² Σ_j w_j²``.
* ``"thesis"``: eq. 4.43 as printed, ``‖K‖₂² ASE / f̂(x)`` with
  ``f̂`` the normalised density (eq. 4.39) and ``ASE = RSS/n``. It lacks the
  ``1/(n|H|^{1/2})`` factor, so its width scales with the input units.

``σ̂²`` is the in-window residual variance with the linear-smoother
degrees-of-freedom correction ``RSS / (n - tr S)`` (``tr S = Σ_i 1/D_i``);
while fewer than one residual degree of freedom exists it is blended with
the window's target variance. A floor ``100·eps·mean(y²) + sqrt(tiny)``
keeps it positive.

The local linear fit (``KernelRegressionOptions(local="linear")``)
-----------------------------------------------------------------
The Nadaraya–Watson mean is a local *constant* fit: where the function has a
slope it is biased at the window's edges and wherever the points are lopsided
around the query, by about the slope times the weighted points' offset
``ū``. The local linear fit (Fan & Gijbels, *Local Polynomial Modelling*,
1996, §3.1) removes that term: with the same kernel, in the whitened
offsets ``u_j = A(x_j - x)``, the weighted least-squares line
``y_j ≈ a + bᵀu_j`` predicts its intercept,
``m̂(x) = ȳ_w - bᵀū``, ``ȳ_w`` and ``ū`` the weighted means and
``b = (Σ_j k_j c_j c_jᵀ + ρI)⁻¹ Σ_j k_j c_j (y_j - ȳ_w)``, ``c_j = u_j - ū``,
``k_j = exp(-½‖u_j‖²)`` the kernel counts. Where few points carry weight the
plain line is erratic (Seifert & Gasser, *JASA* 91, 1996, whose remedy is
this ridge): ``ρ`` is the slope's prior precision in kernel counts, a slope
``N(0, (s_y² - σ̂²)·I)`` per bandwidth (the targets' variance that the inputs
explain) against noise ``σ̂²``, so ``ρ = σ̂²/(s_y² - σ̂²)`` clipped to
``[10⁻³, 10³]`` (:func:`~onlinejax.learners.kernel_regression_state.local_linear_ridge`):
where the inputs explain nothing the fit is flat.
Far from every point the counts vanish, ``b → 0`` and the fit is the
Nadaraya–Watson mean again. ``Var[m̂]`` gains the slope's share
``σ̂² ūᵀ(S + ρI)⁻¹ū`` (``S`` the weighted scatter ``Σ_j k_j c_j c_jᵀ``);
``σ̂²`` stays the in-window Nadaraya–Watson fit's (a conservative reading on
a slope). The tune scores each bandwidth by the same fit's leave-one-out
error (:func:`~onlinejax.learners.kernel_regression_tune.loo_cv_scores` with ``ridge=``): the
Nadaraya–Watson score favours the narrow bandwidths that keep its own bias
small, on which the line is noisy.

No information: the window's climatology
----------------------------------------
The bounds grow without limit where the window has no points (``f̂(x) → 0``).
The predictive variance is capped by what predicting ``m̂(x)`` would cost
with no local information, the window's climatology (its targets' Gaussian,
as :func:`onlinejax.wrappers.baseline.climatology`): ``V(x) = c_n s_y² + (ȳ - m̂(x))²``,
``s_y²`` the targets' sample variance (same floor as ``σ̂²``) and
``c_n = (1 + 1/n) r_ν`` the plug-in Student-t predictive of a Gaussian
sample (``ν = n - 1``): ``(1 + 1/n)`` for the mean's uncertainty and
``r_ν = ν/(ν - 2)`` the t variance ratio for ``ν >= 3``; for ``ν = 1, 2``,
where the t variance is infinite, ``r_ν`` is the squared ratio of the 95 %
quantiles ``(t_{ν,0.975}/z_{0.975})²`` (42.0 and 4.82). Prediction
intervals use ``min(Var[m̂] + σ̂², max(V, σ̂²))``, confidence intervals
``min(Var[m̂], V)``. With fewer than two points there is no spread to
measure: an empty window predicts ``N(0, prior_var)`` (``init(prior_var=)``,
default 1), one point ``y₁`` predicts ``N(y₁, prior_var + y₁²)`` (the only
target's own scale). The variance is never ``<= 0`` and never a cap of the
dtype (``sqrt(finfo.max)`` remains only an overflow guard for targets
beyond ``~sqrt(finfo.max)``).

Tuning the bandwidth on degenerate inputs
-----------------------------------------
``H = α·COV`` is singular when the window's inputs are constant or
collinear (repeated inputs, a constant column, a duplicated feature), and a
jitter at the rounding level would give bandwidths ``~10⁻⁸`` of the inputs'
scale: every later query would be "far". :func:`covariance_whitening` instead (i)
gives a column that is constant over the window (spread within a few
rounding units of its value) an infinite bandwidth: the window says nothing
about it, every bandwidth scores the same, and leave-one-out CV sends an
irrelevant regressor's bandwidth to infinity (Hall, Li & Racine 2007,
*Rev. Econ. Stat.* 89(4)); and (ii) floors the eigenvalues of the other
columns' *correlation* matrix at ``10⁻³`` (of its mean eigenvalue 1), so
collinear columns keep a bandwidth ``>= sqrt(10⁻³ α)`` of their standard
deviations while columns of different scales keep their own. A
well-conditioned window gets exactly ``H = α·COV``.

These are **confidence** intervals for the regression function ``m(x)``, not
prediction intervals for a new ``y``: they ignore the noise. The thesis used
them as prediction bounds at 95 % and 99.9 % ("HighConf"; use
``pred.interval(0.999)``). ``KernelRegressionOptions(interval="prediction")`` (the default,
matching :class:`~onlinejax.Prediction`'s contract that ``var`` is the observation's)
adds ``σ̂²``; ``interval="confidence"`` reproduces the thesis.

The learner's parts
-------------------
* :class:`KernelRegressionState`: the state;
* :func:`init`: an empty window with bandwidth ``H = diag(lengthscale²)``;
* :func:`learn_one`: push one item, updating every point's ``D_i``, ``C_i`` (Algorithm 3);
* :func:`predict_one`: the Nadaraya–Watson mean (eq. 4.42) or the local linear fit, and the bounds above;
* :func:`evict`: evict the oldest item;
* :func:`tune`: the leave-one-out choice of ``H = α·COV`` (4.3.2.4, Algorithm 4);
* :func:`kernel_regression`: validates the static options, binds them and
  returns a :class:`~onlinejax.Learner` whose boundary skips non-finite items
  (``make_learner(skip_nonfinite=True)``): the pure functions assume finite items.

The state and the window quantities the steps share (kernel forms, the sums
from scratch, the residual variance, the climatology) are in
:mod:`onlinejax.learners.kernel_regression_state`; the tune, with the leave-one-out
scores and the regularised whitening, in :mod:`onlinejax.learners.kernel_regression_tune`.
This module re-exports their names.
"""
from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..core.checks import check_record
from ..core.base import (Learner, LearnerCores, Prediction, check_int, check_positive, default_float_dtype, describe_factory,
                         keep_if, make_learner)
from .kernel_regression_state import (KernelRegressionState, _log_kernel, _relative_logits, _used_dims, _var_cap,
                                      local_linear_ridge, residual_variance, window_climatology)
from .kernel_regression_state import window_sums  # noqa: F401  (re-exported)
from .kernel_regression_tune import LOCAL_LINEAR_ALPHAS, THESIS_ALPHAS, default_alphas, tune
from .kernel_regression_tune import CORRELATION_FLOOR, _loo_score, covariance_whitening, loo_cv_scores  # noqa: F401
from ..core.window import ring_init, ring_oldest, ring_pop_oldest, ring_push

Array = jax.Array

__all__ = [
    "KernelRegressionState",
    "kernel_regression",
    "init",
    "learn_one",
    "predict_one",
    "evict",
    "tune",
    "THESIS_ALPHAS",
    "LOCAL_LINEAR_ALPHAS",
    "BOUNDS",
    "INTERVALS",
    "LOCAL_FITS",
    "KernelRegressionOptions",
]

BOUNDS = ("asymptotic", "exact", "thesis")
INTERVALS = ("prediction", "confidence")
LOCAL_FITS = ("constant", "linear")


class KernelRegressionOptions(NamedTuple):
    """The static options of :func:`kernel_regression`: an immutable, hashable record of Python values.

    Passed as one value (``kernel_regression(d, W, options=KernelRegressionOptions(bounds="exact"))``);
    equal records build the same learner.

    Attributes:
      bounds: the confidence variance ``Var[m̂(x)]``: ``"asymptotic"`` (default; Härdle Thm 4.2.1),
        ``"exact"`` (the linear smoother's ``σ̂² Σ_j w_j²``) or ``"thesis"`` (eq. 4.43 as printed); module doc.
      interval: ``"prediction"`` (default: adds the residual variance ``σ̂²``, the observation's variance)
        or ``"confidence"`` (the thesis's bounds on ``m(x)``).
      alphas: the ``α`` grid that ``tune`` searches (``H = α·COV``), a tuple of floats > 0; ``None``
        (default): the fit's grid, the thesis's 0.05, 0.06, …, 1.99 (:data:`THESIS_ALPHAS`) for ``"constant"``,
        24 geometric steps over the same range (:data:`LOCAL_LINEAR_ALPHAS`) for ``"linear"``.
      local: the local fit: ``"constant"`` (default: the Nadaraya–Watson mean, the thesis) or ``"linear"`` (the
        ridged local linear fit, module doc); the tune scores the bandwidths by the same fit.
    """

    bounds: str = "asymptotic"
    interval: str = "prediction"
    alphas: tuple | None = None
    local: str = "constant"

    def checked(self) -> "KernelRegressionOptions":
        """The record checked, ``alphas`` resolved to a tuple of floats (``ValueError``: ``options.<field>: ...``)."""
        if self.bounds not in BOUNDS:
            raise ValueError(f"options.bounds: must be one of {BOUNDS}, got {self.bounds!r}")
        if self.interval not in INTERVALS:
            raise ValueError(f"options.interval: must be one of {INTERVALS}, got {self.interval!r}")
        if self.local not in LOCAL_FITS:
            raise ValueError(f"options.local: must be one of {LOCAL_FITS}, got {self.local!r}")
        alphas = np.asarray(default_alphas(self.local) if self.alphas is None else self.alphas, np.float64).reshape(-1)
        if alphas.size == 0 or not np.all(np.isfinite(alphas)) or not np.all(alphas > 0):
            raise ValueError(f"options.alphas: must be a non-empty array of finite values > 0, got {self.alphas!r}")
        return KernelRegressionOptions(self.bounds, self.interval, tuple(float(a) for a in alphas), self.local)


def init(n_features: int, window: int, lengthscale=1.0, prior_var=1.0, dtype=None) -> KernelRegressionState:
    """An empty window with bandwidth ``H = diag(lengthscale²)``, i.e. whitening ``A = diag(1/lengthscale)``.

    Args:
      n_features: ``d`` (static).
      window: the capacity ``W`` (static).
      lengthscale: ``[]`` or ``[d]``, > 0.
      prior_var: ``[]`` predictive variance of an empty window, > 0 (module doc).
      dtype: floating dtype; default float32 (float64 when x64 is enabled).
    Raises:
      ValueError: naming the argument, for out-of-range concrete values.
    """
    check_positive(lengthscale, "lengthscale")
    check_positive(prior_var, "prior_var")
    dt = dtype or default_float_dtype()
    ell = jnp.broadcast_to(jnp.asarray(lengthscale, dt), (n_features,))
    return KernelRegressionState(
        buffer=ring_init(window, n_features, dt), density=jnp.zeros((window,), dt),
        contribution=jnp.zeros((window,), dt), whiten=jnp.diag(1.0 / ell), bandwidth_scale=jnp.zeros((), dt),
        prior_var=jnp.asarray(prior_var, dt), n_seen=jnp.zeros((), jnp.int32), n_skipped=jnp.zeros((), jnp.int32),
    )


def _remove_oldest(s: KernelRegressionState, go: Array) -> KernelRegressionState:
    """Evict the oldest point if ``go``: subtract its kernel terms from every ``D_i``, ``C_i`` (``O(W d²)``)."""
    xo, yo, present = ring_oldest(s.buffer)
    k = jnp.exp(_log_kernel(s.whiten, s.buffer.x, xo)) * s.buffer.valid * (present & go)
    buf = keep_if(go, ring_pop_oldest(s.buffer), s.buffer)
    return s._replace(buffer=buf, density=s.density - k, contribution=s.contribution - k * yo)


def learn_one(state: KernelRegressionState, x: Array, y: Array) -> KernelRegressionState:
    """Push one finite item (``x: [d]``, ``y: []``), ``O(W d²)`` (thesis Algorithm 3, corrected).

    When the window is full the oldest point leaves first (its terms are
    subtracted). Every window point gains ``k_i = k(x_i, x)``:
    ``D_i += k_i``, ``C_i += k_i y``; the new point's own sums run over the
    whole remaining window plus itself: ``D = 1 + Σ_i k_i``, ``C = y + Σ_i k_i y_i``.
    The Learner's boundary skips non-finite items before this runs.
    """
    s = state
    t = _remove_oldest(s, s.buffer.count == s.buffer.y.shape[0])  # when full, the head slot is the oldest
    buf = t.buffer
    k = jnp.exp(_log_kernel(s.whiten, buf.x, x)) * buf.valid
    D = t.density + k
    C = t.contribution + k * y
    h = buf.head
    D = D.at[h].set(jnp.sum(k) + 1.0)  # the new point's sums include every window point and itself
    C = C.at[h].set(k @ jnp.where(buf.valid, buf.y, 0.0) + y)
    return t._replace(buffer=ring_push(buf, x, y), density=D, contribution=C, n_seen=s.n_seen + 1)


def evict(state: KernelRegressionState) -> KernelRegressionState:
    """Evict the oldest point of the window (no-op on an empty window)."""
    return _remove_oldest(state, jnp.asarray(True))


def _local_linear(s: KernelRegressionState, x: Array, w: Array, lse: Array, nw_mean: Array,
                  sigma2: Array) -> tuple[Array, Array]:
    """The ridged local linear mean at ``x: [d]`` and its slope's share of ``Var[m̂]`` (module doc).

    ``w``: ``[W]`` the normalised kernel weights, ``lse``: ``[]`` the log of the kernel counts' sum
    (``-inf`` far from every point), ``nw_mean``: their weighted target mean ``ȳ_w``.
    ``m̂ = ȳ_w - bᵀū``, ``b = (Σ_j k_j c_j c_jᵀ + ρI)⁻¹ Σ_j k_j c_j (y_j - ȳ_w)``, ``u_j = A(x_j - x)``,
    ``ū = Σ_j w_j u_j``, ``c_j = u_j - ū``, ``k_j = w_j exp(lse)`` the kernel counts; the share is ``σ̂² ūᵀ(S + ρI)⁻¹ū``.
    """
    buf = s.buffer
    u = jnp.where(buf.valid[:, None], (buf.x - x) @ s.whiten.T, 0.0)  # [W, d] whitened offsets to the query
    ubar = w @ u
    c = u - ubar
    kc = c * (w * jnp.exp(lse))[:, None]  # exp(lse) <= W: every kernel value is <= 1
    L = jnp.linalg.cholesky(kc.T @ c + local_linear_ridge(s) * jnp.eye(u.shape[1], dtype=u.dtype))
    b = jax.scipy.linalg.cho_solve((L, True), kc.T @ (jnp.where(buf.valid, buf.y, 0.0) - nw_mean))
    z = jax.scipy.linalg.solve_triangular(L, ubar, lower=True)
    ok = jnp.all(jnp.isfinite(b)) & jnp.isfinite(z @ z) & (buf.count >= 2)
    return jnp.where(ok, nw_mean - b @ ubar, nw_mean), jnp.where(ok, sigma2 * (z @ z), 0.0)


def predict_one(state: KernelRegressionState, x: Array, *, bounds: str = "asymptotic",
                interval: str = "prediction", local: str = "constant") -> Prediction:
    """Nadaraya–Watson (thesis eq. 4.42) or ridged local linear prediction at ``x: [d]`` with the module doc's variance.

    Mean ``m̂(x) = Σ_j w_j y_j``, ``w_j ∝ exp(-½‖A(x_j - x)‖²)`` computed
    relative to the nearest point (``local="constant"``, static), or the
    intercept of the ridged weighted least-squares line through the same
    weights (``"linear"``; module doc). Confidence variance ``Var[m̂]`` by
    ``bounds`` (static): ``"asymptotic"`` Härdle Thm 4.2.1, ``"exact"``
    ``σ̂² Σ_j w_j²``, ``"thesis"`` eq. 4.43 as printed. ``interval``
    (static): ``"prediction"`` ``min(Var[m̂] + σ̂², max(V, σ̂²))``,
    ``"confidence"`` ``min(Var[m̂], V)``, ``V`` the climatology's cost; with
    fewer than two points the climatology alone.

    Returns:
      :class:`~onlinejax.Prediction` with ``mean``, ``var``: ``[]``.
    """
    s = state
    buf = s.buffer
    dt = buf.y.dtype
    cap = _var_cap(dt)
    n = buf.count
    has = n > 0
    logits, q_min = _relative_logits(s.whiten, buf.x, buf.valid, x)
    lse_rel = jax.nn.logsumexp(logits)  # >= 0: the nearest point's term is exactly 1
    w = jnp.exp(logits - jnp.where(has, lse_rel, 0.0))
    mean = jnp.where(has, w @ jnp.where(buf.valid, buf.y, 0.0), 0.0)
    lse = lse_rel - 0.5 * q_min  # log Σ_j exp(-½ q_j); -inf when q_m overflows (then the climatology caps)
    sigma2, ase = residual_variance(s)
    ybar, v_clim = window_climatology(s)
    slope_var = 0.0
    if local == "linear":
        mean, slope_var = _local_linear(s, x, w, lse, mean, sigma2)
    d_used, log_det_A = _used_dims(s.whiten)
    if bounds == "asymptotic":
        # ‖K‖₂² σ̂² / Σ_j K(A u_j) with the normalised kernel: the (2π)^{-d/2} cancel into 2^{-d/2}
        log_var = jnp.log(sigma2) - 0.5 * d_used * math.log(2.0) - lse
    elif bounds == "exact":
        log_var = jnp.log(sigma2) + jax.nn.logsumexp(2.0 * logits) - 2.0 * lse_rel
    else:  # eq. 4.43 as printed: ‖K‖₂² ASE / f̂(x), f̂ the normalised density (eq. 4.39)
        log_f = lse - jnp.log(jnp.maximum(n, 1).astype(dt)) + log_det_A - 0.5 * d_used * math.log(2.0 * math.pi)
        log_var = -0.5 * d_used * math.log(4.0 * math.pi) + jnp.log(ase) - log_f
    conf = jnp.minimum(jnp.exp(jnp.minimum(log_var, math.log(cap))) + slope_var, cap)
    no_info = v_clim + (mean - ybar) ** 2  # the climatology's expected squared error about m̂(x)
    if interval == "prediction":
        var = jnp.minimum(conf + sigma2, jnp.maximum(no_info, sigma2))
    else:
        var = jnp.minimum(conf, no_info)
    var = jnp.where(n >= 2, var, v_clim)  # fewer than two points: the climatology alone (module doc)
    return Prediction(mean, jnp.where(jnp.isfinite(var) & (var > 0), var, cap))  # cap: target overflow only


@describe_factory
def kernel_regression(n_features: int, window: int, *, lengthscale=1.0, prior_var=1.0,
                      options: KernelRegressionOptions = KernelRegressionOptions(), dtype=None) -> Learner:
    """Sliding-window Nadaraya–Watson (thesis 4.3.2, 5.4.4) or ridged local linear regression as a :class:`~onlinejax.Learner`.

    Args:
      n_features: ``d`` (static).
      window: capacity ``W >= 2`` (static).
      lengthscale: initial bandwidth, ``H = diag(lengthscale²)`` (scalar or ``[d]``;
        ``init`` overrides).
      prior_var: predictive variance of an empty window (``N(0, prior_var)``;
        one point ``y₁`` gives ``N(y₁, prior_var + y₁²)``); > 0, an array in the state.
      options: :class:`KernelRegressionOptions` (static): the bounds, the interval, the tune's ``α`` grid and
        the local fit.
      dtype: default floating dtype.
    Returns:
      A learner over :func:`init`, :func:`learn_one`, :func:`predict_one`,
      :func:`evict` and :func:`tune` with these options bound;
      ``init(lengthscale=, prior_var=, dtype=)``; ``evict(state)`` evicts the
      oldest item; ``tune(state)`` picks the leave-one-out-best ``α`` over the
      whole grid in one vectorised call and keeps the current bandwidth unless
      some ``α`` is strictly better (Algorithm 4). A non-finite item is skipped
      (``n_skipped`` counts it).
    Raises:
      ValueError: naming the argument or the record's field (``options.alphas: ...``).
      TypeError: ``options`` not a :class:`KernelRegressionOptions`.
    """
    d = check_int(n_features, "n_features", 1)
    W = check_int(window, "window", 2)
    o = check_record(options, KernelRegressionOptions, "options").checked()
    check_positive(lengthscale, "lengthscale")
    check_positive(prior_var, "prior_var")

    def _init(lengthscale=lengthscale, prior_var=prior_var, dtype=dtype):
        return init(d, W, lengthscale, prior_var, dtype)

    return make_learner(init=_init, learn_one=learn_one, n_features=d, skip_nonfinite=True,
                        predict_one=partial(predict_one, bounds=o.bounds, interval=o.interval, local=o.local),
                        cores=LearnerCores(evict=evict, tune=jax.jit(partial(tune, alphas=o.alphas, local=o.local))))
