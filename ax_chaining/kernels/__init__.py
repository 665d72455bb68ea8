"""GPyTorch kernels for finite candidate sets evaluated from the candidates' own
representation: a precomputed Gram matrix over an item index."""

from ax_chaining.kernels.precomputed import (
    PrecomputedKernel,
    gram_key,
    register_gram,
    registered_gram,
)

__all__ = ["PrecomputedKernel", "gram_key", "register_gram", "registered_gram"]
