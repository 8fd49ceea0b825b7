//! The msh 4.1 writer.

use std::collections::HashMap;
use std::io::{BufWriter, Write};
use std::path::Path;

use gradfem_mesh::Mesh;

use super::GmshError;

/// `f64` in the shortest form that reads back exactly, without 300-digit expansions.
fn fmt_f64(x: f64) -> String {
    let a = x.abs();
    if a == 0.0 || (1e-5..1e15).contains(&a) { format!("{x}") } else { format!("{x:e}") }
}

/// The tags to write: `tags` if all positive and unique, else 1, 2, ...
fn usable_tags(tags: impl Iterator<Item = u64> + Clone) -> bool {
    let mut v: Vec<u64> = tags.collect();
    v.sort_unstable();
    v.first().is_none_or(|&t| t > 0) && v.windows(2).all(|w| w[0] != w[1])
}

struct Entity {
    dim: usize,
    tag: i32,
    physicals: Vec<i32>,
}

pub(super) fn write(path: &Path, mesh: &Mesh, binary: bool) -> Result<(), GmshError> {
    mesh.validate()
        .map_err(|e| GmshError::InvalidMesh { path: path.to_path_buf(), message: e.to_string() })?;
    let io = |source| GmshError::Io { path: path.to_path_buf(), source };
    let file = std::fs::File::create(path).map_err(io)?;
    let mut w = BufWriter::with_capacity(1 << 20, file);
    write_to(&mut w, mesh, binary).map_err(io)?;
    let file = w.into_inner().map_err(|e| io(e.into_error()))?;
    file.sync_all().map_err(io)?;
    Ok(())
}

fn write_to<W: Write>(w: &mut W, mesh: &Mesh, binary: bool) -> std::io::Result<()> {
    // Group membership of each cell as a "signature": an index into `sets`, the sorted lists of
    // group indices. Cells start in set 0 (no group) and move set → set ∪ {g} per group.
    let mut sets: Vec<Vec<usize>> = vec![Vec::new()];
    let mut next: HashMap<(u32, usize), u32> = HashMap::new();
    let mut sig: Vec<Vec<u32>> = mesh.blocks.iter().map(|b| vec![0u32; b.len()]).collect();
    for (gi, g) in mesh.groups.iter().enumerate() {
        for c in &g.cells {
            let s = &mut sig[c.block][c.index];
            if sets[*s as usize].last() == Some(&gi) {
                continue; // a cell listed twice in one group
            }
            *s = *next.entry((*s, gi)).or_insert_with(|| {
                let mut set = sets[*s as usize].clone();
                set.push(gi);
                sets.push(set);
                (sets.len() - 1) as u32
            });
        }
    }
    // Entities: one per (dim, signature), numbered per dimension in order of appearance.
    let mut entities: Vec<Entity> = Vec::new();
    let mut entity_of: HashMap<(usize, u32), usize> = HashMap::new();
    let mut per_dim = [0i32; 4];
    for (b, blk) in mesh.blocks.iter().enumerate() {
        let dim = blk.cell_type.dim();
        for &s in &sig[b] {
            entity_of.entry((dim, s)).or_insert_with(|| {
                per_dim[dim] += 1;
                let physicals = sets[s as usize].iter().map(|&g| mesh.groups[g].tag).collect();
                entities.push(Entity { dim, tag: per_dim[dim], physicals });
                entities.len() - 1
            });
        }
    }
    // The nodes live on the first entity of the highest dimension (or an extra point).
    let node_entity = match entities.iter().map(|e| e.dim).max() {
        Some(d) => entities.iter().position(|e| e.dim == d).unwrap_or(0),
        None => {
            entities.push(Entity { dim: 0, tag: 1, physicals: Vec::new() });
            0
        }
    };
    let node_tags: Vec<u64> = if usable_tags(mesh.node_tags.iter().copied()) {
        mesh.node_tags.clone()
    } else {
        (1..=mesh.n_nodes() as u64).collect()
    };
    let keep_cell_tags = usable_tags(mesh.blocks.iter().flat_map(|b| b.tags.iter().copied()));
    let bbox = mesh.bounding_box();
    let mut out = Out { w, binary };

    writeln!(out.w, "$MeshFormat\n4.1 {} 8", u8::from(binary))?;
    if binary {
        out.w.write_all(&1i32.to_le_bytes())?;
        writeln!(out.w)?;
    }
    writeln!(out.w, "$EndMeshFormat")?;

    writeln!(out.w, "$PhysicalNames\n{}", mesh.groups.len())?;
    for g in &mesh.groups {
        let name: String = g
            .name
            .chars()
            .map(|c| match c {
                '"' => '\'',
                '\n' | '\r' => ' ',
                c => c,
            })
            .collect();
        writeln!(out.w, "{} {} \"{}\"", g.dim, g.tag, name)?;
    }
    writeln!(out.w, "$EndPhysicalNames")?;

    writeln!(out.w, "$Entities")?;
    for d in 0..4 {
        out.size(entities.iter().filter(|e| e.dim == d).count() as u64)?;
    }
    out.eol()?;
    for d in 0..4 {
        for e in entities.iter().filter(|e| e.dim == d) {
            out.int(e.tag)?;
            let coords: &[f64] = if d == 0 {
                &bbox[0]
            } else {
                &[bbox[0][0], bbox[0][1], bbox[0][2], bbox[1][0], bbox[1][1], bbox[1][2]]
            };
            for &x in coords {
                out.float(x)?;
            }
            out.size(e.physicals.len() as u64)?;
            for &p in &e.physicals {
                out.int(p)?;
            }
            if d > 0 {
                out.size(0)?;
            }
            out.eol()?;
        }
    }
    out.end_binary()?;
    writeln!(out.w, "$EndEntities")?;

    writeln!(out.w, "$Nodes")?;
    let n = mesh.n_nodes() as u64;
    let (lo, hi) = (node_tags.iter().min(), node_tags.iter().max());
    out.size(u64::from(n > 0))?;
    out.size(n)?;
    out.size(lo.copied().unwrap_or(0))?;
    out.size(hi.copied().unwrap_or(0))?;
    out.eol()?;
    if n > 0 {
        let e = &entities[node_entity];
        out.int(e.dim as i32)?;
        out.int(e.tag)?;
        out.int(0)?;
        out.size(n)?;
        out.eol()?;
        for &t in &node_tags {
            out.size(t)?;
            out.eol()?;
        }
        for p in &mesh.coords {
            for &x in p {
                out.float(x)?;
            }
            out.eol()?;
        }
    }
    out.end_binary()?;
    writeln!(out.w, "$EndNodes")?;

    // Element blocks: runs of consecutive cells of one block on one entity.
    let mut runs: Vec<(usize, usize, usize, usize)> = Vec::new(); // (block, start, end, entity)
    for (b, blk) in mesh.blocks.iter().enumerate() {
        let dim = blk.cell_type.dim();
        let mut start = 0;
        for i in 1..=blk.len() {
            if i == blk.len() || sig[b][i] != sig[b][start] {
                runs.push((b, start, i, entity_of[&(dim, sig[b][start])]));
                start = i;
            }
        }
    }
    let n_cells: usize = mesh.blocks.iter().map(|b| b.len()).sum();
    let cell_tag = |b: usize, i: usize, serial: u64| {
        if keep_cell_tags { mesh.blocks[b].tags[i] } else { serial }
    };
    let (mut lo, mut hi) = (u64::MAX, 0u64);
    let mut serial = 0u64;
    for (b, blk) in mesh.blocks.iter().enumerate() {
        for i in 0..blk.len() {
            serial += 1;
            let t = cell_tag(b, i, serial);
            lo = lo.min(t);
            hi = hi.max(t);
        }
    }
    writeln!(out.w, "$Elements")?;
    out.size(runs.len() as u64)?;
    out.size(n_cells as u64)?;
    out.size(if n_cells == 0 { 0 } else { lo })?;
    out.size(hi)?;
    out.eol()?;
    let mut first_serial: Vec<u64> = Vec::with_capacity(mesh.blocks.len());
    let mut acc = 0u64;
    for blk in &mesh.blocks {
        first_serial.push(acc);
        acc += blk.len() as u64;
    }
    for &(b, start, end, e) in &runs {
        let blk = &mesh.blocks[b];
        let ent = &entities[e];
        out.int(ent.dim as i32)?;
        out.int(ent.tag)?;
        out.int(blk.cell_type.gmsh_type())?;
        out.size((end - start) as u64)?;
        out.eol()?;
        for i in start..end {
            out.size(cell_tag(b, i, first_serial[b] + i as u64 + 1))?;
            for &node in blk.cell(i) {
                out.size(node_tags[node])?;
            }
            out.eol()?;
        }
    }
    out.end_binary()?;
    writeln!(out.w, "$EndElements")?;
    Ok(())
}

/// Numbers in the file's encoding: little-endian binary or space-separated ASCII.
struct Out<'w, W: Write> {
    w: &'w mut W,
    binary: bool,
}

impl<W: Write> Out<'_, W> {
    fn size(&mut self, v: u64) -> std::io::Result<()> {
        if self.binary { self.w.write_all(&v.to_le_bytes()) } else { write!(self.w, "{v} ") }
    }
    fn int(&mut self, v: i32) -> std::io::Result<()> {
        if self.binary { self.w.write_all(&v.to_le_bytes()) } else { write!(self.w, "{v} ") }
    }
    fn float(&mut self, v: f64) -> std::io::Result<()> {
        if self.binary {
            self.w.write_all(&v.to_le_bytes())
        } else {
            write!(self.w, "{} ", fmt_f64(v))
        }
    }
    fn eol(&mut self) -> std::io::Result<()> {
        if self.binary { Ok(()) } else { writeln!(self.w) }
    }
    /// The line break after a binary section body.
    fn end_binary(&mut self) -> std::io::Result<()> {
        if self.binary { writeln!(self.w) } else { Ok(()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_read_back_exactly() {
        for x in [0.0, -0.0, 1.0, 0.1, 1e-300, -2.5e300, 1.0 / 3.0, 4e-6, 1e15, f64::MIN_POSITIVE] {
            let s = fmt_f64(x);
            assert_eq!(s.parse::<f64>().unwrap().to_bits(), x.to_bits(), "{s}");
            assert!(s.len() < 30, "{s}");
        }
    }

    #[test]
    fn tags_must_be_positive_and_unique() {
        assert!(usable_tags([3u64, 1, 2].into_iter()));
        assert!(!usable_tags([3u64, 1, 3].into_iter()));
        assert!(!usable_tags([0u64, 1].into_iter()));
        assert!(usable_tags(std::iter::empty()));
    }
}
