"""The learners: ``linear`` (Bayesian and SGD linear regression, features, random-feature GPs), ``gp``
(windowed Gaussian processes) and ``kernel_regression``. They import only the core."""

__all__ = ["linear", "gp", "kernel_regression"]
