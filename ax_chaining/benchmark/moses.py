"""Deprecated alias of :mod:`ax_chaining.test_functions.moses`, for one release."""

from ax_chaining.benchmark import alias_module

alias_module(__name__, "ax_chaining.test_functions.moses")
