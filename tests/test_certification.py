"""From a model to a certificate: the schedule of checks, the LOO calibration
check that may refuse, Student-t tails, and certify_model."""

from __future__ import annotations

import math

import pytest
import torch
from botorch.models import SingleTaskGP
from gpytorch.kernels import RBFKernel
from hypothesis import given
from hypothesis import strategies as st

from ax_chaining import ChainingUCB
from ax_chaining.certificate import (
    AUTO_DOF_CAP,
    CHERNOFF,
    GAUSSIAN,
    LOO_MIN_OBSERVATIONS,
    CertificateOptions,
    CheckSchedule,
    ExplorationTail,
    StudentTail,
    certify_model,
    loo_check,
    loo_residuals,
    resolve_tail,
    step_delta,
    union_bound,
)
from ax_chaining.certificate.tails import GRID_STEP
from ax_chaining.test_functions.problems import grid_problem

DTYPE = torch.float64


# ---------------------------------------------------------------------------
# The schedule of checks.
# ---------------------------------------------------------------------------


def test_schedule_indices_by_hand() -> None:
    every = CheckSchedule()
    assert [every.index(n) for n in (0, 1, 2, 9)] == [None, 2, 3, 10]
    every_k = CheckSchedule("every_k", k=5, start=10)
    checks = [n for n in range(40) if every_k.index(n) is not None]
    assert checks == [10, 15, 20, 25, 30, 35]
    assert every_k.index(25) == 4
    geometric = CheckSchedule("geometric", start=10, ratio=2.0)
    assert [n for n in range(200) if geometric.index(n)] == [10, 20, 40, 80, 160]
    slow = CheckSchedule("geometric", start=1, ratio=1.2)  # ceil repeats: +1
    assert [n for n in range(1, 9) if slow.index(n)] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert geometric.next_check(41) == 80


def test_schedule_shares_by_hand_and_the_gain() -> None:
    delta = 0.05
    # Every step: the check after n observations is t = n + 1.
    assert CheckSchedule().share(delta, 39) == step_delta(delta, 40)
    geometric = CheckSchedule("geometric", start=10)
    assert geometric.share(delta, 40) == pytest.approx(6 * delta / (math.pi**2 * 9))
    # The third check of the geometric schedule gets 1600 / 9 times the share
    # of the 40th step of the every-step schedule.
    gain = geometric.share(delta, 40) / CheckSchedule().share(delta, 39)
    assert gain == pytest.approx(1600 / 9)
    with pytest.raises(ValueError, match="next check is after 40"):
        geometric.share(delta, 30)


@given(
    st.sampled_from(["every", "every_k", "geometric"]),
    st.integers(1, 7),
    st.integers(1, 30),
)
def test_shares_over_all_checks_sum_to_at_most_delta(kind, k, start) -> None:
    schedule = CheckSchedule(kind, k=k, start=start, ratio=1.5)
    total = sum(
        schedule.share(0.05, n) for n in range(3000) if schedule.index(n) is not None
    )
    assert total <= 0.05


def test_schedule_bad_arguments() -> None:
    with pytest.raises(ValueError, match="`kind` must be"):
        CheckSchedule("daily")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="`ratio` must be > 1"):
        CheckSchedule("geometric", ratio=1.0)
    with pytest.raises(ValueError, match="`k` must be a positive int"):
        CheckSchedule("every_k", k=0)


# ---------------------------------------------------------------------------
# Tails and the scale.
# ---------------------------------------------------------------------------


def test_student_tail_by_table_values() -> None:
    t5 = StudentTail(5, exact=True)
    assert float(t5.isf(torch.tensor(0.025))) == pytest.approx(2.5706, abs=1e-4)
    assert float(t5.sf(torch.tensor(2.5706))) == pytest.approx(0.025, abs=1e-5)
    p = torch.tensor([1e-8, 1e-3, 0.3], dtype=DTYPE)
    assert torch.allclose(t5.sf(t5.isf(p)), p, rtol=1e-9)
    gauss = -torch.special.ndtri(p)
    assert bool((t5.isf(p) > gauss).all())  # heavier than Gaussian
    assert torch.allclose(StudentTail(1e7).isf(p), gauss, rtol=1e-5)


@given(st.sampled_from([1.0, 4.0, 30.0, 500.0]), st.integers(0, 10))
def test_student_grid_tail_is_conservative_and_close(dof: float, seed: int) -> None:
    """The grid's P[T > z] is never below the exact one and at most the exact
    one at z - 1.001 h sqrt(1 + z^2) (the class docstring), so a union bound
    with it is valid and barely larger."""
    g = torch.Generator().manual_seed(seed)
    z = 40 * torch.randn(2000, generator=g, dtype=DTYPE)
    fast, exact = StudentTail(dof), StudentTail(dof, exact=True)
    h = GRID_STEP
    assert bool((fast.sf(z) >= exact.sf(z)).all())
    below = exact.sf(z - 1.001 * h * torch.sqrt(1 + z.square()))
    assert bool((fast.sf(z) <= below * (1 + 1e-12)).all())
    mean = torch.randn(50, generator=g, dtype=DTYPE)
    dist = torch.rand(4, 50, generator=g, dtype=DTYPE) + 0.1
    index = torch.tensor([0, 1, 2, 3])
    b_fast = union_bound(mean, dist, index, 1e-4, fast)
    b_exact = union_bound(mean, dist, index, 1e-4, exact)
    assert bool((b_fast >= b_exact * (1 - 1e-6)).all())
    assert bool((b_fast <= b_exact * 1.01 + 1e-3).all())


def test_the_tail_follows_the_calibration_unless_named() -> None:
    # Fitted hyperparameters: n - 1 degrees of freedom for explored
    # candidates, capped at AUTO_DOF_CAP = 10 for the others; a named law
    # (e.g. Student-t with the uncapped n - 1 everywhere) is taken as given.
    law = resolve_tail(None, "loo", 120)
    assert isinstance(law, ExplorationTail)
    assert (law.heavy.dof, law.light.dof, law.ratio) == (AUTO_DOF_CAP, 119, 0.5)
    small = resolve_tail(None, "loo", 8)
    assert (small.heavy.dof, small.light.dof) == (7, 7)
    student = StudentTail(119)
    assert resolve_tail(student, "loo", 120) is student
    assert resolve_tail(None, "none", 12) is GAUSSIAN
    assert resolve_tail(student, "none", 1) is student
    assert resolve_tail(CHERNOFF, "loo", 12) is CHERNOFF
    law = StudentTail(3)
    assert resolve_tail(law, "loo", 12) is law
    with pytest.raises(TypeError, match="`tail` must be a TailLaw.*got str"):
        resolve_tail("cauchy", "loo", 12)


def test_union_bound_with_student_tails_by_hand() -> None:
    # One other point at distance 1, mean gap 0: B = t quantile at delta.
    mean = torch.tensor([0.0, 0.0], dtype=DTYPE)
    dist = torch.tensor([[0.0, 1.0]], dtype=DTYPE)
    bound = union_bound(mean, dist, torch.tensor([0]), 0.025, StudentTail(5))
    assert float(bound) == pytest.approx(2.5706, abs=1e-4)


@given(st.floats(1.0, 5.0), st.integers(0, 10))
def test_a_scale_on_every_spread_scales_the_bound(c: float, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    mean = torch.randn(12, generator=g, dtype=DTYPE)
    dist = torch.rand(3, 12, generator=g, dtype=DTYPE)
    index = torch.tensor([0, 4, 7])
    dist[0, 0] = dist[1, 4] = dist[2, 7] = 0.0
    direct = union_bound(mean, c * dist, index, 1e-3)
    homogeneous = c * union_bound(mean / c, dist, index, 1e-3)
    assert torch.allclose(direct, homogeneous, rtol=1e-5)


# ---------------------------------------------------------------------------
# The LOO check.
# ---------------------------------------------------------------------------


def _se_model(X, y, lengthscale: float, noise_sd: float = 0.05) -> SingleTaskGP:
    kernel = RBFKernel().to(X)
    kernel.lengthscale = lengthscale
    model = SingleTaskGP(
        X,
        y.unsqueeze(-1),
        train_Yvar=torch.full((y.numel(), 1), noise_sd**2, dtype=DTYPE),
        covar_module=kernel,
        outcome_transform=None,
    )
    model.mean_module.constant.data.fill_(0.0)
    return model.eval()


def _grid_data(seed: int, n: int = 40):
    X, f = grid_problem(20, seed)
    g = torch.Generator().manual_seed(100 + seed)
    idx = torch.randperm(X.shape[0], generator=g)[:n]
    y = f[idx] + 0.05 * torch.randn(n, generator=g, dtype=DTYPE)
    return X, f, idx, y


def test_loo_residuals_equal_brute_force_leave_one_out() -> None:
    _, _, idx, y = _grid_data(0, n=12)
    X = grid_problem(20, 0)[0][idx]
    model = _se_model(X, y, 1.0)
    z = loo_residuals(model)
    for i in (0, 5, 11):
        keep = torch.arange(12) != i
        other = _se_model(X[keep], y[keep], 1.0)
        post = other.posterior(X[i : i + 1], observation_noise=True)
        expected = (y[i] - post.mean.squeeze()) / post.variance.squeeze().sqrt()
        assert float(z[i]) == pytest.approx(float(expected), rel=1e-6)


def test_scale_level_takes_the_upper_confidence_limit_of_the_loo_scale() -> None:
    """``scale_level`` replaces the point estimate sqrt(mean z^2) (``None``)
    by sqrt(sum z^2 / chi2_{n, level}), by hand from the LOO residuals, at
    level 0.05 by default; it only widens (never below the point estimate for
    level <= 1/2), the bound follows the scale, and a bad level is refused
    before anything runs."""
    from scipy.stats import chi2

    X, _, idx, y = _grid_data(1, n=24)
    model = _se_model(X[idx], y, 1.0)  # residuals a little wider than it says
    z = loo_residuals(model).double()
    point = loo_check(model, min_observations=1, scale_level=None)
    upper = loo_check(model, min_observations=1, scale_level=0.05)
    assert loo_check(model, min_observations=1).scale == upper.scale  # default
    assert point.valid and upper.valid
    assert point.scale == pytest.approx(math.sqrt(float(z.square().mean())))
    expected = math.sqrt(float(z.square().sum()) / chi2.ppf(0.05, 24))
    assert upper.scale == pytest.approx(expected, rel=1e-12)
    assert upper.scale > point.scale > 1.0
    # Residuals well inside the model's spread keep the scale at 1 under either.
    narrow = _se_model(X[idx], 0.5 * y, 1.0)
    small = loo_residuals(narrow).double().square().sum()
    assert float(small) / chi2.ppf(0.05, 24) < 1.0
    assert loo_check(narrow, min_observations=1, scale_level=0.05).scale == 1.0

    # The bound scales with the check's factor.
    def options(**kw):
        return CertificateOptions(min_observations=1, **kw)

    wide = certify_model(model, X, options=options(scale_level=0.05))
    plain = certify_model(model, X, options=options(scale_level=None))
    assert wide.valid and plain.valid and wide.bound > plain.bound
    assert certify_model(model, X, options=options()).bound == wide.bound
    for bad in (0.0, 1.0, 1.5):
        for calibration in ("loo", "none"):
            with pytest.raises(ValueError, match="`scale_level`"):
                certify_model(
                    model,
                    X,
                    options=CertificateOptions(
                        scale_level=bad, calibration=calibration
                    ),
                )


def test_the_check_refuses_a_lengthscale_ten_times_too_long() -> None:
    refused = accepted = 0
    for seed in range(8):
        X, _, idx, y = _grid_data(seed)
        refused += not loo_check(_se_model(X[idx], y, 10.0)).valid
        right = loo_check(_se_model(X[idx], y, 1.0))
        accepted += right.valid
        if right.valid:
            assert 1.0 <= right.scale < 1.5
    assert refused == 8
    assert accepted >= 7  # a false refusal has probability about alpha each


def test_the_check_certifies_from_its_minimum_number_of_observations() -> None:
    """Below ``min_observations`` (default LOO_MIN_OBSERVATIONS = 20) the
    check cannot run, whatever the residuals, and says so: the certificate
    holds the model's own numbers (scale 1, the same tail), marked not valid;
    at the minimum the same model is checked as usual. A bad option of the
    bound is an error even where the check cannot run."""
    X, _, idx, y = _grid_data(0, n=19)
    model = _se_model(X[idx], y, 1.0)
    check = loo_check(model)
    assert not check.valid and check.scale == 1.0
    assert "only 19 observations" in check.reason
    assert check.stats == {"n": 19.0, "min_observations": 20.0}
    assert LOO_MIN_OBSERVATIONS == 20
    at = loo_check(model, min_observations=19)
    assert at.valid and at.stats["n"] == 19.0 and 1.0 <= at.scale < 1.5
    assert check.unchecked and check.reason.startswith("unchecked: ")
    cert = certify_model(model, X)
    assert not cert.valid and cert.reason == check.reason
    as_true = CertificateOptions(calibration="none", tail=resolve_tail(None, "loo", 19))
    model_own = certify_model(model, X, options=as_true)
    assert model_own.valid and cert.index == model_own.index
    assert cert.bound == model_own.bound < math.inf
    assert cert.rank_bound == model_own.rank_bound <= X.shape[0]

    def least(n):
        return CertificateOptions(min_observations=n)

    ok = certify_model(model, X, options=least(19))
    assert ok.valid and ok.bound == certify_model(model, X, options=least(1)).bound
    # The model taken as true needs no check, hence no minimum.
    none = CertificateOptions(calibration="none")
    assert certify_model(model, X, options=none).valid
    with pytest.raises(ValueError, match="`min_observations` must be a positive"):
        loo_check(model, min_observations=0)
    with pytest.raises(TypeError, match="`min_observations` must be an int"):
        certify_model(model, X, options=CertificateOptions(min_observations=2.5))
    with pytest.raises(ValueError, match="`links` must be"):
        ChainingUCB(model, X).certificate(options=CertificateOptions(links="paper"))


def test_a_refused_certificate_says_why_and_bounds_nothing() -> None:
    X, _, idx, y = _grid_data(0)
    wrong = _se_model(X[idx], y, 10.0)
    cert = certify_model(wrong, X)
    assert not cert.valid and cert.bound == math.inf
    assert "overconfident" in cert.reason and cert.checks["mean_z2"] > 1
    none = CertificateOptions(calibration="none")  # the model taken as true
    plain = certify_model(wrong, X, options=none)
    assert plain.valid and math.isfinite(plain.bound)
    as_dict = cert.as_dict()
    assert as_dict["valid"] is False and as_dict["bound"] == "inf"


def test_certify_model_equals_the_acquisitions_union_certificate() -> None:
    X, _, idx, y = _grid_data(1)
    model = _se_model(X[idx], y, 1.0)
    for calibration, level in (("none", None), ("loo", None), ("loo", 0.05)):
        opts = CertificateOptions(calibration=calibration, scale_level=level)
        ours = certify_model(model, X, options=opts)
        acqf = ChainingUCB(model, X).certificate(
            options=CertificateOptions(
                method="union", calibration=calibration, scale_level=level
            )
        )
        assert ours.index == acqf.index
        assert ours.bound == pytest.approx(acqf.bound, rel=1e-9)
        assert ours.certified == acqf.certified
    check = loo_check(model)
    plain = certify_model(model, X, options=CertificateOptions(calibration="none"))
    inflated = certify_model(model, X)
    assert inflated.bound >= plain.bound  # calibration only makes it larger
    assert inflated.checks == check.stats


def test_certify_model_with_a_schedule() -> None:
    X, _, idx, y = _grid_data(2, n=20)
    model = _se_model(X[idx], y, 1.0)
    geometric = CheckSchedule("geometric", start=10)
    on = certify_model(
        model, X, options=CertificateOptions(schedule=geometric, calibration="none")
    )
    every = certify_model(model, X, options=CertificateOptions(calibration="none"))
    assert on.share == geometric.share(0.05, 20) > every.share
    assert on.bound < every.bound  # more of delta on fewer checks
    late = CertificateOptions(schedule=CheckSchedule("geometric", start=12))
    with pytest.raises(ValueError, match="not a check"):
        certify_model(model, X, options=late)


def test_exploration_tail_by_hand() -> None:
    """Each candidate's column takes its own law: heavy where its posterior
    variance is above half its prior variance; the quantile is the heavy one."""
    law = ExplorationTail(heavy_dof=3, light_dof=30)
    bound = law.bind(torch.tensor([0.2, 0.5, 0.51, 1.0], dtype=DTYPE))
    z = torch.full((2, 4), 4.0, dtype=DTYPE)
    sf = bound.sf(z)
    heavy = StudentTail(3, exact=True).sf(torch.tensor([4.0], dtype=DTYPE))
    light = StudentTail(30, exact=True).sf(torch.tensor([4.0], dtype=DTYPE))
    expected = torch.cat([light, light, heavy, heavy]).expand(2, 4)
    assert torch.allclose(sf, expected, rtol=0.02)  # z rounded down on a grid
    assert bool((sf >= expected * (1 - 1e-12)).all())  # never below the exact
    p = torch.tensor([1e-6], dtype=DTYPE)
    assert torch.equal(bound.isf(p), StudentTail(3).isf(p))
    with pytest.raises(ValueError, match="bound to 4 candidates; got .* over 3"):
        bound.sf(torch.zeros(1, 3, dtype=DTYPE))
    with pytest.raises(ValueError, match="`light_dof` must be at least"):
        ExplorationTail(heavy_dof=10, light_dof=5)


def test_default_tails_are_heavy_only_where_the_data_have_not_reached() -> None:
    """40 observations on [0, 2] and two candidates far from them: the
    default certificate is the union bound with n - 1 = 39 degrees of freedom
    for the candidates near the data and 10 for the far ones, between the
    bounds with either law everywhere."""
    from ax_chaining.certificate import union_bound
    from ax_chaining.posterior import candidate_posterior, prior_variance

    near = torch.linspace(0.0, 2.0, 40, dtype=DTYPE).unsqueeze(-1)
    X = torch.cat([near, torch.tensor([[6.0], [9.0]], dtype=DTYPE)])
    model = SingleTaskGP(
        near,
        torch.sin(3 * near),
        train_Yvar=torch.full((40, 1), 1e-4, dtype=DTYPE),
        covar_module=RBFKernel().to(DTYPE),
        outcome_transform=None,
    ).eval()
    model.covar_module.lengthscale = 0.5
    none = CertificateOptions(calibration="none")
    assert certify_model(model, X, options=none).tail == "gaussian"
    post = candidate_posterior(model, X, path="dense")
    ratio = post.distance.variance / prior_variance(model, X)
    assert (ratio > 0.5).tolist() == [False] * 40 + [True, True]
    best = int(torch.argmax(post.mean[:40]))
    idx = torch.tensor([best])
    share = CheckSchedule().share(0.05, 40)
    d = post.distance.rows(idx).clamp_min(0).sqrt()
    law = resolve_tail(None, "loo", 40).bind(ratio)
    options = CertificateOptions(calibration="none", tail=law)
    got = certify_model(model, X, among=[best], options=options)
    light = float(union_bound(post.mean, d, idx, share, StudentTail(39)))
    heavy = float(union_bound(post.mean, d, idx, share, StudentTail(10)))
    # The far candidates dominate the bound: the heavy law's (each solved to
    # the union bound's relative tolerance, 1e-6).
    assert got.bound == pytest.approx(heavy, rel=2e-6) and light < heavy / 1.5
    # Without them every candidate is explored: n - 1 degrees of freedom.
    law = resolve_tail(None, "loo", 40).bind(ratio[:40])
    d, mean = d[:, :40], post.mean[:40]
    expected = float(union_bound(mean, d, idx, share, law))
    light = float(union_bound(mean, d, idx, share, StudentTail(39)))
    heavy = float(union_bound(mean, d, idx, share, StudentTail(10)))
    assert expected == pytest.approx(light, rel=2e-6) and expected < heavy


# ---------------------------------------------------------------------------
# One package: every earlier public name, and the deprecated module.
# ---------------------------------------------------------------------------

# The public names of the two modules the package replaced, less those the
# certificate options removed (Tail and TailChoice: tails are TailLaw objects;
# make_certificate and refused_certificate: issue_certificate over a
# CertifiedSet).
EARLIER_NAMES = (
    "BLOCK_BYTES PAIRWISE_PAIR_BYTES UNION_PAIR_BYTES Certificate ChainingTree "
    "TailLaw Links Method Rule certificate_bounds certificate_share "
    "certified_block chaining_bound chaining_tree "
    "pairwise_bound recommend running_minimum step_delta "
    "ucb_lcb_bound union_bound upper_quantile solve_tail_budget "
    "AUTO_DOF_CAP EXPLORED_RATIO ExplorationTail Calibration CheckSchedule "
    "EVERY_STEP LooCheck StudentTail ScheduleKind certify_model "
    "issue_certificate bind_tail loo_check loo_residuals resolve_tail calibrate"
).split()


def test_every_earlier_name_imports_from_the_package() -> None:
    import ax_chaining.certificate as package

    missing = [n for n in EARLIER_NAMES if n not in package.__all__]
    assert not missing
    for name in package.__all__:  # each resolves, the BoTorch ones on first use
        assert getattr(package, name) is not None, name
    assert package.certify_model.__module__ == "ax_chaining.certificate.calibration"


def test_tail_sum_by_hand() -> None:
    # x certified against two candidates: one at the same point (d = 0, adds
    # nothing), one 1 above it at d = 0.5; at b = 1 its term is Phibar(0) = 1/2,
    # at b = 2 Phibar(2); Chernoff at b = 2: exp(-2).
    from ax_chaining.certificate import tail_sum

    gap = torch.tensor([[0.0, 1.0], [0.0, 1.0]], dtype=DTYPE)
    dist = torch.tensor([[0.0, 0.5], [0.0, 0.5]], dtype=DTYPE)
    b = torch.tensor([1.0, 2.0], dtype=DTYPE)
    got = tail_sum(b, gap, dist, GAUSSIAN)
    want = torch.tensor([0.5, 0.5 * math.erfc(2 / 2**0.5)], dtype=DTYPE)
    assert torch.allclose(got, want)
    chernoff = tail_sum(b, gap, dist, CHERNOFF)
    assert torch.allclose(chernoff, torch.tensor([1.0, math.exp(-2.0)], dtype=DTYPE))
