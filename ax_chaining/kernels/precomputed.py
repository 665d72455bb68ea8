r"""Kernels for non-Euclidean (finite) search spaces.

The Chaining-UCB experiments of Contal, Malherbe & Vayatis (2015) include a search
space made of directed graphs, on which the prior covariance is a shortest-path graph
kernel. Such kernels are most conveniently evaluated once, as an :math:`n \times n`
Gram matrix over the finite candidate set, and then looked up by item index.
:class:`PrecomputedKernel` does exactly that, so that any finite set of objects
(graphs, strings, molecules, ...) can be handled by BoTorch / Ax through a single
integer "item index" parameter.
"""

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

    The input has a single column (``... x q x 1``) holding the item index as a
    float. With ``normalized_inputs=True`` the input is instead expected in
    :math:`[0, 1]`, as produced by Ax / BoTorch's ``Normalize`` transform for an
    integer parameter with bounds :math:`[0, n - 1]`, and the index is
    :math:`\mathrm{round}(x \, (n - 1))`. Inputs are rounded to the nearest integer
    (ties to even), so values within half an index step of the valid range are
    accepted; indices outside :math:`\{0, \dots, n - 1\}` after rounding raise a
    ``ValueError``.

    The kernel has no trainable hyperparameters; wrap it in a
    :class:`~gpytorch.kernels.ScaleKernel` to learn an output scale. It works in
    GPyTorch batch mode (the batch dimensions of ``x1`` and ``x2`` are broadcast
    against each other; the Gram matrix itself is shared by all batches) and with
    ``diag=True``.

    The Gram matrix is registered as a buffer named ``gram``, so
    ``kernel.to(device, dtype)`` moves / casts it. The kernel keeps a reference to
    the tensor passed in (no copy is made when it already has a floating dtype), so
    do not modify it in place afterwards. It is treated as an immutable constant:
    :func:`copy.deepcopy` of the kernel (which BoTorch performs e.g. when
    fantasizing) shares the Gram storage instead of duplicating it, which matters
    for a :math:`10^4 \times 10^4` float64 Gram (800 MB). Pickling stores the full
    matrix.

    The kernel is piecewise constant in its input, hence not differentiable with
    respect to it: optimize acquisition functions over the finite candidate set
    (e.g. ``botorch.optim.optimize_acqf_discrete``), not by gradient ascent.

    The output is returned on the input's device and with the input's floating
    dtype. For efficiency, move the kernel to the input's device beforehand
    (``kernel.to(X)``); otherwise the lookup happens on the Gram's device and only
    the (small) result is transferred.

    Example:
        >>> import torch
        >>> from gpytorch.kernels import ScaleKernel
        >>> from botorch.models import SingleTaskGP
        >>> gram = torch.tensor(
        ...     [[1.0, 0.5, 0.0], [0.5, 1.0, 0.2], [0.0, 0.2, 1.0]],
        ...     dtype=torch.float64,
        ... )
        >>> kernel = PrecomputedKernel(gram)
        >>> x = torch.tensor([[0.0], [2.0]], dtype=torch.float64)
        >>> kernel(x, x).to_dense()
        tensor([[1., 0.],
                [0., 1.]], dtype=torch.float64)
        >>> train_X = torch.arange(3, dtype=torch.float64).unsqueeze(-1)
        >>> train_Y = torch.tensor([[0.1], [0.3], [-0.2]], dtype=torch.float64)
        >>> model = SingleTaskGP(
        ...     train_X, train_Y, covar_module=ScaleKernel(kernel)
        ... )
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
        r"""Build a kernel from a precomputed Gram matrix.

        Args:
            gram: An ``n x n`` symmetric positive semi-definite Gram matrix,
                ``gram[i, j] = k(item_i, item_j)``. Integer / boolean tensors are
                converted to ``torch.get_default_dtype()``; floating tensors are
                stored without copying. Or the key returned by
                :func:`register_gram` (a content hash): the kernel then uses the
                registered matrix, already validated at registration. Ax stores
                this short key with every generator run instead of the matrix.
            normalized_inputs: If True, inputs are expected in ``[0, 1]`` and mapped
                to indices ``round(x * (n - 1))`` (Ax's unit-cube normalization of
                an integer parameter with bounds ``[0, n - 1]``). If False
                (default), inputs are the indices ``0, ..., n - 1`` themselves.
            validate: If True (default), check that ``gram`` is square, finite,
                symmetric (within ``rtol`` / ``atol``) and has a non-negative
                diagonal. The check is blockwise, so it costs no extra
                ``n x n`` memory (about 0.5 s for ``n = 10^4``).
            check_psd: If True (default), check positive semi-definiteness: a
                smallest eigenvalue below ``-sqrt(n * eps) * max |diag|``
                (``eps`` of the Gram's dtype: beyond the rounding of its
                entries) is refused. One Cholesky factorization in float64
                whatever the dtype, ``O(n^3)``: about 1 s at ``n = 4,000`` and
                15 s at ``n = 10^4`` on two cores.
            rtol: Relative tolerance of the symmetry / PSD checks.
            atol: Absolute tolerance of the symmetry / PSD checks.
            active_dims: Optional input column holding the index, e.g. ``(3,)``, for
                use within a product / additive kernel over several parameters.
                Must select exactly one column.
            **kwargs: Passed on to :class:`~gpytorch.kernels.Kernel`
                (``batch_shape`` is not supported: the Gram is shared by all
                batches).
        """
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
        r"""The number of items ``n`` (side of the Gram matrix)."""
        return self.gram.shape[-1]

    def indices(self, x: Tensor) -> Tensor:
        r"""Map kernel inputs to integer item indices.

        Args:
            x: A ``... x q x 1`` tensor of item indices, or of values in ``[0, 1]``
                if ``normalized_inputs=True``.

        Returns:
            A ``torch.long`` tensor of indices in ``0, ..., n - 1`` with the shape of
            ``x`` without its last (size-one) dimension, on ``x``'s device.
        """
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
        r"""Look up the Gram entries of the given index pairs.

        Args:
            x1: A ``batch_shape x n1 x 1`` tensor of item indices.
            x2: A ``batch_shape x n2 x 1`` tensor of item indices (batch shapes are
                broadcast against those of ``x1``).
            diag: If True, return only the diagonal ``K[x1[..., i], x2[..., i]]``
                (requires ``n1 == n2``).
            last_dim_is_batch: Not supported (deprecated in GPyTorch); must be
                False.
            **params: Ignored.

        Returns:
            A ``batch_shape x n1 x n2`` tensor (``batch_shape x n1`` if ``diag``) on
            the input's device, with the input's floating dtype.
        """
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
        r"""Deep-copy the kernel, sharing (not duplicating) the constant Gram."""
        return deepcopy_sharing(self, memo, self.gram)


def check_index_kernel_args(
    owner: str, active_dims: Any, kwargs: dict[str, Any]
) -> None:
    """Check what an item-index kernel takes from GPyTorch's ``Kernel`` arguments:
    one input column (the index) and no batch shape (the table behind the index
    is shared by every batch); drops an empty ``batch_shape`` from ``kwargs``.

    Raises:
        ValueError: A non-empty ``batch_shape``, or ``active_dims`` naming other
            than one column.
    """
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
    r"""Map index-mode kernel inputs to integer item indices.

    Shared by the kernels over a finite set of items (:class:`PrecomputedKernel`,
    the fingerprint kernels in library mode).

    Args:
        x: A ``... x q x 1`` tensor of item indices, or of values in ``[0, 1]``
            if ``normalized_inputs`` (index ``round(x * (num_items - 1))``).
        num_items: The number of items ``n``.
        normalized_inputs: Whether ``x`` is Ax's unit-cube normalization.
        owner: The kernel's name, for error messages.

    Returns:
        A ``torch.long`` tensor of indices in ``0, ..., n - 1`` with the shape of
        ``x`` without its last (size-one) dimension, on ``x``'s device.
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
        # x = i / (m - 1) for an index parameter 0..m-1: x (n - 1) is an
        # integer only if m == n. Anything else would map items to the wrong
        # rows of the kernel's matrix or library.
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
    """Register a Gram matrix under its content hash; returns the key.

    The key replaces the matrix in :class:`PrecomputedKernel`'s arguments, so Ax
    stores a short string with each generator run instead of an ``n x n``
    matrix. A reloaded experiment finds the matrix again only if the same
    content was registered in this process (call this function, or
    :func:`ax_chaining.ax.precomputed_kernel_surrogate_spec`, again before
    generating): a different matrix has a different key, so a reference can
    never silently resolve to another kernel. The registry keeps a reference,
    not a copy (do not modify the matrix in place afterwards).

    Args:
        gram: ``n x n`` symmetric Gram matrix.
        validate: Check it as :class:`PrecomputedKernel` does (once, here).
        check_psd: Include the positive semi-definiteness check.

    Returns:
        The key, ``gram_key(gram)``.
    """
    gram = _as_float_gram(gram)
    if validate:
        _validate_gram(gram, rtol=1e-5, atol=1e-8, check_psd=check_psd)
    return _GRAMS.add(gram_key(gram), gram)


def registered_gram(key: str) -> Tensor:
    """The Gram matrix registered under ``key`` (:func:`register_gram`).

    Raises:
        ValueError: No matrix with that content is registered in this process.
    """
    return _GRAMS.get(key)


def _as_float_gram(gram: Tensor) -> Tensor:
    r"""Return ``gram`` as a floating tensor (no copy if it already is one)."""
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
    r"""Check that ``gram`` is a square, finite, symmetric matrix (blockwise)."""
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

    ``eps`` is the machine epsilon of the Gram's dtype. Rounding the entries of a
    PSD matrix to that dtype moves its eigenvalues by at most ``n * eps / 2 *
    max |diag|`` (every entry by ``eps / 2 * max |diag|``), and errors of random
    sign in a computed Gram by about ``2 sqrt(n)`` times the entries' error: the
    tolerance covers the first for ``n <= 4 / eps`` and the second up to
    ``sqrt(eps) / 2`` per entry, yet stays small (0.024 for a float32 Gram with
    ``n = 5000`` and a unit diagonal). The check runs in float64 whatever the
    dtype: a float32 factorization has round-off of the tolerance's own size.
    """
    scale = max(float(diagonal.abs().max()), 1e-300)
    tol = math.sqrt(n * torch.finfo(gram.dtype).eps) * scale
    # A Cholesky factorization of K + tol I succeeds iff every eigenvalue of K
    # exceeds -tol (up to float64 round-off, far below tol).
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
