//! Particle and rigid-body dynamics from Python: a system of bodies and force laws whose
//! coefficients are numbers or registered parameters, stepped by explicit Euler, RK4 or
//! velocity Verlet, and the vector-Jacobian product of the whole trajectory (the discrete
//! adjoint of the steps) with respect to the parameters and the initial state.
//!
//! States cross as dicts of float64 arrays: `position`, `velocity`, `angular_velocity`
//! (n, 3) and `orientation` (n, 4) (unit quaternions w, x, y, z); a trajectory has a leading
//! axis of N + 1 states.

use std::collections::BTreeMap;
use std::sync::Mutex;

use gradfem::solvers::params::{ParamKind, ParamSpec};
use gradfem_dynamics::prelude::*;
use gradfem_dynamics::system::ParamValues;
use numpy::{IntoPyArray, PyArrayMethods, PyReadonlyArrayDyn};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::{ProblemError, SolverError};

/// The fields of a state and their widths.
const FIELDS: [(&str, usize); 4] =
    [("position", 3), ("velocity", 3), ("orientation", 4), ("angular_velocity", 3)];

/// The integrators by name.
const METHODS: &str = "explicit_euler, rk4, velocity_verlet";

/// The linear functional Σₖ ⟨wₖ, xₖ⟩ of a trajectory: its gradient is the cotangent itself,
/// so the adjoint of the steps turns a cotangent on the trajectory into the VJP.
struct Cotangent {
    /// wₖ per state, flat in the state's layout.
    w: Vec<Vec<f64>>,
}

impl Objective for Cotangent {
    fn term(
        &self,
        k: usize,
        _n_steps: usize,
        x: &[f64],
        _pv: &ParamValues,
        grad: Option<(&mut [f64], &mut [f64])>,
    ) -> f64 {
        let w = &self.w[k];
        if let Some((gx, _)) = grad {
            for (g, v) in gx.iter_mut().zip(w) {
                *g += v;
            }
        }
        w.iter().zip(x).map(|(a, b)| a * b).sum()
    }
}

/// A system of particles and rigid bodies (see the module docs). Any Python thread may use it;
/// calls are serialized, and the stepping runs with the GIL released.
#[pyclass(module = "gradfem._gradfem")]
pub struct Dynamics {
    system: Mutex<System>,
}

fn dyn_err(e: DynamicsError) -> PyErr {
    match &e {
        DynamicsError::Param(_) => ProblemError::new_err(e.to_string()),
        _ => SolverError::new_err(e.to_string()),
    }
}

impl Dynamics {
    fn system(&self) -> std::sync::MutexGuard<'_, System> {
        self.system.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A coefficient: a number, or the name of a registered parameter.
    fn value(&self, v: &Bound<'_, PyAny>, what: &str) -> PyResult<Value> {
        if let Ok(x) = v.extract::<f64>() {
            return Ok(Value::Fixed(x));
        }
        let name: String = v.extract().map_err(|_| {
            ProblemError::new_err(format!(
                "{what}: a number or the name of a registered parameter, not {}",
                v.repr().map_or_else(|_| "this".into(), |r| r.to_string())
            ))
        })?;
        let sys = self.system();
        let id = sys.registry.id(&name).map_err(|_| {
            let known: Vec<&str> = sys.registry.names().collect();
            ProblemError::new_err(format!(
                "{what}: '{name}' is not a registered parameter; registered: {}",
                if known.is_empty() {
                    "none (register it with param)".into()
                } else {
                    known.join(", ")
                }
            ))
        })?;
        Ok(Value::Param(id))
    }

    /// A spring's or damper's end: a body index, or a fixed point (x, y, z).
    fn anchor(&self, a: &Bound<'_, PyAny>, what: &str) -> PyResult<Anchor> {
        if let Ok(i) = a.extract::<usize>() {
            let n = self.system().n_bodies();
            if i >= n {
                return Err(ProblemError::new_err(format!(
                    "{what}: body {i} does not exist; the system has {n} bodies (0 … {})",
                    n.saturating_sub(1)
                )));
            }
            return Ok(Anchor::Body(i));
        }
        let p: [f64; 3] = a.extract().map_err(|_| {
            ProblemError::new_err(format!("{what}: a body index or a point [x, y, z]"))
        })?;
        Ok(Anchor::Fixed(p))
    }

    /// The state of `n` bodies from a dict of arrays (missing fields: rest, identity).
    fn state(&self, d: &Bound<'_, PyDict>, what: &str) -> PyResult<State> {
        let n = self.system().n_bodies();
        let mut s = State::at_rest(n);
        for (key, _) in d.iter() {
            let key: String = key.extract()?;
            if !FIELDS.iter().any(|(f, _)| *f == key) {
                return Err(ProblemError::new_err(format!(
                    "{what}: unknown field '{key}'; a state has position, velocity, orientation and angular_velocity"
                )));
            }
        }
        for (name, width) in FIELDS {
            let Some(v) = d.get_item(name)? else { continue };
            let a = array(&v, &[n, width], &format!("{what}['{name}']"))?;
            for i in 0..n {
                let row = &a[i * width..(i + 1) * width];
                match name {
                    "position" => s.position[i].copy_from_slice(row),
                    "velocity" => s.velocity[i].copy_from_slice(row),
                    "orientation" => s.orientation[i].copy_from_slice(row),
                    _ => s.angular_velocity[i].copy_from_slice(row),
                }
            }
        }
        Ok(s)
    }
}

/// The float64 values of an array of exactly `shape`, C order; an error naming `what`.
fn array(v: &Bound<'_, PyAny>, shape: &[usize], what: &str) -> PyResult<Vec<f64>> {
    let np = v.py().import("numpy")?;
    let a = np.call_method1("asarray", (v,))?;
    let dtype: String = a.getattr("dtype")?.getattr("kind")?.extract()?;
    if !matches!(dtype.as_str(), "f" | "i" | "u") {
        return Err(ProblemError::new_err(format!(
            "{what}: numbers expected, not dtype kind '{dtype}'"
        )));
    }
    let a = np.call_method1("ascontiguousarray", (a, "float64"))?;
    let got: Vec<usize> = a.getattr("shape")?.extract()?;
    if got != shape {
        return Err(ProblemError::new_err(format!("{what}: shape {got:?}, expected {shape:?}")));
    }
    let a: PyReadonlyArrayDyn<'_, f64> = a.extract()?;
    Ok(a.as_slice()?.to_vec())
}

/// Run `f` with the simulation of `method`.
fn with_method<T>(method: &str, f: impl FnOnce(Method) -> Result<T, DynamicsError>) -> PyResult<T> {
    let m = match method {
        "explicit_euler" => Method::Euler,
        "rk4" => Method::Rk4,
        "velocity_verlet" => Method::Verlet,
        other => {
            return Err(ProblemError::new_err(format!(
                "unknown method '{other}'; expected {METHODS}"
            )));
        }
    };
    f(m).map_err(dyn_err)
}

/// An integrator by name.
#[derive(Clone, Copy)]
enum Method {
    Euler,
    Rk4,
    Verlet,
}

/// Run or differentiate with the integrator `$m` bound to the simulation `$sim`.
macro_rules! dispatch {
    ($m:expr, $sys:expr, $dt:expr, $n:expr, |$sim:ident| $body:expr) => {
        match $m {
            Method::Euler => {
                let $sim = Simulation::new($sys, ExplicitEuler, $dt, $n).with_finite_check(true);
                $body
            }
            Method::Rk4 => {
                let $sim = Simulation::new($sys, Rk4, $dt, $n).with_finite_check(true);
                $body
            }
            Method::Verlet => {
                let $sim = Simulation::new($sys, VelocityVerlet, $dt, $n).with_finite_check(true);
                $body
            }
        }
    };
}

fn check_steps(dt: f64, steps: usize) -> PyResult<()> {
    if !(dt.is_finite() && dt > 0.0) {
        return Err(ProblemError::new_err(format!("dt = {dt}: a positive, finite step size")));
    }
    if steps == 0 {
        return Err(ProblemError::new_err("steps = 0: at least one step"));
    }
    Ok(())
}

/// A trajectory as a dict of (N + 1, n, width) arrays.
fn trajectory<'py>(py: Python<'py>, states: &[State]) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    let n = states.first().map_or(0, State::n_bodies);
    for (name, width) in FIELDS {
        let mut flat = Vec::with_capacity(states.len() * n * width);
        for s in states {
            match name {
                "position" => s.position.iter().for_each(|v| flat.extend_from_slice(v)),
                "velocity" => s.velocity.iter().for_each(|v| flat.extend_from_slice(v)),
                "orientation" => s.orientation.iter().for_each(|v| flat.extend_from_slice(v)),
                _ => s.angular_velocity.iter().for_each(|v| flat.extend_from_slice(v)),
            }
        }
        let a = flat.into_pyarray(py).reshape([states.len(), n, width])?;
        out.set_item(name, a)?;
    }
    Ok(out)
}

/// One state as a dict of (n, width) arrays.
fn state_dict<'py>(py: Python<'py>, s: &State) -> PyResult<Bound<'py, PyDict>> {
    let t = trajectory(py, std::slice::from_ref(s))?;
    let out = PyDict::new(py);
    for (name, _) in FIELDS {
        let a = t.get_item(name)?.expect("set above");
        out.set_item(name, a.get_item(0)?)?;
    }
    Ok(out)
}

#[pymethods]
impl Dynamics {
    /// An empty system; `gravity` is the acceleration (x, y, z) added to every body.
    #[new]
    #[pyo3(signature = (gravity = [0.0, 0.0, 0.0]))]
    fn new(gravity: [f64; 3]) -> Self {
        let mut s = System::new();
        s.gravity = gravity;
        Dynamics { system: Mutex::new(s) }
    }

    /// Register a scalar parameter `name` (dotted names such as `material.youngs_modulus`)
    /// with its value and optional bounds; coefficients then name it.
    #[pyo3(signature = (name, value, lower = None, upper = None))]
    fn param(
        &self,
        name: &str,
        value: f64,
        lower: Option<f64>,
        upper: Option<f64>,
    ) -> PyResult<()> {
        let spec = ParamSpec::scalar(name, value).with_bounds(lower, upper);
        self.system().param(spec).map_err(|e| ProblemError::new_err(e.to_string()))?;
        Ok(())
    }

    /// A particle of mass `mass` (a number or a parameter name); returns its index.
    fn add_particle(&self, mass: &Bound<'_, PyAny>) -> PyResult<usize> {
        let m = self.value(mass, "mass")?;
        Ok(self.system().add_body(m))
    }

    /// A rigid body of mass `mass` and principal moments of inertia `inertia` (three numbers or
    /// parameter names); returns its index.
    fn add_rigid_body(
        &self,
        mass: &Bound<'_, PyAny>,
        inertia: Vec<Bound<'_, PyAny>>,
    ) -> PyResult<usize> {
        if inertia.len() != 3 {
            return Err(ProblemError::new_err(format!(
                "inertia: three principal moments, given {}",
                inertia.len()
            )));
        }
        let m = self.value(mass, "mass")?;
        let i = [
            self.value(&inertia[0], "inertia[0]")?,
            self.value(&inertia[1], "inertia[1]")?,
            self.value(&inertia[2], "inertia[2]")?,
        ];
        Ok(self.system().add_rigid_body(m, i))
    }

    /// A linear spring of stiffness `k` and rest length `rest_length` between `a` and `b`
    /// (body indices or fixed points [x, y, z]).
    fn add_spring(
        &self,
        a: &Bound<'_, PyAny>,
        b: &Bound<'_, PyAny>,
        k: &Bound<'_, PyAny>,
        rest_length: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let spring = Spring {
            a: self.anchor(a, "a")?,
            b: self.anchor(b, "b")?,
            k: self.value(k, "k")?,
            rest_length: self.value(rest_length, "rest_length")?,
        };
        self.system().add_force(spring);
        Ok(())
    }

    /// A linear damper of coefficient `c` between `a` and `b` (body indices or points at rest).
    fn add_damper(
        &self,
        a: &Bound<'_, PyAny>,
        b: &Bound<'_, PyAny>,
        c: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let damper =
            Damper { a: self.anchor(a, "a")?, b: self.anchor(b, "b")?, c: self.value(c, "c")? };
        self.system().add_force(damper);
        Ok(())
    }

    /// Soft contact of spheres centred on bodies (`spheres`: (body, radius) pairs) with the
    /// plane n · r = `height`, with regularized Coulomb friction.
    #[pyo3(signature = (spheres, normal, height, stiffness, friction, smoothing, slip_velocity = 1e-3))]
    #[allow(clippy::too_many_arguments)]
    fn add_ground(
        &self,
        spheres: Vec<(usize, f64)>,
        normal: [f64; 3],
        height: f64,
        stiffness: &Bound<'_, PyAny>,
        friction: &Bound<'_, PyAny>,
        smoothing: &Bound<'_, PyAny>,
        slip_velocity: f64,
    ) -> PyResult<()> {
        let n = self.system().n_bodies();
        if let Some((b, _)) = spheres.iter().find(|(b, _)| *b >= n) {
            return Err(ProblemError::new_err(format!(
                "spheres: body {b} does not exist ({n} bodies)"
            )));
        }
        let ground = GroundContact {
            bodies: spheres,
            normal,
            height,
            stiffness: self.value(stiffness, "stiffness")?,
            friction: self.value(friction, "friction")?,
            smoothing: self.value(smoothing, "smoothing")?,
            slip_velocity,
            points: Vec::new(),
        };
        self.system().add_force(ground);
        Ok(())
    }

    /// Soft contact between spheres centred on bodies (`spheres`: (body, radius) pairs), with
    /// regularized Coulomb friction.
    #[pyo3(signature = (spheres, stiffness, friction, smoothing, slip_velocity = 1e-3))]
    fn add_sphere_contact(
        &self,
        spheres: Vec<(usize, f64)>,
        stiffness: &Bound<'_, PyAny>,
        friction: &Bound<'_, PyAny>,
        smoothing: &Bound<'_, PyAny>,
        slip_velocity: f64,
    ) -> PyResult<()> {
        let n = self.system().n_bodies();
        if let Some((b, _)) = spheres.iter().find(|(b, _)| *b >= n) {
            return Err(ProblemError::new_err(format!(
                "spheres: body {b} does not exist ({n} bodies)"
            )));
        }
        let contact = SphereContact {
            spheres,
            stiffness: self.value(stiffness, "stiffness")?,
            friction: self.value(friction, "friction")?,
            smoothing: self.value(smoothing, "smoothing")?,
            slip_velocity,
        };
        self.system().add_force(contact);
        Ok(())
    }

    /// Number of bodies.
    #[getter]
    fn n_bodies(&self) -> usize {
        self.system().n_bodies()
    }

    /// The registered parameters and their values.
    #[getter]
    fn parameters(&self) -> BTreeMap<String, f64> {
        let sys = self.system();
        sys.registry.iter().map(|(_, s)| (s.name.clone(), s.values[0])).collect()
    }

    /// Set registered parameters by name (within their bounds).
    fn set_parameters(&self, values: BTreeMap<String, f64>) -> PyResult<()> {
        let mut sys = self.system();
        for (name, v) in values {
            let id = sys.registry.id(&name).map_err(|e| ProblemError::new_err(e.to_string()))?;
            debug_assert!(matches!(sys.registry.get(id).kind, ParamKind::Scalar));
            sys.registry.set_values(id, &[v]).map_err(|e| ProblemError::new_err(e.to_string()))?;
        }
        Ok(())
    }

    /// Step `steps` times by `dt` from `state0` (a dict of (n, 3)/(n, 4) arrays; missing
    /// fields at rest) with `method` (explicit_euler, rk4, velocity_verlet); returns the
    /// trajectory, each field an (N + 1, n, width) array.
    #[pyo3(signature = (state0, dt, steps, method = "rk4"))]
    fn integrate<'py>(
        &self,
        py: Python<'py>,
        state0: &Bound<'py, PyDict>,
        dt: f64,
        steps: usize,
        method: &str,
    ) -> PyResult<Bound<'py, PyDict>> {
        check_steps(dt, steps)?;
        let x0 = self.state(state0, "state0")?;
        let states = crate::interruptible(py, || {
            let sys = self.system();
            with_method(method, |m| dispatch!(m, &sys, dt, steps, |sim| sim.run(&x0)))
        })??;
        trajectory(py, &states)
    }

    /// The vector-Jacobian product of the trajectory of [`integrate`](Self::integrate): for a
    /// cotangent on it (a dict of (N + 1, n, width) arrays; missing fields zero), the gradient
    /// of Σₖ ⟨cotangentₖ, xₖ⟩ by every registered parameter and by the initial state, by the
    /// discrete adjoint of the steps. Returns (parameters: dict, initial state: dict).
    #[pyo3(signature = (state0, dt, steps, cotangent, method = "rk4"))]
    fn vjp<'py>(
        &self,
        py: Python<'py>,
        state0: &Bound<'py, PyDict>,
        dt: f64,
        steps: usize,
        cotangent: &Bound<'py, PyDict>,
        method: &str,
    ) -> PyResult<(BTreeMap<String, f64>, Bound<'py, PyDict>)> {
        check_steps(dt, steps)?;
        let x0 = self.state(state0, "state0")?;
        let n = self.system().n_bodies();
        let mut w = vec![State::zeros(n); steps + 1];
        for (key, _) in cotangent.iter() {
            let key: String = key.extract()?;
            if !FIELDS.iter().any(|(f, _)| *f == key) {
                return Err(ProblemError::new_err(format!(
                    "cotangent: unknown field '{key}'; a trajectory has position, velocity, orientation and angular_velocity"
                )));
            }
        }
        for (name, width) in FIELDS {
            let Some(v) = cotangent.get_item(name)? else { continue };
            let a = array(&v, &[steps + 1, n, width], &format!("cotangent['{name}']"))?;
            for (k, s) in w.iter_mut().enumerate() {
                for i in 0..n {
                    let row = &a[(k * n + i) * width..(k * n + i + 1) * width];
                    match name {
                        "position" => s.position[i].copy_from_slice(row),
                        "velocity" => s.velocity[i].copy_from_slice(row),
                        "orientation" => s.orientation[i].copy_from_slice(row),
                        _ => s.angular_velocity[i].copy_from_slice(row),
                    }
                }
            }
        }
        let obj = Cotangent { w: w.iter().map(State::to_flat).collect() };
        let result = crate::interruptible(py, || {
            let sys = self.system();
            with_method(method, |m| {
                dispatch!(m, &sys, dt, steps, |sim| sim.gradient(&x0, &obj, Memory::StoreAll))
            })
        })??;
        let sys = self.system();
        let params =
            sys.registry.iter().map(|(id, s)| (s.name.clone(), result.params.get(id)[0])).collect();
        Ok((params, state_dict(py, &result.initial_state)?))
    }

    fn __repr__(&self) -> String {
        let sys = self.system();
        format!(
            "Dynamics({} bodies, parameters: {})",
            sys.n_bodies(),
            sys.registry.names().collect::<Vec<_>>().join(", ")
        )
    }
}
