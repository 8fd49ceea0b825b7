//! The two-hot-arm electro-thermal microactuator, built from its plan-view rectangles.
//!
//! The geometry is the polysilicon "double hot arm" actuator of
//! `data/microactuator/README.md` (Burns and Bright, Proc. SPIE 3224, 1997; the COMSOL model
//! "Thermal Actuator — Parameterized"), without the corner fillets, with the same
//! parameterization as the shared gmsh meshes (`data/gmsh/make_meshes.py`). All lengths are in
//! metres.
//!
//! # Geometry
//!
//! With hot-arm width d, cold-arm width d_w, gap g, pad width w_b, length difference w_v and
//! overall length L, the arm lengths are L₁ = L − w_b (long hot arm), L₂ = L − w_b − w_v
//! (short hot arm), L₃ = L − 2w_b − w_v − L/48 − L/6 (wide part of the cold arm) and
//! L₄ = L/6 (flexure). The layer (z ∈ [h_p, h_p + t], post height h_p, thickness t) is the
//! union of the rectangles (x₀, y₀, width, height):
//!
//! | part | rectangle |
//! |---|---|
//! | cold arm, wide part | (L − L₃, 0, L₃, d_w) |
//! | flexure | (L − L₃ − L₄, d_w − d, L₄, d) |
//! | cold-arm anchor pad | (L − L₃ − L₄ − w_b, 0, w_b, d_w) |
//! | short hot arm | (L − L₂, d_w + g, L₂, d) |
//! | its anchor pad | (L − L₂ − w_b, 0, w_b, d_w + g + d) |
//! | long hot arm | (L − L₁, d_w + 2g + d, L₁, d) |
//! | its anchor pad | (0, d_w + 2g + d, w_b, d_w + g + d) |
//! | tip link, long–short arm | (L − d, d_w + g + d, d, g) |
//! | tip link, short–cold arm | (L − d, d_w, d, g) |
//!
//! For the default parameters these are the rectangles of the README in µm: (90, 0, 150, 15),
//! (50, 12, 40, 3), (40, 0, 10, 15), (35, 18, 205, 3), (25, 0, 10, 21), (10, 24, 230, 3),
//! (0, 24, 10, 21), (237, 21, 3, 3), (237, 15, 3, 3).
//!
//! Below the layer (z ∈ [0, h_p]) stand three anchor posts, one under each pad, and three
//! dimples under the cold arm. An anchor post is its pad inset by d on the three sides away
//! from the arm: width a = w_b − 2d (along x), length 2.5 a (along y), at x₀ = pad x₀ + d and
//! y₀ = d (the two pads at y = 0) or y₀ = pad top − d − 2.5 a (the long arm's pad): 4 × 10 µm
//! at (3, 32), (28, 3) and (43, 3) for the defaults. The dimples are cylinders of radius d/2
//! centred at x = L − L₃/4, L − L₃/2, L − 3L₃/4, y = d_w/2 (1.5 µm at x = 202.5, 165,
//! 127.5 µm, y = 7.5 µm). A hexahedral grid cannot follow a circle, so **each dimple is
//! modelled as the square of equal area**, side d/2 · √π, centred on the cylinder's axis: the
//! dimple volume and base area (which carry the heat to the substrate) are exact, the shape of
//! its rim is not.
//!
//! # Grid
//!
//! The mesh is a tensor-product grid cut to the union. Along x and y the grid lines are every
//! edge of every rectangle, post and dimple (coordinates closer than 10⁻⁹ L are merged), and
//! each interval between them is split into ⌈length / max_cell_size⌉ equal parts; along z the
//! post height and the layer thickness are split likewise. A grid cell belongs to the mesh iff
//! its centre lies in a layer rectangle (cells of the layer's z range) or in a post or dimple
//! (cells of the post z range). As every edge is a grid line, cells are either inside or
//! outside each part, and the volume of the mesh is the volume of the union exactly (up to
//! rounding). Neighbouring cells share their nodes, so the mesh is conforming; grid nodes that
//! no cell touches are dropped.
//!
//! # Numbering, blocks, groups and tags (as in [`crate::generate::box_mesh`])
//!
//! Nodes are numbered in grid order (x fastest, then y, then z) among the used grid nodes;
//! node tags are 1-based positions. Block 0 holds the hexahedra (vertices in gmsh order, so
//! det J > 0), in grid order (x fastest, then y, then z): the posts and dimples come first,
//! then the layer. Block 1 holds one `Quad4` boundary facet per exterior face, node order
//! giving the outward normal, grouped by surface group in the order below. Cell tags are
//! 1-based and unique over the mesh (hexahedra 1..=n, then facets). Groups carry the names and
//! tags of the shared gmsh meshes:
//!
//! | group | dim | tag | cells |
//! |---|---|---|---|
//! | `polysilicon_layer` | 3 | 1 | the layer |
//! | `posts` | 3 | 2 | anchor posts and dimples |
//! | `anchor_hot_outer_base` | 2 | 11 | base (z = 0) of the post under the long hot arm's pad |
//! | `anchor_hot_inner_base` | 2 | 12 | base of the post under the short hot arm's pad |
//! | `anchor_cold_base` | 2 | 13 | base of the post under the cold arm's pad |
//! | `dimple_bases` | 2 | 14 | bases of the three dimples |
//! | `upper_surface` | 2 | 15 | the top face z = h_p + t |
//! | `other_exterior_surfaces` | 2 | 16 | every other exterior face |
//! | `free_end` | 2 | 17 | the exterior faces on the tip plane x = L |
//!
//! The first six surface groups partition the exterior faces. `free_end` is a subset of
//! `other_exterior_surfaces` and refers to the same facet cells (groups may overlap, as
//! gmsh physical groups do), so every exterior face has exactly one facet cell.
//!
//! `Hex20` and `Hex27` meshes are made from the `Hex8` one by [`to_second_order`] (facets
//! become `Quad8` / `Quad9`; cell ids, tags and groups are kept).

use crate::cell::CellType;
use crate::error::MeshError;
use crate::generate::to_second_order;
use crate::mesh::{CellBlock, CellId, Mesh, PhysicalGroup};

/// The parameters of the actuator and of its mesh (lengths in metres).
#[derive(Clone, Debug, PartialEq)]
pub struct ActuatorSpec {
    /// Hot-arm width d (also the flexure width, the tip-link width and the inset of the anchor
    /// posts in their pads; the dimple radius is d/2).
    pub hot_arm_width: f64,
    /// Cold-arm width d_w.
    pub cold_arm_width: f64,
    /// Gap g between neighbouring arms.
    pub gap: f64,
    /// Anchor-pad width w_b (along x).
    pub pad_width: f64,
    /// Length difference w_v of the two hot arms.
    pub length_difference: f64,
    /// Overall length L (the tip is the plane x = L).
    pub length: f64,
    /// Thickness t of the polysilicon layer.
    pub thickness: f64,
    /// Height h_p of the anchor posts and dimples (the layer's underside is at z = h_p).
    pub post_height: f64,
    /// Largest cell edge along x, y and z: every interval between grid lines is split into
    /// ⌈length / max⌉ equal parts.
    pub max_cell_size: [f64; 3],
    /// `Hex8`, `Hex20` or `Hex27`.
    pub cell_type: CellType,
}

impl Default for ActuatorSpec {
    /// The README dimensions (d = 3 µm, d_w = 15 µm, g = 3 µm, w_b = 10 µm, w_v = 25 µm,
    /// L = 240 µm, t = h_p = 2 µm), `Hex20` cells, and cells of at most 5 × 3 × 2 µm: one cell
    /// across each hot arm, the flexure and the gaps, one through the layer and one through
    /// the posts: 475 hexahedra, a coarse mesh meant for second-order cells; use
    /// [`ActuatorSpec::refined`] for convergence studies.
    fn default() -> Self {
        ActuatorSpec {
            hot_arm_width: 3e-6,
            cold_arm_width: 15e-6,
            gap: 3e-6,
            pad_width: 10e-6,
            length_difference: 25e-6,
            length: 240e-6,
            thickness: 2e-6,
            post_height: 2e-6,
            max_cell_size: [5e-6, 3e-6, 2e-6],
            cell_type: CellType::Hex20,
        }
    }
}

impl ActuatorSpec {
    /// The same actuator with every largest cell edge divided by `factor`.
    ///
    /// # Panics
    /// If `factor` is 0 (caller's mistake).
    pub fn refined(&self, factor: usize) -> Self {
        assert!(factor > 0, "ActuatorSpec::refined: the factor must be at least 1, got 0");
        ActuatorSpec {
            max_cell_size: self.max_cell_size.map(|h| h / factor as f64),
            ..self.clone()
        }
    }

    /// The plan-view layout of the parts (see the module docs for the formulas).
    pub fn layout(&self) -> ActuatorLayout {
        let (d, dw, g, wb, wv, l) = (
            self.hot_arm_width,
            self.cold_arm_width,
            self.gap,
            self.pad_width,
            self.length_difference,
            self.length,
        );
        let l1 = l - wb;
        let l2 = l - wb - wv;
        let l3 = l - 2.0 * wb - wv - l / 48.0 - l / 6.0;
        let l4 = l / 6.0;
        let hot_pad_height = dw + g + d;
        let long_y0 = dw + 2.0 * g + d;
        let cold_pad = Rect::new(l - l3 - l4 - wb, 0.0, wb, dw);
        let short_hot_pad = Rect::new(l - l2 - wb, 0.0, wb, hot_pad_height);
        let long_hot_pad = Rect::new(l - l1 - wb, long_y0, wb, hot_pad_height);
        let a = wb - 2.0 * d;
        let post_length = 2.5 * a;
        let side = 0.5 * d * std::f64::consts::PI.sqrt();
        let dimple = |xc: f64| Rect::new(xc - 0.5 * side, 0.5 * dw - 0.5 * side, side, side);
        ActuatorLayout {
            cold_arm: Rect::new(l - l3, 0.0, l3, dw),
            flexure: Rect::new(l - l3 - l4, dw - d, l4, d),
            cold_pad,
            short_hot_arm: Rect::new(l - l2, dw + g, l2, d),
            short_hot_pad,
            long_hot_arm: Rect::new(l - l1, long_y0, l1, d),
            long_hot_pad,
            tip_links: [Rect::new(l - d, dw + g + d, d, g), Rect::new(l - d, dw, d, g)],
            anchor_hot_outer: Rect::new(
                long_hot_pad.x0 + d,
                long_hot_pad.y1() - d - post_length,
                a,
                post_length,
            ),
            anchor_hot_inner: Rect::new(short_hot_pad.x0 + d, d, a, post_length),
            anchor_cold: Rect::new(cold_pad.x0 + d, d, a, post_length),
            dimples: [l - 0.25 * l3, l - 0.5 * l3, l - 0.75 * l3].map(dimple),
        }
    }

    fn check(&self) -> Result<(), MeshError> {
        let named = [
            ("hot_arm_width", self.hot_arm_width),
            ("cold_arm_width", self.cold_arm_width),
            ("gap", self.gap),
            ("pad_width", self.pad_width),
            ("length_difference", self.length_difference),
            ("length", self.length),
            ("thickness", self.thickness),
            ("post_height", self.post_height),
            ("max_cell_size[0]", self.max_cell_size[0]),
            ("max_cell_size[1]", self.max_cell_size[1]),
            ("max_cell_size[2]", self.max_cell_size[2]),
        ];
        for (name, v) in named {
            if !(v.is_finite() && v > 0.0) {
                return Err(invalid(format!("{name} = {v:e} m must be positive and finite")));
            }
        }
        if !matches!(self.cell_type, CellType::Hex8 | CellType::Hex20 | CellType::Hex27) {
            return Err(invalid(format!(
                "cell type {} is not hex8, hex20 or hex27",
                self.cell_type
            )));
        }
        let lay = self.layout();
        for (name, r) in lay.named_layer_rectangles().into_iter().chain(lay.named_supports()) {
            if !(r.width > 0.0 && r.height > 0.0) {
                return Err(invalid(format!(
                    "{name} has size {:e} × {:e} m; the parameters leave no room for it \
                     (the cold arm needs L − 2 w_b − w_v − L/48 − L/6 > 0, the flexure \
                     d < d_w, the posts w_b > 2 d)",
                    r.width, r.height
                )));
            }
        }
        Ok(())
    }
}

fn invalid(message: String) -> MeshError {
    MeshError::Inconsistent(format!("actuator: {message}"))
}

/// An axis-aligned rectangle in the x-y plane (metres).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rect {
    /// Lowest x.
    pub x0: f64,
    /// Lowest y.
    pub y0: f64,
    /// Extent along x.
    pub width: f64,
    /// Extent along y.
    pub height: f64,
}

impl Rect {
    /// The rectangle `[x0, x0 + width] × [y0, y0 + height]`.
    pub const fn new(x0: f64, y0: f64, width: f64, height: f64) -> Self {
        Rect { x0, y0, width, height }
    }

    /// Highest x.
    pub fn x1(&self) -> f64 {
        self.x0 + self.width
    }

    /// Highest y.
    pub fn y1(&self) -> f64 {
        self.y0 + self.height
    }

    /// width × height.
    pub fn area(&self) -> f64 {
        self.width * self.height
    }

    /// Whether (x, y) lies in the open rectangle (used for cell centres, which are never on
    /// an edge).
    pub fn contains(&self, x: f64, y: f64) -> bool {
        x > self.x0 && x < self.x1() && y > self.y0 && y < self.y1()
    }

    /// Whether the open rectangles overlap.
    pub fn overlaps(&self, other: &Rect) -> bool {
        self.x0 < other.x1() && other.x0 < self.x1() && self.y0 < other.y1() && other.y0 < self.y1()
    }
}

/// The plan view of the actuator: the rectangles of the layer and the footprints of the posts
/// and dimples, from [`ActuatorSpec::layout`].
#[derive(Clone, Debug, PartialEq)]
pub struct ActuatorLayout {
    /// Wide part of the cold arm.
    pub cold_arm: Rect,
    /// The thin flexure at the cold arm's root.
    pub flexure: Rect,
    /// The cold arm's anchor pad.
    pub cold_pad: Rect,
    /// The short (inner) hot arm.
    pub short_hot_arm: Rect,
    /// Its anchor pad.
    pub short_hot_pad: Rect,
    /// The long (outer) hot arm.
    pub long_hot_arm: Rect,
    /// Its anchor pad.
    pub long_hot_pad: Rect,
    /// The tip links: long–short hot arm, then short hot arm–cold arm.
    pub tip_links: [Rect; 2],
    /// The anchor post under the long hot arm's pad.
    pub anchor_hot_outer: Rect,
    /// The anchor post under the short hot arm's pad.
    pub anchor_hot_inner: Rect,
    /// The anchor post under the cold arm's pad.
    pub anchor_cold: Rect,
    /// The dimples (squares of the cylinders' area), from the tip towards the root.
    pub dimples: [Rect; 3],
}

impl ActuatorLayout {
    /// The nine rectangles of the layer, in the README's order: cold arm, flexure, cold pad,
    /// short hot arm, its pad, long hot arm, its pad, the two tip links.
    pub fn layer_rectangles(&self) -> [Rect; 9] {
        self.named_layer_rectangles().map(|(_, r)| r)
    }

    fn named_layer_rectangles(&self) -> [(&'static str, Rect); 9] {
        [
            ("cold arm", self.cold_arm),
            ("flexure", self.flexure),
            ("cold-arm pad", self.cold_pad),
            ("short hot arm", self.short_hot_arm),
            ("short hot arm's pad", self.short_hot_pad),
            ("long hot arm", self.long_hot_arm),
            ("long hot arm's pad", self.long_hot_pad),
            ("tip link (long-short)", self.tip_links[0]),
            ("tip link (short-cold)", self.tip_links[1]),
        ]
    }

    /// The footprints below the layer: the anchor posts (outer hot, inner hot, cold), then
    /// the three dimples.
    pub fn supports(&self) -> [Rect; 6] {
        self.named_supports().map(|(_, r)| r)
    }

    fn named_supports(&self) -> [(&'static str, Rect); 6] {
        [
            ("anchor post (outer hot)", self.anchor_hot_outer),
            ("anchor post (inner hot)", self.anchor_hot_inner),
            ("anchor post (cold)", self.anchor_cold),
            ("dimple 1", self.dimples[0]),
            ("dimple 2", self.dimples[1]),
            ("dimple 3", self.dimples[2]),
        ]
    }
}

/// Names and tags of the surface groups, in facet-block order; the first six partition the
/// exterior (`free_end`, tag 17, is added on top).
const SURFACES: [(&str, i32); 6] = [
    ("anchor_hot_outer_base", 11),
    ("anchor_hot_inner_base", 12),
    ("anchor_cold_base", 13),
    ("dimple_bases", 14),
    ("upper_surface", 15),
    ("other_exterior_surfaces", 16),
];
const UPPER: usize = 4;
const OTHER: usize = 5;

/// Largest number of grid cells accepted (a guard against a mistyped cell size).
const MAX_GRID_CELLS: usize = 200_000_000;

/// Grid lines along one axis: the sorted break points, merged within `tol`, each interval
/// split into ⌈length / max⌉ equal parts.
fn grid_lines(mut breaks: Vec<f64>, max: f64, tol: f64) -> Vec<f64> {
    breaks.sort_by(f64::total_cmp);
    breaks.dedup_by(|b, a| *b - *a <= tol);
    let mut lines = vec![breaks[0]];
    for w in breaks.windows(2) {
        let (a, b) = (w[0], w[1]);
        // The tolerance keeps an interval of exactly k·max from becoming k + 1 parts.
        let n = (((b - a) / max) * (1.0 - 1e-12)).ceil().max(1.0) as usize;
        for s in 1..n {
            lines.push(a + (b - a) * s as f64 / n as f64);
        }
        lines.push(b);
    }
    lines
}

/// Local hexahedron faces, in [`CellType::facets`] order, as (axis, high side).
const HEX_FACE_SIDES: [(usize, bool); 6] =
    [(2, false), (1, false), (0, false), (0, true), (1, true), (2, true)];

/// The actuator mesh; see the module docs for the geometry, grid, numbering and groups.
///
/// # Errors
/// [`MeshError::Inconsistent`] (message naming the parameter or part) if a parameter is not
/// positive and finite, the post height or thickness is below 10⁻⁹ L, the cell type is not a hexahedron, the parameters leave no room for a
/// part (e.g. L₃ ≤ 0 or w_b ≤ 2d), a post or dimple is not entirely below the layer, or the
/// cell sizes would give more than 2·10⁸ grid cells.
pub fn actuator_mesh(spec: &ActuatorSpec) -> Result<Mesh, MeshError> {
    spec.check()?;
    let lay = spec.layout();
    let layer = lay.layer_rectangles();
    let supports = lay.supports();
    let tol = 1e-9 * spec.length;
    if spec.post_height <= tol || spec.thickness <= tol {
        return Err(invalid(format!(
            "post height {:e} m and thickness {:e} m must exceed 1e-9 L = {tol:e} m",
            spec.post_height, spec.thickness
        )));
    }
    let breaks = |lo: fn(&Rect) -> f64, hi: fn(&Rect) -> f64| -> Vec<f64> {
        layer.iter().chain(&supports).flat_map(|r| [lo(r), hi(r)]).collect()
    };
    let xs = grid_lines(breaks(|r| r.x0, Rect::x1), spec.max_cell_size[0], tol);
    let ys = grid_lines(breaks(|r| r.y0, Rect::y1), spec.max_cell_size[1], tol);
    let top = spec.post_height + spec.thickness;
    let zs = grid_lines(vec![0.0, spec.post_height, top], spec.max_cell_size[2], tol);
    let kz_post = zs.iter().position(|&z| (z - spec.post_height).abs() <= tol).unwrap_or(0);
    let [nx, ny, nz] = [xs.len() - 1, ys.len() - 1, zs.len() - 1];
    let n_grid = nx.checked_mul(ny).and_then(|c| c.checked_mul(nz));
    if n_grid.is_none_or(|n| n > MAX_GRID_CELLS) {
        return Err(invalid(format!(
            "max_cell_size {:?} m gives a {nx} × {ny} × {nz} grid, more than {MAX_GRID_CELLS} cells",
            spec.max_cell_size
        )));
    }

    // Per column (i, j): in the layer? under which support (post or dimple)?
    const NONE: u8 = u8::MAX;
    let mut col_layer = vec![false; nx * ny];
    let mut col_support = vec![NONE; nx * ny];
    for j in 0..ny {
        let yc = 0.5 * (ys[j] + ys[j + 1]);
        for i in 0..nx {
            let xc = 0.5 * (xs[i] + xs[i + 1]);
            col_layer[i + nx * j] = layer.iter().any(|r| r.contains(xc, yc));
            if let Some(s) = supports.iter().position(|r| r.contains(xc, yc)) {
                col_support[i + nx * j] = s as u8;
            }
        }
    }
    if let Some(c) = (0..nx * ny).find(|&c| col_support[c] != NONE && !col_layer[c]) {
        let (i, j) = (c % nx, c / nx);
        let s = col_support[c] as usize;
        return Err(invalid(format!(
            "{} reaches ({:e}, {:e}) m, outside the layer",
            lay.named_supports()[s].0,
            0.5 * (xs[i] + xs[i + 1]),
            0.5 * (ys[j] + ys[j + 1])
        )));
    }
    let kept = |i: usize, j: usize, k: usize| -> bool {
        let c = i + nx * j;
        if k < kz_post { col_support[c] != NONE } else { col_layer[c] }
    };

    // Cells in grid order, and the grid nodes they use.
    let (gx, gxy) = (nx + 1, (nx + 1) * (ny + 1));
    let grid_node = |i: usize, j: usize, k: usize| i + gx * j + gxy * k;
    let corner = |i: usize, j: usize, k: usize, c: usize| {
        grid_node(i + (c & 1), j + ((c >> 1) & 1), k + ((c >> 2) & 1))
    };
    const HEX_CORNERS: [usize; 8] = [0b000, 0b001, 0b011, 0b010, 0b100, 0b101, 0b111, 0b110];
    let mut cell_of = vec![usize::MAX; nx * ny * nz];
    let mut cells: Vec<[usize; 3]> = Vec::new();
    let mut node_of = vec![usize::MAX; gxy * (nz + 1)];
    for k in 0..nz {
        for j in 0..ny {
            for i in 0..nx {
                if kept(i, j, k) {
                    cell_of[i + nx * (j + ny * k)] = cells.len();
                    cells.push([i, j, k]);
                    for c in HEX_CORNERS {
                        node_of[corner(i, j, k, c)] = 0;
                    }
                }
            }
        }
    }
    let mut coords = Vec::new();
    for k in 0..=nz {
        for j in 0..=ny {
            for i in 0..=nx {
                let g = grid_node(i, j, k);
                if node_of[g] == 0 {
                    node_of[g] = coords.len();
                    coords.push([xs[i], ys[j], zs[k]]);
                }
            }
        }
    }
    let n_vol = cells.len();
    let mut connectivity = Vec::with_capacity(8 * n_vol);
    for &[i, j, k] in &cells {
        connectivity.extend(HEX_CORNERS.map(|c| node_of[corner(i, j, k, c)]));
    }
    let volume =
        CellBlock { cell_type: CellType::Hex8, connectivity, tags: (1..=n_vol as u64).collect() };

    // Exterior faces, sorted into the surface groups.
    let mut by_group: [Vec<[usize; 4]>; 6] = Default::default();
    let mut free_end = Vec::new();
    let hex_faces = CellType::Hex8.facets();
    let n = [nx, ny, nz];
    for (cell, &[i, j, k]) in cells.iter().enumerate() {
        for (lf, &(axis, high)) in HEX_FACE_SIDES.iter().enumerate() {
            let mut at = [i, j, k];
            let exterior = if high {
                at[axis] += 1;
                at[axis] == n[axis] || !kept(at[0], at[1], at[2])
            } else if at[axis] == 0 {
                true
            } else {
                at[axis] -= 1;
                !kept(at[0], at[1], at[2])
            };
            if !exterior {
                continue;
            }
            let nodes = volume.cell(cell);
            let facet: [usize; 4] = std::array::from_fn(|a| nodes[hex_faces[lf].nodes[a]]);
            let group = match (axis, high) {
                (2, false) if k == 0 => match col_support[i + nx * j] {
                    s @ 0..=2 => s as usize,
                    _ => 3,
                },
                (2, true) if k + 1 == nz => UPPER,
                _ => OTHER,
            };
            if group == OTHER && axis == 0 && high && (xs[i + 1] - spec.length).abs() <= tol {
                free_end.push(by_group[OTHER].len());
            }
            by_group[group].push(facet);
        }
    }
    let mut facets = CellBlock::new(CellType::Quad4);
    let mut groups = vec![
        PhysicalGroup {
            name: "polysilicon_layer".into(),
            tag: 1,
            dim: 3,
            cells: (0..n_vol)
                .filter(|&c| cells[c][2] >= kz_post)
                .map(|index| CellId { block: 0, index })
                .collect(),
        },
        PhysicalGroup {
            name: "posts".into(),
            tag: 2,
            dim: 3,
            cells: (0..n_vol)
                .filter(|&c| cells[c][2] < kz_post)
                .map(|index| CellId { block: 0, index })
                .collect(),
        },
    ];
    let mut other_start = 0;
    for ((name, tag), list) in SURFACES.iter().zip(&by_group) {
        let start = facets.len();
        if *tag == SURFACES[OTHER].1 {
            other_start = start;
        }
        for f in list {
            facets.push(f, (n_vol + facets.len() + 1) as u64);
        }
        groups.push(PhysicalGroup {
            name: (*name).into(),
            tag: *tag,
            dim: 2,
            cells: (start..facets.len()).map(|index| CellId { block: 1, index }).collect(),
        });
    }
    groups.push(PhysicalGroup {
        name: "free_end".into(),
        tag: 17,
        dim: 2,
        cells: free_end.into_iter().map(|p| CellId { block: 1, index: other_start + p }).collect(),
    });
    let n_nodes = coords.len();
    let mesh = Mesh {
        coords,
        node_tags: (1..=n_nodes as u64).collect(),
        blocks: vec![volume, facets],
        groups,
    };
    Ok(match spec.cell_type {
        CellType::Hex20 => to_second_order(&mesh, false),
        CellType::Hex27 => to_second_order(&mesh, true),
        _ => mesh,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_lines_merge_close_breaks_and_split_long_intervals() {
        let lines = grid_lines(vec![3.0, 0.0, 1.0, 1.0 + 1e-12, 3.0], 1.0, 1e-9);
        assert_eq!(lines, vec![0.0, 1.0, 2.0, 3.0]);
        let lines = grid_lines(vec![0.0, 2.5], 1.0, 1e-9);
        assert_eq!(lines.len(), 4);
        assert!((lines[1] - 2.5 / 3.0).abs() < 1e-15);
    }

    #[test]
    fn bad_parameters_are_errors_that_name_them() {
        let spec = ActuatorSpec { gap: -1e-6, ..Default::default() };
        let err = actuator_mesh(&spec).unwrap_err().to_string();
        assert!(err.contains("gap"), "{err}");
        let spec = ActuatorSpec { max_cell_size: [1e-6, f64::NAN, 1e-6], ..Default::default() };
        let err = actuator_mesh(&spec).unwrap_err().to_string();
        assert!(err.contains("max_cell_size[1]"), "{err}");
        // w_b ≤ 2d leaves no room for the anchor posts.
        let spec = ActuatorSpec { hot_arm_width: 5e-6, ..Default::default() };
        let err = actuator_mesh(&spec).unwrap_err().to_string();
        assert!(err.contains("anchor post"), "{err}");
        // Wide pads make posts (2.5 (w_b - 2d) long) that reach out of the long arm's pad.
        let spec = ActuatorSpec { pad_width: 30e-6, ..Default::default() };
        let err = actuator_mesh(&spec).unwrap_err().to_string();
        assert!(err.contains("outside the layer"), "{err}");
        let spec = ActuatorSpec { thickness: 1e-16, ..Default::default() };
        let err = actuator_mesh(&spec).unwrap_err().to_string();
        assert!(err.contains("thickness"), "{err}");
        let spec = ActuatorSpec { cell_type: CellType::Tet4, ..Default::default() };
        assert!(actuator_mesh(&spec).is_err());
        let spec = ActuatorSpec { max_cell_size: [1e-12; 3], ..Default::default() };
        let err = actuator_mesh(&spec).unwrap_err().to_string();
        assert!(err.contains("grid"), "{err}");
    }
}
