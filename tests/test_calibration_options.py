"""The calibration and standardisation options as values: ACIOptions, QuantileOptions and StandardizeOptions.

Checked once with the field named, hashable (equal records build the same learner), and their defaults are the
keyword factories' former defaults: the records are compared with the options the wrappers ran with before, and
``calibrated``'s default learner with one built from those options by hand, bit for bit on a short stream. The
float64 pinned rows (``tests/test_pinned_rows.py``: the recommended configurations are ``calibrated``, with
``standardization=`` records) check the same on the grid.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import onlinejax as oj
from onlinejax.wrappers.calibration import (CALIBRATED_STANDARDIZATION, RECALIBRATION_CLIP, ACIOptions, ConformalOptions,
                                            QuantileOptions, RecalibrationOptions, calibrated, conformal)
from onlinejax.wrappers.calibration.factories import _calibrated, _conformal_options
from onlinejax.wrappers.calibration.width_cap import WIDTH_CAP
from onlinejax.learners.linear import bayes_linreg
from onlinejax.wrappers.standardize import StandardizeOptions, standardize

LRN = bayes_linreg(2, intercept=True)


@pytest.mark.parametrize("make, field, bad", [
    (lambda r: conformal(LRN, aci=r), "aci.gamma", ACIOptions(gamma=0.0)),
    (lambda r: conformal(LRN, quantile=r), "quantile.lr", QuantileOptions(lr=-1.0)),
    (lambda r: conformal(LRN, quantile=r), "quantile.time_scale", QuantileOptions(time_scale=2.5)),
    (lambda r: conformal(LRN, quantile=r), "quantile.integrator_gain", QuantileOptions(integrator_gain=-0.1)),
    (lambda r: conformal(LRN, quantile=r), "quantile.saturation", QuantileOptions(saturation=0.0)),
    (lambda r: calibrated(LRN, quantile=r), "quantile.lr", QuantileOptions(lr=0.0)),
    (lambda r: calibrated(LRN, standardization=r), "standardization.clip", StandardizeOptions(clip=0.0)),
    (lambda r: calibrated(LRN, standardization=r), "standardization.keep", StandardizeOptions(keep=8)),
    (lambda r: calibrated(LRN, standardization=r), "standardization.warmup", StandardizeOptions(warmup=0)),
    (lambda r: standardize(LRN, options=r), "options.decay", StandardizeOptions(decay=1.5)),
    (lambda r: standardize(LRN, options=r), "options.keep", StandardizeOptions(warmup=16, keep=8)),
    (lambda r: standardize(LRN, options=r), "options.reexpress",
     StandardizeOptions(warmup=8, reexpress=oj.linear.bayes.reexpress)),
    (lambda r: standardize(LRN, options=r), "options.log_spread", StandardizeOptions(log_spread=-1.0)),
    (lambda r: calibrated(LRN, standardization=r), "standardization.log_spread",
     StandardizeOptions(log_spread=float("nan"))),
])
def test_a_bad_field_is_a_value_error_naming_it(make, field, bad):
    with pytest.raises(ValueError, match=rf"^{field}: "):
        make(bad)


def test_records_are_given_as_records_and_old_keywords_are_refused():
    with pytest.raises(TypeError, match=r"^options\.scale_inputs: expected a bool"):
        standardize(LRN, options=StandardizeOptions(scale_inputs="no"))
    with pytest.raises(TypeError, match=r"^quantile: expected a QuantileOptions, got dict"):
        conformal(LRN, quantile={"lr": 0.05})
    with pytest.raises(TypeError, match=r"^standardization: expected .*StandardizeOptions, got tuple"):
        calibrated(LRN, standardization=(1.0, 5.0))
    for make, old in [(lambda: conformal(LRN, gamma=0.01), "gamma"), (lambda: calibrated(LRN, warmup=8), "warmup"),
                      (lambda: calibrated(LRN, lr=0.05), "lr"), (lambda: standardize(LRN, clip=5.0), "clip")]:
        with pytest.raises(TypeError, match=old):
            make()


def test_the_defaults_are_the_keyword_factorys():
    """The records' defaults are the values the keywords had (a change here changes every calibrated learner)."""
    assert ACIOptions() == (0.005,) and QuantileOptions() == (0.02, 100, None, 1.0)
    assert StandardizeOptions() == (1.0, None, None, True, None, None, 3.0, None)
    assert CALIBRATED_STANDARDIZATION == StandardizeOptions(clip=5.0)
    rc, cc = _conformal_options(level=0.95, method="aci", aci=ACIOptions(), quantile=QuantileOptions(),
                                max_scale=1e4, recalibrate=None, df=None)
    assert rc is None and cc == ConformalOptions("aci", 0.95, 0.005, 0.02, 100, None, 1.0, 1e4, None)
    assert StandardizeOptions(clip=5, warmup=8).checked() == (1.0, 5.0, 8, True, 8, None, 3.0, None)


def test_equal_records_build_the_same_learner():
    """The factory cache keys on the records' values, so a configuration built twice compiles once."""
    a = calibrated(LRN, quantile=QuantileOptions(lr=0.05), standardization=StandardizeOptions(clip=5.0, warmup=8))
    b = calibrated(LRN, quantile=QuantileOptions(lr=0.05), standardization=StandardizeOptions(clip=5.0, warmup=8))
    assert a is b
    assert conformal(LRN, aci=ACIOptions(0.01)) is conformal(LRN, aci=ACIOptions(0.01))
    assert standardize(LRN, options=StandardizeOptions(decay=0.99)) is standardize(
        LRN, options=StandardizeOptions(decay=0.99))
    assert calibrated(LRN, quantile=QuantileOptions(lr=0.05)) is not calibrated(LRN)
    assert a.description == ("calibrated(bayes_linreg(2, intercept=True), quantile=QuantileOptions(lr=0.05), "
                             "standardization=StandardizeOptions(clip=5.0, warmup=8))")


def test_calibrateds_default_is_the_former_learner_bitwise():
    """``calibrated(learner)`` is the wrapper built by hand from the options its keywords made before."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 2)) * [1e3, 1e-2] + [7e5, 0.0]
    y = X[:, 0] * 1e-3 + 50.0 * X[:, 1] + rng.normal(size=60)
    rc = RecalibrationOptions(0.99, RECALIBRATION_CLIP, 1e12, None)
    cc = ConformalOptions("quantile", 0.95, 0.005, 0.05, 100, None, 1.0, 1e4, 4.0, standardized=True,
                          width_cap=WIDTH_CAP)
    by_hand = _calibrated(standardize(LRN, options=StandardizeOptions(clip=5.0)), rc, cc)
    for got, want in [(calibrated(LRN), by_hand), (oj.calibrated_bayes_linreg(2), None)]:
        if want is None:  # the adapters' default: carried posterior, clipped at CARRIED_CLIP
            carried = StandardizeOptions(clip=oj.wrappers.calibration.factories.CARRIED_CLIP,
                                         reexpress=oj.linear.bayes.reexpress)
            want = _calibrated(standardize(LRN, options=carried), rc, cc)
        outs = []
        for lrn in (got, want):
            s, p = jax.lax.scan(lambda s, xy, lrn=lrn: lrn.step(s, *xy), lrn.init(),
                                (jnp.asarray(X, lrn.init().inner.scaler.x_mean.dtype),
                                 jnp.asarray(y, lrn.init().inner.scaler.x_mean.dtype)))
            outs.append(jax.tree_util.tree_leaves((s, p)))
        for a, b in zip(*outs):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
