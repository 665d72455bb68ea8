r"""Regret bounds :math:`B_t(x)`: with probability at least :math:`1 - \delta`
jointly over all steps, :math:`\max_{x^\star} f(x^\star) - f(x) \le B_t(x)` at
any :math:`x` fixed by the data, for :math:`f` a sample of the GP prior."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import torch
from torch import Tensor

from ax_chaining.certificate.schedule import DEFAULT_DELTA, step_delta
from ax_chaining.certificate.tails import GAUSSIAN, TailLaw, tail_sum, upper_quantile
from ax_chaining.checks import check_choice, check_int
from ax_chaining.distances import DEFAULT_MEMORY_BUDGET, PseudoDistance
from ax_chaining.level_graph import chunk_rows

__all__ = [
    "BLOCK_BYTES",
    "PAIRWISE_PAIR_BYTES",
    "UNION_PAIR_BYTES",
    "ChainingTree",
    "Links",
    "Method",
    "Rule",
    "certificate_bounds",
    "certificate_share",
    "certified_block",
    "chaining_bound",
    "chaining_tree",
    "pairwise_bound",
    "recommend",
    "running_minimum",
    "solve_tail_budget",
    "ucb_lcb_bound",
    "union_bound",
]

#: How the chaining bound prices a link: its pseudo-distance or its radius.
Links = Literal["actual", "radius"]
#: Which bound: the smaller of union and chaining, or one of them.
Method = Literal["combined", "union", "pairwise", "chaining"]
#: How the certified point is recommended (:func:`recommend`).
Rule = Literal["min_bound", "max_mean"]

#: Bytes of temporaries per (certified point, candidate) pair of :func:`union_bound`.
UNION_PAIR_BYTES = 8 * 8
#: The same for :func:`pairwise_bound`.
PAIRWISE_PAIR_BYTES = 8 * 4
#: The most bytes a block's temporaries take on the CPU (a GPU: the budget only).
BLOCK_BYTES = 16 * 2**20


def _check_rows(mean: Tensor, dist: Tensor, index: Tensor) -> tuple[Tensor, Tensor]:
    if mean.ndim != 1:
        raise ValueError(f"mean must be 1-D (N), got shape {tuple(mean.shape)}.")
    index = torch.as_tensor(index, dtype=torch.long, device=mean.device).reshape(-1)
    if dist.shape != (index.numel(), mean.numel()):
        raise ValueError(
            f"dist must have shape (len(index), N) = ({index.numel()}, "
            f"{mean.numel()}), got {tuple(dist.shape)}."
        )
    if index.numel() and (int(index.min()) < 0 or int(index.max()) >= mean.numel()):
        raise ValueError(f"index must lie in [0, {mean.numel()}), got {index}.")
    return mean.to(torch.float64), index


def certified_block(
    n: int, pair_bytes: int, memory_budget: int, *, largest: int | None = BLOCK_BYTES
) -> int:
    """Certified points per block (at least one) of ``pair_bytes`` for each of
    ``n`` candidates within :func:`certificate_share` of ``memory_budget``."""
    share = certificate_share(memory_budget, largest=largest)
    return max(1, share // max(1, pair_bytes * n))


def certificate_share(memory_budget: int, *, largest: int | None = BLOCK_BYTES) -> int:
    """A sixteenth of ``memory_budget``, at most ``largest`` (None: no cap)."""
    share = check_int("memory_budget", memory_budget, 1) // 16
    return share if largest is None else min(share, largest)


def _step(n: int, pair_bytes: int, memory_budget: int, device: torch.device) -> int:
    largest = BLOCK_BYTES if device.type == "cpu" else None
    return certified_block(n, pair_bytes, memory_budget, largest=largest)


def _blocks(m: int, step: int) -> list[slice]:
    return [slice(a, min(m, a + step)) for a in range(0, m, step)]


def pairwise_bound(
    mean: Tensor,
    dist: Tensor,
    index: Tensor,
    delta_t: float,
    tail: TailLaw = GAUSSIAN,
    *,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
) -> Tensor:
    r"""Pairwise union bound :math:`\max_{x^\star}[\mu(x^\star) - \mu(x) + z\,d(x,
    x^\star)]`, :math:`z = \bar\Phi^{-1}(\delta_t / (N - 1))`, at least 0.

    Args:
        mean: ``N`` posterior means.
        dist: ``m x N`` pseudo-distances :math:`d(x, \cdot)` (not squared) of the
            ``m`` certified points ``index``.
    """
    mean, index = _check_rows(mean, dist, index)
    n = mean.numel()
    out = torch.zeros(index.numel(), dtype=torch.float64, device=mean.device)
    if n == 1:
        return out
    z = upper_quantile(delta_t / (n - 1), tail).to(mean.device)
    step = _step(n, PAIRWISE_PAIR_BYTES, memory_budget, mean.device)
    for rows in _blocks(index.numel(), step):
        gap = mean.unsqueeze(0) - mean[index[rows]].unsqueeze(-1)
        gap += z * dist[rows].to(mean)
        out[rows] = gap.amax(dim=-1)
    return out.clamp_min(0.0)


def union_bound(
    mean: Tensor,
    dist: Tensor,
    index: Tensor,
    delta_t: float,
    tail: TailLaw = GAUSSIAN,
    rtol: float = 1e-6,
    *,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
) -> Tensor:
    r"""Union bound: the smallest :math:`B \ge 0` with :math:`\sum_{x^\star:\,
    d > 0} \bar\Phi((B - \mu(x^\star) + \mu(x)) / d(x, x^\star)) \le \delta_t`
    (and :math:`B \ge \mu(x^\star) - \mu(x)` where :math:`d = 0`), solved to
    ``rtol`` from above (:func:`solve_tail_budget`), capped by
    :func:`pairwise_bound`. Arguments as there.
    """
    mean, index = _check_rows(mean, dist, index)
    out = torch.empty(index.numel(), dtype=torch.float64, device=mean.device)
    step = _step(mean.numel(), UNION_PAIR_BYTES, memory_budget, mean.device)
    for rows in _blocks(index.numel(), step):
        gap = mean.unsqueeze(0) - mean[index[rows]].unsqueeze(-1)
        d = dist[rows].to(mean)
        lo = torch.where(d > 0, -math.inf, gap).amax(dim=-1).clamp_min(0.0)
        hi = pairwise_bound(
            mean, d, index[rows], delta_t, tail, memory_budget=memory_budget
        )
        hi = torch.maximum(hi, lo)
        solved = solve_tail_budget(
            lambda b, gap=gap, d=d: tail_sum(b, gap, d, tail), lo, hi, delta_t, rtol
        )
        # The valid pairwise bound caps a search that round-off could push past it.
        out[rows] = torch.minimum(solved, hi)
    return out


def solve_tail_budget(
    tail_sum: Callable[[Tensor], Tensor],
    lo: Tensor,
    hi: Tensor,
    delta_t: float,
    rtol: float,
) -> Tensor:
    """The smallest ``b`` in ``[lo, hi]`` (to ``rtol``, from above) with
    ``tail_sum(b) <= delta_t``, per entry, for a non-increasing ``tail_sum``.

    ``hi`` is grown until within budget, then the bracket is closed by
    Illinois regula falsi on ``log tail_sum(b) - log delta_t`` (else bisection);
    every decision compares ``tail_sum`` with ``delta_t`` itself.
    """
    log_delta = math.log(delta_t)
    tiny = torch.finfo(torch.float64).tiny

    def evaluate(b: Tensor) -> tuple[Tensor, Tensor]:
        s = tail_sum(b).to(torch.float64)
        return s, s.clamp_min(tiny).log() - log_delta

    for _ in range(64):
        s_hi, h_hi = evaluate(hi)
        over = s_hi > delta_t
        if not bool(over.any()):
            break
        hi = torch.where(over, hi + (hi - lo).clamp_min(1e-12) + 1e-12, hi)
    s_lo, h_lo = evaluate(lo)
    done = s_lo <= delta_t  # lo is within budget: the smallest valid b
    hi = torch.where(done, lo, hi)
    side = torch.zeros_like(hi)  # the end the last point replaced: +1 hi, -1 lo
    for _ in range(200):
        width = hi - lo
        tol = rtol * hi.abs().clamp_min(1e-300)
        open_ = (width > tol) & ~done
        if not bool(open_.any()):
            break
        step = h_lo * width / (h_lo - h_hi)
        secant = (h_lo > 0) & (h_hi <= 0) & torch.isfinite(step)
        x = torch.where(secant, lo + step, lo + 0.5 * width)
        margin = 0.25 * tol
        x = torch.minimum(torch.maximum(x, lo + margin), hi - margin)
        s_x, h_x = evaluate(x)
        ok = open_ & (s_x <= delta_t)
        over = open_ & ~(s_x <= delta_t)  # NaN counts as over budget
        # Illinois: the end kept twice in a row has its value halved.
        h_lo = torch.where(ok & (side > 0), 0.5 * h_lo, h_lo)
        h_hi = torch.where(over & (side < 0), 0.5 * h_hi, h_hi)
        hi, h_hi = torch.where(ok, x, hi), torch.where(ok, h_x, h_hi)
        lo, h_lo = torch.where(over, x, lo), torch.where(over, h_x, h_lo)
        side = torch.where(ok, 1.0, torch.where(over, -1.0, side))
    return hi


@dataclass(frozen=True)
class ChainingTree:
    r"""The chaining tree over ``N`` points, closed by :math:`T_{L+1} = X`.

    Attributes:
        level: ``N`` levels at which each point enters, in ``1 .. K = L + 1``.
        parent, link: ``N`` parents (-1 in :math:`T_1`) and :math:`d(c, p(c))`.
        ancestors: ``K x N``; row ``i - 1`` holds :math:`p_i(x^\star)`.
        sizes, new: ``K`` sizes :math:`|T_i|` and :math:`|T_i \setminus T_{i-1}|`.
        eps: ``K`` radii :math:`\epsilon_i` (then :math:`\epsilon_L / 2`).
        radius_levels: Leading levels that are proper covers at their radius.
    """

    level: Tensor
    parent: Tensor
    link: Tensor
    ancestors: Tensor
    sizes: Tensor
    new: Tensor
    eps: Tensor
    radius_levels: int

    @property
    def num_levels(self) -> int:
        return self.sizes.numel()

    def num_pairs(self, levels: int | None = None) -> Tensor:
        r""":math:`m_j = |T_j| + |T_j \setminus T_{j-1}|` (links from
        :math:`j \ge 2`) of the tree cut after ``levels`` levels, closed by X."""
        k = self.num_levels if levels is None else int(levels)
        n = int(self.level.numel())
        sizes, new = self.sizes[:k].clone(), self.new[:k].clone()
        if k < self.num_levels:  # the cut's last level is X
            below = int(sizes[k - 2]) if k >= 2 else 0
            sizes[k - 1], new[k - 1] = n, n - below
        new[0] = 0  # no link into T_1
        return sizes + new


def chaining_tree(
    distance: PseudoDistance,
    covers: Sequence[Tensor],
    eps: Tensor | Sequence[float],
    bounded: Tensor | Sequence[bool] | None = None,
    parents: tuple[Tensor, Tensor] | None = None,
) -> ChainingTree:
    r"""The chaining tree of nested sets ``covers`` (plus :math:`X`).

    :math:`T_i` is the union of ``covers[:i]``; each point of :math:`T_i
    \setminus T_{i-1}` gets its nearest point of :math:`T_{i-1}` as parent, or
    the one ``parents`` gives.

    Args:
        covers: ``L`` index tensors; ``eps``: their radii, decreasing;
            ``bounded``: true where a level is not a proper cover.
        parents: ``(parent, link2)``: each point's parent (-1 in :math:`T_1`)
            in a level above its own, and the squared pseudo-distance to it.
    """
    n, device = distance.n, distance.device
    eps_list = [float(e) for e in (eps.tolist() if isinstance(eps, Tensor) else eps)]
    if len(eps_list) != len(covers):
        raise ValueError(
            f"covers and eps must have one entry per level, got {len(covers)} and "
            f"{len(eps_list)}."
        )
    flags = [False] * len(covers) if bounded is None else [bool(b) for b in bounded]
    k = len(covers) + 1
    level = torch.full((n,), k, dtype=torch.long, device=device)
    for i, cover in enumerate(covers, start=1):
        idx = torch.as_tensor(cover, dtype=torch.long, device=device).reshape(-1)
        if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= n):
            raise ValueError(f"covers[{i - 1}] has an index outside [0, {n}).")
        level[idx] = torch.minimum(level[idx], torch.full_like(idx, i))
    sizes = torch.stack([(level <= i).sum() for i in range(1, k + 1)])
    new = torch.stack([(level == i).sum() for i in range(1, k + 1)])

    if parents is None:  # each point's nearest in a level above (ties: lowest)
        best = torch.full((n,), math.inf, dtype=torch.float64, device=device)
        parent = torch.full((n,), -1, dtype=torch.long, device=device)
        sources = (level < k).nonzero().squeeze(-1)
        if distance.upper_blocks and 2 * sources.numel() > n:
            # Each pair of the upper blocks offered both ways.
            step = chunk_rows(n, 8, distance.block_bytes)
            for start in range(0, n, step):
                stop = min(n, start + step)
                d2 = distance.upper_block(start, stop).to(torch.float64).clamp_min_(0.0)
                row_level = level[start:stop].unsqueeze(-1)
                col_level = level[start:].unsqueeze(0)
                val, arg = torch.where(row_level < col_level, d2, math.inf).min(dim=0)
                _offer(best, parent, start, n, val, start + arg)
                val, arg = torch.where(col_level < row_level, d2, math.inf).min(dim=1)
                _offer(best, parent, start, stop, val, start + arg)
        else:  # rows of the points of T_L (the only possible parents), in blocks
            step = max(1, distance.block_bytes // max(1, 8 * n))
            for start in range(0, sources.numel(), step):
                src = sources[start : start + step]
                d2 = distance.rows(src).to(torch.float64)
                allowed = level[src].unsqueeze(-1) < level.unsqueeze(0)
                val, arg = torch.where(allowed, d2, math.inf).min(dim=0)
                _offer(best, parent, 0, n, val, src[arg])
    else:  # as given, checked against the levels
        parent = torch.as_tensor(parents[0], device=device).to(torch.long).reshape(-1)
        best = torch.as_tensor(parents[1], device=device).to(torch.float64).reshape(-1)
        if parent.numel() != n or best.numel() != n:
            raise ValueError(
                f"parents must hold {n} parents and {n} squared links, got "
                f"{parent.numel()} and {best.numel()}."
            )
        has_parent = parent >= 0
        if bool(((level > 1) != has_parent).any()) or bool(
            (level[parent[has_parent]] >= level[has_parent]).any()
        ):
            raise ValueError(
                "parents do not fit the covers: each point below the first level "
                "needs a parent in a level above its own, and those of the first "
                "level none (-1)."
            )
        best = torch.where(has_parent, best, math.inf)
    has_parent = level > 1
    if bool((parent[has_parent] < 0).any()):  # pragma: no cover - nested sets
        raise RuntimeError("chaining_tree: a point above level 1 found no parent.")
    link = torch.where(has_parent, best.clamp_min(0.0).sqrt(), torch.zeros_like(best))

    anc = torch.empty(k, n, dtype=torch.long, device=device)
    anc[k - 1] = torch.arange(n, device=device)
    for i in range(k - 1, 0, -1):  # row i-1 is the ancestor at level i
        above = anc[i]
        anc[i - 1] = torch.where(level[above] > i, parent[above], above)

    last = eps_list[-1] / 2.0 if eps_list else 1.0
    eps_t = torch.tensor([*eps_list, last], dtype=torch.float64, device=device)
    radius_levels = next((i for i, b in enumerate(flags) if b), len(flags))
    return ChainingTree(level, parent, link, anc, sizes, new, eps_t, radius_levels)


def _offer(
    best: Tensor, parent: Tensor, lo: int, hi: int, val: Tensor, idx: Tensor
) -> None:
    """Points ``lo..hi-1`` take parents ``idx`` where strictly nearer, in place."""
    better = val < best[lo:hi]
    best[lo:hi] = torch.where(better, val, best[lo:hi])
    parent[lo:hi] = torch.where(better, idx, parent[lo:hi])


def chaining_bound(
    mean: Tensor,
    dist: Tensor,
    index: Tensor,
    tree: ChainingTree,
    delta_t: float,
    links: Links = "actual",
    tail: TailLaw = GAUSSIAN,
    *,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
) -> Tensor:
    r"""Chaining certificate, after Appendix A of Contal, Malherbe and Vayatis (2015).

    .. math::

        B^{\mathrm{chain}}_t(x) = \max_{x^\star} \Big[\mu(x^\star) - \mu(x)
            + \min_{i} \Big(z_i\, d(x, p_i(x^\star))
            + \sum_{j > i,\ p_j \ne p_{j-1}} z_j\,
            d(p_j(x^\star), p(p_j(x^\star)))\Big)\Big],

    with :math:`p_i(x^\star)` the ancestor of :math:`x^\star` at level :math:`i`
    of ``tree`` and :math:`z_j = \bar\Phi^{-1}(\delta_t w_j / m_j)`:
    :math:`w_j \propto j^{-2}`, :math:`m_j` the pairs at level :math:`j`
    (:meth:`ChainingTree.num_pairs`). ``links="radius"`` bounds every link by
    its radius :math:`\epsilon_{j-1}`. Other arguments as in :func:`pairwise_bound`.
    """
    check_choice("links", links, get_args(Links))
    mean, index = _check_rows(mean, dist, index)
    n = mean.numel()
    if tree.level.numel() != n:
        raise ValueError(f"tree has {tree.level.numel()} points, mean has {n}.")
    out = torch.empty(index.numel(), dtype=torch.float64, device=mean.device)
    k = tree.radius_levels + 1 if links == "radius" else tree.num_levels
    # z_j with w_j ~ 1/j^2 (sum 1 over the levels) and m_j pairs.
    num_pairs = tree.num_pairs(k)
    j = torch.arange(1, k + 1, dtype=torch.float64, device=num_pairs.device)
    w = 1.0 / j.square()
    w = w / w.sum()
    pairs = num_pairs.to(torch.float64).clamp_min(1.0)
    z = upper_quantile(delta_t * w / pairs, tail).to(num_pairs.device)
    if links == "radius":
        eps = tree.eps[:k]
        radius = torch.zeros_like(eps)
        radius[1:] = eps[:-1]
        # tail_r[i]: sum of the link radii below level i (bound on d(x*, p_i(x*)));
        # tail_c[i]: sum of z_j times those radii.
        tail_r = radius.flip(0).cumsum(0).flip(0) - radius
        tail_c = (z * radius).flip(0).cumsum(0).flip(0) - z * radius
        step = _step(n, 8 * (3 * k + 3), memory_budget, mean.device)
        for rows in _blocks(index.numel(), step):
            gap = mean.unsqueeze(0) - mean[index[rows]].unsqueeze(-1)
            d = dist[rows].to(mean)
            total = z * (d.unsqueeze(-1) + tail_r) + tail_c  # rows x N x k
            out[rows] = (gap + total.amin(dim=-1)).amax(dim=-1)
        return out.clamp_min(0.0)

    anc = tree.ancestors
    # cost[i]: sum over the chain from x* up to p_{i+1}(x*) of z_j * link.
    cost = torch.zeros(k, n, dtype=torch.float64, device=mean.device)
    for i in range(k - 2, -1, -1):
        moved = anc[i + 1] != anc[i]
        step_cost = z[i + 1] * tree.link[anc[i + 1]]
        cost[i] = cost[i + 1] + torch.where(moved, step_cost, 0.0)
    # One certified point at a time, over blocks of K x width candidates.
    width = min(n, _step(1, 3 * 8 * k, memory_budget, mean.device))
    for r in range(index.numel()):
        row = dist[r].to(mean)
        gap = mean - mean[index[r]]
        best = -math.inf
        for a in range(0, n, width):
            cols = slice(a, a + width)
            first = z.unsqueeze(-1) * row[anc[:, cols]]  # z_i d(x, p_i(x*))
            chained = (first + cost[:, cols]).amin(dim=0)
            best = max(best, float((gap[cols] + chained).amax()))
        out[r] = best
    return out.clamp_min(0.0)


def ucb_lcb_bound(mean: Tensor, sigma: Tensor, index: Tensor, beta: float) -> Tensor:
    r"""UCB - LCB bound :math:`\max_{x'} [\mu + \sqrt\beta \sigma](x') - [\mu -
    \sqrt\beta \sigma](x)` (Makarova et al., 2022) at the points ``index``:
    valid jointly over ``t`` for GP-UCB's :math:`\beta_t = 2 \log(N t^2 \pi^2 /
    (6 \delta))` (Srinivas et al., 2010, Lemma 5.1)."""
    mean = mean.to(torch.float64)
    sigma = sigma.to(mean)
    index = torch.as_tensor(index, dtype=torch.long, device=mean.device).reshape(-1)
    root = math.sqrt(float(beta))
    ucb = (mean + root * sigma).max()
    return (ucb - (mean[index] - root * sigma[index])).clamp_min(0.0)


def recommend(
    bounds: Tensor, index: Tensor, mean: Tensor, rule: Rule = "min_bound"
) -> int:
    """Position in ``index`` of the recommended point: ``"min_bound"``, the
    smallest bound (ties to the larger mean, then the first); ``"max_mean"``,
    the largest posterior mean."""
    check_choice("rule", rule, get_args(Rule))
    if index.numel() == 0:
        raise ValueError("No point to recommend: the certified set is empty.")
    m = mean.to(torch.float64)[index]
    if rule == "max_mean":
        return int(torch.argmax(m))
    tied = (bounds <= bounds.min()).nonzero().squeeze(-1)
    return int(tied[torch.argmax(m[tied])])


def running_minimum(bounds: Sequence[float] | Tensor) -> Tensor:
    """Running minimum of a sequence of certificates (valid jointly over steps)."""
    b = torch.as_tensor(bounds, dtype=torch.float64).reshape(-1)
    return torch.cummin(b, dim=0).values if b.numel() else b


def certificate_bounds(
    mean: Tensor,
    distance: PseudoDistance,
    index: Tensor,
    t: int,
    delta: float = DEFAULT_DELTA,
    method: Method = "combined",
    tree: ChainingTree | None = None,
    links: Links = "actual",
    tail: TailLaw = GAUSSIAN,
    split_delta: bool = False,
    share: float | None = None,
    *,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
) -> dict[str, Tensor]:
    r"""Certificates of the points ``index`` at step ``t``.

    Example:
        >>> certificate_bounds(mean, distance, torch.tensor([0]), t=5, tree=tree)

    Args:
        mean: ``N`` posterior means (objective units, larger is better).
        t, delta: The step's failure probability is :func:`step_delta`
            ``(delta, t)``, unless ``share`` gives it.
        method: ``"combined"`` (the smaller of ``"union"`` and ``"chaining"``),
            ``"union"``, ``"pairwise"`` or ``"chaining"`` (these need ``tree``).
        split_delta: With ``"combined"``, ``delta / 2`` for each part.
        memory_budget: Bytes the temporaries may take (no effect on the bounds).

    Returns:
        ``{"bound": m bounds, <part>: m bounds, ...}`` with the part(s) computed.
    """
    check_choice("method", method, get_args(Method))
    check_choice("links", links, get_args(Links))
    if mean.numel() != distance.n:
        raise ValueError(f"mean has {mean.numel()} entries, distance {distance.n}.")
    index = torch.as_tensor(index, dtype=torch.long, device=mean.device).reshape(-1)
    parts = ("union", "chaining") if method == "combined" else (method,)
    if "chaining" in parts and tree is None:
        raise ValueError(f"method={method!r} needs the chaining tree (tree=).")
    share = step_delta(delta, t) if share is None else share
    share = share / len(parts) if split_delta else share
    chained = functools.partial(chaining_bound, tree=tree, links=links)
    bound_of = {"union": union_bound, "pairwise": pairwise_bound, "chaining": chained}
    m, n = index.numel(), mean.numel()
    out = {
        part: torch.empty(m, dtype=torch.float64, device=mean.device) for part in parts
    }
    # Rows in the distance's own batches: a matrix product's rounding depends on them.
    batch = max(1, int(distance.row_batch))
    step = _step(n, 2 * 8 + UNION_PAIR_BYTES, memory_budget, mean.device)
    step = max(batch, step - step % batch)
    for rows in _blocks(m, step):
        idx = index[rows]
        d = torch.empty(idx.numel(), n, dtype=torch.float64, device=mean.device)
        for a in range(0, idx.numel(), batch):
            d[a : a + batch] = distance.rows(idx[a : a + batch])
        d.clamp_min_(0.0).sqrt_()
        for part in parts:
            out[part][rows] = bound_of[part](
                mean, d, idx, delta_t=share, tail=tail, memory_budget=memory_budget
            )
        del d
    bound = out[parts[0]]
    out["bound"] = torch.minimum(bound, out[parts[1]]) if len(parts) > 1 else bound
    return out
