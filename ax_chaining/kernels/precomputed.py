r"""A kernel over a finite set of items (graphs, strings, molecules) that looks up
a precomputed Gram matrix by item index, as the paper's graph problem needs."""

from __future__ import annotations

import hashlib
import math
from typing import Any

import torch
from gpytorch.kernels import Kernel
from torch import Tensor

from ax_chaining.kernels.registry import ContentRegistry, deepcopy_sharing

__all__ = ["PrecomputedKernel", "gram_key", "register_gram", "registered_gram"]

# Gram matrices by content hash (see `register_gram`): references, not copies.
_GRAMS: ContentRegistry[Tensor] = ContentRegistry(
    "PrecomputedKernel argument `gram`",
    "Gram matrix",
    "`ax_chaining.kernels.register_gram(gram)` (or "
    "`precomputed_kernel_surrogate_spec(gram)`)",
)

# Block side when validating a large Gram matrix (keeps temporaries small).
_CHECK_BLOCK = 512


class PrecomputedKernel(Kernel):
    r"""A kernel that looks up a precomputed Gram matrix by item index.

    Given a symmetric positive semi-definite Gram matrix :math:`K \in
    \mathbb{R}^{n \times n}` over a finite set of items :math:`\{g_0, \dots,
    g_{n-1}\}` (e.g. graphs), the kernel between two inputs holding item indices
    :math:`i` and :math:`j` is

    .. math::

        k(i, j) = K_{\mathrm{round}(i), \mathrm{round}(j)}.

    Inputs are ``... x q x 1`` item indices (rounded to the nearest integer;
    outside :math:`0..n-1` a ``ValueError``), or with ``normalized_inputs=True``
    Ax's unit-cube values :math:`x` of an integer parameter on :math:`[0, n - 1]`,
    index :math:`\mathrm{round}(x (n - 1))`. Batch shapes broadcast and
    ``diag=True`` works; the result has the input's device and floating dtype.
    No hyperparameters (wrap it in a :class:`~gpytorch.kernels.ScaleKernel`).
    The Gram is the buffer ``gram``, kept by reference (do not modify it) and
    shared, not copied, by :func:`copy.deepcopy` (BoTorch's fantasies).
    Piecewise constant in its input: optimize over the finite set
    (``optimize_acqf_discrete``), not by gradients.

    Args:
        gram: ``n x n`` symmetric PSD Gram matrix (integer and boolean tensors
            become the default dtype), or the key :func:`register_gram`
            returned (what Ax stores).
        normalized_inputs: Inputs in ``[0, 1]`` are indices ``round(x (n - 1))``.
        validate: Check that ``gram`` is square, finite, symmetric (``rtol``,
            ``atol``) with a non-negative diagonal, blockwise.
        check_psd: Refuse a smallest eigenvalue below
            ``-sqrt(n eps) max |diag|`` (``eps`` of its dtype): one float64
            Cholesky, ``O(n^3)``.
        rtol: Relative tolerance of the symmetry check.
        atol: Absolute tolerance of the symmetry check.
        active_dims: The one input column holding the index, e.g. ``(3,)``.
        **kwargs: Passed on to :class:`~gpytorch.kernels.Kernel` (no
            ``batch_shape``: the Gram is shared by all batches).

    Example:
        >>> gram = torch.tensor([[1.0, 0.5], [0.5, 1.0]], dtype=torch.float64)
        >>> kernel = PrecomputedKernel(gram)
        >>> kernel(torch.tensor([[0.0]]), torch.tensor([[0.0], [1.0]])).to_dense()
        tensor([[1.0000, 0.5000]])
        >>> model = SingleTaskGP(train_X, train_Y, covar_module=ScaleKernel(kernel))
    """

    has_lengthscale = False
    is_stationary = False

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
        check_index_kernel_args("PrecomputedKernel", active_dims, kwargs)
        super().__init__(active_dims=active_dims, **kwargs)
        if isinstance(gram, str):
            gram, validate = registered_gram(gram), False
        gram = _as_float_gram(gram)
        if validate:
            _validate_gram(gram, rtol=rtol, atol=atol, check_psd=check_psd)
        self.normalized_inputs = bool(normalized_inputs)
        self.register_buffer("gram", gram)

    @property
    def num_items(self) -> int:
        """The number of items ``n``."""
        return self.gram.shape[-1]

    def indices(self, x: Tensor) -> Tensor:
        """Item indices of ``... x q x 1`` inputs (:func:`item_indices`)."""
        return item_indices(
            x, self.num_items, self.normalized_inputs, "PrecomputedKernel"
        )

    def forward(
        self,
        x1: Tensor,
        x2: Tensor,
        diag: bool = False,
        last_dim_is_batch: bool = False,
        **params: Any,
    ) -> Tensor:
        """``K[x1, x2]``, ``batch_shape x n1 x n2`` (``x n1`` if ``diag``)."""
        if last_dim_is_batch:
            raise ValueError(
                "PrecomputedKernel does not support `last_dim_is_batch=True`."
            )
        out_device = x1.device
        out_dtype = x1.dtype if x1.is_floating_point() else self.gram.dtype
        gram = self.gram
        i1 = self.indices(x1).to(gram.device)
        i2 = self.indices(x2).to(gram.device)
        if diag:
            if i1.shape[-1] != i2.shape[-1]:
                raise ValueError(
                    "`diag=True` requires x1 and x2 with the same number of points, "
                    f"got {i1.shape[-1]} and {i2.shape[-1]}."
                )
            res = gram[i1, i2]
        else:
            res = gram[i1.unsqueeze(-1), i2.unsqueeze(-2)]
        return res.to(device=out_device, dtype=out_dtype)

    def __deepcopy__(self, memo: dict[int, Any]) -> PrecomputedKernel:
        return deepcopy_sharing(self, memo, self.gram)


def check_index_kernel_args(
    owner: str, active_dims: Any, kwargs: dict[str, Any]
) -> None:
    """Check an item-index kernel's ``Kernel`` arguments: one input column and
    no batch shape (``ValueError`` otherwise); drops an empty ``batch_shape``."""
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
    r"""Item indices of the inputs of a kernel over ``num_items`` items.

    Args:
        x: ``... x q x 1`` item indices, or with ``normalized_inputs`` values in
            ``[0, 1]`` (index ``round(x * (num_items - 1))``, which must be an
            integer up to the inputs' round-off).
        num_items: The number of items ``n``.
        normalized_inputs: Whether ``x`` is Ax's unit-cube normalization.
        owner: The kernel's name, for error messages.

    Returns:
        ``torch.long`` indices in ``0..n-1``, ``x``'s shape without its last
        dimension, on its device; ``ValueError`` for any other input.

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
    tol = 1e-6 + 8 * eps * n
    if normalized_inputs and idx.numel() and float(off.max()) > tol:
        # x = i / (m - 1) of an index parameter 0..m-1 is an item only if m = n.
        k = int(off.argmax())
        got = float(x.reshape(-1)[k])
        raise ValueError(
            f"{owner} input {got:.6g} is not an item of its {n} items "
            f"(x * (n - 1) = {float(values.reshape(-1)[k]):.4f} is not an "
            f"integer): the index parameter must have bounds (0, {n - 1}), as "
            f"`candidate_index_parameter({n})` gives."
        )
    if idx.numel() > 0:
        lo, hi = idx.min().item(), idx.max().item()
        if lo < 0 or hi > n - 1:
            if normalized_inputs:
                expected = (
                    f"normalized values in [0, 1] (mapped to indices "
                    f"round(x * {n - 1}) in 0..{n - 1})"
                )
            else:
                expected = f"integer item indices in 0..{n - 1}"
            got = f"values in [{x.min().item()}, {x.max().item()}]"
            hint = (
                ""
                if normalized_inputs
                else " If the inputs are normalized to the unit cube, construct "
                "the kernel with `normalized_inputs=True`."
            )
            raise ValueError(
                f"{owner} input `x` out of range: got {got}, which "
                f"round to indices in [{int(lo)}, {int(hi)}]; expected "
                f"{expected}.{hint}"
            )
    return idx.to(torch.long)


def gram_key(gram: Tensor) -> str:
    """Content hash of a Gram matrix: ``"sha256:<hex>"`` over dtype, shape, bytes.

    Example:
        >>> gram_key(torch.eye(2, dtype=torch.float64))[:7]
        'sha256:'
    """
    gram = _as_float_gram(gram).detach()
    digest = hashlib.sha256(f"{gram.dtype}|{tuple(gram.shape)}|".encode())
    digest.update(gram.cpu().contiguous().numpy().tobytes())
    return "sha256:" + digest.hexdigest()


def register_gram(gram: Tensor, validate: bool = True, check_psd: bool = True) -> str:
    """Register a Gram matrix under its content hash :func:`gram_key`; returns it.

    Ax stores the key with each generator run instead of the ``n x n`` matrix; a
    reloaded experiment needs the same matrix registered again in its process
    (another matrix has another key). The registry keeps a reference. ``validate``
    and ``check_psd`` check it once, here, as :class:`PrecomputedKernel` does.

    Example:
        >>> PrecomputedKernel(register_gram(torch.eye(3))).num_items
        3
    """
    gram = _as_float_gram(gram)
    if validate:
        _validate_gram(gram, rtol=1e-5, atol=1e-8, check_psd=check_psd)
    return _GRAMS.add(gram_key(gram), gram)


def registered_gram(key: str) -> Tensor:
    """The Gram matrix registered under ``key`` (:func:`register_gram`);
    ``ValueError`` if none with that content is registered in this process."""
    return _GRAMS.get(key)


def _as_float_gram(gram: Tensor) -> Tensor:
    """``gram`` as a floating tensor (no copy if it already is one)."""
    if not isinstance(gram, Tensor):
        try:
            gram = torch.as_tensor(gram)
        except Exception as e:  # pragma: no cover - exotic input types
            raise ValueError(
                "PrecomputedKernel argument `gram` must be a tensor (or array-like),"
                f" got {type(gram).__name__}."
            ) from e
    if gram.is_complex():
        raise ValueError(
            f"PrecomputedKernel argument `gram` must be real, got dtype {gram.dtype}."
        )
    if not gram.is_floating_point():
        gram = gram.to(torch.get_default_dtype())
    return gram


def _validate_gram(gram: Tensor, rtol: float, atol: float, check_psd: bool) -> None:
    """Check that ``gram`` is square, finite and symmetric (blockwise)."""
    if gram.dim() != 2 or gram.shape[0] != gram.shape[1]:
        raise ValueError(
            "PrecomputedKernel argument `gram` must be a square n x n matrix, got "
            f"shape {tuple(gram.shape)}."
        )
    n = gram.shape[0]
    if n == 0:
        raise ValueError(
            "PrecomputedKernel argument `gram` must have at least one item, got an "
            "empty 0 x 0 matrix."
        )
    diagonal = gram.diagonal()
    # Row sums are finite iff all entries are (barring overflow): one cheap pass.
    if not bool(torch.isfinite(gram.sum(dim=-1)).all()):
        for start in range(0, n, _CHECK_BLOCK):
            rows = gram[start : start + _CHECK_BLOCK]
            if not bool(torch.isfinite(rows).all()):
                bad = (~torch.isfinite(rows)).nonzero()[0]
                raise ValueError(
                    "PrecomputedKernel argument `gram` must be finite, got "
                    f"gram[{start + int(bad[0])}, {int(bad[1])}] = "
                    f"{rows[bad[0], bad[1]].item()}."
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
                    "PrecomputedKernel argument `gram` must be symmetric, got "
                    f"max |gram - gram.T| = {diff.max().item():.3g} (rtol={rtol}, "
                    f"atol={atol}) in the block gram[{i0}:{i1}, {j0}:{j1}]."
                )
    if (diagonal < -atol).any():
        i = int(torch.argmin(diagonal))
        raise ValueError(
            "PrecomputedKernel argument `gram` must be positive semi-definite, got a "
            f"negative diagonal entry gram[{i}, {i}] = {diagonal[i].item()}."
        )
    if check_psd:
        _check_psd(gram, n, diagonal)


def _check_psd(gram: Tensor, n: int, diagonal: Tensor) -> None:
    r"""Refuse a smallest eigenvalue below ``-sqrt(n * eps) * max |diag|``.

    Rounding a PSD matrix's entries to a dtype of epsilon ``eps`` moves its
    eigenvalues by at most ``n * eps / 2 * max |diag|``, and random errors by
    about ``2 sqrt(n)`` times an entry's: the tolerance covers the first for
    ``n <= 4 / eps`` and the second up to ``sqrt(eps) / 2`` per entry. Checked
    in float64, whose round-off is far below the tolerance.
    """
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
            "PrecomputedKernel argument `gram` must be positive semi-definite, "
            f"got smallest eigenvalue {min_eig:.3g}, below the tolerance "
            f"-{tol:.3g} (sqrt(n * eps) * max |diagonal|, eps of {gram.dtype}). "
            "Expected a valid kernel matrix; pass check_psd=False only for a "
            "matrix known to be PSD."
        )
