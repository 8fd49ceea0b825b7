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
        spatial_collection(&mut s, results, &h5, "mesh", None, &static_fields, "    ");
    } else {
        s.push_str(
            "    <Grid Name=\"results\" GridType=\"Collection\" CollectionType=\"Temporal\">\n",
        );
        for (k, step) in results.steps.iter().enumerate() {
            let mut fields = static_fields.clone();
            fields.extend(step.fields.iter().map(|f| (f, Results::step_path(k, f))));
            let name = format!("step {k}");
            spatial_collection(&mut s, results, &h5, &name, Some(step.time), &fields, "      ");
        }
        s.push_str("    </Grid>\n");
    }
    s.push_str("  </Domain>\n</Xdmf>\n");
    s
}

/// One spatial collection: a uniform grid per written block.
fn spatial_collection(
    s: &mut String,
    results: &Results<'_>,
    h5: &str,
    name: &str,
    time: Option<f64>,
    fields: &[(&Field, String)],
    ind: &str,
) {
    let mesh = results.mesh;
    let _ = writeln!(
        s,
        "{ind}<Grid Name=\"{name}\" GridType=\"Collection\" CollectionType=\"Spatial\">"
    );
    let time_tag = time.map(|t| format!("<Time Value=\"{}\"/>", fmt_f64(t)));
    if let Some(t) = &time_tag {
        let _ = writeln!(s, "{ind}  {t}");
    }
    let n_nodes = mesh.n_nodes();
    let n_cells = results.n_cells;
    for (b, offset) in results.written_blocks() {
        let blk = &mesh.blocks[b];
        let bname = block_name(mesh, b);
        let rows = blk.len();
        let k = blk.cell_type.n_nodes();
        let (topo_type, npe) = xdmf_topology(blk.cell_type);
        let _ = writeln!(s, "{ind}  <Grid Name=\"{bname}\" GridType=\"Uniform\">");
        if let Some(t) = &time_tag {
            let _ = writeln!(s, "{ind}    {t}");
        }
        let npe = npe.map(|n| format!(" NodesPerElement=\"{n}\"")).unwrap_or_default();
        let _ = writeln!(
            s,
            "{ind}    <Topology TopologyType=\"{topo_type}\" NumberOfElements=\"{rows}\"{npe}>"
        );
        let _ = writeln!(
            s,
            "{ind}      <DataItem Dimensions=\"{rows} {k}\" NumberType=\"Int\" Precision=\"8\" \
             Format=\"HDF\">{h5}:/mesh/topology/{bname}</DataItem>"
        );
        let _ = writeln!(s, "{ind}    </Topology>");
        let _ = writeln!(s, "{ind}    <Geometry GeometryType=\"XYZ\">");
        let _ = writeln!(
            s,
            "{ind}      <DataItem Dimensions=\"{n_nodes} 3\" NumberType=\"Float\" Precision=\"8\" \
             Format=\"HDF\">{h5}:/mesh/coordinates</DataItem>"
        );
        let _ = writeln!(s, "{ind}    </Geometry>");
        for (f, path) in fields {
            let c = f.values.n_components();
            let attr_type = match c {
                1 => "Scalar",
                3 => "Vector",
                _ => "Tensor",
            };
            let (center, total) = match f.centering {
                Centering::Node => ("Node", n_nodes),
                Centering::Cell => ("Cell", n_cells),
            };
            let dims = |n: usize| if c == 1 { format!("{n}") } else { format!("{n} {c}") };
            let _ = writeln!(
                s,
                "{ind}    <Attribute Name=\"{}\" AttributeType=\"{attr_type}\" Center=\"{center}\">",
                xml_escape(&f.name)
            );
            let heavy = format!(
                "<DataItem Dimensions=\"{}\" NumberType=\"Float\" Precision=\"8\" \
                 Format=\"HDF\">{h5}:{path}</DataItem>",
                dims(total)
            );
            if f.centering == Centering::Node || (offset == 0 && rows == total) {
                let _ = writeln!(s, "{ind}      {heavy}");
            } else {
                // Rows [offset, offset + rows) of the concatenated cell field.
                let (rank, sel) = if c == 1 {
                    (1, format!("{offset} 1 {rows}"))
                } else {
                    (2, format!("{offset} 0 1 1 {rows} {c}"))
                };
                let _ = writeln!(
                    s,
                    "{ind}      <DataItem ItemType=\"HyperSlab\" Dimensions=\"{}\" Type=\"HyperSlab\">",
                    dims(rows)
                );
                let _ = writeln!(
                    s,
                    "{ind}        <DataItem Dimensions=\"3 {rank}\" NumberType=\"Int\" Format=\"XML\">{sel}</DataItem>"
                );
                let _ = writeln!(s, "{ind}        {heavy}");
                let _ = writeln!(s, "{ind}      </DataItem>");
            }
            let _ = writeln!(s, "{ind}    </Attribute>");
        }
        let _ = writeln!(s, "{ind}  </Grid>");
    }
    let _ = writeln!(s, "{ind}</Grid>");
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
