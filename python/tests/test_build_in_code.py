"""Problems built in Python: tables as dicts, meshes from NumPy arrays, SciPy's optimizers."""

import numpy as np
import pytest
import scipy.optimize

import gradfem
from problems import BLOCK


def kuhn_cube(n, length=1.0):
    """A cube of n³ hexahedra, each split into six tetrahedra around its main diagonal."""
    g = np.linspace(0.0, length, n + 1)
    x, y, z = np.meshgrid(g, g, g, indexing="ij")
    points = np.stack([x.ravel(), y.ravel(), z.ravel()], axis=1)
    node = lambda i, j, k: (i * (n + 1) + j) * (n + 1) + k  # noqa: E731
    tets = []
    for i in range(n):
        for j in range(n):
            for k in range(n):
                c = [node(i + a, j + b, k + d) for a in (0, 1) for b in (0, 1) for d in (0, 1)]
                # c[abd] with bits (x, y, z); the six tets share the diagonal c[0] - c[7].
                for p in ([1, 3], [1, 5], [2, 3], [2, 6], [4, 5], [4, 6]):
                    q = p[0] | p[1]
                    tets.append([c[0], c[p[0]], c[q], c[7]])
    tets = np.array(tets, dtype=np.int64)
    # Orient every tetrahedron positively.
    v = points[tets]
    det = np.einsum("ij,ij->i", np.cross(v[:, 1] - v[:, 0], v[:, 2] - v[:, 0]), v[:, 3] - v[:, 0])
    tets[det < 0, 1], tets[det < 0, 2] = tets[det < 0, 2], tets[det < 0, 1].copy()
    return points, tets


SLAB = {
    "mesh": {
        "plane_group": [
            {"name": "xmin", "axis": "x", "value": 0.0},
            {"name": "xmax", "axis": "x", "value": 1.0},
        ]
    },
    "thermal": {
        "material": [{"group": "solid", "k": 5.0}],
        "bc": [
            {"group": "xmin", "kind": "temperature", "value": 300.0},
            {"group": "xmax", "kind": "temperature", "value": 400.0},
        ],
    },
    "objective": [{"kind": "average", "group": "solid"}],
    "parameters": {"register": ["bc.xmax.temperature"]},
}


def test_a_mesh_from_arrays_and_tables_from_a_dict():
    points, tets = kuhn_cube(3)
    mesh = {"points": points, "cells": {"tet4": tets}, "groups": {"solid": ("tet4", range(len(tets)))}}
    p = gradfem.Problem.from_dict(SLAB, mesh=mesh, name="slab")
    sol = p.solve()
    # Linear conduction between 300 K and 400 K: T is linear in x, which P1 elements hold exactly.
    t = sol.fields["temperature"]
    assert np.allclose(t, 300.0 + 100.0 * points[:, 0], rtol=0, atol=1e-9)
    assert sol.quantities["mean_temperature"] == pytest.approx(350.0, abs=1e-9)
    # dJ/dT_xmax of the mean: 1/2 exactly.
    assert p.gradient()["bc.xmax.temperature"] == pytest.approx(0.5, abs=1e-12)


def test_a_dict_is_the_problem_file_it_stands_for(root):
    import tomllib

    tables = tomllib.loads(BLOCK)
    a = gradfem.Problem.from_dict(tables, name="block")
    b = gradfem.Problem.from_string(BLOCK, root / "block.toml")
    assert a.gradient() == b.gradient()


@pytest.mark.parametrize(
    "change, error, message",
    [
        (lambda m: m.update(points=m["points"][:, :2]), gradfem.ProblemError, r"points: expected an \(n, 3\) array"),
        (lambda m: m.update(cells={"tet4": m["cells"]["tet4"].astype(float)}), gradfem.ProblemError, "node indices must be integers"),
        (lambda m: m.update(cells={"tet4": m["cells"]["tet4"] + 1000}), gradfem.ProblemError, "refers to node 1000"),
        (lambda m: m.update(cells={"tetra": m["cells"]["tet4"]}), gradfem.ProblemError, "unknown cell type 'tetra'"),
        (lambda m: m.update(groups={"solid": ("tet4", [10_000])}), gradfem.ProblemError, "cell 10000 does not exist"),
        (lambda m: m["cells"]["tet4"][0].__setitem__(slice(1, 3), m["cells"]["tet4"][0][[2, 1]]), gradfem.MeshError, "inverted or degenerate"),
    ],
)
def test_bad_arrays_raise_errors_that_name_them(change, error, message):
    points, tets = kuhn_cube(2)
    mesh = {"points": points, "cells": {"tet4": tets}, "groups": {"solid": ("tet4", range(len(tets)))}}
    change(mesh)
    with pytest.raises(error, match=message):
        gradfem.Problem.from_dict(SLAB, mesh=mesh)


def test_a_bad_table_value_names_its_key():
    tables = {**SLAB, "thermal": {**SLAB["thermal"], "material": [{"group": "solid", "k": object()}]}}
    with pytest.raises(gradfem.ProblemError, match=r"tables\.thermal\.material\[0\]\.k"):
        gradfem.Problem.from_dict(tables)


def test_scipy_minimize_with_the_adjoint_gradient(block):
    fun, jac, x0, bounds = block.scipy_objective(["thermal.k.domain", "bc.zmax.h"])
    assert bounds[0][0] == 0.0  # k ≥ 0
    # jac against central differences
    g = jac(x0)
    for i in range(2):
        h = 1e-6 * x0[i]
        e = np.zeros(2)
        e[i] = h
        fd = (fun(x0 + e) - fun(x0 - e)) / (2 * h)
        assert g[i] == pytest.approx(fd, rel=1e-6)
    # The mean temperature falls with k and h: within bounds the optimum is their upper ends.
    bounds = [(10.0, 80.0), (50.0, 400.0)]
    r = scipy.optimize.minimize(fun, x0, jac=jac, bounds=bounds, method="L-BFGS-B")
    assert r.success, r
    assert r.x == pytest.approx([80.0, 400.0], rel=1e-9)
