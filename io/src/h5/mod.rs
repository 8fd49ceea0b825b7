//! Results files: HDF5 (`.h5`, all data) plus XDMF 3 (`.xdmf`, a light XML index that ParaView
//! and VisIt open), written with [`Results`] and read back with [`read_results`].
//!
//! # Library choice
//!
//! HDF5 is written and read with the pure-Rust crate `hdf5-pure`. The bindings to the C library
//! (`hdf5`, `hdf5-metno`) need `libhdf5` or CMake on the machine, and a new user's machine has
//! only the Rust toolchain. Files written here are read by h5py and the C library (checked by
//! `io/tests/py/check_h5.py`).
//!
//! # Writing
//!
//! ```no_run
//! # use gradfem_io::h5::*;
//! # let mesh = gradfem_mesh::mesh::Mesh::default();
//! # let temperature: Vec<f64> = vec![];
//! let mut results = Results::new(&mesh, CellSelection::TopDimension);
//! for f in mesh_group_fields(&mesh, CellSelection::TopDimension) {
//!     results.add_static_cell_field(f);
//! }
//! results.add_step(Step {
//!     time: 1.0,
//!     fields: vec![Field::node("T", "K", FieldValues::Scalar(temperature))],
//! });
//! results.write("out/run.xdmf".as_ref())?; // writes out/run.h5, then out/run.xdmf
//! # Ok::<(), H5Error>(())
//! ```
//!
//! Both files are written atomically (see [`crate::atomic`]), the `.h5` first and the `.xdmf`
//! last, so a crash never leaves an `.xdmf` pointing at a missing or partial `.h5`.
//!
//! # Layout of the `.h5` file (format `gradfem-results`, version 1)
//!
//! ```text
//! /                         attrs: format = "gradfem-results", version = 1 (i64),
//!                                  cell_selection = "top_dimension" | "all", n_steps (i64)
//! /mesh/coordinates         f64 [n_nodes, 3]
//! /mesh/node_tags           u64 [n_nodes]      (gmsh node tags / ANSYS node numbers)
//! /mesh/blocks/<i>_<type>/connectivity  u64 [n_cells, nodes_per_cell], 0-based node indices,
//!                                        gradfem = gmsh local node order
//! /mesh/blocks/<i>_<type>/tags          u64 [n_cells]   (gmsh element tags / ANSYS numbers)
//!                           attrs: cell_type (e.g. "tet10"), index = i (i64), selected (0/1)
//! /mesh/topology/<i>_<type> i64 [n_cells, nodes_per_cell]: the same connectivity permuted to
//!                           XDMF/VTK node order (see [`vtk_node_order`]); only for blocks
//!                           written as cells, and only non-empty ones
//! /mesh/topology/mixed      i64 [n]: when more than one block is written, all their cells as
//!                           one XDMF `Mixed` topology: per cell its XDMF type number (a node
//!                           count after it for poly-vertices and poly-lines), then its nodes
//!                           in XDMF/VTK order; blocks in mesh order
//! /mesh/groups/<name>/block u64 [n]; /mesh/groups/<name>/index u64 [n]: the group's cells
//!                           (block number, index inside the block)
//!                           attrs: name, tag (i64), dim (i64), index (i64, order in the mesh)
//! /static/<field>           values written once (group ids, per-element parameters)
//! /steps/<k>/<field>        k = 0, 1, ...: one group per time or load step; attrs time (f64),
//!                           index = k (i64)
//! ```
//!
//! Every field dataset is f64 with shape `[n]` (scalar), `[n, 3]` (vector), `[n, 9]` (tensor,
//! row-major 3×3) or `[n, 6]` (`tensor6`: a symmetric tensor by its upper triangle row by row,
//! xx, xy, xz, yy, yz, zz, which XDMF calls `Tensor6`), where `n` is the number of nodes (`centering = "node"`) or of selected cells
//! (`centering = "cell"`): the cells of the blocks chosen by [`CellSelection`], blocks in mesh
//! order, cells in block order. Field datasets carry attrs `name` (the field's name), `centering`,
//! `kind` ("scalar" / "vector" / "tensor" / "tensor6"), `index` (position in its step) and
//! `units`.
//!
//! Units: every dataset has a string attribute `units`: SI symbols for quantities (`m` for the
//! coordinates unless [`Results::set_length_unit`] says otherwise, `K`, `Pa`, `W/m²`, …),
//! `K/(W/(m·K))` and the like for derivatives (see [`derivative_unit`]), and `1` for
//! dimensionless numbers, tags, indices and connectivity.
//!
//! Object names: a field or group name is used as the HDF5 link name after escaping every byte
//! outside `[A-Za-z0-9_.+-=,;()[]]` (and a leading `.`) as `%XX`, so `group:top plate`
//! becomes `group%3Atop%20plate` — XDMF reads `file.h5:/path` and breaks on `:` and spaces. The
//! exact name is always in the `name` attribute. String attributes are fixed-length UTF-8,
//! which h5py returns as `bytes` (`.decode()` them). In h5py:
//!
//! ```text
//! f = h5py.File("run.h5"); xyz = f["/mesh/coordinates"][:]
//! T = f["/steps/0/T"][:]; t = f["/steps/0"].attrs["time"]
//! ```
//!
//! # The `.xdmf` file
//!
//! A temporal collection with one uniform grid per step (just that grid if there are no
//! steps), with `/mesh/coordinates` as `XYZ` geometry and every written cell: the block's own
//! topology when one (non-empty) block is written, else the `Mixed` topology
//! `/mesh/topology/mixed`. Every attribute refers to its whole dataset, with no hyperslab
//! selections: cell fields over several blocks (the group masks of `mesh-convert`, over
//! facets and volume cells) were hyperslabs of one dataset per block grid before, and
//! ParaView's XDMF readers dropped them. Static fields appear in every step. Heavy data is referenced as `"<base>.h5:/path"` relative to the
//! `.xdmf` file, so the pair can be moved together.

mod read;
mod vtk_order;
mod xdmf;

use std::io;
use std::path::{Path, PathBuf};

use gradfem_mesh::mesh::Mesh;
use hdf5_pure::{AttrValue, FileBuilder, GroupBuilder};

use crate::atomic::{write_atomic, write_bytes_atomic};

pub use read::{ResultsData, read_dataset_f64, read_results, read_results_bytes};
pub use vtk_order::{vtk_node_order, xdmf_topology};

/// The `format` attribute of the root group of a results file.
pub const FORMAT_NAME: &str = "gradfem-results";
/// The `version` attribute of the root group of a results file written by this code.
pub const FORMAT_VERSION: i64 = 1;

/// Values of one field at nodes or cells.
#[derive(Clone, Debug, PartialEq)]
pub enum FieldValues {
    /// One number per entity.
    Scalar(Vec<f64>),
    /// A 3-vector per entity.
    Vector(Vec<[f64; 3]>),
    /// A 3×3 tensor per entity, row-major: `[t00, t01, t02, t10, …, t22]`.
    Tensor(Vec<[f64; 9]>),
    /// A symmetric 3×3 tensor per entity by its upper triangle, row by row:
    /// `[xx, xy, xz, yy, yz, zz]` (XDMF's `Tensor6`).
    SymTensor(Vec<[f64; 6]>),
}

impl FieldValues {
    /// Number of entities (nodes or cells) the values cover.
    pub fn len(&self) -> usize {
        match self {
            FieldValues::Scalar(v) => v.len(),
            FieldValues::Vector(v) => v.len(),
            FieldValues::Tensor(v) => v.len(),
            FieldValues::SymTensor(v) => v.len(),
        }
    }

    /// Symmetric tensors given in Voigt order `[xx, yy, zz, yz, xz, xy]` (stress, strain).
    pub fn symmetric_from_voigt(voigt: &[[f64; 6]]) -> Self {
        FieldValues::SymTensor(voigt.iter().map(|v| [v[0], v[5], v[4], v[1], v[3], v[2]]).collect())
    }

    /// Whether there are no entities.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of components per entity (1, 3, 9 or 6).
    pub fn n_components(&self) -> usize {
        match self {
            FieldValues::Scalar(_) => 1,
            FieldValues::Vector(_) => 3,
            FieldValues::Tensor(_) => 9,
            FieldValues::SymTensor(_) => 6,
        }
    }

    /// All values, entity after entity (no copy).
    pub fn as_flat(&self) -> &[f64] {
        match self {
            FieldValues::Scalar(v) => v,
            FieldValues::Vector(v) => v.as_flattened(),
            FieldValues::Tensor(v) => v.as_flattened(),
            FieldValues::SymTensor(v) => v.as_flattened(),
        }
    }

    /// `"scalar"`, `"vector"`, `"tensor"` or `"tensor6"`, as stored in the `kind` attribute.
    pub fn kind_name(&self) -> &'static str {
        match self {
            FieldValues::Scalar(_) => "scalar",
            FieldValues::Vector(_) => "vector",
            FieldValues::Tensor(_) => "tensor",
            FieldValues::SymTensor(_) => "tensor6",
        }
    }

    /// The XDMF `AttributeType` of the values.
    pub fn xdmf_type(&self) -> &'static str {
        match self {
            FieldValues::Scalar(_) => "Scalar",
            FieldValues::Vector(_) => "Vector",
            FieldValues::Tensor(_) => "Tensor",
            FieldValues::SymTensor(_) => "Tensor6",
        }
    }
}

/// Where a field's values live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Centering {
    /// One value per mesh node.
    Node,
    /// One value per selected cell (see [`CellSelection`]).
    Cell,
}

impl Centering {
    /// `"node"` or `"cell"`, as stored in the `centering` attribute.
    pub fn name(self) -> &'static str {
        match self {
            Centering::Node => "node",
            Centering::Cell => "cell",
        }
    }
}

/// A named field with its unit.
#[derive(Clone, Debug, PartialEq)]
pub struct Field {
    /// The name ParaView shows.
    pub name: String,
    /// Where the values live.
    pub centering: Centering,
    /// The values.
    pub values: FieldValues,
    /// The unit of the values, as stored in the dataset's `units` attribute: an SI symbol
    /// (`K`, `Pa`, `W/(m·K)`), `1` for a dimensionless number, or `K/(W/(m·K))` and the like
    /// for a derivative. Empty only in files written before units were recorded.
    pub unit: String,
}

impl Field {
    /// A field with one value per node, in `unit`.
    pub fn node(name: impl Into<String>, unit: impl Into<String>, values: FieldValues) -> Self {
        Field { name: name.into(), centering: Centering::Node, values, unit: unit.into() }
    }

    /// A field with one value per selected cell, in `unit`.
    pub fn cell(name: impl Into<String>, unit: impl Into<String>, values: FieldValues) -> Self {
        Field { name: name.into(), centering: Centering::Cell, values, unit: unit.into() }
    }
}

/// The unit of a derivative `d(of)/d(by)` for a `units` attribute: `of/by` with `by`
/// bracketed when it is compound (`K/(W/(m·K))`); `of` alone when `by` is dimensionless.
pub fn derivative_unit(of: &str, by: &str) -> String {
    let of = if of.is_empty() { "1" } else { of };
    match by {
        "" | "1" => of.to_string(),
        b if b.chars().any(|c| matches!(c, '/' | '·' | '*' | ' ')) => format!("{of}/({b})"),
        b => format!("{of}/{b}"),
    }
}

/// The fields of one time step or load step.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// Time (or load factor) of the step, shown by ParaView's time control.
    pub time: f64,
    pub fields: Vec<Field>,
}

/// Which cell blocks are written as cells (topologies in the XDMF, rows of cell fields).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CellSelection {
    /// The blocks whose dimension is the mesh's dimension (the volume cells of a 3D mesh;
    /// boundary facets are left out).
    TopDimension,
    /// Every block, volume cells and boundary facets alike.
    All,
}

impl CellSelection {
    /// The indices of the selected blocks, in mesh order (empty blocks included; they add no
    /// cells).
    pub fn blocks(self, mesh: &Mesh) -> Vec<usize> {
        let dim = mesh.dim();
        (0..mesh.blocks.len())
            .filter(|&b| match self {
                CellSelection::All => true,
                CellSelection::TopDimension => mesh.blocks[b].cell_type.dim() == dim,
            })
            .collect()
    }

    /// Number of selected cells: the length of a cell field.
    pub fn n_cells(self, mesh: &Mesh) -> usize {
        self.blocks(mesh).iter().map(|&b| mesh.blocks[b].len()).sum()
    }

    /// The name stored in the root attribute `cell_selection`.
    pub fn name(self) -> &'static str {
        match self {
            CellSelection::TopDimension => "top_dimension",
            CellSelection::All => "all",
        }
    }

    /// Parse [`CellSelection::name`].
    pub fn from_name(s: &str) -> Option<Self> {
        match s {
            "top_dimension" => Some(CellSelection::TopDimension),
            "all" => Some(CellSelection::All),
            _ => None,
        }
    }

    /// For every block, the position of its first cell among the selected cells
    /// (`None` for unselected blocks).
    fn offsets(self, mesh: &Mesh) -> Vec<Option<usize>> {
        let mut offsets = vec![None; mesh.blocks.len()];
        let mut next = 0;
        for b in self.blocks(mesh) {
            offsets[b] = Some(next);
            next += mesh.blocks[b].len();
        }
        offsets
    }
}

/// Errors of reading or writing results files; each names the file and the object concerned.
#[derive(Debug, thiserror::Error)]
pub enum H5Error {
    /// A results path must end in `.h5` or `.xdmf`.
    #[error("{}: a results file name must end in .h5 or .xdmf", path.display())]
    Extension { path: PathBuf },
    /// The file system refused.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The HDF5 layer failed on an object.
    #[error("{}: HDF5 error at '{object}': {source}", path.display())]
    Hdf5 {
        path: PathBuf,
        object: String,
        #[source]
        source: hdf5_pure::Error,
    },
    /// A dataset, group or attribute the format requires is absent.
    #[error("{}: missing '{object}'", path.display())]
    Missing { path: PathBuf, object: String },
    /// An object exists but has the wrong type, shape or content.
    #[error("{}: '{object}' is malformed: {reason}", path.display())]
    Malformed { path: PathBuf, object: String, reason: String },
    /// The file is HDF5 but not a gradfem results file of a version this code reads.
    #[error("{}: not a gradfem results file ({found})", path.display())]
    NotResults { path: PathBuf, found: String },
}

/// The `.h5` and `.xdmf` paths of a results path given with either extension.
pub fn results_paths(path: &Path) -> Result<(PathBuf, PathBuf), H5Error> {
    let ext = path.extension().and_then(|e| e.to_str()).map(|e| e.to_ascii_lowercase());
    match ext.as_deref() {
        Some("h5") | Some("xdmf") => Ok((path.with_extension("h5"), path.with_extension("xdmf"))),
        _ => Err(H5Error::Extension { path: path.to_path_buf() }),
    }
}

/// Escape a name into one HDF5 link name that XDMF's `file:path` syntax survives (see the
/// module doc). Injective: `%` itself is escaped.
pub(crate) fn escape_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for (i, b) in name.bytes().enumerate() {
        let keep = b.is_ascii_alphanumeric()
            || matches!(b, b'_' | b'+' | b'-' | b'=' | b',' | b';' | b'(' | b')' | b'[' | b']')
            || (b == b'.' && i > 0);
        if keep {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Link name of block `i` under `/mesh/blocks` and `/mesh/topology`.
fn block_name(mesh: &Mesh, i: usize) -> String {
    format!("{i}_{}", mesh.blocks[i].cell_type.name())
}

/// Builder of a results file: the mesh, static fields and any number of steps, written by
/// [`Results::write`] as `.h5` + `.xdmf`.
///
/// Size checks are `assert!`s (they are the caller's programming mistakes): a node field has
/// `mesh.n_nodes()` values, a cell field [`CellSelection::n_cells`] values, and field names are
/// non-empty and unique among the static fields and within a step, and no step field takes the
/// name of a static field.
pub struct Results<'a> {
    mesh: &'a Mesh,
    selection: CellSelection,
    n_cells: usize,
    static_fields: Vec<Field>,
    steps: Vec<Step>,
    length_unit: String,
}

impl<'a> Results<'a> {
    /// Results on `mesh`, with cells chosen by `selection`; coordinates in metres.
    pub fn new(mesh: &'a Mesh, selection: CellSelection) -> Self {
        Results {
            mesh,
            selection,
            n_cells: selection.n_cells(mesh),
            static_fields: Vec::new(),
            steps: Vec::new(),
            length_unit: "m".into(),
        }
    }

    /// The unit of the coordinates (`units` of `/mesh/coordinates`), `m` unless set here (a
    /// mesh converted without scaling keeps its file's unit).
    pub fn set_length_unit(&mut self, unit: impl Into<String>) -> &mut Self {
        self.length_unit = unit.into();
        self
    }

    /// Number of selected cells: the length every cell field must have.
    pub fn n_cells(&self) -> usize {
        self.n_cells
    }

    /// Number of steps added so far.
    pub fn n_steps(&self) -> usize {
        self.steps.len()
    }

    fn check_field(&self, f: &Field, context: &str) {
        assert!(!f.name.is_empty(), "{context}: a field needs a name");
        let expected = match f.centering {
            Centering::Node => self.mesh.n_nodes(),
            Centering::Cell => self.n_cells,
        };
        assert_eq!(
            f.values.len(),
            expected,
            "{context}: field '{}' ({} centred) has {} values, the mesh has {expected} {}s \
             (cell selection {:?})",
            f.name,
            f.centering.name(),
            f.values.len(),
            f.centering.name(),
            self.selection
        );
    }

    /// Add a field written once, not per step (group ids, per-element parameters, a reference
    /// configuration). Node and cell fields are both accepted.
    pub fn add_static_field(&mut self, field: Field) -> &mut Self {
        self.check_field(&field, "static field");
        assert!(
            self.static_fields.iter().all(|f| f.name != field.name),
            "static field '{}' added twice",
            field.name
        );
        assert!(
            self.steps.iter().all(|s| s.fields.iter().all(|f| f.name != field.name)),
            "static field '{}' has the name of a step field",
            field.name
        );
        self.static_fields.push(field);
        self
    }

    /// Add a cell field written once, not per step (asserts that it is cell-centred).
    pub fn add_static_cell_field(&mut self, field: Field) -> &mut Self {
        assert_eq!(
            field.centering,
            Centering::Cell,
            "add_static_cell_field: '{}' is node-centred",
            field.name
        );
        self.add_static_field(field)
    }

    /// Add a time or load step.
    pub fn add_step(&mut self, step: Step) -> &mut Self {
        let context = format!("step {} (time {})", self.steps.len(), step.time);
        for (i, f) in step.fields.iter().enumerate() {
            self.check_field(f, &context);
            assert!(
                step.fields[..i].iter().all(|g| g.name != f.name),
                "{context}: field '{}' appears twice",
                f.name
            );
            assert!(
                self.static_fields.iter().all(|g| g.name != f.name),
                "{context}: field '{}' has the name of a static field",
                f.name
            );
        }
        self.steps.push(step);
        self
    }

    /// Write `base.h5` and then `base.xdmf` (both atomically), where `path` is `base.h5` or
    /// `base.xdmf`.
    pub fn write(&self, path: &Path) -> Result<(), H5Error> {
        let (h5_path, xdmf_path) = results_paths(path)?;
        let _span = tracing::debug_span!("write_results", path = %h5_path.display()).entered();
        let builder = self.build_h5();
        let mut format_error = None;
        let written = write_atomic(&h5_path, |w| {
            builder.finish_to(w).map_err(|e| match e {
                hdf5_pure::Error::Io(io) => io,
                other => {
                    format_error = Some(other);
                    io::Error::other("HDF5 encoding failed")
                }
            })
        });
        if let Some(source) = format_error {
            return Err(H5Error::Hdf5 { path: h5_path, object: "/".into(), source });
        }
        written.map_err(|source| H5Error::Io { path: h5_path.clone(), source })?;

        let h5_name =
            h5_path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let xml = xdmf::xdmf_text(self, &h5_name);
        write_bytes_atomic(&xdmf_path, xml.as_bytes())
            .map_err(|source| H5Error::Io { path: xdmf_path.clone(), source })?;
        tracing::debug!(
            nodes = self.mesh.n_nodes(),
            cells = self.n_cells,
            steps = self.steps.len(),
            "results written"
        );
        Ok(())
    }

    /// HDF5 path of a static field.
    fn static_path(field: &Field) -> String {
        format!("/static/{}", escape_name(&field.name))
    }

    /// HDF5 path of a field of step `k`.
    fn step_path(k: usize, field: &Field) -> String {
        format!("/steps/{k}/{}", escape_name(&field.name))
    }

    /// The selected blocks that are non-empty, with the offset of their first cell among the
    /// selected cells: the grids of the XDMF file.
    fn written_blocks(&self) -> Vec<(usize, usize)> {
        let offsets = self.selection.offsets(self.mesh);
        offsets
            .iter()
            .enumerate()
            .filter_map(|(b, o)| o.map(|o| (b, o)))
            .filter(|&(b, _)| !self.mesh.blocks[b].is_empty())
            .collect()
    }

    fn build_h5(&self) -> FileBuilder {
        let mesh = self.mesh;
        let mut fb = FileBuilder::new();
        fb.set_attr("format", AttrValue::String(FORMAT_NAME.into()));
        fb.set_attr("version", AttrValue::I64(FORMAT_VERSION));
        fb.set_attr("cell_selection", AttrValue::String(self.selection.name().into()));
        fb.set_attr("n_steps", AttrValue::I64(self.steps.len() as i64));

        // /mesh
        let mut g_mesh = fb.create_group("mesh");
        let n = mesh.n_nodes() as u64;
        g_mesh
            .create_dataset("coordinates")
            .with_f64_data(mesh.coords.as_flattened())
            .with_shape(&[n, 3])
            .set_attr("units", AttrValue::String(self.length_unit.clone()));
        g_mesh
            .create_dataset("node_tags")
            .with_u64_data(&mesh.node_tags)
            .set_attr("units", AttrValue::String("1".into()));

        let selected = self.selection.offsets(mesh);
        let mut g_blocks = g_mesh.create_group("blocks");
        let mut g_topo = g_mesh.create_group("topology");
        for (i, blk) in mesh.blocks.iter().enumerate() {
            let k = blk.cell_type.n_nodes();
            let rows = blk.len() as u64;
            let name = block_name(mesh, i);
            let mut g = g_blocks.create_group(&name);
            g.set_attr("cell_type", AttrValue::String(blk.cell_type.name().into()));
            g.set_attr("index", AttrValue::I64(i as i64));
            g.set_attr("selected", AttrValue::I64(selected[i].is_some() as i64));
            let conn: Vec<u64> = blk.connectivity.iter().map(|&v| v as u64).collect();
            g.create_dataset("connectivity")
                .with_u64_data(&conn)
                .with_shape(&[rows, k as u64])
                .set_attr("units", AttrValue::String("1".into()));
            g.create_dataset("tags")
                .with_u64_data(&blk.tags)
                .set_attr("units", AttrValue::String("1".into()));
            g_blocks.add_group(g.finish());

            if selected[i].is_some() && !blk.is_empty() {
                let order = vtk_node_order(blk.cell_type);
                let mut topo = Vec::with_capacity(blk.connectivity.len());
                for cell in blk.cells() {
                    topo.extend(order.iter().map(|&j| cell[j] as i64));
                }
                let (xdmf_type, _) = xdmf_topology(blk.cell_type);
                g_topo
                    .create_dataset(&name)
                    .with_i64_data(&topo)
                    .with_shape(&[rows, k as u64])
                    .set_attr("xdmf_topology", AttrValue::String(xdmf_type.into()))
                    .set_attr("units", AttrValue::String("1".into()));
            }
        }
        let written = self.written_blocks();
        if written.len() > 1 {
            // Every written cell in one XDMF `Mixed` topology: [type, (count), nodes…] per cell.
            let mut mixed = Vec::new();
            for &(b, _) in &written {
                let blk = &mesh.blocks[b];
                let order = vtk_node_order(blk.cell_type);
                let (code, count) = xdmf::mixed_code(blk.cell_type);
                for cell in blk.cells() {
                    mixed.push(code);
                    mixed.extend(count);
                    mixed.extend(order.iter().map(|&j| cell[j] as i64));
                }
            }
            g_topo
                .create_dataset(xdmf::MIXED)
                .with_i64_data(&mixed)
                .set_attr("xdmf_topology", AttrValue::String("Mixed".into()))
                .set_attr("units", AttrValue::String("1".into()));
        }
        g_mesh.add_group(g_blocks.finish());
        g_mesh.add_group(g_topo.finish());

        let mut g_groups = g_mesh.create_group("groups");
        let mut used: Vec<String> = Vec::with_capacity(mesh.groups.len());
        for (i, grp) in mesh.groups.iter().enumerate() {
            let mut link = escape_name(&grp.name);
            if link.is_empty() || used.contains(&link) {
                // Empty or repeated names (gmsh allows a name per dimension); `~` is always
                // escaped in names, so the suffix cannot collide.
                link = format!("{link}~{i}");
            }
            used.push(link.clone());
            let mut g = g_groups.create_group(&link);
            g.set_attr("name", AttrValue::String(grp.name.clone()));
            g.set_attr("tag", AttrValue::I64(grp.tag as i64));
            g.set_attr("dim", AttrValue::I64(grp.dim as i64));
            g.set_attr("index", AttrValue::I64(i as i64));
            let blocks: Vec<u64> = grp.cells.iter().map(|c| c.block as u64).collect();
            let index: Vec<u64> = grp.cells.iter().map(|c| c.index as u64).collect();
            g.create_dataset("block")
                .with_u64_data(&blocks)
                .set_attr("units", AttrValue::String("1".into()));
            g.create_dataset("index")
                .with_u64_data(&index)
                .set_attr("units", AttrValue::String("1".into()));
            g_groups.add_group(g.finish());
        }
        g_mesh.add_group(g_groups.finish());
        fb.add_group(g_mesh.finish());

        // /static
        let mut g_static = fb.create_group("static");
        for (i, f) in self.static_fields.iter().enumerate() {
            add_field(&mut g_static, f, i);
        }
        fb.add_group(g_static.finish());

        // /steps
        let mut g_steps = fb.create_group("steps");
        for (k, step) in self.steps.iter().enumerate() {
            let mut g = g_steps.create_group(&k.to_string());
            g.set_attr("time", AttrValue::F64(step.time));
            g.set_attr("index", AttrValue::I64(k as i64));
            for (i, f) in step.fields.iter().enumerate() {
                add_field(&mut g, f, i);
            }
            g_steps.add_group(g.finish());
        }
        fb.add_group(g_steps.finish());
        fb
    }
}

/// Add one field dataset (with its attributes) to `group`.
fn add_field(group: &mut GroupBuilder, f: &Field, index: usize) {
    let n = f.values.len() as u64;
    let c = f.values.n_components() as u64;
    let ds = group.create_dataset(&escape_name(&f.name));
    ds.with_f64_data(f.values.as_flat());
    if c > 1 {
        ds.with_shape(&[n, c]);
    }
    ds.set_attr("name", AttrValue::String(f.name.clone()))
        .set_attr("centering", AttrValue::String(f.centering.name().into()))
        .set_attr("kind", AttrValue::String(f.values.kind_name().into()))
        .set_attr("index", AttrValue::I64(index as i64))
        .set_attr("units", AttrValue::String(f.unit.clone()));
}

/// Cell fields describing the mesh's physical groups, for `mesh-convert` and for results that
/// want group ids in ParaView. With `n` = [`CellSelection::n_cells`] values each:
///
/// - `physical_tag`: for each selected cell, the tag of the first group (in mesh order) that
///   contains it, 0 if none does (groups hold cells of one dimension, so only groups of the
///   cell's dimension can contain it);
/// - `group:<name>` for each group that has cells of a selected dimension: 1 for the cells in
///   the group, 0 elsewhere (groups may overlap). Groups whose dimension is not selected (surface
///   groups under [`CellSelection::TopDimension`]) get no mask, which would be all zeros.
///
/// Group cells that refer to blocks or indices outside the mesh are ignored (run
/// `Mesh::validate` to find them).
pub fn mesh_group_fields(mesh: &Mesh, sel: CellSelection) -> Vec<Field> {
    let offsets = sel.offsets(mesh);
    let n = sel.n_cells(mesh);
    let position = |c: &gradfem_mesh::mesh::CellId| -> Option<usize> {
        let o = (*offsets.get(c.block)?)?;
        (c.index < mesh.blocks[c.block].len()).then_some(o + c.index)
    };
    let mut tag = vec![0.0; n];
    let mut tagged = vec![false; n];
    let mut fields = Vec::new();
    let mut masks = Vec::new();
    for grp in &mesh.groups {
        let dim_selected = offsets
            .iter()
            .enumerate()
            .any(|(b, o)| o.is_some() && mesh.blocks[b].cell_type.dim() == grp.dim);
        if !dim_selected {
            continue;
        }
        let mut mask = vec![0.0; n];
        for p in grp.cells.iter().filter_map(position) {
            mask[p] = 1.0;
            if !tagged[p] {
                tagged[p] = true;
                tag[p] = grp.tag as f64;
            }
        }
        masks.push(Field::cell(format!("group:{}", grp.name), "1", FieldValues::Scalar(mask)));
    }
    fields.push(Field::cell("physical_tag", "1", FieldValues::Scalar(tag)));
    fields.extend(masks);
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_keeps_plain_names_and_escapes_separators() {
        assert_eq!(escape_name("T"), "T");
        assert_eq!(escape_name("von_mises"), "von_mises");
        assert_eq!(escape_name("group:top plate"), "group%3Atop%20plate");
        assert_eq!(escape_name("a/b"), "a%2Fb");
        assert_eq!(escape_name("100%"), "100%25");
        assert_eq!(escape_name(".hidden.x"), "%2Ehidden.x");
        assert_eq!(escape_name("~"), "%7E");
        assert_ne!(escape_name("a%3A"), escape_name("a:"));
    }

    #[test]
    fn voigt_tensors_are_stored_by_their_upper_triangle() {
        // Voigt [xx, yy, zz, yz, xz, xy] → [xx, xy, xz, yy, yz, zz].
        let v = FieldValues::symmetric_from_voigt(&[[11.0, 22.0, 33.0, 23.0, 13.0, 12.0]]);
        assert_eq!(v, FieldValues::SymTensor(vec![[11.0, 12.0, 13.0, 22.0, 23.0, 33.0]]));
        assert_eq!((v.n_components(), v.kind_name(), v.xdmf_type()), (6, "tensor6", "Tensor6"));
    }

    #[test]
    fn derivative_units_bracket_compound_denominators() {
        assert_eq!(derivative_unit("K", "W/(m·K)"), "K/(W/(m·K))");
        assert_eq!(derivative_unit("K", "m"), "K/m");
        assert_eq!(derivative_unit("m", "1"), "m");
        assert_eq!(derivative_unit("Pa", ""), "Pa");
        assert_eq!(derivative_unit("", "K"), "1/K");
    }

    #[test]
    fn results_paths_accept_both_extensions() {
        let (h, x) = results_paths(Path::new("d/run.xdmf")).unwrap();
        assert_eq!(h, Path::new("d/run.h5"));
        assert_eq!(x, Path::new("d/run.xdmf"));
        let (h, x) = results_paths(Path::new("run.h5")).unwrap();
        assert_eq!((h.as_path(), x.as_path()), (Path::new("run.h5"), Path::new("run.xdmf")));
        assert!(matches!(results_paths(Path::new("run.vtu")), Err(H5Error::Extension { .. })));
        assert!(matches!(results_paths(Path::new("run")), Err(H5Error::Extension { .. })));
    }
}
