"""A small PyTorch network maps cell positions to a conductivity field and is trained through
gradfem's thermal solve: the loss on the temperature field flows back through the adjoint
(one vector-Jacobian product per step) into the network's weights.

    python python/examples/conductivity_network.py
"""

import torch

import gradfem
import gradfem.torch as gt

PLATE = """
title = "plate with a trainable conductivity"

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

[parameters]
register = ["thermal.k_elem.domain"]
"""


def main(steps: int = 40) -> dict:
    p = gradfem.Problem.from_string(PLATE, "plate.toml")
    sol = p.solve()
    points = torch.as_tensor(p.points)
    # The target: the temperature field of a plate twice as conductive near x = 0.
    n_cells = p.parameters["thermal.k_elem.domain"].size
    x = torch.linspace(0.0, 1.0, n_cells, dtype=torch.float64).unsqueeze(1)
    truth = 120.0 * (1.0 + torch.exp(-4.0 * x.squeeze(1)))
    p.set_parameters({"thermal.k_elem.domain": truth.numpy()})
    target = torch.as_tensor(p.solve().fields["temperature"])
    f = gt.function(p, inputs=["thermal.k_elem.domain"], outputs=["temperature"])

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(1, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)).double()
    opt = torch.optim.Adam(net.parameters(), lr=0.02)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        # softplus(0) = ln 2: the untrained network starts near k = 120 W/(m K).
        k = 120.0 * torch.nn.functional.softplus(net(x)).squeeze(1) / torch.log(torch.tensor(2.0))
        (t,) = f(k)
        loss = torch.mean((t - target) ** 2)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    print(f"{n_cells} cells, {points.shape[0]} nodes; initial max T {sol.quantities['max_temperature']:.2f} K")
    print(f"loss (mean squared temperature error, K²): {losses[0]:.4e} -> {losses[-1]:.4e} in {steps} steps")
    return {"losses": losses}


if __name__ == "__main__":
    main()
