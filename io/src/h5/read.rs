//! Reading a results file written by [`super::Results`] back (restarts, tests, post-processing).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use gradfem_mesh::cell::CellType;
use gradfem_mesh::mesh::{CellBlock, CellId, Mesh, PhysicalGroup};
use hdf5_pure::{AttrValue, DType, Dataset, File, FormatError};

use super::{
    CellSelection, Centering, FORMAT_NAME, FORMAT_VERSION, Field, FieldValues, H5Error, Step,
    results_paths,
};

/// Everything a results file holds.
#[derive(Clone, Debug, PartialEq)]
pub struct ResultsData {
    /// The mesh: coordinates, node tags, all blocks with their tags, and the physical groups.
    pub mesh: Mesh,
    /// Which blocks the cell fields cover.
    pub selection: CellSelection,
    /// Fields written once.
    pub static_fields: Vec<Field>,
    /// The steps, in order.
    pub steps: Vec<Step>,
}

/// Read a results file written by [`super::Results::write`]; `path` may name the `.h5` or the
/// `.xdmf` file (the `.h5` is read). Every dataset's type and shape is checked, and the mesh is
/// validated; anything amiss is an error naming the object.
pub fn read_results(path: &Path) -> Result<ResultsData, H5Error> {
    let (h5_path, _) = results_paths(path)?;
    let file = File::open(&h5_path).map_err(|e| match e {
        hdf5_pure::Error::Io(source) => H5Error::Io { path: h5_path.clone(), source },
        source => H5Error::Hdf5 { path: h5_path.clone(), object: "/".into(), source },
    })?;
    Reader { path: h5_path, file }.read()
}

/// Read a results file from its bytes (`path` names it in errors); the same checks as
/// [`read_results`]. For callers that hold the file in memory, and for the fuzz target.
pub fn read_results_bytes(path: &Path, bytes: Vec<u8>) -> Result<ResultsData, H5Error> {
    let file = File::from_bytes(bytes).map_err(|e| match e {
        hdf5_pure::Error::Io(source) => H5Error::Io { path: path.to_path_buf(), source },
        source => H5Error::Hdf5 { path: path.to_path_buf(), object: "/".into(), source },
    })?;
    Reader { path: path.to_path_buf(), file }.read()
}

/// One floating-point dataset of any HDF5 file (not only a results file): its values in
/// row-major order and its shape. The element type must be f64; a missing object or another
/// type is an error naming the file and the object.
pub fn read_dataset_f64(path: &Path, object: &str) -> Result<(Vec<f64>, Vec<u64>), H5Error> {
    let file = File::open(path).map_err(|e| match e {
        hdf5_pure::Error::Io(source) => H5Error::Io { path: path.to_path_buf(), source },
        source => H5Error::Hdf5 { path: path.to_path_buf(), object: "/".into(), source },
    })?;
    let reader = Reader { path: path.to_path_buf(), file };
    let ds = reader.file.dataset(object).map_err(|e| reader.hdf5(object, e))?;
    let found = ds.dtype().map_err(|e| reader.hdf5(object, e))?;
    if found != DType::F64 {
        return Err(reader.malformed(object, format!("element type {found}, expected f64")));
    }
    let shape = ds.shape().map_err(|e| reader.hdf5(object, e))?;
    let values = ds.read_f64().map_err(|e| reader.hdf5(object, e))?;
    Ok((values, shape))
}

struct Reader {
    path: PathBuf,
    file: File,
}

type Attrs = HashMap<String, AttrValue>;

impl Reader {
    fn hdf5(&self, object: &str, source: hdf5_pure::Error) -> H5Error {
        match source {
            hdf5_pure::Error::Format(FormatError::PathNotFound(_)) => self.missing(object),
            source => H5Error::Hdf5 { path: self.path.clone(), object: object.into(), source },
        }
    }

    fn missing(&self, object: &str) -> H5Error {
        H5Error::Missing { path: self.path.clone(), object: object.into() }
    }

    fn malformed(&self, object: &str, reason: impl Into<String>) -> H5Error {
        H5Error::Malformed { path: self.path.clone(), object: object.into(), reason: reason.into() }
    }

    fn group_attrs(&self, group: &str) -> Result<Attrs, H5Error> {
        let g = self.file.group(group).map_err(|e| self.hdf5(group, e))?;
        g.attrs().map_err(|e| self.hdf5(group, e))
    }

    /// The child groups of `group`.
    fn subgroups(&self, group: &str) -> Result<Vec<String>, H5Error> {
        let g = self.file.group(group).map_err(|e| self.hdf5(group, e))?;
        g.groups().map_err(|e| self.hdf5(group, e))
    }

    fn datasets(&self, group: &str) -> Result<Vec<String>, H5Error> {
        let g = self.file.group(group).map_err(|e| self.hdf5(group, e))?;
        g.datasets().map_err(|e| self.hdf5(group, e))
    }

    fn attr_str(&self, attrs: &Attrs, object: &str, name: &str) -> Result<String, H5Error> {
        let v =
            attrs.get(name).ok_or_else(|| self.missing(&format!("{object} attribute {name}")))?;
        v.as_str()
            .map(str::to_owned)
            .ok_or_else(|| self.malformed(object, format!("attribute {name} is not a string")))
    }

    fn attr_i64(&self, attrs: &Attrs, object: &str, name: &str) -> Result<i64, H5Error> {
        let v =
            attrs.get(name).ok_or_else(|| self.missing(&format!("{object} attribute {name}")))?;
        v.as_i64()
            .ok_or_else(|| self.malformed(object, format!("attribute {name} is not an integer")))
    }

    fn attr_index(&self, attrs: &Attrs, object: &str) -> Result<usize, H5Error> {
        let i = self.attr_i64(attrs, object, "index")?;
        usize::try_from(i).map_err(|_| self.malformed(object, format!("negative index {i}")))
    }

    /// Open a dataset and check its element type and shape (`None` in `shape` = any length).
    fn dataset(
        &self,
        object: &str,
        dtype: DType,
        shape: &[Option<u64>],
    ) -> Result<Dataset, H5Error> {
        let ds = self.file.dataset(object).map_err(|e| self.hdf5(object, e))?;
        let found = ds.dtype().map_err(|e| self.hdf5(object, e))?;
        if found != dtype {
            return Err(self.malformed(object, format!("element type {found}, expected {dtype}")));
        }
        let s = ds.shape().map_err(|e| self.hdf5(object, e))?;
        let ok =
            s.len() == shape.len() && s.iter().zip(shape).all(|(a, b)| b.is_none_or(|b| *a == b));
        if !ok {
            return Err(self.malformed(object, format!("shape {s:?}, expected {shape:?}")));
        }
        Ok(ds)
    }

    fn read_f64(&self, object: &str, shape: &[Option<u64>]) -> Result<Vec<f64>, H5Error> {
        let ds = self.dataset(object, DType::F64, shape)?;
        ds.read_f64().map_err(|e| self.hdf5(object, e))
    }

    fn read_u64(&self, object: &str, shape: &[Option<u64>]) -> Result<Vec<u64>, H5Error> {
        let ds = self.dataset(object, DType::U64, shape)?;
        ds.read_u64().map_err(|e| self.hdf5(object, e))
    }

    /// Sort `(index, item)` pairs and check the indices are exactly 0..n.
    fn in_order<T>(&self, object: &str, mut items: Vec<(usize, T)>) -> Result<Vec<T>, H5Error> {
        items.sort_by_key(|(i, _)| *i);
        for (k, (i, _)) in items.iter().enumerate() {
            if *i != k {
                return Err(
                    self.malformed(object, format!("index attributes are not 0..{}", items.len()))
                );
            }
        }
        Ok(items.into_iter().map(|(_, t)| t).collect())
    }

    fn read(self) -> Result<ResultsData, H5Error> {
        let root = self.group_attrs("/")?;
        let format = root.get("format").and_then(|v| v.as_str()).unwrap_or("");
        let version = root.get("version").and_then(|v| v.as_i64());
        if format != FORMAT_NAME || version != Some(FORMAT_VERSION) {
            return Err(H5Error::NotResults {
                path: self.path.clone(),
                found: format!(
                    "format {format:?}, version {version:?}; expected {FORMAT_NAME:?} version {FORMAT_VERSION}"
                ),
            });
        }
        let sel_name = self.attr_str(&root, "/", "cell_selection")?;
        let selection = CellSelection::from_name(&sel_name)
            .ok_or_else(|| self.malformed("/", format!("unknown cell_selection {sel_name:?}")))?;

        let mesh = self.read_mesh()?;
        let n_nodes = mesh.n_nodes();
        let n_cells = selection.n_cells(&mesh);

        let static_fields = self.read_fields("/static", n_nodes, n_cells)?;
        let mut steps = Vec::new();
        for name in self.subgroups("/steps")? {
            let object = format!("/steps/{name}");
            let attrs = self.group_attrs(&object)?;
            let index = self.attr_index(&attrs, &object)?;
            let time = match attrs.get("time") {
                Some(AttrValue::F64(t)) => *t,
                Some(_) => return Err(self.malformed(&object, "attribute time is not an f64")),
                None => return Err(self.missing(&format!("{object} attribute time"))),
            };
            let fields = self.read_fields(&object, n_nodes, n_cells)?;
            steps.push((index, Step { time, fields }));
        }
        let steps = self.in_order("/steps", steps)?;
        Ok(ResultsData { mesh, selection, static_fields, steps })
    }

    fn read_mesh(&self) -> Result<Mesh, H5Error> {
        let coords = self.read_f64("/mesh/coordinates", &[None, Some(3)])?;
        let coords: Vec<[f64; 3]> = coords.chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect();
        let n = coords.len() as u64;
        let node_tags = self.read_u64("/mesh/node_tags", &[Some(n)])?;

        let mut blocks = Vec::new();
        for name in self.subgroups("/mesh/blocks")? {
            let object = format!("/mesh/blocks/{name}");
            let attrs = self.group_attrs(&object)?;
            let index = self.attr_index(&attrs, &object)?;
            let type_name = self.attr_str(&attrs, &object, "cell_type")?;
            let cell_type = CellType::from_name(&type_name).ok_or_else(|| {
                self.malformed(&object, format!("unknown cell type {type_name:?}"))
            })?;
            let k = cell_type.n_nodes() as u64;
            let tags = self.read_u64(&format!("{object}/tags"), &[None])?;
            let rows = tags.len() as u64;
            let conn = self.read_u64(&format!("{object}/connectivity"), &[Some(rows), Some(k)])?;
            let mut connectivity = Vec::with_capacity(conn.len());
            for (pos, &v) in conn.iter().enumerate() {
                if v >= n {
                    return Err(self.malformed(
                        &format!("{object}/connectivity"),
                        format!(
                            "cell {} refers to node {v}, the mesh has {n} nodes",
                            pos as u64 / k
                        ),
                    ));
                }
                connectivity.push(v as usize);
            }
            blocks.push((index, CellBlock { cell_type, connectivity, tags }));
        }
        let blocks = self.in_order("/mesh/blocks", blocks)?;

        let mut groups = Vec::new();
        for link in self.subgroups("/mesh/groups")? {
            let object = format!("/mesh/groups/{link}");
            let attrs = self.group_attrs(&object)?;
            let index = self.attr_index(&attrs, &object)?;
            let name = self.attr_str(&attrs, &object, "name")?;
            let tag = self.attr_i64(&attrs, &object, "tag")?;
            let dim = self.attr_i64(&attrs, &object, "dim")?;
            let tag = i32::try_from(tag)
                .map_err(|_| self.malformed(&object, format!("tag {tag} out of range")))?;
            let dim =
                usize::try_from(dim).map_err(|_| self.malformed(&object, format!("dim {dim}")))?;
            let b = self.read_u64(&format!("{object}/block"), &[None])?;
            let i = self.read_u64(&format!("{object}/index"), &[Some(b.len() as u64)])?;
            let cells = b
                .iter()
                .zip(&i)
                .map(|(&b, &i)| CellId { block: b as usize, index: i as usize })
                .collect();
            groups.push((index, PhysicalGroup { name, tag, dim, cells }));
        }
        let groups = self.in_order("/mesh/groups", groups)?;

        let mesh = Mesh { coords, node_tags, blocks, groups };
        mesh.validate().map_err(|e| self.malformed("/mesh", e.to_string()))?;
        Ok(mesh)
    }

    /// The field datasets of one group (`/static` or `/steps/<k>`), in their written order.
    fn read_fields(
        &self,
        group: &str,
        n_nodes: usize,
        n_cells: usize,
    ) -> Result<Vec<Field>, H5Error> {
        let mut fields = Vec::new();
        for link in self.datasets(group)? {
            let object = format!("{group}/{link}");
            let ds = self.file.dataset(&object).map_err(|e| self.hdf5(&object, e))?;
            let attrs = ds.attrs().map_err(|e| self.hdf5(&object, e))?;
            let index = self.attr_index(&attrs, &object)?;
            let name = self.attr_str(&attrs, &object, "name")?;
            let centering = match self.attr_str(&attrs, &object, "centering")?.as_str() {
                "node" => Centering::Node,
                "cell" => Centering::Cell,
                other => return Err(self.malformed(&object, format!("centering {other:?}"))),
            };
            let n = match centering {
                Centering::Node => n_nodes,
                Centering::Cell => n_cells,
            } as u64;
            let kind = self.attr_str(&attrs, &object, "kind")?;
            let values = match kind.as_str() {
                "scalar" => FieldValues::Scalar(self.read_f64(&object, &[Some(n)])?),
                "vector" => {
                    let v = self.read_f64(&object, &[Some(n), Some(3)])?;
                    FieldValues::Vector(v.chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect())
                }
                "tensor" => {
                    let v = self.read_f64(&object, &[Some(n), Some(9)])?;
                    FieldValues::Tensor(
                        v.chunks_exact(9).map(|c| std::array::from_fn(|j| c[j])).collect(),
                    )
                }
                "tensor6" => {
                    let v = self.read_f64(&object, &[Some(n), Some(6)])?;
                    FieldValues::SymTensor(
                        v.chunks_exact(6).map(|c| std::array::from_fn(|j| c[j])).collect(),
                    )
                }
                other => return Err(self.malformed(&object, format!("kind {other:?}"))),
            };
            // Files written before units were recorded have none.
            let unit = match attrs.get("units") {
                Some(_) => self.attr_str(&attrs, &object, "units")?,
                None => String::new(),
            };
            fields.push((index, Field { name, centering, values, unit }));
        }
        self.in_order(group, fields)
    }
}
