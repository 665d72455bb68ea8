"""GPyTorch kernels for finite candidate sets evaluated from the candidates' own
representation: a precomputed Gram matrix over an item index, molecules'
fingerprints (in feature mode, or as a packed library over an item index), or
an item's row of a feature table (descriptors) under an ARD kernel."""

from ax_chaining.kernels import features, fingerprints, precomputed
from ax_chaining.kernels.features import *  # noqa: F403
from ax_chaining.kernels.fingerprints import *  # noqa: F403
from ax_chaining.kernels.precomputed import *  # noqa: F403

__all__ = [*features.__all__, *fingerprints.__all__, *precomputed.__all__]
