"""Independent float64 numpy references (direct solves, no incremental updates)."""
import numpy as np


def blr_posterior(X, Y, alpha, beta, weights=None, prior_scale=1.0):
    """Posterior of Bayesian linear regression by a direct solve.

    S⁻¹ = prior_scale·diag(alpha) + beta Σ w_i x_i x_iᵀ,  m = beta S Σ w_i x_i y_i.
    """
    X = np.asarray(X, np.float64)
    Y = np.asarray(Y, np.float64)
    d = X.shape[1]
    w = np.ones(len(Y)) if weights is None else np.asarray(weights, np.float64)
    A = prior_scale * np.diag(np.broadcast_to(np.asarray(alpha, np.float64), (d,))) + beta * (X.T * w) @ X
    S = np.linalg.inv(A)
    m = np.linalg.solve(A, beta * X.T @ (w * Y))
    return m, S


def predictive(m, S, beta, x):
    x = np.asarray(x, np.float64)
    return x @ m, 1.0 / beta + np.einsum("...i,ij,...j->...", x, S, x)


def log_evidence(X, Y, alpha, beta):
    """Bishop eq. 3.86, computed from the design matrix."""
    X = np.asarray(X, np.float64)
    Y = np.asarray(Y, np.float64)
    N, M = X.shape
    A = alpha * np.eye(M) + beta * X.T @ X
    m = beta * np.linalg.solve(A, X.T @ Y)
    E = beta / 2 * np.sum((Y - X @ m) ** 2) + alpha / 2 * m @ m
    return M / 2 * np.log(alpha) + N / 2 * np.log(beta) - E - 0.5 * np.linalg.slogdet(A)[1] - N / 2 * np.log(2 * np.pi)


def rel_err(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300)


def gp_predict(Xw, yw, xq, signal_var, noise_var, lengthscale, kernel="se", mean_coef=None):
    """Direct float64 GP prediction on a window: returns (mean [m], latent var [m])."""
    Xw = np.asarray(Xw, np.float64)
    yw = np.asarray(yw, np.float64)
    xq = np.atleast_2d(np.asarray(xq, np.float64))
    ls = np.broadcast_to(np.asarray(lengthscale, np.float64), (Xw.shape[1],))

    def k(A, B):
        r2 = (((A[:, None, :] - B[None, :, :]) / ls) ** 2).sum(-1)
        if kernel == "se":
            return signal_var * np.exp(-0.5 * r2)
        r = np.sqrt(r2)
        if kernel == "matern32":
            return signal_var * (1 + np.sqrt(3) * r) * np.exp(-np.sqrt(3) * r)
        return signal_var * (1 + np.sqrt(5) * r + 5 * r2 / 3) * np.exp(-np.sqrt(5) * r)

    m_w = np.zeros(len(yw)) if mean_coef is None else Xw @ mean_coef[:-1] + mean_coef[-1]
    m_q = np.zeros(len(xq)) if mean_coef is None else xq @ mean_coef[:-1] + mean_coef[-1]
    if len(yw) == 0:
        return m_q, np.full(len(xq), signal_var)
    K = k(Xw, Xw) + noise_var * np.eye(len(yw))
    ks = k(Xw, xq)
    a = np.linalg.solve(K, yw - m_w)
    mu = m_q + ks.T @ a
    var = signal_var - np.einsum("ij,ij->j", ks, np.linalg.solve(K, ks))
    return mu, var


def nw_window_reference(A, Xw, yw, xq=None):
    """Float64 from-scratch Nadaraya–Watson on one window (thesis 4.3.2).

    Returns a dict with the sums ``D``, ``C`` per window point, ``sigma2``
    (df-corrected residual variance), ``ase`` and, when ``xq`` is given, the
    prediction ``mean`` and the variances ``asymptotic``, ``exact``, ``thesis``
    (confidence, i.e. without the residual variance).
    """
    A = np.asarray(A, np.float64)
    Xw = np.asarray(Xw, np.float64)
    yw = np.asarray(yw, np.float64)
    n, d = Xw.shape
    U = (Xw[:, None, :] - Xw[None, :, :]) @ A.T
    K = np.exp(-0.5 * np.sum(U * U, -1))
    D = K.sum(1)
    C = K @ yw
    fit = C / D
    rss = np.sum((yw - fit) ** 2)
    df = n - np.sum(1.0 / D)
    s2y = np.var(yw, ddof=1) if n > 1 else 0.0
    sigma2 = (rss + s2y * max(1.0 - df, 0.0)) / max(df, 1.0)
    out = {"D": D, "C": C, "sigma2": sigma2, "ase": rss / n}
    if xq is not None:
        u = (Xw - np.asarray(xq, np.float64)) @ A.T
        k = np.exp(-0.5 * np.sum(u * u, -1))
        w = k / k.sum()
        out["mean"] = w @ yw
        out["asymptotic"] = (4 * np.pi) ** (-d / 2) * sigma2 / ((2 * np.pi) ** (-d / 2) * k.sum())
        out["exact"] = sigma2 * np.sum(w ** 2)
        fhat = (2 * np.pi) ** (-d / 2) * k.sum() * abs(np.linalg.det(A)) / n
        out["thesis"] = (4 * np.pi) ** (-d / 2) * out["ase"] / fhat
    return out


def ridged_line_intercept(U, yw, k, ridge):
    """Float64 intercept ``a`` and ``(S + ρI)⁻¹`` of ``argmin Σ_j k_j (y_j - a - bᵀu_j)² + ρ‖b‖²``, by least squares
    on the weighted rows stacked on the ridge's rows (no normal equations, no moments)."""
    U, yw, k = (np.asarray(v, np.float64) for v in (U, yw, k))
    n, d = U.shape
    r = np.sqrt(k)
    rows = np.vstack([r[:, None] * np.hstack([np.ones((n, 1)), U]), np.hstack([np.zeros((d, 1)), np.sqrt(ridge) * np.eye(d)])])
    coef = np.linalg.lstsq(rows, np.concatenate([r * yw, np.zeros(d)]), rcond=None)[0]
    ubar = k @ U / k.sum()
    C = U - ubar
    return coef[0], np.linalg.inv((C * k[:, None]).T @ C + ridge * np.eye(d)), ubar


def ll_loo_cv(Xw, yw, alphas, ridge):
    """Brute-force leave-one-out CV(α·COV) of the ridged local linear fit, float64: every point's fit from the
    others with kernel counts ``exp(-½ uᵀ(α·COV)⁻¹u)`` and the ridge ``ρ`` on the slope per whitened unit."""
    Xw = np.asarray(Xw, np.float64)
    yw = np.asarray(yw, np.float64)
    n = len(yw)
    cov = np.cov(Xw.T, ddof=1).reshape(Xw.shape[1], Xw.shape[1])
    scores = []
    for a in alphas:
        A = np.linalg.inv(np.linalg.cholesky(a * cov))
        err = 0.0
        for i in range(n):
            o = np.arange(n) != i
            U = (Xw[o] - Xw[i]) @ A.T
            err += (ridged_line_intercept(U, yw[o], np.exp(-0.5 * np.sum(U * U, -1)), ridge)[0] - yw[i]) ** 2
        scores.append(err / n)
    return np.array(scores)


def nw_loo_cv(Xw, yw, alphas):
    """Brute-force leave-one-out CV(α·COV) (thesis Algorithm 4), float64 loops."""
    Xw = np.asarray(Xw, np.float64)
    yw = np.asarray(yw, np.float64)
    cov = np.cov(Xw.T, ddof=1).reshape(Xw.shape[1], Xw.shape[1])
    scores = []
    for a in alphas:
        P = np.linalg.inv(a * cov)
        err = 0.0
        for i in range(len(yw)):
            num = den = 0.0
            for j in range(len(yw)):
                if j != i:
                    u = Xw[i] - Xw[j]
                    k = np.exp(-0.5 * u @ P @ u)
                    num += k * yw[j]
                    den += k
            err += (num / den - yw[i]) ** 2
        scores.append(err / len(yw))
    return np.array(scores)
