"""Deprecated alias of :mod:`ax_chaining.test_functions` (and, for ``io``, of
:mod:`ax_chaining.io`), kept for one release.

``import ax_chaining.benchmark.problems`` (or ``molecules``, ``harness``,
``moses``, ``io``) warns with a :class:`DeprecationWarning` and gives the new
module itself, so every name is the same object under both paths.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from types import ModuleType

__all__ = ["alias_module"]

_NEW = "ax_chaining.test_functions"


def alias_module(old: str, new: str) -> ModuleType:
    """Warn that module ``old`` moved to ``new``, then put ``new`` in its place.

    Called by each old submodule while it is imported: the import then returns
    ``new`` (the import system reads the module back from ``sys.modules``).

    Args:
        old: The deprecated module's name.
        new: The name of the module that replaces it.

    Returns:
        The module ``new``.
    """
    warnings.warn(
        f"{old} is deprecated and will be removed in the next release; "
        f"import {new} instead.",
        DeprecationWarning,
        stacklevel=3,
    )
    module = importlib.import_module(new)
    sys.modules[old] = module
    return module


warnings.warn(
    f"{__name__} is deprecated and will be removed in the next release; "
    f"import {_NEW} instead.",
    DeprecationWarning,
    stacklevel=2,
)
