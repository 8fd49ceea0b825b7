"""Monte Carlo robustness of a calibrated design, the acceptance rule of gradfem's users: the
parameters perturbed by 1 % noise, 32 runs, the design accepted when std(loss) < 0.05 · mean(loss).

The design is the heated plate of conductivity_network.py with a conductivity fitted so that
its mean temperature hits a target; the loss is the squared miss of that target plus a
regularizing offset, so that it is positive at the calibrated point.

    python python/examples/monte_carlo_robustness.py
"""

import numpy as np
import scipy.optimize

import gradfem

PLATE = """
title = "plate to calibrate"

[mesh]
box = { lengths = [0.1, 0.05, 0.01], divisions = [10, 5, 2], cell = "tet4" }

[[thermal.material]]
group = "domain"
k = 120.0
source = 5.0e6

[[thermal.bc]]
group = "xmin"
kind = "temperature"
value = 300.0

[[thermal.bc]]
group = "zmax"
kind = "convection"
h = 25.0
t_inf = 293.0

[[objective]]
kind = "average"
group = "domain"

[parameters]
register = ["thermal.k.domain", "bc.zmax.h"]
"""

TARGET = 380.0  # K, the mean temperature the design must reach


def loss(p):
    return (p.objective() - TARGET) ** 2 + 1.0


def main(samples: int = 32, noise: float = 0.01, seed: int = 1) -> dict:
    p = gradfem.Problem.from_string(PLATE, "plate.toml")
    # Calibrate k so that the mean temperature meets the target (h as given).
    fun, jac, x0, _ = p.scipy_objective(["thermal.k.domain"])
    r = scipy.optimize.brentq(lambda k: fun([k]) - TARGET, 10.0, 1000.0, xtol=1e-10)
    design = {"thermal.k.domain": r, "bc.zmax.h": p.parameters["bc.zmax.h"]}
    p.set_parameters(design)
    # First order, from the adjoint gradient: T_mean − target ≈ Σᵢ gᵢ δpᵢ with δpᵢ ~ N(0, (noise pᵢ)²),
    # so loss − 1 is σ² times a χ² variable of one degree of freedom: mean σ², std √2 σ².
    g = p.gradient()
    var = sum((g[n] * v * noise) ** 2 for n, v in design.items())
    rng = np.random.default_rng(seed)
    losses = []
    for _ in range(samples):
        p.set_parameters({n: v * (1.0 + noise * rng.standard_normal()) for n, v in design.items()})
        losses.append(loss(p))
    p.set_parameters(design)
    losses = np.array(losses)
    accepted = bool(losses.std() < 0.05 * losses.mean())
    out = {
        "k_calibrated": r,
        "samples": samples,
        "mean_loss": float(losses.mean()),
        "std_loss": float(losses.std()),
        "accepted": accepted,
        "first_order_mean_loss": 1.0 + var,
        "first_order_std_loss": float(np.sqrt(2.0) * var),
    }
    verdict = "accepted" if accepted else "rejected"
    print(
        f"k = {r:.4f} W/(m K) meets T_mean = {TARGET} K; over {samples} draws with {noise:.0%} noise "
        f"the loss is {out['mean_loss']:.4g} ± {out['std_loss']:.3g}: {verdict} "
        f"(std < 0.05 · mean); first order from the adjoint gradient: "
        f"{out['first_order_mean_loss']:.4g} ± {out['first_order_std_loss']:.3g}"
    )
    return out


if __name__ == "__main__":
    main()
