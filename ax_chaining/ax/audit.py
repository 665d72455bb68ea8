r"""Audit queries: a declared share of a candidate-set strategy's queries spent
uniformly at random over the unexplored candidates.

With ``audit_every=k`` (a field of
:class:`~ax_chaining.ax.candidates.CandidateSetSpec`, so an option of every
candidate-set strategy), the model-based steps ``k, 2k, 3k, ...`` of the loop
(counted over its recorded steps) each propose one candidate drawn uniformly
from the *unexplored* ones: selectable (not failed, matching any fixed
features) and neither evaluated nor pending. The draw follows the spec's seed
and the step (:func:`audit_candidate`), so a loop replays the same audits.

Why: conditionally on the past, an audited candidate is a uniform draw from
the rest of the library, so the residual of its forecast is a draw of the
model's residual over the library, where the acquisition's own queries are a
biased sample of it (they go where the model is optimistic). The audits'
residuals calibrate the certificate with a conformal statement
(:mod:`ax_chaining.certificate.residuals`, ``source="audit"``;
``certify(client, calibration="audit")``). The cost: one query in ``k`` is
not chosen by the acquisition (the validity benchmark measures the regret it
costs).
"""

from __future__ import annotations

import numpy as np

from ax_chaining.checks import check_int

__all__ = ["AUDIT_STREAM", "audit_candidate", "is_audit_step"]

#: The random stream of the audits, beside the spec's other uses of its seed
#: (the design, and the uniform initialization's stream 1).
AUDIT_STREAM = 2


def is_audit_step(every: int | None, step: int) -> bool:
    """Whether the ``step``-th model-based step (from 1) is an audit.

    Example:
        >>> [s for s in range(1, 31) if is_audit_step(10, s)]
        [10, 20, 30]
    """
    step = check_int("step", step, 1)
    return every is not None and step % check_int("audit_every", every, 1) == 0


def audit_candidate(unexplored: np.ndarray, seed: int, step: int) -> int | None:
    """The audited candidate of ``step``: uniform over the True entries of
    ``unexplored`` (a boolean mask over the candidates), from the stream
    ``(seed, AUDIT_STREAM, step)``; None if there is none.

    Example:
        >>> mask = np.array([True, False, True, True])
        >>> audit_candidate(mask, seed=0, step=10) in (0, 2, 3)
        True
    """
    unexplored = np.asarray(unexplored, dtype=bool)
    allowed = np.flatnonzero(unexplored)
    if allowed.size == 0:
        return None
    rng = np.random.default_rng([check_int("seed", seed, 0), AUDIT_STREAM, step])
    return int(allowed[rng.integers(allowed.size)])
