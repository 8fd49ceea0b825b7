//! MAPDL archive files (`.cdb`, written by `CDWRITE`, and the input files Mechanical writes):
//! `ET`/`KEYOP` element types, `NBLOCK` nodes, `EBLOCK` elements (both record layouts),
//! `CMBLOCK` components. Other commands are ignored.
//!
//! Blocks are fixed-width Fortran records whose widths come from the format line that follows
//! the block command (`(3i9,6e21.13e3)`, `(19i10)`, ...); blank or missing fields read as 0,
//! so nodes without coordinates sit at the origin. Keywords are case-insensitive.
//!
//! # `EBLOCK` record layouts
//!
//! `EBLOCK,NUM_NODES,Solkey,NDMAX,NDSEL` is followed by an all-integer format line, one record
//! per element and a line whose first field is `-1`. A record line ends after its last written
//! field. Two layouts exist (MAPDL command reference, `EBLOCK`):
//!
//! - `Solkey = SOLID` (what `CDWRITE` writes, `(19i9)` or `(19i10)`): material, type, real
//!   constant, section, element coordinate system, birth/death flag, solid-model reference,
//!   shape flag, node count `n`, (unused), element number, then the `n` nodes, as many as the
//!   first line holds (8) and the rest on continuation lines.
//! - `Solkey` blank (Mechanical writes it for surface, contact and target elements, `(15i9)`):
//!   element number, type, real constant, material, element coordinate system, then the nodes,
//!   up to 10 on the first line. The manual calls field 2 "the type of section ID"; files hold
//!   the `ET` reference number there, so it is read as the type. The layout has no section
//!   field (the record's section is 0) and no node count: the nodes are the fields present on
//!   the first line. A record goes on to further lines only when its first line is full and
//!   its type has more nodes than fit (20-node bricks, 16-node interface elements), or, for a
//!   type gradfem does not map to cells, when the next line has too few fields (fewer than 6)
//!   to be a record of its own.
//!
//! Elements of either layout become cells through [`super::element_kind`] and the ANSYS → gmsh
//! node orders of [`crate::ansys`]; an element that cannot be a cell is listed in `skipped`.
//! A truncated record, a field that is not an integer, a blank line inside the block, a record
//! or block that runs past the end of the file, or an element on a node that `NBLOCK` does not
//! define is an [`AnsysError::Syntax`] naming the file and the record's line.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use gradfem_mesh::{CellId, Mesh};

use super::order::{ElementRecord, MeshBuilder, element_kind, make_group};
use super::{AnsysError, ElementKind, ElementTypeInfo, SkippedElement};

/// A decoded archive.
#[derive(Clone, Debug)]
pub struct CdbArchive {
    /// The file read.
    pub path: PathBuf,
    /// The mesh (nodes in `NBLOCK` order, `node_tags` = ANSYS node numbers, cell tags = ANSYS
    /// element numbers), with `material_<n>` and `etype_<n>` groups and one group per element
    /// component (named as in the file).
    pub mesh: Mesh,
    /// Element types from `ET` (and `KEYOP`) commands.
    pub element_types: Vec<ElementTypeInfo>,
    /// Every element in file order, with its ANSYS connectivity and the cell it became.
    pub elements: Vec<ElementRecord>,
    /// Elements that did not become cells.
    pub skipped: Vec<SkippedElement>,
    /// Node components: name and the 0-based mesh node indices of its nodes (sorted).
    pub node_components: Vec<(String, Vec<usize>)>,
}

/// Read an archive file.
pub fn read_cdb(path: &Path) -> Result<CdbArchive, AnsysError> {
    let data = std::fs::read(path)
        .map_err(|source| AnsysError::Io { file: path.to_path_buf(), source })?;
    read_cdb_bytes(path, &data)
}

/// One item of a Fortran format: `count` fields of `width` characters, integer or real.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Field {
    count: usize,
    int: bool,
    width: usize,
}

/// Parse a Fortran format line like `(3i9,6e21.13e3)` or `(19i10)`.
fn parse_format(s: &str) -> Option<Vec<Field>> {
    let s = s.trim();
    let inner = s.strip_prefix('(')?.split(')').next()?;
    let mut out = Vec::new();
    for item in inner.split(',') {
        let item = item.trim().to_ascii_lowercase();
        if item.is_empty() || item.ends_with('p') || item.ends_with('x') {
            continue;
        }
        let pos = item.find(|c: char| c.is_ascii_alphabetic())?;
        let count = if pos == 0 { 1 } else { item[..pos].parse().ok()? };
        let kind = item.as_bytes()[pos];
        let rest = &item[pos + 1..];
        let width: usize = rest.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()?;
        if width == 0 || width > 64 || count > 1000 {
            return None;
        }
        let int = match kind {
            b'i' => true,
            b'e' | b'f' | b'g' | b'd' => false,
            _ => return None,
        };
        out.push(Field { count, int, width });
    }
    if out.is_empty() { None } else { Some(out) }
}

/// Parse a Fortran real (`1.5E+000`, `1.5D+00`, `1.5-100`, blank = 0).
fn parse_real(s: &str) -> Option<f64> {
    let t = s.trim();
    if t.is_empty() {
        return Some(0.0);
    }
    if let Ok(v) = t.parse::<f64>() {
        return Some(v);
    }
    let t = t.replace(['d', 'D'], "E");
    if let Ok(v) = t.parse::<f64>() {
        return Some(v);
    }
    // exponent without a letter: mantissa then sign
    let first = t.chars().next()?.len_utf8();
    let p = t[first..].rfind(['+', '-'])? + first;
    format!("{}E{}", &t[..p], &t[p..]).parse().ok()
}

/// Split a fixed-width line into integer and real fields following `fmt`.
fn split_fixed(
    line: &str,
    fmt: &[Field],
    ints: &mut Vec<i64>,
    reals: &mut Vec<f64>,
) -> Result<(), String> {
    ints.clear();
    reals.clear();
    let bytes = line.as_bytes();
    let mut pos = 0usize;
    for f in fmt {
        for _ in 0..f.count {
            let end = (pos + f.width).min(bytes.len());
            let s = if pos < end {
                std::str::from_utf8(&bytes[pos..end]).map_err(|_| "non-ASCII field".to_string())?
            } else {
                ""
            };
            pos += f.width;
            if f.int {
                let t = s.trim();
                let v = if t.is_empty() {
                    0
                } else {
                    t.parse::<i64>().map_err(|_| format!("not an integer: {t:?}"))?
                };
                ints.push(v);
            } else {
                reals.push(parse_real(s).ok_or_else(|| format!("not a number: {:?}", s.trim()))?);
            }
        }
    }
    Ok(())
}

/// Number of fields of `fmt` that `line` reaches: a record line ends after its last written
/// field, so trailing blanks do not count.
fn fields_present(line: &str, fmt: &[Field]) -> usize {
    let len = line.trim_end().len();
    let mut pos = 0usize;
    let mut n = 0usize;
    for f in fmt {
        for _ in 0..f.count {
            if pos >= len {
                return n;
            }
            pos += f.width;
            n += 1;
        }
    }
    n
}

/// Whether `line` closes an element block: its first field is `-1`.
fn closes_block(line: &str) -> bool {
    line.split_whitespace().next() == Some("-1")
}

/// The layout of an `EBLOCK`'s records (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EblockLayout {
    /// `Solkey = SOLID`: 11 attribute fields (node count included), then the nodes.
    Solid,
    /// `Solkey` blank: element number, type, real constant, material, coordinate system, then
    /// the nodes.
    Compact,
}

impl EblockLayout {
    /// Fields before the first node.
    fn head(self) -> usize {
        match self {
            EblockLayout::Solid => 11,
            EblockLayout::Compact => 5,
        }
    }
}

/// Node count of the element types whose compact records need more than one line of `(15i9)`:
/// the 20-node bricks gradfem reads, the 16-node interface elements (INTER194, INTER204) and the
/// 20-node acoustic brick (FLUID220). `None` for every other type.
fn long_record_nodes(ansys_type: u32) -> Option<usize> {
    match (element_kind(ansys_type).0, ansys_type) {
        (ElementKind::Solid20, _) | (_, 220) => Some(20),
        (_, 194 | 204) => Some(16),
        _ => None,
    }
}

/// Read the records of the `EBLOCK` whose command is on line `start` (0-based; `args` are the
/// command's arguments after the keyword) into `out` as (record line, record); returns the line
/// after the block.
fn read_eblock(
    path: &Path,
    lines: &[&str],
    start: usize,
    args: &[&str],
    types: &[ElementTypeInfo],
    out: &mut Vec<(usize, ElementRecord)>,
) -> Result<usize, AnsysError> {
    let syntax = |line: usize, message: String| AnsysError::Syntax {
        file: path.to_path_buf(),
        line: line + 1,
        message,
    };
    let layout = if args.get(1).is_some_and(|s| s.eq_ignore_ascii_case("SOLID")) {
        EblockLayout::Solid
    } else {
        EblockLayout::Compact
    };
    let fmt_line =
        lines.get(start + 1).ok_or_else(|| syntax(start, "EBLOCK without a format line".into()))?;
    let fmt = parse_format(fmt_line)
        .ok_or_else(|| syntax(start + 1, format!("bad format {fmt_line:?}")))?;
    if !fmt.iter().all(|f| f.int) {
        return Err(syntax(start + 1, format!("EBLOCK format {fmt_line:?} is not all integers")));
    }
    let per_line: usize = fmt.iter().map(|f| f.count).sum();
    let head = layout.head();
    if per_line <= head {
        return Err(syntax(
            start + 1,
            format!(
                "EBLOCK format {fmt_line:?} has {per_line} fields per line; a record needs {head} \
                 attribute fields and the nodes"
            ),
        ));
    }
    let type_of = |r: u32| types.iter().find(|t| t.number == r).map_or(0, |t| t.ansys_type);
    let mut ints = Vec::new();
    let mut reals = Vec::new();
    let mut count = 0usize;
    let mut i = start + 2;
    loop {
        let Some(&line) = lines.get(i) else {
            return Err(syntax(
                start,
                format!(
                    "EBLOCK is not closed by -1: the file ends at line {} after {count} elements",
                    lines.len()
                ),
            ));
        };
        if closes_block(line) {
            break;
        }
        if line.trim().is_empty() {
            return Err(syntax(i, "blank line inside an EBLOCK (a block ends with -1)".into()));
        }
        let first = i;
        split_fixed(line, &fmt, &mut ints, &mut reals).map_err(|m| syntax(i, m))?;
        let present = fields_present(line, &fmt);
        let (mut rec, want) = match layout {
            EblockLayout::Solid => {
                if present < head {
                    return Err(syntax(
                        i,
                        format!("solid EBLOCK record with {present} fields; it needs at least 11"),
                    ));
                }
                check_fields(&ints[..head]).map_err(|m| syntax(i, m))?;
                let nn = ints[8] as usize;
                if nn > 1000 {
                    return Err(syntax(i, format!("element with {nn} nodes")));
                }
                let on_first = nn.min(per_line - head);
                if present < head + on_first {
                    return Err(syntax(
                        i,
                        format!(
                            "element {}: record ends after {} of its {nn} nodes",
                            ints[10],
                            present - head
                        ),
                    ));
                }
                check_fields(&ints[head..head + on_first]).map_err(|m| syntax(i, m))?;
                let rec = ElementRecord {
                    number: ints[10] as u64,
                    type_ref: ints[1] as u32,
                    ansys_type: 0,
                    material: ints[0] as u32,
                    real: ints[2] as u32,
                    section: ints[3] as u32,
                    nodes: ints[head..head + on_first].iter().map(|&x| x as u64).collect(),
                    cell: None,
                };
                (rec, nn)
            }
            EblockLayout::Compact => {
                if present <= head {
                    return Err(syntax(
                        i,
                        format!(
                            "EBLOCK record with {present} fields; it needs element number, type, \
                             real constant, material, coordinate system and at least one node"
                        ),
                    ));
                }
                check_fields(&ints[..present]).map_err(|m| syntax(i, m))?;
                let type_ref = ints[1] as u32;
                let mut rec = ElementRecord {
                    number: ints[0] as u64,
                    type_ref,
                    ansys_type: 0,
                    material: ints[3] as u32,
                    real: ints[2] as u32,
                    section: 0,
                    nodes: ints[head..present].iter().map(|&x| x as u64).collect(),
                    cell: None,
                };
                let full = present == per_line;
                let ansys_type = type_of(type_ref);
                let want = match long_record_nodes(ansys_type) {
                    Some(n) if full => n.max(rec.nodes.len()),
                    _ => rec.nodes.len(),
                };
                if full
                    && want == rec.nodes.len()
                    && element_kind(ansys_type).0 == ElementKind::Unsupported
                {
                    // a type of unknown size: lines too short to be records continue this one
                    while let Some(&next) = lines.get(i + 1)
                        && !closes_block(next)
                        && (1..=head).contains(&fields_present(next, &fmt))
                    {
                        i += 1;
                        split_fixed(next, &fmt, &mut ints, &mut reals).map_err(|m| syntax(i, m))?;
                        let have = fields_present(next, &fmt);
                        check_fields(&ints[..have]).map_err(|m| syntax(i, m))?;
                        rec.nodes.extend(ints[..have].iter().map(|&x| x as u64));
                    }
                }
                (rec, want)
            }
        };
        if rec.number == 0 {
            return Err(syntax(first, "element number 0".into()));
        }
        // continuation lines
        while rec.nodes.len() < want {
            let have_nodes = rec.nodes.len();
            i += 1;
            let l = match lines.get(i) {
                Some(&l) if !closes_block(l) => l,
                found => {
                    let end = if found.is_some() { "the block ends" } else { "the file ends" };
                    return Err(syntax(
                        first,
                        format!(
                            "element {}: {end} after {have_nodes} of its {want} nodes",
                            rec.number
                        ),
                    ));
                }
            };
            split_fixed(l, &fmt, &mut ints, &mut reals).map_err(|m| syntax(i, m))?;
            let take = (want - have_nodes).min(per_line);
            let have = fields_present(l, &fmt);
            if have < take {
                return Err(syntax(
                    i,
                    format!(
                        "element {}: continuation line with {have} nodes, {take} expected",
                        rec.number
                    ),
                ));
            }
            check_fields(&ints[..take]).map_err(|m| syntax(i, m))?;
            rec.nodes.extend(ints[..take].iter().map(|&x| x as u64));
        }
        rec.ansys_type = type_of(rec.type_ref);
        out.push((first, rec));
        count += 1;
        i += 1;
    }
    if let Some(n) = args.get(3).and_then(|s| s.split('!').next()?.trim().parse::<usize>().ok())
        && n != count
    {
        tracing::warn!(
            "{}:{}:1: EBLOCK announces {n} elements and holds {count}",
            path.display(),
            start + 1
        );
    }
    Ok(i + 1)
}

/// Check that the integers of a record are element, type, material, real, section and node
/// numbers: none negative, none beyond `u32::MAX`.
fn check_fields(v: &[i64]) -> Result<(), String> {
    match v.iter().find(|&&x| !(0..=u32::MAX as i64).contains(&x)) {
        Some(x) => Err(format!("number {x} out of range in an element record")),
        None => Ok(()),
    }
}

/// Decode an archive held in memory (`path` is used in errors only).
pub fn read_cdb_bytes(path: &Path, data: &[u8]) -> Result<CdbArchive, AnsysError> {
    let text = String::from_utf8_lossy(data);
    let lines: Vec<&str> = text.lines().collect();
    let syntax = |line: usize, message: String| AnsysError::Syntax {
        file: path.to_path_buf(),
        line: line + 1,
        message,
    };
    let mut types: Vec<ElementTypeInfo> = Vec::new();
    let mut mb = MeshBuilder::new();
    let mut raw_elements: Vec<(usize, ElementRecord)> = Vec::new();
    let mut components: Vec<(String, bool, Vec<i64>, usize)> = Vec::new();
    let mut ints = Vec::new();
    let mut reals = Vec::new();
    let mut i = 0usize;
    while i < lines.len() {
        let line = lines[i].trim_end();
        let mut parts = line.split(',');
        let cmd = parts.next().unwrap_or("").trim().to_ascii_uppercase();
        let args: Vec<&str> = parts.map(str::trim).collect();
        match cmd.as_str() {
            "ET" => {
                let num: u32 = args
                    .first()
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| syntax(i, format!("ET without a type number: {line:?}")))?;
                let ename = args.get(1).copied().unwrap_or("");
                let digits: String = ename
                    .chars()
                    .rev()
                    .take_while(|c| c.is_ascii_digit())
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                let ansys_type: u32 = digits
                    .parse()
                    .map_err(|_| syntax(i, format!("ET with element name {ename:?}")))?;
                let (kind, name) = element_kind(ansys_type);
                types.retain(|t| t.number != num);
                types.push(ElementTypeInfo {
                    number: num,
                    ansys_type,
                    name,
                    nodes_per_element: 0,
                    keyopts: [0; 12],
                    supported: kind != ElementKind::Unsupported,
                });
                i += 1;
            }
            "KEYOP" => {
                let v: Vec<i64> = args.iter().take(3).filter_map(|s| s.parse().ok()).collect();
                if let [t, k, val] = v[..]
                    && let Some(et) = types.iter_mut().find(|e| e.number as i64 == t)
                    && (1..=12).contains(&k)
                {
                    et.keyopts[k as usize - 1] = val as i32;
                }
                i += 1;
            }
            "NBLOCK" => {
                let fmt_line = lines
                    .get(i + 1)
                    .ok_or_else(|| syntax(i, "NBLOCK without a format line".into()))?;
                let fmt = parse_format(fmt_line)
                    .ok_or_else(|| syntax(i + 1, format!("bad format {fmt_line:?}")))?;
                if !fmt.first().is_some_and(|f| f.int) {
                    return Err(syntax(
                        i + 1,
                        format!("NBLOCK format {fmt_line:?} does not start with integers"),
                    ));
                }
                // `NBLOCK, fields, SOLID, largest number, count`: the count, where given.
                let declared: Option<usize> = args
                    .get(3)
                    .and_then(|s| s.split('!').next())
                    .and_then(|s| s.trim().parse().ok());
                let start = i;
                let mut read = 0usize;
                // Trailing fields may be left out (blank means zero), but a line must end where
                // a field ends: one that stops inside a field was cut.
                let ends: Vec<usize> = fmt
                    .iter()
                    .flat_map(|f| std::iter::repeat_n(f.width, f.count))
                    .scan(0, |at, w| {
                        *at += w;
                        Some(*at)
                    })
                    .collect();
                let full = ends.last().copied().unwrap_or(0);
                i += 2;
                while i < lines.len() {
                    let l = lines[i];
                    let t = l.trim();
                    if t.starts_with("-1")
                        || t.to_ascii_uppercase().starts_with("N,")
                        || t.is_empty()
                    {
                        break;
                    }
                    let len = l.trim_end().len();
                    if len < full && !ends.contains(&len) {
                        return Err(syntax(
                            i,
                            format!(
                                "node record of {len} characters ends inside a field (fields \
                                 end at columns {ends:?}): the line was cut"
                            ),
                        ));
                    }
                    split_fixed(l, &fmt, &mut ints, &mut reals).map_err(|m| syntax(i, m))?;
                    let num = ints[0];
                    if num <= 0 {
                        return Err(syntax(i, format!("node number {num}")));
                    }
                    let c = |k: usize| reals.get(k).copied().unwrap_or(0.0);
                    if !mb.add_node(num as u64, [c(0), c(1), c(2)]) {
                        return Err(syntax(i, format!("node {num} defined twice")));
                    }
                    read += 1;
                    i += 1;
                }
                if let Some(n) = declared
                    && n != read
                {
                    return Err(syntax(
                        start,
                        format!(
                            "NBLOCK declares {n} nodes, but its block holds {read} (the file ends \
                             or the block stops early)"
                        ),
                    ));
                }
            }
            "EBLOCK" => {
                i = read_eblock(path, &lines, i, &args, &types, &mut raw_elements)?;
            }
            "CMBLOCK" => {
                let name = args.first().copied().unwrap_or("").to_string();
                let entity = args.get(1).copied().unwrap_or("").to_ascii_uppercase();
                let count: usize = args
                    .get(2)
                    .and_then(|s| s.split('!').next())
                    .and_then(|s| s.trim().parse().ok())
                    .ok_or_else(|| syntax(i, format!("CMBLOCK without a count: {line:?}")))?;
                let fmt_line = lines
                    .get(i + 1)
                    .ok_or_else(|| syntax(i, "CMBLOCK without a format line".into()))?;
                let fmt = parse_format(fmt_line)
                    .ok_or_else(|| syntax(i + 1, format!("bad format {fmt_line:?}")))?;
                let start = i;
                i += 2;
                let mut vals = Vec::with_capacity(count.min(data.len()));
                while vals.len() < count {
                    let l = lines
                        .get(i)
                        .ok_or_else(|| syntax(i, format!("component {name} ends early")))?;
                    split_fixed(l, &fmt, &mut ints, &mut reals).map_err(|m| syntax(i, m))?;
                    let have = l.trim_end().len().div_ceil(fmt[0].width.max(1));
                    let need = count - vals.len();
                    vals.extend(ints.iter().copied().take(need.min(have)));
                    i += 1;
                }
                match entity.as_str() {
                    "ELEM" => components.push((name, true, vals, start)),
                    "NODE" => components.push((name, false, vals, start)),
                    other => {
                        tracing::warn!(
                            "{}:{}:1: CMBLOCK of {other} ignored",
                            path.display(),
                            start + 1
                        );
                    }
                }
            }
            _ => i += 1,
        }
    }
    let mut elements = Vec::with_capacity(raw_elements.len());
    for (line, mut rec) in raw_elements {
        mb.add_element(&mut rec).map_err(|node| {
            syntax(line, format!("element {} uses node {node}, which is not defined", rec.number))
        })?;
        elements.push(rec);
    }
    let cell_of: HashMap<u64, CellId> =
        elements.iter().filter_map(|e| Some((e.number, e.cell?))).collect();
    let node_index = mb.index.clone();
    let (mut mesh, skipped) = mb.finish();
    let mut node_components = Vec::new();
    let mut tag = 0;
    for (name, is_elem, vals, line) in components {
        let ids = expand_ranges(&vals, data.len())
            .map_err(|m| syntax(line, format!("component {name}: {m}")))?;
        if is_elem {
            let mut cells = Vec::new();
            for e in ids {
                match cell_of.get(&e) {
                    Some(&c) => cells.push(c),
                    None => tracing::warn!("component {name}: element {e} is not a cell, left out"),
                }
            }
            tag += 1;
            let g = make_group(&mesh, name, tag, &cells);
            mesh.groups.push(g);
        } else {
            let mut nodes = Vec::new();
            for n in ids {
                match node_index.get(&n) {
                    Some(&k) => nodes.push(k),
                    None => tracing::warn!("component {name}: node {n} is not defined, left out"),
                }
            }
            nodes.sort_unstable();
            nodes.dedup();
            node_components.push((name, nodes));
        }
    }
    Ok(CdbArchive {
        path: path.to_path_buf(),
        mesh,
        element_types: types,
        elements,
        skipped,
        node_components,
    })
}

/// Expand a CMBLOCK list: a negative entry `-b` after `a` means `a+1..=b`. At most `limit`
/// numbers (the file size: a real component cannot name more entities than the file holds).
fn expand_ranges(vals: &[i64], limit: usize) -> Result<Vec<u64>, String> {
    let mut out: Vec<u64> = Vec::new();
    let mut prev: Option<i64> = None;
    for &v in vals {
        if v > 0 {
            out.push(v as u64);
            prev = Some(v);
        } else if v < 0 {
            let a = prev.ok_or("range without a start")?;
            let b = -v;
            if b < a || (b - a) as u64 + out.len() as u64 > limit as u64 {
                return Err(format!("bad range {a}..{b}"));
            }
            out.extend((a + 1..=b).map(|x| x as u64));
            prev = None;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_reals() {
        assert_eq!(
            parse_format("(3i9,6e21.13e3)").unwrap(),
            vec![
                Field { count: 3, int: true, width: 9 },
                Field { count: 6, int: false, width: 21 }
            ]
        );
        assert_eq!(
            parse_format("(19i10)").unwrap(),
            vec![Field { count: 19, int: true, width: 10 }]
        );
        assert!(parse_format("garbage").is_none());
        assert_eq!(parse_real(" 1.5000000000000E+000"), Some(1.5));
        assert_eq!(parse_real("1.5D+01"), Some(15.0));
        assert_eq!(parse_real("1.5-100"), Some(1.5e-100));
        assert_eq!(parse_real("   "), Some(0.0));
        assert_eq!(parse_real("abc"), None);
    }

    #[test]
    fn fields_and_block_ends() {
        let fmt = parse_format("(15i9)").unwrap();
        assert_eq!(fields_present("", &fmt), 0);
        assert_eq!(fields_present("        1", &fmt), 1);
        assert_eq!(fields_present("        1 ", &fmt), 1);
        assert_eq!(fields_present("        1        2   ", &fmt), 2);
        assert_eq!(fields_present(&"        1".repeat(20), &fmt), 15);
        let mixed = parse_format("(5i9,10i10)").unwrap();
        assert_eq!(fields_present(&format!("{}{}", "x".repeat(45), "y".repeat(11)), &mixed), 7);
        assert!(closes_block("       -1"));
        assert!(closes_block("-1"));
        assert!(!closes_block("   "));
        assert!(!closes_block("      -12        3"));
        assert!(!closes_block("        1       -1"));
        assert_eq!(long_record_nodes(186), Some(20));
        assert_eq!(long_record_nodes(204), Some(16));
        assert_eq!(long_record_nodes(187), None);
        assert_eq!(long_record_nodes(181), None);
    }

    #[test]
    fn ranges() {
        assert_eq!(expand_ranges(&[1, -3, 7], 100).unwrap(), vec![1, 2, 3, 7]);
        assert!(expand_ranges(&[-3], 100).is_err());
        assert!(expand_ranges(&[1, -1000], 100).is_err());
    }

    #[test]
    fn small_deck_with_blank_fields_and_lowercase() {
        let deck = r#"et,1,185
nblock,3,,4
(3i8,6e20.13)
       1       0       0 1.0000000000000E+00
       2
       3       0       0 0.0000000000000E+00 1.0000000000000E+00
       4       0       0 0.0000000000000E+00 0.0000000000000E+00 1.0000000000000E+00
n,r5.3,loc,-1
eblock,19,solid,1
(19i8)
       1       1       1       1       0       0       0       0       8       0       7       2       1       3       3       4       4       4       4
      -1
cmblock,BOT,NODE,2
(8i10)
         1        -2
"#;
        let a = read_cdb_bytes(Path::new("t.cdb"), deck.as_bytes()).unwrap();
        assert_eq!(a.mesh.coords[1], [0.0; 3]);
        assert_eq!(a.mesh.coords[0], [1.0, 0.0, 0.0]);
        assert_eq!(a.mesh.blocks[0].cell_type, gradfem_mesh::CellType::Tet4);
        assert_eq!(a.mesh.blocks[0].tags, vec![7]);
        assert_eq!(a.node_components, vec![("BOT".to_string(), vec![0, 1])]);
        // an unsupported type (SURF154) is skipped and listed, never a wrong cell
        let surf = deck.replace("et,1,185", "et,1,185\nET,2,SURF154").replace(
            "       1       1       1       1       0       0       0       0       8       0       7",
            "       1       2       1       1       0       0       0       0       8       0       7",
        );
        let a = read_cdb_bytes(Path::new("t.cdb"), surf.as_bytes()).unwrap();
        assert!(a.mesh.blocks.iter().all(|b| b.is_empty()));
        assert_eq!(a.skipped.len(), 1);
        assert_eq!((a.skipped[0].element, a.skipped[0].ansys_type), (7, 154));
        assert!(!a.element_types[1].supported && a.element_types[1].name == "SURF154");
        let bad = deck.replace("(19i8)", "(19q8)");
        assert!(matches!(
            read_cdb_bytes(Path::new("t.cdb"), bad.as_bytes()),
            Err(AnsysError::Syntax { line: 10, .. })
        ));
    }
}
