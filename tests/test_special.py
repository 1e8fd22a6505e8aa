"""The Student-t CDF and quantile (:mod:`onlinejax.core.special`) against float64 scipy and closed forms."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from onlinejax.core.special import _beta_continued_fraction, student_t_cdf, student_t_quantile
from conftest import tol

DT = jnp.zeros(()).dtype
NUS = [0.05, 0.3, 0.9, 1.5, 2.0, 2.7, 3.0, 5.0, 7.3, 10.0, 15.0, 19.9]


def test_cdf_matches_scipy_to_the_dtype_over_the_whole_line():
    """Relative error of F over |z| from 1e-8 to 1e30 either side (beyond float32's √max), for ν below Hill's switch: both continued-fraction
    sides and the switch between them (``x = (a + 1)/(a + 2.5)``), the centre included (F near ½ to the dtype's
    resolution, where ``1 - ν/(ν + z²)`` would cancel)."""
    zs = np.concatenate([-np.logspace(-8, 30, 381)[::-1], [0.0], np.logspace(-8, 30, 381)])
    for nu in NUS:
        a = nu / 2
        switch = np.sqrt(nu * ((a + 2.5) / (a + 1) - 1))  # the z at which the two sides meet
        z = np.concatenate([zs, switch * np.array([-1.0001, -1, -0.9999, 0.9999, 1, 1.0001])])
        ref = stats.t.cdf(z, nu)
        got = np.asarray(student_t_cdf(jnp.asarray(z, DT), jnp.asarray(nu, DT)), np.float64)
        ok = ref > np.finfo(DT).tiny * 1e3  # float32: the far tail underflows
        np.testing.assert_allclose(got[ok], ref[ok], rtol=tol(2e-13, 2e-5), err_msg=str(nu))


def test_cdf_at_one_degree_of_freedom_is_the_cauchy_arctangent():
    """ν = 1: ``F(z) = ½ + atan(z)/π`` (scipy's own t CDF is 1.5e-9 off it at z = -1e-8)."""
    z = np.array([-1e6, -30.0, -1.0, -1e-4, -1e-8, 0.0, 1e-8, 0.3, 2.0, 1e7])
    got = np.asarray(student_t_cdf(jnp.asarray(z, DT), jnp.asarray(1.0, DT)), np.float64)
    with np.errstate(divide="ignore"):
        want = np.where(z < 0, -np.arctan(1 / z) / np.pi, 0.5 + np.arctan(z) / np.pi)  # no cancellation in the tail
    np.testing.assert_allclose(got, want, rtol=tol(1e-13, 1e-5))


def test_cdf_edges_and_gradients():
    """±inf give 1 and 0, NaN gives NaN; the gradient in z is the density and the one in ν matches central
    differences of scipy's CDF, at z = 0 too (each branch evaluated at a point of its own region)."""
    got = student_t_cdf(jnp.asarray([np.inf, -np.inf, np.nan], DT), jnp.asarray(3.0, DT))
    assert float(got[0]) == 1.0 and float(got[1]) == 0.0 and np.isnan(float(got[2]))
    grad = jax.jit(jax.grad(student_t_cdf, argnums=(0, 1)))
    for z in (0.0, 0.7, 3.0, 50.0):
        for nu in (0.5, 3.0, 12.0):
            gz, gn = (float(g) for g in grad(jnp.asarray(z, DT), jnp.asarray(nu, DT)))
            assert gz == pytest.approx(stats.t.pdf(z, nu), rel=tol(1e-10, 1e-4))
            h = 1e-6 * nu
            fd = (stats.t.cdf(z, nu + h) - stats.t.cdf(z, nu - h)) / (2 * h)
            assert gn == pytest.approx(fd, rel=tol(1e-5, 1e-3), abs=tol(1e-10, 1e-6))


def test_continued_fraction_is_the_incomplete_beta_function():
    """``I_x(a, b) = x^a (1-x)^b cf / (a B(a, b))`` against ``scipy.special.betainc`` on the converging side."""
    from scipy import special

    for a, b in ((0.025, 0.5), (0.5, 0.5), (0.5, 9.9), (3.0, 0.5), (9.9, 0.5)):
        x = np.linspace(0.0, (a + 1) / (a + b + 2), 9)[1:]
        cf = np.asarray(_beta_continued_fraction(jnp.asarray(a, DT), jnp.asarray(b, DT), jnp.asarray(x, DT)),
                        np.float64)
        got = np.exp(a * np.log(x) + b * np.log1p(-x) - special.betaln(a, b)) / a * cf
        np.testing.assert_allclose(got, special.betainc(a, b, x), rtol=tol(1e-13, 2e-6), err_msg=f"{a}, {b}")


def test_quantile_inverts_the_cdf_and_compiles_without_a_while_loop():
    """``t_ν(p)`` against scipy; the jaxpr of the CDF and the quantile holds no data-dependent loop (fixed counts)."""
    nus = jnp.asarray(NUS + [25.0, 1e4], DT)
    for p in (0.75, 0.975, 0.995):
        want = stats.t.ppf(p, np.asarray(nus, np.float64))
        want = np.where(want > np.finfo(DT).max, np.inf, want)  # beyond the dtype's range
        np.testing.assert_allclose(np.asarray(student_t_quantile(p, nus)), want, rtol=tol(1e-9, 2e-5))
    for fn, args in ((student_t_cdf, (jnp.ones(3, DT), nus[:3])),
                     (lambda df: student_t_quantile(0.975, df), (nus[:3],))):
        assert "while" not in str(jax.make_jaxpr(fn)(*args))
