"""Calibrate the thermal conductivity k and the film coefficient h of the electro-thermal
microactuator from measured tip-deflection-vs-voltage curves, with torch.optim.LBFGS and
gradfem's adjoint (every backward one vector-Jacobian product per voltage), and report the fit.

How hot the arms run depends on k (conduction to the anchors) and h (the heat the air carries
to the substrate), and with a constant resistivity the deflection is V² times a function of the
two: one curve measures one number, and k and h cannot be told apart from it (with a
resistivity that rises with T the curve bends, but its sensitivities to ln k and ln h stay
within 1 % of proportional). The rig therefore sweeps the drive twice, in vacuum
(h = 0 on the surfaces that face the air gap: the curve measures k alone) and in air (the curve
then measures h). The "measurements" are the model at k = 34 W/(m K), h = 2·10⁴ W/(m² K) (the
built-in actuator, examples/microactuator_builtin.toml); the fit starts 30 % off in both and
minimizes the relative misfit of the deflections.

Run: python python/examples/actuator_calibration.py   (prints the iterations, the fitted k and
h, and both curves, data against model)
"""

from pathlib import Path

import numpy as np
import torch

import gradfem
import gradfem.torch as gt

ROOT = Path(__file__).resolve().parents[2]
VACUUM = [1.0, 2.0, 3.0]
AIR = [3.0, 4.5, 6.0]
K, H, V = "thermal.k.polysilicon_layer", "bc.other_exterior_surfaces.h", "load.anchor_hot_outer_base.voltage"
TRUE = {K: 34.0, H: 2.0e4}


def problem() -> gradfem.Problem:
    return gradfem.Problem.from_toml(ROOT / "examples" / "microactuator_builtin.toml")


def main(max_iterations: int = 20) -> dict:
    p = problem()
    # The tip deflection (−y, µm: the problem's objective) as a torch function of k, h and V.
    f = gt.function(p, inputs=[K, H, V], outputs=["objective"])
    t = lambda x: torch.tensor(x, dtype=torch.float64)  # noqa: E731

    def curves(k, h):
        vacuum = [f(k, t(0.0), t(v))[0] for v in VACUUM]
        air = [f(k, h, t(v))[0] for v in AIR]
        return torch.stack(vacuum + air)

    measured = curves(t(TRUE[K]), t(TRUE[H])).detach()
    # Log-parameters: k and h differ by three orders of magnitude.
    x = torch.tensor([np.log(0.7 * TRUE[K]), np.log(1.3 * TRUE[H])], dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([x], lr=1.0, max_iter=max_iterations, tolerance_grad=1e-12,
                            tolerance_change=1e-16, line_search_fn="strong_wolfe")
    losses = []

    def closure():
        opt.zero_grad()
        loss = 0.5 * (((curves(x[0].exp(), x[1].exp()) - measured) / measured) ** 2).sum()
        loss.backward()
        losses.append(loss.item())
        return loss

    opt.step(closure)
    k, h = x[0].exp().item(), x[1].exp().item()
    fitted = curves(t(k), t(h)).detach().numpy()
    print(f"{len(losses)} evaluations, loss {losses[0]:.3e} -> {losses[-1]:.3e}")
    print(f"k = {k:.6f} W/(m K) (true {TRUE[K]}), h = {h:.3f} W/(m² K) (true {TRUE[H]})")
    print("  rig      V    deflection measured [µm]   model [µm]")
    for i, (d, m) in enumerate(zip(measured.numpy(), fitted)):
        rig, v = ("vacuum", VACUUM[i]) if i < len(VACUUM) else ("air", AIR[i - len(VACUUM)])
        print(f"  {rig:6s}  {v:4.1f}   {d:.9f}                {m:.9f}")
    return {"k": k, "h": h, "losses": losses, "measured": measured.numpy(), "fitted": fitted}


if __name__ == "__main__":
    r = main()
    assert abs(r["k"] / TRUE[K] - 1) < 1e-6 and abs(r["h"] / TRUE[H] - 1) < 1e-6, r
