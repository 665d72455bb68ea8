r"""A kernel over an item index that sees each item's feature vector.

For a finite set of items with a feature table :math:`F \in \mathbb{R}^{N
\times d}` (row :math:`i` the features of item :math:`i`: descriptors of a
molecule, its count fingerprint), :class:`FeatureTableKernel` is

.. math::

    k(i, j) = k_0(F_i, F_j),

with :math:`k_0` an ARD Matern-5/2 or RBF kernel whose lengthscales the model
fits (one per column), or the MinMax kernel on counts. Its input is the item
index (``... x q x 1``), as for
:class:`~ax_chaining.kernels.PrecomputedKernel`, so Ax's search space is one
integer parameter while the GP sees the features: rows of :math:`F` are
gathered for the indices of each call, nothing ``N x N`` is formed, and
:math:`F` may be a memory map (``torch.from_numpy(np.load(..., mmap_mode="c"))``).

Given the path of a saved table (``.npy``) instead of a tensor, the kernel
maps the file (:func:`open_features`) and keeps the path: a pickled kernel
(what a sharded step sends to its workers, what another process receives)
carries the path and the table's content key, not the table, and Ax's JSON
stores the path, so a saved experiment reopens in a new process.

Priors (``prior``), for features in the unit cube (see
:func:`~ax_chaining.descriptors.clean_features`):

* ``"botorch"``: BoTorch 0.18's default for ``SingleTaskGP``: no output scale,
  a log-normal lengthscale prior whose location grows with :math:`\log d / 2`
  (Hvarfner et al., 2024; ``get_covar_module_with_dim_scaled_prior``), a
  log-normal noise prior (:func:`feature_table_likelihood`).
* ``"baybe"``: BayBE's ``EDBO_SMOOTHED`` preset (``SmoothedEDBOKernelFactory``
  and its likelihood: EDBO's priors interpolated in the dimension between 8 and
  75): an output scale, Gamma priors on the lengthscale, output scale and
  noise, and their initial values. It is *not* what BayBE 0.15 fits by
  default to a molecule parameter: that is ``"chen"``.
* ``"chen"``: BayBE 0.15's default GP for a search space with a
  ``SubstanceParameter`` (its ``BAYBE`` preset dispatches such spaces to the
  ``CHEN`` preset, the adaptive hyperpriors its documentation attributes to
  Chen et al., 2026): with :math:`\ell = 0.4 \sqrt{d} + 4`, a lengthscale prior
  :math:`\Gamma(2\ell, 2)` (mean :math:`\ell`, standard deviation
  :math:`\sqrt{\ell / 2}`: it holds every lengthscale near :math:`\ell`), an
  output scale with prior :math:`\Gamma(\ell, 1)`, both initialized at
  :math:`\ell`, and GPyTorch's plain ``GaussianLikelihood`` (no noise prior).

On fingerprint kernels (``base="minmax"``) there is no lengthscale: the prior
sets the output scale (none for ``"botorch"``, the preset's otherwise, with
:math:`d` the number of count columns under ``"chen"``) and the noise.
"""

from __future__ import annotations

import hashlib
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from botorch.models.utils.gpytorch_modules import (
    get_covar_module_with_dim_scaled_prior,
    get_gaussian_likelihood_with_lognormal_prior,
)
from gpytorch.kernels import Kernel, MaternKernel, ScaleKernel
from gpytorch.likelihoods import GaussianLikelihood
from gpytorch.priors import GammaPrior
from torch import Tensor

from ax_chaining.checks import check_choice, type_error
from ax_chaining.kernels.fingerprints import MinMaxKernel
from ax_chaining.kernels.precomputed import check_index_kernel_args, item_indices
from ax_chaining.kernels.registry import ContentRegistry, deepcopy_sharing

__all__ = [
    "BASES",
    "PRIORS",
    "FeatureTableKernel",
    "baybe_priors",
    "chen_priors",
    "feature_table_likelihood",
    "likelihood_options",
    "open_features",
    "register_features",
    "registered_features",
]

BASES = ("matern52", "rbf", "minmax")
"""The kernels :class:`FeatureTableKernel` applies to the feature rows."""

PRIORS = ("botorch", "baybe", "chen")
"""The hyperparameter priors of :class:`FeatureTableKernel`."""

# Feature tables by content hash (see `register_features`): references.
_FEATURES: ContentRegistry[Tensor] = ContentRegistry(
    "FeatureTableKernel argument `features`",
    "feature table",
    "`ax_chaining.kernels.register_features(features)` (or "
    "`feature_table_surrogate_spec(features)`)",
)
# BayBE's SmoothedEDBOKernelFactory: moments interpolated between these
# dimensions.
_BAYBE_DIMS = (8.0, 75.0)


def baybe_priors(num_dims: int) -> dict[str, tuple[float, float, float]]:
    r"""BayBE's ``EDBO_SMOOTHED`` GP priors for ``num_dims`` features
    (``prior="baybe"``).

    ``(concentration, rate, initial value)`` of the Gamma priors on the
    lengthscale, output scale and noise, linear in ``num_dims`` between the
    low-dimensional (8) and high-dimensional (75) values of BayBE's
    ``SmoothedEDBOKernelFactory`` (the averages of EDBO's one-hot and Mordred
    priors), constant outside.

    Example:
        >>> baybe_priors(200)["lengthscale"]
        (2.5, 0.55, 6.0)
    """
    d = float(num_dims)

    def at(low: float, high: float) -> float:
        return float(np.interp(d, _BAYBE_DIMS, (low, high)))

    return {
        "lengthscale": (at(1.2, 2.5), at(1.1, 0.55), at(0.2, 6.0)),
        "outputscale": (at(5.0, 3.5), at(0.5, 0.15), at(8.0, 15.0)),
        "noise": (at(1.05, 1.5), at(0.5, 0.1), at(0.1, 5.0)),
    }


def chen_priors(num_dims: int) -> dict[str, tuple[float, float, float]]:
    r"""BayBE 0.15's default GP priors for a molecule parameter of
    ``num_dims`` features (``prior="chen"``).

    ``(concentration, rate, initial value)`` of the Gamma priors on the
    lengthscale and the output scale of BayBE's ``CHEN`` preset, with
    :math:`\ell = 0.4 \sqrt{d} + 4`: :math:`\Gamma(2\ell, 2)` and
    :math:`\Gamma(\ell, 1)`, both initialized at :math:`\ell`. It puts no
    prior on the noise.

    Example:
        >>> chen_priors(100)["lengthscale"]
        (16.0, 2.0, 8.0)
    """
    ell = 0.4 * math.sqrt(float(num_dims)) + 4.0
    return {"lengthscale": (2.0 * ell, 2.0, ell), "outputscale": (ell, 1.0, ell)}


# The Gamma priors of each BayBE preset (the priors other than BoTorch's).
_PRESETS = {"baybe": baybe_priors, "chen": chen_priors}


def feature_table_likelihood(prior: str, num_dims: int) -> GaussianLikelihood:
    """The Gaussian likelihood (noise prior) that goes with ``prior``.

    ``"botorch"``: BoTorch's ``get_gaussian_likelihood_with_lognormal_prior``
    (what ``SingleTaskGP`` builds by default); otherwise
    ``GaussianLikelihood(**likelihood_options(prior, num_dims))``.
    """
    options = likelihood_options(prior, num_dims)
    if options is None:
        return get_gaussian_likelihood_with_lognormal_prior()
    return GaussianLikelihood(**options)


def likelihood_options(prior: str, num_dims: int) -> dict[str, Any] | None:
    """``GaussianLikelihood`` keyword arguments for ``prior``, or None where
    ``SingleTaskGP``'s default likelihood is the one (``"botorch"``).

    ``"baybe"``: BayBE's Gamma noise prior for ``num_dims`` features
    (:func:`baybe_priors`), with ``GaussianLikelihood``'s default constraint
    (noise above ``1e-4``) and initial value: not BayBE's initial noise, which
    Ax's JSON storage of likelihood options cannot keep. ``"chen"``: none
    (``{}``: a plain ``GaussianLikelihood``, as BayBE's ``CHEN`` preset).

    Example:
        >>> likelihood_options("baybe", 200)["noise_prior"].rate
        tensor(0.1000)
    """
    check_choice("prior", prior, PRIORS)
    if prior == "botorch":
        return None
    if prior == "chen":
        return {}
    concentration, rate, _ = baybe_priors(num_dims)["noise"]
    return {"noise_prior": GammaPrior(concentration, rate)}


class FeatureTableKernel(Kernel):
    r"""A kernel on item indices through each item's row of a feature table.

    :math:`k(i, j) = k_0(F_i, F_j)` (see the module docstring), with the base
    kernel :math:`k_0` a submodule (``base_kernel``) whose hyperparameters and
    priors the GP's marginal likelihood fits. Equal to a GP on the features
    themselves with the same base kernel (tested against BoTorch's
    ``SingleTaskGP``).

    The table is a non-persistent buffer (not in the ``state_dict``; moved by
    ``.to``), shared, not copied, by :func:`copy.deepcopy`. Pickling stores it,
    unless the kernel was built from a file: then pickling stores the file's
    path and content key, and unpickling maps the file again (refusing one
    whose content changed).

    Example:
        >>> features = torch.rand(100, 5, dtype=torch.float64)
        >>> kernel = FeatureTableKernel(features, base="matern52", prior="baybe")
        >>> x = torch.tensor([[0.0], [7.0]], dtype=torch.float64)
        >>> kernel(x, x).to_dense().shape
        torch.Size([2, 2])
    """

    has_lengthscale = False

    def __init__(
        self,
        features: Tensor | str | os.PathLike,
        base: str = "matern52",
        prior: str = "botorch",
        normalized_inputs: bool = False,
        active_dims: tuple[int, ...] | None = None,
        **kwargs: Any,
    ) -> None:
        r"""Build the kernel over a feature table.

        Args:
            features: An ``N x d`` floating tensor (``N >= 2``; row ``i`` for item
                ``i``; may share a memory map's storage), the key returned
                by :func:`register_features` (a string ``"sha256:..."``), or
                the path of a table saved with ``numpy.save`` (any other string,
                or an ``os.PathLike``), mapped by :func:`open_features`.
            base: One of :data:`BASES`: ``"matern52"`` or ``"rbf"`` (ARD,
                one lengthscale a column) or ``"minmax"`` (non-negative counts).
            prior: One of :data:`PRIORS` (see the module docstring).
            normalized_inputs: Inputs in ``[0, 1]`` (Ax's normalization of an
                index parameter ``0 .. N - 1``) instead of indices.
            active_dims: The one input column holding the index, or None.
            **kwargs: Passed on to :class:`~gpytorch.kernels.Kernel`
                (``batch_shape`` is not supported).
        """
        check_index_kernel_args("FeatureTableKernel", active_dims, kwargs)
        super().__init__(active_dims=active_dims, **kwargs)
        #: The absolute path of the table's file, or None (a tensor or a key).
        self.features_file: str | None = None
        if isinstance(features, str) and features.startswith(_KEY_PREFIX):
            features = registered_features(features)
        elif isinstance(features, str | os.PathLike):
            self.features_file = os.path.abspath(os.fspath(features))
            features = open_features(self.features_file)
        features = _check_features(features)
        check_choice("base", base, BASES)
        check_choice("prior", prior, PRIORS)
        if base == "minmax":
            low = min(float(block.min()) for block in _row_blocks(features))
            if low < 0:
                raise ValueError(
                    "`features` must be non-negative for base='minmax' (counts), "
                    f"got a minimum of {low}."
                )
        self.base, self.prior = base, prior
        self.normalized_inputs = bool(normalized_inputs)
        self.register_buffer("features", features, persistent=False)
        self.base_kernel = _base_kernel(base, prior, features.shape[-1])

    @property
    def num_items(self) -> int:
        """The number of items ``N`` (rows of the table)."""
        return self.features.shape[0]

    def forward(
        self,
        x1: Tensor,
        x2: Tensor,
        diag: bool = False,
        last_dim_is_batch: bool = False,
        **params: Any,
    ) -> Tensor:
        r"""The base kernel between the feature rows of the items ``x1`` and ``x2``."""
        if last_dim_is_batch:
            raise ValueError(
                "FeatureTableKernel does not support `last_dim_is_batch=True`."
            )
        f1 = self._rows(x1)
        f2 = f1 if x2 is x1 else self._rows(x2)
        return self.base_kernel.forward(f1, f2, diag=diag, **params)

    def _rows(self, x: Tensor) -> Tensor:
        idx = item_indices(
            x, self.num_items, self.normalized_inputs, "FeatureTableKernel"
        )
        rows = self.features[idx.to(self.features.device)]
        dtype = x.dtype if x.is_floating_point() else rows.dtype
        return rows.to(device=x.device, dtype=dtype)

    def __deepcopy__(self, memo: dict[int, Any]) -> FeatureTableKernel:
        r"""Deep-copy the kernel, sharing (not duplicating) the feature table."""
        return deepcopy_sharing(self, memo, self.features)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        if self.features_file is not None:
            # A file-backed table travels as its path and content key: a
            # sharded step sends the kernel to every worker at every step.
            state["_buffers"] = {**state["_buffers"], "features": None}
            state["_features_key"] = _file_key(self.features_file)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        key = state.pop("_features_key", None)
        super().__setstate__(state)
        if key is None:
            return
        table = open_features(self.features_file)
        now = _file_key(self.features_file)
        if now != key:
            raise ValueError(
                f"The feature table {self.features_file!r} changed since this "
                f"kernel was pickled (content key {key[:19]}..., the file's now "
                f"{now[:19]}...); expected the same table."
            )
        self.features = table


def _base_kernel(base: str, prior: str, num_dims: int) -> Kernel:
    r"""The base kernel and its priors (see the module docstring)."""
    if base == "minmax":
        kernel: Kernel = MinMaxKernel()
    elif prior == "botorch":
        return get_covar_module_with_dim_scaled_prior(
            ard_num_dims=num_dims, use_rbf_kernel=base == "rbf"
        )
    else:
        concentration, rate, initial = _PRESETS[prior](num_dims)["lengthscale"]
        lengthscale = {
            "ard_num_dims": num_dims,
            "lengthscale_prior": GammaPrior(concentration, rate),
        }
        if base == "rbf":
            from gpytorch.kernels import RBFKernel

            kernel = RBFKernel(**lengthscale)
        else:
            kernel = MaternKernel(nu=2.5, **lengthscale)
        kernel.lengthscale = initial
    if prior == "botorch":
        return kernel
    concentration, rate, initial = _PRESETS[prior](num_dims)["outputscale"]
    scaled = ScaleKernel(kernel, outputscale_prior=GammaPrior(concentration, rate))
    scaled.outputscale = initial
    return scaled


def _check_features(features: Any) -> Tensor:
    if not isinstance(features, Tensor):
        raise type_error("features", "a torch.Tensor (or a registered key)", features)
    if features.dim() != 2 or features.shape[0] < 2 or features.shape[1] < 1:
        raise ValueError(
            "`features` must be an N x d table with N >= 2 and d >= 1, got shape "
            f"{tuple(features.shape)}."
        )
    if not features.is_floating_point():
        raise ValueError(f"`features` must be floating, got dtype {features.dtype}.")
    if not all(bool(torch.isfinite(b).all()) for b in _row_blocks(features)):
        raise ValueError(
            "`features` must be finite; clean the table first "
            "(ax_chaining.descriptors.clean_features)."
        )
    return features


def _row_blocks(features: Tensor) -> list[Tensor]:
    r"""Views of :math:`2^{16}` rows: a memory-mapped table is read block by
    block, never copied or tested whole."""
    return list(features.split(1 << 16))


_KEY_PREFIX = "sha256:"
# Tables opened from files, and their content keys, by (path, size, mtime):
# a worker maps a file once, however many steps' kernels it unpickles.
_FILES: dict[tuple[str, int, int], Tensor] = {}
_FILE_KEYS: dict[tuple[str, int, int], str] = {}


def _file_id(path: str) -> tuple[str, int, int]:
    stat = os.stat(path)
    return os.path.abspath(path), stat.st_size, stat.st_mtime_ns


def open_features(path: str | os.PathLike) -> Tensor:
    """The feature table saved at ``path`` (``numpy.save``, ``.npy``), memory-mapped.

    Copy-on-write (``mmap_mode="c"``): the file is never written. A file is
    mapped once per process while its size and modification time stay the
    same.

    Raises:
        ValueError: No such file, not a ``.npy`` file of an ``N x d`` floating
            table, or a table with non-finite values.

    Example:
        >>> np.save("features.npy", np.random.rand(100, 5))
        >>> open_features("features.npy").shape
        torch.Size([100, 5])
    """
    if not isinstance(path, str | os.PathLike):
        raise type_error("path", "a str or os.PathLike", path)
    file = Path(path)
    if file.suffix != ".npy" or not file.is_file():
        raise ValueError(
            f"`features` must be the path of an existing .npy file (numpy.save), "
            f"got {os.fspath(path)!r}."
        )
    fid = _file_id(os.fspath(file))
    table = _FILES.get(fid)
    if table is None:
        try:
            array = np.load(file, mmap_mode="c", allow_pickle=False)
        except ValueError as e:
            raise ValueError(
                f"`features` {os.fspath(path)!r} is not a numeric .npy table: {e}"
            ) from None
        if array.dtype.kind != "f":
            raise ValueError(
                f"`features` {os.fspath(path)!r} must hold a floating N x d table, "
                f"got dtype {array.dtype} and shape {array.shape}."
            )
        table = _FILES[fid] = _check_features(torch.from_numpy(array))
    return table


def _file_key(path: str) -> str:
    """The content key of the table in ``path`` (computed once per version)."""
    fid = _file_id(path)
    if fid not in _FILE_KEYS:
        _FILE_KEYS[fid] = _content_key(open_features(path))
    return _FILE_KEYS[fid]


def _content_key(features: Tensor) -> str:
    digest = hashlib.sha256(f"{features.dtype}|{tuple(features.shape)}|".encode())
    for block in _row_blocks(features):
        digest.update(block.detach().cpu().contiguous().numpy().tobytes())
    return _KEY_PREFIX + digest.hexdigest()


def register_features(features: Tensor) -> str:
    """Register a feature table under its content hash; returns the key.

    The key replaces the table in :class:`FeatureTableKernel`'s arguments, so
    Ax stores a short string with each generator run (as
    :func:`~ax_chaining.kernels.register_gram` does for a Gram matrix). The
    registry keeps a reference, not a copy.

    Example:
        >>> register_features(torch.eye(3, dtype=torch.float64))[:7]
        'sha256:'
    """
    features = _check_features(features)
    return _FEATURES.add(_content_key(features), features)


def registered_features(key: str) -> Tensor:
    """The feature table registered under ``key`` (:func:`register_features`).

    Raises:
        ValueError: No table with that content is registered in this process.
    """
    return _FEATURES.get(key)
