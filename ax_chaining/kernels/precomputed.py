r"""A kernel over a finite set of items (graphs, strings, molecules) that looks up
a precomputed Gram matrix by item index, as the paper's graph problem needs; and
the base of every item-index kernel."""

from __future__ import annotations

import math
from typing import Any

import torch
from gpytorch.kernels import Kernel
from torch import Tensor

from ax_chaining.kernels.registry import ContentRegistry, content_key, deepcopy_sharing

__all__ = [
    "ItemIndexKernel",
    "PrecomputedKernel",
    "gram_key",
    "register_gram",
    "registered_gram",
]

_GRAMS: ContentRegistry[Tensor] = ContentRegistry(
    "PrecomputedKernel argument `gram`",
    "Gram matrix",
    "`ax_chaining.kernels.register_gram(gram)` (or "
    "`precomputed_kernel_surrogate_spec(gram)`)",
)
_CHECK_BLOCK = 512  # block side when validating a Gram matrix


class ItemIndexKernel(Kernel):
    r"""Base of the kernels on item indices: ``... x q x 1`` inputs (see
    :func:`item_indices`) over the ``num_items`` items of a table shared by all
    batches (one ``active_dims`` column, no ``batch_shape``), held in the
    attribute ``_table`` names and shared, not copied, by :func:`copy.deepcopy`
    (BoTorch's fantasies). Subclasses set ``normalized_inputs`` and define
    ``num_items`` and ``_items(x1, x2, i1, i2, diag, **params)``, ``i1`` and
    ``i2`` the inputs' indices."""

    has_lengthscale = False
    _table = ""

    def __init__(
        self, active_dims: tuple[int, ...] | None = None, **kwargs: Any
    ) -> None:
        check_index_kernel_args(type(self).__name__, active_dims, kwargs)
        super().__init__(active_dims=active_dims, **kwargs)

    def forward(
        self,
        x1: Tensor,
        x2: Tensor,
        diag: bool = False,
        last_dim_is_batch: bool = False,
        **params: Any,
    ) -> Tensor:
        """``k(x1, x2)``, ``batch_shape x n1 x n2`` (``x n1`` if ``diag``)."""
        if last_dim_is_batch:
            raise ValueError(
                f"{type(self).__name__} does not support `last_dim_is_batch=True`."
            )
        i1 = self._indices(x1)
        i2 = i1 if x2 is x1 else self._indices(x2)
        return self._items(x1, x2, i1, i2, diag, **params)

    def _indices(self, x: Tensor) -> Tensor:
        return item_indices(
            x, self.num_items, self.normalized_inputs, type(self).__name__
        )

    def __deepcopy__(self, memo: dict[int, Any]) -> ItemIndexKernel:
        return deepcopy_sharing(self, memo, getattr(self, self._table))


class PrecomputedKernel(ItemIndexKernel):
    r"""A kernel that looks up a precomputed Gram matrix by item index:

    .. math::

        k(i, j) = K_{\mathrm{round}(i), \mathrm{round}(j)}

    for a symmetric PSD :math:`K \in \mathbb{R}^{n \times n}` over items
    :math:`g_0, \dots, g_{n-1}` and ``... x q x 1`` inputs (see
    :func:`item_indices`). No hyperparameters. The Gram is the buffer ``gram``
    (a reference). Piecewise constant: optimize over the finite set.

    Args:
        gram: ``n x n`` symmetric PSD Gram matrix (integer and boolean tensors
            become the default dtype), or the key :func:`register_gram`
            returned (what Ax stores).
        normalized_inputs: Inputs in ``[0, 1]`` are indices ``round(x (n - 1))``
            (Ax's normalization of an integer parameter on ``[0, n - 1]``).
        validate: Check that ``gram`` is square, finite, symmetric (``rtol``,
            ``atol``) with a non-negative diagonal.
        check_psd: Refuse a smallest eigenvalue below
            ``-sqrt(n eps) max |diag|`` (``eps`` of its dtype): one float64
            Cholesky, ``O(n^3)``.
        **kwargs: Passed on to :class:`~gpytorch.kernels.Kernel` (one
            ``active_dims`` column, no ``batch_shape``).

    Example:
        >>> gram = torch.tensor([[1.0, 0.5], [0.5, 1.0]], dtype=torch.float64)
        >>> kernel = PrecomputedKernel(gram)
        >>> kernel(torch.tensor([[0.0]]), torch.tensor([[0.0], [1.0]])).to_dense()
        tensor([[1.0000, 0.5000]])
        >>> model = SingleTaskGP(train_X, train_Y, covar_module=ScaleKernel(kernel))
    """

    _table = "gram"

    def __init__(
        self,
        gram: Tensor | str,
        normalized_inputs: bool = False,
        validate: bool = True,
        check_psd: bool = True,
        rtol: float = 1e-5,
        atol: float = 1e-8,
        active_dims: tuple[int, ...] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(active_dims=active_dims, **kwargs)
        if isinstance(gram, str):
            gram, validate = registered_gram(gram), False
        gram = _float_gram(gram, validate, check_psd, rtol, atol)
        self.normalized_inputs = bool(normalized_inputs)
        self.register_buffer("gram", gram)

    @property
    def num_items(self) -> int:
        """The number of items ``n``."""
        return self.gram.shape[-1]

    def _items(
        self, x1: Tensor, x2: Tensor, i1: Tensor, i2: Tensor, diag: bool, **params: Any
    ) -> Tensor:
        gram = self.gram
        i1, i2 = i1.to(gram.device), i2.to(gram.device)
        if diag:
            if i1.shape[-1] != i2.shape[-1]:
                raise ValueError(
                    "`diag=True` requires x1 and x2 with the same number of points, "
                    f"got {i1.shape[-1]} and {i2.shape[-1]}."
                )
            res = gram[i1, i2]
        else:
            res = gram[i1.unsqueeze(-1), i2.unsqueeze(-2)]
        dtype = x1.dtype if x1.is_floating_point() else gram.dtype
        return res.to(device=x1.device, dtype=dtype)


def check_index_kernel_args(
    owner: str, active_dims: Any, kwargs: dict[str, Any]
) -> None:
    """Refuse an item-index kernel's ``batch_shape`` and an ``active_dims`` of
    more than one column; drops an empty ``batch_shape`` from ``kwargs``."""
    if kwargs.get("batch_shape") not in (None, torch.Size([])):
        raise ValueError(
            f"{owner} does not support a non-empty `batch_shape` (the table behind "
            f"the item index is shared by all batches), got {kwargs['batch_shape']}."
        )
    kwargs.pop("batch_shape", None)
    if active_dims is not None and len(tuple(active_dims)) != 1:
        raise ValueError(
            "`active_dims` must select exactly one input column (the item index),"
            f" got {tuple(active_dims)}."
        )


def item_indices(
    x: Tensor, num_items: int, normalized_inputs: bool, owner: str
) -> Tensor:
    r"""``torch.long`` indices in ``0..n-1`` (``x``'s shape without its last
    dimension, on its device) of a kernel's ``... x q x 1`` inputs over
    ``n = num_items`` items: ``x`` rounded, or with ``normalized_inputs``
    ``round(x * (n - 1))``, which must be an integer up to the inputs'
    round-off. ``ValueError`` (naming ``owner``) for any other input.

    Example:
        >>> item_indices(torch.tensor([[0.0], [0.5], [1.0]]), 5, True, "kernel")
        tensor([0, 2, 4])
    """
    if x.shape[-1] != 1:
        raise ValueError(
            f"{owner} expects inputs with a single column holding the "
            f"item index (shape `... x q x 1`), got shape {tuple(x.shape)}. Use "
            "`active_dims` to select the index column."
        )
    x = x[..., 0]
    if x.is_floating_point() and not torch.isfinite(x).all():
        raise ValueError(
            f"{owner} got non-finite inputs (NaN or inf); expected item indices."
        )
    n = num_items
    # float64 keeps the rounding exact for large n (MPS has no float64).
    values = x.to(torch.float32 if x.device.type == "mps" else torch.float64)
    if normalized_inputs:
        values = values * (n - 1)
    idx = torch.round(values)
    off = (values - idx).abs()
    # The inputs' own round-off: x = i / (n - 1) in float32 is off by ~eps.
    eps = torch.finfo(x.dtype).eps if x.is_floating_point() else 0.0
    if normalized_inputs and idx.numel() and float(off.max()) > 1e-6 + 8 * eps * n:
        # x = i / (m - 1) of an index parameter 0..m-1 is an item only if m = n.
        k = int(off.argmax())
        got = float(x.reshape(-1)[k])
        raise ValueError(
            f"{owner} input {got:.6g} is not an item of its {n} items "
            f"(x * (n - 1) = {float(values.reshape(-1)[k]):.4f} is not an "
            f"integer): the index parameter must have bounds (0, {n - 1}), as "
            f"`candidate_index_parameter({n})` gives."
        )
    if idx.numel() and (idx.min().item() < 0 or idx.max().item() > n - 1):
        expected = (
            f"normalized values in [0, 1] (mapped to indices round(x * {n - 1}) "
            f"in 0..{n - 1})"
            if normalized_inputs
            else f"integer item indices in 0..{n - 1}. If the inputs are "
            "normalized to the unit cube, construct the kernel with "
            "`normalized_inputs=True`"
        )
        raise ValueError(
            f"{owner} input `x` out of range: got values in [{x.min().item()}, "
            f"{x.max().item()}], which round to indices in [{int(idx.min())}, "
            f"{int(idx.max())}]; expected {expected}."
        )
    return idx.to(torch.long)


def gram_key(gram: Tensor) -> str:
    """Content hash of a Gram matrix: ``"sha256:<hex>"`` over dtype, shape, bytes.

    Example:
        >>> gram_key(torch.eye(2, dtype=torch.float64))[:7]
        'sha256:'
    """
    return content_key(_float_gram(gram))


def register_gram(gram: Tensor, validate: bool = True, check_psd: bool = True) -> str:
    """Register a Gram matrix (a reference) under :func:`gram_key`, which Ax
    stores instead of the matrix; returns the key. A reloaded experiment needs
    the same matrix registered again in its process. ``validate`` and
    ``check_psd`` as for :class:`PrecomputedKernel`, checked once, here.

    Example:
        >>> PrecomputedKernel(register_gram(torch.eye(3))).num_items
        3
    """
    gram = _float_gram(gram, validate, check_psd)
    return _GRAMS.add(gram_key(gram), gram)


def registered_gram(key: str) -> Tensor:
    """The Gram matrix registered under ``key`` (:func:`register_gram`);
    ``ValueError`` if none with that content is registered in this process."""
    return _GRAMS.get(key)


def _float_gram(
    gram: Tensor,
    validate: bool = False,
    check_psd: bool = True,
    rtol: float = 1e-5,
    atol: float = 1e-8,
) -> Tensor:
    """``gram`` as a floating tensor, checked as :class:`PrecomputedKernel`
    describes if ``validate``."""
    must = "PrecomputedKernel argument `gram` must"
    if not isinstance(gram, Tensor):
        try:
            gram = torch.as_tensor(gram)
        except Exception as e:  # pragma: no cover - exotic input types
            raise ValueError(
                f"{must} be a tensor (or array-like), got {type(gram).__name__}."
            ) from e
    if gram.is_complex():
        raise ValueError(f"{must} be real, got dtype {gram.dtype}.")
    if not gram.is_floating_point():
        gram = gram.to(torch.get_default_dtype())
    if not validate:
        return gram
    if gram.dim() != 2 or gram.shape[0] != gram.shape[1]:
        shape = tuple(gram.shape)
        raise ValueError(f"{must} be a square n x n matrix, got shape {shape}.")
    n = gram.shape[0]
    if n == 0:
        raise ValueError(f"{must} have at least one item, got an empty 0 x 0 matrix.")
    # Row sums are finite iff all entries are (barring overflow): one cheap pass.
    if not bool(torch.isfinite(gram.sum(dim=-1)).all()):
        for start in range(0, n, _CHECK_BLOCK):
            rows = gram[start : start + _CHECK_BLOCK]
            if not bool(torch.isfinite(rows).all()):
                bad = (~torch.isfinite(rows)).nonzero()[0]
                raise ValueError(
                    f"{must} be finite, got gram[{start + int(bad[0])}, "
                    f"{int(bad[1])}] = {rows[bad[0], bad[1]].item()}."
                )
    # Symmetry, comparing block (i, j) with block (j, i)^T for j >= i.
    for i0 in range(0, n, _CHECK_BLOCK):
        i1 = min(i0 + _CHECK_BLOCK, n)
        for j0 in range(i0, n, _CHECK_BLOCK):
            j1 = min(j0 + _CHECK_BLOCK, n)
            upper = gram[i0:i1, j0:j1]
            lower = gram[j0:j1, i0:i1].mT
            if torch.equal(upper, lower):
                continue
            diff = (upper - lower).abs()
            tol = atol + rtol * torch.maximum(upper.abs(), lower.abs())
            if bool((diff > tol).any()):
                raise ValueError(
                    f"{must} be symmetric, got max |gram - gram.T| = "
                    f"{diff.max().item():.3g} (rtol={rtol}, atol={atol}) in the "
                    f"block gram[{i0}:{i1}, {j0}:{j1}]."
                )
    diagonal = gram.diagonal()
    if (diagonal < -atol).any():
        i = int(torch.argmin(diagonal))
        raise ValueError(
            f"{must} be positive semi-definite, got a negative diagonal entry "
            f"gram[{i}, {i}] = {diagonal[i].item()}."
        )
    if not check_psd:
        return gram
    # Rounding a PSD matrix's entries to a dtype of epsilon eps moves its
    # eigenvalues by at most n eps / 2 max |diag|, and random errors by about
    # 2 sqrt(n) times an entry's: the tolerance covers the first for n <= 4 / eps
    # and the second up to sqrt(eps) / 2 per entry.
    scale = max(float(diagonal.abs().max()), 1e-300)
    tol = math.sqrt(n * torch.finfo(gram.dtype).eps) * scale
    # The Cholesky factor of K + tol I exists iff every eigenvalue exceeds -tol.
    shifted = gram.to(torch.float64, copy=True)
    shifted.diagonal().add_(tol)
    failed = int(torch.linalg.cholesky_ex(shifted).info) != 0
    del shifted  # n^2 float64 entries, before eigvalsh takes as many
    if failed:
        min_eig = torch.linalg.eigvalsh(gram.to(torch.float64)).min().item()
        raise ValueError(
            f"{must} be positive semi-definite, got smallest eigenvalue "
            f"{min_eig:.3g}, below the tolerance -{tol:.3g} (sqrt(n * eps) * max "
            f"|diagonal|, eps of {gram.dtype}). Expected a valid kernel matrix; "
            "pass check_psd=False only for a matrix known to be PSD."
        )
    return gram
