//! MAPDL archive files (`.cdb`, written by `CDWRITE`): `ET`/`KEYOP` element types, `NBLOCK`
//! nodes, `EBLOCK` elements (solid format), `CMBLOCK` components. Other commands are ignored.
//!
//! Blocks are fixed-width Fortran records whose widths come from the format line that follows
//! the block command (`(3i9,6e21.13e3)`, `(19i10)`, ...); blank or missing fields read as 0,
//! so nodes without coordinates sit at the origin. Keywords are case-insensitive.

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
                    split_fixed(l, &fmt, &mut ints, &mut reals).map_err(|m| syntax(i, m))?;
                    let num = ints[0];
                    if num <= 0 {
                        return Err(syntax(i, format!("node number {num}")));
                    }
                    let c = |k: usize| reals.get(k).copied().unwrap_or(0.0);
                    if !mb.add_node(num as u64, [c(0), c(1), c(2)]) {
                        return Err(syntax(i, format!("node {num} defined twice")));
                    }
                    i += 1;
                }
            }
            "EBLOCK" => {
                let solid = args.get(1).is_some_and(|s| s.eq_ignore_ascii_case("SOLID"));
                let fmt_line = lines
                    .get(i + 1)
                    .ok_or_else(|| syntax(i, "EBLOCK without a format line".into()))?;
                let fmt = parse_format(fmt_line)
                    .ok_or_else(|| syntax(i + 1, format!("bad format {fmt_line:?}")))?;
                if !fmt.iter().all(|f| f.int) {
                    return Err(syntax(
                        i + 1,
                        format!("EBLOCK format {fmt_line:?} is not all integers"),
                    ));
                }
                let block_line = i;
                i += 2;
                if !solid {
                    tracing::warn!(
                        "{}:{}: non-solid EBLOCK skipped (not supported)",
                        path.display(),
                        block_line + 1
                    );
                }
                while i < lines.len() {
                    let t = lines[i].trim();
                    if t.starts_with("-1") || t.is_empty() {
                        break;
                    }
                    split_fixed(lines[i], &fmt, &mut ints, &mut reals).map_err(|m| syntax(i, m))?;
                    if !solid {
                        i += 1;
                        continue;
                    }
                    if ints.len() < 11 {
                        return Err(syntax(
                            i,
                            "solid EBLOCK record with fewer than 11 fields".into(),
                        ));
                    }
                    let nn = ints[8];
                    if !(0..=1000).contains(&nn) {
                        return Err(syntax(i, format!("element with {nn} nodes")));
                    }
                    let nn = nn as usize;
                    let head: Vec<i64> = ints[..11].to_vec();
                    let mut nodes: Vec<i64> = ints[11..].iter().copied().take(nn).collect();
                    let first = i;
                    i += 1;
                    while nodes.len() < nn {
                        let l = lines.get(i).ok_or_else(|| {
                            syntax(i, "element nodes past the end of the file".into())
                        })?;
                        split_fixed(l, &fmt, &mut ints, &mut reals).map_err(|m| syntax(i, m))?;
                        let need = nn - nodes.len();
                        // continuation lines hold only as many fields as the line has
                        let have = l.len().div_ceil(fmt[0].width.max(1)).max(1);
                        nodes.extend(ints.iter().copied().take(need.min(have)));
                        i += 1;
                    }
                    if head.iter().chain(&nodes).any(|&x| x < 0 || x > u32::MAX as i64) {
                        return Err(syntax(
                            first,
                            "negative or huge number in an element record".into(),
                        ));
                    }
                    let type_ref = head[1] as u32;
                    let ansys_type =
                        types.iter().find(|t| t.number == type_ref).map_or(0, |t| t.ansys_type);
                    raw_elements.push((
                        first,
                        ElementRecord {
                            number: head[10] as u64,
                            type_ref,
                            ansys_type,
                            material: head[0] as u32,
                            real: head[2] as u32,
                            section: head[3] as u32,
                            nodes: nodes.iter().map(|&x| x as u64).collect(),
                            cell: None,
                        },
                    ));
                }
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
                            "{}:{}: CMBLOCK of {other} ignored",
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
