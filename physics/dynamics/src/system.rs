//! Bodies, forces, parameters, and the equations of motion with their vector-Jacobian product.
//!
//! Equations of motion for body i (flat state layout in [`crate::state`]):
//!
//! - ṙ_i = v_i
//! - v̇_i = a_i = F_i(x, p, t) / m_i + g, with F_i the sum of all [`ForceLaw`]s on body i;
//! - q̇_i = ½ (0, ω_i) ⊗ q_i (quaternion kinematics with ω in the world frame);
//! - rigid bodies ([`System::add_rigid_body`], principal moments I = diag(I₁, I₂, I₃) in the body
//!   frame given by R(q)): Euler's equations in the body frame,
//!   ω_b = Rᵀ ω, τ_b = Rᵀ τ, α_b = I⁻¹ (τ_b − ω_b × I ω_b), ω̇_i = R α_b,
//!   with τ_i the sum of the laws' torques about the centre of mass (contact friction applies
//!   one). Particles ([`System::add_body`]) have no inertia: ω̇_i = 0 and torques are ignored.
//!
//! Parameters are scalars in a [`ParamRegistry`] (`spring.k`, `contact.friction`,
//! `body.3.mass`, any dotted name); a coefficient is a [`Value`], either a fixed number (no
//! gradient) or a registered parameter (gradient returned). During a simulation the registry's
//! values are flattened into `p` (registration order, [`ParamVector::all`]); the adjoint
//! returns ∂J/∂p as a [`Gradient`] in the registry's shapes.
//!
//! Each force law computes its force and the vector-Jacobian product (VJP) of that force. The
//! built-in laws are written once, generic over a [`DualNum`] scalar, and their VJPs come from
//! forward-mode dual numbers over the few inputs of one interaction ([`local_vjp`]: one
//! `Dual64` pass per input, at most 21 inputs), so the VJP is exact to rounding and never
//! drifts from the forward code. The rest of the chain (a = F/m, quaternion kinematics) is
//! differentiated by hand.

use gradfem_solvers::params::{
    Gradient, ParamError, ParamId, ParamRegistry, ParamSpec, ParamVector,
};
use num_dual::{Dual64, DualNum};

use crate::error::DynamicsError;
use crate::state::Layout;

/// A coefficient: a fixed number (receives no gradient) or a registered scalar parameter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    /// A constant.
    Fixed(f64),
    /// A registered scalar parameter.
    Param(ParamId),
}

impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Fixed(v)
    }
}

/// Everything a force law sees besides the state: parameter values `p` (flattened registry),
/// the time `t`, and the layout of the state.
#[derive(Debug, Clone, Copy)]
pub struct Ctx<'a> {
    /// Flattened parameter values (registration order).
    pub p: &'a [f64],
    /// Offset in `p` of each parameter, indexed by `ParamId.0`.
    pub offsets: &'a [usize],
    /// Time at which the forces are evaluated.
    pub t: f64,
    /// Layout of the flat state.
    pub layout: Layout,
}

impl Ctx<'_> {
    /// Current value of a coefficient.
    pub fn value(&self, v: Value) -> f64 {
        match v {
            Value::Fixed(x) => x,
            Value::Param(id) => self.p[self.offsets[id.0]],
        }
    }

    /// Adds `g` = ∂J/∂v into `p_bar` if `v` is a parameter (nothing for a fixed value).
    pub fn add_bar(&self, v: Value, p_bar: &mut [f64], g: f64) {
        if let Value::Param(id) = v {
            p_bar[self.offsets[id.0]] += g;
        }
    }
}

/// A force law: adds forces F_i on bodies, and the VJP of those forces.
///
/// This is also the way to add a user force: implement this trait, or use
/// [`crate::forces::UserForce`] built from two closures.
pub trait ForceLaw: Send + Sync {
    /// Adds this law's force on each body into `forces` (n × 3) at flat state `x`.
    fn accumulate(&self, x: &[f64], ctx: &Ctx<'_>, forces: &mut [[f64; 3]]);

    /// Given F̄ (n × 3, the adjoint of the force on each body), adds (∂F/∂x)ᵀ F̄ into `x_bar`
    /// and (∂F/∂p)ᵀ F̄ into `p_bar`.
    fn vjp(
        &self,
        x: &[f64],
        ctx: &Ctx<'_>,
        f_bar: &[[f64; 3]],
        x_bar: &mut [f64],
        p_bar: &mut [f64],
    );

    /// Adds this law's torque about each body's centre of mass into `torques` (n × 3). The
    /// default applies no torque.
    fn accumulate_torques(&self, _x: &[f64], _ctx: &Ctx<'_>, _torques: &mut [[f64; 3]]) {}

    /// VJP of [`ForceLaw::accumulate_torques`] given τ̄ (n × 3). The default (no torque) adds
    /// nothing.
    fn torque_vjp(
        &self,
        _x: &[f64],
        _ctx: &Ctx<'_>,
        _tau_bar: &[[f64; 3]],
        _x_bar: &mut [f64],
        _p_bar: &mut [f64],
    ) {
    }
}

/// A body: its mass, fixed or a registered parameter such as `body.3.mass`, and for a rigid
/// body its principal moments of inertia.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Body {
    /// Mass m_i > 0.
    pub mass: Value,
    /// Principal moments (I₁, I₂, I₃) > 0 about the body axes given by the orientation; `None`
    /// for a particle (no rotational dynamics: ω stays constant).
    pub inertia: Option<[Value; 3]>,
}

/// A system of bodies, force laws, gravity, and the parameter registry.
#[derive(Default)]
pub struct System {
    /// The parameters; only those registered here receive gradients.
    pub registry: ParamRegistry,
    bodies: Vec<Body>,
    forces: Vec<Box<dyn ForceLaw>>,
    /// Gravitational acceleration g (added to every body's acceleration).
    pub gravity: [f64; 3],
}

/// Flattened parameter values and per-parameter offsets, taken from a registry at the start of
/// a simulation.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamValues {
    /// Flattened values, registration order.
    pub p: Vec<f64>,
    /// Offset of each parameter in `p`, indexed by `ParamId.0`.
    pub offsets: Vec<usize>,
}

impl ParamValues {
    /// Flattens the registry.
    pub fn from_registry(reg: &ParamRegistry) -> Self {
        let pv = ParamVector::all(reg);
        let offsets = reg.iter().map(|(id, _)| pv.range(id).map_or(0, |r| r.start)).collect();
        Self { p: pv.gather(reg), offsets }
    }

    /// Reshapes a flat ∂J/∂p into the registry's [`Gradient`].
    pub fn to_gradient(&self, reg: &ParamRegistry, p_bar: &[f64]) -> Gradient {
        let mut g = Gradient::zeros(reg);
        for (id, s) in reg.iter() {
            let o = self.offsets[id.0];
            g.get_mut(id).copy_from_slice(&p_bar[o..o + s.values.len()]);
        }
        g
    }
}

impl System {
    /// An empty system without gravity.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a scalar parameter and returns it as a [`Value`] to use in bodies and forces.
    /// Bounds go with the spec (e.g. friction in `[0, 1]`).
    pub fn param(&mut self, spec: ParamSpec) -> Result<Value, ParamError> {
        assert_eq!(spec.values.len(), 1, "System::param: `{}` must be a scalar", spec.name);
        Ok(Value::Param(self.registry.register(spec)?))
    }

    /// Adds a body; returns its index.
    pub fn add_body(&mut self, mass: impl Into<Value>) -> usize {
        self.bodies.push(Body { mass: mass.into(), inertia: None });
        self.bodies.len() - 1
    }

    /// Adds a rigid body with principal moments of inertia (body axes = the orientation's
    /// axes); returns its index. A uniform sphere of radius R has I = 2/5 m R²; a box of sides
    /// a, b, c has I₁ = m (b² + c²)/12 and so on.
    pub fn add_rigid_body(&mut self, mass: impl Into<Value>, inertia: [Value; 3]) -> usize {
        self.bodies.push(Body { mass: mass.into(), inertia: Some(inertia) });
        self.bodies.len() - 1
    }

    /// Adds a force law.
    pub fn add_force(&mut self, f: impl ForceLaw + 'static) {
        self.forces.push(Box::new(f));
    }

    /// The bodies.
    pub fn bodies(&self) -> &[Body] {
        &self.bodies
    }

    /// Number of bodies.
    pub fn n_bodies(&self) -> usize {
        self.bodies.len()
    }

    /// Layout of the flat state.
    pub fn layout(&self) -> Layout {
        Layout::new(self.bodies.len())
    }

    /// Current parameter values, flattened.
    pub fn param_values(&self) -> ParamValues {
        ParamValues::from_registry(&self.registry)
    }

    /// Checks that every mass and moment of inertia is positive at these parameter values.
    pub fn check(&self, pv: &ParamValues) -> Result<(), DynamicsError> {
        let ctx = self.ctx(pv, 0.0);
        for (i, b) in self.bodies.iter().enumerate() {
            let m = ctx.value(b.mass);
            let inertia = b.inertia.map(|v| v.map(|x| ctx.value(x)));
            let bad_inertia = inertia.is_some_and(|v| v.iter().any(|x| x.is_nan() || *x <= 0.0));
            if m.is_nan() || m <= 0.0 || bad_inertia {
                return Err(DynamicsError::NonPositiveMass { body: i, mass: m, inertia });
            }
        }
        Ok(())
    }

    /// The context for force laws at time `t`.
    pub fn ctx<'a>(&self, pv: &'a ParamValues, t: f64) -> Ctx<'a> {
        Ctx { p: &pv.p, offsets: &pv.offsets, t, layout: self.layout() }
    }

    /// Total force on each body, F_i = Σ_laws F_i.
    pub fn forces(&self, x: &[f64], ctx: &Ctx<'_>) -> Vec<[f64; 3]> {
        let mut f = vec![[0.0; 3]; self.bodies.len()];
        for law in &self.forces {
            law.accumulate(x, ctx, &mut f);
        }
        f
    }

    /// Total torque on each body about its centre, τ_i = Σ_laws τ_i.
    pub fn torques(&self, x: &[f64], ctx: &Ctx<'_>) -> Vec<[f64; 3]> {
        let mut t = vec![[0.0; 3]; self.bodies.len()];
        for law in &self.forces {
            law.accumulate_torques(x, ctx, &mut t);
        }
        t
    }

    fn any_rigid(&self) -> bool {
        self.bodies.iter().any(|b| b.inertia.is_some())
    }

    /// Accelerations per body, `[a_x, a_y, a_z, α_x, α_y, α_z]`: linear a_i = F_i / m_i + g and
    /// angular α_i = ω̇_i from Euler's equations (module docs; 0 for particles).
    pub fn accelerations(&self, x: &[f64], ctx: &Ctx<'_>) -> Vec<[f64; 6]> {
        let f = self.forces(x, ctx);
        let tau = if self.any_rigid() { self.torques(x, ctx) } else { Vec::new() };
        let l = self.layout();
        let mut a = vec![[0.0; 6]; l.n];
        for (i, b) in self.bodies.iter().enumerate() {
            let m = ctx.value(b.mass);
            for d in 0..3 {
                a[i][d] = f[i][d] / m + self.gravity[d];
            }
            if let Some(inertia) = b.inertia {
                let alpha = angular_acceleration(
                    &quat_of(x, l.q(i)),
                    &l.get3(x, l.w(i)),
                    &tau[i],
                    &inertia.map(|v| ctx.value(v)),
                );
                a[i][3..].copy_from_slice(&alpha);
            }
        }
        a
    }

    /// VJP of [`System::accelerations`]: with F̄_i = ā_i / m_i, adds Σ_laws (∂F/∂x)ᵀ F̄ into
    /// `x_bar`, (∂F/∂p)ᵀ F̄ into `p_bar`, and m̄_i = −ā_i · F_i / m_i² for parametric masses;
    /// for rigid bodies the VJP of Euler's equations (dual numbers over q, ω, τ, I) gives
    /// q̄, ω̄, Ī and τ̄, and τ̄ goes through the laws' torque VJPs.
    pub fn accelerations_vjp(
        &self,
        x: &[f64],
        ctx: &Ctx<'_>,
        a_bar: &[[f64; 6]],
        x_bar: &mut [f64],
        p_bar: &mut [f64],
    ) {
        let l = self.layout();
        let any_param_mass = self.bodies.iter().any(|b| matches!(b.mass, Value::Param(_)));
        let f = if any_param_mass { self.forces(x, ctx) } else { Vec::new() };
        let any_rigid = self.any_rigid();
        let tau = if any_rigid { self.torques(x, ctx) } else { Vec::new() };
        let mut f_bar = vec![[0.0; 3]; l.n];
        let mut tau_bar = vec![[0.0; 3]; l.n];
        for (i, b) in self.bodies.iter().enumerate() {
            let m = ctx.value(b.mass);
            for d in 0..3 {
                f_bar[i][d] = a_bar[i][d] / m;
            }
            if any_param_mass {
                let dot: f64 = (0..3).map(|d| a_bar[i][d] * f[i][d]).sum();
                ctx.add_bar(b.mass, p_bar, -dot / (m * m));
            }
            if let Some(inertia) = b.inertia {
                let q = quat_of(x, l.q(i));
                let w = l.get3(x, l.w(i));
                let iv = inertia.map(|v| ctx.value(v));
                let t = tau[i];
                let inp = [
                    q[0], q[1], q[2], q[3], w[0], w[1], w[2], t[0], t[1], t[2], iv[0], iv[1], iv[2],
                ];
                let ab = [a_bar[i][3], a_bar[i][4], a_bar[i][5]];
                let g = local_vjp(inp, &ab, |z| {
                    angular_acceleration(
                        &[z[0], z[1], z[2], z[3]],
                        &[z[4], z[5], z[6]],
                        &[z[7], z[8], z[9]],
                        &[z[10], z[11], z[12]],
                    )
                });
                (0..4).for_each(|d| x_bar[l.q(i) + d] += g[d]);
                (0..3).for_each(|d| x_bar[l.w(i) + d] += g[4 + d]);
                tau_bar[i] = [g[7], g[8], g[9]];
                (0..3).for_each(|d| ctx.add_bar(inertia[d], p_bar, g[10 + d]));
            }
        }
        for law in &self.forces {
            law.vjp(x, ctx, &f_bar, x_bar, p_bar);
            if any_rigid {
                law.torque_vjp(x, ctx, &tau_bar, x_bar, p_bar);
            }
        }
    }

    /// Right-hand side ẋ = f(x, p, t) of the flat state (formulas in the module docs).
    pub fn rhs(&self, x: &[f64], ctx: &Ctx<'_>) -> Vec<f64> {
        let l = self.layout();
        let mut dx = vec![0.0; l.len()];
        let a = self.accelerations(x, ctx);
        for i in 0..l.n {
            for d in 0..3 {
                dx[l.r(i) + d] = x[l.v(i) + d];
                dx[l.v(i) + d] = a[i][d];
                dx[l.w(i) + d] = a[i][3 + d];
            }
            let qd = quat_rate(&l.get3(x, l.w(i)), &quat_of(x, l.q(i)));
            dx[l.q(i)..l.q(i) + 4].copy_from_slice(&qd);
        }
        dx
    }

    /// VJP of [`System::rhs`]: adds (∂f/∂x)ᵀ f̄ into `x_bar` and (∂f/∂p)ᵀ f̄ into `p_bar`.
    pub fn rhs_vjp(
        &self,
        x: &[f64],
        ctx: &Ctx<'_>,
        f_bar: &[f64],
        x_bar: &mut [f64],
        p_bar: &mut [f64],
    ) {
        let l = self.layout();
        let mut a_bar = vec![[0.0; 6]; l.n];
        for i in 0..l.n {
            for d in 0..3 {
                x_bar[l.v(i) + d] += f_bar[l.r(i) + d];
                a_bar[i][d] = f_bar[l.v(i) + d];
                a_bar[i][3 + d] = f_bar[l.w(i) + d];
            }
            let (w_bar, q_bar) =
                quat_rate_vjp(&l.get3(x, l.w(i)), &quat_of(x, l.q(i)), &quat_of(f_bar, l.q(i)));
            for d in 0..3 {
                x_bar[l.w(i) + d] += w_bar[d];
            }
            for d in 0..4 {
                x_bar[l.q(i) + d] += q_bar[d];
            }
        }
        self.accelerations_vjp(x, ctx, &a_bar, x_bar, p_bar);
    }

    /// Normalizes every quaternion of the flat state in place: q ← u / |u|.
    pub fn normalize_quaternions(&self, x: &mut [f64]) {
        let l = self.layout();
        for i in 0..l.n {
            let o = l.q(i);
            let nrm = x[o..o + 4].iter().map(|v| v * v).sum::<f64>().sqrt();
            x[o..o + 4].iter_mut().for_each(|v| *v /= nrm);
        }
    }

    /// VJP of [`System::normalize_quaternions`] at the unnormalized `u`: replaces the
    /// quaternion parts of `bar` (= q̄) by ū = (q̄ − q (q · q̄)) / |u|, q = u/|u|.
    pub fn normalize_quaternions_vjp(&self, u: &[f64], bar: &mut [f64]) {
        let l = self.layout();
        for i in 0..l.n {
            let o = l.q(i);
            let nrm = u[o..o + 4].iter().map(|v| v * v).sum::<f64>().sqrt();
            let q: Vec<f64> = u[o..o + 4].iter().map(|v| v / nrm).collect();
            let qq: f64 = (0..4).map(|d| q[d] * bar[o + d]).sum();
            for d in 0..4 {
                bar[o + d] = (bar[o + d] - q[d] * qq) / nrm;
            }
        }
    }
}

fn quat_of(x: &[f64], o: usize) -> [f64; 4] {
    [x[o], x[o + 1], x[o + 2], x[o + 3]]
}

/// q̇ = ½ (0, ω) ⊗ q = ½ (−ω·v, w ω + ω × v) for q = (w, v). Generic over the scalar.
pub fn quat_rate<T: DualNum<Primitive = f64> + Copy>(w: &[T; 3], q: &[T; 4]) -> [T; 4] {
    let v = [q[1], q[2], q[3]];
    let dot = w[0] * v[0] + w[1] * v[1] + w[2] * v[2];
    let c = [w[1] * v[2] - w[2] * v[1], w[2] * v[0] - w[0] * v[2], w[0] * v[1] - w[1] * v[0]];
    [-dot * 0.5, (w[0] * q[0] + c[0]) * 0.5, (w[1] * q[0] + c[1]) * 0.5, (w[2] * q[0] + c[2]) * 0.5]
}

/// Rotation matrix R(q/|q|) (rows), generic over the scalar; the normalization makes the
/// unnormalized intermediate stages of a Runge–Kutta step well defined.
pub fn rotation_matrix<T: DualNum<Primitive = f64> + Copy>(q: &[T; 4]) -> [[T; 3]; 3] {
    let n = (q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]).sqrt();
    let [w, x, y, z] = [q[0] / n, q[1] / n, q[2] / n, q[3] / n];
    let two = 2.0;
    [
        [-(y * y + z * z) * two + 1.0, (x * y - w * z) * two, (x * z + w * y) * two],
        [(x * y + w * z) * two, -(x * x + z * z) * two + 1.0, (y * z - w * x) * two],
        [(x * z - w * y) * two, (y * z + w * x) * two, -(x * x + y * y) * two + 1.0],
    ]
}

/// Angular acceleration of a rigid body, ω̇ = R I⁻¹ (τ_b − ω_b × I ω_b) with ω_b = Rᵀ ω,
/// τ_b = Rᵀ τ, I = diag(inertia), R = R(q); generic over the scalar.
pub fn angular_acceleration<T: DualNum<Primitive = f64> + Copy>(
    q: &[T; 4],
    w: &[T; 3],
    tau: &[T; 3],
    inertia: &[T; 3],
) -> [T; 3] {
    let r = rotation_matrix(q);
    let rt = |v: &[T; 3]| -> [T; 3] {
        std::array::from_fn(|a| r[0][a] * v[0] + r[1][a] * v[1] + r[2][a] * v[2])
    };
    let (wb, tb) = (rt(w), rt(tau));
    let l = [inertia[0] * wb[0], inertia[1] * wb[1], inertia[2] * wb[2]];
    let gyro =
        [wb[1] * l[2] - wb[2] * l[1], wb[2] * l[0] - wb[0] * l[2], wb[0] * l[1] - wb[1] * l[0]];
    let ab: [T; 3] = std::array::from_fn(|a| (tb[a] - gyro[a]) / inertia[a]);
    std::array::from_fn(|a| r[a][0] * ab[0] + r[a][1] * ab[1] + r[a][2] * ab[2])
}

/// VJP of [`quat_rate`] by dual numbers: returns (ω̄, q̄).
pub(crate) fn quat_rate_vjp(w: &[f64; 3], q: &[f64; 4], qd_bar: &[f64; 4]) -> ([f64; 3], [f64; 4]) {
    let inp = [w[0], w[1], w[2], q[0], q[1], q[2], q[3]];
    let g = local_vjp(inp, qd_bar, |z| quat_rate(&[z[0], z[1], z[2]], &[z[3], z[4], z[5], z[6]]));
    ([g[0], g[1], g[2]], [g[3], g[4], g[5], g[6]])
}

/// Vector-Jacobian product of a small function f: ℝ^NI → ℝ^NO by forward-mode dual numbers:
/// one `Dual64` evaluation per input j gives column ∂f/∂x_j, and x̄_j = Σ_o ȳ_o ∂f_o/∂x_j.
/// Exact to rounding; costs NI evaluations, which is cheap for the few inputs of one
/// interaction (hand-written reverse code would be faster but is one more thing to get wrong).
pub fn local_vjp<const NI: usize, const NO: usize>(
    x: [f64; NI],
    y_bar: &[f64; NO],
    f: impl Fn(&[Dual64; NI]) -> [Dual64; NO],
) -> [f64; NI] {
    let mut g = [0.0; NI];
    for (j, gj) in g.iter_mut().enumerate() {
        let xd: [Dual64; NI] =
            std::array::from_fn(|i| Dual64::new(x[i], if i == j { 1.0 } else { 0.0 }));
        let y = f(&xd);
        *gj = (0..NO).map(|o| y_bar[o] * y[o].eps).sum();
    }
    g
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forces::{Anchor, ContactPoint, Damper, GroundContact, SphereContact, Spring};

    fn system() -> System {
        let mut sys = System::new();
        sys.gravity = [0.1, -0.2, -9.81];
        let m = sys.param(ParamSpec::scalar("body.1.mass", 1.7)).unwrap();
        let k = sys.param(ParamSpec::scalar("spring.k", 5.0)).unwrap();
        let c = sys.param(ParamSpec::scalar("damper.c", 0.4)).unwrap();
        let kc = sys.param(ParamSpec::scalar("contact.stiffness", 100.0)).unwrap();
        let mu = sys.param(ParamSpec::scalar("contact.friction", 0.5)).unwrap();
        let eps = sys.param(ParamSpec::scalar("contact.smoothing", 0.05)).unwrap();
        let i1 = sys.param(ParamSpec::scalar("body.1.inertia.z", 0.3)).unwrap();
        sys.add_rigid_body(1.0, [0.1.into(), 0.2.into(), 0.25.into()]);
        sys.add_rigid_body(m, [0.2.into(), 0.15.into(), i1]);
        let a = Anchor::Body(0);
        sys.add_force(Spring { a, b: Anchor::Body(1), k, rest_length: 0.8.into() });
        sys.add_force(Spring {
            a: Anchor::Body(1),
            b: Anchor::Fixed([0.0, 1.0, 1.0]),
            k,
            rest_length: 0.2.into(),
        });
        sys.add_force(Damper { a, b: Anchor::Body(1), c });
        // Centre spheres and spheres at body-frame offsets (orientation enters their VJP).
        let pts = [
            ContactPoint { body: 0, offset: [0.1, -0.05, -0.08], radius: 0.02 },
            ContactPoint { body: 1, offset: [-0.12, 0.07, -0.1], radius: 0.0 },
            ContactPoint { body: 1, offset: [0.04, 0.09, 0.15], radius: 0.01 },
        ];
        sys.add_force(
            GroundContact::ground(vec![(0, 0.1), (1, 0.2)], kc, mu, eps).with_points(pts),
        );
        // The two bodies overlap by δ ≈ 0.04 (spins and torques enter the VJP).
        sys.add_force(SphereContact {
            spheres: vec![(0, 0.2), (1, 0.18)],
            stiffness: kc,
            friction: mu,
            smoothing: eps,
            slip_velocity: 0.1,
        });
        sys
    }

    fn state() -> Vec<f64> {
        (0..26).map(|i| 0.1 + 0.37 * ((i * 7 % 11) as f64) / 11.0 - 0.05 * (i % 3) as f64).collect()
    }

    /// ⟨f̄, J δz⟩ by central differences equals ⟨VJP(f̄), δz⟩ for the whole right-hand side.
    #[test]
    fn rhs_vjp_matches_finite_differences() {
        let sys = system();
        let pv = sys.param_values();
        let x = state();
        let f_bar: Vec<f64> = (0..26).map(|i| ((i * 5 % 7) as f64 - 3.0) / 3.0).collect();
        let mut x_bar = vec![0.0; 26];
        let mut p_bar = vec![0.0; pv.p.len()];
        sys.rhs_vjp(&x, &sys.ctx(&pv, 0.0), &f_bar, &mut x_bar, &mut p_bar);
        let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(p, q)| p * q).sum::<f64>();
        for j in 0..26 + pv.p.len() {
            let d = 1e-6;
            let eval = |s: f64| {
                let (mut xx, mut pp) = (x.clone(), pv.clone());
                if j < 26 {
                    xx[j] += s
                } else {
                    pp.p[j - 26] += s
                }
                dot(&f_bar, &sys.rhs(&xx, &sys.ctx(&pp, 0.0)))
            };
            let fd = (eval(d) - eval(-d)) / (2.0 * d);
            let ad = if j < 26 { x_bar[j] } else { p_bar[j - 26] };
            assert!((fd - ad).abs() <= 1e-6 * (1.0 + ad.abs()), "input {j}: VJP {ad} vs FD {fd}");
        }
    }

    #[test]
    fn normalization_vjp_matches_finite_differences() {
        let sys = system();
        let u = state();
        let bar: Vec<f64> = (0..26).map(|i| (i as f64).sin()).collect();
        let mut ub = bar.clone();
        sys.normalize_quaternions_vjp(&u, &mut ub);
        let j = |v: &[f64]| {
            let mut w = v.to_vec();
            sys.normalize_quaternions(&mut w);
            w.iter().zip(&bar).map(|(a, b)| a * b).sum::<f64>()
        };
        for k in 0..26 {
            let (mut up, mut um) = (u.clone(), u.clone());
            up[k] += 1e-6;
            um[k] -= 1e-6;
            let fd = (j(&up) - j(&um)) / 2e-6;
            assert!((fd - ub[k]).abs() < 1e-8, "component {k}: {} vs FD {fd}", ub[k]);
        }
    }

    #[test]
    fn unknown_parameter_is_an_error_and_bounds_hold() {
        let mut sys = system();
        let err = sys.registry.id("contact.frction").unwrap_err();
        assert!(err.to_string().contains("contact.friction"), "{err}");
        let mu = sys
            .param(ParamSpec::scalar("contact2.friction", 0.5).with_bounds(Some(0.0), Some(1.0)))
            .unwrap();
        let Value::Param(id) = mu else { panic!("expected a parameter") };
        assert!(sys.registry.set_values(id, &[1.5]).is_err());
    }

    #[test]
    fn non_positive_mass_is_reported() {
        let mut sys = system();
        let id = sys.registry.id("body.1.mass").unwrap();
        sys.registry.set_values(id, &[0.0]).unwrap();
        let err = sys.check(&sys.param_values()).unwrap_err();
        assert!(matches!(err, DynamicsError::NonPositiveMass { body: 1, .. }), "{err}");
    }
}
