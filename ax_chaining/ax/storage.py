"""JSON storage of this package's classes (a Gram matrix, fingerprint library or
feature table is stored as its content hash only)."""

import os
from typing import Any

from ax.api.client import Client
from ax.exceptions.storage import JSONDecodeError
from ax.storage.botorch_modular_registry import (
    register_acquisition,
    register_acquisition_function,
    register_kernel,
)
from ax.storage.json_store.encoders import (
    generation_node_to_dict,
    transition_criterion_to_dict,
)
from ax.storage.json_store.registry import CORE_DECODER_REGISTRY, CORE_ENCODER_REGISTRY

from ax_chaining.acquisition import GPUCB, UCB, ChainingUCB
from ax_chaining.ax.candidates import CandidateSetSpec
from ax_chaining.ax.nodes import (
    CandidateSetAcquisition,
    CandidateSetNode,
    SobolCandidateNode,
    UniformCandidateNode,
)
from ax_chaining.ax.stopping import (
    RegretBoundCriterion,
    RegretBoundGlobalStoppingStrategy,
)
from ax_chaining.certificate.schedule import CheckSchedule
from ax_chaining.checks import type_error
from ax_chaining.kernels import (
    FeatureTableKernel,
    MinMaxKernel,
    PrecomputedKernel,
    TanimotoKernel,
)


def _node_to_dict(node: Any) -> dict[str, Any]:
    extra = {"candidate_spec": node.candidate_spec}
    if getattr(node, "stop_rule", None) is not None:
        extra["stop_rule"] = node.stop_rule
    if isinstance(node, CandidateSetNode):
        extra["certificate_schedule"] = node.certificate_schedule
    return {**generation_node_to_dict(node), **extra}


def register_storage() -> None:
    """Register this package's classes with Ax's JSON storage (idempotent).

    Importing :mod:`ax_chaining.ax` calls it, as Ax registers its own classes
    at import; call it again after registering classes of your own. Not a
    ``RegistryBundle``: the BoTorch classes resolve through Ax's global
    BoTorch-modular registries, which a bundle does not carry.
    """
    register_acquisition(CandidateSetAcquisition)
    for acqf_class in (ChainingUCB, GPUCB, UCB):
        register_acquisition_function(acqf_class)
    for kernel_class in (
        PrecomputedKernel,
        TanimotoKernel,
        MinMaxKernel,
        FeatureTableKernel,
    ):
        register_kernel(kernel_class)
    # Ax's generic encoder of init arguments fits both stopping classes.
    encoders = {
        CandidateSetNode: _node_to_dict,
        SobolCandidateNode: _node_to_dict,
        UniformCandidateNode: _node_to_dict,
        RegretBoundCriterion: transition_criterion_to_dict,
        RegretBoundGlobalStoppingStrategy: transition_criterion_to_dict,
    }
    CORE_ENCODER_REGISTRY.update(encoders)
    for cls in (CandidateSetSpec, CheckSchedule, *encoders):
        CORE_DECODER_REGISTRY[cls.__name__] = cls


def load_client(filepath: str | os.PathLike[str]) -> Client:
    """Ax's ``Client.load_from_json_file``, once this package's classes are
    registered with Ax's JSON storage (:func:`register_storage`).

    ``Client.load_from_json_file`` alone knows them only once
    :mod:`ax_chaining.ax` is imported; this function is reachable from
    ``import ax_chaining`` too (``ax_chaining.load_client``). A Gram matrix or
    fingerprint library is stored by content key: register it again
    (``precomputed_kernel_surrogate_spec(gram)``, ``register_gram``) before
    generating.

    Args:
        filepath: A snapshot written by ``Client.save_to_json_file``.

    Raises:
        ValueError: The snapshot names a class Ax's storage does not know (one
            of your own: register it with Ax before loading); the message
            names the class.

    Example:
        >>> import ax_chaining
        >>> client = ax_chaining.load_client("snapshot.json")
    """
    if not isinstance(filepath, str | os.PathLike):
        raise type_error("filepath", "a path (str or os.PathLike)", filepath)
    register_storage()
    try:
        return Client.load_from_json_file(os.fspath(filepath))
    except (ValueError, JSONDecodeError) as e:
        if "not registered" not in str(e):
            raise
        raise ValueError(
            f"Cannot load {os.fspath(filepath)!r}: {e} This package's classes are "
            "registered; a class of your own (an acquisition function, kernel, "
            "node or criterion) must be registered with Ax's JSON storage before "
            "loading, as in the process that saved it (e.g. ax.storage."
            "botorch_modular_registry.register_acquisition_function(MyClass))."
        ) from e
