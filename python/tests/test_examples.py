"""The scripts of python/examples run and do what they say."""

import runpy
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.torch
def test_the_network_learns_the_conductivity_field():
    m = runpy.run_path(str(EXAMPLES / "conductivity_network.py"))
    losses = m["main"](steps=40)["losses"]
    assert losses[-1] < 0.05 * losses[0], losses


def test_the_monte_carlo_check_agrees_with_first_order():
    m = runpy.run_path(str(EXAMPLES / "monte_carlo_robustness.py"))
    r = m["main"](samples=32, noise=0.01, seed=1)
    # The verdict follows the rule, and the sampled loss is the first-order one within the
    # sampling error of 32 draws (a χ² of one degree of freedom: ±√(2/32) ≈ 25 % on the mean).
    assert r["accepted"] == (r["std_loss"] < 0.05 * r["mean_loss"])
    excess, predicted = r["mean_loss"] - 1.0, r["first_order_mean_loss"] - 1.0
    assert abs(excess - predicted) < 0.6 * predicted, r


@pytest.mark.torch
def test_the_spring_stiffness_is_calibrated_through_the_dynamics_adjoint():
    m = runpy.run_path(str(EXAMPLES / "spring_calibration.py"))
    assert abs(m["k"].item() - 4.0) < 1e-6, m["k"]


@pytest.mark.torch
def test_k_and_h_are_calibrated_from_deflection_curves_in_vacuum_and_in_air():
    m = runpy.run_path(str(EXAMPLES / "actuator_calibration.py"))
    r = m["main"]()
    true = m["TRUE"]
    assert abs(r["k"] / true[m["K"]] - 1) < 1e-6, r["k"]
    assert abs(r["h"] / true[m["H"]] - 1) < 1e-6, r["h"]
    assert r["losses"][-1] < 1e-12 * r["losses"][0], r["losses"]
