"""Dynamics from Python: the physics of a spring, the discrete adjoint against central
differences, torch.autograd.gradcheck through a trajectory, and errors that name the argument."""

import math

import numpy as np
import pytest
import torch

import gradfem
import gradfem.dynamics as gd
import gradfem.torch as gt


def oscillator(k=4.0, c=0.2):
    s = gd.System()
    s.param("spring.k", k, lower=0.0)
    s.param("damper.c", c, lower=0.0)
    b = s.add_particle(1.0)
    s.add_spring(b, [0.0, 0.0, 0.0], k="spring.k", rest_length=0.5)
    s.add_damper(b, [0.0, 0.0, 0.0], c="damper.c")
    return s


X0 = {"position": np.array([[1.2, 0.3, 0.0]]), "velocity": np.array([[0.0, 0.8, 0.1]])}


@pytest.mark.parametrize("method", gd.METHODS)
def test_a_1d_spring_oscillates_at_its_frequency(method):
    """Undamped, along x and away from the fixed end: x(t) = L + A cos(√k t)."""
    s = gd.System()
    s.param("spring.k", 4.0)
    b = s.add_particle(1.0)
    s.add_spring(b, [0.0, 0.0, 0.0], k="spring.k", rest_length=0.5)
    dt, steps = 1e-3, 2000
    traj = s.integrate({"position": [[0.8, 0.0, 0.0]]}, dt=dt, steps=steps, method=method)
    t = dt * np.arange(steps + 1)
    exact = 0.5 + 0.3 * np.cos(2.0 * t)
    err = np.abs(traj["position"][:, 0, 0] - exact).max()
    tol = {"explicit_euler": 2e-3, "rk4": 1e-10, "velocity_verlet": 1e-6}[method]
    assert err < tol, (method, err)
    assert np.all(traj["orientation"][:, 0] == [1.0, 0.0, 0.0, 0.0])


@pytest.mark.parametrize("method", gd.METHODS)
def test_the_vjp_is_the_derivative_of_the_trajectory(method):
    s = oscillator()
    dt, steps = 0.01, 150
    rng = np.random.default_rng(3)
    w = {f: rng.standard_normal((steps + 1, 1, n)) for f, n in [("position", 3), ("velocity", 3)]}

    def j():
        t = s.integrate(X0, dt, steps, method)
        return sum((w[f] * t[f]).sum() for f in w)

    dp, dx0 = s.vjp(X0, dt, steps, w, method)
    for name, h in [("spring.k", 1e-5), ("damper.c", 1e-6)]:
        v = s.parameters[name]
        s.set_parameters({name: v + h})
        jp = j()
        s.set_parameters({name: v - h})
        jm = j()
        s.set_parameters({name: v})
        fd = (jp - jm) / (2 * h)
        assert abs(dp[name] - fd) <= 1e-6 * max(abs(fd), 1.0), (method, name, dp[name], fd)
    for field in ("position", "velocity"):
        for i in range(3):
            h = 1e-6
            up = {k: v.copy() for k, v in X0.items()}
            dn = {k: v.copy() for k, v in X0.items()}
            up[field][0, i] += h
            dn[field][0, i] -= h
            jp = sum((w[f] * s.integrate(up, dt, steps, method)[f]).sum() for f in w)
            jm = sum((w[f] * s.integrate(dn, dt, steps, method)[f]).sum() for f in w)
            fd = (jp - jm) / (2 * h)
            assert abs(dx0[field][0, i] - fd) <= 1e-6 * max(abs(fd), 1.0), (method, field, i)


def test_gradcheck_through_a_rigid_body_on_the_ground():
    """A spinning rigid body dropped on a frictional ground: gravity, contact, friction and
    rotation in one trajectory; gradcheck by the contact stiffness, the friction coefficient
    and the initial velocity."""
    s = gd.System(gravity=[0.0, 0.0, -9.81])
    s.param("ground.k", 2e3, lower=0.0)
    s.param("ground.mu", 0.4, lower=0.0, upper=1.0)
    b = s.add_rigid_body(0.5, [1e-3, 2e-3, 2.5e-3])
    s.add_ground([(b, 0.05)], [0.0, 0.0, 1.0], 0.0, "ground.k", "ground.mu", 1e-3)
    k = torch.tensor(2e3, dtype=torch.float64, requires_grad=True)
    mu = torch.tensor(0.4, dtype=torch.float64, requires_grad=True)
    v0 = torch.tensor([[0.3, 0.0, -0.5]], dtype=torch.float64, requires_grad=True)
    r0 = torch.tensor([[0.0, 0.0, 0.06]], dtype=torch.float64)
    w0 = torch.tensor([[0.0, 3.0, 1.0]], dtype=torch.float64)

    def f(k, mu, v0):
        traj = gt.integrate(
            s,
            {"ground.k": k, "ground.mu": mu},
            {"position": r0, "velocity": v0, "angular_velocity": w0},
            dt=1e-3,
            steps=60,
        )
        return traj["position"][-1], traj["angular_velocity"][-1]

    assert torch.autograd.gradcheck(f, (k, mu, v0), eps=1e-6, atol=1e-6, rtol=1e-5)


def test_errors_name_the_argument():
    s = oscillator()
    with pytest.raises(gradfem.ProblemError, match="'spring.kk' is not a registered parameter.*spring.k"):
        s.add_spring(0, [0, 0, 0], k="spring.kk", rest_length=0.5)
    with pytest.raises(gradfem.ProblemError, match=r"state0\['position'\]: shape \[2, 3\], expected \[1, 3\]"):
        s.integrate({"position": np.zeros((2, 3))}, 0.01, 10)
    with pytest.raises(gradfem.ProblemError, match="unknown method 'leapfrog'; expected explicit_euler"):
        s.integrate(X0, 0.01, 10, method="leapfrog")
    with pytest.raises(gradfem.ProblemError, match="unknown field 'speed'"):
        s.integrate({"speed": np.zeros((1, 3))}, 0.01, 10)
    with pytest.raises(gradfem.ProblemError, match="body 3 does not exist"):
        s.add_damper(3, [0, 0, 0], c=1.0)
    with pytest.raises(gradfem.ProblemError, match="dt = -0.01"):
        s.integrate(X0, -0.01, 10)
    with pytest.raises(gradfem.ProblemError, match=r"cotangent\['velocity'\]: shape"):
        s.vjp(X0, 0.01, 10, {"velocity": np.zeros((10, 1, 3))})
    with pytest.raises(gradfem.ProblemError, match="bound"):
        s.set_parameters({"spring.k": -1.0})
    assert math.isfinite(s.parameters["spring.k"])
