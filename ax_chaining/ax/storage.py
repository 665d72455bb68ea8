r"""Storage, and non-Euclidean spaces (an item index with a precomputed Gram).

Nothing is registered at import time. :func:`register_storage` (one line,
idempotent) registers this package's classes with Ax's JSON registries; the
strategy factories call it, and a fresh process must call it before
``Client.load_from_json_file``. Ax's ``RegistryBundle`` is not used: the Client's
JSON path takes one, but the BoTorch classes (acquisition functions, kernel,
``Acquisition`` subclass) are resolved through Ax's global BoTorch-modular
registries, which a bundle does not cover.

A precomputed Gram matrix is referenced by its content hash
(:func:`~ax_chaining.kernels.register_gram`): a saved experiment holds no copy of
the ``n x n`` matrix, and a reference resolves only to the same content.
"""

from __future__ import annotations

from typing import Any

from ax.api.configs import RangeParameterConfig
from ax.generators.torch.botorch_modular.surrogate import SurrogateSpec
from ax.generators.torch.botorch_modular.utils import ModelConfig
from ax.storage.botorch_modular_registry import (
    register_acquisition,
    register_acquisition_function,
    register_kernel,
)
from ax.storage.json_store.encoders import generation_node_to_dict
from ax.storage.json_store.registry import CORE_DECODER_REGISTRY, CORE_ENCODER_REGISTRY
from torch import Tensor

from ax_chaining.ax.candidates import CandidateSetSpec, check_positive_int

__all__ = [
    "candidate_index_parameter",
    "precomputed_kernel_surrogate_spec",
    "register_storage",
]


def candidate_index_parameter(
    num_items: int, name: str = "item"
) -> RangeParameterConfig:
    """An Ax parameter config for an item index ``0 .. num_items - 1``.

    With :func:`precomputed_kernel_surrogate_spec`, this optimizes over any
    finite set of objects (graphs, strings, molecules) given their Gram matrix.

    Args:
        num_items: Number of items ``n >= 2``.
        name: Parameter name.

    Returns:
        ``RangeParameterConfig(name, bounds=(0, n - 1), parameter_type="int")``.
    """
    if check_positive_int("num_items", num_items) < 2:
        raise ValueError(f"`num_items` must be at least 2, got {num_items}.")
    return RangeParameterConfig(
        name=name, bounds=(0, num_items - 1), parameter_type="int"
    )


def precomputed_kernel_surrogate_spec(gram: Tensor) -> SurrogateSpec:
    """An Ax ``SurrogateSpec`` whose GP covariance is a precomputed Gram matrix.

    For a search space with one integer item-index parameter with bounds
    ``[0, n - 1]`` (:func:`candidate_index_parameter`): Ax's ``Normalize``
    transform maps the index to ``[0, 1]`` and
    :class:`~ax_chaining.kernels.PrecomputedKernel` (``normalized_inputs=True``)
    maps it back to a row of ``gram``. The Gram matrix is the prior covariance of
    the standardized objective, as in the paper (no learned output scale).

    The matrix is validated and registered here
    (:func:`~ax_chaining.kernels.register_gram`); the spec, hence every stored
    generator run, holds its content hash only. After loading a saved experiment
    in a new process, call this function (or ``register_gram``) again with the
    same matrix before generating.

    Args:
        gram: ``n x n`` symmetric PSD Gram matrix of the items (the paper
            normalizes it so that ``k(g, g) = 1``).

    Returns:
        A ``SurrogateSpec`` for ``chaining_generation_strategy(surrogate_spec=...)``.

    Example:
        >>> client.configure_experiment(parameters=[candidate_index_parameter(100)])
        >>> gs = chaining_generation_strategy(
        ...     surrogate_spec=precomputed_kernel_surrogate_spec(gram)
        ... )
    """
    from botorch.models import SingleTaskGP

    from ax_chaining.kernels import PrecomputedKernel, register_gram

    if not isinstance(gram, Tensor):
        raise TypeError(f"`gram` must be a torch.Tensor, got {type(gram).__name__}.")
    config = ModelConfig(
        botorch_model_class=SingleTaskGP,
        covar_module_class=PrecomputedKernel,
        covar_module_options={"gram": register_gram(gram), "normalized_inputs": True},
    )
    return SurrogateSpec(model_configs=[config])


def _node_to_dict(node: Any) -> dict[str, Any]:
    return {**generation_node_to_dict(node), "candidate_spec": node.candidate_spec}


def register_storage() -> None:
    """Register this package's classes with Ax's JSON storage (idempotent).

    Registers :class:`~ax_chaining.ax.selection.CandidateSetAcquisition`,
    ``ChainingUCB``, ``GPUCB``, :class:`~ax_chaining.ax.selection.UCB`,
    ``PrecomputedKernel``, :class:`CandidateSetSpec`, the two node classes and
    the stopping strategy and criterion of :mod:`ax_chaining.stopping`.

    Example:
        >>> register_storage()
        >>> client = Client.load_from_json_file("snapshot.json")
    """
    from ax.storage.json_store.encoders import transition_criterion_to_dict

    from ax_chaining.acquisition import GPUCB, ChainingUCB
    from ax_chaining.ax.nodes import CandidateSetNode, UniformCandidateNode
    from ax_chaining.ax.selection import UCB, CandidateSetAcquisition
    from ax_chaining.kernels import PrecomputedKernel
    from ax_chaining.stopping import (
        RegretBoundCriterion,
        RegretBoundGlobalStoppingStrategy,
        stopping_strategy_to_dict,
    )

    register_acquisition(CandidateSetAcquisition)
    for acqf_class in (ChainingUCB, GPUCB, UCB):
        register_acquisition_function(acqf_class)
    register_kernel(PrecomputedKernel)
    CORE_DECODER_REGISTRY["CandidateSetSpec"] = CandidateSetSpec
    for node_class in (CandidateSetNode, UniformCandidateNode):
        CORE_ENCODER_REGISTRY[node_class] = _node_to_dict
        CORE_DECODER_REGISTRY[node_class.__name__] = node_class
    CORE_ENCODER_REGISTRY[RegretBoundCriterion] = transition_criterion_to_dict
    CORE_DECODER_REGISTRY["RegretBoundCriterion"] = RegretBoundCriterion
    CORE_ENCODER_REGISTRY[RegretBoundGlobalStoppingStrategy] = stopping_strategy_to_dict
    CORE_DECODER_REGISTRY["RegretBoundGlobalStoppingStrategy"] = (
        RegretBoundGlobalStoppingStrategy
    )
