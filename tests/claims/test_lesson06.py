"""Lesson 06's checks catch the mistakes they guard against: local SGD with H = 1 equals DDP, and local SGD
that averages every 2 steps, or forgets to average, fails the same comparison; the staleness stability
boundary matches delayed gradient descent, and a boundary off by one step of staleness, or one that ignores
staleness, fails the same checks.

The broken subjects are the real functions with one line changed (``changed``): ``local_sgd.train`` and
``staleness.stability_limit``.
"""


import math

import pytest
import torch

from claims.broken import changed
from dpedu import launch
from dpedu.datasets import digits
from dpedu.sgd import local_sgd
from dpedu.sgd.staleness import delayed_gd, stability_limit

# Cell 29's, and the loss measured once at the end instead of after every round (the parameters are the same)
SETTINGS = {"steps": 256, "batch_size": 16, "lr": 0.1, "eval_every": 256}


def local_sgd_runs():
    """In each rank: cell 29's "sync" and "local SGD, H=1" runs, and two broken local SGDs."""
    forgets = changed(local_sgd.train, ("average_(parameters)  # local SGD", "pass  # local SGD"))
    return {"sync": local_sgd.train("sync", **SETTINGS),
            "local SGD, H=1": local_sgd.train("local", period=1, **SETTINGS),
            "averages every 2 steps": local_sgd.train("local", period=2, **SETTINGS),
            "never averages": forgets("local", period=1, **SETTINGS)}


def test_local_sgd_that_averages_late_or_never_fails_the_equality_with_ddp():
    """Backs 06 cell 31: local SGD with H = 1 agrees with DDP ("sync") within 1e-5 after 256 steps, and local
    SGD that averages the parameters every 2 steps, or never (the averaging line gone), fails that bound."""
    digits()  # loaded here once, so that the forked ranks find it loaded
    runs = launch(local_sgd_runs, 2)[0]

    def largest_gap(a, b):  # cell 31's
        return (runs[a]["parameters"] - runs[b]["parameters"]).abs().max().item()

    assert largest_gap("local SGD, H=1", "sync") < float("1e-5")  # cell 31's check
    for broken in ("averages every 2 steps", "never averages"):
        gap = largest_gap(broken, "sync")
        assert not gap < float("1e-5"), (broken, gap)


BROKEN_LIMITS = {
    # Staleness counted one step too many: the polynomial of staleness τ + 1.
    "off by one": changed(stability_limit, ("np.zeros(staleness + 2)", "np.zeros(staleness + 3)")),
    # Staleness ignored: plain gradient descent's limit 2 for every τ.
    "no staleness": changed(stability_limit, ("np.zeros(staleness + 2)", "np.zeros(2)")),
}


def cell_8_holds(limit):
    """Cell 8's checks with ``limit`` as the stability boundary: delayed GD at lr 0.5 on the cell's quadratic
    converges for each staleness exactly when 0.5·λ_max is below the boundary, and staleness 3 is the first
    to diverge."""
    H = torch.diag(torch.linspace(0.05, 1.0, 10, dtype=torch.float64))
    x0 = torch.ones(10, dtype=torch.float64)

    def quadratic_loss(iterates):
        return 0.5 * ((iterates @ H) * iterates).sum(-1)

    lr = 0.5
    for tau in (0, 1, 2, 3, 4, 8):
        loss = quadratic_loss(delayed_gd(lambda x: H @ x, x0, lr, tau, 150))
        converges = lr * 1.0 < limit(tau)
        if (loss[-1] < 1e-3 * loss[0]) != converges:
            return False
    # None where no staleness up to 19 diverges (the cell's next() then raises StopIteration: it fails too)
    first_to_diverge = next((tau for tau in range(20) if lr * 1.0 >= limit(tau)), None)
    return first_to_diverge == 3


def cell_10_holds(limit):
    """Cell 10's check with ``limit``: it agrees with the closed form 2 sin(π/(4τ+2)) within 1e-9, which
    agrees with the published values, for τ = 0 to 5."""
    published = {0: 2.0, 1: 1.0, 2: 0.618, 3: 0.445, 4: 0.347, 5: 0.285}
    for tau, value in published.items():
        closed_form = 2 * math.sin(math.pi / (4 * tau + 2))
        if not (abs(limit(tau) - closed_form) < 1e-9 and abs(closed_form - value) < 5e-4):
            return False
    return True


@pytest.mark.parametrize("check", [cell_8_holds, cell_10_holds], ids=["cell 8", "cell 10"])
def test_a_wrong_stability_boundary_fails_the_checks_against_delayed_gd_and_the_closed_form(check):
    """Backs 06 cells 8 and 10: stability_limit predicts which staleness makes delayed GD diverge at lr 0.5, and
    equals the closed form; a boundary off by one step of staleness, or one that ignores staleness, fails."""
    assert check(stability_limit)
    for name, wrong in BROKEN_LIMITS.items():
        assert not check(wrong), name
