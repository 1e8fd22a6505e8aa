"""Sliding-window Gaussian-process regression."""
from .kernels import KERNELS, GPParams, gp_params, gram, lengthscales, matern32, matern52, noise_var, signal_var, squared_exponential
from .likelihood import MEANS, log_marginal_likelihood, masked_kernel_matrix, mean_coefficients, mean_residuals
from .window import GPWindowState, gp_window, latent, tune_hyperparameters
