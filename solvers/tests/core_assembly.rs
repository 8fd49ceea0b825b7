//! Assembly: pattern and values on a Kuhn-split cube, and bitwise reproducibility across
//! thread counts.

use gradfem_solvers::assembly::{AssemblyPattern, CONSTRAINED};
use gradfem_solvers::sparse::CsrMatrix;

/// Unit cube split into n³ cells of 6 Kuhn tetrahedra each: (coordinates, tets).
fn kuhn_box(n: usize) -> (Vec<[f64; 3]>, Vec<[usize; 4]>) {
    let m = n + 1;
    let id = |i: usize, j: usize, k: usize| i + m * (j + m * k);
    let h = 1.0 / n as f64;
    let mut x = Vec::with_capacity(m * m * m);
    for k in 0..m {
        for j in 0..m {
            for i in 0..m {
                x.push([i as f64 * h, j as f64 * h, k as f64 * h]);
            }
        }
    }
    const PERMS: [[usize; 3]; 6] =
        [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]];
    let mut tets = Vec::with_capacity(6 * n * n * n);
    for k in 0..n {
        for j in 0..n {
            for i in 0..n {
                for p in PERMS {
                    let mut c = [i, j, k];
                    let mut t = [id(i, j, k); 4];
                    for (s, &axis) in p.iter().enumerate() {
                        c[axis] += 1;
                        t[s + 1] = id(c[0], c[1], c[2]);
                    }
                    tets.push(t);
                }
            }
        }
    }
    (x, tets)
}

/// P1 Laplacian element matrix kₐᵦ = |T| ∇λₐ·∇λᵦ and load fₐ = |T| f(x̄)/4.
fn p1_laplacian(x: &[[f64; 3]; 4], ke: &mut [f64], fe: &mut [f64], f: f64) {
    let d = |a: usize, c: usize| x[a][c] - x[0][c];
    let j = [[d(1, 0), d(2, 0), d(3, 0)], [d(1, 1), d(2, 1), d(3, 1)], [d(1, 2), d(2, 2), d(3, 2)]];
    let det = j[0][0] * (j[1][1] * j[2][2] - j[1][2] * j[2][1])
        - j[0][1] * (j[1][0] * j[2][2] - j[1][2] * j[2][0])
        + j[0][2] * (j[1][0] * j[2][1] - j[1][1] * j[2][0]);
    // Rows of J⁻¹ are ∇λ₁..₃ (cofactors / det).
    let inv = [
        [
            (j[1][1] * j[2][2] - j[1][2] * j[2][1]) / det,
            (j[0][2] * j[2][1] - j[0][1] * j[2][2]) / det,
            (j[0][1] * j[1][2] - j[0][2] * j[1][1]) / det,
        ],
        [
            (j[1][2] * j[2][0] - j[1][0] * j[2][2]) / det,
            (j[0][0] * j[2][2] - j[0][2] * j[2][0]) / det,
            (j[0][2] * j[1][0] - j[0][0] * j[1][2]) / det,
        ],
        [
            (j[1][0] * j[2][1] - j[1][1] * j[2][0]) / det,
            (j[0][1] * j[2][0] - j[0][0] * j[2][1]) / det,
            (j[0][0] * j[1][1] - j[0][1] * j[1][0]) / det,
        ],
    ];
    let mut g = [[0.0; 3]; 4];
    for c in 0..3 {
        g[1][c] = inv[0][c];
        g[2][c] = inv[1][c];
        g[3][c] = inv[2][c];
        g[0][c] = -(inv[0][c] + inv[1][c] + inv[2][c]);
    }
    let vol = det.abs() / 6.0;
    for a in 0..4 {
        for b in 0..4 {
            ke[4 * a + b] = vol * (g[a][0] * g[b][0] + g[a][1] * g[b][1] + g[a][2] * g[b][2]);
        }
        fe[a] = vol * f / 4.0;
    }
}

/// Element dofs with boundary nodes constrained: (n_unknowns, offsets, dofs, unknown → node).
fn dirichlet_dofs(
    x: &[[f64; 3]],
    tets: &[[usize; 4]],
) -> (usize, Vec<usize>, Vec<usize>, Vec<usize>) {
    let on_boundary = |p: &[f64; 3]| p.iter().any(|&c| c.abs() < 1e-12 || (c - 1.0).abs() < 1e-12);
    let mut number = vec![CONSTRAINED; x.len()];
    let mut nodes = Vec::new();
    for (i, p) in x.iter().enumerate() {
        if !on_boundary(p) {
            number[i] = nodes.len();
            nodes.push(i);
        }
    }
    let dofs: Vec<usize> = tets.iter().flat_map(|t| t.iter().map(|&v| number[v])).collect();
    let offsets: Vec<usize> = (0..=tets.len()).map(|e| 4 * e).collect();
    (nodes.len(), offsets, dofs, nodes)
}

#[test]
fn kuhn_cube_pattern_and_laplacian() {
    let n = 4;
    let (x, tets) = kuhn_box(n);
    let (nu, offsets, dofs, nodes) = dirichlet_dofs(&x, &tets);
    assert_eq!(nu, 27);
    let p = AssemblyPattern::new(nu, &offsets, &dofs);
    // Interior nodes of a Kuhn mesh have 14 neighbours + themselves; here the stencil is cut by
    // the boundary. The pattern must be symmetric with sorted rows and a stored diagonal.
    let a0 = p.new_matrix();
    for i in 0..nu {
        let (cols, _) = a0.row(i);
        assert!(cols.windows(2).all(|w| w[0] < w[1]));
        assert!(cols.contains(&(i as u32)));
        for &j in cols {
            assert!(a0.find(j as usize, i).is_some(), "pattern not symmetric at ({i}, {j})");
        }
    }
    // The centre node (2,2,2) has all 14 neighbours inside.
    let centre = nodes.iter().position(|&v| v == 2 + 5 * (2 + 5 * 2)).unwrap();
    assert_eq!(a0.row(centre).0.len(), 15);

    let mut a = p.new_matrix();
    let mut f = vec![0.0; nu];
    p.assemble_into(&mut a, &mut f, |e, ke, fe| {
        let xe = tets[e].map(|v| x[v]);
        p1_laplacian(&xe, ke, fe, 1.0);
    });
    // Symmetric; the load sums to the volume of the interior nodes' supports; a linear
    // function u = x + 2y − z is reproduced by the rows of interior nodes whose neighbours
    // are all unknowns (the centre node): (A u)_centre = 0 for harmonic u.
    for i in 0..nu {
        let (cols, vals) = a.row(i);
        for (&j, &v) in cols.iter().zip(vals) {
            assert!((v - a.values[a.find(j as usize, i).unwrap()]).abs() < 1e-14);
        }
    }
    let u: Vec<f64> = nodes.iter().map(|&v| x[v][0] + 2.0 * x[v][1] - x[v][2]).collect();
    let mut au = vec![0.0; nu];
    a.mul_vec_into(&u, &mut au);
    assert!(au[centre].abs() < 1e-13, "A u at the centre = {}", au[centre]);
    // Diagonal of the Kuhn P1 Laplacian at an interior node: 6h (h = 1/4).
    assert!((a.values[a.find(centre, centre).unwrap()] - 6.0 * 0.25).abs() < 1e-13);
    // Each interior node carries h³ of load.
    assert!((f[centre] - 0.25f64.powi(3)).abs() < 1e-15);
}

fn assemble_with_threads(
    p: &AssemblyPattern,
    x: &[[f64; 3]],
    tets: &[[usize; 4]],
    threads: usize,
) -> (CsrMatrix, Vec<f64>) {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
    pool.install(|| {
        let mut a = p.new_matrix();
        let mut f = vec![0.0; p.n_unknowns()];
        p.assemble_into(&mut a, &mut f, |e, ke, fe| {
            let xe = tets[e].map(|v| x[v]);
            p1_laplacian(&xe, ke, fe, 1.0 + (e % 7) as f64 * 0.1);
        });
        (a, f)
    })
}

#[test]
fn assembly_is_bitwise_identical_for_1_and_2_threads() {
    let n = 12; // 10368 tets
    let (mut x, mut tets) = kuhn_box(n);
    // Perturb interior coordinates and shuffle the element order (deterministic LCG), so that
    // sums are order-sensitive in floating point.
    let mut s: u64 = 0x2545_f491_4f6c_dd1d;
    let mut rnd = move || {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (s >> 11) as f64 / (1u64 << 53) as f64
    };
    let h = 1.0 / n as f64;
    for p in x.iter_mut() {
        if p.iter().all(|&c| c > 1e-12 && c < 1.0 - 1e-12) {
            for c in p.iter_mut() {
                *c += 0.2 * h * (rnd() - 0.5);
            }
        }
    }
    for i in (1..tets.len()).rev() {
        let j = (rnd() * (i + 1) as f64) as usize;
        tets.swap(i, j);
    }
    let (nu, offsets, dofs, _) = dirichlet_dofs(&x, &tets);
    let p = AssemblyPattern::new(nu, &offsets, &dofs);
    assert!(p.n_colours() > 1);
    let (a1, f1) = assemble_with_threads(&p, &x, &tets, 1);
    let (a2, f2) = assemble_with_threads(&p, &x, &tets, 2);
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&a1.values), bits(&a2.values));
    assert_eq!(bits(&f1), bits(&f2));
    // And the assembly is right: row sums of the Laplacian vanish for rows whose stencil is all
    // unknowns; check against an independent sequential triplet sum.
    let mut dense_diag = vec![0.0; nu];
    for (e, t) in tets.iter().enumerate() {
        let mut ke = [0.0; 16];
        let mut fe = [0.0; 4];
        p1_laplacian(&t.map(|v| x[v]), &mut ke, &mut fe, 1.0 + (e % 7) as f64 * 0.1);
        for a in 0..4 {
            let d = dofs[4 * e + a];
            if d != CONSTRAINED {
                dense_diag[d] += ke[5 * a];
            }
        }
    }
    for (i, d) in a1.diagonal().iter().enumerate() {
        assert!(
            (d - dense_diag[i]).abs() <= 1e-12 * d.abs(),
            "diagonal {i}: {d} vs {}",
            dense_diag[i]
        );
    }
}
