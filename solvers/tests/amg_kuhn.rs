//! The AMG test problem: 3D P1 Poisson (k = 1) on the unit cube split into N×N×N cubes, each
//! cut into 6 tetrahedra along its main diagonal (Kuhn/Freudenthal split), Dirichlet u = 0 on
//! x = 0, source f = 1. Used as a module by the other `amg_*` tests and by
//! `examples/bench_amg.rs` (`#[path]` include), and tested here on its own.
#![allow(dead_code)]

use gradfem_solvers::sparse::CsrMatrix;

/// The assembled system: free unknowns are the nodes with x > 0, numbered lexicographically
/// (x fastest is not used: node (i, j, k) with i ≥ 1 is unknown (k (N+1) + j) N + (i − 1)).
pub struct KuhnPoisson {
    pub n: usize,
    pub a: CsrMatrix,
    pub b: Vec<f64>,
}

/// Node (i, j, k) of the (N+1)³ grid → global node number.
fn node(n: usize, i: usize, j: usize, k: usize) -> usize {
    (k * (n + 1) + j) * (n + 1) + i
}

/// The 6 Kuhn tetrahedra of a cube: paths from corner 000 to 111 through the 3! axis orders.
const PERMS: [[usize; 3]; 6] = [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]];

/// Element stiffness K_ab = |T| ∇φ_a · ∇φ_b of the P1 tetrahedron with vertices `x`.
fn element_stiffness(x: &[[f64; 3]; 4]) -> ([[f64; 4]; 4], f64) {
    let e = |a: usize| [x[a][0] - x[0][0], x[a][1] - x[0][1], x[a][2] - x[0][2]];
    let (e1, e2, e3) = (e(1), e(2), e(3));
    let cross = |u: [f64; 3], v: [f64; 3]| {
        [u[1] * v[2] - u[2] * v[1], u[2] * v[0] - u[0] * v[2], u[0] * v[1] - u[1] * v[0]]
    };
    let det = e1[0] * (e2[1] * e3[2] - e2[2] * e3[1]) - e1[1] * (e2[0] * e3[2] - e2[2] * e3[0])
        + e1[2] * (e2[0] * e3[1] - e2[1] * e3[0]);
    // rows of J⁻¹ (J = [e1 e2 e3] as columns): ∇φ1 = (e2×e3)/det, ∇φ2 = (e3×e1)/det, ∇φ3 = (e1×e2)/det
    let g1 = cross(e2, e3).map(|c| c / det);
    let g2 = cross(e3, e1).map(|c| c / det);
    let g3 = cross(e1, e2).map(|c| c / det);
    let g0 = [-(g1[0] + g2[0] + g3[0]), -(g1[1] + g2[1] + g3[1]), -(g1[2] + g2[2] + g3[2])];
    let g = [g0, g1, g2, g3];
    let vol = det.abs() / 6.0;
    let mut k = [[0.0; 4]; 4];
    for a in 0..4 {
        for b in 0..4 {
            k[a][b] = vol * (g[a][0] * g[b][0] + g[a][1] * g[b][1] + g[a][2] * g[b][2]);
        }
    }
    (k, vol)
}

impl KuhnPoisson {
    /// Assembles the system for N cubes per direction.
    pub fn new(n: usize) -> Self {
        let h = 1.0 / n as f64;
        let nn = (n + 1) * (n + 1) * (n + 1);
        // free numbering: nodes with i ≥ 1
        let mut dof = vec![usize::MAX; nn];
        let mut count = 0;
        for k in 0..=n {
            for j in 0..=n {
                for i in 1..=n {
                    dof[node(n, i, j, k)] = count;
                    count += 1;
                }
            }
        }
        // pattern: Kuhn edges join nodes whose offset has all components in {0, 1} or all in {0, −1}
        let mut row_ptr = Vec::with_capacity(count + 1);
        row_ptr.push(0);
        let mut col_idx = Vec::with_capacity(count * 15);
        for k in 0..=n {
            for j in 0..=n {
                for i in 1..=n {
                    let mut cols = Vec::with_capacity(15);
                    for dk in -1i64..=1 {
                        for dj in -1i64..=1 {
                            for di in -1i64..=1 {
                                let d = [di, dj, dk];
                                let ok = d.iter().all(|&c| c >= 0) || d.iter().all(|&c| c <= 0);
                                let (ii, jj, kk) = (i as i64 + di, j as i64 + dj, k as i64 + dk);
                                let inside = (1..=n as i64).contains(&ii)
                                    && (0..=n as i64).contains(&jj)
                                    && (0..=n as i64).contains(&kk);
                                if ok && inside {
                                    cols.push(dof[node(n, ii as usize, jj as usize, kk as usize)]);
                                }
                            }
                        }
                    }
                    cols.sort_unstable();
                    col_idx.extend_from_slice(&cols);
                    row_ptr.push(col_idx.len());
                }
            }
        }
        let col_idx: Vec<u32> = col_idx.into_iter().map(|j: usize| j as u32).collect();
        let mut a = CsrMatrix::zeros(count, count, row_ptr, col_idx);
        let mut b = vec![0.0; count];
        for k in 0..n {
            for j in 0..n {
                for i in 0..n {
                    for perm in PERMS {
                        let mut c = [i, j, k];
                        let mut ids = [node(n, c[0], c[1], c[2]); 4];
                        let mut x = [[0.0; 3]; 4];
                        x[0] = [c[0] as f64 * h, c[1] as f64 * h, c[2] as f64 * h];
                        for s in 0..3 {
                            c[perm[s]] += 1;
                            ids[s + 1] = node(n, c[0], c[1], c[2]);
                            x[s + 1] = [c[0] as f64 * h, c[1] as f64 * h, c[2] as f64 * h];
                        }
                        let (ke, vol) = element_stiffness(&x);
                        for p in 0..4 {
                            let r = dof[ids[p]];
                            if r == usize::MAX {
                                continue;
                            }
                            b[r] += vol / 4.0;
                            for q in 0..4 {
                                let c = dof[ids[q]];
                                if c != usize::MAX {
                                    let pos = a.find(r, c).expect("Kuhn edge in the pattern");
                                    a.values[pos] += ke[p][q];
                                }
                            }
                        }
                    }
                }
            }
        }
        KuhnPoisson { n, a, b }
    }
}

#[test]
fn kuhn_matrix_is_symmetric_with_the_expected_row_sums() {
    let p = KuhnPoisson::new(4);
    assert_eq!(p.a.n_rows, 4 * 5 * 5);
    for i in 0..p.a.n_rows {
        let (cols, vals) = p.a.row(i);
        for (&j, &v) in cols.iter().zip(vals) {
            let t = p.a.values[p.a.find(j as usize, i).unwrap()];
            assert!((v - t).abs() < 1e-14, "({i},{j})");
        }
    }
    // a node not next to x = 0 has row sum 0 (constants are in the kernel of the Laplacian)
    let n = 4;
    let interior = (2 * (n + 1) + 2) * n + (3 - 1); // node (3, 2, 2)
    let s: f64 = p.a.row(interior).1.iter().sum();
    assert!(s.abs() < 1e-14, "{s}");
    // total load = volume of the cube minus nothing (f = 1, only x = 0 nodes removed)
    let total: f64 = p.b.iter().sum();
    assert!(total > 0.7 && total < 1.0, "{total}");
}

#[test]
fn kuhn_stiffness_is_the_seven_point_stencil() {
    // P1 on the Kuhn split reproduces the 7-point finite-difference stencil times h.
    let n = 6;
    let p = KuhnPoisson::new(n);
    let h = 1.0 / n as f64;
    let i = (3 * (n + 1) + 3) * n + (3 - 1); // interior node (3, 3, 3)
    let (cols, vals) = p.a.row(i);
    let diag = vals[cols.binary_search(&(i as u32)).unwrap()];
    assert!((diag - 6.0 * h).abs() < 1e-13, "{diag}");
    let big = vals.iter().filter(|v| v.abs() > 1e-12).count();
    assert_eq!(big, 7);
}

/// P1 linear elasticity (E = 1, ν = 0.3) on the box [0, lx] × [0, ly] × [0, lz] cut into
/// nx × ny × nz cubes of 6 Kuhn tetrahedra, clamped (u = 0) on x = 0, with the traction
/// (0, 0, −1) on x = lx: for `cells = [N; 3]` and unit lengths the peers' `elastic3d`.
pub struct KuhnElasticity {
    /// Stiffness over the free unknowns (x, y, z of each free node, nodes in grid order).
    pub a: CsrMatrix,
    /// The consistent traction load.
    pub b: Vec<f64>,
    /// Coordinates of every grid node.
    pub coords: Vec<[f64; 3]>,
    /// (node, component) of each unknown.
    pub unknowns: Vec<(usize, usize)>,
}

impl KuhnElasticity {
    /// Assembles the system.
    pub fn new(cells: [usize; 3], lengths: [f64; 3]) -> Self {
        let [nx, ny, nz] = cells;
        let h = [0, 1, 2].map(|d| lengths[d] / cells[d] as f64);
        let node = |i: usize, j: usize, k: usize| (k * (ny + 1) + j) * (nx + 1) + i;
        let nn = (nx + 1) * (ny + 1) * (nz + 1);
        let mut coords = vec![[0.0; 3]; nn];
        let mut first = vec![usize::MAX; nn];
        let mut unknowns = Vec::new();
        for k in 0..=nz {
            for j in 0..=ny {
                for i in 0..=nx {
                    let p = node(i, j, k);
                    coords[p] = [i as f64 * h[0], j as f64 * h[1], k as f64 * h[2]];
                    if i > 0 {
                        first[p] = unknowns.len();
                        unknowns.extend((0..3).map(|c| (p, c)));
                    }
                }
            }
        }
        let count = unknowns.len();
        let mut row_ptr = vec![0];
        let mut col_idx = Vec::with_capacity(count * 45);
        for k in 0..=nz {
            for j in 0..=ny {
                for i in 1..=nx {
                    let mut nodes = Vec::with_capacity(15);
                    for dk in -1i64..=1 {
                        for dj in -1i64..=1 {
                            for di in -1i64..=1 {
                                let d = [di, dj, dk];
                                let ok = d.iter().all(|&c| c >= 0) || d.iter().all(|&c| c <= 0);
                                let (ii, jj, kk) = (i as i64 + di, j as i64 + dj, k as i64 + dk);
                                let inside = (1..=nx as i64).contains(&ii)
                                    && (0..=ny as i64).contains(&jj)
                                    && (0..=nz as i64).contains(&kk);
                                if ok && inside {
                                    nodes.push(first[node(ii as usize, jj as usize, kk as usize)]);
                                }
                            }
                        }
                    }
                    nodes.sort_unstable();
                    for _ in 0..3 {
                        for &f in &nodes {
                            col_idx.extend([f, f + 1, f + 2]);
                        }
                        row_ptr.push(col_idx.len());
                    }
                }
            }
        }
        let col_idx: Vec<u32> = col_idx.into_iter().map(|j: usize| j as u32).collect();
        let mut a = CsrMatrix::zeros(count, count, row_ptr, col_idx);
        let (e, nu) = (1.0, 0.3);
        let lambda = e * nu / ((1.0 + nu) * (1.0 - 2.0 * nu));
        let mu = e / (2.0 * (1.0 + nu));
        for k in 0..nz {
            for j in 0..ny {
                for i in 0..nx {
                    for perm in PERMS {
                        let mut c = [i, j, k];
                        let mut ids = [node(c[0], c[1], c[2]); 4];
                        for s in 0..3 {
                            c[perm[s]] += 1;
                            ids[s + 1] = node(c[0], c[1], c[2]);
                        }
                        let x = ids.map(|p| coords[p]);
                        let (_, vol) = element_stiffness(&x);
                        let g = gradients(&x);
                        for p in 0..4 {
                            let r0 = first[ids[p]];
                            if r0 == usize::MAX {
                                continue;
                            }
                            for q in 0..4 {
                                let c0 = first[ids[q]];
                                if c0 == usize::MAX {
                                    continue;
                                }
                                let gpq: f64 = (0..3).map(|d| g[p][d] * g[q][d]).sum();
                                for ii in 0..3 {
                                    let pos = a.find(r0 + ii, c0).expect("Kuhn edge");
                                    for kk in 0..3 {
                                        let mut v =
                                            lambda * g[p][ii] * g[q][kk] + mu * g[p][kk] * g[q][ii];
                                        if ii == kk {
                                            v += mu * gpq;
                                        }
                                        a.values[pos + kk] += vol * v;
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        // traction (0, 0, −1) on x = lx: each face square split along its (j, k) diagonal
        let mut b = vec![0.0; count];
        let share = h[1] * h[2] / 6.0;
        for k in 0..nz {
            for j in 0..ny {
                let corner = |dj: usize, dk: usize| first[node(nx, j + dj, k + dk)] + 2;
                for tri in [[(0, 0), (1, 0), (1, 1)], [(0, 0), (0, 1), (1, 1)]] {
                    for (dj, dk) in tri {
                        b[corner(dj, dk)] -= share;
                    }
                }
            }
        }
        KuhnElasticity { a, b, coords, unknowns }
    }
}

/// Gradients of the four barycentric functions of the tetrahedron `x`.
fn gradients(x: &[[f64; 3]; 4]) -> [[f64; 3]; 4] {
    let e = |a: usize| [x[a][0] - x[0][0], x[a][1] - x[0][1], x[a][2] - x[0][2]];
    let (e1, e2, e3) = (e(1), e(2), e(3));
    let cross = |u: [f64; 3], v: [f64; 3]| {
        [u[1] * v[2] - u[2] * v[1], u[2] * v[0] - u[0] * v[2], u[0] * v[1] - u[1] * v[0]]
    };
    let c = cross(e2, e3);
    let det = e1[0] * c[0] + e1[1] * c[1] + e1[2] * c[2];
    let g1 = c.map(|v| v / det);
    let g2 = cross(e3, e1).map(|v| v / det);
    let g3 = cross(e1, e2).map(|v| v / det);
    let g0 = [0, 1, 2].map(|d| -(g1[d] + g2[d] + g3[d]));
    [g0, g1, g2, g3]
}

#[test]
fn kuhn_elasticity_annihilates_rigid_motions_away_from_the_clamp() {
    let n = 4;
    let p = KuhnElasticity::new([n; 3], [1.0; 3]);
    assert_eq!(p.a.n_rows, 3 * n * (n + 1) * (n + 1));
    // the six rigid motions (translations; rotations (0, −z, y), (z, 0, −x), (−y, x, 0))
    for mode in 0..6 {
        let v: Vec<f64> = p
            .unknowns
            .iter()
            .map(|&(node, c)| {
                let [x, y, z] = p.coords[node];
                match (mode, c) {
                    (m, c) if m < 3 => (m == c) as u8 as f64,
                    (3, 1) => -z,
                    (3, 2) => y,
                    (4, 0) => z,
                    (4, 2) => -x,
                    (5, 0) => -y,
                    (5, 1) => x,
                    _ => 0.0,
                }
            })
            .collect();
        let mut av = vec![0.0; v.len()];
        p.a.mul_vec_into(&v, &mut av);
        for (r, &(node, _)) in p.unknowns.iter().enumerate() {
            if p.coords[node][0] > 1.5 / n as f64 {
                assert!(av[r].abs() < 1e-13, "mode {mode}, row {r}: {}", av[r]);
            }
        }
    }
    // the traction's resultant is (0, 0, −1)
    let total: f64 = p.b.iter().sum();
    assert!((total + 1.0).abs() < 1e-14, "{total}");
}
