r"""Tanimoto and MinMax kernels of molecules' fingerprint tensors; the
:class:`TanimotoKernel` also works over item indices of a :class:`PackedFingerprints`
library, computing its rows exactly from the packed bits, never ``N x N``."""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gpytorch.kernels import Kernel
from torch import Tensor

from ax_chaining.checks import check_bool, check_choice, check_int, type_error
from ax_chaining.kernels.precomputed import check_index_kernel_args, item_indices
from ax_chaining.kernels.registry import ContentRegistry, deepcopy_sharing

__all__ = [
    "MinMaxKernel",
    "PackedFingerprints",
    "TanimotoKernel",
    "register_fingerprints",
    "registered_fingerprints",
]

_LIBRARIES: ContentRegistry[PackedFingerprints] = ContentRegistry(
    "TanimotoKernel argument `library`",
    "fingerprint library",
    "`ax_chaining.kernels.register_fingerprints(library)` (e.g. with "
    "`PackedFingerprints.open(path)`), or `fingerprint_kernel_surrogate_spec("
    "library)`,",
)

ROUTES = ("auto", "inverted", "popcount", "matmul")
# Rows per tile of the inverted index: postings fit in uint16, and one tile's
# counts (512 KB of int64) stay in cache while a row's postings are added up.
_TILE = 1 << 16
_POPCOUNT_WORDS = 1 << 21  # 8-byte words of AND temporaries per popcount block
_MATMUL_BYTES = {"cpu": 1 << 26, "other": 1 << 29}  # unpacked columns per block
# A CUDA device keeps the unpacked bits (float16 up to 2048 bits) when they take
# at most this fraction of its free memory.
_DEVICE_BITS_FRACTION = 0.25
# "auto" takes the inverted route from 1024 + min(N, 2^16) / 32 columns on: it
# costs a fixed amount per row and tile, the popcount route per column.
_INVERTED_MIN_COLS = 1024
_FORMAT = "ax_chaining.PackedFingerprints"
_popcount = np.bitwise_count


def pack_bits(bits: np.ndarray) -> np.ndarray:
    r"""Pack an ``N x m`` array of 0/1 (not checked) into ``N x ceil(m / 64)``
    little-endian ``uint64`` words: bit ``j`` is bit ``j % 64`` of word
    ``j // 64``, padding bits 0.

    Example:
        >>> pack_bits(np.array([[1, 0, 1]]))
        array([[5]], dtype=uint64)
    """
    n_words = -(-bits.shape[1] // 64)
    packed = np.packbits(bits.astype(bool, copy=False), axis=1, bitorder="little")
    out = np.zeros((bits.shape[0], n_words * 8), dtype=np.uint8)
    out[:, : packed.shape[1]] = packed
    return out.view("<u8")


class PackedFingerprints:
    r"""An immutable library of ``N`` binary fingerprints of ``m`` bits, packed
    in ``N x ceil(m / 64)`` ``uint64`` words (:func:`pack_bits`; a memory map
    is kept, not read).

    Example:
        >>> bits = torch.tensor([[1, 1, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0]])
        >>> library = PackedFingerprints.from_bits(bits)
        >>> len(library), library.n_bits, library.popcounts.tolist()
        (3, 4, [2, 2, 0])
        >>> library.tanimoto([0], slice(0, 3))
        tensor([[1.0000, 0.3333, 0.0000]], dtype=torch.float64)
    """

    def __init__(self, words: np.ndarray, n_bits: int, validate: bool = True) -> None:
        """``validate``: check that the padding bits are 0."""
        n_bits = check_int("n_bits", n_bits, 1)
        if not isinstance(words, np.ndarray):
            raise type_error("words", "a numpy array of uint64", words)
        if words.dtype.kind != "u" or words.dtype.itemsize != 8:
            raise ValueError(f"`words` must hold uint64, got dtype {words.dtype}.")
        n_words = -(-n_bits // 64)
        if words.ndim != 2 or words.shape[1] != n_words or words.shape[0] == 0:
            raise ValueError(
                f"`words` must be N x {n_words} (N >= 1) for n_bits={n_bits}, got "
                f"shape {words.shape}."
            )
        if words.dtype != "<u8":  # big-endian words
            words = words.astype("<u8")
        if validate and n_bits % 64:
            high = ~np.uint64((1 << (n_bits % 64)) - 1)
            if np.any(words[:, -1] & high):
                raise ValueError(
                    f"`words` has bits set beyond n_bits={n_bits} (padding must be "
                    "0); pack the bits with `PackedFingerprints.from_bits`."
                )
        self._words = words
        self._n_bits = n_bits
        self._popcounts: np.ndarray | None = None
        self._key: str | None = None
        self._index: tuple[Any, ...] | None = None
        self._devices: dict[torch.device, tuple[Tensor, Tensor, Tensor | None]] = {}

    @classmethod
    def from_bits(cls, bits: Tensor | np.ndarray) -> PackedFingerprints:
        r"""Pack an ``N x m`` tensor or array of 0/1 fingerprints (any dtype)."""
        if not isinstance(bits, Tensor | np.ndarray):
            raise type_error("bits", "a torch.Tensor or numpy array", bits)
        array = bits.detach().cpu().numpy() if isinstance(bits, Tensor) else bits
        if array.ndim != 2 or array.shape[0] == 0 or array.shape[1] == 0:
            raise ValueError(
                "`bits` must be an N x m array of fingerprints with N >= 1 and "
                f"m >= 1, got shape {array.shape}."
            )
        bad = (array != 0) & (array != 1) if array.dtype != bool else None
        if bad is not None and bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            raise ValueError(
                "`bits` must hold only 0 and 1 (fingerprint bits), got "
                f"{array[where].item()} at index {where}."
            )
        return cls(pack_bits(array), array.shape[1], validate=False)

    @classmethod
    def open(cls, path: str | os.PathLike) -> PackedFingerprints:
        r"""Memory-map (read-only) the library :meth:`save` wrote."""
        path = _npy_path(path)
        meta_path = path.with_suffix(".json")
        if not path.exists() or not meta_path.exists():
            raise FileNotFoundError(
                f"`path` {str(path)!r}: expected a fingerprint library written by "
                f"PackedFingerprints.save, i.e. {path.name} and {meta_path.name}."
            )
        meta = json.loads(meta_path.read_text())
        if meta.get("format") != _FORMAT:
            raise ValueError(
                f"`path` {str(meta_path)!r} is not a PackedFingerprints description "
                f"(format {meta.get('format')!r}, expected {_FORMAT!r})."
            )
        return cls(np.load(path, mmap_mode="r"), int(meta["n_bits"]))

    @staticmethod
    def allocate(path: str | os.PathLike, num_rows: int, n_bits: int) -> np.memmap:
        r"""Create a zeroed library file; returns its writable memory map of
        words, for writers that fill it in chunks."""
        path = _npy_path(path)
        n_bits = check_int("n_bits", n_bits, 1)
        shape = (check_int("num_rows", num_rows, 1), -(-n_bits // 64))
        words = np.lib.format.open_memmap(path, mode="w+", dtype="<u8", shape=shape)
        meta = {"format": _FORMAT, "version": 1, "n_bits": n_bits, "rows": shape[0]}
        path.with_suffix(".json").write_text(json.dumps(meta) + "\n")
        return words

    def save(self, path: str | os.PathLike) -> Path:
        r"""Write the library to ``path`` (``.npy``, and its width in a
        ``.json`` beside it); returns the ``.npy`` path."""
        path = _npy_path(path)
        out = self.allocate(path, len(self), self.n_bits)
        for start in range(0, len(self), _TILE):
            out[start : start + _TILE] = self._words[start : start + _TILE]
        out.flush()
        return path

    def __len__(self) -> int:
        return self._words.shape[0]

    def __repr__(self) -> str:
        return f"PackedFingerprints({len(self)} rows x {self.n_bits} bits)"

    def __deepcopy__(self, memo: dict[int, Any]) -> PackedFingerprints:
        return self  # immutable: a model's deep copy must not duplicate it

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_words=np.asarray(self._words), _index=None, _devices={})
        return state

    @property
    def n_bits(self) -> int:
        r"""The fingerprint width ``m``."""
        return self._n_bits

    @property
    def words(self) -> np.ndarray:
        r"""The ``N x ceil(m / 64)`` packed words (read them, do not modify)."""
        return self._words

    @property
    def popcounts(self) -> np.ndarray:
        r"""The number of bits set in each row (``int64``, computed once)."""
        if self._popcounts is None:
            counts = np.empty(len(self), dtype=np.int64)
            for start in range(0, len(self), _TILE):
                block = self._words[start : start + _TILE]
                counts[start : start + _TILE] = _popcount(block).sum(-1)
            self._popcounts = counts
        return self._popcounts

    @property
    def key(self) -> str:
        r"""Content key ``"sha256:<hex>"`` over the width, the shape and the words."""
        if self._key is None:
            header = f"{_FORMAT}|{self.n_bits}|{self._words.shape}|".encode()
            digest = hashlib.sha256(header)
            for start in range(0, len(self), _TILE):
                digest.update(np.ascontiguousarray(self._words[start : start + _TILE]))
            self._key = "sha256:" + digest.hexdigest()
        return self._key

    def unpack(self, rows: Sequence[int] | np.ndarray | slice | None = None) -> Tensor:
        r"""The 0/1 bits of some rows (all if None), ``len(rows) x m`` uint8."""
        words = self._words[slice(None) if rows is None else rows]
        return torch.from_numpy(_unpack_numpy(np.atleast_2d(words), self.n_bits))

    def build_index(self) -> PackedFingerprints:
        r"""Build the inverted index of the ``inverted`` route now (else on first
        use): at most 2 bytes per set bit (a bit set in most rows of a tile is
        stored by the rows that lack it) and 8 per row. Returns ``self``."""
        if self._index is None:
            num_tiles = -(-len(self) // _TILE)
            # One array of postings per tile (uint16 rows within the tile).
            postings = []
            pointers = np.zeros((num_tiles, self.n_bits + 1), dtype=np.int64)
            flipped = np.zeros((num_tiles, self.n_bits), dtype=bool)
            for tile, start in enumerate(range(0, len(self), _TILE)):
                words = self._words[start : start + _TILE]
                bits, rows, flipped[tile] = _tile_postings(words, self.n_bits)
                order = np.argsort(bits, kind="stable")  # radix sort of uint16
                postings.append(rows[order])
                counts = np.bincount(bits, minlength=self.n_bits)
                np.cumsum(counts, out=pointers[tile, 1:])
            # Bit counts as float64 too: the quotients are formed in float64.
            pop = self.popcounts.astype(np.float64)
            self._index = (pointers, postings, flipped, pop)
        return self

    def tanimoto(
        self,
        rows: Tensor | Sequence[int] | np.ndarray | PackedFingerprints,
        cols: Tensor | Sequence[int] | np.ndarray | slice | None = None,
        route: str = "auto",
        dtype: torch.dtype = torch.float64,
        device: torch.device | str | None = None,
    ) -> Tensor:
        r"""Rows of the Tanimoto kernel: :math:`k(\text{lib}[rows], \text{lib}[cols])`.

        Exact (integer counts, one rounding of the quotient): every route gives
        the same values, RDKit's ``BulkTanimotoSimilarity``'s.

        Args:
            rows: ``r`` library row indices, or a :class:`PackedFingerprints` of
                ``r`` fingerprints of the same width (e.g. another shard's).
            cols: Library column indices or a slice (the fast case); all if None.
            route: ``"auto"`` (``matmul`` on a GPU; on CPU ``inverted`` for a run
                of at least ``1024 + min(N, 65536) / 32`` columns, else
                ``popcount``), ``"inverted"``, ``"popcount"`` or ``"matmul"``.
            dtype: Floating dtype of the ``r x c`` result.
            device: Device of the result and of ``matmul``; default that of
                ``rows`` if a tensor, else CPU.

        Example:
            >>> library = PackedFingerprints.from_bits(torch.eye(3))
            >>> library.tanimoto([0], slice(0, 2))
            tensor([[1., 0.]], dtype=torch.float64)
        """
        check_choice("route", route, ROUTES)
        if device is None:
            device = rows.device if isinstance(rows, Tensor) else torch.device("cpu")
        device = torch.device(device)
        n = len(self)
        if isinstance(rows, PackedFingerprints):
            if rows.n_bits != self.n_bits:
                raise ValueError(
                    f"`rows` has {rows.n_bits}-bit fingerprints, the library "
                    f"{self.n_bits}-bit ones; expected the same width."
                )
            row_words, row_pop = np.asarray(rows.words), rows.popcounts
        else:
            row_idx = _index_array(rows, "rows", n)
            row_words, row_pop = self._words[row_idx], self.popcounts[row_idx]
        # Columns: a run (a slice of step 1) or an index array.
        if cols is None:
            cols = slice(0, n)
        if isinstance(cols, slice):
            start, stop, step = cols.indices(n)
            if step != 1:
                cols = np.arange(start, stop, step)
            else:
                cols = slice(start, max(start, stop))
        else:
            cols = _index_array(cols, "cols", n)
            if cols.shape[0] > 1 and np.all(np.diff(cols) == 1):
                cols = slice(int(cols[0]), int(cols[-1]) + 1)
        run = isinstance(cols, slice)
        num_cols = cols.stop - cols.start if run else cols.shape[0]
        if route == "auto":
            # The inverted route reads the postings of every tile the columns
            # span: not worth it for scattered columns.
            inverted = run and num_cols >= _INVERTED_MIN_COLS + min(n, _TILE) // 32
            route = "inverted" if inverted else "popcount"
            route = "matmul" if device.type != "cpu" else route
        if route == "matmul":
            return self._matmul(row_words, row_pop, cols, num_cols, dtype, device)
        num_rows = row_words.shape[0]
        out = np.empty((num_rows, num_cols), dtype=np.float64)
        if out.size and route == "inverted":
            self.build_index()  # once, before any thread reads it
            threads = torch.get_num_threads()
            pop = row_pop.astype(np.float64)

            def rows_of(p: np.ndarray | slice) -> None:
                p_out = out[p] if isinstance(p, slice) else out[p[0] : p[-1] + 1]
                self._inverted(row_words[p], pop[p], cols, p_out)

            if threads > 1 and num_rows >= 4 * threads:
                # numpy's loops release the GIL: rows split over torch's threads.
                parts = np.array_split(np.arange(num_rows), threads)
                with ThreadPoolExecutor(threads) as pool:
                    list(pool.map(rows_of, parts))
            else:
                rows_of(slice(None))
        elif out.size:
            self._popcount_rows(row_words, row_pop, cols, out)
        return torch.from_numpy(out).to(device=device, dtype=dtype)

    def tanimoto_pairs(
        self,
        rows: Tensor | np.ndarray,
        cols: Tensor | np.ndarray,
        dtype: torch.dtype = torch.float64,
    ) -> Tensor:
        r"""Elementwise :math:`k(\text{lib}[rows_i], \text{lib}[cols_i])` for
        broadcastable indices (a tensor ``rows`` keeps its device)."""
        device = rows.device if isinstance(rows, Tensor) else torch.device("cpu")
        r, c = np.broadcast_arrays(
            _index_array(rows, "rows", len(self), flat=False),
            _index_array(cols, "cols", len(self), flat=False),
        )
        if np.array_equal(r, c):  # k(a, a) = 1, also for an empty fingerprint
            return torch.ones(r.shape, dtype=dtype, device=device)
        inter = _popcount(self._words[r] & self._words[c]).sum(-1, dtype=np.int64)
        out = np.empty(r.shape, dtype=np.float64)
        _quotient(inter, self.popcounts[r], self.popcounts[c], out)
        return torch.from_numpy(out).to(device=device, dtype=dtype)

    def _popcount_rows(
        self,
        row_words: np.ndarray,
        row_pop: np.ndarray,
        cols: slice | np.ndarray,
        out: np.ndarray,
    ) -> None:
        # Popcounts of ANDed words, in blocks of rows and columns.
        words, pop = self._words, self.popcounts
        num_cols = out.shape[1]
        for r0 in range(0, row_words.shape[0], 256):
            a_words, a_pop = row_words[r0 : r0 + 256], row_pop[r0 : r0 + 256]
            num_rows = a_words.shape[0]
            step = max(1, _POPCOUNT_WORDS // (num_rows * words.shape[1]))
            for c0 in range(0, num_cols, step):
                c1 = min(c0 + step, num_cols)
                c = _columns(cols, c0, c1)
                both = np.bitwise_and(a_words[:, None, :], words[c][None, :, :])
                inter = _popcount(both).sum(-1, dtype=np.int64)
                part = out[r0 : r0 + num_rows, c0:c1]
                _quotient(inter, a_pop[:, None], pop[c][None, :], part)

    def _inverted(
        self,
        row_words: np.ndarray,
        row_pop: np.ndarray,
        cols: slice | np.ndarray,
        out: np.ndarray,
    ) -> None:
        pointers, postings, flipped, pop = self.build_index()._index
        run = isinstance(cols, slice)
        if run:
            lo, hi = cols.start, cols.stop
        else:  # arbitrary columns: rows over the tiles they span
            lo, hi = int(cols.min()), int(cols.max()) + 1
            buffer = np.empty(hi - lo, dtype=np.float64)
        # Reused buffers; postings gathered as intp, which bincount takes as is.
        hits = np.empty(1 << 17, dtype=np.intp)
        union = np.empty(_TILE, dtype=np.float64)
        for r in range(row_words.shape[0]):
            target = out[r] if run else buffer
            pop_r = row_pop[r]
            bits = np.flatnonzero(_unpack_numpy(row_words[r], self.n_bits))
            for tile in range(lo // _TILE, -(-hi // _TILE)):
                t0 = tile * _TILE
                t1 = min(t0 + _TILE, len(self))
                width = t1 - t0
                # Complemented bits last: their postings are the rows *without*
                # the bit, counted in the second half of the bincount.
                flip = flipped[tile, bits]
                num_flipped = int(flip.sum())
                query = (
                    np.concatenate([bits[~flip], bits[flip]]) if num_flipped else bits
                )
                starts, stops = pointers[tile, query], pointers[tile, query + 1]
                tile_postings = postings[tile]
                lengths = stops - starts
                total = int(lengths.sum())
                if total > hits.shape[0]:
                    hits = np.empty(2 * total, dtype=np.intp)
                if total:
                    parts = [
                        tile_postings[a:b] for a, b in zip(starts, stops, strict=True)
                    ]
                    np.concatenate(parts, out=hits[:total], casting="safe")
                if num_flipped:
                    split = int(lengths[: query.shape[0] - num_flipped].sum())
                    hits[split:total] += width
                    counts = np.bincount(hits[:total], minlength=2 * width)
                    # |a & b| = (plain bits shared) + (complemented bits of a
                    # that b has) = counts - (rows lacking them) + their number.
                    counts = counts[:width] - counts[width:]
                    counts += num_flipped
                else:
                    counts = np.bincount(hits[:total], minlength=width)
                a, b = max(lo, t0), min(hi, t1)
                # Exact integers in float64, in a reused union buffer.
                inter, part = counts[a - t0 : b - t0], target[a - lo : b - lo]
                _quotient(inter, pop_r, pop[a:b], part, union[: b - a])
            if not run:
                out[r] = buffer[cols - lo]

    def _on_device(self, device: torch.device) -> tuple[Tensor, Tensor, Tensor | None]:
        r"""Words (int64), bit counts and, where they fit, the unpacked bits on
        ``device``, copied once."""
        if device not in self._devices:
            words = torch.empty(self._words.shape, dtype=torch.int64, device=device)
            for start in range(0, len(self), _TILE):
                block = np.array(self._words[start : start + _TILE]).view(np.int64)
                words[start : start + _TILE] = torch.from_numpy(block).to(device)
            pop = torch.from_numpy(self.popcounts.astype(np.int32)).to(device)
            bits, m = None, self.n_bits
            # The narrowest float whose sums of m 0/1 products are exact.
            dtype = torch.float16 if m <= 2048 else torch.float32
            if device.type == "cuda":
                free, _ = torch.cuda.mem_get_info(device)
                if len(self) * m * dtype.itemsize <= _DEVICE_BITS_FRACTION * free:
                    bits = torch.empty(len(self), m, dtype=dtype, device=device)
                    for start in range(0, len(self), _TILE):
                        part = words[start : start + _TILE]
                        bits[start : start + _TILE] = _unpack_torch(part, m, dtype)
            self._devices[device] = (words, pop, bits)
        return self._devices[device]

    def _matmul(
        self,
        row_words: np.ndarray,
        row_pop: np.ndarray,
        cols: slice | np.ndarray,
        num_cols: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> Tensor:
        out = torch.empty(row_words.shape[0], num_cols, dtype=dtype, device=device)
        cached = None if device.type == "cpu" else self._on_device(device)[2]

        def bits_of(index: np.ndarray | slice) -> tuple[Tensor, Tensor]:
            if device.type == "cpu":
                words = torch.from_numpy(np.array(self._words[index]).view(np.int64))
                pop = torch.from_numpy(self.popcounts[index])
                return _unpack_torch(words, self.n_bits), pop
            words, pop, bits = self._on_device(device)
            if not isinstance(index, slice):
                index = torch.from_numpy(index).to(device)
            if bits is not None:
                return bits[index], pop[index]
            return _unpack_torch(words[index], self.n_bits), pop[index]

        a_words = torch.from_numpy(np.array(row_words).view(np.int64)).to(device)
        a_pop = torch.from_numpy(np.asarray(row_pop, dtype=np.int64)).to(device)
        a_bits = _unpack_torch(
            a_words, self.n_bits, torch.float32 if cached is None else cached.dtype
        )
        budget = _MATMUL_BYTES["cpu" if device.type == "cpu" else "other"]
        block = max(1, budget // (4 * self.n_bits))
        for c0 in range(0, num_cols, block):
            c1 = min(c0 + block, num_cols)
            c_bits, c_pop = bits_of(_columns(cols, c0, c1))
            # Sums of 0/1 products are exact: float32 (TF32 too) up to 2^24,
            # float16 (cached bits) up to 2048, the most bits it holds.
            inter = (a_bits @ c_bits.mT).to(dtype)
            union = a_pop.to(dtype).unsqueeze(-1) + c_pop.to(dtype) - inter
            out[:, c0:c1] = _ratio(inter, union)
        return out


def register_fingerprints(library: PackedFingerprints | Tensor | np.ndarray) -> str:
    r"""Register a library (or ``N x m`` 0/1 bits to pack) under its content
    key, which Ax stores instead of the fingerprints; returns the key. A
    reloaded experiment needs the same library registered again in its process.

    Example:
        >>> key = register_fingerprints(torch.eye(3))
        >>> TanimotoKernel(library=key).num_items
        3
    """
    if not isinstance(library, PackedFingerprints):
        library = PackedFingerprints.from_bits(library)
    return _LIBRARIES.add(library.key, library)


def registered_fingerprints(key: str) -> PackedFingerprints:
    """The library registered under ``key`` (:func:`register_fingerprints`);
    ``ValueError`` if none with that content is registered in this process."""
    return _LIBRARIES.get(key)


class _FingerprintKernel(Kernel):
    r"""Shared checks of the fingerprint kernels (no hyperparameters); a
    subclass defines ``_invalid(x)`` (a mask of invalid entries) and
    ``_similarity(x1, x2, diag)``."""

    has_lengthscale = False
    _values = ""  # what the features hold, for error messages

    def __init__(self, validate: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.validate = check_bool("validate", validate)

    def __call__(
        self,
        x1: Tensor,
        x2: Tensor | None = None,
        diag: bool = False,
        last_dim_is_batch: bool = False,
        **params: Any,
    ) -> Any:
        # GPyTorch's own width check is a RuntimeError naming no argument.
        if self.active_dims is None and x2 is not None:
            _same_width(type(self).__name__, x1, x2)
        return super().__call__(x1, x2, diag, last_dim_is_batch, **params)

    def forward(
        self,
        x1: Tensor,
        x2: Tensor,
        diag: bool = False,
        last_dim_is_batch: bool = False,
        **params: Any,
    ) -> Tensor:
        r"""``batch_shape x n1 x n2`` similarities (``x n1`` if ``diag``) of
        ``... x n x m`` fingerprints (``... x n x 1`` items in library mode)."""
        name = type(self).__name__
        if last_dim_is_batch:
            raise ValueError(f"{name} does not support `last_dim_is_batch`.")
        for arg, x in (("x1", x1), ("x2", x2)):
            if x.dim() < 2 or x.shape[-1] == 0:
                raise ValueError(
                    f"{name} input `{arg}` must be `... x n x m` fingerprints with "
                    f"m >= 1 bits, got shape {tuple(x.shape)}."
                )
        _same_width(name, x1, x2)
        dtype = x1.dtype if x1.is_floating_point() else torch.get_default_dtype()
        x1, x2 = x1.to(dtype), x2.to(dtype)
        if self.validate:
            for arg, x in (("x1", x1), ("x2", x2)):
                bad = self._invalid(x)
                if bool(bad.any()):
                    where = tuple(int(i) for i in bad.nonzero()[0])
                    raise ValueError(
                        f"{name} input `{arg}` must hold {self._values}, got "
                        f"{x[where].item()} at index {where}."
                    )
        return self._similarity(x1, x2, diag)


class TanimotoKernel(_FingerprintKernel):
    r"""Tanimoto (Jaccard) kernel of binary fingerprints :math:`a, b \in \{0, 1\}^m`:

    .. math::

        k(a, b) = \frac{\langle a, b \rangle}{|a| + |b| - \langle a, b \rangle},
        \qquad k(0, 0) = 1.

    Positive semi-definite (Ralaivola et al., 2005), no hyperparameters. In
    *feature mode* (``library=None``) inputs are ``... x n x m`` 0/1
    fingerprints of any dtype (checked if ``validate``). In *library mode*
    inputs are item indices ``... x n x 1`` of a :class:`PackedFingerprints`
    (or the key :func:`register_fingerprints` returned, what Ax stores), as for
    :class:`~ax_chaining.kernels.PrecomputedKernel` (``normalized_inputs``,
    ``active_dims``); rows come from :meth:`PackedFingerprints.tanimoto` by
    ``route``.

    Example:
        >>> bits = torch.tensor([[1.0, 1, 0, 0], [1, 0, 1, 0], [0, 1, 1, 1]])
        >>> TanimotoKernel()(bits[:1], bits).to_dense()
        tensor([[1.0000, 0.3333, 0.2500]])
        >>> model = SingleTaskGP(bits, Y, covar_module=ScaleKernel(TanimotoKernel()))
        >>> key = register_fingerprints(bits)  # library mode, over item indices
        >>> kernel = TanimotoKernel(library=key)
        >>> kernel(torch.tensor([[0.0]]), torch.tensor([[1.0], [2.0]])).to_dense()
        tensor([[0.3333, 0.2500]])
    """

    _values = "only 0 and 1 (fingerprint bits)"

    def __init__(
        self,
        library: PackedFingerprints | str | None = None,
        normalized_inputs: bool = False,
        route: str = "auto",
        validate: bool = True,
        active_dims: tuple[int, ...] | None = None,
        **kwargs: Any,
    ) -> None:
        if library is not None:  # one index column; batch_shape left as given
            check_index_kernel_args("TanimotoKernel", active_dims, {})
        super().__init__(validate=validate, active_dims=active_dims, **kwargs)
        if isinstance(library, str):
            library = registered_fingerprints(library)
        elif library is not None and not isinstance(library, PackedFingerprints):
            raise type_error(
                "library", "a PackedFingerprints, its registered key, or None", library
            )
        self.library = library
        self.normalized_inputs = check_bool("normalized_inputs", normalized_inputs)
        self.route = check_choice("route", route, ROUTES)

    @property
    def num_items(self) -> int | None:
        r"""The library size ``N`` (None in feature mode)."""
        return None if self.library is None else len(self.library)

    def _invalid(self, x: Tensor) -> Tensor:
        return (x != 0) & (x != 1)

    def forward(
        self,
        x1: Tensor,
        x2: Tensor,
        diag: bool = False,
        last_dim_is_batch: bool = False,
        **params: Any,
    ) -> Tensor:
        if self.library is None or last_dim_is_batch:
            return super().forward(x1, x2, diag, last_dim_is_batch)
        library = self.library
        dtype = x1.dtype if x1.is_floating_point() else torch.get_default_dtype()
        # Broadcast copies (training inputs expanded over b test points) once.
        x1, x2 = _drop_expanded(x1), _drop_expanded(x2)
        i1 = item_indices(x1, len(library), self.normalized_inputs, "TanimotoKernel")
        i2 = item_indices(x2, len(library), self.normalized_inputs, "TanimotoKernel")
        if diag:
            return library.tanimoto_pairs(i1, i2, dtype=dtype)
        kw = {"route": self.route, "dtype": dtype, "device": x1.device}
        if i1.dim() == 1 and i2.dim() == 1:
            return library.tanimoto(i1, i2, **kw)
        # Batches: the kernel of the distinct items, then indexed (no b^2
        # growth), or each entry alone where that is fewer (q = 1 test blocks).
        u1, inv1 = torch.unique(i1, return_inverse=True)
        u2, inv2 = torch.unique(i2, return_inverse=True)
        pairs = torch.broadcast_shapes(i1.unsqueeze(-1).shape, i2.unsqueeze(-2).shape)
        if math.prod(pairs) < u1.numel() * u2.numel():
            return library.tanimoto_pairs(
                i1.unsqueeze(-1), i2.unsqueeze(-2), dtype=dtype
            )
        values = library.tanimoto(u1, u2, **kw)
        return values[inv1.unsqueeze(-1), inv2.unsqueeze(-2)]

    def _similarity(self, x1: Tensor, x2: Tensor, diag: bool) -> Tensor:
        if diag:
            inter = (x1 * x2).sum(-1)
            union = x1.sum(-1) + x2.sum(-1) - inter
        else:
            inter = x1 @ x2.mT
            union = x1.sum(-1).unsqueeze(-1) + x2.sum(-1).unsqueeze(-2) - inter
        return _ratio(inter, union)

    def __deepcopy__(self, memo: dict[int, Any]) -> TanimotoKernel:
        return deepcopy_sharing(self, memo, self.library)


class MinMaxKernel(_FingerprintKernel):
    r"""MinMax (weighted Jaccard) kernel of non-negative count fingerprints:

    .. math::

        k(a, b) = \frac{\sum_i \min(a_i, b_i)}{\sum_i \max(a_i, b_i)}
        = \frac{s - d}{s + d}, \qquad k(0, 0) = 1,

    with :math:`s = |a|_1 + |b|_1` and :math:`d = |a - b|_1` (one
    ``torch.cdist(p=1)``, exact for integer counts): :class:`TanimotoKernel` on
    binary fingerprints; positive semi-definite; no hyperparameters. Inputs are
    ``... x n x m`` counts (checked finite and >= 0 if ``validate``).

    Example:
        >>> counts = torch.tensor([[2.0, 1.0, 0.0], [1.0, 1.0, 3.0]])
        >>> MinMaxKernel()(counts).to_dense()  # min sums 2, max sums 6
        tensor([[1.0000, 0.3333],
                [0.3333, 1.0000]])
    """

    _values = "non-negative finite counts"

    def _invalid(self, x: Tensor) -> Tensor:
        return ~(torch.isfinite(x) & (x >= 0))

    def _similarity(self, x1: Tensor, x2: Tensor, diag: bool) -> Tensor:
        tiny = torch.finfo(x1.dtype).tiny
        if diag:
            low = torch.minimum(x1, x2).sum(-1)
            high = torch.maximum(x1, x2).sum(-1)
        else:
            batch = torch.broadcast_shapes(x1.shape[:-2], x2.shape[:-2])
            x1 = x1.expand(*batch, *x1.shape[-2:])
            x2 = x2.expand(*batch, *x2.shape[-2:])
            dist = torch.cdist(x1, x2, p=1.0)
            total = x1.sum(-1).unsqueeze(-1) + x2.sum(-1).unsqueeze(-2)
            # max sum = (s + d) / 2 > 0 unless both are 0; min sum = (s - d) / 2.
            low, high = total - dist, total + dist
        return torch.where(high > 0, low / high.clamp_min(tiny), 1.0)


def _same_width(name: str, x1: Tensor, x2: Tensor) -> None:
    if x1.shape[-1] != x2.shape[-1]:
        raise ValueError(
            f"{name} inputs `x1` and `x2` must have the same fingerprint width "
            f"(last dimension), got {x1.shape[-1]} and {x2.shape[-1]}."
        )


def _npy_path(path: str | os.PathLike) -> Path:
    if not isinstance(path, str | os.PathLike):
        raise type_error("path", "a str or os.PathLike", path)
    path = Path(path)
    return path if path.suffix == ".npy" else path.with_name(path.name + ".npy")


def _index_array(x: Any, arg: str, n: int, flat: bool = True) -> np.ndarray:
    r"""Integer indices in ``0 .. n - 1`` as an int64 numpy array (CPU)."""
    if isinstance(x, Tensor):
        if x.is_floating_point() or x.is_complex():
            raise ValueError(f"`{arg}` must hold integer indices, got {x.dtype}.")
        array = x.detach().to("cpu", torch.int64).numpy()
    else:
        array = np.asarray(x)
        if array.size and array.dtype.kind not in "iu":
            raise ValueError(f"`{arg}` must hold integer indices, got {array.dtype}.")
        array = array.astype(np.int64, copy=False)
    if flat:
        array = array.reshape(-1)
    if array.size and (array.min() < 0 or array.max() >= n):
        raise ValueError(
            f"`{arg}` must be library rows in 0..{n - 1}, got values in "
            f"[{int(array.min())}, {int(array.max())}]."
        )
    return array


def _drop_expanded(x: Tensor) -> Tensor:
    """``x`` without leading batch dimensions that only repeat one slice (the
    training inputs GPyTorch copies for each test point)."""
    while x.dim() > 2 and (
        x.shape[0] == 1 or x.stride(0) == 0 or torch.equal(x, x[:1].expand_as(x))
    ):
        x = x[0]
    return x


def _columns(cols: slice | np.ndarray, c0: int, c1: int) -> slice | np.ndarray:
    """Columns ``c0:c1`` of ``cols``, a run (a slice) or an index array."""
    if isinstance(cols, slice):
        return slice(cols.start + c0, cols.start + c1)
    return cols[c0:c1]


def _ratio(inter: Tensor, union: Tensor) -> Tensor:
    """``inter / union`` of integer counts, 1 where ``union`` is 0 (two empty
    fingerprints)."""
    return torch.where(union > 0, inter / union.clamp_min(1), 1.0)


def _quotient(
    inter: np.ndarray,
    pop_a: np.ndarray | int,
    pop_b: np.ndarray,
    out: np.ndarray,
    union: np.ndarray | None = None,
) -> None:
    r"""``out = inter / (pop_a + pop_b - inter)`` in float64, 1 where both empty
    (``union``: a buffer for the denominator)."""
    union = np.add(pop_a, pop_b, out=union)
    union -= inter
    with np.errstate(invalid="ignore", divide="ignore"):
        np.divide(inter, union, out=out)
    if np.any(np.asarray(pop_a) == 0):  # only two empty fingerprints give 0 / 0
        np.copyto(out, 1.0, where=union == 0)


def _tile_postings(
    words: np.ndarray, n_bits: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""(bit, row) postings of a tile of packed rows, and which bits are flipped:
    a bit set in more than half the rows is stored by the rows that lack it."""
    # Sub-blocks with uint16 rows: a whole tile's int64 temporaries are large.
    bit_parts, row_parts = [], []
    # uint16 keys make the stable argsort a radix sort (widths up to 2^16).
    key = np.uint16 if words.shape[1] <= 1024 else np.int64
    for first in range(0, words.shape[0], 8192):
        block = np.ascontiguousarray(words[first : first + 8192]).view(np.uint8)
        rows, byte = np.nonzero(block)  # only the non-zero bytes are unpacked
        bits = np.unpackbits(block[rows, byte][:, None], axis=1, bitorder="little")
        which, offset = np.nonzero(bits)
        bit_parts.append((byte[which] * 8 + offset).astype(key))
        row_parts.append((rows[which] + first).astype(np.uint16))
    bits, rows = np.concatenate(bit_parts), np.concatenate(row_parts)
    counts = np.bincount(bits, minlength=n_bits)
    flip = 2 * counts > words.shape[0]
    if flip.any():
        flipped = np.flatnonzero(flip)
        mine = flip[bits]
        has = np.zeros((flipped.shape[0], words.shape[0]), dtype=bool)
        has[np.searchsorted(flipped, bits[mine]), rows[mine]] = True
        which, lacking = np.nonzero(~has)
        bits = np.concatenate([bits[~mine], flipped[which].astype(bits.dtype)])
        rows = np.concatenate([rows[~mine], lacking.astype(np.uint16)])
    return bits, rows, flip


def _unpack_numpy(words: np.ndarray, n_bits: int) -> np.ndarray:
    r"""Unpack ``... x W`` packed words into ``... x n_bits`` 0/1 ``uint8``."""
    words = np.ascontiguousarray(words).view(np.uint8)
    return np.unpackbits(words, axis=-1, count=n_bits, bitorder="little")


def _unpack_torch(
    words: Tensor, n_bits: int, dtype: torch.dtype = torch.float32
) -> Tensor:
    r"""Unpack ``k x W`` int64 words (little-endian bytes, on any device) into
    ``k x n_bits`` 0/1 of ``dtype``."""
    shifts = torch.arange(8, dtype=torch.uint8, device=words.device)
    bytes_ = words.contiguous().view(torch.uint8)
    bits = (bytes_.unsqueeze(-1) >> shifts) & 1
    return bits.reshape(words.shape[0], -1)[:, :n_bits].to(dtype)
