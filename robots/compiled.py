"""numba.njit with the on-disk cache: the one decorator of the compiled kernels (safety/kernel.py,
policies/mlp_kernel.py, estimation/kernel.py). It sits in robots/ because that is the one
room all three may import."""
from __future__ import annotations

import numba


def njit(fn=None, *, fastmath=False):
    """numba.njit(cache=True) where a cache directory is writable (the package's __pycache__, else
    numba's user-wide cache); compiled in memory where none is (a read-only install): numba refuses
    cache=True at decoration then. `@njit` or `@njit(fastmath=...)`."""
    if fn is None:
        return lambda f: njit(f, fastmath=fastmath)
    opts = {"fastmath": fastmath} if fastmath else {}
    try:
        return numba.njit(cache=True, **opts)(fn)
    except RuntimeError:
        return numba.njit(**opts)(fn)
