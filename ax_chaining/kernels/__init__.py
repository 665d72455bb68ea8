"""GPyTorch kernels for finite candidate sets evaluated from the candidates' own
representation: a precomputed Gram matrix over an item index, or molecules'
fingerprints (in feature mode, or as a packed library over an item index)."""

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
    "MinMaxKernel",
    "PackedFingerprints",
    "PrecomputedKernel",
    "TanimotoKernel",
    "gram_key",
    "register_fingerprints",
    "register_gram",
    "registered_fingerprints",
    "registered_gram",
]
