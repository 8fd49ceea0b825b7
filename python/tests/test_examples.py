"""The scripts of python/examples run and do what they say."""

import runpy
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_the_network_learns_the_conductivity_field():
    m = runpy.run_path(str(EXAMPLES / "conductivity_network.py"))
    losses = m["main"](steps=40)["losses"]
    assert losses[-1] < 0.05 * losses[0], losses
