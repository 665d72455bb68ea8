"""Algorithm 1 (levels, nested covers, H_i, bonus) and the pseudo-distances."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from ax_chaining import (
    DenseDistance,
    LowRankDistance,
    chaining_covers,
    is_cover,
    num_levels,
    reuse_covers,
)
from ax_chaining.certificate import chaining_bound, chaining_tree
from ax_chaining.chaining import chaining_bonus

DELTA = 0.05
PI4_36 = math.pi**4 / 36


def u(size: int, i: int, t: int, delta: float = DELTA) -> float:
    """u_i written out: log((|T_i| + 1) i^2 t^2 pi^4 / (36 delta))."""
    return math.log((size + 1) * i**2 * t**2 * PI4_36 / delta)


# Three independent posterior values with sigma = 1, 0.5, 0.25:
# d^2(i, j) = s_i^2 + s_j^2, so d(0,1)^2 = 1.25, d(0,2)^2 = 1.0625, d(1,2)^2 = 0.3125.
INDEPENDENT = torch.diag(torch.tensor([1.0, 0.25, 0.0625], dtype=torch.float64))


def test_hand_case_levels_covers_and_H():
    res = chaining_covers(DenseDistance(INDEPENDENT), t=1, delta=DELTA, scale=1.0)
    # sigma_min = 0.25 -> L = ceil(1 - log2(0.25)) = 3, eps = 1, 0.5, 0.25.
    assert res.eps.tolist() == [1.0, 0.5, 0.25]
    assert res.sigma_min == 0.25
    # Level 1 (eps^2 = 1): only (1,2) are adjacent; 1 has degree 2 and is taken,
    # then 0 alone. Level 2 (eps^2 = 0.25): d(2, T_1)^2 = 0.3125 > 0.25, so 2 is
    # added. Level 3: nothing is farther than 0.25 from T_2.
    assert [c.tolist() for c in res.covers] == [[1, 0], [1, 0, 2], [1, 0, 2]]
    assert res.cover_sizes.tolist() == [2, 3, 3]
    expected_H = [
        1.0 * math.sqrt(2 * u(2, 1, 1)),
        0.5 * math.sqrt(2 * u(3, 2, 1)),
        0.25 * math.sqrt(2 * u(3, 3, 1)),
    ]
    torch.testing.assert_close(res.H, torch.tensor(expected_H, dtype=torch.float64))
    # Numbers, once: pi^4/36/0.05 = 54.11616, x3 = 162.3485, log = 5.089768,
    # H_1 = sqrt(2 x 5.089768) = 3.190531.
    assert res.H[0].item() == pytest.approx(3.190531, rel=1e-6)
    # bonus(sigma) sums H_i over 0.25 <= eps_i < sigma.
    sigma = torch.tensor([1.0, 0.5, 0.25], dtype=torch.float64)
    bonus = res.bonus(sigma)
    torch.testing.assert_close(
        bonus,
        torch.tensor(
            [expected_H[1] + expected_H[2], expected_H[2], 0.0], dtype=torch.float64
        ),
    )
    # With means 0, 0.5, 0.9 the upper bounds are 2.81, 1.47, 0.9: x_0 is chosen.
    mean = torch.tensor([0.0, 0.5, 0.9], dtype=torch.float64)
    assert int(torch.argmax(mean + bonus)) == 0


def test_hand_case_t_and_proof_radius():
    res = chaining_covers(
        DenseDistance(INDEPENDENT), t=7, delta=0.1, scale=1.0, h_radius="proof"
    )
    expected = 2 * 0.5 * math.sqrt(2 * u(3, 2, 7, delta=0.1))
    assert res.H[1].item() == pytest.approx(expected, rel=1e-12)


def test_regret_bound_by_hand():
    res = chaining_covers(DenseDistance(INDEPENDENT), t=1, delta=DELTA, scale=1.0)
    sigma = torch.tensor([0.3], dtype=torch.float64)
    # eps_i < 0.3 for i >= 3 (0.25, 0.125, ...): |T_3| = 3 and |T_i| <= N = 3
    # beyond, each term 3 * eps_{i-1} sqrt(2 u_i).
    expected = sum(
        3 * 2 * 2.0 ** (1 - i) * math.sqrt(2 * u(3, i, 1)) for i in range(3, 200)
    )
    assert res.regret_bound(sigma).item() == pytest.approx(expected, rel=1e-12)
    assert res.regret_bound(torch.zeros(2, dtype=torch.float64)).tolist() == [0, 0]


@pytest.mark.parametrize(
    ("sigma_min", "scale", "expected"),
    [
        (0.25, 1.0, 3),
        (0.3, 1.0, 3),
        (0.2, 1.0, 4),
        (1.0, 1.0, 1),
        (1.5, 1.0, 1),
        (2.0, 1.0, 0),
        (0.5, 2.0, 3),
        (1e-6, 1.0, 21),
    ],
)
def test_num_levels(sigma_min, scale, expected):
    assert num_levels(sigma_min, scale) == expected
    # The definition: eps_L <= sigma_min < eps_{L-1}.
    if expected:
        assert scale * 2.0 ** (1 - expected) <= sigma_min


@pytest.mark.parametrize(
    ("variance", "scale", "eps"),
    [
        (1.0, 1.0, [1.0]),  # sigma_min = s: L = 1
        (0.25, 1.0, [1.0, 0.5]),  # sigma_min = s / 2: L = 2
        (4.0, 0.5, [0.5]),  # sigma_min = 4 s: the formula's L = 0, one level built
    ],
)
@pytest.mark.parametrize("cover", ["greedy", "farthest_first"])
def test_coincident_candidates_by_hand(variance, scale, eps, cover):
    # Two coincident candidates: k(x, x') = variance everywhere, so d_t = 0 and
    # the first candidate is an eps-cover at every radius.
    distance = DenseDistance(torch.full((2, 2), variance, dtype=torch.float64))
    res = chaining_covers(distance, t=3, scale=scale, cover=cover, max_cover_size=1)
    assert res.eps.tolist() == eps
    assert [c.tolist() for c in res.covers] == [[0]] * len(eps)
    assert res.cover_sizes.tolist() == [1] * len(eps)
    assert not bool(res.bounded.any())
    reused = reuse_covers(res, distance, t=3)  # the same levels, covers and H_i
    assert reused.eps.tolist() == eps and torch.equal(reused.H, res.H)
    expected_H = [e * math.sqrt(2 * u(1, i, 3)) for i, e in enumerate(eps, 1)]
    assert res.H.tolist() == pytest.approx(expected_H, rel=1e-12)
    # sigma = sqrt(variance) = sigma_min: no level has sigma_min <= eps_i < sigma.
    assert res.bonus(distance.sigma).tolist() == [0.0, 0.0]
    # The tree: x_0 in T_1, x_1 enters at level L + 1 with x_0 as parent, link 0.
    tree = chaining_tree(distance, res.covers, res.eps, res.bounded, res.parents)
    assert tree.level.tolist() == [1, len(eps) + 1]
    assert tree.parent.tolist() == [-1, 0]
    assert tree.link.tolist() == [0.0, 0.0]
    if cover == "farthest_first":
        assert res.parents[0].tolist() == [-1, 0]
        assert res.parents[1].tolist() == [0.0, 0.0]
    # The certificate is the known gap: f(x_0) - f(x_1) has zero variance.
    mean = torch.tensor([0.0, 1.0], dtype=torch.float64)
    dist = torch.zeros(2, 2, dtype=torch.float64)
    bound = chaining_bound(mean, dist, torch.arange(2), tree, delta_t=0.01)
    assert bound.tolist() == [1.0, 0.0]


def test_first_level_built_when_sigma_min_exceeds_twice_the_scale():
    # The draw that found it: candidates (3, 3) twice, k = x x^T + diag(0.5, 1).
    # sigma = sqrt(18.5), sqrt(19) > 2 s = 4, d^2 = 18.5 + 19 - 36 = 1.5 <= s^2.
    cov = torch.tensor([[18.5, 18.0], [18.0, 19.0]], dtype=torch.float64)
    distance = DenseDistance(cov)
    for cover in ("greedy", "farthest_first"):
        res = chaining_covers(distance, t=3, scale=2.0, cover=cover, max_cover_size=1)
        assert res.eps.tolist() == [2.0]
        assert [c.tolist() for c in res.covers] == [[0]]
        assert res.H.tolist() == pytest.approx([2 * math.sqrt(2 * u(1, 1, 3))])
        # eps_1 = 2 < sigma_min: the level is inactive, the bonus 0 (the paper's
        # empty sum).
        assert res.bonus(distance.sigma).tolist() == [0.0, 0.0]
        tree = chaining_tree(distance, res.covers, res.eps, res.bounded, res.parents)
        assert tree.parent.tolist() == [-1, 0]
        assert tree.link.tolist() == pytest.approx([0.0, math.sqrt(1.5)], rel=1e-12)


def test_sigma_floor_bounds_levels_for_noise_free_data():
    cov = torch.diag(torch.tensor([1.0, 0.0, 0.5], dtype=torch.float64))
    res = chaining_covers(DenseDistance(cov), t=3, scale=1.0, sigma_floor=1e-3)
    assert res.sigma_min == 0.0
    assert res.sigma_min_used == pytest.approx(1e-3)
    assert res.num_levels == num_levels(1e-3, 1.0) == 11
    with pytest.raises(ValueError, match="sigma_floor"):
        chaining_covers(DenseDistance(cov), t=3, scale=1.0, sigma_floor=0.0)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"t": 0}, "`t` must be a positive int"),
        ({"t": 1.5}, "`t` must be an int"),
        ({"delta": 0.0}, "delta"),
        ({"delta": 1.0}, "delta"),
        ({"scale": 0.0}, "scale"),
        ({"scale": float("inf")}, "scale"),
        ({"sigma_floor": -1.0}, "sigma_floor"),
        ({"h_radius": "box"}, "h_radius"),
        ({"cover": "optimal"}, "cover"),
        ({"max_cover_size": 0}, "max_cover_size"),
    ],
)
def test_chaining_bad_input(kwargs, match):
    args = {"t": 2} | kwargs
    with pytest.raises((ValueError, TypeError), match=match):
        chaining_covers(DenseDistance(INDEPENDENT), **args)


def test_distance_rows_clamp_and_zero_diagonal():
    cov = torch.tensor([[1.0, 1.0 + 1e-12], [1.0 + 1e-12, 1.0]], dtype=torch.float64)
    d2 = DenseDistance(cov).rows(torch.tensor([0, 1]))
    assert torch.all(d2 >= 0) and d2.diagonal().tolist() == [0.0, 0.0]


def _random_features(n: int, r: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, r, generator=g, dtype=torch.float64)


def test_low_rank_matches_dense():
    phi = _random_features(40, 6, 0)  # prior covariance phi phi^T
    train = _random_features(5, 6, 1)
    K = phi @ phi.T
    k_cross = train @ phi.T  # 5 x 40
    C = train @ train.T + 0.1 * torch.eye(5, dtype=torch.float64)
    L = torch.linalg.cholesky(C)
    W = torch.linalg.solve_triangular(L, k_cross, upper=False)
    posterior = K - W.T @ W
    dense = DenseDistance(posterior)
    low = LowRankDistance(lambda idx: K[idx].clone(), K.diagonal().clone(), W)
    idx = torch.tensor([3, 0, 17])
    torch.testing.assert_close(low.rows(idx), dense.rows(idx))
    torch.testing.assert_close(low.variance, dense.variance)
    radii = [1.5, 0.7, 0.2]
    levels = dense.level_matrix(radii)
    torch.testing.assert_close(low.level_matrix(radii), levels)
    d2 = dense.dist2
    expected = sum((d2 <= r * r).to(torch.uint8) for r in radii)
    assert torch.equal(levels, expected)
    with pytest.raises(ValueError, match="decreasing"):
        dense.level_matrix([0.5, 1.0])
    res_dense = chaining_covers(dense, t=6, scale=3.0)
    res_low = chaining_covers(low, t=6, scale=3.0)
    assert res_dense.cover_sizes.tolist() == res_low.cover_sizes.tolist()


covariances = st.tuples(
    st.integers(2, 40), st.integers(1, 5), st.integers(0, 10_000)
).map(lambda a: _random_features(*a) @ _random_features(*a).T / a[1])


@given(cov=covariances, method=st.sampled_from(["greedy", "farthest_first"]))
def test_covers_are_nested_and_valid(cov, method):
    cov = cov + 1e-3 * torch.eye(cov.shape[0], dtype=torch.float64)
    distance = DenseDistance(cov)
    scale = float(cov.diagonal().max().sqrt())
    res = chaining_covers(distance, t=4, scale=scale, cover=method)
    d2 = distance.dist2
    previous: list[int] = []
    for i in range(res.num_levels):
        cover = res.covers[i]
        assert cover.tolist()[: len(previous)] == previous  # T_{i-1} in T_i
        assert is_cover(d2, cover, float(res.eps[i]) * (1 + 1e-9))
        assert res.cover_sizes[i] == cover.numel()
        previous = cover.tolist()
    # H_i is decreasing in i; every eps_i halves.
    assert torch.all(res.H[1:] < res.H[:-1])
    torch.testing.assert_close(res.eps[1:], res.eps[:-1] / 2)


def test_farthest_first_cap_uses_N_bound():
    cov = torch.eye(50, dtype=torch.float64) * 0.8  # all pairwise d = sqrt(1.6)
    res = chaining_covers(
        DenseDistance(cov), t=2, scale=1.0, cover="farthest_first", max_cover_size=10
    )
    # Level 1 (eps = 1 < sqrt(1.6)) needs all 50 points: capped at 10, |T_1| <= 50.
    assert res.bounded.tolist()[0] is True
    assert res.cover_sizes.tolist()[0] == 50
    assert res.H[0].item() == pytest.approx(math.sqrt(2 * u(50, 1, 2)), rel=1e-12)
    assert res.covers[0].numel() == 10


@given(cov=covariances, c=st.sampled_from([0.25, 0.5, 2.0, 8.0, 1024.0]))
def test_scale_equivariance_of_engine(cov, c):
    cov = cov + 1e-3 * torch.eye(cov.shape[0], dtype=torch.float64)
    scale = float(cov.diagonal().max().sqrt())
    base = chaining_covers(DenseDistance(cov), t=3, scale=scale)
    scaled = chaining_covers(DenseDistance(cov * c * c), t=3, scale=scale * c)
    assert base.cover_sizes.tolist() == scaled.cover_sizes.tolist()
    torch.testing.assert_close(scaled.H, base.H * c)
    torch.testing.assert_close(scaled.eps, base.eps * c)


def test_summary_lists_levels():
    res = chaining_covers(DenseDistance(INDEPENDENT), t=1, scale=1.0)
    text = res.summary()
    assert text.count("\n") == res.num_levels + 1 and "|T_i|" in text
    assert text.startswith("covers: greedy; N=3, t=1")


# --- the bonus's shapes: Algorithm 1's staircase and its continuous envelope ---
# Three levels eps = 1, 0.5, 0.25 with H = 4, 2, 1, all active (sigma_min 0.25):
# B_1 = 7, B_2 = 3, B_3 = 1 (sums from a level down).
EPS = torch.tensor([1.0, 0.5, 0.25], dtype=torch.float64)
HS = torch.tensor([4.0, 2.0, 1.0], dtype=torch.float64)


@pytest.mark.parametrize(
    "sigma, paper, continuous",
    [
        (0.1, 0.0, 0.0),  # below eps_3 / 2 = 0.125: nothing
        (0.125, 0.0, 0.0),  # the continuous curve's foot
        (0.1875, 0.0, 0.5),  # halfway to (0.25, B_3 = 1)
        (0.25, 0.0, 1.0),  # a radius: the staircase's value just above it
        (0.375, 1.0, 2.0),  # halfway between (0.25, 1) and (0.5, 3)
        (0.5, 1.0, 3.0),
        (0.75, 3.0, 5.0),  # halfway between (0.5, 3) and (1, 7)
        (1.0, 3.0, 7.0),
        (2.0, 7.0, 7.0),  # above the first radius: B_1
    ],
)
def test_bonus_shapes_by_hand(sigma, paper, continuous):
    s = torch.tensor([sigma], dtype=torch.float64)
    assert chaining_bonus(s, EPS, HS, 0.25, "paper").item() == pytest.approx(paper)
    got = chaining_bonus(s, EPS, HS, 0.25, "continuous").item()
    assert got == pytest.approx(continuous)


def test_continuous_bonus_skips_inactive_levels():
    # sigma_min_used = 0.3: level 3 (eps 0.25) is inactive, B_1 = 6, B_2 = 2,
    # and the curve's foot is at eps_2 / 2 = 0.25.
    s = torch.tensor([0.25, 0.375, 0.5, 1.0], dtype=torch.float64)
    got = chaining_bonus(s, EPS, HS, 0.3, "continuous")
    assert got.tolist() == pytest.approx([0.0, 1.0, 2.0, 6.0])
    assert chaining_bonus(s, EPS, HS, 2.0, "continuous").tolist() == [0.0] * 4


@given(
    H=st.lists(st.floats(0.0, 10.0), min_size=1, max_size=6),
    sigma=st.lists(st.floats(0.0, 3.0), min_size=1, max_size=20),
    floor_level=st.integers(0, 6),
)
def test_continuous_bonus_between_paper_at_sigma_and_twice_sigma(H, sigma, floor_level):
    """b(s) <= c(s) <= b(2 s), and c is non-decreasing and continuous."""
    L = len(H)
    eps = torch.pow(2.0, -torch.arange(L, dtype=torch.float64))
    Ht = torch.tensor(H, dtype=torch.float64)
    floor = float(2.0 ** -min(floor_level, L - 1))
    s = torch.tensor(sigma, dtype=torch.float64)
    paper = chaining_bonus(s, eps, Ht, floor, "paper")
    cont = chaining_bonus(s, eps, Ht, floor, "continuous")
    twice = chaining_bonus(2 * s, eps, Ht, floor, "paper")
    tol = 1e-9 * (1 + Ht.sum())
    assert bool((cont >= paper - tol).all())
    assert bool((cont <= twice + tol).all())
    grid = torch.linspace(0, 3, 3001, dtype=torch.float64)
    curve = chaining_bonus(grid, eps, Ht, floor, "continuous")
    assert bool((curve.diff() >= -tol).all())
    # Continuous: no jump larger than the steepest slope allows on the grid.
    slope = (Ht / (eps / 2)).max() if L else 0.0
    assert bool((curve.diff().abs() <= slope * 1e-3 + tol).all())


def test_bonus_shape_is_checked():
    with pytest.raises(ValueError, match="shape"):
        chaining_bonus(torch.ones(1), EPS, HS, 0.25, "smooth")
