//! gmsh `.msh` files: a reader for format 2.2 and 4.1 (ASCII and binary) and a 4.1 writer.
//!
//! # What is read
//!
//! - `$MeshFormat`: versions `2.x` (legacy 2.2 layout) and `4.1`; ASCII or binary, either
//!   endianness (detected from the integer `1` after the header), `size_t` of 4 or 8 bytes (4.1).
//!   Other versions (1.0 `$NOD`, 3.0, 4.0) are [`GmshError::UnsupportedVersion`].
//! - `$PhysicalNames` (always ASCII): the names of the physical groups.
//! - `$Entities` (4.1): the physical tags of each geometric entity. An element belongs to every
//!   physical group of its entity, so groups may overlap.
//! - `$Nodes` (any number of entity blocks, several sections allowed) and `$Elements` (any
//!   number of blocks). Node and element tags may be sparse and unordered: nodes are numbered
//!   0.. in file order, the tags are kept in [`Mesh::node_tags`] and [`CellBlock::tags`], and
//!   element node tags are mapped to these indices (a dense table when the tags are nearly
//!   contiguous, a hash map otherwise).
//! - Elements of every [`CellType`] (gmsh types 1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12, 15, 16, 17);
//!   gradfem's local node order is gmsh's, so connectivity is copied as is. One [`CellBlock`]
//!   per cell type, in order of first appearance; within a block, cells keep file order.
//! - Elements without a physical tag (2.2 physical tag 0, 4.1 entity without physical tags or
//!   no `$Entities` section) are kept in their block and belong to no group.
//! - msh 2.2: gmsh writes an element that belongs to several physical groups once per group,
//!   consecutively and with the same number; such a repeat (same number, type and nodes as the
//!   element just before) becomes one cell in several groups.
//! - msh 4.1: `$Entities` must come before `$Elements` (as gmsh writes it) for the elements to
//!   get their physical groups.
//! - Every other section (`$Periodic`, `$NodeData`, `$ElementData`, `$Comments`, ...) is
//!   skipped up to its `$End...` line.
//!
//! # Physical groups
//!
//! One [`PhysicalGroup`] per (dimension, physical tag) that is named in `$PhysicalNames` or
//! carries at least one element, sorted by (dimension, tag). A group without a name in
//! `$PhysicalNames` is called `"<dim>d_<tag>"` (e.g. `"2d_11"`). In 2.2 the first element tag is
//! the physical tag (0 = none); in 4.1 the physical tags come from the element block's entity.
//! Group cells are sorted [`CellId`]s.
//!
//! # Robustness
//!
//! A malformed file (truncated anywhere, bad header, garbage numbers, counts that do not match,
//! an element referring to an undefined node, an unknown element type, flipped bytes) gives a
//! [`GmshError`] naming the file and the line (ASCII files) or byte offset (binary files); the
//! reader never panics. Loops consume at least one byte per iteration, and pre-allocations are
//! capped by what the remaining bytes can hold, so a garbage count cannot cause a huge
//! allocation or an endless loop. The header's min/max tag fields are not trusted (only hints).
//!
//! # Why not `mshio`
//!
//! The workspace's chosen crate `mshio` 0.4.2 reads only 4.1 and no `$PhysicalNames`, so 2.2
//! and the names need a reader of our own anyway. We also wrote the 4.1 body ourselves, for
//! these measured reasons:
//! - **panics on bad input** (checked with a small program against mshio 0.4.2): a binary
//!   header with data size 3 (`4.1 1 3`) hits `unimplemented!` in
//!   `src/parsers/num_parsers.rs:80`, and a 30-digit data size (`4.1 0 999...`) hits an
//!   `unwrap` in `src/parsers/header_section.rs:54`. One corrupted header byte would abort the
//!   caller; our property tests (`tests/gmsh_robustness.rs`) require an error instead.
//! - **memory**: mshio stores each element as its own `Vec<u64>` before we could convert it.
//!   On the 998 250-tet benchmark file (msh 4.1 binary, 45.6 MB) mshio alone peaks at 164 MB
//!   resident (3.6× the file, before any conversion to a [`Mesh`], which would add ~60 MB);
//!   this reader parses straight into the [`Mesh`] and peaks at 105 MB (2.3× the file) with the
//!   mesh built, in 0.08–0.11 s (mshio: 0.11 s binary, 0.29 s ASCII without conversion; ours
//!   0.10–0.20 s ASCII). Numbers from `examples/bench_gmsh_read.rs` on a shared 2-core machine.
//! - **errors**: mshio's errors borrow the input and carry no line number or offset.
//!
//! The reader is one tokenizer over the file's bytes (`read.rs`): whitespace-separated tokens
//! with hand-written integer parsing for ASCII, fixed-size little/big-endian reads for binary.
//!
//! # Writer
//!
//! [`write_msh41`] writes msh 4.1 (ASCII or binary, `size_t` = 8, little-endian) with
//! `$PhysicalNames`, `$Entities`, `$Nodes` and `$Elements`; see its documentation for how
//! entities are made up from the groups. Reading the written file back gives the same mesh.

mod read;
mod write;

use std::fmt;
use std::path::{Path, PathBuf};

use gradfem_mesh::Mesh;
#[allow(unused_imports)] // used by doc links
use gradfem_mesh::{CellBlock, CellId, CellType, PhysicalGroup};

/// Where in a file something went wrong: a 1-based line in ASCII files, a 0-based byte offset in
/// binary files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Position {
    Line(usize),
    Offset(usize),
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // Appended to the file name: `file:line:col` like every located error of gradfem
            // (the column of a whole line is 1), `file: byte offset n` in a binary file.
            Position::Line(l) => write!(f, ":{l}:1"),
            Position::Offset(o) => write!(f, ": byte offset {o}"),
        }
    }
}

/// What can go wrong reading or writing a gmsh file. Every variant names the file, and those
/// about its content the line (ASCII) or byte offset (binary).
#[derive(Debug, thiserror::Error)]
pub enum GmshError {
    /// The file could not be opened, read or written.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Malformed ASCII content (a bad number, a missing keyword, ...).
    #[error("{file}:{line}:1: {message}")]
    Syntax { file: String, line: usize, message: String },
    /// Malformed content of a binary file.
    #[error("{file}: at byte offset {offset}: {message}")]
    Binary { file: String, offset: usize, message: String },
    /// A `$MeshFormat` version this reader does not handle (it reads 2.x and 4.1).
    #[error("{file}: msh format version {version} is not supported (gradfem reads 2.2 and 4.1)")]
    UnsupportedVersion { file: String, version: String },
    /// An element type that gradfem has no [`CellType`] for.
    #[error(
        "{file}{position}: gmsh element type {gmsh_type} is not supported (gradfem reads types \
         1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12, 15, 16, 17)"
    )]
    UnknownElementType { file: String, position: Position, gmsh_type: i64 },
    /// An element refers to a node tag that no `$Nodes` section defines.
    #[error(
        "{file}{position}: element {element_tag} refers to node {node_tag}, which is not \
         defined in $Nodes"
    )]
    UndefinedNode { file: String, position: Position, element_tag: u64, node_tag: u64 },
    /// The same node tag is defined twice (position: the `$Nodes` section).
    #[error("{file}{position}: node tag {node_tag} is defined twice")]
    DuplicateNode { file: String, position: Position, node_tag: u64 },
    /// The file ends before something it announced.
    #[error("{file}{position}: the file ends while reading {expected}")]
    Truncated { file: String, position: Position, expected: String },
    /// A section header announces a different number of items than the section holds.
    #[error("{file}{position}: {what}: the header announces {declared}, the section holds {found}")]
    CountMismatch { file: String, position: Position, what: String, declared: u64, found: u64 },
    /// [`write_msh41`] was given a mesh that fails [`Mesh::validate`].
    #[error("{}: cannot write an inconsistent mesh: {message}", path.display())]
    InvalidMesh { path: PathBuf, message: String },
}

/// Read a gmsh `.msh` file (format 2.2 or 4.1, ASCII or binary) into a [`Mesh`].
///
/// See the [module documentation](self) for what is read and how groups are formed.
pub fn read_msh(path: &Path) -> Result<Mesh, GmshError> {
    let bytes =
        std::fs::read(path).map_err(|source| GmshError::Io { path: path.to_path_buf(), source })?;
    read_msh_bytes(&path.display().to_string(), &bytes)
}

/// Read the bytes of a gmsh `.msh` file; `name` is the file name used in errors.
pub fn read_msh_bytes(name: &str, bytes: &[u8]) -> Result<Mesh, GmshError> {
    let mesh = read::parse(name, bytes)?;
    tracing::debug!(
        file = name,
        nodes = mesh.n_nodes(),
        blocks = mesh.blocks.len(),
        groups = mesh.groups.len(),
        "read gmsh mesh"
    );
    Ok(mesh)
}

/// Write `mesh` as a gmsh msh 4.1 file (binary little-endian with `size_t` = 8 if `binary`,
/// else ASCII).
///
/// Layout:
/// - `$PhysicalNames`: every group (`dim tag "name"`; a `"` or line break in a name is written
///   as `'` or a space).
/// - `$Entities`: one entity per (dimension, set of groups) that occurs among the cells, so a
///   cell in several overlapping groups keeps all of them, and cells in no group get an entity
///   without physical tags. Entity tags count from 1 per dimension; every entity's bounding box
///   is the mesh's; no boundary entities are listed.
/// - `$Nodes`: one block holding all nodes, on the first entity of the mesh's dimension.
/// - `$Elements`: per cell block, one element block per run of consecutive cells on the same
///   entity, so reading the file back gives the cells in the same order.
///
/// Tags: the mesh's node tags and cell tags are written if they are positive and unique
/// (node tags among nodes, cell tags across all blocks); otherwise that kind of tag is
/// renumbered 1, 2, ... in order (and reading back then gives those numbers). Empty cell blocks
/// are not written. Coordinates are written with the shortest representation that reads back
/// to the same `f64`, so an ASCII round trip is exact.
pub fn write_msh41(path: &Path, mesh: &Mesh, binary: bool) -> Result<(), GmshError> {
    write::write(path, mesh, binary)
}
