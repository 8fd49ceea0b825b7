"""gradfem as a PyTorch function: gradcheck, and a network that produces a per-element field."""

import torch  # required: scripts/test.sh installs it

import gradfem
import gradfem.torch as gt


def test_gradcheck_on_scalars_and_a_field(block):
    f = gt.function(
        block,
        inputs=["thermal.k.domain", "bc.zmax.h"],
        outputs=["mean_temperature", "temperature"],
    )
    k = torch.tensor(40.0, dtype=torch.float64, requires_grad=True)
    h = torch.tensor(150.0, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(f, (k, h), eps=1e-4, atol=1e-7, rtol=1e-6)


def test_a_network_that_makes_the_conductivity_field(field_block):
    """A small network maps cell centroids to a conductivity field; fitting a target mean
    temperature through gradfem's adjoint lowers the loss."""
    block = field_block
    n_cells = block.parameters["thermal.k_elem.domain"].size
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(1, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).double()
    x = torch.linspace(0.0, 1.0, n_cells, dtype=torch.float64).unsqueeze(1)
    f = gt.function(block, inputs=["thermal.k_elem.domain"], outputs=["mean_temperature"])
    opt = torch.optim.Adam(net.parameters(), lr=0.05)
    target = 330.0
    losses = []
    for _ in range(15):
        opt.zero_grad()
        k = 40.0 * torch.nn.functional.softplus(net(x)).squeeze(1) + 1.0
        (t_mean,) = f(k)
        loss = (t_mean - target) ** 2
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses


HEATER = """
[mesh]
box = { lengths = [0.01, 0.002, 0.0005], divisions = [10, 2, 1], cell = "tet4" }

[[thermal.material]]
group = "domain"
k = 30.0

[[thermal.bc]]
group = "xmin"
kind = "temperature"
value = 293.15

[[thermal.bc]]
group = "zmax"
kind = "convection"
h = 500.0
t_inf = 293.15

[[electrical.conductor]]
group = "domain"
sigma = 2.0e4
alpha_r = 1.0e-3

[[electrical.terminal]]
group = "xmin"
kind = "voltage"
value = 0.5

[[electrical.terminal]]
group = "xmax"
kind = "ground"

[[objective]]
kind = "max"
group = "domain"
"""


def test_gradcheck_through_the_two_way_electro_thermal_coupling():
    """Voltage, σ and k into the current and the temperature field, with ρ(T) coupling φ and
    T both ways."""
    p = gradfem.Problem.from_string(HEATER, "heater.toml")
    f = gt.function(
        p,
        inputs=["load.xmin.voltage", "electrical.sigma.domain", "thermal.k.domain"],
        outputs=["current", "temperature"],
    )
    # gradcheck steps every input by the same eps: inputs in units of their nominal values.
    scale = torch.tensor([0.5, 2.0e4, 30.0], dtype=torch.float64)
    g = lambda a, b, c: f(a * scale[0], b * scale[1], c * scale[2])  # noqa: E731
    xs = tuple(torch.tensor(1.0, dtype=torch.float64, requires_grad=True) for _ in range(3))
    assert torch.autograd.gradcheck(g, xs, eps=1e-6, atol=1e-7, rtol=1e-5)


def test_node_coordinates_as_an_input():
    """Shape sensitivity through torch: the mean temperature by every node coordinate."""
    text = """
[mesh]
box = { lengths = [0.02, 0.01, 0.01], divisions = [2, 1, 1], cell = "tet4" }

[[thermal.material]]
group = "domain"
k = 40.0
source = 2.0e6

[[thermal.bc]]
group = "xmin"
kind = "temperature"
value = 300.0

[[objective]]
kind = "average"
group = "domain"
"""
    p = gradfem.Problem.from_string(text, "shape.toml")
    f = gt.function(p, inputs=["mesh.coordinates"], outputs=["mean_temperature"])
    x0 = torch.as_tensor(p.points.ravel().copy(), dtype=torch.float64)
    # In units of 1 mm around the mesh, so that gradcheck's step suits every coordinate.
    g = lambda d: f(x0 + 1e-3 * d)  # noqa: E731
    d = torch.zeros_like(x0, requires_grad=True)
    assert torch.autograd.gradcheck(g, (d,), eps=1e-4, atol=1e-6, rtol=1e-5)
