"""A public factory's recorded call and the cache that returns the same record for equal calls.

:class:`FactoryCall` is what :func:`~onlinejax.core.learner.describe_factory` keeps in
``Learner.factory_call`` (a runner builds the same learner again with other
options from it); :func:`reuse_equal_calls` makes a factory of immutable records
of functions return the same record for equal arguments, so that jit does not
compile their programs again; :func:`map_nested` maps a call's nested arguments.
"""
from __future__ import annotations

from typing import Callable, Optional

import functools

import jax

__all__ = ["FactoryCall", "map_nested", "reuse_equal_calls"]


def map_nested(fn: Callable, v):
    """``v`` with ``fn`` applied to every value inside its lists, tuples and dicts, recursively, in new containers.

    NamedTuples (options, states) and every other value are leaves: ``fn(v)``.
    """
    if isinstance(v, (list, tuple)) and not hasattr(v, "_fields"):
        return type(v)(map_nested(fn, a) for a in v)
    if isinstance(v, dict):
        return {k: map_nested(fn, a) for k, a in v.items()}
    return fn(v)


class FactoryCall:
    """The public factory call that built a :class:`Learner`: ``factory(*args, **kwargs)``.

    Kept so that a runner can build the same learner again with other
    scheduling options (:func:`onlinejax.core.schedule.with_tune_plan`). Compared
    and hashed by identity: equal calls return the same learner
    (:func:`reuse_equal_calls`), and a call's arguments may be arrays.
    """

    __slots__ = ("factory", "args", "kwargs", "built")

    def __init__(self, factory: Callable, args: tuple, kwargs: dict):
        # lists and dicts copied, so a caller who changes theirs later does not change the recorded call
        self.factory = factory
        self.args, self.kwargs = map_nested(lambda v: v, tuple(args)), map_nested(lambda v: v, dict(kwargs))
        self.built: Optional[tuple] = None  # the returned learner's other fields, to tell it from a changed copy

    def __repr__(self) -> str:
        return f"FactoryCall({getattr(self.factory, '__name__', self.factory)!r})"


#: Results kept per function by :func:`reuse_equal_calls` (the oldest is dropped first).
_FACTORY_CACHE_SIZE = 256


def _frozen(v):
    """A hashable key of a factory argument: type and value, lists and dicts as tuples (hash fails on arrays)."""
    if isinstance(v, (list, tuple)):
        return (type(v), tuple(_frozen(a) for a in v))
    if isinstance(v, dict):
        return (dict, tuple((k, _frozen(a)) for k, a in v.items()))
    return (type(v), v)


def reuse_equal_calls(factory: Callable) -> Callable:
    """Decorate a factory of immutable records of functions so that equal arguments return the same record.

    jit keys a static argument (a learner, a weight rule) on its functions, so a
    record built again would compile its programs again. The key holds the
    arguments' types (``1``, ``1.0`` and ``True`` differ), lists and dicts as
    tuples, and what a factory may read from JAX's configuration (x64, the
    backend); a call with an unhashable argument (an array) builds afresh, and
    a call that raises is not kept.
    """
    built: dict = {}

    @functools.wraps(factory)
    def wrapped(*args, **kwargs):
        key = (_frozen(args), _frozen(kwargs), bool(jax.config.jax_enable_x64), jax.default_backend())
        try:
            hash(key)
        except TypeError:
            return factory(*args, **kwargs)
        if key not in built:
            if len(built) >= _FACTORY_CACHE_SIZE:
                built.pop(next(iter(built)))
            built[key] = factory(*args, **kwargs)
        return built[key]

    return wrapped
