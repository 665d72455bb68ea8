r"""An item-index kernel on the rows of a feature table :math:`F \in \mathbb{R}^{N
\times d}`: :math:`k(i, j) = k_0(F_i, F_j)`, :math:`k_0` an ARD Matern-5/2 or RBF
kernel or MinMax on counts. Ax sees one integer parameter, the GP the features;
nothing ``N x N`` is formed, and :math:`F` may be a memory map or a saved path."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from linear_operator import to_dense
from torch import Tensor

from ax_chaining.checks import check_choice, type_error
from ax_chaining.kernels.precomputed import ItemIndexKernel
from ax_chaining.kernels.priors import PRIORS, base_kernel
from ax_chaining.kernels.registry import ContentRegistry, content_key

__all__ = [
    "BASES",
    "FeatureTableKernel",
    "open_features",
    "register_features",
    "registered_features",
]

#: The kernels :class:`FeatureTableKernel` applies to the feature rows.
BASES = ("matern52", "rbf", "minmax")

_FEATURES: ContentRegistry[Tensor] = ContentRegistry(
    "FeatureTableKernel argument `features`",
    "feature table",
    "`ax_chaining.kernels.register_features(features)` (or "
    "`feature_table_surrogate_spec(features)`)",
)


class FeatureTableKernel(ItemIndexKernel):
    r"""A kernel on item indices through each item's row of a feature table.

    :math:`k(i, j) = k_0(F_i, F_j)`, with the base kernel :math:`k_0` a
    submodule (``base_kernel``) whose hyperparameters the GP fits. The table is
    a non-persistent buffer (a reference). A kernel built from a file pickles
    as the file's path and content key (unpickling refuses a file whose
    content changed). A batch that repeats items (qLogNEI's baseline beside
    every candidate) is evaluated on its distinct items and gathered: the same
    values up to float rounding.

    Args:
        features: An ``N x d`` floating tensor (``N >= 2``; row ``i`` for item
            ``i``), the key :func:`register_features` returned (``"sha256:..."``)
            or the path of a table saved with ``numpy.save`` (any other string,
            or an ``os.PathLike``), mapped by :func:`open_features`.
        base: One of :data:`BASES`: ``"matern52"`` or ``"rbf"`` (ARD, one
            lengthscale a column) or ``"minmax"`` (non-negative counts).
        prior: One of :data:`~ax_chaining.kernels.priors.PRIORS`.
        normalized_inputs: Inputs in ``[0, 1]`` (Ax's normalization of an
            index parameter ``0 .. N - 1``) instead of indices.
        **kwargs: Passed on to :class:`~gpytorch.kernels.Kernel` (one
            ``active_dims`` column, no ``batch_shape``).

    Example:
        >>> features = torch.rand(100, 5, dtype=torch.float64)
        >>> kernel = FeatureTableKernel(features, base="matern52", prior="baybe")
        >>> x = torch.tensor([[0.0], [7.0]], dtype=torch.float64)
        >>> kernel(x, x).to_dense().shape
        torch.Size([2, 2])
    """

    _table = "features"

    def __init__(
        self,
        features: Tensor | str | os.PathLike,
        base: str = "matern52",
        prior: str = "botorch",
        normalized_inputs: bool = False,
        active_dims: tuple[int, ...] | None = None,
        **kwargs: Any,
    ) -> None:
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
            low = min(float(block.min()) for block in features.split(1 << 16))
            if low < 0:
                raise ValueError(
                    "`features` must be non-negative for base='minmax' (counts), "
                    f"got a minimum of {low}."
                )
        self.base, self.prior = base, prior
        self.normalized_inputs = bool(normalized_inputs)
        self.register_buffer("features", features, persistent=False)
        self.base_kernel = base_kernel(base, prior, features.shape[-1])

    @property
    def num_items(self) -> int:
        """The number of items ``N`` (rows of the table)."""
        return self.features.shape[0]

    def _items(
        self, x1: Tensor, x2: Tensor, i1: Tensor, i2: Tensor, diag: bool, **params: Any
    ) -> Tensor:
        same = x2 is x1 or (i1.shape == i2.shape and torch.equal(i1, i2))
        if not diag and same and i1.dim() > 1:
            # Positions holding one item in every batch (qLogNEI's baseline):
            # their block once, their rows against the others' distinct items.
            flat = i1.reshape(-1, i1.shape[-1])
            fixed = (flat == flat[:1]).all(0)
            if fixed.any() and not fixed.all():
                return self._fixed_blocks(x1, i1, fixed, **params)
        if not diag and i1.dim() > 1:
            # Batches that repeat items (qLogNEI's baseline beside every
            # candidate, the training rows under every batch): k_0 on the
            # distinct items, then gathered, where that forms at most half the
            # entries (so never more memory than the direct route).
            u1, inv1 = torch.unique(i1, return_inverse=True)
            u2, inv2 = (u1, inv1) if same else torch.unique(i2, return_inverse=True)
            batch = torch.broadcast_shapes(i1.shape[:-1], i2.shape[:-1])
            if (
                2 * u1.numel() * u2.numel()
                <= batch.numel() * inv1.shape[-1] * inv2.shape[-1]
            ):
                f1 = self._rows(u1, x1)
                f2 = f1 if u2 is u1 else self._rows(u2, x2)
                k = to_dense(self.base_kernel.forward(f1, f2, **params))
                return k[inv1.unsqueeze(-1), inv2.unsqueeze(-2)]
        f1 = self._rows(i1, x1)
        f2 = f1 if x2 is x1 else self._rows(i2, x2)
        return self.base_kernel.forward(f1, f2, diag=diag, **params)

    def _fixed_blocks(
        self, x: Tensor, idx: Tensor, fixed: Tensor, **params: Any
    ) -> Tensor:
        c, v = fixed.nonzero().squeeze(-1), (~fixed).nonzero().squeeze(-1)
        fc = self._rows(idx.reshape(-1, idx.shape[-1])[0, c], x)
        uv, inv = torch.unique(idx[..., v], return_inverse=True)
        fv = self._rows(idx[..., v], x)

        def k(a: Tensor, b: Tensor) -> Tensor:
            return to_dense(self.base_kernel.forward(a, b, **params))

        out = torch.empty(*idx.shape, idx.shape[-1], dtype=fc.dtype, device=fc.device)
        out[..., c.unsqueeze(-1), c] = k(fc, fc)
        cross = k(self._rows(uv, x), fc)[inv]
        out[..., v.unsqueeze(-1), c] = cross
        out[..., c.unsqueeze(-1), v] = cross.transpose(-1, -2)
        out[..., v.unsqueeze(-1), v] = k(fv, fv)
        return out

    def _rows(self, idx: Tensor, x: Tensor) -> Tensor:
        rows = self.features[idx.to(self.features.device)]
        dtype = x.dtype if x.is_floating_point() else rows.dtype
        return rows.to(device=x.device, dtype=dtype)

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
    # A memory-mapped table is read block by block, never copied whole.
    if not all(bool(torch.isfinite(b).all()) for b in features.split(1 << 16)):
        raise ValueError(
            "`features` must be finite; clean the table first "
            "(ax_chaining.molecules.clean_features)."
        )
    return features


_KEY_PREFIX = "sha256:"
# Tables opened from files, and their content keys, by (path, size, mtime):
# a worker maps a file once, however many steps' kernels it unpickles.
_FILES: dict[tuple[str, int, int], Tensor] = {}
_FILE_KEYS: dict[tuple[str, int, int], str] = {}


def _file_id(path: str) -> tuple[str, int, int]:
    stat = os.stat(path)
    return os.path.abspath(path), stat.st_size, stat.st_mtime_ns


def open_features(path: str | os.PathLike) -> Tensor:
    """The ``N x d`` floating table saved at ``path`` (``numpy.save``, ``.npy``),
    memory-mapped copy-on-write (the file is never written), once per process
    while its size and modification time stay the same; ``ValueError`` for
    anything else or non-finite values.

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
    fid = _file_id(path)
    if fid not in _FILE_KEYS:
        _FILE_KEYS[fid] = content_key(open_features(path))
    return _FILE_KEYS[fid]


def register_features(features: Tensor) -> str:
    """Register a feature table (a reference) under its content hash, which Ax
    stores in :class:`FeatureTableKernel`'s arguments instead of the table;
    returns the key.

    Example:
        >>> register_features(torch.eye(3, dtype=torch.float64))[:7]
        'sha256:'
    """
    features = _check_features(features)
    return _FEATURES.add(content_key(features), features)


def registered_features(key: str) -> Tensor:
    """The feature table registered under ``key`` (:func:`register_features`);
    ``ValueError`` if none with that content is registered in this process."""
    return _FEATURES.get(key)
