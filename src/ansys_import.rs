//! ANSYS MAPDL results and archives in gradfem: `gradfem import-ansys`, ANSYS files in
//! `mesh-info`, meshes of problem files read from `.rst`/`.rth`/`.cdb`, and nodal fields
//! mapped onto a gradfem mesh (`[initial_state]` of problem files).
//!
//! # Mapping a nodal field onto another mesh
//!
//! When the target mesh carries the same ANSYS node numbers at the same positions as the
//! source (the mesh was read from the same file), values are copied by node number. Otherwise
//! each target node `x` is located in the source mesh's volume cells by the inverse
//! isoparametric map `x = Σ_a N_a(ξ) X_a` (Newton on ξ), and the value is
//! `u(x) = Σ_a N_a(ξ) u_a`. Candidate cells come from a uniform bounding-box grid
//! ([`PointLocator`]) with about one grid cell per mesh cell, so locating `m` points in a mesh
//! of `n` cells costs `O(n + m)` for meshes of even cell size, not `O(n m)`.
//!
//! A node that lies in no cell but within the tolerance `tol = 1e-6 × (diagonal of the source
//! bounding box)` ([`OUTSIDE_TOLERANCE`]) of one (curved faces, round-off in the coordinates)
//! takes the nearest cell, evaluated at the reference point clamped to the reference element.
//! Farther nodes are an error that counts them and names the worst one.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use gradfem_io::ansys::{
    AnsysError, CdbArchive, ElementTypeInfo, NodalSolution, ResultSet, RstFile, SkippedElement,
    read_cdb, read_rst,
};
use gradfem_io::h5::{CellSelection, Field, FieldValues, H5Error, Results, Step};
use gradfem_mesh::geometry;
use gradfem_mesh::reference::{shape_functions_into, shape_gradients_into};
use gradfem_mesh::{CellId, CellType, Mesh};

/// Relative tolerance (times the diagonal of the source mesh's bounding box) within which a
/// point outside every source cell still takes the value of the nearest cell.
pub const OUTSIDE_TOLERANCE: f64 = 1e-6;

/// Errors of ANSYS import and field mapping.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The reader failed (the error names the file and the byte offset or line).
    #[error(transparent)]
    Ansys(#[from] AnsysError),
    /// The file extension names no ANSYS format this code reads.
    #[error("{file}: not an ANSYS file (expected .rst, .rth, .rmg or .cdb)")]
    Extension { file: PathBuf },
    /// The output extension is none of .h5, .xdmf, .csv.
    #[error("{file}: unknown output format (expected .h5, .xdmf or .csv)")]
    OutputExtension { file: PathBuf },
    /// Writing the output failed.
    #[error("{file}: cannot write: {message}")]
    Write { file: PathBuf, message: String },
    /// An archive has no results, but a result set was asked for.
    #[error("{file}: an archive (.cdb) holds no result sets; {what} needs a result file")]
    NoResults { file: PathBuf, what: String },
    /// The result set has no such DOF.
    #[error("{file}: result set {set} has no {dof} DOF; it has {}", available.join(", "))]
    MissingDof { file: PathBuf, set: usize, dof: String, available: Vec<String> },
    /// A source node value needed for the mapping is missing (`NaN`).
    #[error("{file}: result set {set}: node {node} has no {dof} value")]
    MissingValue { file: PathBuf, set: usize, dof: String, node: u64 },
    /// The file does not say in which unit its temperatures are and none was given.
    #[error(
        "{file}: the file does not say in which unit its temperatures are (MAPDL /UNITS is {units}); set `temperature_unit` = \"K\", \"C\" or \"F\" in {what}"
    )]
    TemperatureUnitUnknown { file: PathBuf, units: String, what: String },
    /// Converted to kelvin, a temperature is below absolute zero.
    #[error(
        "{file}: result set {set}: node {node} has TEMP = {value} {unit}, below absolute zero; is `temperature_unit` right?"
    )]
    BelowAbsoluteZero { file: PathBuf, set: usize, node: u64, value: f64, unit: &'static str },
    /// The source mesh has no volume cells to interpolate from.
    #[error("{file}: the source mesh has no volume cells to interpolate from")]
    NoVolumeCells { file: PathBuf },
    /// Target nodes lie outside the source mesh by more than the tolerance.
    #[error(
        "{file}: {count} node(s) of the target mesh lie outside the source mesh by more than {tolerance:.3e}; the farthest, node {worst_node} at ({:.6e}, {:.6e}, {:.6e}), is {worst_distance:.3e} away (or more: away from every cell, the distance to the bounding box is shown)",
        worst_position[0], worst_position[1], worst_position[2]
    )]
    Outside {
        file: PathBuf,
        count: usize,
        tolerance: f64,
        worst_node: u64,
        worst_position: [f64; 3],
        worst_distance: f64,
    },
}

/// The temperature scale of a field read from a file, converted to kelvin on import.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum TemperatureUnit {
    /// Kelvin (no conversion).
    Kelvin,
    /// Degrees Celsius: T = t + 273.15.
    Celsius,
    /// Degrees Fahrenheit: T = (t − 32)·5/9 + 273.15.
    Fahrenheit,
}

impl TemperatureUnit {
    /// `K`, `C` (or `degC`, `°C`) or `F` (`degF`, `°F`); None for anything else.
    pub fn parse(name: &str) -> Option<Self> {
        match name.trim() {
            "K" | "kelvin" => Some(TemperatureUnit::Kelvin),
            "C" | "degC" | "°C" | "celsius" => Some(TemperatureUnit::Celsius),
            "F" | "degF" | "°F" | "fahrenheit" => Some(TemperatureUnit::Fahrenheit),
            _ => None,
        }
    }

    /// The temperature scale of an MAPDL `/UNITS` system code: SI is in kelvin; MKS, μMKS,
    /// CGS and MPA in °C; BFT and BIN in °F; user-defined systems (the default) say nothing.
    pub fn of_mapdl_units(code: i32) -> Option<Self> {
        match code {
            1 => Some(TemperatureUnit::Kelvin),
            2 | 5 | 6 | 7 => Some(TemperatureUnit::Celsius),
            3 | 4 => Some(TemperatureUnit::Fahrenheit),
            _ => None,
        }
    }

    /// The value in kelvin.
    pub fn to_kelvin(self, t: f64) -> f64 {
        match self {
            TemperatureUnit::Kelvin => t,
            TemperatureUnit::Celsius => t + 273.15,
            TemperatureUnit::Fahrenheit => (t - 32.0) * 5.0 / 9.0 + 273.15,
        }
    }

    /// The unit's symbol.
    pub fn symbol(self) -> &'static str {
        match self {
            TemperatureUnit::Kelvin => "K",
            TemperatureUnit::Celsius => "°C",
            TemperatureUnit::Fahrenheit => "°F",
        }
    }
}

/// Whether a path names an ANSYS file by its extension (`.rst`, `.rth`, `.rmg`, `.cdb`,
/// case-insensitive).
pub fn is_ansys_path(path: &Path) -> bool {
    matches!(extension(path).as_deref(), Some("rst" | "rth" | "rmg" | "cdb"))
}

fn extension(path: &Path) -> Option<String> {
    path.extension().and_then(|e| e.to_str()).map(|e| e.to_ascii_lowercase())
}

/// An ANSYS file read by extension: a result file or an archive.
#[derive(Clone, Debug)]
pub enum AnsysFile {
    /// `.rst`, `.rth`, `.rmg`.
    Result(Box<RstFile>),
    /// `.cdb`.
    Archive(Box<CdbArchive>),
}

impl AnsysFile {
    /// Read `path`, dispatching on its extension. A result file shorter than the length its
    /// standard header declares (a cut copy or an interrupted write) is read as far as its
    /// records are whole, with a warning that names the file and both sizes; with `strict`
    /// (the CLI's `--strict`) it is an error.
    pub fn read(path: &Path, strict: bool) -> Result<Self, ImportError> {
        let file = match extension(path).as_deref() {
            Some("rst" | "rth" | "rmg") => AnsysFile::Result(Box::new(read_rst(path)?)),
            Some("cdb") => AnsysFile::Archive(Box::new(read_cdb(path)?)),
            _ => return Err(ImportError::Extension { file: path.to_path_buf() }),
        };
        if let AnsysFile::Result(r) = &file
            && let Some(s) = r.shortfall
        {
            if strict {
                r.check_length()?;
            }
            tracing::warn!(
                "{}: cut short: the standard header declares {} bytes, the file has {} ({} missing); the records that are whole are read (--strict refuses such a file)",
                path.display(),
                s.declared,
                s.found,
                s.declared - s.found
            );
        }
        Ok(file)
    }

    /// The mesh (node tags = ANSYS node numbers, cell tags = ANSYS element numbers).
    pub fn mesh(&self) -> &Mesh {
        match self {
            AnsysFile::Result(r) => &r.mesh,
            AnsysFile::Archive(a) => &a.mesh,
        }
    }

    /// The mesh, by value.
    pub fn into_mesh(self) -> Mesh {
        match self {
            AnsysFile::Result(r) => r.mesh,
            AnsysFile::Archive(a) => a.mesh,
        }
    }

    /// The file read.
    pub fn path(&self) -> &Path {
        match self {
            AnsysFile::Result(r) => &r.path,
            AnsysFile::Archive(a) => &a.path,
        }
    }

    /// The element type table.
    pub fn element_types(&self) -> &[ElementTypeInfo] {
        match self {
            AnsysFile::Result(r) => &r.element_types,
            AnsysFile::Archive(a) => &a.element_types,
        }
    }

    /// Elements that did not become cells.
    pub fn skipped(&self) -> &[SkippedElement] {
        match self {
            AnsysFile::Result(r) => &r.skipped,
            AnsysFile::Archive(a) => &a.skipped,
        }
    }

    /// Number of elements of each element type reference number.
    pub fn element_counts(&self) -> HashMap<u32, usize> {
        let elements = match self {
            AnsysFile::Result(r) => &r.elements,
            AnsysFile::Archive(a) => &a.elements,
        };
        let mut counts = HashMap::new();
        for e in elements {
            *counts.entry(e.type_ref).or_insert(0) += 1;
        }
        counts
    }

    /// The result sets (none for an archive).
    pub fn result_sets(&self) -> &[ResultSet] {
        match self {
            AnsysFile::Result(r) => &r.result_sets,
            AnsysFile::Archive(_) => &[],
        }
    }

    /// The DOF names of the file (none for an archive).
    pub fn dof_names(&self) -> &[String] {
        match self {
            AnsysFile::Result(r) => &r.dof_names,
            AnsysFile::Archive(_) => &[],
        }
    }

    /// The nodal solution of result set `set` (1-based); `None` for an archive.
    pub fn nodal_solution(&self, set: usize) -> Result<Option<NodalSolution>, ImportError> {
        match self {
            AnsysFile::Result(r) => Ok(Some(r.nodal_solution(set)?)),
            AnsysFile::Archive(_) => Ok(None),
        }
    }
}

/// Read only the mesh of an ANSYS file (for `[mesh] file = "x.rst"` in problem files).
pub fn read_ansys_mesh(path: &Path, strict: bool) -> Result<Mesh, ImportError> {
    Ok(AnsysFile::read(path, strict)?.into_mesh())
}

/// Column `dof` of a nodal solution (`n_nodes` values), if the solution has that DOF.
pub fn dof_column(sol: &NodalSolution, dof: &str) -> Option<Vec<f64>> {
    let n = sol.dof_names.len();
    let k = sol.dof_names.iter().position(|d| d == dof)?;
    Some(sol.values.iter().skip(k).step_by(n).copied().collect())
}

/// What `import-ansys` wrote.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ImportSummary {
    /// The file written.
    pub output: String,
    /// Nodes written.
    pub nodes: usize,
    /// Cells written (the top-dimensional ones).
    pub cells: usize,
    /// The result set written (`None` for an archive).
    pub set: Option<usize>,
    /// DOF names of the result set.
    pub dof_names: Vec<String>,
    /// The names of the fields written.
    pub fields: Vec<String>,
}

/// `gradfem import-ansys`: write the mesh and the nodal fields of result set `set` (1-based)
/// of `input` to `output`: `.h5`/`.xdmf` (gradfem results, see [`nodal_fields`]) or `.csv`
/// (see [`write_csv`]). Archives give the mesh only.
pub fn import(
    input: &Path,
    set: usize,
    output: &Path,
    strict: bool,
) -> Result<ImportSummary, ImportError> {
    let wrote = |e: &dyn std::fmt::Display| ImportError::Write {
        file: output.to_path_buf(),
        message: e.to_string(),
    };
    let ext = extension(output);
    if !matches!(ext.as_deref(), Some("csv" | "h5" | "xdmf")) {
        return Err(ImportError::OutputExtension { file: output.to_path_buf() });
    }
    if let Some(dir) = output.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| wrote(&e))?;
    }
    let file = AnsysFile::read(input, strict)?;
    if matches!(file, AnsysFile::Archive(_)) && set != 1 {
        return Err(ImportError::NoResults {
            file: input.to_path_buf(),
            what: format!("--set {set}"),
        });
    }
    let sol = file.nodal_solution(set)?;
    let mesh = file.mesh();
    let fields = match ext.as_deref() {
        Some("csv") => {
            gradfem_io::atomic::write_atomic(output, |w| write_csv(w, mesh, sol.as_ref()))
                .map_err(|e| wrote(&e))?;
            sol.as_ref().map(|s| s.dof_names.clone()).unwrap_or_default()
        }
        Some("h5" | "xdmf") => {
            let time =
                file.result_sets().get(set.wrapping_sub(1)).map_or(0.0, |r| r.time_or_frequency);
            let units = FileUnits::of(&file);
            let fields = sol.as_ref().map(|s| nodal_fields(s, &units)).unwrap_or_default();
            let names = fields.iter().map(|f| f.name.clone()).collect();
            write_h5(output, mesh, fields, time, &units.length).map_err(|e| wrote(&e))?;
            names
        }
        _ => return Err(ImportError::OutputExtension { file: output.to_path_buf() }),
    };
    Ok(ImportSummary {
        output: output.display().to_string(),
        nodes: mesh.n_nodes(),
        cells: CellSelection::TopDimension.n_cells(mesh),
        set: sol.is_some().then_some(set),
        dof_names: sol.map(|s| s.dof_names).unwrap_or_default(),
        fields,
    })
}

/// The length unit (metres per unit) of an MAPDL `/UNITS` system code: SI and MKS m, CGS cm,
/// MPA mm, μMKS μm, BFT ft, BIN in; None for user-defined systems.
pub fn metres_per_mapdl_length(code: i32) -> Option<(f64, &'static str)> {
    match code {
        1 | 5 => Some((1.0, "m")),
        2 => Some((1e-2, "cm")),
        6 => Some((1e-3, "mm")),
        7 => Some((1e-6, "µm")),
        3 => Some((0.3048, "ft")),
        4 => Some((0.0254, "in")),
        _ => None,
    }
}

/// The units of an ANSYS file's values, as its `/UNITS` system gives them (`unknown` where the
/// file records none): the values are written as the file holds them, not converted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileUnits {
    /// Length (coordinates, displacements).
    pub length: String,
    /// Temperature (`TEMP`).
    pub temperature: String,
    /// Electric potential (`VOLT`).
    pub potential: String,
}

impl FileUnits {
    /// The units of `file`: from a result file's `/UNITS`; an archive records none.
    pub fn of(file: &AnsysFile) -> Self {
        let code = match file {
            AnsysFile::Result(r) => r.header.units,
            AnsysFile::Archive(_) => 0,
        };
        let length = metres_per_mapdl_length(code).map(|(_, name)| name);
        let temperature = TemperatureUnit::of_mapdl_units(code).map(TemperatureUnit::symbol);
        let unknown = || "unknown".to_string();
        FileUnits {
            length: length.map_or_else(unknown, str::to_string),
            temperature: temperature.map_or_else(unknown, str::to_string),
            // Every MAPDL unit system measures potential in volts.
            potential: if code == 0 { unknown() } else { "V".into() },
        }
    }

    /// The unit of a DOF's values.
    fn of_dof(&self, dof: &str) -> String {
        match dof {
            "UX" | "UY" | "UZ" => self.length.clone(),
            "TEMP" => self.temperature.clone(),
            "VOLT" => self.potential.clone(),
            "ROTX" | "ROTY" | "ROTZ" => "rad".into(),
            _ => "unknown".into(),
        }
    }
}

/// Node fields of a nodal solution, named by DOF: `TEMP`, `VOLT`, ... one scalar field each;
/// `UX`, `UY`, `UZ` also as one vector field `displacement` (a missing component is 0, e.g.
/// UZ of a 2D analysis; a node without a value keeps `NaN`). Values and units as in the file.
pub fn nodal_fields(sol: &NodalSolution, units: &FileUnits) -> Vec<Field> {
    let mut fields = Vec::new();
    let cols: Vec<Option<Vec<f64>>> =
        ["UX", "UY", "UZ"].iter().map(|d| dof_column(sol, d)).collect();
    if cols.iter().any(Option::is_some) {
        let n = sol.values.len() / sol.dof_names.len().max(1);
        let mut u = vec![[0.0; 3]; n];
        for (k, c) in cols.iter().enumerate() {
            if let Some(c) = c {
                for (ui, &v) in u.iter_mut().zip(c) {
                    ui[k] = v;
                }
            }
        }
        fields.push(Field::node("displacement", units.length.clone(), FieldValues::Vector(u)));
    }
    for d in &sol.dof_names {
        let c = dof_column(sol, d).expect("a DOF of the solution");
        fields.push(Field::node(d.clone(), units.of_dof(d), FieldValues::Scalar(c)));
    }
    fields
}

/// Write the mesh (volume cells, or the top-dimensional cells of a lower-dimensional mesh) and
/// `fields` as one step at `time` to `output` (`.h5` + `.xdmf`, each written atomically).
pub fn write_h5(
    output: &Path,
    mesh: &Mesh,
    fields: Vec<Field>,
    time: f64,
    length_unit: &str,
) -> Result<(), H5Error> {
    let mut results = Results::new(mesh, CellSelection::TopDimension);
    results.set_length_unit(length_unit);
    if !fields.is_empty() {
        results.add_step(Step { time, fields });
    }
    results.write(output)
}

/// Write the CSV of `import-ansys`: a header `node,x,y,z` followed by the DOF names, then one
/// row per node in ascending ANSYS node number; numbers as Rust's `{}` writes `f64` (the
/// shortest text that reads back to the same value; `NaN` where a node has no value).
pub fn write_csv(
    w: &mut dyn Write,
    mesh: &Mesh,
    sol: Option<&NodalSolution>,
) -> std::io::Result<()> {
    let ndof = sol.map_or(0, |s| s.dof_names.len());
    write!(w, "node,x,y,z")?;
    if let Some(s) = sol {
        for d in &s.dof_names {
            write!(w, ",{d}")?;
        }
    }
    writeln!(w)?;
    let mut order: Vec<usize> = (0..mesh.n_nodes()).collect();
    order.sort_by_key(|&i| mesh.node_tags[i]);
    for i in order {
        let [x, y, z] = mesh.coords[i];
        write!(w, "{},{x},{y},{z}", mesh.node_tags[i])?;
        if let Some(s) = sol {
            for v in &s.values[i * ndof..(i + 1) * ndof] {
                write!(w, ",{v}")?;
            }
        }
        writeln!(w)?;
    }
    Ok(())
}

/// Where a point lies in a mesh: the cell, its reference coordinates and the shape function
/// values there; `distance` is 0 inside a cell and the distance to the nearest cell otherwise.
#[derive(Clone, Debug, PartialEq)]
pub struct Location {
    /// The cell.
    pub cell: CellId,
    /// Reference coordinates in the cell (clamped to the reference element).
    pub xi: [f64; 3],
    /// Shape function values N_a(ξ), in the cell's node order.
    pub shape: Vec<f64>,
    /// 0 inside the cell, else |x(ξ) − p|.
    pub distance: f64,
}

/// Point location in the volume cells of a mesh through a uniform grid of cell bounding boxes
/// (see the module doc).
pub struct PointLocator<'m> {
    mesh: &'m Mesh,
    cells: Vec<CellId>,
    lo: [f64; 3],
    h: [f64; 3],
    dims: [usize; 3],
    /// CSR of grid buckets → indices into `cells`.
    offsets: Vec<usize>,
    entries: Vec<u32>,
    tolerance: f64,
    /// Bounding box of the indexed cells' nodes.
    bounds: [[f64; 3]; 2],
}

impl<'m> PointLocator<'m> {
    /// Index the volume (3D) cells of `mesh`; points farther than `tolerance` from every cell
    /// are not located.
    pub fn new(mesh: &'m Mesh, tolerance: f64) -> Self {
        let cells: Vec<CellId> = mesh.cells_of_dim(3).collect();
        let boxes: Vec<[[f64; 3]; 2]> = cells
            .iter()
            .map(|&c| {
                let mut b = [[f64::INFINITY; 3], [f64::NEG_INFINITY; 3]];
                for &n in mesh.cell_nodes(c) {
                    for k in 0..3 {
                        b[0][k] = b[0][k].min(mesh.coords[n][k] - tolerance);
                        b[1][k] = b[1][k].max(mesh.coords[n][k] + tolerance);
                    }
                }
                b
            })
            .collect();
        let mut lo = [f64::INFINITY; 3];
        let mut hi = [f64::NEG_INFINITY; 3];
        for b in &boxes {
            for k in 0..3 {
                lo[k] = lo[k].min(b[0][k]);
                hi[k] = hi[k].max(b[1][k]);
            }
        }
        // About one bucket per cell, buckets as cubic as the box allows.
        let ext: Vec<f64> = (0..3).map(|k| (hi[k] - lo[k]).max(0.0)).collect();
        // A flat extent counts as 1e-3 of the largest, so that a degenerate (zero-volume) mesh
        // does not ask for a grid far finer than its cell count.
        let ext_max = ext.iter().copied().fold(0.0, f64::max).max(f64::MIN_POSITIVE);
        let vol_per = (ext.iter().map(|e| e.max(1e-3 * ext_max)).product::<f64>()
            / cells.len().max(1) as f64)
            .cbrt();
        let mut dims = [1usize; 3];
        let mut h = [1.0; 3];
        for k in 0..3 {
            if cells.is_empty() || ext[k] <= 0.0 {
                continue;
            }
            dims[k] = ((ext[k] / vol_per).round() as usize).clamp(1, 1 << 10);
            h[k] = ext[k] / dims[k] as f64;
        }
        let n_buckets = dims[0] * dims[1] * dims[2];
        let mut counts = vec![0usize; n_buckets + 1];
        let range =
            |b: &[[f64; 3]; 2], k: usize, lo: &[f64; 3], h: &[f64; 3], dims: &[usize; 3]| {
                let a = (((b[0][k] - lo[k]) / h[k]).floor().max(0.0) as usize).min(dims[k] - 1);
                let z = (((b[1][k] - lo[k]) / h[k]).floor().max(0.0) as usize).min(dims[k] - 1);
                a..=z
            };
        let visit = |b: &[[f64; 3]; 2], f: &mut dyn FnMut(usize)| {
            for i in range(b, 0, &lo, &h, &dims) {
                for j in range(b, 1, &lo, &h, &dims) {
                    for l in range(b, 2, &lo, &h, &dims) {
                        f(i + dims[0] * (j + dims[1] * l));
                    }
                }
            }
        };
        for b in &boxes {
            visit(b, &mut |g| counts[g + 1] += 1);
        }
        for g in 0..n_buckets {
            counts[g + 1] += counts[g];
        }
        let mut fill = counts.clone();
        let mut entries = vec![0u32; counts[n_buckets]];
        for (c, b) in boxes.iter().enumerate() {
            visit(b, &mut |g| {
                entries[fill[g]] = c as u32;
                fill[g] += 1;
            });
        }
        let bounds = [
            [lo[0] + tolerance, lo[1] + tolerance, lo[2] + tolerance],
            [hi[0] - tolerance, hi[1] - tolerance, hi[2] - tolerance],
        ];
        PointLocator { mesh, cells, lo, h, dims, offsets: counts, entries, tolerance, bounds }
    }

    /// Number of volume cells indexed.
    pub fn n_cells(&self) -> usize {
        self.cells.len()
    }

    /// Locate `p`: the first candidate cell that contains it (reference coordinates within
    /// 1e-9 of the reference element), else the nearest candidate within the tolerance, else
    /// `Err(distance)`: to the nearest candidate cell, or a lower bound (the distance to the
    /// mesh's bounding box, at least the tolerance) when no cell box is near.
    pub fn locate(&self, p: [f64; 3]) -> Result<Location, f64> {
        if self.cells.is_empty() {
            return Err(f64::INFINITY);
        }
        if !p.iter().all(|v| v.is_finite()) {
            return Err(f64::INFINITY);
        }
        let mut g = [0usize; 3];
        for k in 0..3 {
            let t = ((p[k] - self.lo[k]) / self.h[k]).floor();
            if !(t >= 0.0 && (t as usize) < self.dims[k]) {
                // Outside the grid; the grid spans every cell box inflated by the tolerance.
                return Err(self.lower_bound(p));
            }
            g[k] = t as usize;
        }
        let bucket = g[0] + self.dims[0] * (g[1] + self.dims[1] * g[2]);
        let mut best: Option<(f64, usize, [f64; 3])> = None;
        let mut x = Vec::new();
        for &c in &self.entries[self.offsets[bucket]..self.offsets[bucket + 1]] {
            let cell = self.cells[c as usize];
            self.mesh.cell_coords_into(cell, &mut x);
            let ct = self.mesh.cell_type(cell);
            if !(0..3).all(|k| {
                x.iter().any(|xa| xa[k] - self.tolerance <= p[k])
                    && x.iter().any(|xa| xa[k] + self.tolerance >= p[k])
            }) {
                continue;
            }
            let (xi, dist) = inverse_map(ct, &x, p);
            if best.as_ref().is_none_or(|b| dist < b.0) {
                best = Some((dist, c as usize, xi));
            }
            if dist == 0.0 {
                break;
            }
        }
        match best {
            Some((dist, c, xi)) if dist <= self.tolerance => {
                let cell = self.cells[c];
                let ct = self.mesh.cell_type(cell);
                let mut shape = vec![0.0; ct.n_nodes()];
                shape_functions_into(ct, xi, &mut shape);
                Ok(Location { cell, xi, shape, distance: dist })
            }
            Some((dist, ..)) => Err(dist),
            None => Err(self.lower_bound(p)),
        }
    }

    /// A lower bound of the distance from `p` to the cells when no cell is near: the distance
    /// to the mesh's bounding box, and at least the tolerance.
    fn lower_bound(&self, p: [f64; 3]) -> f64 {
        let [lo, hi] = self.bounds;
        let d2: f64 = (0..3).map(|k| (lo[k] - p[k]).max(p[k] - hi[k]).max(0.0).powi(2)).sum();
        d2.sqrt().max(self.tolerance)
    }
}

/// Inverse isoparametric map of `p` in a cell with node coordinates `x`: Newton on
/// `Σ N_a(ξ) X_a = p`, then ξ clamped to the reference element. Returns the clamped ξ and the
/// distance `|x(ξ_clamped) − p|` (0 when the unclamped ξ lies within 1e-9 of the element).
fn inverse_map(ct: CellType, x: &[[f64; 3]], p: [f64; 3]) -> ([f64; 3], f64) {
    let nn = ct.n_nodes();
    let lin = ct.linear();
    let simplex = lin == CellType::Tet4;
    let prism = lin == CellType::Prism6;
    let mut xi: [f64; 3] = if simplex {
        [0.25; 3]
    } else if prism {
        [1.0 / 3.0, 1.0 / 3.0, 0.0]
    } else {
        [0.0; 3]
    };
    let mut n = vec![0.0; nn];
    let mut dn = vec![[0.0; 3]; nn];
    let map = |xi: [f64; 3], n: &mut [f64]| {
        shape_functions_into(ct, xi, n);
        let mut r = [0.0; 3];
        for a in 0..nn {
            for k in 0..3 {
                r[k] += n[a] * x[a][k];
            }
        }
        r
    };
    for _ in 0..30 {
        let xp = map(xi, &mut n);
        shape_gradients_into(ct, xi, &mut dn);
        let j = geometry::jacobian(&dn, x);
        let Some((inv, _)) = geometry::inverse3(&j) else { break };
        let r = [xp[0] - p[0], xp[1] - p[1], xp[2] - p[2]];
        let mut d = [0.0f64; 3];
        for i in 0..3 {
            d[i] = inv[i][0] * r[0] + inv[i][1] * r[1] + inv[i][2] * r[2];
        }
        for i in 0..3 {
            // Keep far-outside iterates bounded so that the clamped point stays meaningful.
            xi[i] = (xi[i] - d[i]).clamp(-10.0, 10.0);
        }
        if d.iter().map(|v| v.abs()).fold(0.0, f64::max) < 1e-13 {
            break;
        }
    }
    let eps = 1e-9;
    let inside = if simplex {
        xi.iter().all(|&v| v >= -eps) && xi[0] + xi[1] + xi[2] <= 1.0 + eps
    } else if prism {
        xi[0] >= -eps && xi[1] >= -eps && xi[0] + xi[1] <= 1.0 + eps && xi[2].abs() <= 1.0 + eps
    } else {
        xi.iter().all(|v| v.abs() <= 1.0 + eps)
    };
    let xc = clamp_reference(lin, xi);
    if inside {
        return (xc, 0.0);
    }
    let xp = map(xc, &mut n);
    let dist = ((xp[0] - p[0]).powi(2) + (xp[1] - p[1]).powi(2) + (xp[2] - p[2]).powi(2)).sqrt();
    (xc, dist)
}

/// Clamp reference coordinates into the reference element (an approximate projection for
/// simplices: negative coordinates to 0, then scaled onto the face `Σξ = 1`; its image point
/// is still in the element, so the distance it gives is an upper bound).
fn clamp_reference(lin: CellType, mut xi: [f64; 3]) -> [f64; 3] {
    let tri = |a: &mut f64, b: &mut f64, c: Option<&mut f64>| {
        *a = a.max(0.0);
        *b = b.max(0.0);
        let mut s = *a + *b;
        if let Some(c) = c {
            *c = c.max(0.0);
            s += *c;
            if s > 1.0 {
                *a /= s;
                *b /= s;
                *c /= s;
            }
        } else if s > 1.0 {
            *a /= s;
            *b /= s;
        }
    };
    match lin {
        CellType::Tet4 => {
            let [mut a, mut b, mut c] = xi;
            tri(&mut a, &mut b, Some(&mut c));
            xi = [a, b, c];
        }
        CellType::Prism6 => {
            let [mut a, mut b, c] = xi;
            tri(&mut a, &mut b, None);
            xi = [a, b, c.clamp(-1.0, 1.0)];
        }
        _ => {
            for v in &mut xi {
                *v = v.clamp(-1.0, 1.0);
            }
        }
    }
    xi
}

/// How a nodal field reached the target mesh.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MappingKind {
    /// Copied by ANSYS node number (same nodes at the same positions).
    ByNodeNumber,
    /// Interpolated with the source cells' shape functions.
    Interpolated,
}

/// Whether every node of `target` is a node of `source` with the same number (node tag) and
/// the same position within `tol`; returns the source index of each target node if so.
pub fn match_by_node_number(source: &Mesh, target: &Mesh, tol: f64) -> Option<Vec<usize>> {
    let index: HashMap<u64, usize> =
        source.node_tags.iter().enumerate().map(|(i, &t)| (t, i)).collect();
    target
        .node_tags
        .iter()
        .zip(&target.coords)
        .map(|(t, x)| {
            let &i = index.get(t)?;
            let y = source.coords[i];
            ((0..3).all(|k| (x[k] - y[k]).abs() <= tol)).then_some(i)
        })
        .collect()
}

/// Map a scalar nodal field `values` (one per node of `source`) onto the nodes of `target`
/// (see the module doc): by node number when [`match_by_node_number`] succeeds, by
/// interpolation otherwise. `file` names the source in errors. Nodes of `target` that belong to
/// no cell are located like the others.
pub fn map_nodal_field(
    file: &Path,
    source: &Mesh,
    values: &[f64],
    target: &Mesh,
) -> Result<(Vec<f64>, MappingKind), ImportError> {
    assert_eq!(values.len(), source.n_nodes(), "one value per source node");
    let [lo, hi] = source.bounding_box();
    let diag = ((0..3).map(|k| (hi[k] - lo[k]).powi(2)).sum::<f64>()).sqrt();
    let tol = OUTSIDE_TOLERANCE * diag;
    if let Some(map) = match_by_node_number(source, target, tol) {
        return Ok((map.iter().map(|&i| values[i]).collect(), MappingKind::ByNodeNumber));
    }
    let locator = PointLocator::new(source, tol);
    if locator.n_cells() == 0 {
        return Err(ImportError::NoVolumeCells { file: file.to_path_buf() });
    }
    let located: Vec<Result<Location, f64>> = {
        use rayon::prelude::*;
        target.coords.par_iter().map(|&p| locator.locate(p)).collect()
    };
    let mut out = Vec::with_capacity(target.n_nodes());
    let mut count = 0;
    let mut worst: Option<(usize, f64)> = None;
    for (i, l) in located.iter().enumerate() {
        match l {
            Ok(loc) => {
                let nodes = source.cell_nodes(loc.cell);
                out.push(loc.shape.iter().zip(nodes).map(|(n, &a)| n * values[a]).sum());
            }
            Err(d) => {
                count += 1;
                if worst.is_none_or(|w| *d > w.1) {
                    worst = Some((i, *d));
                }
                out.push(f64::NAN);
            }
        }
    }
    if let Some((i, d)) = worst {
        return Err(ImportError::Outside {
            file: file.to_path_buf(),
            count,
            tolerance: tol,
            worst_node: target.node_tags[i],
            worst_position: target.coords[i],
            worst_distance: d,
        });
    }
    Ok((out, MappingKind::Interpolated))
}

/// What `[initial_state]` used, for the run summary.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct InitialStateInfo {
    /// The ANSYS file read.
    pub file: String,
    /// Its result set (1-based).
    pub set: usize,
    /// The DOF taken (`TEMP`).
    pub dof: String,
    /// How it reached the mesh.
    pub mapping: MappingKind,
    /// The unit the file's temperatures were in (converted to kelvin), and whether the file
    /// said so (`/UNITS`) or the problem file chose it.
    pub temperature_unit: Option<TemperatureUnit>,
    /// `"file"` or `"problem file"`: where `temperature_unit` came from.
    pub temperature_unit_from: Option<&'static str>,
}

/// The nodal temperature (DOF `TEMP`) of result set `set` of `file` in kelvin, on the nodes
/// of `target` (mapped as in [`map_nodal_field`]). Source nodes without a value (outside the
/// solution) are an error when a target node needs them.
///
/// The file's temperature unit comes from its `/UNITS` system when that names one, else from
/// `unit` (the problem file's `temperature_unit`; `what` names where that key goes, for the
/// error when it is missing). A given unit that contradicts the file's is used, with a
/// warning; a field below 0 K after conversion is an error, and a kelvin field that lies
/// wholly below 200 K draws a warning (it looks like °C).
pub fn initial_temperature(
    file: &Path,
    set: usize,
    target: &Mesh,
    unit: Option<TemperatureUnit>,
    what: &str,
    strict: bool,
) -> Result<(Vec<f64>, InitialStateInfo), ImportError> {
    let src = AnsysFile::read(file, strict)?;
    let (file_unit, units_name) = match &src {
        AnsysFile::Result(r) => {
            (TemperatureUnit::of_mapdl_units(r.header.units), r.header.units_name.clone())
        }
        AnsysFile::Archive(_) => (None, "not recorded".to_string()),
    };
    let (unit, from) = match (unit, file_unit) {
        (Some(given), Some(said)) => {
            if given != said {
                tracing::warn!(
                    "{}: the file's /UNITS ({units_name}) puts temperatures in {}, {what} sets {}; using {}",
                    file.display(),
                    said.symbol(),
                    given.symbol(),
                    given.symbol()
                );
            }
            (given, "problem file")
        }
        (Some(given), None) => (given, "problem file"),
        (None, Some(said)) => (said, "file"),
        (None, None) => {
            return Err(ImportError::TemperatureUnitUnknown {
                file: file.to_path_buf(),
                units: units_name,
                what: what.to_string(),
            });
        }
    };
    let sol = src.nodal_solution(set)?.ok_or_else(|| ImportError::NoResults {
        file: file.to_path_buf(),
        what: "[initial_state]".into(),
    })?;
    let t = dof_column(&sol, "TEMP").ok_or_else(|| ImportError::MissingDof {
        file: file.to_path_buf(),
        set,
        dof: "TEMP".into(),
        available: sol.dof_names.clone(),
    })?;
    let (mut mapped, mapping) = map_nodal_field(file, src.mesh(), &t, target)?;
    if let Some(i) = mapped.iter().position(|v| v.is_nan()) {
        return Err(ImportError::MissingValue {
            file: file.to_path_buf(),
            set,
            dof: "TEMP".into(),
            node: target.node_tags[i],
        });
    }
    for (i, v) in mapped.iter_mut().enumerate() {
        let kelvin = unit.to_kelvin(*v);
        if kelvin < 0.0 {
            return Err(ImportError::BelowAbsoluteZero {
                file: file.to_path_buf(),
                set,
                node: target.node_tags[i],
                value: *v,
                unit: unit.symbol(),
            });
        }
        *v = kelvin;
    }
    if unit == TemperatureUnit::Kelvin && mapped.iter().all(|&v| v < 200.0) {
        tracing::warn!(
            "{}: every imported temperature is below 200 K; if the file is in °C set temperature_unit = \"C\" in {what}",
            file.display()
        );
    }
    Ok((
        mapped,
        InitialStateInfo {
            file: file.display().to_string(),
            set,
            dof: "TEMP".into(),
            mapping,
            temperature_unit: Some(unit),
            temperature_unit_from: Some(from),
        },
    ))
}

/// The displacement (UX, UY, UZ) of result set `set` of an ANSYS structural result on
/// `target`: by node number on the same mesh, interpolated otherwise (as
/// [`initial_temperature`]). Returns the full vector (3 per node) and where it came from.
pub fn initial_displacement(
    file: &Path,
    set: usize,
    target: &Mesh,
    strict: bool,
) -> Result<(Vec<f64>, InitialStateInfo), ImportError> {
    let src = AnsysFile::read(file, strict)?;
    let sol = src.nodal_solution(set)?.ok_or_else(|| ImportError::NoResults {
        file: file.to_path_buf(),
        what: "[initial_state]".into(),
    })?;
    let mut u = vec![0.0; 3 * target.n_nodes()];
    let mut mapping = MappingKind::ByNodeNumber;
    for (c, dof) in ["UX", "UY", "UZ"].into_iter().enumerate() {
        let col = dof_column(&sol, dof).ok_or_else(|| ImportError::MissingDof {
            file: file.to_path_buf(),
            set,
            dof: dof.into(),
            available: sol.dof_names.clone(),
        })?;
        let (mapped, m) = map_nodal_field(file, src.mesh(), &col, target)?;
        if let Some(i) = mapped.iter().position(|v| v.is_nan()) {
            return Err(ImportError::MissingValue {
                file: file.to_path_buf(),
                set,
                dof: dof.into(),
                node: target.node_tags[i],
            });
        }
        for (n, v) in mapped.into_iter().enumerate() {
            u[3 * n + c] = v;
        }
        mapping = m;
    }
    Ok((
        u,
        InitialStateInfo {
            file: file.display().to_string(),
            set,
            dof: "UX, UY, UZ".into(),
            mapping,
            temperature_unit: None,
            temperature_unit_from: None,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temperature_units_convert_to_kelvin_and_follow_mapdl_unit_systems() {
        let c = TemperatureUnit::parse("C").unwrap();
        let f = TemperatureUnit::parse("°F").unwrap();
        assert_eq!(TemperatureUnit::parse("K"), Some(TemperatureUnit::Kelvin));
        assert_eq!(TemperatureUnit::parse("kelvins"), None);
        assert!((c.to_kelvin(100.0) - 373.15).abs() < 1e-12);
        assert!((f.to_kelvin(212.0) - 373.15).abs() < 1e-12);
        assert!((f.to_kelvin(-40.0) - c.to_kelvin(-40.0)).abs() < 1e-12);
        assert_eq!(TemperatureUnit::of_mapdl_units(1), Some(TemperatureUnit::Kelvin));
        assert_eq!(TemperatureUnit::of_mapdl_units(6), Some(TemperatureUnit::Celsius));
        assert_eq!(TemperatureUnit::of_mapdl_units(4), Some(TemperatureUnit::Fahrenheit));
        assert_eq!(TemperatureUnit::of_mapdl_units(0), None);
        assert_eq!(TemperatureUnit::of_mapdl_units(-1), None);
    }
    use gradfem_mesh::generate::{BoxSpec, box_mesh};
    use rstest::rstest;

    fn boxm(ct: CellType, n: usize, origin: [f64; 3]) -> Mesh {
        box_mesh(&BoxSpec { origin, lengths: [1.0, 2.0, 1.5], divisions: [n, n, n], cell_type: ct })
    }

    /// A quadratic field is reproduced exactly by quadratic cells, a linear one by linear cells.
    #[rstest]
    #[case(CellType::Tet4, false)]
    #[case(CellType::Hex8, false)]
    #[case(CellType::Tet10, true)]
    #[case(CellType::Hex20, true)]
    fn interpolation_reproduces_polynomials(#[case] ct: CellType, #[case] quadratic: bool) {
        let src = boxm(ct, 3, [0.0; 3]);
        let f = |x: [f64; 3]| {
            let l = 1.0 + 2.0 * x[0] - x[1] + 0.5 * x[2];
            if quadratic { l + x[0] * x[1] - x[2] * x[2] } else { l }
        };
        let values: Vec<f64> = src.coords.iter().map(|&x| f(x)).collect();
        let mut target = boxm(CellType::Tet4, 5, [0.0; 3]);
        // Different node numbers: force interpolation.
        for t in &mut target.node_tags {
            *t += 100_000;
        }
        let (out, kind) = map_nodal_field(Path::new("src"), &src, &values, &target).unwrap();
        assert_eq!(kind, MappingKind::Interpolated);
        for (x, v) in target.coords.iter().zip(&out) {
            assert!((v - f(*x)).abs() < 1e-10, "at {x:?}: {v} vs {}", f(*x));
        }
    }

    #[test]
    fn same_nodes_map_by_number() {
        let src = boxm(CellType::Hex8, 2, [0.0; 3]);
        let values: Vec<f64> = (0..src.n_nodes()).map(|i| i as f64).collect();
        let (out, kind) = map_nodal_field(Path::new("src"), &src, &values, &src).unwrap();
        assert_eq!(kind, MappingKind::ByNodeNumber);
        assert_eq!(out, values);
    }

    #[test]
    fn points_outside_are_counted() {
        let src = boxm(CellType::Hex8, 2, [0.0; 3]);
        let values = vec![1.0; src.n_nodes()];
        let mut target = boxm(CellType::Hex8, 2, [0.5, 0.0, 0.0]);
        for t in &mut target.node_tags {
            *t += 1000;
        }
        let err = map_nodal_field(Path::new("src.rth"), &src, &values, &target).unwrap_err();
        match err {
            ImportError::Outside { count, worst_distance, .. } => {
                // Nodes at x = 1.5 (9 of them) are outside, 0.5 away.
                assert_eq!(count, 9);
                assert!((worst_distance - 0.5).abs() < 1e-9, "{worst_distance}");
            }
            other => panic!("{other}"),
        }
    }

    #[test]
    fn points_just_outside_take_the_nearest_cell() {
        let src = boxm(CellType::Hex20, 2, [0.0; 3]);
        let values: Vec<f64> = src.coords.iter().map(|x| x[0] + x[2]).collect();
        let diag = (1.0f64 + 4.0 + 2.25).sqrt();
        let loc = PointLocator::new(&src, OUTSIDE_TOLERANCE * diag);
        let p = [1.0 + 0.5 * OUTSIDE_TOLERANCE * diag, 1.0, 0.7];
        let l = loc.locate(p).unwrap();
        assert!(l.distance > 0.0 && l.distance <= OUTSIDE_TOLERANCE * diag);
        let v: f64 = l.shape.iter().zip(src.cell_nodes(l.cell)).map(|(n, &a)| n * values[a]).sum();
        assert!((v - 1.7).abs() < 1e-12, "{v}");
        let far = [1.0 + 3.0 * OUTSIDE_TOLERANCE * diag, 1.0, 0.7];
        assert!(loc.locate(far).is_err());
    }

    #[test]
    fn csv_rows_sorted_by_node_number() {
        let mut mesh = boxm(CellType::Hex8, 1, [0.0; 3]);
        let n = mesh.n_nodes();
        for (i, t) in mesh.node_tags.iter_mut().enumerate() {
            *t = (n - i) as u64 * 10;
        }
        let sol = NodalSolution {
            dof_names: vec!["TEMP".into()],
            values: (0..n).map(|i| i as f64 + 0.1).collect(),
        };
        let mut buf = Vec::new();
        write_csv(&mut buf, &mesh, Some(&sol)).unwrap();
        let text = String::from_utf8(buf).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "node,x,y,z,TEMP");
        assert_eq!(lines.len(), n + 1);
        assert!(lines[1].starts_with("10,"));
        assert!(lines[1].ends_with(&format!(",{}", (n - 1) as f64 + 0.1)));
    }
}
