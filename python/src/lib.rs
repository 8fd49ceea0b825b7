//! `gradfem._gradfem`: the library API ([`gradfem::api`]) and the dynamics crate
//! ([`gradfem_dynamics`], `dynamics.rs`) as a Python extension module. The Python package
//! `gradfem` (python/gradfem) wraps it: `Problem`, `Solution`, `gradfem.dynamics`, and the
//! PyTorch bridge `gradfem.torch`.
//!
//! Arrays cross as NumPy float64 arrays: nodal fields one value per node (`temperature`,
//! `potential`) or an (n_nodes, 3) array (`displacement`), per-element parameters in their
//! group's cell order, node coordinates as (n_nodes, 3).

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use gradfem::api::{ApiError, Cotangent, Gradients, Model, Simulation};
use gradfem::app::AppError;
use gradfem::problem::ProblemError as FileError;
use numpy::{IntoPyArray, PyArray1, PyArrayMethods, PyReadonlyArrayDyn};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

mod dynamics;

create_exception!(
    gradfem,
    Error,
    PyException,
    "Any error of gradfem; its message names the file and line, the group, the field or the \
     Newton iteration, as the CLI's do."
);
create_exception!(
    gradfem,
    ProblemError,
    Error,
    "A problem that cannot be set up (a bad value, an unknown group or key, with its file and \
     line), or a request it cannot meet (an unknown parameter, field or quantity: the message \
     lists what it offers; a wrong number of values)."
);
create_exception!(
    gradfem,
    MeshError,
    ProblemError,
    "A mesh that cannot be used: unreadable, inconsistent, or with inverted or degenerate cells."
);
create_exception!(
    gradfem,
    SolverError,
    Error,
    "A solve, gradient or Taylor test that failed (a singular system, Newton that did not \
     converge, a non-finite state)."
);

/// Run `f` on a worker thread with the GIL released while this thread, every 50 ms, takes the
/// GIL back to run Python's signal handlers. When one raises (KeyboardInterrupt on Ctrl-C),
/// gradfem is asked to stop at its next safe point (a Newton iteration, a time or load step,
/// `gradfem::solvers::interrupt`); the worker's result is dropped and the exception raised.
pub(crate) fn interruptible<T: Send>(py: Python<'_>, f: impl FnOnce() -> T + Send) -> PyResult<T> {
    use gradfem::solvers::interrupt;
    use std::sync::mpsc;
    use std::time::Duration;
    std::thread::scope(|scope| {
        let (tx, mut rx) = mpsc::channel();
        scope.spawn(move || {
            let _ = tx.send(f());
        });
        loop {
            // The receiver goes into the GIL-free wait and comes back (it is Send, not Sync).
            let (got, back) = py.detach(move || (rx.recv_timeout(Duration::from_millis(50)), rx));
            rx = back;
            match got {
                Ok(value) => return Ok(value),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if let Err(signal) = py.check_signals() {
                        interrupt::request();
                        // The worker stops at its next safe point; its result is not wanted.
                        let _ = py.detach(move || rx.recv());
                        interrupt::clear();
                        return Err(signal);
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(SolverError::new_err("the computation ended without a result"));
                }
            }
        }
    })
}

/// The exception of an error met while setting a problem up or changing it.
fn problem_err(e: ApiError) -> PyErr {
    match &e {
        ApiError::Build(b) if matches!(**b, AppError::Problem(FileError::Mesh { .. })) => {
            MeshError::new_err(e.to_string())
        }
        _ => ProblemError::new_err(e.to_string()),
    }
}

/// The exception of an error met while solving or differentiating.
fn solve_err(e: ApiError) -> PyErr {
    match &e {
        ApiError::Run { .. } => SolverError::new_err(e.to_string()),
        _ => problem_err(e),
    }
}

/// A problem set up from a problem file (or its text), ready to solve and differentiate.
/// Any Python thread may use it; calls are serialized, and gradfem's work runs with the GIL
/// released.
#[pyclass(module = "gradfem._gradfem")]
struct Problem {
    sim: Mutex<Simulation>,
}

/// `values` as a float (scalar parameters) or a float64 array.
fn values_object<'py>(
    py: Python<'py>,
    scalar: bool,
    values: Vec<f64>,
) -> PyResult<Bound<'py, PyAny>> {
    if scalar && values.len() == 1 {
        Ok(values[0].into_pyobject(py)?.into_any())
    } else {
        Ok(values.into_pyarray(py).into_any())
    }
}

/// The float64 values of a number or an array-like (any shape, flattened in C order).
fn flat_values(v: &Bound<'_, PyAny>) -> PyResult<Vec<f64>> {
    if let Ok(x) = v.extract::<f64>() {
        return Ok(vec![x]);
    }
    let np = v.py().import("numpy")?;
    let a = np.call_method1("ascontiguousarray", (v, "float64"))?;
    let a: PyReadonlyArrayDyn<'_, f64> = a.extract()?;
    Ok(a.as_slice()?.to_vec())
}

impl Problem {
    fn new(sim: Simulation) -> Self {
        Problem { sim: Mutex::new(sim) }
    }

    /// The simulation, for a short look with the GIL held. A thread inside
    /// [`detached`](Self::detached) holds it without the GIL and gives it back before it takes
    /// the GIL again, so waiting here cannot deadlock. Not re-entrant: one guard at a time.
    fn sim(&self) -> MutexGuard<'_, Simulation> {
        // A panic inside gradfem would be a bug; the state it leaves is still the last one.
        self.sim.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Run `f` on the simulation with the GIL released, so other Python threads run meanwhile,
    /// and Ctrl-C (or any signal whose Python handler raises) stops it at its next safe point
    /// ([`interruptible`]).
    fn detached<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Simulation) -> T + Send,
    ) -> PyResult<T> {
        interruptible(py, || f(&mut self.sim()))
    }

    fn gradients<'py>(&self, py: Python<'py>, g: &Gradients) -> PyResult<Bound<'py, PyDict>> {
        let sim = self.sim();
        let out = PyDict::new(py);
        for (name, v) in &g.by_name {
            let scalar = sim.is_scalar_parameter(name).unwrap_or(false);
            out.set_item(name, values_object(py, scalar, v.clone())?)?;
        }
        Ok(out)
    }

    fn field_object<'py>(
        &self,
        py: Python<'py>,
        name: &str,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let sim = self.sim();
        let Some(f) = sim.field(name) else { return Ok(None) };
        let a = f.to_vec().into_pyarray(py);
        if name == "displacement" {
            let n = f.len() / 3;
            Ok(Some(a.reshape([n, 3])?.into_any()))
        } else {
            Ok(Some(a.into_any()))
        }
    }
}

#[pymethods]
impl Problem {
    /// Read and set up a problem file.
    #[staticmethod]
    fn from_toml(path: std::path::PathBuf) -> PyResult<Self> {
        Ok(Problem::new(Simulation::from_file(&path).map_err(problem_err)?))
    }

    /// Set up problem-file text; `path` names it in errors and anchors its relative paths.
    #[staticmethod]
    #[pyo3(signature = (text, path = std::path::PathBuf::from("problem.toml")))]
    fn from_string(text: &str, path: std::path::PathBuf) -> PyResult<Self> {
        Ok(Problem::new(Simulation::from_toml(&path, text).map_err(problem_err)?))
    }

    /// Solve; returns (quantities, fields): dict of floats and dict of float64 arrays.
    fn solve<'py>(&self, py: Python<'py>) -> PyResult<(Bound<'py, PyDict>, Bound<'py, PyDict>)> {
        let (quantities, names) = self
            .detached(py, |s| {
                s.solve().and_then(|()| s.quantities()).map(|q| (q, s.field_names()))
            })?
            .map_err(solve_err)?;
        let q = PyDict::new(py);
        for (k, v) in quantities {
            q.set_item(k, v)?;
        }
        let fields = PyDict::new(py);
        for name in names {
            if let Some(a) = self.field_object(py, name)? {
                fields.set_item(name, a)?;
            }
        }
        Ok((q, fields))
    }

    /// The objective J (solving first when needed).
    fn objective(&self, py: Python<'_>) -> PyResult<f64> {
        self.detached(py, |s| s.objective())?.map_err(solve_err)
    }

    /// The quantities of the solution (solving first when needed).
    fn quantities(&self, py: Python<'_>) -> PyResult<BTreeMap<String, f64>> {
        self.detached(py, |s| s.quantities())?.map_err(solve_err)
    }

    /// A nodal field of the last solution, or None.
    fn field<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.field_object(py, name)
    }

    /// The nodal fields this problem has.
    #[getter]
    fn field_names(&self) -> Vec<&'static str> {
        self.sim().field_names()
    }

    /// Every parameter name the problem can register.
    #[getter]
    fn available_parameters(&self) -> Vec<String> {
        self.sim().parameter_names()
    }

    /// The quantities a cotangent of `vjp` may weigh.
    #[getter]
    fn differentiable_quantities(&self) -> Vec<String> {
        self.sim().differentiable_quantities()
    }

    /// The registered parameters: name -> float or float64 array.
    #[getter]
    fn parameters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        let mut sim = self.sim();
        for name in sim.registered() {
            let v = sim.parameter(&name).map_err(solve_err)?;
            let scalar = sim.is_scalar_parameter(&name).unwrap_or(false);
            out.set_item(&name, values_object(py, scalar, v)?)?;
        }
        Ok(out)
    }

    /// Bounds of the registered parameters: name -> (lower, upper), None where unbounded.
    #[getter]
    fn parameter_bounds(&self) -> BTreeMap<String, (Option<f64>, Option<f64>)> {
        let sim = self.sim();
        sim.registered()
            .into_iter()
            .filter_map(|n| sim.parameter_bounds(&n).map(|b| (n, b)))
            .collect()
    }

    /// Set up a problem from the tables of a problem file given as a dict (the same keys and
    /// values as the TOML), with an optional mesh from arrays: `points` (n, 3), `cells`
    /// {cell type: (m, nodes per cell) int array, 0-based node indices in gmsh order} and
    /// `groups` {name: (cell type, cell indices into that type's array)}.
    #[staticmethod]
    #[pyo3(signature = (tables, name = "model", base_dir = std::path::PathBuf::from("."), points = None, cells = None, groups = None))]
    fn from_dict(
        tables: &Bound<'_, PyDict>,
        name: &str,
        base_dir: std::path::PathBuf,
        points: Option<&Bound<'_, PyAny>>,
        cells: Option<&Bound<'_, PyDict>>,
        groups: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let table = match to_toml(tables.as_any(), "tables")? {
            toml::Value::Table(t) => t,
            _ => unreachable!("a dict is a table"),
        };
        let mut model = Model::from_table(name, table).map_err(problem_err)?.base_dir(base_dir);
        if let Some(points) = points {
            let mesh = mesh_from_arrays(points, cells, groups)?;
            model = model.mesh(mesh);
        } else if cells.is_some() || groups.is_some() {
            return Err(ProblemError::new_err("`cells` and `groups` come with `points`"));
        }
        Ok(Problem::new(model.build().map_err(problem_err)?))
    }

    /// Register a parameter by name (it is then differentiated by `gradient` and `vjp`).
    fn register(&self, name: &str) -> PyResult<()> {
        self.sim().register(name).map_err(problem_err)
    }

    /// Set parameters by name (registering those that are not): a float for a scalar, an
    /// array for a per-element field or the node coordinates. The next output solves again.
    fn set_parameters(&self, values: &Bound<'_, PyDict>) -> PyResult<()> {
        for (k, v) in values.iter() {
            let name: String = k.extract()?;
            let v = flat_values(&v)?;
            let r = self.sim().set_parameter_values(&name, &v);
            r.map_err(problem_err)?;
        }
        Ok(())
    }

    /// dJ/dp of the objective by every registered parameter: name -> float or array.
    fn gradient<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let g = self.detached(py, |s| s.gradient())?.map_err(solve_err)?;
        self.gradients(py, &g)
    }

    /// The vector-Jacobian product of a cotangent on the outputs: keys are nodal fields
    /// (`temperature`: one weight per node; `displacement`: (n_nodes, 3)) or differentiable
    /// quantities (a float each). Returns d⟨w, outputs⟩/dp like `gradient`.
    fn vjp<'py>(
        &self,
        py: Python<'py>,
        cotangent: &Bound<'_, PyDict>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let mut c = Cotangent::new();
        for (k, v) in cotangent.iter() {
            let name: String = k.extract()?;
            let is_field = self.sim().field_names().contains(&name.as_str());
            if is_field {
                c = c.field(&name, flat_values(&v)?);
            } else {
                c = c.quantity(&name, v.extract::<f64>()?);
            }
        }
        let g = self.detached(py, |s| s.vjp(&c))?.map_err(solve_err)?;
        self.gradients(py, &g)
    }

    /// The Hessian of the objective applied to a direction: `direction` maps registered names
    /// to a float or an array (names left out are zero); returns H·δp like `gradient`. Exact,
    /// by the tangent-linear model and the second-order adjoint. Steady thermal,
    /// electro-thermal, linear thermo-elastic and finite-strain problems (ρ(T) cycles
    /// monolithic or staggered) so far.
    fn hvp<'py>(
        &self,
        py: Python<'py>,
        direction: &Bound<'_, PyDict>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let mut d = std::collections::BTreeMap::new();
        for (k, v) in direction.iter() {
            let name: String = k.extract()?;
            d.insert(name, flat_values(&v)?);
        }
        let h = self.detached(py, |s| s.hvp(&d))?.map_err(solve_err)?;
        self.gradients(py, &h)
    }

    /// The dense Hessian of the objective, an (n, n) float64 array over every registered entry
    /// in the order of the flattened parameters (one `hvp` per entry).
    fn hessian<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let h = self.detached(py, |s| s.hessian())?.map_err(solve_err)?;
        let n = (h.len() as f64).sqrt().round() as usize;
        let a: Bound<'py, PyArray1<f64>> = h.into_pyarray(py);
        Ok(a.reshape([n, n])?.into_any())
    }

    /// The Taylor test over every registered parameter: a dict with `passed`, `h`,
    /// `remainders`, `rates`, `threshold` and the table as text.
    fn taylor_test<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let t = self.detached(py, |s| s.taylor_test())?.map_err(solve_err)?;
        let out = PyDict::new(py);
        out.set_item("passed", t.passed)?;
        out.set_item("h", PyList::new(py, &t.h)?)?;
        out.set_item("remainders", PyList::new(py, &t.remainders)?)?;
        out.set_item("rates", PyList::new(py, &t.rates)?)?;
        out.set_item("threshold", t.threshold)?;
        out.set_item("j0", t.j0)?;
        out.set_item("dj_dm", t.dj_dm)?;
        out.set_item("table", t.table())?;
        Ok(out)
    }

    /// Node coordinates, an (n_nodes, 3) float64 array [m].
    #[getter]
    fn points<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let sim = self.sim();
        let c = &sim.mesh().coords;
        let flat: Vec<f64> = c.iter().flatten().copied().collect();
        let a: Bound<'py, PyArray1<f64>> = flat.into_pyarray(py);
        Ok(a.reshape([c.len(), 3])?.into_any())
    }

    /// Write results.xdmf and results.h5 into `directory`; returns the XDMF path.
    fn write_results(&self, py: Python<'_>, directory: std::path::PathBuf) -> PyResult<String> {
        let p = self.detached(py, |s| s.write_results(&directory))?.map_err(solve_err)?;
        Ok(p.display().to_string())
    }

    fn __repr__(&self) -> String {
        format!("<gradfem.Problem {}>", self.sim().problem_file().path.display())
    }
}

/// A Python value of a problem-file dict as TOML; `at` names it in errors.
fn to_toml(v: &Bound<'_, PyAny>, at: &str) -> PyResult<toml::Value> {
    use pyo3::types::{PyBool, PyFloat, PyInt, PyString, PyTuple};
    if v.is_instance_of::<PyBool>() {
        return Ok(toml::Value::Boolean(v.extract()?));
    }
    if v.is_instance_of::<PyInt>() {
        return Ok(toml::Value::Integer(v.extract()?));
    }
    if v.is_instance_of::<PyFloat>() {
        return Ok(toml::Value::Float(v.extract()?));
    }
    if v.is_instance_of::<PyString>() {
        return Ok(toml::Value::String(v.extract()?));
    }
    if let Ok(d) = v.cast::<PyDict>() {
        let mut t = toml::Table::new();
        for (k, x) in d.iter() {
            let key: String = k.extract().map_err(|_| {
                ProblemError::new_err(format!("{at}: the keys of a table are strings, not {k}"))
            })?;
            let inner = to_toml(&x, &format!("{at}.{key}"))?;
            t.insert(key, inner);
        }
        return Ok(toml::Value::Table(t));
    }
    if v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>() {
        let mut out = Vec::new();
        for (i, x) in v.try_iter()?.enumerate() {
            out.push(to_toml(&x?, &format!("{at}[{i}]"))?);
        }
        return Ok(toml::Value::Array(out));
    }
    // NumPy arrays and scalars: through their Python values.
    if v.hasattr("tolist")? {
        return to_toml(&v.call_method0("tolist")?, at);
    }
    Err(ProblemError::new_err(format!(
        "{at}: {} is not a value of a problem file (bool, int, float, str, list, dict or array)",
        v.get_type().name()?
    )))
}

/// A mesh from NumPy arrays (see `Problem.from_dict`), every argument checked by name.
fn mesh_from_arrays(
    points: &Bound<'_, PyAny>,
    cells: Option<&Bound<'_, PyDict>>,
    groups: Option<&Bound<'_, PyDict>>,
) -> PyResult<gradfem::mesh::Mesh> {
    use gradfem::mesh::CellType;
    let np = points.py().import("numpy")?;
    let p = np.call_method1("asarray", (points, "float64"))?;
    let shape: Vec<usize> = p.getattr("shape")?.extract()?;
    if shape.len() != 2 || shape[1] != 3 {
        return Err(ProblemError::new_err(format!(
            "points: expected an (n, 3) array of coordinates, got shape {shape:?}"
        )));
    }
    let flat = flat_values(&p)?;
    let pts: Vec<[f64; 3]> = flat.chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect();
    if let Some(i) = flat.iter().position(|x| !x.is_finite()) {
        return Err(ProblemError::new_err(format!(
            "points: coordinate {} of node {} is not finite",
            i % 3,
            i / 3
        )));
    }
    let Some(cells) = cells else {
        return Err(ProblemError::new_err("points need `cells`: {cell type: connectivity}"));
    };
    let mut blocks: Vec<(CellType, Vec<usize>)> = Vec::new();
    let mut block_of: BTreeMap<String, usize> = BTreeMap::new();
    for (k, conn) in cells.iter() {
        let name: String = k.extract()?;
        let ct = CellType::from_name(&name).ok_or_else(|| {
            ProblemError::new_err(format!(
                "cells: unknown cell type '{name}' (tet4, tet10, hex8, hex20, tri3, tri6, quad4, …)"
            ))
        })?;
        let a = np.call_method1("asarray", (conn,))?;
        let kind: String = a.getattr("dtype")?.getattr("kind")?.extract()?;
        if kind != "i" && kind != "u" {
            return Err(ProblemError::new_err(format!(
                "cells['{name}']: node indices must be integers, got dtype {}",
                a.getattr("dtype")?
            )));
        }
        let shape: Vec<usize> = a.getattr("shape")?.extract()?;
        if shape.len() != 2 || shape[1] != ct.n_nodes() {
            return Err(ProblemError::new_err(format!(
                "cells['{name}']: expected an (m, {}) array, got shape {shape:?}",
                ct.n_nodes()
            )));
        }
        let idx: Vec<i64> = a.call_method0("ravel")?.call_method0("tolist")?.extract()?;
        let mut conn = Vec::with_capacity(idx.len());
        for (j, &i) in idx.iter().enumerate() {
            if i < 0 || i as usize >= pts.len() {
                return Err(ProblemError::new_err(format!(
                    "cells['{name}']: cell {} refers to node {i}; the points hold {}",
                    j / ct.n_nodes(),
                    pts.len()
                )));
            }
            conn.push(i as usize);
        }
        block_of.insert(name, blocks.len());
        blocks.push((ct, conn));
    }
    let mut named: Vec<(String, usize, Vec<usize>)> = Vec::new();
    for (k, v) in groups.into_iter().flat_map(|g| g.iter()) {
        let name: String = k.extract()?;
        let (ct, idx): (String, Vec<i64>) = v.extract().map_err(|_| {
            ProblemError::new_err(format!("groups['{name}']: expected (cell type, cell indices)"))
        })?;
        let b = *block_of.get(&ct).ok_or_else(|| {
            ProblemError::new_err(format!("groups['{name}']: no cells of type '{ct}'"))
        })?;
        let n = blocks[b].1.len() / blocks[b].0.n_nodes();
        let mut cells = Vec::with_capacity(idx.len());
        for &i in &idx {
            if i < 0 || i as usize >= n {
                return Err(ProblemError::new_err(format!(
                    "groups['{name}']: cell {i} does not exist; '{ct}' has {n} cells"
                )));
            }
            cells.push(i as usize);
        }
        named.push((name, b, cells));
    }
    let groups: Vec<(&str, usize, Vec<usize>)> =
        named.iter().map(|(n, b, c)| (n.as_str(), *b, c.clone())).collect();
    gradfem::api::mesh_from_arrays(&pts, &blocks, &groups)
        .map_err(|e| MeshError::new_err(format!("mesh from arrays: {e}")))
}

/// The extension module.
#[pymodule]
fn _gradfem(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Problem>()?;
    m.add_class::<dynamics::Dynamics>()?;
    for (name, t) in [
        ("Error", m.py().get_type::<Error>()),
        ("ProblemError", m.py().get_type::<ProblemError>()),
        ("MeshError", m.py().get_type::<MeshError>()),
        ("SolverError", m.py().get_type::<SolverError>()),
    ] {
        m.add(name, t)?;
    }
    Ok(())
}
