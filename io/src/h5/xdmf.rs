//! The XDMF 3 index of a results file (see the parent module's doc for its structure).
//!
//! Written by hand with `format!`: the file is a few fixed element kinds, and an XML writer crate
//! would add a dependency for no gain. Names are XML-escaped.

use std::fmt::Write as _;

use super::{Centering, Field, Results, block_name, xdmf_topology};

/// Escape text for an XML attribute value or element content.
fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

/// A float as XDMF reads it back exactly: Rust's shortest round-trip form, with an exponent
/// for very large or small magnitudes.
fn fmt_f64(x: f64) -> String {
    let a = x.abs();
    if x == 0.0 || (1e-4..1e15).contains(&a) { format!("{x:?}") } else { format!("{x:e}") }
}

/// The XDMF text for `results`, whose `.h5` file is `h5_name` (in the same directory).
pub(super) fn xdmf_text(results: &Results<'_>, h5_name: &str) -> String {
    let h5 = xml_escape(h5_name);
    let mut s = String::new();
    s.push_str("<?xml version=\"1.0\" encoding=\"utf-8\"?>\n");
    s.push_str("<Xdmf Version=\"3.0\" xmlns:xi=\"http://www.w3.org/2001/XInclude\">\n");
    s.push_str("  <Domain>\n");
    let static_fields: Vec<(&Field, String)> =
        results.static_fields.iter().map(|f| (f, Results::static_path(f))).collect();
    if results.steps.is_empty() {
        grid(&mut s, results, &h5, "mesh", None, &static_fields, "    ");
    } else {
        s.push_str(
            "    <Grid Name=\"results\" GridType=\"Collection\" CollectionType=\"Temporal\">\n",
        );
        for (k, step) in results.steps.iter().enumerate() {
            let mut fields = static_fields.clone();
            fields.extend(step.fields.iter().map(|f| (f, Results::step_path(k, f))));
            let name = format!("step {k}");
            grid(&mut s, results, &h5, &name, Some(step.time), &fields, "      ");
        }
        s.push_str("    </Grid>\n");
    }
    s.push_str("  </Domain>\n</Xdmf>\n");
    s
}

/// One uniform grid holding every written cell: the block's own topology when one block is
/// written, else a `Mixed` topology of all of them in block order (the order of the cell
/// fields), so that every attribute refers to its whole dataset.
fn grid(
    s: &mut String,
    results: &Results<'_>,
    h5: &str,
    name: &str,
    time: Option<f64>,
    fields: &[(&Field, String)],
    ind: &str,
) {
    let mesh = results.mesh;
    let blocks = results.written_blocks();
    let _ = writeln!(s, "{ind}<Grid Name=\"{name}\" GridType=\"Uniform\">");
    if let Some(t) = time {
        let _ = writeln!(s, "{ind}  <Time Value=\"{}\"/>", fmt_f64(t));
    }
    let n_nodes = mesh.n_nodes();
    let n_cells = results.n_cells;
    match blocks.as_slice() {
        [] => {
            // No cells: the nodes alone.
            let _ = writeln!(
                s,
                "{ind}  <Topology TopologyType=\"Polyvertex\" NumberOfElements=\"0\" NodesPerElement=\"1\"/>"
            );
        }
        [(b, _)] => {
            let blk = &mesh.blocks[*b];
            let bname = block_name(mesh, *b);
            let (topo_type, npe) = xdmf_topology(blk.cell_type);
            let npe = npe.map(|n| format!(" NodesPerElement=\"{n}\"")).unwrap_or_default();
            let (rows, k) = (blk.len(), blk.cell_type.n_nodes());
            let _ = writeln!(
                s,
                "{ind}  <Topology TopologyType=\"{topo_type}\" NumberOfElements=\"{rows}\"{npe}>"
            );
            let _ = writeln!(
                s,
                "{ind}    <DataItem Dimensions=\"{rows} {k}\" NumberType=\"Int\" Precision=\"8\" \
                 Format=\"HDF\">{h5}:/mesh/topology/{bname}</DataItem>"
            );
            let _ = writeln!(s, "{ind}  </Topology>");
        }
        _ => {
            let len = mixed_len(results);
            let _ = writeln!(
                s,
                "{ind}  <Topology TopologyType=\"Mixed\" NumberOfElements=\"{n_cells}\">"
            );
            let _ = writeln!(
                s,
                "{ind}    <DataItem Dimensions=\"{len}\" NumberType=\"Int\" Precision=\"8\" \
                 Format=\"HDF\">{h5}:/mesh/topology/{MIXED}</DataItem>"
            );
            let _ = writeln!(s, "{ind}  </Topology>");
        }
    }
    let _ = writeln!(s, "{ind}  <Geometry GeometryType=\"XYZ\">");
    let _ = writeln!(
        s,
        "{ind}    <DataItem Dimensions=\"{n_nodes} 3\" NumberType=\"Float\" Precision=\"8\" \
         Format=\"HDF\">{h5}:/mesh/coordinates</DataItem>"
    );
    let _ = writeln!(s, "{ind}  </Geometry>");
    for (f, path) in fields {
        let c = f.values.n_components();
        let (center, total) = match f.centering {
            Centering::Node => ("Node", n_nodes),
            Centering::Cell => ("Cell", n_cells),
        };
        let dims = if c == 1 { format!("{total}") } else { format!("{total} {c}") };
        let _ = writeln!(
            s,
            "{ind}  <Attribute Name=\"{}\" AttributeType=\"{}\" Center=\"{center}\">",
            xml_escape(&f.name),
            f.values.xdmf_type()
        );
        let _ = writeln!(
            s,
            "{ind}    <DataItem Dimensions=\"{dims}\" NumberType=\"Float\" Precision=\"8\" \
             Format=\"HDF\">{h5}:{path}</DataItem>"
        );
        let _ = writeln!(s, "{ind}  </Attribute>");
    }
    let _ = writeln!(s, "{ind}</Grid>");
}

/// Link name of the mixed topology under `/mesh/topology` (block names start with a digit).
pub(super) const MIXED: &str = "mixed";

/// The XDMF number of a cell type in a `Mixed` topology, and the node count that follows it
/// for the types whose node count is not fixed (poly-vertex, poly-line).
pub(super) fn mixed_code(cell_type: gradfem_mesh::CellType) -> (i64, Option<i64>) {
    use gradfem_mesh::CellType::*;
    match cell_type {
        Point1 => (0x1, Some(1)),
        Line2 => (0x2, Some(2)),
        Line3 => (0x22, None),
        Tri3 => (0x4, None),
        Tri6 => (0x24, None),
        Quad4 => (0x5, None),
        Quad8 => (0x25, None),
        Quad9 => (0x23, None),
        Tet4 => (0x6, None),
        Tet10 => (0x26, None),
        Hex8 => (0x9, None),
        Hex20 => (0x30, None),
        Hex27 => (0x32, None),
        Prism6 => (0x8, None),
    }
}

/// Length of the mixed topology array of the written blocks.
fn mixed_len(results: &Results<'_>) -> usize {
    results
        .written_blocks()
        .iter()
        .map(|&(b, _)| {
            let blk = &results.mesh.blocks[b];
            let per = 1 + mixed_code(blk.cell_type).1.map_or(0, |_| 1) + blk.cell_type.n_nodes();
            per * blk.len()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_round_trip() {
        for x in [0.0, 1.0, 0.1, 1e-7, 2.5e20, -3.25, 123456.789] {
            assert_eq!(fmt_f64(x).parse::<f64>().unwrap(), x, "{}", fmt_f64(x));
        }
        assert_eq!(xml_escape("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
    }
}
