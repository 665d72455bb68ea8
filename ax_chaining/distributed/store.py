r"""The step of a :class:`~ax_chaining.ChainingUCB` over sharded candidates
(:class:`ShardedStore`), exactly as one machine's: the shards compute the
posterior and distances, the client the covers and bonus from the traversal."""

from __future__ import annotations

import itertools
import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from functools import reduce
from types import SimpleNamespace
from typing import Any

import torch
from torch import Tensor

from ax_chaining.acquisition import DEFAULT_MAX_COVER_SIZE, positive_scale
from ax_chaining.certificate.bounds import (
    UNION_PAIR_BYTES,
    certified_block,
    solve_tail_budget,
)
from ax_chaining.certificate.calibration import among_index
from ax_chaining.certificate.tails import upper_quantile
from ax_chaining.chaining import (
    ChainingResult,
    chaining_result,
    level_radii,
    prefix_covers,
    reuse_covers,
)
from ax_chaining.checks import match_tolerance
from ax_chaining.distances import MemoryBudgetError, format_bytes
from ax_chaining.distributed._shard import (
    Left,
    LibraryKernel,
    PendingFactors,
    StepFactors,
)
from ax_chaining.distributed._traversal import ShardedTraversal, combine_max
from ax_chaining.kernels.precomputed import item_indices
from ax_chaining.posterior import (
    ModelFactors,
    library_kernel_parts,
    low_rank_bytes,
    low_rank_row_batch,
    pending_noise,
    posterior_at,
    require_low_rank,
    row_budgets,
    sign_flip,
    to_model,
)

__all__ = ["ShardedSet", "ShardedStep", "ShardedStore"]

_STEPS = itertools.count(1)


@dataclass
class ShardedStep:
    """One step on the shards: its chaining, factors and pending noise."""

    chaining: ChainingResult
    factors: StepFactors
    pending_noise: Tensor | None

    @property
    def posterior(self) -> Any:
        raise RuntimeError(
            "candidate_mean would bring N values to the client; use "
            "acqf.store.values_at(index) for some candidates."
        )


class ShardedStore:
    r"""The :class:`~ax_chaining.acquisition.CandidateStore` of
    :class:`~ax_chaining.distributed.ShardedCandidates`: one machine's
    low-rank step with farthest-first covers (``path="dense"`` and
    ``cover="greedy"`` raise), ``memory_budget`` bounding each worker's share.
    """

    def __init__(self, acqf: Any, sharded: Any) -> None:
        self.acqf, self.model, self.sharded = acqf, acqf.model, sharded
        self.candidates = sharded
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
        require_low_rank(
            self.model, self.posterior_transform, "The sharded (low-rank) step"
        )
        like = torch.empty(0, dtype=torch.float64)
        self.candidate_dtype = to_model(self.model, like).dtype
        self._model_factors: ModelFactors | None = None
        self._base_key = uuid.uuid4().hex

    def pending_inputs(self, X_pending: Tensor) -> Tensor:
        X_pending = X_pending.detach().to(self.candidate_dtype)
        if X_pending.ndim != 2 or X_pending.shape[-1] != self.sharded.d:
            raise ValueError(
                f"`X_pending` must have shape p x {self.sharded.d}, got "
                f"{tuple(X_pending.shape)}."
            )
        return X_pending

    def _factors_of_model(self) -> ModelFactors:
        if self._model_factors is None:
            self.model.eval()
            like = torch.empty(0, dtype=self.candidate_dtype)
            with torch.no_grad():
                self._model_factors = ModelFactors(self.model, like)
        return self._model_factors

    def _kernel_message(self, mf: ModelFactors) -> tuple[Any, Any, Any]:
        """The kernel sent, training features, and other points' features
        function (None: the points)."""
        parts = library_kernel_parts(mf.covar_module)
        if parts is None:
            return mf.covar_module, mf.train_X, None
        base, scale = parts
        library = base.library
        if len(library) != self.sharded.n:
            raise ValueError(
                f"The model's TanimotoKernel holds {len(library)} items, the sharded "
                f"candidates {self.sharded.n}; expected the same library."
            )
        kernel = LibraryKernel(scale, base.route, base.normalized_inputs, len(library))

        def words(Xt: Tensor) -> Any:
            items = item_indices(Xt, len(library), base.normalized_inputs, "Kernel")
            return library.words[items.reshape(-1).cpu().numpy()]

        return kernel, words(mf.train_X), words

    def build(self, X_pending: Tensor | None, t: int) -> ShardedStep:
        return self.sharded.retrying(self._build, X_pending, t)

    def _build(self, X_pending: Tensor | None, t: int) -> ShardedStep:
        opts, sharded, n = self.options, self.sharded, self.sharded.n
        p = 0 if X_pending is None else X_pending.shape[0]
        mf = self._factors_of_model()
        dtype = self.candidate_dtype
        itemsize = torch.finfo(dtype).bits // 8
        # The largest shard's share, with a pool of 2 * batch_size rows.
        largest, pool_bytes = max(sharded.sizes), row_budgets(opts.memory_budget)[1]
        if sharded.batch_size is not None:
            pool_bytes = max(pool_bytes, 2 * sharded.batch_size * largest * itemsize)
        need = low_rank_bytes(mf.L.shape[-1], p, largest, itemsize, pool_bytes)
        if need > opts.memory_budget:
            raise MemoryBudgetError(
                f"A shard of {largest} candidates needs about {format_bytes(need)} "
                f"on its worker, above memory_budget={format_bytes(opts.memory_budget)}"
                ". Pass a larger memory_budget (it bounds each worker), "
                + ("a smaller batch_size, " if sharded.batch_size else "")
                + "or shard over more workers."
            )
        kernel, train_features, features_of = self._kernel_message(mf)
        noise = pending = None
        if p:
            noise = pending_noise(self.model, X_pending, self.posterior_transform)
            Pt, W_p, A = mf.pending(X_pending, noise)
            feats = Pt if features_of is None else features_of(Pt)
            pending = PendingFactors(feats, W_p, A)
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
            flip=sign_flip(self.model, self.posterior_transform),
            pending=pending,
        )
        summary = sharded.prepare(factors)
        if not all(s["finite"] for s in summary):
            raise ValueError("variance contains NaN or inf.")
        low = min(s["min_variance"] for s in summary)
        first = next(s for s in summary if s["min_variance"] == low)
        sigma_min = math.sqrt(max(low, 0.0))
        info = {"path": "low_rank", "distributed": True, "shards": sharded.num_shards}
        if p and opts.pending_covers == "reuse":
            # reuse_covers reads a distance's n and least standard deviation.
            least = torch.tensor([sigma_min], dtype=torch.float64)
            base = self.acqf._base_step().chaining
            chaining = reuse_covers(base, SimpleNamespace(n=n, sigma=least), t)
        else:
            max_prior = max(s["max_prior_variance"] for s in summary)
            scale = opts.scale or positive_scale(math.sqrt(max(max_prior, 0.0)))
            _, eps = level_radii(sigma_min, scale, opts.sigma_floor)
            batch = sharded.batch_size or low_rank_row_batch(
                n, itemsize, opts.memory_budget
            )
            covers, sizes, bounded = [], [], []
            if eps:
                order, radii = ShardedTraversal(
                    sharded,
                    factors.step,
                    opts.max_cover_size or min(n, DEFAULT_MAX_COVER_SIZE),
                    eps[-1],
                    batch,
                    dtype,
                ).run(first["left"])
                covers, sizes, bounded = prefix_covers(order, radii, eps, n)
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
        return ShardedStep(chaining, factors, noise)

    def _prepare(self, step: ShardedStep) -> None:
        """Make the shards hold ``step`` (they hold the last step prepared)."""
        if self.sharded.prepared is not step.factors:
            self.sharded.prepare(step.factors)

    def best_candidate(self, exclude: Sequence[int] = ()) -> dict[str, Any]:
        r"""The first candidate of largest :math:`\pm\mu_t + b_t(\sigma_t)`:
        ``index``, ``value``, ``x``, ``mean`` and ``sigma``."""
        excluded = sorted({int(i) for i in exclude})

        def run() -> dict[str, Any]:
            step = self.acqf._current()
            self._prepare(step)
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
            return combine_max(parts, "value")

        return self.sharded.retrying(run)

    def values_at(
        self, index: Sequence[int], step: ShardedStep | None = None
    ) -> dict[str, Tensor]:
        """Posterior mean (objective), standard deviation and raw rows at
        candidates ``index`` under ``step`` (default: the current one)."""
        index = [int(i) for i in index]

        def run() -> dict[str, Tensor]:
            held = step or self.acqf._current()
            self._prepare(held)
            parts = self.sharded.call("values", (held.factors.step, index))
            mean = torch.empty(len(index), dtype=self.candidate_dtype)
            var = torch.empty(len(index), dtype=self.candidate_dtype)
            x = torch.empty(len(index), self.sharded.d, dtype=self.sharded.dtype)
            for part in parts:
                if part["positions"]:
                    mean[part["positions"]] = part["mean"]
                    var[part["positions"]] = part["variance"]
                    x[part["positions"]] = part["x"].to(x)
            return {"mean": mean, "sigma": var.sqrt(), "x": x}

        return self.sharded.retrying(run)

    def mean_and_sigma(self, X: Tensor, step: ShardedStep) -> tuple[Tensor, Tensor]:
        mf = self._factors_of_model()
        X_pending = self.acqf.X_pending
        if X_pending is not None:
            mf.pending(X_pending, step.pending_noise)  # the step's pending factors
        return posterior_at(
            self.model,
            X.to(self.candidate_dtype),
            self.posterior_transform,
            X_pending,
            step.pending_noise,
            mf,
        )

    def among(self, among: Tensor | Sequence[int] | str | None) -> Tensor:
        if among is None:
            model = self.model.eval()
            train = model.train_inputs[0].reshape(-1, model.train_inputs[0].shape[-1])
            transform = getattr(model, "input_transform", None)
            args = (train, transform, self.candidate_dtype, self.sharded.dtype)
            found = [i for part in self.sharded.call("evaluated", args) for i in part]
            if found:
                return torch.tensor(found, dtype=torch.long)
        return among_index(among, self.sharded.n, None)  # None: none evaluated

    def certified(self, base: ShardedStep) -> ShardedSet:
        return ShardedSet(self, base)

    def match(self, X: Tensor) -> Tensor:
        """Global indices of the candidates equal to the rows of ``X`` (as
        :func:`~ax_chaining.checks.match_rows`)."""
        parts = self.sharded.call("nearest", (X,))
        tol = match_tolerance(max(p[2] for p in parts))
        vals = torch.stack([p[0] for p in parts])
        args = torch.stack([p[1] for p in parts])
        dist, best = vals.min(dim=0)  # first shard among ties: lowest index
        index = args.gather(0, best.unsqueeze(0))[0]
        if bool((dist > tol).any()):
            bad = int((dist > tol).nonzero()[0])
            raise ValueError(
                f"regret_bound: row {bad} of `X` is not a candidate; expected rows "
                "of the sharded candidates."
            )
        return index


class ShardedSet:
    """The :class:`~ax_chaining.certificate.certify.CertifiedSet` of sharded
    candidates: union or pairwise bounds (tail sums added over the shards, equal
    to the root search's tolerance ``1e-6``); no chaining bound, no rank."""

    methods = ("union", "pairwise")
    ranks = False

    def __init__(self, store: ShardedStore, base: ShardedStep) -> None:
        self.store, self.base = store, base
        self.n = store.sharded.n
        self.sign = 1.0 if store.acqf.maximize else -1.0
        self._values: tuple[list[int], Tensor] | None = None

    def values(self, index: Tensor) -> tuple[Tensor, Tensor]:
        idx = index.tolist()
        found = self.store.values_at(idx, self.base)
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
        bounds = self.store.sharded.retrying(self._bound, idx, mean / scale, options)
        bounds = bounds * scale
        return {"bound": bounds, method: bounds}

    def _bound(self, idx: list[int], mean_rows: Tensor, options: dict) -> Tensor:
        """The union (or pairwise) bound of the points ``idx`` (means
        ``mean_rows`` in units of ``scale``), a budget's block at a time."""
        store, step = self.store, self.base.factors.step
        calls, delta_t, tail = store.sharded, options["share"], options["tail"]
        store._prepare(self.base)
        found = Left.cat(calls.call("left", (step, idx)))
        pos = {g: k for k, g in enumerate(found.index)}
        lefts = found.take([pos[g] for g in idx])
        m = len(idx)
        out = torch.empty(m, dtype=torch.float64)
        z = None if self.n == 1 else upper_quantile(delta_t / (self.n - 1), tail)
        budget = store.options.memory_budget
        block_rows = certified_block(
            max(calls.sizes), UNION_PAIR_BYTES, budget, largest=None
        )
        for first in range(0, m, block_rows):
            block = list(range(first, min(m, first + block_rows)))
            args = (lefts.take(block), mean_rows[block], options["scale"], self.sign)
            parts = calls.call("cert_rows", (step, *args, z))
            lo = torch.stack([p["exact"] for p in parts]).amax(dim=0).clamp_min(0.0)
            # No pairwise term (z is None): zeros.
            zero = torch.zeros_like(lo)
            pairwise = torch.stack([p.get("pairwise", zero) for p in parts])
            pairwise = pairwise.amax(dim=0).clamp_min(0.0)
            if options["method"] == "pairwise":
                out[block] = pairwise
            else:
                hi = torch.maximum(pairwise, lo)

                def tail_sum(b: Tensor) -> Tensor:
                    return reduce(torch.add, calls.call("cert_tail", (step, b, tail)))

                solved = solve_tail_budget(tail_sum, lo, hi, delta_t, 1e-6)
                # As one machine: the pairwise bound, where computed, caps it.
                out[block] = solved if z is None else torch.minimum(solved, hi)
            calls.call("cert_end", (step,))
        return out

    def rank(self, index: int, **options: Any) -> Any:
        raise NotImplementedError("sharded candidates give no rank statement")
