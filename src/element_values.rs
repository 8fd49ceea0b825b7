//! Values per element from a file: a material constant given as one number or as a field over
//! the cells, `k = { file = "k.csv" }` or `k = { file = "run/results.h5", field = "conductivity" }`.
//!
//! A file gives values in one of these layouts:
//!
//! - CSV with one column: one value per volume cell of the mesh, in the mesh's cell order (the
//!   order of the cell fields of gradfem's results files);
//! - CSV with two columns: `element_tag,value` rows, the mesh's cell tags; they must cover every
//!   cell of the group the constant is for (other cells may appear);
//! - an HDF5 dataset (`dataset = "/path"`) of any file with one f64 per volume cell, in the
//!   mesh's cell order;
//! - a cell field of a gradfem results file (`field = "conductivity"`, `step` optional, the last
//!   step holding the field by default), whose mesh must have the same volume cells.
//!
//! Lines that are blank or start with `#` are skipped in CSV files, and so is a first row that
//! is not numeric (a header).

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use gradfem_mesh::{CellId, Mesh};
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

/// A constant of a material: one number, or one value per element read from a file.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ElementValues {
    /// The same value on every element of the group.
    Uniform(f64),
    /// Values per element from a file.
    File(ElementFile),
}

/// Where per-element values are read from (`{ file = "...", dataset | field, step }`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ElementFile {
    /// A CSV file, or an HDF5 file (`.h5`, `.hdf5`), relative to the problem file.
    pub file: String,
    /// HDF5: the dataset's path, e.g. `/steps/0/conductivity`.
    pub dataset: Option<String>,
    /// HDF5 results file of gradfem: the name of a cell field.
    pub field: Option<String>,
    /// With `field`: the step to read (default: the last step that holds the field).
    pub step: Option<usize>,
}

impl ElementValues {
    /// The uniform value, if the constant is one number.
    pub fn uniform(&self) -> Option<f64> {
        match self {
            ElementValues::Uniform(v) => Some(*v),
            ElementValues::File(_) => None,
        }
    }
}

impl<'de> Deserialize<'de> for ElementValues {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ElementValues;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number, or a table { file = \"values.csv\" } of values per element")
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                Ok(ElementValues::Uniform(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(ElementValues::Uniform(v as f64))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(ElementValues::Uniform(v as f64))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                ElementFile::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(ElementValues::File)
            }
        }
        d.deserialize_any(V)
    }
}

/// Why per-element values could not be read; each names the file and, where there is one,
/// the line, the element tag or the dataset.
#[derive(Debug, thiserror::Error)]
pub enum ElementValuesError {
    #[error("{path}: cannot read: {message}")]
    Read { path: PathBuf, message: String },
    #[error("{path}:{line}:1: {message}")]
    Line { path: PathBuf, line: usize, message: String },
    #[error("{path}: {message}")]
    Content { path: PathBuf, message: String },
    #[error("{0}")]
    Spec(String),
}

/// The volume cells of a mesh (its top dimension) in the mesh's order: the cells that a file
/// of values per element follows, and the cells of gradfem's results files.
pub fn volume_cells(mesh: &Mesh) -> Vec<CellId> {
    let dim = mesh.dim();
    (0..mesh.blocks.len())
        .filter(|&b| mesh.blocks[b].cell_type.dim() == dim)
        .flat_map(|b| (0..mesh.blocks[b].len()).map(move |i| CellId { block: b, index: i }))
        .collect()
}

/// Values per volume cell read from `source`: a map from the element tag of a mesh cell to
/// its value, holding every element of `group_tags` (more when the file gives them). `base`
/// anchors a relative path.
pub fn read_element_values(
    source: &ElementFile,
    base: &Path,
    mesh: &Mesh,
    group_tags: &[u64],
) -> Result<HashMap<u64, f64>, ElementValuesError> {
    let path = {
        let p = Path::new(&source.file);
        if p.is_absolute() { p.to_path_buf() } else { base.join(p) }
    };
    let cells = volume_cells(mesh);
    let is_h5 = matches!(
        path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref(),
        Some("h5" | "hdf5")
    );
    let in_order = |values: Vec<f64>, what: &str| -> Result<_, ElementValuesError> {
        if values.len() != cells.len() {
            return Err(ElementValuesError::Content {
                path: path.clone(),
                message: format!(
                    "{what}: expected {} values (one per volume cell of the mesh, in its order), found {}",
                    cells.len(),
                    values.len()
                ),
            });
        }
        Ok(cells.iter().map(|&c| mesh.cell_tag(c)).zip(values).collect::<HashMap<_, _>>())
    };
    let by_cell = if is_h5 {
        match (&source.dataset, &source.field) {
            (Some(ds), None) => {
                if source.step.is_some() {
                    return Err(ElementValuesError::Spec(
                        "`step` selects a step of a results `field`; a `dataset` names one array"
                            .into(),
                    ));
                }
                let (values, shape) = gradfem_io::h5::read_dataset_f64(&path, ds).map_err(|e| {
                    ElementValuesError::Read { path: path.clone(), message: e.to_string() }
                })?;
                if !(shape.len() == 1 || shape.len() == 2 && shape[1] == 1) {
                    return Err(ElementValuesError::Content {
                        path: path.clone(),
                        message: format!(
                            "dataset {ds}: shape {shape:?}; expected one value per volume cell, [{}]",
                            cells.len()
                        ),
                    });
                }
                in_order(values, &format!("dataset {ds}"))?
            }
            (None, Some(name)) => results_field(&path, name, source.step, mesh, &cells)?,
            _ => {
                return Err(ElementValuesError::Spec(format!(
                    "{}: an HDF5 file needs exactly one of `dataset` (a path in the file) and `field` (a cell field of a gradfem results file)",
                    source.file
                )));
            }
        }
    } else {
        if source.dataset.is_some() || source.field.is_some() || source.step.is_some() {
            return Err(ElementValuesError::Spec(format!(
                "{}: `dataset`, `field` and `step` select values in an HDF5 file (.h5, .hdf5); a CSV file has none",
                source.file
            )));
        }
        read_csv(&path, mesh, &cells, &in_order)?
    };
    if let Some(t) = group_tags.iter().find(|t| !by_cell.contains_key(t)) {
        let missing = group_tags.iter().filter(|t| !by_cell.contains_key(t)).count();
        return Err(ElementValuesError::Content {
            path,
            message: format!(
                "no value for {missing} of the group's {} cells (the first: element tag {t})",
                group_tags.len()
            ),
        });
    }
    Ok(by_cell)
}

/// Values in the mesh's cell order turned into values by element tag, checked for their count.
type InOrder<'a> = dyn Fn(Vec<f64>, &str) -> Result<HashMap<u64, f64>, ElementValuesError> + 'a;

/// A CSV file of values per cell: one column in the mesh's order, or `element_tag,value`.
fn read_csv(
    path: &Path,
    mesh: &Mesh,
    cells: &[CellId],
    in_order: &InOrder,
) -> Result<HashMap<u64, f64>, ElementValuesError> {
    let text = std::fs::read_to_string(path).map_err(|e| ElementValuesError::Read {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    let at = |line: usize, message: String| ElementValuesError::Line {
        path: path.to_path_buf(),
        line,
        message,
    };
    let mut rows: Vec<(usize, Vec<&str>)> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let cols: Vec<&str> = line.split(',').map(str::trim).collect();
        let numeric = cols.iter().all(|c| c.parse::<f64>().is_ok());
        if rows.is_empty() && !numeric && !cols.iter().any(|c| c.parse::<f64>().is_ok()) {
            continue; // a header
        }
        rows.push((i + 1, cols));
    }
    let Some((first_line, first)) = rows.first() else {
        return Err(ElementValuesError::Content {
            path: path.to_path_buf(),
            message: "no values".into(),
        });
    };
    let n_cols = first.len();
    if !(n_cols == 1 || n_cols == 2) {
        return Err(at(
            *first_line,
            format!(
                "{n_cols} columns; expected one value per row (the mesh's cell order) or element_tag,value"
            ),
        ));
    }
    let number = |line: usize, s: &str, what: &str| -> Result<f64, ElementValuesError> {
        let v: f64 = s.parse().map_err(|_| at(line, format!("{what} '{s}' is not a number")))?;
        if !v.is_finite() {
            return Err(at(line, format!("{what} {s} is not finite")));
        }
        Ok(v)
    };
    if n_cols == 1 {
        let mut values = Vec::with_capacity(rows.len());
        for (line, cols) in &rows {
            if cols.len() != 1 {
                return Err(at(*line, format!("{} columns; the first row has 1", cols.len())));
            }
            values.push(number(*line, cols[0], "value")?);
        }
        return in_order(values, "one value per row");
    }
    let volume_tags: std::collections::HashSet<u64> =
        cells.iter().map(|&c| mesh.cell_tag(c)).collect();
    let mut out = HashMap::with_capacity(rows.len());
    let mut line_of_tag: HashMap<u64, usize> = HashMap::new();
    for (line, cols) in &rows {
        if cols.len() != 2 {
            return Err(at(*line, format!("{} columns; expected element_tag,value", cols.len())));
        }
        let tag: u64 = cols[0]
            .parse()
            .map_err(|_| at(*line, format!("element tag '{}' is not a whole number", cols[0])))?;
        if !volume_tags.contains(&tag) {
            return Err(at(*line, format!("element tag {tag} is not a volume cell of the mesh")));
        }
        if let Some(prev) = line_of_tag.insert(tag, *line) {
            return Err(at(*line, format!("element tag {tag} again (first on line {prev})")));
        }
        out.insert(tag, number(*line, cols[1], "value")?);
    }
    Ok(out)
}

/// A scalar cell field of a gradfem results file, on a mesh with the same volume cells.
fn results_field(
    path: &Path,
    name: &str,
    step: Option<usize>,
    mesh: &Mesh,
    cells: &[CellId],
) -> Result<HashMap<u64, f64>, ElementValuesError> {
    let content =
        |message: String| ElementValuesError::Content { path: path.to_path_buf(), message };
    let data = gradfem_io::h5::read_results(path).map_err(|e| ElementValuesError::Read {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    let theirs = volume_cells(&data.mesh);
    let same = theirs.len() == cells.len()
        && theirs.iter().zip(cells).all(|(a, b)| data.mesh.cell_tag(*a) == mesh.cell_tag(*b));
    if !same {
        return Err(content(format!(
            "its mesh has {} volume cells and this problem's {}, or other element tags: a field of another mesh cannot be read per element",
            theirs.len(),
            cells.len()
        )));
    }
    let holds = |fields: &[gradfem_io::h5::Field]| fields.iter().any(|f| f.name == name);
    let fields = match step {
        Some(k) => {
            let s = data.steps.get(k).ok_or_else(|| {
                content(format!("step {k} does not exist; the file has {} steps", data.steps.len()))
            })?;
            &s.fields
        }
        None => match data.steps.iter().rev().find(|s| holds(&s.fields)) {
            Some(s) => &s.fields,
            None => &data.static_fields,
        },
    };
    let Some(field) = fields.iter().find(|f| f.name == name) else {
        let mut names: Vec<&str> = data
            .steps
            .iter()
            .flat_map(|s| &s.fields)
            .chain(&data.static_fields)
            .filter(|f| f.centering == gradfem_io::h5::Centering::Cell)
            .map(|f| f.name.as_str())
            .collect();
        names.sort_unstable();
        names.dedup();
        return Err(content(format!(
            "no cell field '{name}'{}; its cell fields: {}",
            step.map_or(String::new(), |k| format!(" in step {k}")),
            names.join(", ")
        )));
    };
    if field.centering != gradfem_io::h5::Centering::Cell {
        return Err(content(format!(
            "'{name}' is a node field; values per element need a cell field"
        )));
    }
    let gradfem_io::h5::FieldValues::Scalar(values) = &field.values else {
        return Err(content(format!(
            "'{name}' is a {} field; values per element need a scalar",
            field.values.kind_name()
        )));
    };
    Ok(cells.iter().map(|&c| mesh.cell_tag(c)).zip(values.iter().copied()).collect())
}

/// The value of each element (by its element tag), checked: finite and accepted by `check`,
/// which says why a value is refused. The tags must be those the map was read for.
pub fn per_element(
    by_tag: &HashMap<u64, f64>,
    element_tags: &[u64],
    check: impl Fn(f64) -> Option<&'static str>,
) -> Result<Vec<f64>, String> {
    let mut out = Vec::with_capacity(element_tags.len());
    for t in element_tags {
        let v = by_tag[t];
        if !v.is_finite() {
            return Err(format!("element tag {t}: value {v} is not finite"));
        }
        if let Some(why) = check(v) {
            return Err(format!("element tag {t}: value {v}: {why}"));
        }
        out.push(v);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<ElementValues, toml::de::Error> {
        #[derive(Deserialize)]
        struct T {
            k: ElementValues,
        }
        toml::from_str::<T>(s).map(|t| t.k)
    }

    #[test]
    fn a_number_or_a_file_table() {
        assert_eq!(parse("k = 3.5").unwrap(), ElementValues::Uniform(3.5));
        assert_eq!(parse("k = 4").unwrap(), ElementValues::Uniform(4.0));
        let f = parse("k = { file = \"k.h5\", field = \"conductivity\", step = 2 }").unwrap();
        assert_eq!(
            f,
            ElementValues::File(ElementFile {
                file: "k.h5".into(),
                dataset: None,
                field: Some("conductivity".into()),
                step: Some(2),
            })
        );
        let e = parse("k = { file = \"k.csv\", colum = 2 }").unwrap_err().to_string();
        assert!(e.contains("colum"), "{e}");
        let e = parse("k = \"34\"").unwrap_err().to_string();
        assert!(e.contains("a number, or a table"), "{e}");
    }
}
