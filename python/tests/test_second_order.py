"""Hessian-vector products and the dense Hessian from Python: exact second derivatives by the
second-order adjoint, checked against central differences of gradients and for symmetry."""

import numpy as np
import pytest

import gradfem


def flatten(p, d):
    return np.concatenate([np.atleast_1d(np.asarray(d[name], dtype=np.float64)) for name in p.parameters])


def assert_hvp_matches_differences_of_gradients(p, h=1e-3, rtol=1e-5):
    """H·δp along a direction over every registered scalar against central differences of
    gradients at p ± h δp."""
    x0 = {k: float(v) for k, v in p.parameters.items()}
    direction = {k: 0.01 * v * (1.0 + 0.3 * i) for i, (k, v) in enumerate(x0.items())}
    hv = flatten(p, p.hvp(direction))
    grads = []
    for s in (h, -h):
        p.set_parameters({k: x0[k] + s * direction[k] for k in x0})
        grads.append(flatten(p, p.gradient()))
    p.set_parameters(x0)
    fd = (grads[0] - grads[1]) / (2.0 * h)
    assert np.allclose(hv, fd, rtol=rtol, atol=1e-9 * np.abs(fd).max()), (hv, fd)


def test_hvp_matches_differences_of_gradients(root):
    assert_hvp_matches_differences_of_gradients(
        gradfem.Problem.from_toml(root / "examples" / "nonlinear_conductivity.toml")
    )


def test_dense_hessian_is_symmetric_and_matches_hvp(root):
    p = gradfem.Problem.from_toml(root / "examples" / "sensor_misfit_newton.toml")
    H = p.hessian()
    n = len(p.parameters)
    assert H.shape == (n, n)
    assert np.allclose(H, H.T, rtol=1e-9, atol=0.0)
    names = list(p.parameters)
    col = flatten(p, p.hvp({names[0]: 1.0}))
    assert np.allclose(H[:, 0], col, rtol=1e-12)


def test_coupled_hvp_matches_differences_of_gradients(root):
    """Through the microactuator's electro-thermal cycle (ρ(T), solved monolithic)."""
    assert_hvp_matches_differences_of_gradients(
        gradfem.Problem.from_toml(root / "examples" / "microactuator_electrothermal.toml")
    )


def test_finite_strain_hvp_matches_differences_of_gradients(root):
    """Through the rubber pad's five load steps (Hex20, Ogden, a force-curve misfit)."""
    assert_hvp_matches_differences_of_gradients(
        gradfem.Problem.from_toml(root / "examples" / "rubber_pad.toml")
    )


def test_transient_hvp_matches_differences_of_gradients(root):
    """Through the quenched plate's 40 BDF2 steps (k, ρc, h and the initial temperature)."""
    assert_hvp_matches_differences_of_gradients(
        gradfem.Problem.from_toml(root / "examples" / "transient_slab.toml")
    )


def test_cycle_in_time_hvp_matches_differences_of_gradients(root):
    """Through the steps of the microactuator's φ ⇄ T cycle: its step response with ρ(T)
    (10 BDF2 steps; ρc, the voltage, α, k and h). The hot-arm width is left out here: through
    the morph, differences of gradients are limited by the solves' tolerance (its product
    passes the second-order Taylor test in tests/second_order_transient.rs)."""
    path = root / "examples" / "microactuator_step.toml"
    text = (
        path.read_text()
        .replace("sigma = 5.0e4\nt_ref = 293.15", "sigma = 5.0e4\nalpha_r = 1.0e-3\nt_ref = 293.15")
        .replace("steps = 30", "steps = 10")
        .replace('    "morph.hot_arm_width",\n', "")
    )
    assert_hvp_matches_differences_of_gradients(gradfem.Problem.from_string(text, path))


def test_scipy_second_order_method_with_exact_hessp(root):
    """scipy's trust-krylov with gradfem's exact hessp fits the sensor example to the optimum
    gradfem's own Newton-CG finds."""
    scipy_optimize = pytest.importorskip("scipy.optimize")
    p = gradfem.Problem.from_toml(root / "examples" / "sensor_misfit_newton.toml")
    fun, jac, hessp, x0, _ = p.scipy_objective_with_hessp(["thermal.k.domain", "bc.zmax.h"])
    r = scipy_optimize.minimize(
        fun, x0, jac=jac, hessp=hessp, method="trust-krylov", options={"gtol": 1e-5}
    )
    assert r.success, r.message
    assert abs(r.x[0] / 99.90644392063498 - 1) < 1e-4 and abs(r.x[1] / 40.31951043110968 - 1) < 1e-4, r.x
    assert r.nhev > 0


def test_shape_hvp_matches_differences_of_gradients(root):
    """The built-in microactuator with its hot-arm width (a morph moving the nodes) beside the
    voltage, α, k and h: the whole chain I → Q → T → u differentiated twice in the shape."""
    path = root / "examples" / "microactuator_builtin.toml"
    # Direct solves and a tight Newton tolerance: the differences of gradients need them.
    text = path.read_text() + '\n[solver]\nlinear = "lu"\nrel_tol = 1e-13\n'
    p = gradfem.Problem.from_string(text, path)
    assert "morph.hot_arm_width" in p.parameters
    # The gradient's round-off in a width step of nanometres swamps smaller differences (the
    # exactness is the second-order Taylor tests' in tests/second_order.rs).
    assert_hvp_matches_differences_of_gradients(p, h=1e-2, rtol=1e-4)
