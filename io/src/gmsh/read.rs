//! The msh 2.2 / 4.1 reader: one byte cursor with ASCII tokens and binary reads, and a parser
//! per section that writes straight into the [`Mesh`].

use std::collections::HashMap;

use gradfem_mesh::{CellId, CellType, Mesh, PhysicalGroup};

use super::{GmshError, Position};

type Result<T> = std::result::Result<T, GmshError>;

/// The msh layout family of a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Version {
    V2,
    V41,
}

/// A cursor over the file's bytes that reads ASCII tokens or binary numbers.
struct Reader<'a> {
    file: &'a str,
    buf: &'a [u8],
    pos: usize,
    /// The file's numeric sections are binary (errors then give byte offsets).
    binary: bool,
    big_endian: bool,
    /// Bytes of a `size_t` in a 4.1 binary file (4 or 8).
    size_t: usize,
}

#[inline]
fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n' | b'\x0b' | b'\x0c')
}

/// Parse an unsigned decimal integer token (optional `+`), `None` on anything else or overflow.
#[inline]
fn parse_u64(tok: &[u8]) -> Option<u64> {
    let tok = tok.strip_prefix(b"+").unwrap_or(tok);
    if tok.is_empty() {
        return None;
    }
    let mut v: u64 = 0;
    for &c in tok {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(d))?;
    }
    Some(v)
}

/// Parse a signed decimal integer token, `None` on anything else or overflow.
#[inline]
fn parse_i64(tok: &[u8]) -> Option<i64> {
    match tok.strip_prefix(b"-") {
        Some(rest) if !rest.starts_with(b"+") => {
            let v = parse_u64(rest)?;
            if v <= i64::MAX as u64 + 1 { Some((v as i64).wrapping_neg()) } else { None }
        }
        Some(_) => None,
        None => parse_u64(tok).and_then(|v| i64::try_from(v).ok()),
    }
}

fn show(tok: &[u8]) -> String {
    let s = String::from_utf8_lossy(&tok[..tok.len().min(40)]).into_owned();
    if tok.len() > 40 { format!("{s}...") } else { s }
}

impl<'a> Reader<'a> {
    fn position(&self, at: usize) -> Position {
        if self.binary {
            Position::Offset(at)
        } else {
            let at = at.min(self.buf.len());
            Position::Line(self.buf[..at].iter().filter(|&&b| b == b'\n').count() + 1)
        }
    }

    /// A syntax error (ASCII file) or binary error (binary file) at byte `at`.
    fn error(&self, at: usize, message: impl Into<String>) -> GmshError {
        let file = self.file.to_string();
        let message = message.into();
        match self.position(at) {
            Position::Line(line) => GmshError::Syntax { file, line, message },
            Position::Offset(offset) => GmshError::Binary { file, offset, message },
        }
    }

    fn truncated(&self, expected: impl Into<String>) -> GmshError {
        GmshError::Truncated {
            file: self.file.to_string(),
            position: self.position(self.pos),
            expected: expected.into(),
        }
    }

    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// A pre-allocation size for `n` items that take at least `min_bytes` each: never more
    /// than the rest of the file can hold.
    fn cap(&self, n: u64, min_bytes: usize) -> usize {
        let fit = self.remaining() / min_bytes.max(1);
        usize::try_from(n).unwrap_or(usize::MAX).min(fit)
    }

    fn skip_ws(&mut self) {
        while self.pos < self.buf.len() && is_ws(self.buf[self.pos]) {
            self.pos += 1;
        }
    }

    /// The position of the next item (after blanks in ASCII files), for error messages.
    #[inline]
    fn here(&mut self) -> usize {
        if !self.binary {
            self.skip_ws();
        }
        self.pos
    }

    fn at_end(&self) -> bool {
        self.pos >= self.buf.len()
    }

    /// The next whitespace-delimited token and its start.
    #[inline]
    fn token(&mut self, what: &str) -> Result<(usize, &'a [u8])> {
        self.skip_ws();
        let start = self.pos;
        while self.pos < self.buf.len() && !is_ws(self.buf[self.pos]) {
            self.pos += 1;
        }
        if start == self.pos {
            return Err(self.truncated(what));
        }
        Ok((start, &self.buf[start..self.pos]))
    }

    /// Consume the rest of the current line up to and including its `\n` (only blanks and `\r`
    /// allowed): used where binary data starts on the next byte.
    fn end_of_line(&mut self, what: &str) -> Result<()> {
        while self.pos < self.buf.len() && matches!(self.buf[self.pos], b' ' | b'\t' | b'\r') {
            self.pos += 1;
        }
        match self.buf.get(self.pos) {
            Some(b'\n') => {
                self.pos += 1;
                Ok(())
            }
            Some(_) => Err(self.error(self.pos, format!("expected the end of the line {what}"))),
            None => Err(self.truncated(what)),
        }
    }

    fn keyword(&mut self, kw: &str) -> Result<()> {
        let (at, tok) = self.token(kw)?;
        if tok != kw.as_bytes() {
            return Err(self.error(at, format!("expected {kw}, found '{}'", show(tok))));
        }
        Ok(())
    }

    fn ascii_u64(&mut self, what: &str) -> Result<u64> {
        let (at, tok) = self.token(what)?;
        parse_u64(tok).ok_or_else(|| {
            self.error(at, format!("expected {what} (an unsigned integer), found '{}'", show(tok)))
        })
    }

    fn ascii_i64(&mut self, what: &str) -> Result<i64> {
        let (at, tok) = self.token(what)?;
        parse_i64(tok).ok_or_else(|| {
            self.error(at, format!("expected {what} (an integer), found '{}'", show(tok)))
        })
    }

    #[inline]
    fn bytes<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        match self.buf.get(self.pos..self.pos + N) {
            Some(s) => {
                self.pos += N;
                let mut a = [0u8; N];
                a.copy_from_slice(s);
                if self.big_endian {
                    a.reverse();
                }
                Ok(a)
            }
            None => Err(self.truncated(what)),
        }
    }

    /// A C `int`: 4 bytes in binary, a token in ASCII.
    #[inline]
    fn int(&mut self, what: &str) -> Result<i32> {
        if self.binary {
            Ok(i32::from_le_bytes(self.bytes::<4>(what)?))
        } else {
            let (at, tok) = self.token(what)?;
            parse_i64(tok).and_then(|v| i32::try_from(v).ok()).ok_or_else(|| {
                self.error(at, format!("expected {what} (a 32-bit integer), found '{}'", show(tok)))
            })
        }
    }

    /// A `size_t` (4.1): `size_t` bytes in binary, a token in ASCII.
    #[inline]
    fn size(&mut self, what: &str) -> Result<u64> {
        if self.binary {
            if self.size_t == 8 {
                Ok(u64::from_le_bytes(self.bytes::<8>(what)?))
            } else {
                Ok(u64::from(u32::from_le_bytes(self.bytes::<4>(what)?)))
            }
        } else {
            self.ascii_u64(what)
        }
    }

    /// A tag in a 2.2 file: a 4-byte `int` in binary, a token in ASCII; must not be negative.
    #[inline]
    fn tag2(&mut self, what: &str) -> Result<u64> {
        if self.binary {
            let at = self.pos;
            let v = i32::from_le_bytes(self.bytes::<4>(what)?);
            u64::try_from(v).map_err(|_| self.error(at, format!("negative {what} {v}")))
        } else {
            self.ascii_u64(what)
        }
    }

    /// A finite `double`: 8 bytes in binary, a token in ASCII.
    #[inline]
    fn float(&mut self, what: &str) -> Result<f64> {
        let (at, v) = if self.binary {
            let at = self.pos;
            (at, f64::from_le_bytes(self.bytes::<8>(what)?))
        } else {
            let (at, tok) = self.token(what)?;
            let v = std::str::from_utf8(tok).ok().and_then(|s| s.parse::<f64>().ok());
            match v {
                Some(v) => (at, v),
                None => {
                    return Err(self
                        .error(at, format!("expected {what} (a number), found '{}'", show(tok))));
                }
            }
        };
        if !v.is_finite() {
            return Err(self.error(at, format!("{what} is not a finite number ({v})")));
        }
        Ok(v)
    }

    /// Skip an unknown section `$Name` up to its `$EndName` line.
    fn skip_section(&mut self, name: &[u8]) -> Result<()> {
        let mut end = b"$End".to_vec();
        end.extend_from_slice(name);
        let hay = &self.buf[self.pos..];
        let mut from = 0;
        while let Some(i) = hay[from..].windows(end.len()).position(|w| w == end.as_slice()) {
            let stop = from + i + end.len();
            let starts_line = from + i == 0 || hay[from + i - 1] == b'\n';
            if starts_line && hay.get(stop).is_none_or(|&b| is_ws(b)) {
                tracing::debug!(file = self.file, section = %show(name), "skipped gmsh section");
                self.pos += stop;
                return Ok(());
            }
            from += i + 1;
        }
        self.pos = self.buf.len();
        Err(self.truncated(format!("section ${} (no {} line)", show(name), show(&end))))
    }
}

/// Node tag → node index.
enum NodeIndex {
    None,
    /// `table[tag - min]`, `usize::MAX` where undefined.
    Dense {
        min: u64,
        table: Vec<usize>,
    },
    Sparse(HashMap<u64, usize>),
}

impl NodeIndex {
    #[inline]
    fn get(&self, tag: u64) -> Option<usize> {
        match self {
            NodeIndex::None => None,
            NodeIndex::Dense { min, table } => {
                let i = tag.checked_sub(*min)?;
                let v = *table.get(usize::try_from(i).ok()?)?;
                (v != usize::MAX).then_some(v)
            }
            NodeIndex::Sparse(map) => map.get(&tag).copied(),
        }
    }

    /// Index all tags; `Err(tag)` names a tag defined twice.
    fn build(tags: &[u64]) -> std::result::Result<NodeIndex, u64> {
        let (Some(&min), Some(&max)) = (tags.iter().min(), tags.iter().max()) else {
            return Ok(NodeIndex::None);
        };
        let span = max - min;
        if span <= 2 * tags.len() as u64 + 1024 {
            let mut table = vec![usize::MAX; span as usize + 1];
            for (i, &t) in tags.iter().enumerate() {
                let slot = &mut table[(t - min) as usize];
                if *slot != usize::MAX {
                    return Err(t);
                }
                *slot = i;
            }
            Ok(NodeIndex::Dense { min, table })
        } else {
            let mut map = HashMap::with_capacity(tags.len());
            for (i, &t) in tags.iter().enumerate() {
                if map.insert(t, i).is_some() {
                    return Err(t);
                }
            }
            Ok(NodeIndex::Sparse(map))
        }
    }
}

/// What the sections produce, assembled into a mesh at the end.
struct State {
    mesh: Mesh,
    nodes: NodeIndex,
    names: HashMap<(usize, i32), String>,
    /// 4.1: (entity dim, entity tag) → physical tags.
    entity_physicals: HashMap<(i32, i32), Vec<i32>>,
    groups: HashMap<(usize, i32), Vec<CellId>>,
}

/// Parse a whole file.
pub(super) fn parse(file: &str, buf: &[u8]) -> Result<Mesh> {
    let mut r = Reader { file, buf, pos: 0, binary: false, big_endian: false, size_t: 8 };
    let version = mesh_format(&mut r)?;
    let mut st = State {
        mesh: Mesh::default(),
        nodes: NodeIndex::None,
        names: HashMap::new(),
        entity_physicals: HashMap::new(),
        groups: HashMap::new(),
    };
    loop {
        r.skip_ws();
        if r.at_end() {
            break;
        }
        let (at, tok) = r.token("a section header")?;
        if tok.first() != Some(&b'$') || tok.len() < 2 {
            return Err(r.error(
                at,
                format!("expected a section header such as $Nodes, found '{}'", show(tok)),
            ));
        }
        match (tok, version) {
            (b"$MeshFormat", _) => return Err(r.error(at, "a second $MeshFormat section")),
            (b"$PhysicalNames", _) => physical_names(&mut r, &mut st)?,
            (b"$Entities", Version::V41) => entities(&mut r, &mut st)?,
            (b"$Nodes", Version::V41) => nodes41(&mut r, &mut st, at)?,
            (b"$Elements", Version::V41) => elements41(&mut r, &mut st, at)?,
            (b"$Nodes", Version::V2) => nodes2(&mut r, &mut st, at)?,
            (b"$Elements", Version::V2) => elements2(&mut r, &mut st, at)?,
            _ => r.skip_section(&tok[1..])?,
        }
    }
    Ok(finish(st))
}

fn mesh_format(r: &mut Reader) -> Result<Version> {
    let (at, tok) = r.token("$MeshFormat")?;
    if tok == b"$NOD" || tok == b"$NOE" {
        return Err(GmshError::UnsupportedVersion {
            file: r.file.to_string(),
            version: "1.0".into(),
        });
    }
    if tok != b"$MeshFormat" {
        return Err(r.error(at, format!("expected $MeshFormat, found '{}'", show(tok))));
    }
    let (at, v) = r.token("the format version")?;
    let version = match v {
        b"4.1" => Version::V41,
        v if v == b"2" || v.starts_with(b"2.") => Version::V2,
        v => {
            let s = show(v);
            if s.parse::<f64>().is_err() {
                return Err(r.error(at, format!("expected the format version, found '{s}'")));
            }
            return Err(GmshError::UnsupportedVersion { file: r.file.to_string(), version: s });
        }
    };
    let ft_at = r.here();
    let file_type = r.ascii_u64("the file type (0 ASCII, 1 binary)")?;
    let ds_at = r.here();
    let data_size = r.ascii_u64("the data size")?;
    match file_type {
        0 => {}
        1 => {
            match (version, data_size) {
                (Version::V41, 4 | 8) => r.size_t = data_size as usize,
                (Version::V2, 8) => {}
                _ => {
                    return Err(r.error(
                        ds_at,
                        format!("unsupported data size {data_size} for a binary msh file"),
                    ));
                }
            }
            r.end_of_line("after the $MeshFormat line")?;
            r.binary = true;
            let at = r.here();
            let one = r.bytes::<4>("the endianness check integer 1")?;
            if u32::from_le_bytes(one) == 1 {
            } else if u32::from_be_bytes(one) == 1 {
                r.big_endian = true;
            } else {
                return Err(r.error(at, "the endianness check integer is not 1"));
            }
        }
        _ => return Err(r.error(ft_at, format!("file type {file_type} is neither 0 nor 1"))),
    }
    r.keyword("$EndMeshFormat")?;
    Ok(version)
}

fn physical_names(r: &mut Reader, st: &mut State) -> Result<()> {
    // The section is ASCII even in binary files.
    let n = r.ascii_u64("the number of physical names")?;
    for _ in 0..n {
        let at = r.here();
        let dim = r.ascii_u64("a physical group dimension")?;
        if dim > 3 {
            return Err(r.error(at, format!("physical group dimension {dim} is not 0..3")));
        }
        let tag_at = r.here();
        let tag = r.ascii_i64("a physical tag")?;
        let tag = i32::try_from(tag)
            .map_err(|_| r.error(tag_at, format!("physical tag {tag} out of range")))?;
        r.skip_ws();
        let start = r.here();
        if r.buf.get(start) != Some(&b'"') {
            return Err(r.error(start, "expected a quoted physical name"));
        }
        let rest = &r.buf[start + 1..];
        let Some(len) = rest.iter().position(|&b| b == b'"' || b == b'\n') else {
            r.pos = r.buf.len();
            return Err(r.truncated("a quoted physical name"));
        };
        if rest[len] != b'"' {
            return Err(r.error(start, "unterminated quoted physical name"));
        }
        let name = std::str::from_utf8(&rest[..len])
            .map_err(|_| r.error(start, "physical name is not valid UTF-8"))?;
        st.names.insert((dim as usize, tag), name.to_string());
        r.pos = start + 1 + len + 1;
    }
    r.keyword("$EndPhysicalNames")
}

fn entities(r: &mut Reader, st: &mut State) -> Result<()> {
    if r.binary {
        r.end_of_line("after $Entities")?;
    }
    let mut counts = [0u64; 4];
    for (d, c) in counts.iter_mut().enumerate() {
        *c = r.size(["the number of points", "of curves", "of surfaces", "of volumes"][d])?;
    }
    for (dim, &count) in counts.iter().enumerate() {
        for _ in 0..count {
            let tag = r.int("an entity tag")?;
            let n_coords = if dim == 0 { 3 } else { 6 };
            for _ in 0..n_coords {
                r.float("an entity coordinate")?;
            }
            let n_phys = r.size("the number of physical tags")?;
            let mut phys = Vec::with_capacity(r.cap(n_phys, 2));
            for _ in 0..n_phys {
                phys.push(r.int("a physical tag")?);
            }
            if dim > 0 {
                let n_bound = r.size("the number of bounding entities")?;
                for _ in 0..n_bound {
                    r.int("a bounding entity tag")?;
                }
            }
            if !phys.is_empty() {
                st.entity_physicals.insert((dim as i32, tag), phys);
            }
        }
    }
    r.keyword("$EndEntities")
}

/// Index the nodes read so far; report duplicates at the section start `at`.
fn index_nodes(r: &Reader, st: &mut State, at: usize) -> Result<()> {
    st.nodes = NodeIndex::build(&st.mesh.node_tags).map_err(|node_tag| {
        GmshError::DuplicateNode { file: r.file.to_string(), position: r.position(at), node_tag }
    })?;
    Ok(())
}

fn nodes41(r: &mut Reader, st: &mut State, section_at: usize) -> Result<()> {
    if r.binary {
        r.end_of_line("after $Nodes")?;
    }
    let header_at = r.here();
    let n_blocks = r.size("the number of node entity blocks")?;
    let n_nodes = r.size("the number of nodes")?;
    r.size("the minimum node tag")?;
    r.size("the maximum node tag")?;
    let min_bytes = if r.binary { 8 + 24 } else { 8 };
    let cap = r.cap(n_nodes, min_bytes);
    st.mesh.coords.reserve(cap);
    st.mesh.node_tags.reserve(cap);
    let mut found = 0u64;
    for _ in 0..n_blocks {
        let at = r.here();
        let dim = r.int("the entity dimension")?;
        r.int("the entity tag")?;
        let param_at = r.here();
        let parametric = r.int("the parametric flag")?;
        let n = r.size("the number of nodes in the block")?;
        if !(0..=3).contains(&dim) {
            return Err(r.error(at, format!("entity dimension {dim} is not 0..3")));
        }
        let extra = match parametric {
            0 => 0,
            1 => dim as usize,
            p => return Err(r.error(param_at, format!("parametric flag {p} is neither 0 nor 1"))),
        };
        let cap = r.cap(n, min_bytes);
        st.mesh.node_tags.reserve(cap);
        st.mesh.coords.reserve(cap);
        let first = st.mesh.node_tags.len();
        for _ in 0..n {
            let t = r.size("a node tag")?;
            st.mesh.node_tags.push(t);
        }
        for _ in 0..n {
            let x = r.float("a node coordinate")?;
            let y = r.float("a node coordinate")?;
            let z = r.float("a node coordinate")?;
            for _ in 0..extra {
                r.float("a parametric node coordinate")?;
            }
            st.mesh.coords.push([x, y, z]);
        }
        debug_assert_eq!(st.mesh.coords.len() - first, n as usize);
        found += n;
    }
    if found != n_nodes {
        return Err(GmshError::CountMismatch {
            file: r.file.to_string(),
            position: r.position(header_at),
            what: "number of nodes".into(),
            declared: n_nodes,
            found,
        });
    }
    r.keyword("$EndNodes")?;
    index_nodes(r, st, section_at)
}

fn nodes2(r: &mut Reader, st: &mut State, section_at: usize) -> Result<()> {
    let header_at = r.here();
    let n = r.ascii_u64("the number of nodes")?;
    if r.binary {
        r.end_of_line("after the number of nodes")?;
    }
    let min_bytes = if r.binary { 28 } else { 8 };
    let cap = r.cap(n, min_bytes);
    st.mesh.coords.reserve(cap);
    st.mesh.node_tags.reserve(cap);
    for _ in 0..n {
        let t = r.tag2("node tag")?;
        let x = r.float("a node coordinate")?;
        let y = r.float("a node coordinate")?;
        let z = r.float("a node coordinate")?;
        st.mesh.node_tags.push(t);
        st.mesh.coords.push([x, y, z]);
    }
    let (at, tok) = r.token("$EndNodes")?;
    if tok != b"$EndNodes" {
        return Err(r.error(
            at,
            format!(
                "expected $EndNodes after the {n} nodes announced at {}, found '{}'",
                r.position(header_at),
                show(tok)
            ),
        ));
    }
    index_nodes(r, st, section_at)
}

fn no_nodes_yet(r: &Reader, st: &State, at: usize) -> Result<()> {
    if matches!(st.nodes, NodeIndex::None) {
        return Err(r.error(at, "$Elements section before any $Nodes section"));
    }
    Ok(())
}

fn cell_type(r: &Reader, at: usize, gmsh_type: i64) -> Result<CellType> {
    i32::try_from(gmsh_type).ok().and_then(CellType::from_gmsh).ok_or_else(|| {
        GmshError::UnknownElementType {
            file: r.file.to_string(),
            position: r.position(at),
            gmsh_type,
        }
    })
}

fn undefined_node(r: &Reader, at: usize, element_tag: u64, node_tag: u64) -> GmshError {
    GmshError::UndefinedNode {
        file: r.file.to_string(),
        position: r.position(at),
        element_tag,
        node_tag,
    }
}

fn elements41(r: &mut Reader, st: &mut State, section_at: usize) -> Result<()> {
    if r.binary {
        r.end_of_line("after $Elements")?;
    }
    let header_at = r.here();
    let n_blocks = r.size("the number of element entity blocks")?;
    let n_elements = r.size("the number of elements")?;
    r.size("the minimum element tag")?;
    r.size("the maximum element tag")?;
    let mut found = 0u64;
    for _ in 0..n_blocks {
        let block_at = r.here();
        let dim = r.int("the entity dimension")?;
        let tag = r.int("the entity tag")?;
        let type_at = r.here();
        let gmsh_type = r.int("the element type")?;
        let n = r.size("the number of elements in the block")?;
        let ct = cell_type(r, type_at, i64::from(gmsh_type))?;
        if dim != ct.dim() as i32 {
            return Err(r.error(
                block_at,
                format!(
                    "element block of {ct} elements (dimension {}) on an entity of dimension {dim}",
                    ct.dim()
                ),
            ));
        }
        if n > 0 {
            no_nodes_yet(r, st, section_at)?;
        }
        let nn = ct.n_nodes();
        let (b, blk) = st.mesh.block_mut(ct);
        let min_bytes = if r.binary { (nn + 1) * r.size_t } else { 2 * (nn + 1) };
        let cap = r.cap(n, min_bytes);
        blk.connectivity.reserve(cap * nn);
        blk.tags.reserve(cap);
        let first = blk.tags.len();
        for _ in 0..n {
            let at = r.here();
            let etag = r.size("an element tag")?;
            for _ in 0..nn {
                let t = r.size("an element node tag")?;
                let i = st.nodes.get(t).ok_or_else(|| undefined_node(r, at, etag, t))?;
                blk.connectivity.push(i);
            }
            blk.tags.push(etag);
        }
        let last = blk.tags.len();
        found += n;
        if let Some(phys) = st.entity_physicals.get(&(dim, tag)) {
            for &p in phys {
                st.groups
                    .entry((ct.dim(), p))
                    .or_default()
                    .extend((first..last).map(|index| CellId { block: b, index }));
            }
        }
    }
    if found != n_elements {
        return Err(GmshError::CountMismatch {
            file: r.file.to_string(),
            position: r.position(header_at),
            what: "number of elements".into(),
            declared: n_elements,
            found,
        });
    }
    r.keyword("$EndElements")
}

fn elements2(r: &mut Reader, st: &mut State, section_at: usize) -> Result<()> {
    let header_at = r.here();
    let n = r.ascii_u64("the number of elements")?;
    if r.binary {
        r.end_of_line("after the number of elements")?;
    }
    if n > 0 {
        no_nodes_yet(r, st, section_at)?;
    }
    let mut conn = Vec::with_capacity(27);
    let mut last_type: Option<(CellType, usize)> = None;
    let mut last_cell: Option<CellId> = None;
    // gmsh 2.2 writes an element of several physical groups once per group, consecutively and
    // with the same number: such a repeat only adds the previous cell to one more group.
    let mut push = |st: &mut State, ct: CellType, etag: u64, conn: &[usize], phys: i32| {
        let b = match last_type {
            Some((t, b)) if t == ct => b,
            _ => {
                let b = st.mesh.block_mut(ct).0;
                last_type = Some((ct, b));
                b
            }
        };
        let blk = &mut st.mesh.blocks[b];
        let repeat = last_cell
            .filter(|c| c.block == b && blk.tags[c.index] == etag && blk.cell(c.index) == conn);
        let id = match repeat {
            Some(id) => id,
            None => {
                blk.connectivity.extend_from_slice(conn);
                blk.tags.push(etag);
                CellId { block: b, index: blk.tags.len() - 1 }
            }
        };
        last_cell = Some(id);
        if phys != 0 {
            st.groups.entry((ct.dim(), phys)).or_default().push(id);
        }
    };
    if r.binary {
        let mut read = 0u64;
        while read < n {
            let at = r.here();
            let gmsh_type = r.int("the element type")?;
            let follow = r.int("the number of elements that follow")?;
            let n_tags = r.int("the number of element tags")?;
            let ct = cell_type(r, at, i64::from(gmsh_type))?;
            if follow < 1 || follow as u64 > n - read {
                return Err(r.error(
                    at + 4,
                    format!("{follow} elements announced in a block, {} left to read", n - read),
                ));
            }
            if !(0..=1024).contains(&n_tags) {
                return Err(r.error(at + 8, format!("{n_tags} element tags")));
            }
            for _ in 0..follow {
                let at = r.here();
                let etag = r.tag2("element tag")?;
                let mut phys = 0;
                for k in 0..n_tags {
                    let t = r.int("an element tag")?;
                    if k == 0 {
                        phys = t;
                    }
                }
                conn.clear();
                for _ in 0..ct.n_nodes() {
                    let t = r.tag2("element node tag")?;
                    conn.push(st.nodes.get(t).ok_or_else(|| undefined_node(r, at, etag, t))?);
                }
                push(st, ct, etag, &conn, phys);
            }
            read += follow as u64;
        }
    } else {
        for _ in 0..n {
            let at = r.here();
            let etag = r.ascii_u64("an element number")?;
            let type_at = r.here();
            let gmsh_type = r.ascii_i64("the element type")?;
            let ct = cell_type(r, type_at, gmsh_type)?;
            let n_tags = r.ascii_u64("the number of element tags")?;
            let mut phys = 0;
            for k in 0..n_tags {
                let t = r.int("an element tag")?;
                if k == 0 {
                    phys = t;
                }
            }
            conn.clear();
            for _ in 0..ct.n_nodes() {
                let t = r.ascii_u64("an element node tag")?;
                conn.push(st.nodes.get(t).ok_or_else(|| undefined_node(r, at, etag, t))?);
            }
            push(st, ct, etag, &conn, phys);
        }
    }
    let (at, tok) = r.token("$EndElements")?;
    if tok != b"$EndElements" {
        return Err(r.error(
            at,
            format!(
                "expected $EndElements after the {n} elements announced at {}, found '{}'",
                r.position(header_at),
                show(tok)
            ),
        ));
    }
    Ok(())
}

fn finish(st: State) -> Mesh {
    let State { mut mesh, names, groups, .. } = st;
    let mut keys: Vec<(usize, i32)> = names.keys().chain(groups.keys()).copied().collect();
    keys.sort_unstable();
    keys.dedup();
    let mut groups = groups;
    mesh.groups = keys
        .into_iter()
        .map(|(dim, tag)| {
            let mut cells = groups.remove(&(dim, tag)).unwrap_or_default();
            cells.sort_unstable();
            cells.dedup();
            let name = names.get(&(dim, tag)).cloned().unwrap_or_else(|| format!("{dim}d_{tag}"));
            PhysicalGroup { name, tag, dim, cells }
        })
        .collect();
    mesh
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case(b"0", Some(0))]
    #[case(b"+17", Some(17))]
    #[case(b"18446744073709551615", Some(u64::MAX))]
    #[case(b"18446744073709551616", None)]
    #[case(b"-1", None)]
    #[case(b"1.0", None)]
    #[case(b"", None)]
    #[case(b"+", None)]
    fn unsigned_tokens(#[case] tok: &[u8], #[case] expected: Option<u64>) {
        assert_eq!(parse_u64(tok), expected);
    }

    #[rstest]
    #[case(b"-7", Some(-7))]
    #[case(b"-9223372036854775808", Some(i64::MIN))]
    #[case(b"9223372036854775808", None)]
    #[case(b"--1", None)]
    #[case(b"-+1", None)]
    #[case(b"-", None)]
    fn signed_tokens(#[case] tok: &[u8], #[case] expected: Option<i64>) {
        assert_eq!(parse_i64(tok), expected);
    }

    #[test]
    fn sparse_and_dense_node_indices() {
        let dense = NodeIndex::build(&[5, 3, 4]).unwrap();
        assert!(matches!(dense, NodeIndex::Dense { .. }));
        assert_eq!(
            (dense.get(3), dense.get(5), dense.get(6), dense.get(0)),
            (Some(1), Some(0), None, None)
        );
        let sparse = NodeIndex::build(&[1, 1 << 40, 7]).unwrap();
        assert!(matches!(sparse, NodeIndex::Sparse(_)));
        assert_eq!((sparse.get(1 << 40), sparse.get(2)), (Some(1), None));
        assert_eq!(NodeIndex::build(&[2, 9, 2]).err(), Some(2));
        assert_eq!(NodeIndex::build(&[2, 1 << 50, 1 << 50]).err(), Some(1 << 50));
    }
}
