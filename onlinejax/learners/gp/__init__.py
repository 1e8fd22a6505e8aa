"""Sliding-window Gaussian-process regression.

:mod:`onlinejax.learners.gp.window` holds the learner's anatomy in one file: its
state (:class:`GPWindowState`), ``init``, ``predict_one``, ``step_one`` /
``learn_one``, ``evict``, ``tune`` and the factory :func:`gp_window`. Its
option records :class:`GPHyper` and :class:`GPWindowOptions` are in
:mod:`onlinejax.learners.gp.window_options`; the tune's type-II MAP search
(:func:`tune_hyperparameters`, in named pieces) and its options
(:class:`GPTuneOptions`) are in :mod:`onlinejax.learners.gp.hyperparameters`, the window's scale estimate
(:func:`window_scale`) in :mod:`onlinejax.learners.gp.scale`. The pair kernels and
:class:`GPParams` are in :mod:`onlinejax.learners.gp.kernels` (with :func:`periodic`, :func:`linear` and
sums and products of kernels, ``as_kernel("se") + periodic(12.0)``), the masked mean
functions and log marginal likelihood in :mod:`onlinejax.learners.gp.likelihood`.
"""
from .kernels import (KERNELS, Kernel, as_kernel, cross, gp_params, gram, matern32, matern52, linear, periodic,
                      resolve_kernel, squared_exponential)
from .params import GPParams, lengthscales, noise_var, signal_var
from .likelihood import MEANS, log_marginal_likelihood, masked_kernel_matrix, mean_coefficients, mean_residuals
from .hyperparameters import GPTuneOptions, tune_hyperparameters
from .scale import window_scale
from .window import GPHyper, GPWindowOptions, GPWindowState, gp_window, latent

__all__ = [
    "gp_window",
    "GPWindowState",
    "GPHyper",
    "GPTuneOptions",
    "GPWindowOptions",
    "tune_hyperparameters",
    "latent",
    "window_scale",
    "GPParams",
    "gp_params",
    "signal_var",
    "noise_var",
    "lengthscales",
    "squared_exponential",
    "matern32",
    "matern52",
    "periodic",
    "linear",
    "Kernel",
    "as_kernel",
    "KERNELS",
    "resolve_kernel",
    "gram",
    "cross",
    "MEANS",
    "log_marginal_likelihood",
    "masked_kernel_matrix",
    "mean_coefficients",
    "mean_residuals",
    "window",
    "kernels",
    "likelihood",
    "hyperparameters",
    "scale",
]
