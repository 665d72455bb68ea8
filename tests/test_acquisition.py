"""ChainingUCB and GPUCB as BoTorch acquisition functions."""

from __future__ import annotations

import inspect
import math
import pydoc

import pytest
import torch
from botorch.acquisition import UpperConfidenceBound
from botorch.acquisition.input_constructors import get_acqf_input_constructor
from botorch.acquisition.objective import ScalarizedPosteriorTransform
from botorch.exceptions import UnsupportedError
from botorch.fit import fit_gpytorch_mll
from botorch.models import ModelListGP, SingleTaskGP
from botorch.models.transforms import Normalize, Standardize
from botorch.optim import optimize_acqf_discrete
from gpytorch.kernels import RBFKernel, ScaleKernel
from gpytorch.mlls import ExactMarginalLogLikelihood
from hypothesis import given
from hypothesis import strategies as st

from ax_chaining import (
    GPUCB,
    ChainingOptions,
    ChainingUCB,
    MemoryBudgetError,
    gp_ucb_beta,
)
from ax_chaining.acquisition import UCB
from ax_chaining.posterior import candidate_posterior

DTYPE = torch.float64


def grid(n: int = 12, dtype=DTYPE) -> torch.Tensor:
    axis = torch.linspace(0, 1, n, dtype=dtype)
    return torch.cartesian_prod(axis, axis)


def objective(X: torch.Tensor) -> torch.Tensor:
    return (torch.sin(5 * X[:, :1]) * torch.cos(4 * X[:, 1:]) + X[:, :1]).to(X)


def fixed_model(
    X: torch.Tensor,
    Y: torch.Tensor,
    outputscale: float = 1.0,
    noise: float = 1e-2,
    lengthscale: float = 0.2,
    **kwargs,
) -> SingleTaskGP:
    """A SingleTaskGP with fixed, known hyperparameters (no fitting)."""
    kernel = ScaleKernel(RBFKernel()).to(X)
    kernel.base_kernel.lengthscale = lengthscale
    kernel.outputscale = outputscale
    model = SingleTaskGP(X, Y, covar_module=kernel, outcome_transform=None, **kwargs)
    model.likelihood.noise = noise
    return model.eval()


@pytest.fixture
def data():
    C = grid()
    idx = torch.randperm(C.shape[0])[:8]
    X = C[idx]
    return C, X, objective(X)


def test_value_is_mean_plus_bonus_everywhere(data):
    C, X, Y = data
    model = fixed_model(X, Y)
    acqf = ChainingUCB(model, C)
    post = model.posterior(C)
    mean, sigma = post.mean.squeeze(-1), post.variance.squeeze(-1).sqrt()
    expected = mean + acqf.chaining.bonus(sigma)
    torch.testing.assert_close(acqf(C.unsqueeze(1)), expected)
    # Not only at candidates: any X, any batch shape.
    Xnew = torch.rand(3, 4, 1, 2, dtype=DTYPE)
    post = model.posterior(Xnew)
    torch.testing.assert_close(
        acqf(Xnew),
        post.mean[..., 0, 0] + acqf.chaining.bonus(post.variance[..., 0, 0].sqrt()),
    )
    # maximize=False flips the mean, keeps the bonus.
    acqf_min = ChainingUCB(model, C, maximize=False)
    torch.testing.assert_close(acqf_min(C.unsqueeze(1)), -mean + expected - mean)
    # The engine saw the posterior std and the covers.
    torch.testing.assert_close(acqf.candidate_sigma, sigma)
    assert acqf.chaining.n == C.shape[0]
    assert acqf.chaining.info["path"] == "dense"
    assert acqf.scale == pytest.approx(1.0)  # outputscale 1, no transform
    assert acqf.t == X.shape[0] + 1


def test_continuous_bonus_is_the_envelope_and_keeps_the_covers(data):
    """bonus="continuous": the same covers and H_i, the value mu + c(sigma) with
    c the engine's continuous envelope, never below the paper's value."""
    C, X, Y = data
    model = fixed_model(X, Y)
    paper = ChainingUCB(model, C)
    cont = ChainingUCB(model, C, bonus="continuous")
    assert cont.options.bonus == "continuous"
    torch.testing.assert_close(cont.chaining.H, paper.chaining.H)
    post = model.posterior(C)
    mean, sigma = post.mean.squeeze(-1), post.variance.squeeze(-1).sqrt()
    expected = mean + cont.chaining.bonus(sigma, "continuous")
    torch.testing.assert_close(cont(C.unsqueeze(1)), expected)
    assert bool((cont(C.unsqueeze(1)) >= paper(C.unsqueeze(1)) - 1e-12).all())
    # The certificate is the posterior's and the covers', not the bonus's.
    best = int(torch.argmax(mean))
    assert cont.certificate(among=[best]).bound == paper.certificate(among=[best]).bound
    with pytest.raises(ValueError, match="`bonus` must be"):
        ChainingUCB(model, C, bonus="smooth")


def test_selected_point_is_argmax_over_candidates(data):
    C, X, Y = data
    acqf = ChainingUCB(fixed_model(X, Y), C)
    x, value = optimize_acqf_discrete(acqf, q=1, choices=C)
    values = acqf(C.unsqueeze(1))
    assert torch.equal(x[0], C[int(values.argmax())])
    assert value.item() == pytest.approx(values.max().item())


def test_dense_and_low_rank_paths_agree(data):
    C, X, Y = data
    model = fixed_model(X, Y)
    dense = ChainingUCB(model, C, path="dense")
    low = ChainingUCB(model, C, path="low_rank", cover="greedy")
    assert low.chaining.info["path"] == "low_rank"
    torch.testing.assert_close(dense.candidate_sigma, low.candidate_sigma)
    assert dense.chaining.cover_sizes.tolist() == low.chaining.cover_sizes.tolist()
    torch.testing.assert_close(dense(C.unsqueeze(1)), low(C.unsqueeze(1)))


def test_generic_and_low_rank_posterior_agree_with_botorch(data):
    C, X, Y = data
    model = SingleTaskGP(
        X, 3.0 * Y + 1.0, input_transform=Normalize(2), outcome_transform=Standardize(1)
    ).eval()
    cov = model.posterior(C).distribution.covariance_matrix
    mean = model.posterior(C).mean.reshape(-1)
    for path in ("dense", "low_rank"):
        post = candidate_posterior(model, C, path=path)
        torch.testing.assert_close(post.mean, mean)
        idx = torch.tensor([0, 5, 77])
        d2 = post.distance.rows(idx)
        var = cov.diagonal()
        expected = (var[idx, None] + var[None, :] - 2 * cov[idx]).clamp_min(0)
        expected[torch.arange(3), idx] = 0
        torch.testing.assert_close(d2, expected, atol=1e-10, rtol=1e-7)


def test_fixed_noise_model_and_pending_points(data):
    C, X, Y = data
    model = SingleTaskGP(X, Y, train_Yvar=torch.full_like(Y, 1e-3)).eval()
    acqf = ChainingUCB(model, C)
    assert acqf.t == X.shape[0] + 1
    P = C[:2]
    acqf.set_X_pending(P)
    assert acqf.t == X.shape[0] + 3
    # Conditioning on a pending point shrinks sigma there; the mean is unchanged.
    mean_p, sigma_p = acqf.mean_and_sigma(P.unsqueeze(1))
    plain = model.posterior(P)
    torch.testing.assert_close(mean_p, plain.mean.reshape(-1))
    assert torch.all(sigma_p < plain.variance.reshape(-1).sqrt())


def test_pending_points_match_botorch_conditioning(data):
    C, X, Y = data
    model = fixed_model(X, Y, noise=0.05)
    P = C[[3, 50, 90]]
    acqf = ChainingUCB(model, C, X_pending=P)
    hallucinated = model.condition_on_observations(P, model.posterior(P).mean)
    sigma = hallucinated.posterior(C).variance.reshape(-1).sqrt()
    torch.testing.assert_close(acqf.candidate_sigma, sigma, atol=1e-7, rtol=1e-6)
    _, sigma_fwd = acqf.mean_and_sigma(C.unsqueeze(1))
    torch.testing.assert_close(sigma_fwd, sigma, atol=1e-7, rtol=1e-6)
    low = ChainingUCB(model, C, X_pending=P, path="low_rank", cover="greedy")
    torch.testing.assert_close(low.candidate_sigma, sigma, atol=1e-7, rtol=1e-6)
    # Clearing the pending points restores the original posterior.
    acqf.set_X_pending(None)
    torch.testing.assert_close(
        acqf.candidate_sigma, model.posterior(C).variance.reshape(-1).sqrt()
    )


def test_noise_free_model_with_candidates_at_training_points(data):
    C, X, Y = data
    # sigma_t is nearly 0 at the training points (GPyTorch keeps a tiny noise
    # floor): the values stay finite and the least uncertain point gets no bonus.
    model = SingleTaskGP(X, Y, train_Yvar=torch.full_like(Y, 1e-12)).eval()
    acqf = ChainingUCB(model, C)
    res = acqf.chaining
    assert res.sigma_min < 1e-2 * res.scale
    assert torch.isfinite(acqf(C.unsqueeze(1))).all()
    least = C[int(acqf.candidate_sigma.argmin())].reshape(1, 1, 2)
    torch.testing.assert_close(acqf(least), model.posterior(least).mean.reshape(-1))
    # A floor above sigma_min takes over the number of levels.
    floored = ChainingUCB(model, C, sigma_floor=0.01).chaining
    assert floored.sigma_min_used == pytest.approx(0.01 * floored.scale)
    assert floored.num_levels == 8  # eps_8 = 2^-7 s <= 0.01 s < eps_7


def test_batch_selection_with_optimize_acqf_discrete(data):
    C, X, Y = data
    acqf = ChainingUCB(fixed_model(X, Y), C)
    x, _ = optimize_acqf_discrete(acqf, q=3, choices=C)
    assert x.shape == (3, 2)
    assert len({tuple(r.tolist()) for r in x}) == 3  # GP-BUCB spreads the batch


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dtypes(dtype):
    C = grid(10, dtype)
    X = C[torch.randperm(100)[:6]]
    model = SingleTaskGP(X, objective(X)).eval()
    acqf = ChainingUCB(model, C)
    values = acqf(C.unsqueeze(1))
    assert values.dtype == dtype and torch.isfinite(values).all()
    x, _ = optimize_acqf_discrete(acqf, q=1, choices=C)
    assert x.dtype == dtype


@pytest.mark.parametrize("make", [lambda m: GPUCB(m, 100), lambda m: UCB(m, 0.2)])
@pytest.mark.parametrize(
    ("model_dtype", "choices_dtype"),
    [(torch.float32, torch.float64), (torch.float64, torch.float32)],
)
def test_gp_ucb_and_ucb_follow_the_model_dtype(make, model_dtype, choices_dtype):
    C = grid(10, torch.float64)
    X = C[torch.randperm(100, generator=torch.Generator().manual_seed(0))[:6]]
    model = fixed_model(X.to(model_dtype), objective(X).to(model_dtype))
    acqf = make(model)
    choices = C.to(choices_dtype)
    # The choices' dtype first: GPyTorch would cache in it, and fail on the
    # model's own dtype next (or fail at once on float32 after float64).
    x, value = optimize_acqf_discrete(acqf, q=1, choices=choices)
    assert x.dtype == value.dtype == choices_dtype
    own = acqf(choices.to(model_dtype).unsqueeze(-2))  # the same points
    assert own.dtype == model_dtype
    values = acqf(choices.unsqueeze(-2))
    assert values.dtype == choices_dtype
    assert torch.equal(values, own.to(choices_dtype))
    assert torch.equal(x, choices[own.argmax()].unsqueeze(0))


def test_multi_output_needs_posterior_transform(data):
    C, X, Y = data
    Y2 = torch.cat([Y, -Y], dim=-1)
    model = SingleTaskGP(X, Y2).eval()
    with pytest.raises(UnsupportedError, match="posterior_transform"):
        ChainingUCB(model, C)
    weights = torch.tensor([1.0, 0.5], dtype=DTYPE)
    acqf = ChainingUCB(
        model, C, posterior_transform=ScalarizedPosteriorTransform(weights)
    )
    post = model.posterior(C, posterior_transform=ScalarizedPosteriorTransform(weights))
    torch.testing.assert_close(acqf.candidate_sigma, post.variance.reshape(-1).sqrt())
    assert acqf.chaining.info["path"] == "dense"
    # A model list works the same way.
    mlist = ModelListGP(SingleTaskGP(X, Y), SingleTaskGP(X, -Y)).eval()
    acqf = ChainingUCB(
        mlist, C, posterior_transform=ScalarizedPosteriorTransform(weights)
    )
    assert torch.isfinite(acqf(C[:5].unsqueeze(1))).all()


def test_default_t_and_gp_ucb_schedule(data):
    C, X, Y = data
    model = fixed_model(X, Y)
    gp = GPUCB(model, num_candidates=C.shape[0])
    t = X.shape[0] + 1
    assert gp.t == t == ChainingUCB(model, C).t
    beta = 2 * math.log(C.shape[0] * t**2 * math.pi**2 / (6 * 0.05))
    assert gp.beta.item() == pytest.approx(beta, rel=1e-6)
    assert gp_ucb_beta(144, 9, 0.05) == pytest.approx(beta, rel=1e-12)
    ucb = UpperConfidenceBound(model, beta=beta)
    torch.testing.assert_close(gp(C.unsqueeze(1)), ucb(C.unsqueeze(1)))
    assert GPUCB(model, 144, t=3).t == 3
    assert GPUCB(model, 144, X_pending=C[:2]).t == t + 2


def test_regret_bound_is_the_certificate(data):
    C, X, Y = data
    acqf = ChainingUCB(fixed_model(X, Y), C)
    x, _ = optimize_acqf_discrete(acqf, q=1, choices=C)
    bound = acqf.regret_bound(x.unsqueeze(0))
    i = int(torch.cdist(x, C).argmin())
    cert = acqf.certificate(among=[i])
    assert bound.shape == (1,) and bound.item() == pytest.approx(cert.bound)
    assert bound.item() > 0
    # Batch shapes follow X.
    assert acqf.regret_bound(C[:6].reshape(2, 3, 1, 2)).shape == (2, 3)


def test_regret_bound_of_the_quick_start_batch():
    # The README's quick start at q=3: optimize_acqf_discrete returns 3 x d
    # rows, and regret_bound gives one bound per row, each that row's own.
    torch.manual_seed(0)
    candidates = torch.rand(2000, 2, dtype=torch.float64)
    train_X = candidates[:20]
    train_Y = torch.sin(6 * train_X[:, :1]) + train_X[:, 1:]
    model = SingleTaskGP(train_X, train_Y)
    fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
    acqf = ChainingUCB(model, candidates, delta=0.05)
    x_next, value = optimize_acqf_discrete(acqf, q=3, choices=candidates)
    bounds = acqf.regret_bound(x_next)
    assert x_next.shape == (3, 2) and bounds.shape == (3,)
    assert bool((bounds > 0).all()) and bool(bounds.isfinite().all())
    for k in range(3):
        one = acqf.regret_bound(x_next[k : k + 1])
        assert one.shape == (1,) and one.item() == pytest.approx(bounds[k].item())
        i = int(torch.cdist(x_next[k : k + 1], candidates).argmin())
        assert bounds[k].item() == pytest.approx(acqf.certificate(among=[i]).bound)
    # BoTorch's batch shapes: b x 1 x d gives b bounds, b x q x d gives b x q.
    torch.testing.assert_close(acqf.regret_bound(x_next.unsqueeze(-2)), bounds)
    torch.testing.assert_close(acqf.regret_bound(x_next.unsqueeze(0))[0], bounds)
    with pytest.raises(ValueError, match="N x d"):
        acqf.regret_bound(x_next[0])


def test_signature_and_help_list_the_options(data):
    # One declaration (ChainingOptions), shown by inspect, help and BoTorch's
    # input-constructor registry alike, with the acquisition's own arguments.
    params = inspect.signature(ChainingUCB).parameters
    options = list(inspect.signature(ChainingOptions).parameters)
    own = ["model", "candidates", "t", "posterior_transform", "maximize"]
    assert list(params)[:3] == ["model", "candidates", "delta"]
    assert set(params) == {*own, "X_pending", *options}
    assert params["delta"].default == 0.05
    assert params["pending_covers"].default == "rebuild"
    page = pydoc.render_doc(ChainingUCB, renderer=pydoc.plaintext)
    assert "delta: Confidence parameter" in page
    assert "memory_budget: Bytes the largest allocations may take" in page
    assert "Constructor for the AcquisitionFunction base class" not in page
    C, X, Y = data
    model = fixed_model(X, Y)
    constructor = get_acqf_input_constructor(ChainingUCB)
    kwargs = constructor(model=model, candidates=C, delta=0.1, path="dense")
    assert ChainingUCB(**kwargs).delta == 0.1
    with pytest.raises(TypeError, match="Unexpected keyword argument `deltaa`"):
        constructor(model=model, candidates=C, deltaa=0.1)
    with pytest.raises(ValueError, match="delta"):
        ChainingUCB(**{**kwargs, "delta": 1.5})
    # Bound as declared, positionally too (delta third, as in BoTorch's UCB).
    assert ChainingUCB(model, C, 0.2, path="dense").delta == 0.2
    with pytest.raises(TypeError, match="unexpected keyword argument 'deltaa'"):
        ChainingUCB(model, C, deltaa=0.1)


def test_registered_input_constructors(data):
    C, X, Y = data
    model = fixed_model(X, Y)
    build = get_acqf_input_constructor(ChainingUCB)
    kwargs = build(model=model, training_data=None, candidates=C, delta=0.1)
    acqf = ChainingUCB(**kwargs)
    assert acqf.delta == 0.1
    kwargs = get_acqf_input_constructor(GPUCB)(model=model, num_candidates=144)
    assert GPUCB(**kwargs).num_candidates == 144


@pytest.mark.parametrize(
    ("candidates", "kwargs", "error", "match"),
    [
        (torch.empty(0, 2, dtype=DTYPE), {}, ValueError, "empty"),
        (torch.tensor([[0.1, float("nan")]], dtype=DTYPE), {}, ValueError, "NaN"),
        (torch.tensor([[0.1, float("inf")]], dtype=DTYPE), {}, ValueError, "inf"),
        (torch.rand(5, 3, dtype=DTYPE), {}, ValueError, "d=3"),
        (torch.rand(5, dtype=DTYPE), {}, ValueError, "N x d"),
        ([[0.1, 0.2]], {}, TypeError, "torch.Tensor"),
        (torch.ones(5, 2, dtype=torch.long), {}, TypeError, "floating"),
        (None, {"delta": 0.0}, ValueError, "delta"),
        (None, {"delta": 1.5}, ValueError, "delta"),
        (None, {"t": 0}, ValueError, "`t` must be a positive int"),
        (None, {"scale": -1.0}, ValueError, "scale"),
        (
            None,
            {"memory_budget": 10_000, "path": "dense"},
            MemoryBudgetError,
            "memory_budget",
        ),
        (None, {"path": "sparse"}, ValueError, "path"),
        (None, {"X_pending": torch.rand(2, 3, dtype=DTYPE)}, ValueError, "X_pending"),
    ],
)
def test_bad_input(data, candidates, kwargs, error, match):
    C, X, Y = data
    model = fixed_model(X, Y)
    with pytest.raises(error, match=match):
        ChainingUCB(model, C if candidates is None else candidates, **kwargs)


def test_memory_budget_error_is_raised_before_allocating():
    # 10^6 candidates densely would need ~8 TB; the error must come at once.
    X = torch.rand(4, 2, dtype=DTYPE)
    model = fixed_model(X, objective(X))
    C = torch.rand(10**6, 2, dtype=DTYPE)
    with pytest.raises(MemoryBudgetError, match="memory_budget"):
        ChainingUCB(model, C, path="dense")
    with pytest.raises(MemoryBudgetError, match="low-rank"):
        ChainingUCB(model, C, memory_budget=2**20)


def test_model_without_training_data():
    empty = torch.empty(0, 2, dtype=DTYPE)
    model = SingleTaskGP(empty, torch.empty(0, 1, dtype=DTYPE), outcome_transform=None)
    with pytest.raises(ValueError, match="no training data"):
        ChainingUCB(model, grid(4))
    with pytest.raises(ValueError, match="no training data"):
        GPUCB(model, 16)


def _select(acqf_cls, model, C, **kwargs):
    acqf = acqf_cls(model, C, **kwargs)
    values = acqf(C.unsqueeze(1))
    return acqf, values


@given(seed=st.integers(0, 10_000))
def test_permutation_invariance(seed):
    g = torch.Generator().manual_seed(seed)
    C = torch.rand(60, 2, generator=g, dtype=DTYPE)
    X = C[:6]
    model = fixed_model(X, objective(X))
    acqf, values = _select(ChainingUCB, model, C)
    perm = torch.randperm(60, generator=g)
    acqf_p, values_p = _select(ChainingUCB, model, C[perm])
    chosen, chosen_p = C[int(values.argmax())], C[perm][int(values_p.argmax())]
    if torch.equal(chosen, chosen_p):
        return
    # Up to ties: greedy tie-breaking by index may change a cover size, which
    # moves H_i. The point chosen after permuting is then still optimal to
    # within the change in the bonus.
    tol = float((acqf.chaining.H - acqf_p.chaining.H).abs().sum()) + 1e-9
    assert acqf.chaining.num_levels == acqf_p.chaining.num_levels
    assert float(values.max() - acqf(chosen_p.reshape(1, 1, 2))) <= tol


@given(c=st.sampled_from([0.125, 0.5, 3.0, 16.0, 1000.0]), seed=st.integers(0, 1000))
def test_scale_equivariance_with_fixed_hyperparameters(c, seed):
    g = torch.Generator().manual_seed(seed)
    C = torch.rand(80, 2, generator=g, dtype=DTYPE)
    X, Y = C[:7], objective(C[:7])
    base = ChainingUCB(fixed_model(X, Y, noise=1e-2), C)
    scaled = ChainingUCB(fixed_model(X, c * Y, outputscale=c**2, noise=1e-2 * c**2), C)
    assert scaled.scale == pytest.approx(c * base.scale)
    assert base.chaining.cover_sizes.tolist() == scaled.chaining.cover_sizes.tolist()
    torch.testing.assert_close(scaled.chaining.H, c * base.chaining.H)
    values, values_c = base(C.unsqueeze(1)), scaled(C.unsqueeze(1))
    assert int(values.argmax()) == int(values_c.argmax())


@given(c=st.sampled_from([0.01, 0.5, 7.0, 250.0]))
def test_scale_equivariance_with_standardize(c):
    C = grid(9)
    X = C[torch.tensor([0, 10, 33, 47, 60, 80])]
    Y = objective(X)
    base_model = SingleTaskGP(X, Y, outcome_transform=Standardize(1))
    scaled_model = SingleTaskGP(X, c * Y, outcome_transform=Standardize(1))
    # Same hyperparameters (as the marginal likelihood would find after scaling).
    state = {k: v for k, v in base_model.state_dict().items() if "outcome" not in k}
    scaled_model.load_state_dict(state, strict=False)
    base = ChainingUCB(base_model.eval(), C)
    scaled = ChainingUCB(scaled_model.eval(), C)
    torch.testing.assert_close(scaled.chaining.H, c * base.chaining.H)
    assert int(base(C.unsqueeze(1)).argmax()) == int(scaled(C.unsqueeze(1)).argmax())


def _loop(policy: str, seed: int, iters: int = 40) -> float:
    """Simple regret after a BoTorch loop on a 400-point GP sample."""
    g = torch.Generator().manual_seed(seed)
    C = grid(20)  # 400 candidates in [0, 1]^2
    K = ScaleKernel(RBFKernel()).to(C)
    K.base_kernel.lengthscale = 0.25
    cov = K(C).to_dense() + 1e-8 * torch.eye(400, dtype=DTYPE)
    f = torch.linalg.cholesky(cov) @ torch.randn(400, generator=g, dtype=DTYPE)
    idx = torch.randperm(400, generator=g)[:5].tolist()
    noise = 0.01
    for _ in range(iters):
        X = C[idx]
        Y = (f[idx] + noise * torch.randn(len(idx), generator=g, dtype=DTYPE))[:, None]
        if policy == "random":
            idx.append(int(torch.randint(400, (1,), generator=g)))
            continue
        model = fixed_model(X, Y, noise=noise**2, lengthscale=0.25)
        acqf = ChainingUCB(model, C)
        x, _ = optimize_acqf_discrete(acqf, q=1, choices=C)
        idx.append(int((C == x).all(dim=-1).nonzero()[0]))
    return float(f.max() - f[idx].max())


def test_loop_finds_the_global_maximum_and_beats_random():
    seeds = range(4)
    chaining = [_loop("chaining", s) for s in seeds]
    random = [_loop("random", s) for s in seeds]
    # Budget: 5 random initial points + 40 queries out of 400 candidates, the
    # true prior (a GP sample, lengthscale 0.25 on the unit square).
    assert all(r == 0.0 for r in chaining), chaining
    assert sum(chaining) / 4 < sum(random) / 4, (chaining, random)


def test_unit_weight_posterior_transform_keeps_the_low_rank_route(data):
    """What Ax passes for one objective, ``w y + b`` with ``w = -1``, only maps
    the mean: the route, the covers and the bonus are those without it."""
    C, X, Y = data
    model = fixed_model(X, Y)
    flip = ScalarizedPosteriorTransform(
        weights=torch.tensor([-1.0], dtype=DTYPE), offset=0.5
    )
    with_flip = ChainingUCB(model, C, posterior_transform=flip, path="low_rank")
    plain = ChainingUCB(model, C, maximize=False, path="low_rank")
    assert with_flip.chaining.info["path"] == "low_rank"
    torch.testing.assert_close(
        with_flip.candidate_mean,
        model.posterior(C, posterior_transform=flip).mean.reshape(-1),
    )
    torch.testing.assert_close(with_flip.chaining.H, plain.chaining.H)
    torch.testing.assert_close(with_flip(C.unsqueeze(1)), plain(C.unsqueeze(1)) + 0.5)
    # Any other weight changes the variances: the generic route, not low-rank.
    half = ScalarizedPosteriorTransform(weights=torch.tensor([0.5], dtype=DTYPE))
    with pytest.raises(UnsupportedError, match="low_rank"):
        ChainingUCB(model, C, posterior_transform=half, path="low_rank")
