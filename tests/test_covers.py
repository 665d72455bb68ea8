"""Algorithm 2 (greedy cover) and the farthest-first traversal."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from ax_chaining import farthest_first_order, greedy_cover, is_cover
from ax_chaining.covers import NearestCentres

# Points on a line at 0, 1, 2, 3.5, 10: distances are easy to read off by hand.
LINE = torch.tensor([0.0, 1.0, 2.0, 3.5, 10.0], dtype=torch.float64)
LINE_D2 = (LINE[:, None] - LINE[None, :]).square()


@pytest.mark.parametrize(
    ("eps", "candidates", "expected"),
    [
        # eps=1: degrees 2,3,2,1,1 -> pick 1 (covers 0,1,2), then 3 and 4 alone.
        (1.0, None, [1, 3, 4]),
        # eps=1.5: 1 and 2 both have degree 3; the tie goes to index 1. After it
        # covers {0,1,2}, 3 and 4 hold only themselves.
        (1.5, None, [1, 3, 4]),
        # eps=2.5: the ball of 1 is {0,1,2,3} (d(1,3)=2.5), then 4.
        (2.5, None, [1, 4]),
        # eps=20: one ball holds everything; degree ties go to index 0.
        (20.0, None, [0]),
        # Restricted to {2,3,4}: all isolated at eps=1, in index order.
        (1.0, torch.tensor([4, 2, 3]), [2, 3, 4]),
        # Restricted to {2,3,4} at eps=1.5: 2 and 3 tie (degree 2), 2 is taken.
        (1.5, torch.tensor([2, 3, 4]), [2, 4]),
    ],
)
def test_greedy_cover_by_hand(eps, candidates, expected):
    assert greedy_cover(LINE_D2, eps, candidates).tolist() == expected


def test_greedy_cover_mask_and_empty():
    mask = torch.tensor([False, False, True, True, True])
    assert greedy_cover(LINE_D2, 1.5, mask).tolist() == [2, 4]
    empty = torch.empty(0, dtype=torch.long)
    assert greedy_cover(LINE_D2, 1.0, empty).numel() == 0


def test_greedy_cover_tolerates_roundoff_negatives():
    d2 = LINE_D2.clone()
    d2[0, 0] = -1e-15
    d2[1, 0] = d2[0, 1] = -1e-17
    assert greedy_cover(d2, 0.5).tolist() == [0, 2, 3, 4]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"dist2": torch.zeros(3, 2)}, ValueError, "square"),
        ({"dist2": torch.zeros(3, 3, dtype=torch.long)}, TypeError, "floating"),
        ({"dist2": [[0.0]]}, TypeError, "torch.Tensor"),
        ({"eps": 0.0}, ValueError, "eps"),
        ({"eps": float("nan")}, ValueError, "eps"),
        ({"eps": -1.0}, ValueError, "eps"),
        ({"candidates": torch.tensor([0, 7])}, ValueError, "candidates"),
        ({"candidates": torch.tensor([0.5])}, TypeError, "candidates"),
        ({"candidates": torch.tensor([True, False])}, ValueError, "mask"),
    ],
)
def test_greedy_cover_bad_input(kwargs, error, match):
    args = {"dist2": LINE_D2, "eps": 1.0, "candidates": None} | kwargs
    with pytest.raises(error, match=match):
        greedy_cover(**args)


def test_greedy_cover_nan_distance():
    d2 = LINE_D2.clone()
    d2[0, 1] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        greedy_cover(d2, 1.0)


points_2d = st.integers(min_value=1, max_value=30).flatmap(
    lambda n: st.lists(
        st.tuples(st.floats(-5, 5, allow_nan=False), st.floats(-5, 5, allow_nan=False)),
        min_size=n,
        max_size=n,
    )
)


def _d2(points) -> torch.Tensor:
    x = torch.tensor(points, dtype=torch.float64)
    return (x[:, None, :] - x[None, :, :]).square().sum(-1)


@given(points=points_2d, eps=st.floats(0.05, 6.0))
def test_greedy_cover_is_a_cover(points, eps):
    d2 = _d2(points)
    cover = greedy_cover(d2, eps)
    assert is_cover(d2, cover, eps)
    assert len(set(cover.tolist())) == cover.numel()  # no centre twice
    # Deterministic: the same input gives the same order.
    assert torch.equal(cover, greedy_cover(d2, eps))


@given(points=points_2d, eps=st.floats(0.05, 6.0), data=st.data())
def test_greedy_cover_restricted_covers_its_subset(points, eps, data):
    d2 = _d2(points)
    n = d2.shape[0]
    subset = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=n))
    sub = torch.tensor(subset)
    cover = greedy_cover(d2, eps, sub)
    assert set(cover.tolist()) <= set(subset)  # centres come from the subset
    assert is_cover(d2, cover, eps, points=sub)


def _optimal_cover_size(adjacency: torch.Tensor) -> int:
    n = adjacency.shape[0]
    for k in range(1, n + 1):
        for combo in itertools.combinations(range(n), k):
            if adjacency[list(combo)].any(dim=0).all():
                return k
    return n  # pragma: no cover


@given(
    points=st.lists(
        st.tuples(st.floats(0, 4), st.floats(0, 4)), min_size=1, max_size=9
    ),
    eps=st.floats(0.2, 3.0),
)
def test_greedy_cover_approximation_factor(points, eps):
    d2 = _d2(points)
    adjacency = d2 <= eps * eps
    greedy = greedy_cover(d2, eps).numel()
    optimum = _optimal_cover_size(adjacency)
    max_degree = int(adjacency.sum(dim=1).max())
    assert greedy <= (1 + math.log(max_degree)) * optimum + 1e-9


def test_farthest_first_by_hand():
    rows = lambda idx: LINE_D2[idx]  # noqa: E731
    order, radii = farthest_first_order(rows, 5, start=0, max_size=5)
    # From 0 the farthest is 10; then 3.5 (min(3.5, 6.5) = 3.5 beats 2 and 1);
    # then 2 (min(2, 8, 1.5) = 1.5 beats min(1, 9, 2.5) = 1), then 1.
    assert order.tolist() == [0, 4, 3, 2, 1]
    torch.testing.assert_close(
        radii, torch.tensor([10.0, 3.5, 1.5, 1.0, 0.0], dtype=torch.float64)
    )


@given(points=points_2d, data=st.data(), batch=st.sampled_from([1, 2, 5]))
def test_farthest_first_prefixes_are_nested_covers(points, data, batch):
    d2 = _d2(points)
    n = d2.shape[0]
    start = data.draw(st.integers(0, n - 1))
    order, radii = farthest_first_order(
        lambda idx: d2[idx], n, start, max_size=n, batch_size=batch
    )
    assert len(set(order.tolist())) == order.numel()
    assert order.numel() == radii.numel()
    assert torch.all(radii[1:] <= radii[:-1] + 1e-12)  # radius never grows
    for k in range(1, order.numel() + 1):
        assert is_cover(d2, order[:k], float(radii[k - 1]) + 1e-9)


@pytest.mark.parametrize(("max_size", "sizes"), [(5, [2, 3, 4]), (3, [2, 3, 3])])
def test_nearest_centres_by_hand(max_size, sizes):
    # LINE = 0, 1, 2, 3.5, 10 (order 0, 4, 3, 2, 1; radii 10, 3.5, 1.5, 1, 0).
    # Radii 5, 2, 1.2: T_1 = {0, 4} (radius 3.5), T_2 = T_1 + {3} (1.5),
    # T_3 = T_2 + {2} (1.0). Point 3 (x = 3.5) enters at level 2: nearest of
    # T_1 is 0 at 3.5. Point 2 (x = 2) at level 3: nearest of T_2 is 3 at 1.5.
    # Point 1 (x = 1) closes: nearest of T_3 is 0 (1, tied with 2; the first
    # taken stays). With max_size=3 the traversal stops at {0, 4, 3}: level 3
    # is the whole traversal, and points 2 and 1 take their nearest of it.
    tracker = NearestCentres(5, [5.0, 2.0, 1.2])
    farthest_first_order(
        lambda idx: LINE_D2[idx], 5, start=0, max_size=max_size, on_centre=tracker
    )
    parent, link2 = tracker.parents()
    assert parent.tolist() == [-1, 0, 3, 0, -1]
    assert link2.tolist() == [0.0, 1.0, 2.25, 12.25, 0.0]
    assert tracker.sizes == sizes
    with pytest.raises(RuntimeError, match="no centre"):
        NearestCentres(5, [1.0]).parents()
    with pytest.raises(ValueError, match="radii"):
        NearestCentres(5, [1.0, float("nan")])


def test_farthest_first_stops_at_radius_and_size():
    rows = lambda idx: LINE_D2[idx]  # noqa: E731
    order, radii = farthest_first_order(rows, 5, start=0, max_size=5, stop_radius=3.5)
    assert order.tolist() == [0, 4] and float(radii[-1]) == 3.5
    order, _ = farthest_first_order(rows, 5, start=0, max_size=3)
    assert order.tolist() == [0, 4, 3]
    with pytest.raises(ValueError, match="start"):
        farthest_first_order(rows, 5, start=5, max_size=3)
    with pytest.raises(ValueError, match="max_size"):
        farthest_first_order(rows, 5, start=0, max_size=0)


# ------------------------------------------------- the traversal's pool sample


@given(
    m=st.integers(0, 10_000),
    k=st.integers(0, 40),
    seed=st.integers(0, 2**31 - 1),
)
def test_sample_without_replacement_is_distinct_in_range_and_seeded(m, k, seed):
    from ax_chaining.covers import sample_without_replacement

    def draw() -> list[int]:
        gen = torch.Generator().manual_seed(seed)
        return sample_without_replacement(m, k, gen).tolist()

    got = draw()
    assert len(got) == min(m, k)
    assert len(set(got)) == len(got)
    assert all(0 <= p < m for p in got)
    assert got == draw()  # the same seed draws the same positions


def test_sample_without_replacement_has_the_law_of_a_permutation_prefix():
    """Every position is equally likely in every slot of the sample (the law of
    ``randperm(m)[:k]``), on the path that draws with rejection (k << m):
    a chi-square test at 5 sigma on 30,000 samples from one seeded generator."""
    from ax_chaining.covers import sample_without_replacement

    m, k, draws = 50, 3, 30_000
    gen = torch.Generator().manual_seed(0)
    counts = torch.zeros(k, m)
    for _ in range(draws):
        s = sample_without_replacement(m, k, gen)
        counts[torch.arange(k), s] += 1
    expected = draws / m
    chi2 = ((counts - expected) ** 2 / expected).sum(dim=1)
    # chi-square with m - 1 = 49 dof: mean 49, sd about 9.9.
    assert (chi2 < 49 + 5 * 9.9).all(), chi2
    assert (chi2 > 49 - 4 * 9.9).all(), chi2  # not suspiciously even either


def test_sample_without_replacement_refuses_bad_arguments():
    from ax_chaining.covers import sample_without_replacement

    gen = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="`m` must be >= 0, got -1"):
        sample_without_replacement(-1, 2, gen)
    with pytest.raises(TypeError, match="`k` must be an int, got float"):
        sample_without_replacement(10, 2.0, gen)
    with pytest.raises(TypeError, match="`generator` must be a torch.Generator"):
        sample_without_replacement(10, 2, 0)
