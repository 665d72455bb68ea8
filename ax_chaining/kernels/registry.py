"""Content-addressed registries of the large objects an item-index kernel holds:
Ax stores a short key instead of the object, and a key never resolves to other
content."""

from __future__ import annotations

import copy
import hashlib
from typing import Any, Generic, TypeVar

from torch import Tensor

_T = TypeVar("_T")


class ContentRegistry(Generic[_T]):
    """Objects by content key (references, not copies) for one kernel argument;
    ``owner``, ``what`` and ``how`` (to register it again) name them in errors.

    Example:
        >>> grams = ContentRegistry("kernel argument `gram`", "Gram matrix", "f()")
        >>> grams.get(grams.add("sha256:0", [[1.0]]))
        [[1.0]]
    """

    def __init__(self, owner: str, what: str, how: str) -> None:
        self.owner, self.what, self.how = owner, what, how
        self._objects: dict[str, _T] = {}

    def add(self, key: str, obj: _T) -> str:
        """Keep a reference (not a copy) of ``obj`` under ``key``; returns it."""
        self._objects[key] = obj
        return key

    def get(self, key: str) -> _T:
        """The object registered under ``key``; ``ValueError`` if none is in this
        process (e.g. after loading a saved experiment)."""
        obj = self._objects.get(key)
        if obj is None:
            raise ValueError(
                f"{self.owner} is the key {key[:23]}..., but no {self.what} with "
                "that content is registered in this process. Expected it to be "
                f"registered first: call {self.how} after loading a saved "
                "experiment."
            )
        return obj


def deepcopy_sharing(obj: Any, memo: dict[int, Any], constant: Any) -> Any:
    """``copy.deepcopy(obj)`` sharing, not duplicating, ``constant`` (a kernel's
    Gram matrix or library, which BoTorch's fantasies would copy whole)."""
    memo[id(constant)] = constant
    cls = obj.__class__
    new = cls.__new__(cls)
    memo[id(obj)] = new
    for key, value in obj.__dict__.items():
        new.__dict__[key] = copy.deepcopy(value, memo)
    return new


def content_key(table: Tensor) -> str:
    """Content hash of a tensor: ``"sha256:<hex>"`` over dtype, shape and bytes,
    read block by block (a memory-mapped table is never copied whole)."""
    digest = hashlib.sha256(f"{table.dtype}|{tuple(table.shape)}|".encode())
    for block in table.split(1 << 16):
        digest.update(block.detach().cpu().contiguous().numpy().tobytes())
    return "sha256:" + digest.hexdigest()
