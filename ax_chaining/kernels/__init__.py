"""GPyTorch kernels for finite candidate sets evaluated from the candidates' own
representation: a precomputed Gram matrix over an item index, molecules'
fingerprints (in feature mode, or as a packed library over an item index), or
an item's row of a feature table (descriptors) under an ARD kernel."""

from ax_chaining.kernels.features import (
    FeatureTableKernel,
    open_features,
    register_features,
    registered_features,
)
from ax_chaining.kernels.fingerprints import (
    MinMaxKernel,
    PackedFingerprints,
    TanimotoKernel,
    register_fingerprints,
    registered_fingerprints,
)
from ax_chaining.kernels.precomputed import (
    PrecomputedKernel,
    gram_key,
    register_gram,
    registered_gram,
)

__all__ = [
    "FeatureTableKernel",
    "MinMaxKernel",
    "PackedFingerprints",
    "PrecomputedKernel",
    "TanimotoKernel",
    "gram_key",
    "open_features",
    "register_features",
    "register_fingerprints",
    "register_gram",
    "registered_features",
    "registered_fingerprints",
    "registered_gram",
]
