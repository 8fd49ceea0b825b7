//! Built-in force laws: springs, dampers, soft ground and sphere–sphere contact with
//! regularized Coulomb friction, and user forces given as closures with their VJP.
//!
//! Each law's point formula is written once, generic over the scalar (`f64` or a dual number),
//! and its VJP comes from [`local_vjp`].
//!
//! # Soft contact and the smoothing scale ε
//!
//! A sphere of radius R against the plane {n · r = h} (unit normal n) penetrates by
//! δ = R − (n · r − h). The normal force is
//!
//! F_n = k_c · ε · softplus(δ / ε),   softplus(s) = ln(1 + eˢ),
//!
//! a smooth version of k_c · max(δ, 0): it differs from it by at most k_c ε ln 2 (at δ = 0), its
//! slope is k_c σ(δ/ε) (σ the logistic function), and its curvature peaks at k_c / (4ε). The
//! friction force is regularized Coulomb,
//!
//! F_t = −μ F_n · v_t / sqrt(|v_t|² + v_ε²),   v_t = v_c − (v_c · n) n,   v_c = v + ω × ρ,
//!
//! bounded by μ F_n and smooth at v_t = 0 (v_ε is a fixed velocity scale), acting on the
//! velocity v_c of the contact point ρ = −R n (relative to the centre). The total force is
//! F_n n + F_t, and it applies the torque τ = ρ × F_t about the centre (felt by rigid bodies).
//!
//! Between two spheres a and b ([`SphereContact`]) the same laws act on the penetration
//! δ = R_a + R_b − |r_a − r_b| along n = (r_a − r_b)/|r_a − r_b|, with friction on the
//! tangential part of the relative velocity of the contact point c (the midpoint of the overlap
//! on the line of centres, ρ_a = c − r_a = −(R_a − δ/2) n, ρ_b = c − r_b = (R_b − δ/2) n),
//!
//! v_rel = (v_a + ω_a × ρ_a) − (v_b + ω_b × ρ_b),
//!
//! so spin drives friction; a receives F_n n + F_t and the torque τ_a = ρ_a × F_t, b receives
//! −(F_n n + F_t) and τ_b = ρ_b × (−F_t). Both act at the one point c, so the pair conserves
//! linear and angular momentum (orbital plus spin). Particles enter with their (constant)
//! angular velocity and the system ignores torques on them, as for the ground.
//!
//! Effect of ε on gradients: every force is C^∞ for ε > 0, so the discrete trajectory is a
//! smooth function of the parameters and the initial state, and its adjoint gradient is exact
//! and finite. What ε controls is the scale on which that gradient is *useful*: the slope of
//! the normal law changes from 0 to k_c over a penetration of a few ε, while the time stepping
//! samples the penetration every v·dt (v the impact speed). With ε ≳ v·dt the sampled force
//! varies smoothly with the parameters and J is smooth on perturbations of any size down to
//! round-off. With ε ≪ v·dt (ε → 0: a kink, k_c·max(δ, 0)) each perturbation that moves a
//! sample across δ = 0 puts a kink into J: the gradient is still finite (it is the exact
//! derivative between kinks), but it only predicts changes smaller than the distance to the
//! next kink, the Taylor remainder stops decaying at rate 2, and gradient-based optimizers
//! stall. The tests (`tests/contact.rs`) show both sides on a bouncing ball with dt = 2e-5
//! (v·dt ≈ 5e-5): ε = 1e-4 gives Taylor rate 2.000 through the impact, ε = 1e-10 gives rates
//! 1.4, 1.2, 0.7 … at the same step sizes. Rule: ε ≥ v_impact·dt, and ε small against the body
//! size (the law's offset at δ = 0 is k_c ε ln 2); the time step must also resolve the contact
//! stiffness, (k_c/m)·dt² ≪ 1.

use num_dual::DualNum;

use crate::system::{Ctx, ForceLaw, Value, local_vjp};

/// One end of a spring or damper: a body or a fixed point in space.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Anchor {
    /// Body index.
    Body(usize),
    /// A fixed point (for a damper: a point at rest).
    Fixed([f64; 3]),
}

/// Position and velocity of an anchor, and the flat offsets of the body's r and v if a body.
fn anchor_rv(a: Anchor, x: &[f64], ctx: &Ctx<'_>) -> ([f64; 3], [f64; 3], Option<(usize, usize)>) {
    match a {
        Anchor::Body(i) => {
            let l = ctx.layout;
            (l.get3(x, l.r(i)), l.get3(x, l.v(i)), Some((l.r(i), l.v(i))))
        }
        Anchor::Fixed(p) => (p, [0.0; 3], None),
    }
}

/// Linear spring between anchors a and b: with d = r_a − r_b, ℓ = |d|,
/// F_a = −k (ℓ − L) d / ℓ and F_b = −F_a (stiffness k, rest length L).
/// Undefined at ℓ = 0 (coincident ends); use a positive rest length or keep ends apart.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spring {
    /// First end.
    pub a: Anchor,
    /// Second end.
    pub b: Anchor,
    /// Stiffness k.
    pub k: Value,
    /// Rest length L.
    pub rest_length: Value,
}

/// F_a of a [`Spring`], generic over the scalar.
pub fn spring_force<T: DualNum<Primitive = f64> + Copy>(
    ra: &[T; 3],
    rb: &[T; 3],
    k: T,
    rest: T,
) -> [T; 3] {
    let d = [ra[0] - rb[0], ra[1] - rb[1], ra[2] - rb[2]];
    let l = (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt();
    let s = -k * (l - rest) / l;
    [s * d[0], s * d[1], s * d[2]]
}

/// Adds F_a into a and −F_a into b; for the VJP returns ȳ = F̄_a − F̄_b.
fn pair_bar(a: Anchor, b: Anchor, f_bar: &[[f64; 3]]) -> [f64; 3] {
    let mut y = [0.0; 3];
    if let Anchor::Body(i) = a {
        (0..3).for_each(|d| y[d] += f_bar[i][d]);
    }
    if let Anchor::Body(j) = b {
        (0..3).for_each(|d| y[d] -= f_bar[j][d]);
    }
    y
}

fn pair_add(a: Anchor, b: Anchor, f: [f64; 3], forces: &mut [[f64; 3]]) {
    if let Anchor::Body(i) = a {
        (0..3).for_each(|d| forces[i][d] += f[d]);
    }
    if let Anchor::Body(j) = b {
        (0..3).for_each(|d| forces[j][d] -= f[d]);
    }
}

impl ForceLaw for Spring {
    fn accumulate(&self, x: &[f64], ctx: &Ctx<'_>, forces: &mut [[f64; 3]]) {
        let (ra, _, _) = anchor_rv(self.a, x, ctx);
        let (rb, _, _) = anchor_rv(self.b, x, ctx);
        let f = spring_force(&ra, &rb, ctx.value(self.k), ctx.value(self.rest_length));
        pair_add(self.a, self.b, f, forces);
    }

    fn vjp(
        &self,
        x: &[f64],
        ctx: &Ctx<'_>,
        f_bar: &[[f64; 3]],
        x_bar: &mut [f64],
        p_bar: &mut [f64],
    ) {
        let (ra, _, oa) = anchor_rv(self.a, x, ctx);
        let (rb, _, ob) = anchor_rv(self.b, x, ctx);
        let y = pair_bar(self.a, self.b, f_bar);
        let inp = [
            ra[0],
            ra[1],
            ra[2],
            rb[0],
            rb[1],
            rb[2],
            ctx.value(self.k),
            ctx.value(self.rest_length),
        ];
        let g = local_vjp(inp, &y, |z| {
            spring_force(&[z[0], z[1], z[2]], &[z[3], z[4], z[5]], z[6], z[7])
        });
        if let Some((r, _)) = oa {
            (0..3).for_each(|d| x_bar[r + d] += g[d]);
        }
        if let Some((r, _)) = ob {
            (0..3).for_each(|d| x_bar[r + d] += g[3 + d]);
        }
        ctx.add_bar(self.k, p_bar, g[6]);
        ctx.add_bar(self.rest_length, p_bar, g[7]);
    }
}

/// Linear dashpot between anchors a and b: F_a = −c (v_a − v_b), F_b = −F_a (damping c).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Damper {
    /// First end.
    pub a: Anchor,
    /// Second end.
    pub b: Anchor,
    /// Damping coefficient c.
    pub c: Value,
}

impl ForceLaw for Damper {
    fn accumulate(&self, x: &[f64], ctx: &Ctx<'_>, forces: &mut [[f64; 3]]) {
        let (_, va, _) = anchor_rv(self.a, x, ctx);
        let (_, vb, _) = anchor_rv(self.b, x, ctx);
        let c = ctx.value(self.c);
        pair_add(self.a, self.b, std::array::from_fn(|d| -c * (va[d] - vb[d])), forces);
    }

    /// Written by hand: the law is bilinear in c and the velocities.
    fn vjp(
        &self,
        x: &[f64],
        ctx: &Ctx<'_>,
        f_bar: &[[f64; 3]],
        x_bar: &mut [f64],
        p_bar: &mut [f64],
    ) {
        let (_, va, oa) = anchor_rv(self.a, x, ctx);
        let (_, vb, ob) = anchor_rv(self.b, x, ctx);
        let y = pair_bar(self.a, self.b, f_bar);
        let c = ctx.value(self.c);
        if let Some((_, v)) = oa {
            (0..3).for_each(|d| x_bar[v + d] -= c * y[d]);
        }
        if let Some((_, v)) = ob {
            (0..3).for_each(|d| x_bar[v + d] += c * y[d]);
        }
        ctx.add_bar(self.c, p_bar, -(0..3).map(|d| y[d] * (va[d] - vb[d])).sum::<f64>());
    }
}

/// softplus(s) = ln(1 + eˢ), evaluated without overflow: s + ln(1 + e⁻ˢ) for s > 0.
pub fn softplus<T: DualNum<Primitive = f64> + Copy>(s: T) -> T {
    if s.re() > 0.0 { s + (-s).exp().ln_1p() } else { s.exp().ln_1p() }
}

/// Soft contact of bodies (spheres of the given radii centred on the bodies, and
/// [`ContactPoint`] spheres at body-frame offsets) with the plane {n · r = h}: normal force
/// k_c ε softplus(δ/ε) and regularized Coulomb friction (formulas in the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct GroundContact {
    /// Bodies that touch the plane, with the radius of each one's contact sphere.
    pub bodies: Vec<(usize, f64)>,
    /// Unit normal n of the plane (pointing out of the ground).
    pub normal: [f64; 3],
    /// Offset h of the plane (n · r = h on the plane).
    pub height: f64,
    /// Contact stiffness k_c (force per penetration).
    pub stiffness: Value,
    /// Friction coefficient μ (register it with bounds [0, 1]).
    pub friction: Value,
    /// Smoothing length ε of the normal law.
    pub smoothing: Value,
    /// Velocity scale v_ε of the friction regularization (fixed).
    pub slip_velocity: f64,
    /// Contact spheres at body-frame offsets (e.g. the corners of a box), in addition to the
    /// spheres centred on the bodies listed in `bodies`.
    pub points: Vec<ContactPoint>,
}

/// A contact sphere fixed to a body at a body-frame offset ρ_b from its centre of mass.
///
/// Its centre is c = r + R(q) ρ_b and moves with v_c = v + ω × R(q) ρ_b; the contact law is that
/// of a sphere centred at c ([`contact_wrench`]), and the force F acting at c applies the torque
/// (R(q) ρ_b) × F about the centre of mass in addition to the sphere's own ρ × F
/// ([`offset_contact_wrench`]). On a particle (no inertia) the offset turns with the (constant)
/// orientation only.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ContactPoint {
    /// Body index.
    pub body: usize,
    /// Offset ρ_b of the sphere's centre in the body frame.
    pub offset: [f64; 3],
    /// Sphere radius R (0 for a point).
    pub radius: f64,
}

/// Contact wrench of a sphere at body-frame offset ρ_b (see [`ContactPoint`]), generic over
/// the scalar: with a = R(q) ρ_b, the wrench `[F, τ_s]` of [`contact_wrench`] evaluated at the
/// sphere centre r + a with centre velocity v + ω × a, and the torque about the body's centre
/// of mass τ = τ_s + a × F. Inputs: r, v, ω, q, k_c, μ, ε.
#[allow(clippy::too_many_arguments)]
pub fn offset_contact_wrench<T: DualNum<Primitive = f64> + Copy>(
    r: &[T; 3],
    v: &[T; 3],
    w: &[T; 3],
    q: &[T; 4],
    kc: T,
    mu: T,
    eps: T,
    point: &ContactPoint,
    n: &[f64; 3],
    h: f64,
    v_eps: f64,
) -> [T; 6] {
    let rot = crate::system::rotation_matrix(q);
    let o = point.offset;
    let a: [T; 3] = std::array::from_fn(|i| rot[i][0] * o[0] + rot[i][1] * o[1] + rot[i][2] * o[2]);
    let c: [T; 3] = std::array::from_fn(|i| r[i] + a[i]);
    let wxa = [w[1] * a[2] - w[2] * a[1], w[2] * a[0] - w[0] * a[2], w[0] * a[1] - w[1] * a[0]];
    let vc: [T; 3] = std::array::from_fn(|i| v[i] + wxa[i]);
    let wr = contact_wrench(&c, &vc, w, kc, mu, eps, point.radius, n, h, v_eps);
    let f = [wr[0], wr[1], wr[2]];
    [
        f[0],
        f[1],
        f[2],
        wr[3] + a[1] * f[2] - a[2] * f[1],
        wr[4] + a[2] * f[0] - a[0] * f[2],
        wr[5] + a[0] * f[1] - a[1] * f[0],
    ]
}

/// Contact wrench on a sphere of radius `radius` (formulas in the module docs), generic over
/// the scalar: `[F, τ]` with τ = ρ × F the torque about the centre, ρ = −R n the contact point
/// relative to the centre, and friction acting on the contact-point velocity v + ω × ρ.
/// Inputs: r, v, ω, k_c, μ, ε.
#[allow(clippy::too_many_arguments)]
pub fn contact_wrench<T: DualNum<Primitive = f64> + Copy>(
    r: &[T; 3],
    v: &[T; 3],
    w: &[T; 3],
    kc: T,
    mu: T,
    eps: T,
    radius: f64,
    n: &[f64; 3],
    h: f64,
    v_eps: f64,
) -> [T; 6] {
    let gap = r[0] * n[0] + r[1] * n[1] + r[2] * n[2] - h;
    let delta = -gap + radius;
    let fn_ = kc * eps * softplus(delta / eps);
    let rho = n.map(|c| -radius * c);
    let vc = [
        v[0] + w[1] * rho[2] - w[2] * rho[1],
        v[1] + w[2] * rho[0] - w[0] * rho[2],
        v[2] + w[0] * rho[1] - w[1] * rho[0],
    ];
    let vn = vc[0] * n[0] + vc[1] * n[1] + vc[2] * n[2];
    let vt = [vc[0] - vn * n[0], vc[1] - vn * n[1], vc[2] - vn * n[2]];
    let s = (vt[0] * vt[0] + vt[1] * vt[1] + vt[2] * vt[2] + v_eps * v_eps).sqrt();
    let ft = -mu * fn_ / s;
    let f: [T; 3] = std::array::from_fn(|d| fn_ * n[d] + ft * vt[d]);
    [
        f[0],
        f[1],
        f[2],
        f[2] * rho[1] - f[1] * rho[2],
        f[0] * rho[2] - f[2] * rho[0],
        f[1] * rho[0] - f[0] * rho[1],
    ]
}

impl ForceLaw for GroundContact {
    fn accumulate(&self, x: &[f64], ctx: &Ctx<'_>, forces: &mut [[f64; 3]]) {
        self.wrenches(x, ctx, |i, wr| (0..3).for_each(|d| forces[i][d] += wr[d]));
    }

    fn accumulate_torques(&self, x: &[f64], ctx: &Ctx<'_>, torques: &mut [[f64; 3]]) {
        self.wrenches(x, ctx, |i, wr| (0..3).for_each(|d| torques[i][d] += wr[3 + d]));
    }

    fn vjp(
        &self,
        x: &[f64],
        ctx: &Ctx<'_>,
        f_bar: &[[f64; 3]],
        x_bar: &mut [f64],
        p_bar: &mut [f64],
    ) {
        self.wrench_vjp(
            x,
            ctx,
            |i| [f_bar[i][0], f_bar[i][1], f_bar[i][2], 0.0, 0.0, 0.0],
            x_bar,
            p_bar,
        );
    }

    fn torque_vjp(
        &self,
        x: &[f64],
        ctx: &Ctx<'_>,
        tau_bar: &[[f64; 3]],
        x_bar: &mut [f64],
        p_bar: &mut [f64],
    ) {
        self.wrench_vjp(
            x,
            ctx,
            |i| [0.0, 0.0, 0.0, tau_bar[i][0], tau_bar[i][1], tau_bar[i][2]],
            x_bar,
            p_bar,
        );
    }
}

impl GroundContact {
    fn wrenches(&self, x: &[f64], ctx: &Ctx<'_>, mut add: impl FnMut(usize, [f64; 6])) {
        let l = ctx.layout;
        let (kc, mu, eps) =
            (ctx.value(self.stiffness), ctx.value(self.friction), ctx.value(self.smoothing));
        for &(i, radius) in &self.bodies {
            let wr = contact_wrench(
                &l.get3(x, l.r(i)),
                &l.get3(x, l.v(i)),
                &l.get3(x, l.w(i)),
                kc,
                mu,
                eps,
                radius,
                &self.normal,
                self.height,
                self.slip_velocity,
            );
            add(i, wr);
        }
        for pt in &self.points {
            let i = pt.body;
            let o = l.q(i);
            let wr = offset_contact_wrench(
                &l.get3(x, l.r(i)),
                &l.get3(x, l.v(i)),
                &l.get3(x, l.w(i)),
                &[x[o], x[o + 1], x[o + 2], x[o + 3]],
                kc,
                mu,
                eps,
                pt,
                &self.normal,
                self.height,
                self.slip_velocity,
            );
            add(i, wr);
        }
    }

    fn wrench_vjp(
        &self,
        x: &[f64],
        ctx: &Ctx<'_>,
        bar: impl Fn(usize) -> [f64; 6],
        x_bar: &mut [f64],
        p_bar: &mut [f64],
    ) {
        let l = ctx.layout;
        let (kc, mu, eps) =
            (ctx.value(self.stiffness), ctx.value(self.friction), ctx.value(self.smoothing));
        for &(i, radius) in &self.bodies {
            let yb = bar(i);
            if yb.iter().all(|v| *v == 0.0) {
                continue;
            }
            let (r, v, w) = (l.get3(x, l.r(i)), l.get3(x, l.v(i)), l.get3(x, l.w(i)));
            let inp = [r[0], r[1], r[2], v[0], v[1], v[2], w[0], w[1], w[2], kc, mu, eps];
            let g = local_vjp(inp, &yb, |z| {
                contact_wrench(
                    &[z[0], z[1], z[2]],
                    &[z[3], z[4], z[5]],
                    &[z[6], z[7], z[8]],
                    z[9],
                    z[10],
                    z[11],
                    radius,
                    &self.normal,
                    self.height,
                    self.slip_velocity,
                )
            });
            (0..3).for_each(|d| {
                x_bar[l.r(i) + d] += g[d];
                x_bar[l.v(i) + d] += g[3 + d];
                x_bar[l.w(i) + d] += g[6 + d];
            });
            ctx.add_bar(self.stiffness, p_bar, g[9]);
            ctx.add_bar(self.friction, p_bar, g[10]);
            ctx.add_bar(self.smoothing, p_bar, g[11]);
        }
        for pt in &self.points {
            let i = pt.body;
            let yb = bar(i);
            if yb.iter().all(|v| *v == 0.0) {
                continue;
            }
            let (r, v, w) = (l.get3(x, l.r(i)), l.get3(x, l.v(i)), l.get3(x, l.w(i)));
            let o = l.q(i);
            let inp = [
                r[0],
                r[1],
                r[2],
                v[0],
                v[1],
                v[2],
                w[0],
                w[1],
                w[2],
                x[o],
                x[o + 1],
                x[o + 2],
                x[o + 3],
                kc,
                mu,
                eps,
            ];
            let g = local_vjp(inp, &yb, |z| {
                offset_contact_wrench(
                    &[z[0], z[1], z[2]],
                    &[z[3], z[4], z[5]],
                    &[z[6], z[7], z[8]],
                    &[z[9], z[10], z[11], z[12]],
                    z[13],
                    z[14],
                    z[15],
                    pt,
                    &self.normal,
                    self.height,
                    self.slip_velocity,
                )
            });
            (0..3).for_each(|d| {
                x_bar[l.r(i) + d] += g[d];
                x_bar[l.v(i) + d] += g[3 + d];
                x_bar[l.w(i) + d] += g[6 + d];
            });
            (0..4).for_each(|d| x_bar[o + d] += g[9 + d]);
            ctx.add_bar(self.stiffness, p_bar, g[13]);
            ctx.add_bar(self.friction, p_bar, g[14]);
            ctx.add_bar(self.smoothing, p_bar, g[15]);
        }
    }

    /// Contact of `bodies` (index, radius) with the plane z = 0 (n = e_z) and slip velocity
    /// scale v_ε = 1e-3.
    pub fn ground(
        bodies: Vec<(usize, f64)>,
        stiffness: Value,
        friction: Value,
        smoothing: Value,
    ) -> Self {
        Self {
            bodies,
            normal: [0.0, 0.0, 1.0],
            height: 0.0,
            stiffness,
            friction,
            smoothing,
            slip_velocity: 1e-3,
            points: Vec::new(),
        }
    }

    /// Adds contact spheres at body-frame offsets (builder style).
    pub fn with_points(mut self, points: impl IntoIterator<Item = ContactPoint>) -> Self {
        self.points.extend(points);
        self
    }
}

/// Soft contact between spheres (every pair of the listed bodies; no broad phase, O(n²)), with
/// friction at the contact point and its torques on rigid bodies.
///
/// With d = r_a − r_b, ℓ = |d|, n = d/ℓ (from b towards a) and penetration δ = R_a + R_b − ℓ,
/// the contact point c is the midpoint of the overlap on the line of centres,
///
/// ρ_a = c − r_a = −(R_a − δ/2) n,   ρ_b = c − r_b = +(R_b − δ/2) n,
///
/// (ρ_a = −R_a n and ρ_b = +R_b n at first touch; halving the overlap makes c one point of both
/// bodies, so the pair's forces have no net moment, see below: with the lever arms R_a and R_b
/// themselves the pair would exert the spurious moment −δ n × F_t, an angular-momentum drift
/// that no time step removes). The relative velocity of the two material points at c and its
/// tangential part are
///
/// v_rel = (v_a + ω_a × ρ_a) − (v_b + ω_b × ρ_b),   v_t = v_rel − (v_rel · n) n,
///
/// and the laws are those of [`GroundContact`] (module docs):
///
/// F_n = k_c ε softplus(δ/ε),   F_t = −μ F_n v_t / sqrt(|v_t|² + v_ε²),   |F_t| < μ F_n,
///
/// F_a = F_n n + F_t,   F_b = −F_a,   τ_a = ρ_a × F_t,   τ_b = ρ_b × (−F_t),
///
/// torques about each centre (the normal force passes through both centres). Balance: both
/// forces act at c, so the moment of the pair about any fixed point vanishes,
/// (r_a − r_b) × F_t + τ_a + τ_b = (ℓ − (R_a − δ/2) − (R_b − δ/2)) n × F_t = 0: linear momentum
/// Σ m v and angular momentum Σ (r × m v + I ω) of the bodies are conserved by the law (up to
/// the integrator's error), and the friction power F_t · v_rel = −μ F_n |v_t|² / sqrt(|v_t|² +
/// v_ε²) ≤ 0 only dissipates.
///
/// Particles ([`crate::system::System::add_body`]) enter the law with their angular velocity
/// like every body (it stays constant, zero unless set), and the system drops the torques on
/// them, as for [`GroundContact`]: with ω = 0 the law is friction on the centres' relative
/// velocity v_a − v_b ([`sphere_contact_force`]).
///
/// Pairs with δ < −40ε are skipped (their force is below k_c ε e⁻⁴⁰, under rounding); forward
/// and VJP skip the same pairs.
#[derive(Debug, Clone, PartialEq)]
pub struct SphereContact {
    /// Bodies with the radius of each one's sphere.
    pub spheres: Vec<(usize, f64)>,
    /// Contact stiffness k_c.
    pub stiffness: Value,
    /// Friction coefficient μ.
    pub friction: Value,
    /// Smoothing length ε.
    pub smoothing: Value,
    /// Velocity scale v_ε of the friction regularization.
    pub slip_velocity: f64,
}

/// a × b, generic over the scalar.
fn cross<T: DualNum<Primitive = f64> + Copy>(a: &[T; 3], b: &[T; 3]) -> [T; 3] {
    [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]
}

/// Contact wrench of two spheres (formulas in [`SphereContact`]), generic over the scalar:
/// `[F_a, τ_a, τ_b]` (F_b = −F_a), with friction on the relative velocity of the contact point,
/// spins included. Inputs: r_a, r_b, v_a, v_b, ω_a, ω_b, k_c, μ, ε, then R_a, R_b and v_ε.
#[allow(clippy::too_many_arguments)]
pub fn sphere_contact_wrench<T: DualNum<Primitive = f64> + Copy>(
    ra: &[T; 3],
    rb: &[T; 3],
    va: &[T; 3],
    vb: &[T; 3],
    wa: &[T; 3],
    wb: &[T; 3],
    kc: T,
    mu: T,
    eps: T,
    radius_a: f64,
    radius_b: f64,
    v_eps: f64,
) -> [T; 9] {
    let d = [ra[0] - rb[0], ra[1] - rb[1], ra[2] - rb[2]];
    let l = (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt();
    let n = [d[0] / l, d[1] / l, d[2] / l];
    let delta = -l + (radius_a + radius_b);
    let fn_ = kc * eps * softplus(delta / eps);
    let half = delta * 0.5;
    let rho_a = n.map(|c| c * (half - radius_a));
    let rho_b = n.map(|c| c * (-half + radius_b));
    let (sa, sb) = (cross(wa, &rho_a), cross(wb, &rho_b));
    let v: [T; 3] = std::array::from_fn(|k| va[k] + sa[k] - vb[k] - sb[k]);
    let vn = v[0] * n[0] + v[1] * n[1] + v[2] * n[2];
    let vt = [v[0] - vn * n[0], v[1] - vn * n[1], v[2] - vn * n[2]];
    let s = (vt[0] * vt[0] + vt[1] * vt[1] + vt[2] * vt[2] + v_eps * v_eps).sqrt();
    let c = -mu * fn_ / s;
    let ft = vt.map(|x| c * x);
    let (ta, tb) = (cross(&rho_a, &ft), cross(&ft, &rho_b));
    [
        fn_ * n[0] + ft[0],
        fn_ * n[1] + ft[1],
        fn_ * n[2] + ft[2],
        ta[0],
        ta[1],
        ta[2],
        tb[0],
        tb[1],
        tb[2],
    ]
}

/// F_a of a sphere–sphere contact without spin (ω_a = ω_b = 0: friction on the centres'
/// relative velocity v_a − v_b), generic over the scalar: the force of
/// [`sphere_contact_wrench`], which only needs R_a + R_b then.
/// Inputs: r_a, r_b, v_a, v_b, k_c, μ, ε, then R_a + R_b and v_ε.
#[allow(clippy::too_many_arguments)]
pub fn sphere_contact_force<T: DualNum<Primitive = f64> + Copy>(
    ra: &[T; 3],
    rb: &[T; 3],
    va: &[T; 3],
    vb: &[T; 3],
    kc: T,
    mu: T,
    eps: T,
    radii: f64,
    v_eps: f64,
) -> [T; 3] {
    let zero = [T::zero(); 3];
    let w = sphere_contact_wrench(ra, rb, va, vb, &zero, &zero, kc, mu, eps, radii, 0.0, v_eps);
    [w[0], w[1], w[2]]
}

impl SphereContact {
    /// The pairs in contact range: (a, b, R_a, R_b).
    fn active_pairs(&self, x: &[f64], ctx: &Ctx<'_>) -> Vec<(usize, usize, f64, f64)> {
        let l = ctx.layout;
        let eps = ctx.value(self.smoothing);
        let mut out = Vec::new();
        for (p, &(a, ra)) in self.spheres.iter().enumerate() {
            for &(b, rb) in &self.spheres[p + 1..] {
                let (xa, xb) = (l.get3(x, l.r(a)), l.get3(x, l.r(b)));
                let dist = (0..3).map(|k| (xa[k] - xb[k]).powi(2)).sum::<f64>().sqrt();
                if ra + rb - dist >= -40.0 * eps {
                    out.push((a, b, ra, rb));
                }
            }
        }
        out
    }

    /// Calls `add(a, b, [F_a, τ_a, τ_b])` for every pair in contact range.
    fn wrenches(&self, x: &[f64], ctx: &Ctx<'_>, mut add: impl FnMut(usize, usize, [f64; 9])) {
        let l = ctx.layout;
        let (kc, mu, eps) =
            (ctx.value(self.stiffness), ctx.value(self.friction), ctx.value(self.smoothing));
        for (a, b, ra, rb) in self.active_pairs(x, ctx) {
            let wr = sphere_contact_wrench(
                &l.get3(x, l.r(a)),
                &l.get3(x, l.r(b)),
                &l.get3(x, l.v(a)),
                &l.get3(x, l.v(b)),
                &l.get3(x, l.w(a)),
                &l.get3(x, l.w(b)),
                kc,
                mu,
                eps,
                ra,
                rb,
                self.slip_velocity,
            );
            add(a, b, wr);
        }
    }

    /// Adds the VJP of every pair's wrench given its adjoint `bar(a, b)` =
    /// `[F̄_a − F̄_b, τ̄_a, τ̄_b]` (pairs with a zero adjoint are skipped).
    fn wrench_vjp(
        &self,
        x: &[f64],
        ctx: &Ctx<'_>,
        bar: impl Fn(usize, usize) -> [f64; 9],
        x_bar: &mut [f64],
        p_bar: &mut [f64],
    ) {
        let l = ctx.layout;
        let (kc, mu, eps) =
            (ctx.value(self.stiffness), ctx.value(self.friction), ctx.value(self.smoothing));
        for (a, b, ra, rb) in self.active_pairs(x, ctx) {
            let y = bar(a, b);
            if y.iter().all(|v| *v == 0.0) {
                continue;
            }
            let offsets = [l.r(a), l.r(b), l.v(a), l.v(b), l.w(a), l.w(b)];
            let mut inp = [0.0; 21];
            for (s, &o) in offsets.iter().enumerate() {
                inp[3 * s..3 * s + 3].copy_from_slice(&x[o..o + 3]);
            }
            inp[18] = kc;
            inp[19] = mu;
            inp[20] = eps;
            let g = local_vjp(inp, &y, |z| {
                sphere_contact_wrench(
                    &[z[0], z[1], z[2]],
                    &[z[3], z[4], z[5]],
                    &[z[6], z[7], z[8]],
                    &[z[9], z[10], z[11]],
                    &[z[12], z[13], z[14]],
                    &[z[15], z[16], z[17]],
                    z[18],
                    z[19],
                    z[20],
                    ra,
                    rb,
                    self.slip_velocity,
                )
            });
            for (s, &o) in offsets.iter().enumerate() {
                (0..3).for_each(|k| x_bar[o + k] += g[3 * s + k]);
            }
            ctx.add_bar(self.stiffness, p_bar, g[18]);
            ctx.add_bar(self.friction, p_bar, g[19]);
            ctx.add_bar(self.smoothing, p_bar, g[20]);
        }
    }
}

impl ForceLaw for SphereContact {
    fn accumulate(&self, x: &[f64], ctx: &Ctx<'_>, forces: &mut [[f64; 3]]) {
        self.wrenches(x, ctx, |a, b, wr| {
            pair_add(Anchor::Body(a), Anchor::Body(b), [wr[0], wr[1], wr[2]], forces)
        });
    }

    fn accumulate_torques(&self, x: &[f64], ctx: &Ctx<'_>, torques: &mut [[f64; 3]]) {
        self.wrenches(x, ctx, |a, b, wr| {
            (0..3).for_each(|d| {
                torques[a][d] += wr[3 + d];
                torques[b][d] += wr[6 + d];
            })
        });
    }

    fn vjp(
        &self,
        x: &[f64],
        ctx: &Ctx<'_>,
        f_bar: &[[f64; 3]],
        x_bar: &mut [f64],
        p_bar: &mut [f64],
    ) {
        self.wrench_vjp(
            x,
            ctx,
            |a, b| {
                let y = pair_bar(Anchor::Body(a), Anchor::Body(b), f_bar);
                [y[0], y[1], y[2], 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
            },
            x_bar,
            p_bar,
        );
    }

    fn torque_vjp(
        &self,
        x: &[f64],
        ctx: &Ctx<'_>,
        tau_bar: &[[f64; 3]],
        x_bar: &mut [f64],
        p_bar: &mut [f64],
    ) {
        self.wrench_vjp(
            x,
            ctx,
            |a, b| {
                let (ta, tb) = (tau_bar[a], tau_bar[b]);
                [0.0, 0.0, 0.0, ta[0], ta[1], ta[2], tb[0], tb[1], tb[2]]
            },
            x_bar,
            p_bar,
        );
    }
}

/// Force closure of a [`UserForce`]: `(x, ctx, forces)` adds forces (n × 3) at flat state x.
pub type UserForceFn = dyn Fn(&[f64], &Ctx<'_>, &mut [[f64; 3]]) + Send + Sync;
/// VJP closure of a [`UserForce`]: `(x, ctx, f_bar, x_bar, p_bar)` adds (∂F/∂x)ᵀ F̄ and
/// (∂F/∂p)ᵀ F̄.
pub type UserVjpFn = dyn Fn(&[f64], &Ctx<'_>, &[[f64; 3]], &mut [f64], &mut [f64]) + Send + Sync;

/// A user force given as two closures: the force and its vector-Jacobian product. The VJP is
/// trusted; check it with a Taylor test.
pub struct UserForce {
    force: Box<UserForceFn>,
    vjp: Box<UserVjpFn>,
}

impl UserForce {
    /// A user force from the force closure and its VJP closure.
    pub fn new(
        force: impl Fn(&[f64], &Ctx<'_>, &mut [[f64; 3]]) + Send + Sync + 'static,
        vjp: impl Fn(&[f64], &Ctx<'_>, &[[f64; 3]], &mut [f64], &mut [f64]) + Send + Sync + 'static,
    ) -> Self {
        Self { force: Box::new(force), vjp: Box::new(vjp) }
    }
}

impl ForceLaw for UserForce {
    fn accumulate(&self, x: &[f64], ctx: &Ctx<'_>, forces: &mut [[f64; 3]]) {
        (self.force)(x, ctx, forces)
    }
    fn vjp(
        &self,
        x: &[f64],
        ctx: &Ctx<'_>,
        f_bar: &[[f64; 3]],
        x_bar: &mut [f64],
        p_bar: &mut [f64],
    ) {
        (self.vjp)(x, ctx, f_bar, x_bar, p_bar)
    }
}

/// Clamps `x` to `[lo, hi]` and returns `(clamp(x), d clamp/dx)`: the derivative is 1 strictly
/// inside the interval and **0 where the value is clamped** (x ≤ lo or x ≥ hi; at x = lo or hi
/// exactly the one-sided derivative outside is taken). A clamped value therefore passes no
/// gradient: an adjoint sees the bound, not the quantity that exceeded it, and a parameter
/// that only acts through a clamped value gets a zero gradient there (an optimizer stalls on
/// such a plateau; keep clamps as safety nets that are inactive at the solution).
/// Panics if `lo > hi` (a programming mistake).
pub fn clamp_with_grad(x: f64, lo: f64, hi: f64) -> (f64, f64) {
    assert!(lo <= hi, "clamp_with_grad: lower bound {lo} > upper bound {hi}");
    if x <= lo {
        (lo, 0.0)
    } else if x >= hi {
        (hi, 0.0)
    } else {
        (x, 1.0)
    }
}

/// A force law whose force (and torque) on each body is clamped component by component to
/// `[−limit, limit]`: F_{i,d} ← clamp(F_{i,d}, −F_max, F_max), τ likewise with τ_max.
///
/// A safety net against blow-ups (a contact stiffness that an optimizer pushed too far, a user
/// force that explodes near a singularity). Gradient: the VJP passes F̄_{i,d} to the inner law
/// only for unclamped components; **a clamped component has zero gradient** with respect to
/// the state and the parameters ([`clamp_with_grad`]). The inner law is evaluated on its own
/// (one extra force buffer per call) so that only its own contribution is clamped.
pub struct ClampForce<F> {
    /// The wrapped law.
    pub inner: F,
    /// Bound F_max ≥ 0 on each force component.
    pub force_limit: f64,
    /// Bound τ_max ≥ 0 on each torque component (`f64::INFINITY` for none).
    pub torque_limit: f64,
}

impl<F: ForceLaw> ClampForce<F> {
    /// Clamps the force components of `inner` to `[−force_limit, force_limit]`; torques are not
    /// clamped.
    pub fn new(inner: F, force_limit: f64) -> Self {
        assert!(force_limit >= 0.0, "ClampForce: force limit {force_limit} must be ≥ 0");
        Self { inner, force_limit, torque_limit: f64::INFINITY }
    }

    fn inner_forces(&self, x: &[f64], ctx: &Ctx<'_>) -> Vec<[f64; 3]> {
        let mut f = vec![[0.0; 3]; ctx.layout.n];
        self.inner.accumulate(x, ctx, &mut f);
        f
    }

    fn inner_torques(&self, x: &[f64], ctx: &Ctx<'_>) -> Vec<[f64; 3]> {
        let mut t = vec![[0.0; 3]; ctx.layout.n];
        self.inner.accumulate_torques(x, ctx, &mut t);
        t
    }
}

/// Adds clamp(v) component by component into `out`.
fn clamp_add(v: &[[f64; 3]], limit: f64, out: &mut [[f64; 3]]) {
    for (o, f) in out.iter_mut().zip(v) {
        (0..3).for_each(|d| o[d] += clamp_with_grad(f[d], -limit, limit).0);
    }
}

/// F̄ masked by the clamp's derivative at v (0 where clamped).
fn clamp_mask(v: &[[f64; 3]], limit: f64, bar: &[[f64; 3]]) -> Vec<[f64; 3]> {
    v.iter()
        .zip(bar)
        .map(|(f, b)| std::array::from_fn(|d| b[d] * clamp_with_grad(f[d], -limit, limit).1))
        .collect()
}

impl<F: ForceLaw> ForceLaw for ClampForce<F> {
    fn accumulate(&self, x: &[f64], ctx: &Ctx<'_>, forces: &mut [[f64; 3]]) {
        clamp_add(&self.inner_forces(x, ctx), self.force_limit, forces);
    }

    fn vjp(
        &self,
        x: &[f64],
        ctx: &Ctx<'_>,
        f_bar: &[[f64; 3]],
        x_bar: &mut [f64],
        p_bar: &mut [f64],
    ) {
        let masked = clamp_mask(&self.inner_forces(x, ctx), self.force_limit, f_bar);
        self.inner.vjp(x, ctx, &masked, x_bar, p_bar);
    }

    fn accumulate_torques(&self, x: &[f64], ctx: &Ctx<'_>, torques: &mut [[f64; 3]]) {
        clamp_add(&self.inner_torques(x, ctx), self.torque_limit, torques);
    }

    fn torque_vjp(
        &self,
        x: &[f64],
        ctx: &Ctx<'_>,
        tau_bar: &[[f64; 3]],
        x_bar: &mut [f64],
        p_bar: &mut [f64],
    ) {
        let masked = clamp_mask(&self.inner_torques(x, ctx), self.torque_limit, tau_bar);
        self.inner.torque_vjp(x, ctx, &masked, x_bar, p_bar);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case(-800.0)]
    #[case(-3.0)]
    #[case(0.0)]
    #[case(2.5)]
    #[case(800.0)]
    fn softplus_is_stable(#[case] s: f64) {
        let v: f64 = softplus(s);
        let reference = if s.abs() < 30.0 { (1.0 + s.exp()).ln() } else { s.max(0.0) };
        assert!(v.is_finite() && (v - reference).abs() <= 1e-12 * (1.0 + reference), "{s}: {v}");
    }

    /// A contact point at zero offset is the centred sphere; at an offset, the force is that
    /// of a sphere centred at r + R(q) ρ_b and the torque gains (R(q) ρ_b) × F.
    #[test]
    fn offset_contact_reduces_to_centred_sphere_and_adds_lever_arm() {
        let (r, v, w) = ([0.1, -0.2, -0.3], [0.7, 0.1, -0.3], [0.4, -1.1, 0.9]);
        let (n, eps) = ([0.0, 0.0, 1.0], 1e-2);
        let q = [0.8f64, 0.2, -0.4, 0.3];
        let centred = ContactPoint { body: 0, offset: [0.0; 3], radius: 0.1 };
        let a = offset_contact_wrench(&r, &v, &w, &q, 1e3, 0.3, eps, &centred, &n, 0.0, 1e-2);
        let b = contact_wrench(&r, &v, &w, 1e3, 0.3, eps, 0.1, &n, 0.0, 1e-2);
        for d in 0..6 {
            assert!((a[d] - b[d]).abs() <= 1e-14 * (1.0 + b[d].abs()), "{a:?} vs {b:?}");
        }
        let pt = ContactPoint { body: 0, offset: [0.2, -0.1, -0.05], radius: 0.02 };
        let rot = crate::system::rotation_matrix(&q);
        let arm: [f64; 3] = std::array::from_fn(|i| (0..3).map(|j| rot[i][j] * pt.offset[j]).sum());
        let c: [f64; 3] = std::array::from_fn(|i| r[i] + arm[i]);
        let vc = [
            v[0] + w[1] * arm[2] - w[2] * arm[1],
            v[1] + w[2] * arm[0] - w[0] * arm[2],
            v[2] + w[0] * arm[1] - w[1] * arm[0],
        ];
        let s = contact_wrench(&c, &vc, &w, 1e3, 0.3, eps, 0.02, &n, 0.0, 1e-2);
        let o = offset_contact_wrench(&r, &v, &w, &q, 1e3, 0.3, eps, &pt, &n, 0.0, 1e-2);
        assert!(s[2] > 1.0, "the point should be in contact: {s:?}");
        let lever = [
            arm[1] * s[2] - arm[2] * s[1],
            arm[2] * s[0] - arm[0] * s[2],
            arm[0] * s[1] - arm[1] * s[0],
        ];
        for d in 0..3 {
            assert!((o[d] - s[d]).abs() < 1e-12 && (o[3 + d] - s[3 + d] - lever[d]).abs() < 1e-12);
        }
    }

    /// Spheres a (R_a = 0.15) and b (R_b = 0.1) overlapping by about 0.02, with spins.
    fn spinning_pair() -> ([[f64; 3]; 6], f64, f64) {
        let ra = [0.21, -0.04, 0.03];
        let rb = [0.0, 0.02, -0.01];
        let (va, vb) = ([-0.4, 0.3, 0.1], [0.2, -0.1, 0.5]);
        let (wa, wb) = ([1.5, -2.0, 7.0], [-3.0, 0.5, 2.0]);
        ([ra, rb, va, vb, wa, wb], 0.15, 0.1)
    }

    fn wrench(s: &[[f64; 3]; 6], mu: f64, radius_a: f64, radius_b: f64) -> [f64; 9] {
        sphere_contact_wrench(
            &s[0], &s[1], &s[2], &s[3], &s[4], &s[5], 2e3, mu, 1e-3, radius_a, radius_b, 0.05,
        )
    }

    fn cross3(a: &[f64; 3], b: &[f64; 3]) -> [f64; 3] {
        cross(a, b)
    }

    /// Without spin the force is friction on the centres' relative velocity (the particle law),
    /// written out here independently.
    #[test]
    fn sphere_wrench_without_spin_is_the_centre_velocity_law() {
        let (mut s, radius_a, radius_b) = spinning_pair();
        s[4] = [0.0; 3];
        s[5] = [0.0; 3];
        let (kc, mu, eps, v_eps) = (2e3, 0.4, 1e-3, 0.05);
        let w = wrench(&s, mu, radius_a, radius_b);
        let d: [f64; 3] = std::array::from_fn(|k| s[0][k] - s[1][k]);
        let l = d.iter().map(|x| x * x).sum::<f64>().sqrt();
        let n = d.map(|x| x / l);
        let fn_ = kc * eps * (1.0 + ((radius_a + radius_b - l) / eps).exp()).ln();
        let v: [f64; 3] = std::array::from_fn(|k| s[2][k] - s[3][k]);
        let vn: f64 = (0..3).map(|k| v[k] * n[k]).sum();
        let vt: [f64; 3] = std::array::from_fn(|k| v[k] - vn * n[k]);
        let sl = (vt.iter().map(|x| x * x).sum::<f64>() + v_eps * v_eps).sqrt();
        let f = sphere_contact_force(
            &s[0],
            &s[1],
            &s[2],
            &s[3],
            kc,
            mu,
            eps,
            radius_a + radius_b,
            v_eps,
        );
        for k in 0..3 {
            let expected = fn_ * n[k] - mu * fn_ * vt[k] / sl;
            assert!((w[k] - expected).abs() < 1e-10 * fn_, "F_a[{k}] {} vs {expected}", w[k]);
            assert!((f[k] - expected).abs() < 1e-10 * fn_, "F_a[{k}] {} vs {expected}", f[k]);
        }
        assert!(fn_ > 10.0, "the spheres should touch: F_n = {fn_}");
        // Sliding centres still load rigid bodies with τ_a = ρ_a × F_t, ρ_a = −(R_a − δ/2) n
        // (a particle ignores it).
        let delta = radius_a + radius_b - l;
        let rho_a = n.map(|c| -(radius_a - 0.5 * delta) * c);
        let ft: [f64; 3] = std::array::from_fn(|k| -mu * fn_ * vt[k] / sl);
        let ta = cross3(&rho_a, &ft);
        for k in 0..3 {
            assert!((w[3 + k] - ta[k]).abs() < 1e-10 * fn_, "τ_a[{k}] {} vs {}", w[3 + k], ta[k]);
        }
    }

    /// Both forces act at one point: the moment of the pair about any point vanishes,
    /// r_a × F_a + r_b × (−F_a) + τ_a + τ_b = 0, and friction only dissipates:
    /// F_a · (v_a − v_b) + τ_a · ω_a + τ_b · ω_b ≤ F_n n · (v_a − v_b).
    #[test]
    fn sphere_wrench_has_no_net_moment_and_dissipates() {
        let (s, radius_a, radius_b) = spinning_pair();
        let w = wrench(&s, 0.4, radius_a, radius_b);
        let f = [w[0], w[1], w[2]];
        let (ma, mb) = (cross3(&s[0], &f), cross3(&s[1], &f));
        let scale = f.iter().map(|x| x.abs()).sum::<f64>();
        for k in 0..3 {
            let m = ma[k] - mb[k] + w[3 + k] + w[6 + k];
            assert!(m.abs() < 1e-14 * scale, "net moment {k}: {m:e} (|F| ~ {scale})");
        }
        let d: [f64; 3] = std::array::from_fn(|k| s[0][k] - s[1][k]);
        let l = d.iter().map(|x| x * x).sum::<f64>().sqrt();
        let fn_: f64 = (0..3).map(|k| f[k] * d[k] / l).sum();
        let dot = |a: &[f64], b: &[f64]| (0..3).map(|k| a[k] * b[k]).sum::<f64>();
        let dv: [f64; 3] = std::array::from_fn(|k| s[2][k] - s[3][k]);
        let friction_power =
            dot(&f, &dv) + dot(&w[3..6], &s[4]) + dot(&w[6..9], &s[5]) - fn_ * dot(&d, &dv) / l;
        assert!(friction_power < -1e-3 * fn_, "friction power {friction_power} (F_n {fn_})");
        assert!(w[3..].iter().any(|t| t.abs() > 1e-2 * fn_), "spin should drive friction: {w:?}");
    }

    /// |F_t| ≤ μ F_n for spinning spheres, at slip speeds far above and below v_ε.
    #[rstest]
    #[case([0.0, 0.0, 0.0], [0.0, 0.0, 0.0])]
    #[case([0.0, 0.0, 40.0], [0.0, 0.0, 0.0])]
    #[case([1e-4, 0.0, 0.0], [0.0, 2e-4, 0.0])]
    #[case([3.0, -5.0, 9.0], [-8.0, 1.0, 4.0])]
    fn sphere_friction_bounded_by_coulomb(#[case] wa: [f64; 3], #[case] wb: [f64; 3]) {
        let (mut s, radius_a, radius_b) = spinning_pair();
        (s[4], s[5]) = (wa, wb);
        let mu = 0.35;
        let w = wrench(&s, mu, radius_a, radius_b);
        let d: [f64; 3] = std::array::from_fn(|k| s[0][k] - s[1][k]);
        let l = d.iter().map(|x| x * x).sum::<f64>().sqrt();
        let fn_: f64 = (0..3).map(|k| w[k] * d[k] / l).sum();
        let ft: f64 = (0..3).map(|k| (w[k] - fn_ * d[k] / l).powi(2)).sum::<f64>().sqrt();
        assert!(fn_ > 0.0 && ft <= mu * fn_ * (1.0 + 1e-14), "F_n {fn_}, |F_t| {ft}");
    }

    #[rstest]
    #[case([0.0, 0.0, 0.05], [3.0, -1.0, -2.0])]
    #[case([0.2, 0.0, -0.02], [1e-6, 0.0, 0.0])]
    #[case([0.0, 0.0, 0.2], [0.0, 0.0, -1.0])]
    fn friction_bounded_by_coulomb(#[case] r: [f64; 3], #[case] v: [f64; 3]) {
        let (kc, mu, eps) = (1e3, 0.4, 1e-3);
        let f = contact_wrench(&r, &v, &[0.0; 3], kc, mu, eps, 0.1, &[0.0, 0.0, 1.0], 0.0, 1e-3);
        let fn_ = f[2];
        let ft = (f[0] * f[0] + f[1] * f[1]).sqrt();
        assert!(fn_ >= 0.0 && ft <= mu * fn_ * (1.0 + 1e-14), "F_n {fn_}, |F_t| {ft}");
        // Normal law: k_c ε softplus(δ/ε) ≈ k_c max(δ, 0) away from δ = 0.
        let delta = 0.1 - r[2];
        if delta.abs() > 20.0 * eps {
            assert!((fn_ - kc * delta.max(0.0)).abs() < 1e-6 * kc, "{fn_} vs {}", kc * delta);
        }
    }
}
