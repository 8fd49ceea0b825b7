//! ANSYS MAPDL readers: binary result files (`.rst`, `.rth`, [`read_rst`]) and archive input
//! decks (`.cdb`, [`read_cdb`]).
//!
//! # Binary result files
//!
//! A MAPDL result file is a sequence of Fortran-style records, all little-endian:
//! `[n: i32][flags: i32][n data words][n: i32]`, where `n` counts 4-byte words. The flag word
//! says how to read the data (bits found on the shared test files, consistent with the
//! published "Description of the Results File"):
//!
//! - bit 31: integer data (otherwise floating point);
//! - bit 30: short precision (`f32` reals, `i16` integers) instead of `f64` / `i32`;
//! - bit 28: *windowed sparse*: `[len, nwin]`, then per window a position `L`: `L > 0` is one
//!   value at `L`; `L <= 0` starts a window at `-L` followed by a count `c` (`c > 0`: `c` values,
//!   `c < 0`: one value repeated `-c` times); every other position is zero;
//! - bit 27: *bit-mask sparse*: `[len, ceil(len/32) mask words]`, then the values of the set
//!   bits in order; every other position is zero.
//!
//! Record pointers are 4-byte word offsets; 64-bit pointers are stored as a low and a high
//! 32-bit half. The file starts with the 100-word standard header, followed at word 103 by the
//! result-file header (pointers to the data-step index, time table, load-step table, node and
//! element equivalence tables, geometry), then the DOF list. The geometry header points to the
//! element type table, the node coordinates (one record of 7 doubles `[number, x, y, z, θxy,
//! θyz, θzx]` per node) and the element descriptions (one record per element: `mat, type,
//! real, secnum, esys, death, solidm, shape, elnum, pexcl`, then the nodes). Each result set
//! starts with a solution header whose pointer to the nodal DOF solution is relative to it; the
//! nodal solution is stored in the order of the node equivalence table. The value 2¹⁰⁰ marks a
//! DOF without a value (e.g. the transverse DOFs of a truss line); it becomes `NaN`.
//!
//! Everything is bounds-checked: a truncated file, a record whose trailing length disagrees
//! with its leading one, a pointer past the end or an unknown layout gives a typed
//! [`AnsysError`] naming the file and the byte offset; no allocation is larger than the file.
//! The file is read into memory once (`RstFile` keeps the bytes for later result sets).
//!
//! # Element types and node order
//!
//! Supported element types ([`element_kind`]) map to gradfem cells; gradfem's local node order
//! is gmsh's (see `gradfem_mesh::cell`), and ANSYS orders higher-order nodes differently. With
//! `ansys[k]` the k-th node of the ANSYS element, our cell is `cell[i] = ansys[PERM[i]]`:
//!
//! - 20-node brick (SOLID186, SOLID90, SOLID226, SOLID95, ...): ANSYS `I J K L M N O P` are the
//!   corners (= gmsh 0..7), then mid-side `Q(I-J) R(J-K) S(K-L) T(L-I) U(M-N) V(N-O) W(O-P)
//!   X(P-M) Y(I-M) Z(J-N) A(K-O) B(L-P)` (ANSYS 8..19). gmsh's mid-edges are 0-1, 0-3, 0-4, 1-2,
//!   1-5, 2-3, 2-6, 3-7, 4-5, 4-7, 5-6, 6-7, so
//!   `PERM = [0..8, 8 (Q), 11 (T), 16 (Y), 9 (R), 17 (Z), 10 (S), 18 (A), 19 (B), 12 (U),
//!   15 (X), 13 (V), 14 (W)]` ([`HEX20_FROM_ANSYS`]).
//! - degenerate 20-node brick as tetrahedron (`K = L`, `M = N = O = P`): corners `I J K M`,
//!   mid-edges (gmsh 0-1, 1-2, 2-0, 3-0, 3-2, 3-1) = `Q R T Y A Z`, i.e. ANSYS
//!   `[0, 1, 2, 4, 8, 9, 11, 16, 18, 17]` ([`TET10_FROM_ANSYS_HEX20`]).
//! - 10-node tetrahedron (SOLID187, SOLID87, SOLID227, SOLID92): `I J K L`, then `M(I-J)
//!   N(J-K) O(K-I) P(I-L) Q(J-L) R(K-L)`, so `PERM = [0, 1, 2, 3, 4, 5, 6, 7, 9, 8]`
//!   ([`TET10_FROM_ANSYS`]).
//! - 8-node brick (SOLID185, SOLID70, SOLID45, ...): identity; degenerate forms `K = L`,
//!   `M = N = O = P` → `Tet4 [I, J, K, M]`, `K = L`, `O = P` → `Prism6 [I, J, K, M, N, O]`.
//! - 8-node quadrilateral (PLANE183, PLANE77, PLANE82): identity (`M N O P` are mid-sides
//!   I-J, J-K, K-L, L-I); triangle form `K = L = O` → `Tri6 [I, J, K, M, N, P]`.
//! - 4-node quadrilateral (PLANE182, PLANE55, SHELL181, ...): identity; `K = L` → `Tri3`.
//! - line elements (LINK180, LINK33, LINK31, BEAM188, ...): `Line2 [I, J]` (orientation
//!   nodes dropped).
//!
//! An element whose mid-side nodes are absent (stored as 0) becomes the linear cell of its
//! corners (a 20-node brick with a warning). Forms gradfem has no cell for (20-node prism,
//! pyramids) and unsupported element types (surface effect, contact, target, MPC, ...) are
//! skipped with a `tracing::warn!` naming the type and element, and listed in `skipped`; they
//! never produce a wrong mesh. Archives are read in both `EBLOCK` layouts, `SOLID` and the
//! compact one (`cdb.rs` documents the record layouts).
//!
//! # Groups
//!
//! Both readers add one [`gradfem_mesh::PhysicalGroup`] per material (`material_<n>`, tag `n`)
//! and per element type reference number (`etype_<n>`, tag `n`); a group's dimension is the
//! largest dimension of its cells and it holds only the cells of that dimension. The archive
//! reader adds one group per element component (`CMBLOCK ... ELEM`, named as in the file, tag
//! = position) and keeps node components separately.

mod cdb;
mod order;
mod record;
mod rst;

pub use cdb::{CdbArchive, read_cdb, read_cdb_bytes};
pub use order::{
    ElementKind, ElementRecord, HEX20_FROM_ANSYS, TET10_FROM_ANSYS, TET10_FROM_ANSYS_HEX20,
    element_kind,
};
pub use rst::{NodalSolution, ResultSet, RstFile, RstHeader, Shortfall, dof_name, read_rst};

use std::path::PathBuf;

/// Errors of the ANSYS readers; each names the file and where in it the problem is (byte
/// offset for binary files, 1-based line for archives).
#[derive(Debug, thiserror::Error)]
pub enum AnsysError {
    /// The operating system failed to read the file.
    #[error("{file}: {source}")]
    Io {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file ends before a record or value that should be there.
    #[error("{file}: truncated at byte {offset}: {needed} more bytes needed")]
    Truncated { file: PathBuf, offset: u64, needed: u64 },
    /// The file is shorter than the length its standard header declares (a cut copy or an
    /// interrupted write), even where the records read so far are whole.
    #[error(
        "{file}: truncated: the standard header declares {declared} bytes (word 27: {} words), the file has {found}; it was cut short (an interrupted copy or write)",
        declared / 4
    )]
    ShorterThanDeclared { file: PathBuf, declared: u64, found: u64 },
    /// A record is inconsistent (lengths, compression, counts).
    #[error("{file}: bad record at byte {offset}: {message}")]
    BadRecord { file: PathBuf, offset: u64, message: String },
    /// A pointer (word offset) read at `offset` points outside the file.
    #[error("{file}: pointer {pointer} (words) read at byte {offset} points past the end")]
    PointerOutOfRange { file: PathBuf, offset: u64, pointer: u64 },
    /// The file is not in a layout this reader understands.
    #[error("{file}: unsupported format: {message}")]
    UnsupportedFormat { file: PathBuf, message: String },
    /// A result set that is not in the file was asked for (sets are 1-based).
    #[error("{file}: no result set {set}; the file has {available} (1-based)")]
    NoSuchSet { file: PathBuf, set: usize, available: usize },
    /// A syntax error in an archive (`.cdb`).
    #[error("{file}:{line}:1: {message}")]
    Syntax { file: PathBuf, line: usize, message: String },
}

/// One entry of the element type table: the reference number used by the elements, the
/// element routine number (186 for SOLID186) and what gradfem makes of it.
#[derive(Clone, Debug, PartialEq)]
pub struct ElementTypeInfo {
    /// Element type reference number (`ET,<number>,...`).
    pub number: u32,
    /// ANSYS element routine number, e.g. 186.
    pub ansys_type: u32,
    /// Name, e.g. `"SOLID186"` (from [`element_kind`]; `"TYPE<n>"` if unknown).
    pub name: String,
    /// Nodes per element as stored (`NODELM`), 0 when unknown (archives).
    pub nodes_per_element: usize,
    /// KEYOPT(1..=12) where known (zeros otherwise).
    pub keyopts: [i32; 12],
    /// Whether gradfem maps this type to cells (otherwise its elements are skipped).
    pub supported: bool,
}

/// An element that was not turned into a cell, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct SkippedElement {
    /// ANSYS element number.
    pub element: u64,
    /// ANSYS element routine number (e.g. 154 for SURF154).
    pub ansys_type: u32,
    /// Why it was skipped.
    pub reason: String,
}
