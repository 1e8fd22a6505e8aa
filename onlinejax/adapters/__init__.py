"""Adapters to other libraries' learner interfaces (import the submodule you need).

- :mod:`onlinejax.adapters.river`: :class:`~onlinejax.adapters.river.RiverRegressor`
  (needs ``river``);
- :mod:`onlinejax.adapters.sklearn`: :class:`~onlinejax.adapters.sklearn.OnlineRegressor`
  (needs ``scikit-learn``).

Both wrap the functional core: the learner is built from a picklable spec (a name or a
module-level factory) and its state is a pytree, so models clone and pickle.
"""

__all__ = [
    "river",
    "sklearn",
]
