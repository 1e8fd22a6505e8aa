"""A cap on a calibrated interval's width: at most ``k`` times the climatology's at the same item.

A model that ignores its inputs and the order of the targets, the
climatology (:func:`~onlinejax.wrappers.baseline.climatology_predict`: after ``n``
targets a Student-t with ``n - 1`` degrees of freedom, location ``ȳ``, scale
``s·sqrt(1 + 1/n)``), has the central interval

    ``ȳ ± t_{n-1}(1 - α/2)·s·sqrt(1 + 1/n)``.

An interval many times wider claims to know less than that crude forecaster, and
the calibrated learners issue such intervals where their own evidence is thin
or stale: on the first items (a prior in a guessed unit), and after a shock,
where a model relearned on a few items meets a variance scale raised by the
misses of the model before it (a short-rate series' 1980 jump: a GP's 95 %
interval 14 times the climatology's, a kernel regression's 43 times).
:func:`capped` keeps the calibrated interval's half-width at most ``k`` (:data:`WIDTH_CAP`)
times the climatology's, whose running statistics the wrapper keeps
(:class:`~onlinejax.wrappers.baseline.ClimatologyState`).

The price is paid where the climatology is itself overconfident: after a
nearly constant stretch a sudden drop (the water flow's, item 92: the climatology's
interval 2.5 wide, the drop 55) is missed by the capped interval as by the
climatology's, and after the targets' spread grows (a noisier regime, a stuck
sensor that resumes) the all-time ``s`` catches up over ``~n`` items (a noise
five times larger after 2,000 items: the first 100 items cover 90 % instead of 95 %).

The cap is applied after the calibrators and they do not learn against it:
they judge the calibrated interval (as if the cap were a wrapper outside them),
so a run of capped misses cannot wind their scale up for later. While all
targets so far are equal (``s = 0``), or before two, there is no cap.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from ...core.special import student_t_quantile_series
from ..baseline import ClimatologyState, climatology_predict

Array = jax.Array

__all__ = ["WIDTH_CAP", "width_cap_variance", "capped"]

#: ``k``: the calibrated interval is at most this many times as wide as the climatology's.
WIDTH_CAP = 2.5


def width_cap_variance(clim: ClimatologyState, alpha: Array, z_alpha: Array, ratio: float = WIDTH_CAP) -> Array:
    """``[]`` the largest variance of a Gaussian whose ``1 - α`` interval is within the cap; ``+inf`` when none.

    ``(k·t_{n-1}(1 - α/2)·s·sqrt(1 + 1/n) / z_α)²`` (module doc; ``z_α = Φ⁻¹(1 - α/2)``), the
    climatology's scale as :func:`~onlinejax.wrappers.baseline.climatology_predict` gives it.

    Args:
      clim: the targets' :class:`~onlinejax.wrappers.baseline.ClimatologyState` before the item.
      alpha, z_alpha: ``[]`` the calibrated miscoverage and its normal quantile.
      ratio: ``k``.
    """
    dt = clim.mean.dtype
    ready = (clim.n >= 2.0) & (clim.var > 0.0)
    pred = climatology_predict(clim)
    t = student_t_quantile_series(1.0 - 0.5 * alpha, z_alpha, pred.df)
    half = ratio * t * pred.scale
    return jnp.where(ready, jnp.minimum((half / z_alpha) ** 2, jnp.finfo(dt).max), jnp.inf).astype(dt)


def capped(clim: ClimatologyState, alpha: Array, z_alpha: Array, var: Array, informative: Array,
           ratio: float = WIDTH_CAP) -> Array:
    """``[]`` the variance ``var`` of an informative calibrated Gaussian, at most :func:`width_cap_variance`'s.

    An uninformative one (an abstention) is returned as it is.
    """
    return jnp.where(informative, jnp.minimum(var, width_cap_variance(clim, alpha, z_alpha, ratio)), var)
