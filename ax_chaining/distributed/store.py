r"""The step of a :class:`~ax_chaining.ChainingUCB` whose candidates are
sharded (:class:`ShardedStore`): the client sends the model's small factors
once, each shard computes its part of the posterior, the farthest-first
traversal runs with the shards holding the distances, and the covers,
:math:`H_i` and the bonus are computed on the client from its order and radii,
exactly as on one machine. Nothing ``N``-long crosses the network.
"""

from __future__ import annotations

import itertools
import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from botorch.exceptions import UnsupportedError
from torch import Tensor

from ax_chaining.acquisition import DEFAULT_MAX_COVER_SIZE
from ax_chaining.chaining import (
    ChainingResult,
    chaining_result,
    level_radii,
    prefix_covers,
    reuse_covers,
)
from ax_chaining.checks import as_index, check_choice, match_tolerance
from ax_chaining.distances import MemoryBudgetError, format_bytes
from ax_chaining.distributed._shard import (
    Left,
    LibraryKernel,
    PendingFactors,
    ShardKernel,
    StepFactors,
    TorchKernel,
)
from ax_chaining.distributed._traversal import (
    combine_max,
    sharded_farthest_first,
    sharded_union_bound,
)
from ax_chaining.kernels.precomputed import item_indices
from ax_chaining.posterior import (
    ModelFactors,
    library_kernel_parts,
    low_rank_row_batch,
    pending_noise,
    posterior_at,
    row_budgets,
    sign_flip,
    supports_low_rank,
)

__all__ = ["ShardedStep", "ShardedStore"]

_STEPS = itertools.count(1)


@dataclass
class ShardedStep:
    """One build of Algorithm 1 on the shards.

    Attributes:
        chaining: Levels, covers and :math:`H_i` (as on one machine).
        factors: What was sent to the shards.
        pending_noise: Noise variances given to the pending points, or None.
        info: Round trips, bytes and seconds of the build.
    """

    chaining: ChainingResult
    factors: StepFactors
    pending_noise: Tensor | None
    info: dict


class _PendingCache:
    """What :func:`~ax_chaining.posterior.posterior_at` reads of a cache."""

    def __init__(self, factors: ModelFactors) -> None:
        self.factors = factors


class ShardedStore:
    r"""The :class:`~ax_chaining.acquisition.CandidateStore` of
    :class:`~ax_chaining.distributed.ShardedCandidates`: one machine's
    low-rank step with farthest-first covers, run on the shards.

    Not distributed: the dense route's exact greedy covers (they read all
    ``N^2`` pairs; ``path="dense"`` or ``cover="greedy"`` raise), and the
    chaining certificate (``method="chaining"`` and ``"combined"`` raise; the
    union bound is the default). ``memory_budget`` bounds each worker's
    share (and sets the farthest-first batch as one machine's does, unless
    the candidates set ``batch_size``).
    """

    def __init__(self, acqf: Any, sharded: Any) -> None:
        self.acqf, self.model, self.sharded = acqf, acqf.model, sharded
        self.options = opts = acqf.options
        self.posterior_transform = acqf.posterior_transform
        if opts.path == "dense":
            raise ValueError(
                "`path`='dense' is not distributed (its greedy covers read all "
                "N^2 pairs); sharded candidates take path='low_rank' (or 'auto')."
            )
        if opts.cover == "greedy":
            raise ValueError(
                "`cover`='greedy' is not distributed; sharded candidates take "
                "cover='farthest_first' (or None)."
            )
        if not supports_low_rank(self.model, self.posterior_transform):
            raise UnsupportedError(
                "Sharded candidates need the low-rank route: an exact single-output "
                "GP (ExactGP with a Gaussian likelihood, no or a Standardize "
                "outcome transform, no posterior_transform other than a single "
                f"weight of +1 or -1); got {type(self.model).__name__}."
            )
        params = [*self.model.parameters(), *self.model.buffers()]
        self.candidate_dtype = next(
            (p.dtype for p in params if p.is_floating_point()), torch.float64
        )
        self._model_factors: ModelFactors | None = None
        self._base_key = uuid.uuid4().hex

    # ------------------------------------------------------------- pending
    def pending_inputs(self, X_pending: Tensor) -> Tensor:
        X_pending = X_pending.detach().to(self.candidate_dtype)
        if X_pending.ndim != 2 or X_pending.shape[-1] != self.sharded.d:
            raise ValueError(
                f"`X_pending` must have shape p x {self.sharded.d}, got "
                f"{tuple(X_pending.shape)}."
            )
        return X_pending

    @property
    def candidates(self) -> Any:
        """The sharded candidates (not a tensor: they stay on the workers)."""
        return self.sharded

    # ---------------------------------------------------------------- build
    def _factors_of_model(self) -> ModelFactors:
        if self._model_factors is None:
            self.model.eval()
            like = torch.empty(0, dtype=self.candidate_dtype)
            with torch.no_grad():
                self._model_factors = ModelFactors(self.model, like)
        return self._model_factors

    def _kernel_message(self, mf: ModelFactors) -> tuple[ShardKernel, Any, Any]:
        """The kernel as sent to the shards, and the features of a function of
        points (training or pending inputs) in that kernel."""
        parts = library_kernel_parts(mf.covar_module)
        if parts is None:
            return TorchKernel(mf.covar_module), mf.train_X, None
        base, scale = parts
        library = base.library
        if len(library) != self.sharded.n:
            raise ValueError(
                f"The model's TanimotoKernel holds {len(library)} items, the sharded "
                f"candidates {self.sharded.n}; expected the same library."
            )
        kernel = LibraryKernel(
            scale, base.route, base.normalized_inputs, len(library), library.n_bits
        )

        def words(Xt: Tensor) -> Any:
            items = item_indices(Xt, len(library), base.normalized_inputs, "Kernel")
            return library.words[items.reshape(-1).cpu().numpy()]

        return kernel, words(mf.train_X), words

    def build(self, X_pending: Tensor | None, t: int) -> ShardedStep:
        """Algorithm 1 on the shards, given ``X_pending`` (one machine's
        low-rank step with farthest-first covers)."""
        return self.sharded.retrying(self._build_once, X_pending, t)

    def _build_once(self, X_pending: Tensor | None, t: int) -> ShardedStep:
        opts = self.options
        sharded = self.sharded
        p = 0 if X_pending is None else X_pending.shape[0]
        mf = self._factors_of_model()
        dtype = self.candidate_dtype
        itemsize = torch.finfo(dtype).bits // 8
        r = mf.L.shape[-1]
        n = sharded.n
        self._check_memory(r, p, itemsize)
        kernel, train_features, features_of = self._kernel_message(mf)
        noise = pending = None
        if p:
            noise = pending_noise(self.model, X_pending, self.posterior_transform)
            Pt, W_p, A = mf.pending(X_pending, noise)
            feats = Pt if features_of is None else features_of(Pt)
            pending = PendingFactors(feats, W_p, A)
        flip = sign_flip(self.model, self.posterior_transform)
        factors = StepFactors(
            step=next(_STEPS),
            base_key=self._base_key,
            dtype=dtype,
            input_transform=getattr(self.model, "input_transform", None),
            kernel=kernel,
            train_features=train_features,
            L=mf.L,
            whitened=mf.whitened,
            out_var=mf.out_var,
            mean_module=mf.mean_module,
            outcome_transform=mf.outcome_transform,
            flip=flip,
            pending=pending,
        )
        sharded.stats_reset()
        before = sharded.comm_stats()
        summary = sharded.prepare(factors)
        if not all(s["finite"] for s in summary):
            raise ValueError("variance contains NaN or inf.")
        low = min(s["min_variance"] for s in summary)
        first = next(s for s in summary if s["min_variance"] == low)
        max_prior = max(s["max_prior_variance"] for s in summary)
        info = {"path": "low_rank", "distributed": True, "shards": sharded.num_shards}
        if p and opts.pending_covers == "reuse":
            base = self.acqf._base_step().chaining
            stub = _SigmaStub(n, math.sqrt(max(low, 0.0)))
            chaining = reuse_covers(base, stub, t)
        else:
            scale = opts.scale
            if scale is None:
                scale = math.sqrt(max(max_prior, 0.0))
                if not scale > 0:
                    raise ValueError(
                        "The prior variance is 0 on every candidate; pass scale= "
                        "explicitly."
                    )
            sigma_min = math.sqrt(max(low, 0.0))
            sigma_min_used, eps = level_radii(sigma_min, scale, opts.sigma_floor)
            max_cover_size = opts.max_cover_size or min(n, DEFAULT_MAX_COVER_SIZE)
            batch = sharded.batch_size or low_rank_row_batch(
                n, itemsize, opts.memory_budget
            )
            if eps:
                order, radii = sharded_farthest_first(
                    sharded,
                    factors.step,
                    n,
                    first["left"],
                    max_size=max_cover_size,
                    stop_radius=eps[-1],
                    batch_size=batch,
                    dtype=dtype,
                )
                covers, sizes, bounded = prefix_covers(order, radii, eps, n)
            else:
                covers, sizes, bounded = [], [], []
            chaining = chaining_result(
                eps,
                covers,
                sizes,
                bounded,
                sigma_min=sigma_min,
                sigma_floor=opts.sigma_floor,
                scale=scale,
                t=t,
                delta=opts.delta,
                n=n,
                h_radius=opts.h_radius,
                cover_method="farthest_first",
                device=torch.device("cpu"),
            )
            info["batch_size"] = batch
        chaining.info.update(info)
        after = sharded.comm_stats()
        stats = {k: after[k] - before.get(k, 0) for k in ("round_trips",)}
        stats.update(
            {k: after[k] for k in ("bytes_sent", "bytes_received", "largest_reply")}
        )
        return ShardedStep(chaining, factors, noise, stats)

    def _check_memory(self, r: int, p: int, itemsize: int) -> None:
        """Each worker's share against ``memory_budget`` (one machine's
        low-rank estimate, for the largest shard). A ``batch_size`` set on the
        candidates replaces one machine's pool (``2 * batch`` rows within the
        pool's share of the budget) by ``2 * batch`` rows of the shard, which
        can be larger: it is counted the same way."""
        budget = self.options.memory_budget
        largest = max(self.sharded.sizes)
        pool_bytes = row_budgets(budget)[1]
        if self.sharded.batch_size is not None:
            chosen = 2 * self.sharded.batch_size * largest * itemsize
            pool_bytes = max(pool_bytes, chosen)
        need = (r + 2 * p + 6) * (largest + p) * itemsize + 4 * pool_bytes
        if need > budget:
            raise MemoryBudgetError(
                f"A shard of {largest} candidates needs about {format_bytes(need)} "
                f"on its worker, above memory_budget={format_bytes(budget)}. Pass a "
                "larger memory_budget (it bounds each worker), "
                + ("a smaller batch_size, " if self.sharded.batch_size else "")
                + "or shard over more workers."
            )

    # ------------------------------------------------------------ selection
    def _current(self) -> ShardedStep:
        """The acquisition's current step, held by the shards."""
        step = self.acqf._current()
        self._prepare(step)
        return step

    def _prepare(self, step: ShardedStep) -> None:
        """Make the shards hold ``step`` (they hold the last step built)."""
        if self.sharded.prepared is not step.factors:
            self.sharded.prepare(step.factors)

    def best_candidate(self, exclude: Sequence[int] = ()) -> dict[str, Any]:
        r"""The candidate of largest :math:`\pm\mu_t + b_t(\sigma_t)` given the
        current pending points (first index among ties): ``index``, ``value``,
        ``x`` (its raw row), ``mean`` and ``sigma``."""
        excluded = sorted({int(i) for i in exclude})

        def run() -> dict[str, Any]:
            step = self._current()
            c = step.chaining
            args = (
                step.factors.step,
                c.eps,
                c.H,
                c.sigma_min_used,
                self.options.bonus,
                self.acqf.maximize,
                excluded,
            )
            parts = [p for p in self.sharded.call("best", args) if p is not None]
            if not parts:
                raise ValueError("Every candidate is excluded; nothing to select.")
            top = combine_max([{**p, "max": p["value"]} for p in parts])
            return {k: top[k] for k in ("index", "value", "x", "mean", "sigma")}

        return self.sharded.retrying(run)

    def values_at(self, index: Sequence[int]) -> dict[str, Tensor]:
        """Posterior mean (objective) and standard deviation at candidates
        ``index``, from the shards (the values one machine's
        ``candidate_mean`` and ``candidate_sigma`` hold there)."""
        index = [int(i) for i in index]

        def run() -> dict[str, Tensor]:
            step = self._current()
            parts = self.sharded.call("values", (step.factors.step, index))
            mean = torch.empty(len(index), dtype=self.candidate_dtype)
            var = torch.empty(len(index), dtype=self.candidate_dtype)
            x = torch.empty(len(index), self.sharded.d, dtype=self.candidate_dtype)
            for part in parts:
                if part["positions"]:
                    mean[part["positions"]] = part["mean"]
                    var[part["positions"]] = part["variance"]
                    x[part["positions"]] = part["x"].to(x)
            return {"mean": mean, "sigma": var.sqrt(), "x": x}

        return self.sharded.retrying(run)

    def candidate_mean(self, step: ShardedStep) -> Tensor:
        raise RuntimeError(
            "candidate_mean would bring N values to the client; use "
            "acqf.store.values_at(index) for some candidates."
        )

    candidate_sigma = candidate_mean

    def mean_and_sigma(self, X: Tensor, step: ShardedStep) -> tuple[Tensor, Tensor]:
        cache = _PendingCache(self._factors_of_model())
        X_pending = self.acqf.X_pending
        if X_pending is not None:
            # The pending factors of the current step (pending() keeps them).
            cache.factors.pending(X_pending, step.pending_noise)
        return posterior_at(
            self.model,
            X.to(self.candidate_dtype),
            self.posterior_transform,
            X_pending,
            step.pending_noise,
            cache,
        )

    # ---------------------------------------------------------- certificate
    def _left_of(self, step: ShardedStep, index: list[int]) -> Left:
        parts = self.sharded.call("left", (step.factors.step, index))
        found = Left.cat([p for p in parts if p is not None])
        pos = {g: k for k, g in enumerate(found.index)}
        return found.take([pos[g] for g in index])

    def among(self, among: Tensor | Sequence[int] | str | None) -> Tensor:
        n = self.sharded.n
        if among is None:
            model = self.model
            model.eval()
            train = model.train_inputs[0].reshape(-1, model.train_inputs[0].shape[-1])
            transform = getattr(model, "input_transform", None)
            dtypes = {self.candidate_dtype, train.dtype, self.sharded.dtype}
            rtol = 1e-6 if torch.float32 in dtypes else 1e-9
            found = self.sharded.evaluated(train, transform, rtol)
            if not found:
                raise ValueError(
                    "certificate: no candidate is a training input of the model, "
                    "so none is 'evaluated'; pass among='all', a boolean mask or "
                    "indices of the candidates that may be recommended."
                )
            return torch.tensor(found, dtype=torch.long)
        if isinstance(among, str):
            check_choice("among", among, ("all",))
            return torch.arange(n)
        index = as_index("among", among, n, torch.device("cpu"))
        if index.numel() == 0:
            raise ValueError("`among` selects no candidate; expected at least one.")
        return index

    def certified(self, base: ShardedStep) -> ShardedSet:
        return ShardedSet(self, base)

    def values_base(self, base: ShardedStep, index: list[int]) -> dict[str, Tensor]:
        """Mean and raw rows at ``index`` under the step without pending
        points (prepared again if the shards hold another)."""
        self._prepare(base)
        parts = self.sharded.call("values", (base.factors.step, index))
        mean = torch.empty(len(index), dtype=self.candidate_dtype)
        x = torch.empty(len(index), self.sharded.d, dtype=self.sharded.dtype)
        for part in parts:
            if part["positions"]:
                mean[part["positions"]] = part["mean"]
                x[part["positions"]] = part["x"].to(x)
        return {"mean": mean, "x": x}

    def match(self, X: Tensor, rtol: float = 1e-9) -> Tensor:
        """Global indices of the candidates equal to the rows of ``X``
        (:func:`~ax_chaining.checks.match_rows` over all shards: each shard's
        nearest row, the nearest of those, the whole set's tolerance); raises
        if one is not a candidate."""
        parts = self.sharded.call("nearest", (X,))
        tol = match_tolerance(max(self.sharded.call("max_abs", ())), rtol)
        vals = torch.stack([p[0] for p in parts])
        args = torch.stack([p[1] for p in parts])
        best = vals.argmin(dim=0)  # first shard among ties: lowest index
        dist = vals.gather(0, best.unsqueeze(0))[0]
        index = args.gather(0, best.unsqueeze(0))[0]
        if bool((dist > tol).any()):
            bad = int((dist > tol).nonzero()[0])
            raise ValueError(
                f"regret_bound: row {bad} of `X` is not a candidate; expected rows "
                "of the sharded candidates."
            )
        return index

    @property
    def step_info(self) -> dict[str, Any]:
        """What the current step's build cost (:attr:`ShardedStep.info`):
        ``round_trips`` to the shards, the bytes sent and received and the
        ``largest_reply``. Only small messages come back, never ``N`` values."""
        return dict(self.acqf._current().info)


class _SigmaStub:
    """The two things :func:`~ax_chaining.chaining.reuse_covers` reads of a
    distance: ``n`` and the standard deviations (their minimum suffices)."""

    def __init__(self, n: int, sigma_min: float) -> None:
        self.n = n
        self.sigma = torch.tensor([sigma_min], dtype=torch.float64)


class ShardedSet:
    """The :class:`~ax_chaining.certificate.certify.CertifiedSet` of sharded
    candidates: the union (or pairwise) bound from the shards, by the same root
    search as one machine's; it agrees with one machine's to the search's
    relative tolerance (``1e-6``), the shards adding in another order. No
    chaining bound (its tree reads every candidate), and no rank statement.
    """

    methods = ("union", "pairwise")
    ranks = False

    def __init__(self, store: ShardedStore, base: ShardedStep) -> None:
        self.store, self.base = store, base
        self.n = store.sharded.n
        self.sign = 1.0 if store.acqf.maximize else -1.0
        self._values: tuple[list[int], Tensor] | None = None

    def values(self, index: Tensor) -> tuple[Tensor, Tensor]:
        idx = index.tolist()
        found = self.store.sharded.retrying(self.store.values_base, self.base, idx)
        mean = (self.sign * found["mean"]).to(torch.float64)
        self._values = (idx, mean)
        return mean, found["x"]

    def bind(self, law: Any) -> Any:
        return law  # each shard binds it to its own candidates

    def bounds(self, index: Tensor, **options: Any) -> dict[str, Tensor]:
        idx = index.tolist()
        if self._values is None or self._values[0] != idx:
            self.values(index)
        mean = self._values[1]  # type: ignore[index]
        scale, method = options["scale"], options["method"]
        store = self.store

        def run() -> Tensor:
            store._prepare(self.base)
            return sharded_union_bound(
                store.sharded,
                self.base.factors.step,
                store._left_of(self.base, idx),
                mean / scale,
                self.n,
                options["share"],
                tail=options["tail"],
                scale=scale,
                sign=self.sign,
                method=method,
                memory_budget=store.options.memory_budget,
            )

        bounds = store.sharded.retrying(run) * scale
        return {"bound": bounds, method: bounds}

    def rank(self, index: int, **options: Any) -> Any:
        raise NotImplementedError("sharded candidates give no rank statement")
