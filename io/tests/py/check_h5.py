#!/usr/bin/env python3
"""Check a gradfem results .h5 file with h5py (run by io/tests/h5_results.rs).

usage: check_h5.py FILE.h5 N_NODES

Asserts the documented layout (see gradfem_io::h5), that the XDMF topology is the connectivity
permuted to VTK order (checked geometrically for quadratic tets and wedges), and, when a step
holds a field "T", that T = x + 2y + 3z + time at every node (the tests write it so).
Prints "ok" on success; any failed assertion exits non-zero.
"""
import sys

import h5py
import numpy as np


def text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def main(path, n_nodes):
    f = h5py.File(path, "r")
    assert text(f.attrs["format"]) == "gradfem-results", f.attrs["format"]
    assert int(f.attrs["version"]) == 1
    sel = text(f.attrs["cell_selection"])
    assert sel in ("all", "top_dimension"), sel

    # Every dataset carries a string attribute `units`.
    def check_units(name, obj):
        if isinstance(obj, h5py.Dataset):
            assert "units" in obj.attrs, "dataset %s has no units" % name
            text(obj.attrs["units"])
    f.visititems(check_units)
    assert text(f["/mesh/coordinates"].attrs["units"]) != ""

    xyz = f["/mesh/coordinates"][:]
    assert xyz.dtype == np.float64 and xyz.shape == (n_nodes, 3), (xyz.dtype, xyz.shape)
    tags = f["/mesh/node_tags"][:]
    assert tags.dtype == np.uint64 and tags.shape == (n_nodes,)

    n_nodes_per = {"point1": 1, "line2": 2, "line3": 3, "tri3": 3, "tri6": 6, "quad4": 4,
                   "quad8": 8, "quad9": 9, "tet4": 4, "tet10": 10, "hex8": 8, "hex20": 20,
                   "hex27": 27, "prism6": 6}
    n_cells = 0
    blocks = f["/mesh/blocks"]
    for name, b in blocks.items():
        ct = text(b.attrs["cell_type"])
        assert name == "%d_%s" % (int(b.attrs["index"]), ct), name
        conn = b["connectivity"][:]
        k = n_nodes_per[ct]
        assert conn.dtype == np.uint64 and conn.ndim == 2 and conn.shape[1] == k, conn.shape
        assert b["tags"].shape == (conn.shape[0],)
        assert (conn < n_nodes).all()
        if int(b.attrs["selected"]):
            n_cells += conn.shape[0]
        if name in f["/mesh/topology"]:
            topo = f["/mesh/topology/" + name][:]
            assert topo.dtype == np.int64 and topo.shape == conn.shape
            check_vtk_order(ct, conn.astype(np.int64), topo, xyz)

    # With several written blocks, one XDMF Mixed topology holds them all, in block order:
    # per cell its XDMF type number (and a node count for poly-vertices / poly-lines), then
    # its nodes as in the block's own topology.
    mixed_codes = {"point1": [1, 1], "line2": [2, 2], "line3": [0x22], "tri3": [0x4],
                   "tri6": [0x24], "quad4": [0x5], "quad8": [0x25], "quad9": [0x23],
                   "tet4": [0x6], "tet10": [0x26], "hex8": [0x9], "hex20": [0x30],
                   "hex27": [0x32], "prism6": [0x8]}
    written = sorted((int(blocks[n].attrs["index"]), n) for n in f["/mesh/topology"]
                     if n != "mixed")
    if len(written) > 1:
        expected = []
        for _, name in written:
            code = mixed_codes[text(blocks[name].attrs["cell_type"])]
            for row in f["/mesh/topology/" + name][:]:
                expected.extend(code)
                expected.extend(int(v) for v in row)
        mixed = f["/mesh/topology/mixed"][:]
        assert mixed.dtype == np.int64 and list(mixed) == expected
    else:
        assert "mixed" not in f["/mesh/topology"]

    for name, g in f["/mesh/groups"].items():
        assert g["block"].shape == g["index"].shape
        assert int(g.attrs["dim"]) in (0, 1, 2, 3)
        text(g.attrs["name"])
        int(g.attrs["tag"])

    def check_fields(group):
        for name, d in group.items():
            centering = text(d.attrs["centering"])
            kind = text(d.attrs["kind"])
            n = n_nodes if centering == "node" else n_cells
            shape = {"scalar": (n,), "vector": (n, 3), "tensor": (n, 9), "tensor6": (n, 6)}[kind]
            assert d.shape == shape and d.dtype == np.float64, (name, d.shape, shape)
            assert text(d.attrs["units"]) != "", "field %s has an empty unit" % name

    check_fields(f["/static"])
    steps = f["/steps"]
    assert len(steps) == int(f.attrs["n_steps"])
    for k in range(len(steps)):
        s = steps[str(k)]
        t = float(s.attrs["time"])
        check_fields(s)
        if "T" in s:
            expected = xyz[:, 0] + 2 * xyz[:, 1] + 3 * xyz[:, 2] + t
            assert np.array_equal(s["T"][:], expected), (s["T"][:], expected)
    print("ok")


# VTK orders, written independently of the Rust tables: VTK position -> gmsh position.
VTK_FROM_GMSH = {
    "tet10": [0, 1, 2, 3, 4, 5, 6, 7, 9, 8],
    "prism6": [0, 2, 1, 3, 5, 4],
}


def check_vtk_order(ct, conn, topo, xyz):
    perm = VTK_FROM_GMSH.get(ct, list(range(conn.shape[1])))
    assert np.array_equal(topo, conn[:, perm]), (ct, topo, conn)
    for cell in topo:
        p = xyz[cell]
        if ct == "tet10":
            vtk_edges = [(0, 1), (1, 2), (2, 0), (0, 3), (1, 3), (2, 3)]
            for m, (a, b) in enumerate(vtk_edges):
                assert np.allclose(p[4 + m], 0.5 * (p[a] + p[b])), (m, a, b)
        if ct == "prism6":
            normal = np.cross(p[1] - p[0], p[2] - p[0])
            assert np.dot(normal, p[3] - p[0]) < 0, "VTK wedge: (0,1,2) must face away from 3"


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
