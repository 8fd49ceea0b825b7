"""Problem texts of the Python tests."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

BLOCK = """
title = "heated block"

[mesh]
box = { lengths = [0.02, 0.01, 0.004], divisions = [4, 2, 2], cell = "tet4" }

[[thermal.material]]
group = "domain"
k = 40.0
source = 2.0e6

[[thermal.bc]]
group = "xmin"
kind = "temperature"
value = 300.0

[[thermal.bc]]
group = "zmax"
kind = "convection"
h = 150.0
t_inf = 290.0

[[objective]]
kind = "average"
group = "domain"

[parameters]
register = ["thermal.k.domain", "bc.zmax.h", "thermal.q.domain"]
"""

# The same block with a conductivity per cell as its one parameter.
FIELD_BLOCK = BLOCK.replace(
    'register = ["thermal.k.domain", "bc.zmax.h", "thermal.q.domain"]',
    'register = ["thermal.k_elem.domain"]',
)
