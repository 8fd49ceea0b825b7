"""Calibrate a spring's stiffness from an observed trajectory with torch.optim.LBFGS, the
gradient flowing through gradfem's discrete adjoint of the RK4 steps (the seed users' ten
lines: system, observation, loss, optimizer).

Run: python python/examples/spring_calibration.py    (prints k_true, the start and the fit)
"""

import torch

import gradfem.dynamics as gd
import gradfem.torch as gt

s = gd.System()
s.param("spring.k", 1.0, lower=0.1)
b = s.add_particle(1.0)
s.add_spring(b, [0.0, 0.0, 0.0], k="spring.k", rest_length=0.5)
s.add_damper(b, [0.0, 0.0, 0.0], c=0.2)
x0 = {"position": torch.tensor([[1.2, 0.3, 0.0]]), "velocity": torch.tensor([[0.0, 0.8, 0.1]])}
x0 = {f: v.double() for f, v in x0.items()}

# The observation: the trajectory at k = 4 (computed here; a test rig's positions in practice).
observed = gt.integrate(s, {"spring.k": torch.tensor(4.0, dtype=torch.float64)}, x0, 0.01, 300)["position"]

# The ten lines.
k = torch.tensor(1.0, dtype=torch.float64, requires_grad=True)
opt = torch.optim.LBFGS([k], lr=1.0, max_iter=50, tolerance_grad=1e-12, tolerance_change=1e-14,
                        line_search_fn="strong_wolfe")


def closure():
    opt.zero_grad()
    loss = 0.5 * ((gt.integrate(s, {"spring.k": k}, x0, 0.01, 300)["position"] - observed) ** 2).sum()
    loss.backward()
    return loss


opt.step(closure)
print(f"k_true 4.0, start 1.0, fitted {k.item():.9f}")
assert abs(k.item() - 4.0) < 1e-6, k.item()
