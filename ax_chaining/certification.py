"""Deprecated: the certificate is one package, :mod:`ax_chaining.certificate`.

Every name this module held is importable from :mod:`ax_chaining.certificate`
(the schedule of checks from ``schedule``, the tail laws from ``tails``, the
model check and :func:`~ax_chaining.certificate.calibration.certify_model` from
``calibration``). Importing a name from here still works for one release and
warns with a :class:`DeprecationWarning`.
"""

from __future__ import annotations

import warnings
from typing import Any

import ax_chaining.certificate as _package


def __getattr__(name: str) -> Any:
    if name.startswith("_") or name not in _package.__all__:
        raise AttributeError(
            f"module 'ax_chaining.certification' has no attribute {name!r}"
        )
    warnings.warn(
        f"ax_chaining.certification is deprecated and will be removed in the next "
        f"release; import {name} from ax_chaining.certificate instead.",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(_package, name)


def __dir__() -> list[str]:
    return sorted(_package.__all__)
