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
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax.scipy.linalg import solve_triangular

from ..base import Learner, Prediction, check_int, default_float_dtype, keep_if, make_learner
from ..linalg import inv_chol_drop_first, inv_chol_slide, lower_triangular_inverse
from .kernels import KERNELS, GPParams, cross, gp_params, noise_var
from .likelihood import (MEANS, masked_kernel_matrix, mean_at, mean_index, mean_residuals,
                         residual_log_marginal_likelihood)

Array = jax.Array

__all__ = ["GPWindowState", "gp_window", "latent", "tune_hyperparameters"]


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


def latent(state: GPWindowState, pred: Prediction) -> Prediction:
    """The latent-function predictive (noise variance removed) of an observed-``y`` prediction."""
    return Prediction(pred.mean, jnp.maximum(pred.var - noise_var(state.params), 0.0))


def _predictive(s: GPWindowState, x: Array, v: Array, kxx: Array) -> Prediction:
    """Observed-``y`` predictive at ``x`` from ``v = Rk`` (``[W]``) and ``kxx = k(x, x)``: mean ``m(x) + vᵀz``,
    variance ``max(kxx - vᵀv, 0) + σ_n²`` (R&W eq. 2.25–2.26 with ``K_y⁻¹ = RᵀR``)."""
    return Prediction(mean_at(s.mean_coef, x) + v @ s.white_resid, jnp.maximum(kxx - v @ v, 0.0) + noise_var(s.params))


def _refresh(mean, s: GPWindowState) -> GPWindowState:
    coef, r = mean_residuals(mean, s.X, s.y, s.valid)
    return s._replace(mean_coef=coef, white_resid=s.inv_chol @ r)


def tune_hyperparameters(kernel, mean, params: GPParams, X, y, valid, *, steps: int = 30, restarts: int = 2,
                         learning_rate: float = 0.05, method: str = "lbfgs", n_active=None) -> GPParams:
    """Maximise the window's log marginal likelihood over ``params`` with optax.

    Runs ``restarts`` starts one after another (``lax.map``; vmapped, the
    starts' L-BFGS line searches ran in lockstep and one W = 64 tune took
    164 ms instead of 2 × 9 ms on a CPU): the current parameters and
    copies with lengthscales ×0.3 / ×3 and noise ×10 / ×0.1, each for
    at most ``steps`` iterations inside ``lax.while_loop`` (``method="lbfgs"``:
    optax L-BFGS with its zoom line search, stopped early once an iteration
    no longer lowers the loss; ``"adam"``: ``steps`` Adam steps at
    ``learning_rate``), and
    returns the start with the highest final likelihood (NaN runs are ignored;
    if all fail the input is returned). One compiled call; vmaps over windows.
    ``n_active`` (an int32 array, default ``restarts``) runs only the first
    ``n_active`` starts and skips the others, so the number of starts can
    change between calls without recompiling.
    """
    if method not in ("lbfgs", "adam"):
        raise ValueError(f"method: must be 'lbfgs' or 'adam', got {method!r}")
    dt = params.log_noise_std.dtype
    n = jnp.maximum(jnp.sum(valid.astype(dt)), 1.0)

    # the mean function does not depend on p: fit it (an SVD for "ols") once, not per evaluation
    r = mean_residuals(mean, X, y, valid)[1]

    def loss(p):
        return -residual_log_marginal_likelihood(kernel, p, X, r, valid) / n

    offs = jnp.asarray([[0.0, 0.0], [jnp.log(0.3), jnp.log(10.0)], [jnp.log(3.0), jnp.log(0.1)],
                        [0.0, jnp.log(10.0)], [jnp.log(0.3), 0.0], [jnp.log(3.0), 0.0]], dt)
    offs = offs[jnp.arange(restarts) % offs.shape[0]]
    starts = jax.vmap(lambda o: params._replace(log_lengthscale=params.log_lengthscale + o[0],
                                                log_noise_std=params.log_noise_std + o[1]))(offs)
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
    return keep_if(jnp.isfinite(ls[best]) & (ls[best] <= loss(params)), cand, params)


def gp_window(n_features: int, window: int, *, kernel: str = "se", mean: str = "zero", signal_std=1.0,
              noise_std=0.1, lengthscale=1.0, freeze_when_full: bool = False, tune_steps: int = 30,
              tune_restarts: int = 2, retune_restarts: int = 1, tune_method: str = "lbfgs",
              mean_from_state: bool = False, dtype=None) -> Learner:
    """Sliding-window GP regression as a :class:`~onlinejax.Learner`.

    Args:
      n_features: ``d`` (static).
      window: capacity ``W >= 2`` (static).
      kernel: ``"se"`` (ARD squared exponential), ``"matern32"``, ``"matern52"``.
      mean: ``"zero"``, ``"average"`` or ``"ols"`` (thesis 6.2.1 variants).
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
      dtype: default floating dtype.
    Returns:
      A learner; ``init(signal_std=, noise_std=, lengthscale=, dtype=)`` (and ``mean=`` with
      ``mean_from_state``);
      ``downdate(state)`` evicts the oldest item; ``tune(state)`` maximises
      the window's log marginal likelihood and rebuilds the factor once.
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
    static_mean = mean
    mean_from_state = bool(mean_from_state)

    def mean_of(s: GPWindowState):
        return s.mean_kind if mean_from_state else static_mean

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
            n_tunes=jnp.zeros((), jnp.int32), mean_kind=kind,
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
        new = s._replace(X=X, y=Y, valid=V, inv_chol=R, white_resid=z, mean_coef=coef, n_seen=s.n_seen + 1)
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
        return _refresh(mean_of(new), new)

    def predict_one(s: GPWindowState, x):
        v = s.inv_chol @ (cross(kfn, s.params, s.X, x) * s.valid)
        return _predictive(s, x, v, kfn(s.params, x, x))

    def tune(s: GPWindowState):
        n_active = jnp.where(s.n_tunes == 0, n_starts, n_restarts)
        p = tune_hyperparameters(kfn, mean_of(s), s.params, s.X, s.y, s.valid, steps=tune_steps, restarts=n_starts,
                                 method=tune_method, n_active=n_active)
        L = jnp.linalg.cholesky(masked_kernel_matrix(kfn, p, s.X, s.valid))
        R = lower_triangular_inverse(L)  # rebuilt once per tune
        return _refresh(mean_of(s), s._replace(params=p, inv_chol=R, n_tunes=s.n_tunes + 1))

    return make_learner(init=_init_kwargs, learn_one=learn_one, predict_one=predict_one, n_features=d,
                        downdate=downdate, downdate_takes_item=False, tune=jax.jit(tune), step_one=_step)
