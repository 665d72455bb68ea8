"""JSON and SQL storage of this package's classes (a Gram matrix, fingerprint
library or feature table is stored as its content hash only)."""

import os
from typing import Any

from ax.api.client import Client
from ax.api.configs import StorageConfig
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
    NODE_FIELDS,
    CandidateSetAcquisition,
    CandidateSetNode,
    SobolCandidateNode,
    UniformCandidateNode,
)
from ax_chaining.ax.stopping import (
    RankBoundGlobalStoppingStrategy,
    RegretBoundGlobalStoppingStrategy,
)
from ax_chaining.certificate import (
    CertificateOptions,
    CheckSchedule,
    ChernoffTail,
    ExplorationTail,
    GaussianTail,
    RankOptions,
    ResidualCalibration,
    StudentTail,
)
from ax_chaining.checks import type_error
from ax_chaining.kernels import (
    FeatureTableKernel,
    MinMaxKernel,
    PrecomputedKernel,
    TanimotoKernel,
)

#: Dataclasses Ax's JSON stores by their fields.
_DATACLASSES = (
    CandidateSetSpec,
    CertificateOptions,
    CheckSchedule,
    RankOptions,
    ResidualCalibration,
    GaussianTail,
    ChernoffTail,
    StudentTail,
    ExplorationTail,
)


def _node_to_dict(node: Any) -> dict[str, Any]:
    if getattr(node, "sharded", None) is not None:
        raise TypeError(
            f"{type(node).__name__} holds sharded candidates (a live Dask cluster) "
            "and is not stored in Ax's JSON; save the experiment instead "
            "(ax.storage.json_store.save.save_experiment), and read certificates "
            "from the generation strategy (certificate_history(gs))."
        )
    extra = {k: getattr(node, k) for k in NODE_FIELDS if hasattr(node, k)}
    return {**generation_node_to_dict(node), **extra}


def register_storage() -> None:
    """Register this package's classes with Ax's JSON storage (idempotent;
    importing :mod:`ax_chaining.ax` calls it)."""
    register_acquisition(CandidateSetAcquisition)
    for acqf_class in (ChainingUCB, GPUCB, UCB):
        register_acquisition_function(acqf_class)
    for kernel in (PrecomputedKernel, TanimotoKernel, MinMaxKernel, FeatureTableKernel):
        register_kernel(kernel)
    # Ax's generic encoder of init arguments fits both stopping classes.
    nodes = (CandidateSetNode, SobolCandidateNode, UniformCandidateNode)
    stops = (RegretBoundGlobalStoppingStrategy, RankBoundGlobalStoppingStrategy)
    encoders = dict.fromkeys(nodes, _node_to_dict)
    encoders |= dict.fromkeys(stops, transition_criterion_to_dict)
    CORE_ENCODER_REGISTRY.update(encoders)
    for cls in (*_DATACLASSES, *encoders):
        CORE_DECODER_REGISTRY[cls.__name__] = cls


def load_client(filepath: str | os.PathLike[str]) -> Client:
    """Ax's ``Client.load_from_json_file``, once this package's classes are registered.
    A Gram matrix, fingerprint library or feature table is stored by content key:
    register it again (e.g. the same ``*_surrogate_spec`` call) before generating.

    Raises:
        ValueError: The snapshot names a class Ax's storage does not know (one
            of your own), naming it.

    Example:
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


def storage_config(url: str) -> StorageConfig:
    """An Ax ``StorageConfig`` for the SQL database at ``url`` (a SQLAlchemy URL): Ax's
    engine initialized, missing tables created and this package's classes registered.

    Raises:
        ImportError: SQLAlchemy or ``tabulate`` is missing (the ``sql`` extra).
        ValueError: This process already uses another database (Ax keeps one
            engine per process).

    Example:
        >>> client = Client(storage_config=storage_config("sqlite:///runs.db"))
    """
    if not isinstance(url, str) or not url:
        raise type_error("url", "a SQLAlchemy database URL (a non-empty str)", url)
    try:
        import sqlalchemy
        import tabulate  # noqa: F401  (Ax's SQL storage formats messages with it)
        from ax.storage.sqa_store.db import (
            create_all_tables,
            get_engine,
            init_engine_and_session_factory,
        )
    except ModuleNotFoundError as e:
        raise ImportError(
            f"Ax's SQL storage needs {e.name!r}, which is not installed; "
            'install it with `pip install "ax-chaining[sql]"`.'
        ) from e
    register_storage()
    wanted = sqlalchemy.engine.make_url(url)
    init_engine_and_session_factory(url=url)
    engine = get_engine()
    if engine.url != wanted:
        raise ValueError(
            f"`url`={wanted.render_as_string()!r}, but this process already uses "
            f"{engine.url.render_as_string()!r}: Ax keeps one database engine per "
            "process. Expected the same URL, or a new process for another database."
        )
    create_all_tables(engine)
    return StorageConfig(url=url)


def load_client_from_database(
    experiment_name: str, storage: str | StorageConfig
) -> Client:
    """Ax's ``Client.load_from_database`` of ``experiment_name`` in ``storage`` (a URL
    or a :func:`storage_config`), once this package's classes are registered.

    Example:
        >>> client = ax_chaining.load_client_from_database("catalogue", url)
    """
    if not isinstance(experiment_name, str) or not experiment_name:
        raise type_error("experiment_name", "a non-empty str", experiment_name)
    if isinstance(storage, StorageConfig):
        if storage.url is None:
            raise ValueError(
                "`storage` has no `url`; expected a StorageConfig from "
                "`storage_config(url)`, or the URL itself."
            )
        storage = storage.url
    if not isinstance(storage, str):
        raise type_error("storage", "a database URL or an Ax StorageConfig", storage)
    return Client.load_from_database(experiment_name, storage_config(storage))
