#!/usr/bin/env python3
"""Check the .h5 written by `gradfem mesh-convert` with h5py (run by tests/cli.rs).

usage: check_mesh_h5.py FILE.h5 SPEC.json

SPEC.json: {"n_nodes": N, "n_cells": C, "groups": {"name": cell_count, ...},
            "datasets": ["/path/referenced/by/the/xdmf", ...]}

Asserts that /mesh/coordinates is float64 of shape (N, 3); that every dataset the XDMF names
exists; that each group has a 0/1 mask /static/group%3A<name> over the C cells whose sum is the
group's cell count; that /static/physical_tag is non-zero exactly where some mask is 1; and,
for straight-sided quadratic cells, that the XDMF topology is in VTK order (mid-edge nodes at the
midpoints of VTK's edges, written here from VTK's documentation, not from the Rust tables).
Prints "ok" on success; a failed assertion exits non-zero.
"""
import json
import sys

import h5py
import numpy as np

# VTK edge lists (vtkQuadraticTetra, vtkQuadraticHexahedron): mid-edge node k sits on edge k.
VTK_EDGES = {
    "tet10": (4, [(0, 1), (1, 2), (2, 0), (0, 3), (1, 3), (2, 3)]),
    "hex20": (8, [(0, 1), (1, 2), (2, 3), (3, 0), (4, 5), (5, 6), (6, 7), (7, 4),
                  (0, 4), (1, 5), (2, 6), (3, 7)]),
}


def main(path, spec_path):
    spec = json.load(open(spec_path))
    f = h5py.File(path, "r")
    xyz = f["/mesh/coordinates"][:]
    assert xyz.dtype == np.float64 and xyz.shape == (spec["n_nodes"], 3), (xyz.dtype, xyz.shape)
    for d in spec["datasets"]:
        assert d in f, "the XDMF references %s, which the .h5 lacks" % d
    n_cells = spec["n_cells"]
    any_group = np.zeros(n_cells, dtype=bool)
    for name, count in spec["groups"].items():
        key = "/static/group%3A" + name
        assert key in f, key
        mask = f[key][:]
        assert mask.shape == (n_cells,), (name, mask.shape)
        assert set(np.unique(mask)) <= {0.0, 1.0}, (name, np.unique(mask))
        assert int(mask.sum()) == count, (name, int(mask.sum()), count)
        any_group |= mask == 1.0
    tag = f["/static/physical_tag"][:]
    assert tag.shape == (n_cells,)
    assert np.array_equal(tag != 0, any_group), "physical_tag is non-zero outside the groups"
    for name, topo in f["/mesh/topology"].items():
        if name == "mixed":
            # All blocks in one XDMF Mixed topology (checked by io/tests/py/check_h5.py).
            continue
        ct = name.split("_", 1)[1]
        if ct not in VTK_EDGES:
            continue
        first, edges = VTK_EDGES[ct]
        p = xyz[topo[:].astype(np.int64)]
        for k, (a, b) in enumerate(edges):
            mid = 0.5 * (p[:, a] + p[:, b])
            assert np.allclose(p[:, first + k], mid, rtol=0, atol=1e-12), (ct, k, a, b)
    print("ok")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
