//! MAPDL binary result files (`.rst`, `.rth`, ...): header, mesh, result-set table and nodal
//! DOF solutions. Layout: see the module doc of [`crate::ansys`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use gradfem_mesh::Mesh;

use super::order::{ElementRecord, MeshBuilder, element_kind};
use super::record::Bytes;
use super::{AnsysError, ElementTypeInfo, SkippedElement};

/// Word offset of the result-file header record (after the 100-word standard header record).
const RESULT_HEADER_AT: u64 = 103;
/// The value MAPDL writes for a DOF that has no value (2¹⁰⁰).
const NO_VALUE: f64 = 1.2676506002282294e30;

/// The standard header and the result-file header, decoded.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct RstHeader {
    /// File unit number (`fun`), 12 for a result file.
    pub file_unit: i32,
    /// MAPDL version string, e.g. `"20.1"`.
    pub version: String,
    /// Major and minor version numbers parsed from [`Self::version`] (0 if unparsable).
    pub main_version: u32,
    /// Minor version number.
    pub sub_version: u32,
    /// Release date of the MAPDL build (`yyyymmdd`).
    pub release_date: i32,
    /// Date the file was written (`yyyymmdd`).
    pub date: i32,
    /// Time the file was written, `"hh:mm:ss"`.
    pub time: String,
    /// Machine string, e.g. `"LINUX x64"`.
    pub machine: String,
    /// Job name.
    pub jobname: String,
    /// Product, e.g. `"FULL"`.
    pub product: String,
    /// Special version label.
    pub special: String,
    /// User name.
    pub username: String,
    /// Title (`/TITLE`).
    pub title: String,
    /// Subtitle.
    pub subtitle: String,
    /// Unit system code (`/UNITS`: -1 or 0 user defined, 1 SI, 2 CGS, 3 BFT, 4 BIN, 5 MKS,
    /// 6 MPA, 7 uMKS).
    pub units: i32,
    /// Name of [`Self::units`], e.g. `"User Defined"`, `"SI"`.
    pub units_name: String,
    /// Maximum node number.
    pub max_node: u64,
    /// Number of nodes in the solution.
    pub n_nodes: usize,
    /// Maximum element number.
    pub max_element: u64,
    /// Number of elements.
    pub n_elements: usize,
    /// Number of DOFs per node.
    pub n_dofs: usize,
    /// Capacity of the result-set tables.
    pub resmax: usize,
    /// Number of result sets.
    pub n_sets: usize,
    /// Analysis type (`kan`: 0 static, 1 buckling, 2 modal, 3 harmonic, 4 transient, ...).
    pub analysis_type: i32,
    /// Precision key (0 double, 1 single for some records).
    pub prec_key: i32,
    /// Extrapolation option (`extopt`).
    pub extopt: i32,
    /// Bit mask of the available data (`AvailData`).
    pub avail_data: i32,
    /// Sparse-storage flags (`rstsprs`).
    pub rstsprs: i32,
    /// File length in words (`ptrend`, 64-bit form where present).
    pub ptr_end: u64,
    /// Word pointers: data-step index, time table, load-step table, element and node
    /// equivalence tables, geometry header.
    pub ptr_dsi: u64,
    /// Pointer to the time table.
    pub ptr_tim: u64,
    /// Pointer to the load-step table.
    pub ptr_lsp: u64,
    /// Pointer to the element equivalence table.
    pub ptr_elm: u64,
    /// Pointer to the node equivalence table.
    pub ptr_nod: u64,
    /// Pointer to the geometry header.
    pub ptr_geo: u64,
    /// Split point of a distributed result (standard header word 95), 0 otherwise.
    pub split_point: i32,
}

/// One entry of the result-set table.
#[derive(Clone, Debug, PartialEq)]
pub struct ResultSet {
    /// 1-based set number.
    pub index: usize,
    /// Load step.
    pub load_step: i32,
    /// Substep.
    pub substep: i32,
    /// Cumulative iteration number.
    pub cumulative_iteration: i32,
    /// Time (static/transient) or frequency (modal/harmonic).
    pub time_or_frequency: f64,
    /// Word pointer to the set's solution header.
    pub pointer: u64,
}

/// The nodal DOF solution of one result set.
#[derive(Clone, Debug, PartialEq)]
pub struct NodalSolution {
    /// DOF names, e.g. `["UX", "UY", "UZ"]`.
    pub dof_names: Vec<String>,
    /// `n_nodes × n_dofs`, row-major in mesh node order; `NaN` where a node has no value for a
    /// DOF (not in the solution, or written as MAPDL's 2¹⁰⁰ "no value").
    pub values: Vec<f64>,
}

/// A decoded MAPDL result file. The file's bytes are kept so that result sets are decoded on
/// demand ([`RstFile::nodal_solution`]).
#[derive(Clone, Debug)]
pub struct RstFile {
    /// The file read.
    pub path: PathBuf,
    /// Header fields.
    pub header: RstHeader,
    /// The mesh: `node_tags` are ANSYS node numbers, `CellBlock::tags` ANSYS element numbers,
    /// groups `material_<n>` and `etype_<n>` (see the module doc of [`crate::ansys`]).
    pub mesh: Mesh,
    /// The element type table.
    pub element_types: Vec<ElementTypeInfo>,
    /// Every element in file order, with its ANSYS connectivity and the cell it became.
    pub elements: Vec<ElementRecord>,
    /// Elements that did not become cells.
    pub skipped: Vec<SkippedElement>,
    /// The result-set table.
    pub result_sets: Vec<ResultSet>,
    /// DOF names of the file, e.g. `["UX", "UY", "UZ"]` or `["TEMP"]`.
    pub dof_names: Vec<String>,
    /// Node numbers in solution order (the node equivalence table).
    pub solution_nodes: Vec<u64>,
    data: FileBytes,
    /// Mesh node index of each entry of `solution_nodes` (`u32::MAX` if absent).
    sol_index: Vec<u32>,
    /// Set when the file is shorter than the length its standard header declares (word 27):
    /// a cut copy or an interrupted write, read as far as its records are whole. Records past
    /// the cut are errors when they are read.
    pub shortfall: Option<Shortfall>,
}

/// An error met reading a file that is shorter than declared, told as that where it comes
/// from the cut: a record that runs past the end, or a pointer into the missing part.
fn cut_short(e: AnsysError, s: &Shortfall, path: &Path) -> AnsysError {
    let from_the_cut = match &e {
        AnsysError::Truncated { .. } => true,
        AnsysError::PointerOutOfRange { pointer, .. } => pointer.saturating_mul(4) < s.declared,
        _ => false,
    };
    if from_the_cut {
        AnsysError::ShorterThanDeclared {
            file: path.to_path_buf(),
            declared: s.declared,
            found: s.found,
        }
    } else {
        e
    }
}

/// How much of a result file is missing: the length its standard header declares and the
/// length found, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shortfall {
    /// Bytes the standard header declares (word 27, in 4-byte words, times 4).
    pub declared: u64,
    /// Bytes the file has.
    pub found: u64,
}

/// The file's bytes; `Debug` prints only their count.
#[derive(Clone)]
struct FileBytes(Vec<u8>);

impl std::fmt::Debug for FileBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<{} bytes>", self.0.len())
    }
}

/// The name of a MAPDL DOF label number (1 → `"UX"`, 20 → `"TEMP"`); `"DOF<n>"` if unknown.
pub fn dof_name(n: i32) -> String {
    let s = match n {
        1 => "UX",
        2 => "UY",
        3 => "UZ",
        4 => "ROTX",
        5 => "ROTY",
        6 => "ROTZ",
        7 => "AX",
        8 => "AY",
        9 => "AZ",
        10 => "VX",
        11 => "VY",
        12 => "VZ",
        16 => "WARP",
        19 => "PRES",
        20 => "TEMP",
        21 => "VOLT",
        22 => "MAG",
        23 => "ENKE",
        24 => "ENDS",
        25 => "EMF",
        26 => "CURR",
        _ => return format!("DOF{n}"),
    };
    s.to_string()
}

/// Read a MAPDL result file (`.rst`, `.rth`, `.rmg`, ...): header, mesh, element types,
/// result-set table. See [`RstFile::nodal_solution`] for the results.
pub fn read_rst(path: &Path) -> Result<RstFile, AnsysError> {
    let data = std::fs::read(path)
        .map_err(|source| AnsysError::Io { file: path.to_path_buf(), source })?;
    RstFile::from_bytes(path, data)
}

/// The 4-byte words `w` as text (MAPDL stores each word's characters in reverse byte order).
fn words_to_string(w: &[i32]) -> String {
    let bytes: Vec<u8> = w.iter().flat_map(|x| x.to_be_bytes()).collect();
    String::from_utf8_lossy(&bytes).trim_end_matches(['\0', ' ']).trim_start().to_string()
}

fn get(v: &[i32], i: usize) -> i32 {
    v.get(i).copied().unwrap_or(0)
}

/// A 64-bit pointer from its low and high halves.
fn ptr64(v: &[i32], lo: usize, hi: usize) -> u64 {
    (get(v, lo) as u32 as u64) | ((get(v, hi) as u32 as u64) << 32)
}

fn units_name(u: i32) -> &'static str {
    match u {
        1 => "SI",
        2 => "CGS",
        3 => "BFT",
        4 => "BIN",
        5 => "MKS",
        6 => "MPA",
        7 => "uMKS",
        _ => "User Defined",
    }
}

impl RstFile {
    /// Decode a result file held in memory (`path` is used in errors only). A file shorter
    /// than its header declares reads as far as its records are whole, with
    /// [`RstFile::shortfall`] set; where a record needed to open it lies past the cut, the
    /// error is [`AnsysError::ShorterThanDeclared`].
    pub fn from_bytes(path: &Path, data: Vec<u8>) -> Result<RstFile, AnsysError> {
        let found = data.len() as u64;
        let declared = Bytes { data: &data, file: path }
            .ints(0)
            .ok()
            .filter(|(h, _)| h.len() >= 100)
            .map(|(h, _)| 4 * u64::from(h[26].max(0) as u32));
        Self::decode(path, data).map_err(|e| match declared {
            Some(declared) if found < declared => {
                cut_short(e, &Shortfall { declared, found }, path)
            }
            _ => e,
        })
    }

    fn decode(path: &Path, data: Vec<u8>) -> Result<RstFile, AnsysError> {
        let b = Bytes { data: &data, file: path };
        // Standard header.
        let (std_h, _) = b.ints(0)?;
        if std_h.len() < 100 {
            return Err(b.bad(0, format!("standard header has {} words, not 100", std_h.len())));
        }
        // Word 27 of the standard header is the file's length in 4-byte words; MAPDL pads the
        // file beyond it to whole blocks, so a longer file is normal and a shorter one cut. A
        // cut file is read as far as its records are whole and the shortfall recorded: the
        // caller decides whether that is a warning or an error (`RstFile::check_length`).
        let declared = 4 * u64::from(std_h[26].max(0) as u32);
        let shortfall = ((data.len() as u64) < declared)
            .then_some(Shortfall { declared, found: data.len() as u64 });
        let fun = std_h[0];
        if fun != 12 {
            return Err(AnsysError::UnsupportedFormat {
                file: path.to_path_buf(),
                message: format!("file unit {fun} in the standard header; a result file has 12"),
            });
        }
        let version = words_to_string(&std_h[9..10]);
        let mut vparts = version.split('.').map(|s| s.trim().parse::<u32>().unwrap_or(0));
        let t = std_h[2];
        let mut header = RstHeader {
            file_unit: fun,
            main_version: vparts.next().unwrap_or(0),
            sub_version: vparts.next().unwrap_or(0),
            version,
            release_date: std_h[10],
            date: std_h[3],
            time: format!("{:02}:{:02}:{:02}", t / 10000, (t / 100) % 100, t % 100),
            machine: words_to_string(&std_h[11..14]),
            jobname: words_to_string(&std_h[14..16]),
            product: words_to_string(&std_h[16..18]),
            special: words_to_string(&std_h[18..19]),
            username: words_to_string(&std_h[19..22]),
            title: words_to_string(&std_h[40..60]),
            subtitle: words_to_string(&std_h[60..80]),
            split_point: std_h[94],
            ..Default::default()
        };
        // Result file header.
        let (rh, _) = b.ints(RESULT_HEADER_AT)?;
        if rh.len() < 40 {
            return Err(b.bad(RESULT_HEADER_AT, format!("result header has {} words", rh.len())));
        }
        let count = |i: usize| -> Result<usize, AnsysError> {
            let v = rh[i];
            if v < 0 || v as u64 > data.len() as u64 {
                Err(b.bad(RESULT_HEADER_AT, format!("count {v} at result header word {i}")))
            } else {
                Ok(v as usize)
            }
        };
        header.max_node = count(1)? as u64;
        header.n_nodes = count(2)?;
        header.resmax = count(3)?;
        header.n_dofs = count(4)?;
        header.max_element = count(5)? as u64;
        header.n_elements = count(6)?;
        header.analysis_type = rh[7];
        header.n_sets = count(8)?;
        header.ptr_end = ptr64(&rh, 22, 23).max(rh[9] as u32 as u64);
        header.ptr_dsi = ptr64(&rh, 10, 40);
        header.ptr_tim = ptr64(&rh, 11, 41);
        header.ptr_lsp = ptr64(&rh, 12, 42);
        header.ptr_elm = ptr64(&rh, 13, 44);
        header.ptr_nod = ptr64(&rh, 14, 45);
        header.ptr_geo = ptr64(&rh, 15, 46);
        header.units = rh[19];
        header.units_name = units_name(rh[19]).to_string();
        header.prec_key = rh[30];
        header.extopt = rh[33];
        header.avail_data = rh[35];
        header.rstsprs = get(&rh, 39);
        let rh_off = RESULT_HEADER_AT * 4 + 8;

        // DOF list: the record after the result header.
        let dof_at = b.next_record(RESULT_HEADER_AT)?;
        let (dofs, _) = b.ints(dof_at)?;
        if dofs.len() < header.n_dofs {
            return Err(b.bad(
                dof_at,
                format!("{} DOFs listed, header says {}", dofs.len(), header.n_dofs),
            ));
        }
        let dof_names: Vec<String> = dofs[..header.n_dofs].iter().map(|&d| dof_name(d)).collect();

        // Node equivalence table (solution order).
        let nod = b.check_ptr(rh_off + 14 * 4, header.ptr_nod)?;
        let (neqv, _) = b.ints(nod)?;
        if neqv.len() < header.n_nodes {
            return Err(
                b.bad(nod, format!("node table of {} for {} nodes", neqv.len(), header.n_nodes))
            );
        }
        let solution_nodes: Vec<u64> =
            neqv[..header.n_nodes].iter().map(|&n| n as u32 as u64).collect();

        // Result-set table.
        let result_sets = read_set_table(&b, &header, rh_off)?;

        // Geometry.
        let geo = b.check_ptr(rh_off + 15 * 4, header.ptr_geo)?;
        let (gh, _) = b.ints(geo)?;
        if gh.len() < 20 {
            return Err(b.bad(geo, format!("geometry header has {} words", gh.len())));
        }
        let g_off = geo * 4 + 8;
        let maxety = gh[1].max(0) as usize;
        let ndnod = gh[3].max(0) as usize;
        let nelm = gh[4].max(0) as usize;
        let long = get(&gh, 20) != 0 || get(&gh, 26) != 0 || get(&gh, 28) != 0;
        let (p_ety, p_loc, p_eid) = if long {
            (ptr64(&gh, 20, 21), ptr64(&gh, 26, 27), ptr64(&gh, 28, 29))
        } else {
            (gh[6] as u32 as u64, gh[8] as u32 as u64, gh[10] as u32 as u64)
        };
        let (i_ety, i_loc, i_eid) = if long { (20, 26, 28) } else { (6, 8, 10) };

        // Element types.
        let p_ety = b.check_ptr(g_off + 4 * i_ety, p_ety)?;
        let (ety_ptrs, _) = b.ints(p_ety)?;
        let mut element_types = Vec::new();
        for (k, &rel) in ety_ptrs.iter().take(maxety.max(ety_ptrs.len())).enumerate() {
            if rel == 0 {
                continue;
            }
            let at = b.check_ptr(p_ety * 4 + 8 + 4 * k as u64, p_ety + rel as u32 as u64)?;
            let (e, _) = b.ints(at)?;
            if e.len() < 2 {
                return Err(b.bad(at, "element type record shorter than 2 words"));
            }
            let (kind, name) = element_kind(e[1] as u32);
            let mut keyopts = [0i32; 12];
            for (j, kv) in keyopts.iter_mut().enumerate() {
                *kv = get(&e, 2 + j);
            }
            element_types.push(ElementTypeInfo {
                number: e[0] as u32,
                ansys_type: e[1] as u32,
                name,
                nodes_per_element: get(&e, 60).max(0) as usize,
                keyopts,
                supported: kind != super::ElementKind::Unsupported,
            });
        }

        // Nodes.
        let mut mb = MeshBuilder::new();
        let mut at = b.check_ptr(g_off + 4 * i_loc, p_loc)?;
        let mut n_read = 0usize;
        while n_read < ndnod {
            let (v, info) = b.reals(at)?;
            let per_record = if v.len() == 7 * ndnod && n_read == 0 { ndnod } else { 1 };
            if v.len() < 4 * per_record {
                return Err(b.bad(at, format!("node record of {} values", v.len())));
            }
            let stride = v.len() / per_record;
            for row in v.chunks_exact(stride).take(per_record) {
                let num = row[0];
                if !((1.0..9.0e15).contains(&num) && num.fract() == 0.0) {
                    return Err(b.bad(at, format!("node number {num}")));
                }
                if !mb.add_node(num as u64, [row[1], row[2], row[3]]) {
                    return Err(b.bad(at, format!("node {num} defined twice")));
                }
            }
            n_read += per_record;
            at = info.at + 3 + info.words as u64;
        }

        // Elements.
        let p_eid = b.check_ptr(g_off + 4 * i_eid, p_eid)?;
        let (eid, _) = b.ints(p_eid)?;
        let wide = if eid.len() >= 2 * nelm {
            true
        } else if eid.len() >= nelm {
            false
        } else {
            return Err(
                b.bad(p_eid, format!("element index of {} words for {nelm} elements", eid.len()))
            );
        };
        let nodelm: HashMap<u32, (u32, usize)> =
            element_types.iter().map(|e| (e.number, (e.ansys_type, e.nodes_per_element))).collect();
        let mut elements = Vec::with_capacity(nelm.min(data.len() / 64));
        for k in 0..nelm {
            let rel = if wide { ptr64(&eid, 2 * k, 2 * k + 1) } else { eid[k] as u32 as u64 };
            let from = p_eid * 4 + 8 + 4 * (if wide { 2 * k } else { k }) as u64;
            let at = b.check_ptr(from, p_eid + rel)?;
            let (e, _) = b.ints(at)?;
            if e.len() < 10 {
                return Err(b.bad(at, format!("element record of {} words", e.len())));
            }
            let type_ref = e[1] as u32;
            let (ansys_type, nn) = nodelm.get(&type_ref).copied().unwrap_or((0, 0));
            let avail = e.len() - 10;
            let nn = if nn == 0 { avail } else { nn.min(avail) };
            let mut nodes = Vec::with_capacity(nn);
            for &x in &e[10..10 + nn] {
                if x < 0 {
                    return Err(b.bad(at, format!("negative node number {x}")));
                }
                nodes.push(x as u64);
            }
            let mut rec = ElementRecord {
                number: e[8] as u32 as u64,
                type_ref,
                ansys_type,
                material: e[0] as u32,
                real: e[2] as u32,
                section: e[3] as u32,
                nodes,
                cell: None,
            };
            mb.add_element(&mut rec).map_err(|node| {
                b.bad(at, format!("element {} uses node {node}, which is not defined", rec.number))
            })?;
            elements.push(rec);
        }
        let sol_index: Vec<u32> = solution_nodes
            .iter()
            .map(|n| mb.index.get(n).map_or(u32::MAX, |&i| i as u32))
            .collect();
        let (mesh, skipped) = mb.finish();
        Ok(RstFile {
            path: path.to_path_buf(),
            header,
            mesh,
            element_types,
            elements,
            skipped,
            result_sets,
            dof_names,
            solution_nodes,
            data: FileBytes(data),
            sol_index,
            shortfall,
        })
    }

    /// The error that says the file is shorter than its header declares, if it is (see
    /// [`RstFile::shortfall`]): for callers that refuse such a file (`--strict`).
    pub fn check_length(&self) -> Result<(), AnsysError> {
        match self.shortfall {
            Some(Shortfall { declared, found }) => {
                Err(AnsysError::ShorterThanDeclared { file: self.path.clone(), declared, found })
            }
            None => Ok(()),
        }
    }

    /// Total size of the file in bytes.
    pub fn file_len(&self) -> usize {
        self.data.0.len()
    }

    /// The nodal DOF solution of result set `set` (1-based): values for every mesh node, in
    /// mesh node order (see [`NodalSolution`]).
    pub fn nodal_solution(&self, set: usize) -> Result<NodalSolution, AnsysError> {
        self.nodal_solution_of(set).map_err(|e| match &self.shortfall {
            Some(s) => cut_short(e, s, &self.path),
            None => e,
        })
    }

    fn nodal_solution_of(&self, set: usize) -> Result<NodalSolution, AnsysError> {
        let b = Bytes { data: &self.data.0, file: &self.path };
        let rs = self.set(set)?;
        let (sh, _) = b.ints(rs.pointer)?;
        if sh.len() < 20 {
            return Err(b.bad(rs.pointer, format!("solution header of {} words", sh.len())));
        }
        let nnod = sh[2].max(0) as usize;
        let ndof = sh[19].max(0) as usize;
        if ndof > 256 {
            return Err(b.bad(rs.pointer, format!("solution header lists {ndof} DOFs per node")));
        }
        if sh.len() < 20 + ndof {
            return Err(b.bad(rs.pointer, format!("solution header lists {ndof} DOFs")));
        }
        let dof_names: Vec<String> = sh[20..20 + ndof].iter().map(|&d| dof_name(d)).collect();
        let p_nsl = rs.pointer + sh[10] as u32 as u64;
        let p_nsl = b.check_ptr(rs.pointer * 4 + 8 + 40, p_nsl)?;
        let (v, _) = b.reals(p_nsl)?;
        let n_sol = nnod.min(self.sol_index.len());
        if v.len() < n_sol * ndof {
            return Err(b.bad(
                p_nsl,
                format!("nodal solution of {} values for {n_sol} nodes × {ndof} DOFs", v.len()),
            ));
        }
        let mut values = vec![f64::NAN; self.mesh.n_nodes() * ndof];
        for (k, row) in v.chunks_exact(ndof.max(1)).take(n_sol).enumerate() {
            let m = self.sol_index[k];
            if m == u32::MAX || ndof == 0 {
                continue;
            }
            let dst = &mut values[m as usize * ndof..(m as usize + 1) * ndof];
            for (d, &x) in dst.iter_mut().zip(row) {
                *d = if x == NO_VALUE { f64::NAN } else { x };
            }
        }
        Ok(NodalSolution { dof_names, values })
    }

    /// Nodal temperatures of result set `set` (1-based), in mesh node order: the `TEMP` DOF of
    /// the nodal solution where the result has one (thermal analyses), otherwise the element
    /// results: each element's `EPT` record holds the temperature at each of its nodes (e.g.
    /// the thermal load of a structural analysis); a node gets the mean over its elements,
    /// `NaN` where no element has temperatures.
    ///
    /// The element solution index (pointer `ptrESL` of the solution header) has one entry per
    /// element in file order, relative to itself; each entry points to a 25-word index of the
    /// element's records (offsets relative to that index), of which `EPT` is the 17th; a
    /// negative entry `-k` (newer files) means `k` zeros that were not written.
    pub fn nodal_temperature(&self, set: usize) -> Result<Vec<f64>, AnsysError> {
        let b = Bytes { data: &self.data.0, file: &self.path };
        let rs = self.set(set)?;
        if self.dof_names.iter().any(|d| d == "TEMP") {
            let sol = self.nodal_solution(set)?;
            if let Some(k) = sol.dof_names.iter().position(|d| d == "TEMP") {
                let n = sol.dof_names.len();
                return Ok(sol.values.iter().skip(k).step_by(n).copied().collect());
            }
        }
        let (sh, _) = b.ints(rs.pointer)?;
        if sh.len() < 12 {
            return Err(b.bad(rs.pointer, format!("solution header of {} words", sh.len())));
        }
        let n_el = (sh[1].max(0) as usize).min(self.elements.len());
        let mut sum = vec![0.0f64; self.mesh.n_nodes()];
        let mut cnt = vec![0u32; self.mesh.n_nodes()];
        if sh[11] > 0 && n_el > 0 {
            let p_esl = b.check_ptr(rs.pointer * 4 + 8 + 44, rs.pointer + sh[11] as u32 as u64)?;
            let (esl, _) = b.ints(p_esl)?;
            let wide = esl.len() >= 2 * n_el;
            if !wide && esl.len() < n_el {
                return Err(b.bad(
                    p_esl,
                    format!("element solution index of {} for {n_el} elements", esl.len()),
                ));
            }
            let index: HashMap<u64, usize> =
                self.mesh.node_tags.iter().enumerate().map(|(i, &t)| (t, i)).collect();
            for (k, el) in self.elements.iter().enumerate().take(n_el) {
                let (rel, from) = if wide {
                    (ptr64(&esl, 2 * k, 2 * k + 1), p_esl * 4 + 8 + 8 * k as u64)
                } else {
                    (esl[k] as u32 as u64, p_esl * 4 + 8 + 4 * k as u64)
                };
                if rel == 0 {
                    continue;
                }
                let at = b.check_ptr(from, p_esl + rel)?;
                let (idx, _) = b.ints(at)?;
                let ept = get(&idx, 16);
                let t = match ept {
                    0 => continue,
                    // a negative entry -k stands for a record of k zeros that was not written
                    k if k < 0 => vec![0.0; (k.unsigned_abs() as usize).min(el.nodes.len())],
                    k => b.reals(b.check_ptr(at * 4 + 8 + 64, at + k as u64)?)?.0,
                };
                for (node, &temp) in el.nodes.iter().zip(&t) {
                    if let Some(&i) = index.get(node) {
                        sum[i] += temp;
                        cnt[i] += 1;
                    }
                }
            }
        }
        Ok(sum
            .iter()
            .zip(&cnt)
            .map(|(&s, &c)| if c == 0 { f64::NAN } else { s / c as f64 })
            .collect())
    }

    fn set(&self, set: usize) -> Result<&ResultSet, AnsysError> {
        if set == 0 || set > self.result_sets.len() {
            return Err(AnsysError::NoSuchSet {
                file: self.path.clone(),
                set,
                available: self.result_sets.len(),
            });
        }
        Ok(&self.result_sets[set - 1])
    }
}

/// The data-step index, time and load-step tables.
fn read_set_table(b: &Bytes, h: &RstHeader, rh_off: u64) -> Result<Vec<ResultSet>, AnsysError> {
    let n = h.n_sets;
    if n == 0 {
        return Ok(Vec::new());
    }
    let dsi = b.check_ptr(rh_off + 40, h.ptr_dsi)?;
    let tim = b.check_ptr(rh_off + 44, h.ptr_tim)?;
    let lsp = b.check_ptr(rh_off + 48, h.ptr_lsp)?;
    let (d, _) = b.ints(dsi)?;
    let (t, _) = b.reals(tim)?;
    let (l, _) = b.ints(lsp)?;
    let resmax = h.resmax.max(n);
    if d.len() < n || t.len() < n || l.len() < 3 * n {
        return Err(b.bad(dsi, format!("result-set tables too short for {n} sets")));
    }
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let hi = if d.len() >= resmax + n { d[resmax + i] as u32 as u64 } else { 0 };
        let ptr = (d[i] as u32 as u64) | (hi << 32);
        let ptr = b.check_ptr(dsi * 4 + 8 + 4 * i as u64, ptr)?;
        out.push(ResultSet {
            index: i + 1,
            load_step: l[3 * i],
            substep: l[3 * i + 1],
            cumulative_iteration: l[3 * i + 2],
            time_or_frequency: t[i],
            pointer: ptr,
        });
    }
    Ok(out)
}
