//! Ready-made systems used by the examples, the benchmarks and the tests: a box sliding on
//! the ground to rest ([`SlidingBox`], identification of friction and contact stiffness) and a
//! damped spring chain ([`SpringChain`], memory benchmark of the adjoint).

use std::cell::RefCell;

use gradfem_solvers::optimize::{Control, LbfgsbParams, Status, minimize_lbfgsb};
use gradfem_solvers::params::{ParamSpec, ParamVector};
use gradfem_solvers::taylor::random_direction;

use crate::adjoint::{Memory, PositionMisfit, Simulation};
use crate::error::DynamicsError;
use crate::forces::{Anchor, ContactPoint, Damper, GroundContact, Spring};
use crate::integrators::Rk4;
use crate::state::State;
use crate::system::System;
use crate::watch::Watcher;

/// A rigid box of mass m and half-sides (a, b, c) resting on the ground z = 0 on four contact
/// spheres (radius R) at its bottom corners (±a, ±b, −c) in the body frame, pushed along the
/// ground with an initial velocity v₀; friction (coefficient μ, regularized Coulomb) brings it to
/// rest after about |v₀| / (μ g). The box starts at its static height: the corners penetrate
/// by δ with 4 k_c ε softplus(δ/ε) = m g (true k_c), so that with the true parameters it does
/// not bounce.
///
/// Parameters: `contact.friction` μ ∈ [0, 1] and `contact.stiffness` k_c ∈ [2e3, 1e5]; the
/// position of the centre is observed at every step. k_c is identifiable through the
/// penetration depth m g / (4 k_c) (plus the pitch the friction torque gives the box) and the
/// frequency of the vertical oscillation it excites when k_c is wrong; μ through the
/// deceleration μ g.
#[derive(Debug, Clone, PartialEq)]
pub struct SlidingBox {
    /// Mass m.
    pub mass: f64,
    /// Half-sides (a, b, c).
    pub half: [f64; 3],
    /// Radius R of the corner spheres.
    pub corner_radius: f64,
    /// Friction coefficient of the synthetic observation.
    pub friction_true: f64,
    /// Contact stiffness of the synthetic observation.
    pub stiffness_true: f64,
    /// Smoothing length ε of the normal law.
    pub smoothing: f64,
    /// Slip velocity scale v_ε of the friction law.
    pub slip_velocity: f64,
    /// Initial velocity v₀ of the centre.
    pub v0: [f64; 3],
    /// Time step.
    pub dt: f64,
    /// Number of steps.
    pub n_steps: usize,
}

impl Default for SlidingBox {
    /// m = 1, 0.4 × 0.3 × 0.2 box, R = 5 mm, μ = 0.4, k_c = 2·10⁴ per corner, ε = 2·10⁻⁵
    /// (δ ≈ 1.2·10⁻⁴), v_ε = 10⁻², v₀ = (1, 0.2, 0) m/s, 400 RK4 steps of 1 ms (rest after
    /// ≈ 0.26 s). The step resolves the contact (ω = sqrt(4 k_c/m) ≈ 280 s⁻¹, ω dt ≈ 0.3)
    /// and the friction regularization (μ g / v_ε ≈ 400 s⁻¹).
    fn default() -> Self {
        Self {
            mass: 1.0,
            half: [0.2, 0.15, 0.1],
            corner_radius: 5e-3,
            friction_true: 0.4,
            stiffness_true: 2e4,
            smoothing: 2e-5,
            slip_velocity: 1e-2,
            v0: [1.0, 0.2, 0.0],
            dt: 1e-3,
            n_steps: 400,
        }
    }
}

/// Result of [`SlidingBox::recover`].
#[derive(Debug, Clone, PartialEq)]
pub struct Recovery {
    /// Recovered μ.
    pub friction: f64,
    /// Recovered k_c.
    pub stiffness: f64,
    /// Optimizer iterations.
    pub iterations: usize,
    /// Objective evaluations (each one simulation and one adjoint sweep).
    pub evaluations: usize,
    /// Final objective.
    pub objective: f64,
    /// How the optimizer ended.
    pub status: Status,
}

impl SlidingBox {
    /// Penetration δ of each corner at rest for stiffness k_c:
    /// δ = ε ln(e^s − 1), s = m g / (4 k_c ε) (inverse of the softplus law; g = 9.81).
    pub fn rest_penetration(&self, kc: f64) -> f64 {
        let s = self.mass * 9.81 / (4.0 * kc * self.smoothing);
        // ln(eˢ − 1) = s + ln(1 − e⁻ˢ), stable for large s.
        self.smoothing * (s + (-(-s).exp()).ln_1p())
    }

    /// The system with μ = `friction`, k_c = `stiffness` registered as `contact.friction`
    /// (bounds [0, 1]) and `contact.stiffness` (bounds [2e3, 1e5]).
    pub fn system(&self, friction: f64, stiffness: f64) -> Result<System, DynamicsError> {
        let mut sys = System::new();
        sys.gravity = [0.0, 0.0, -9.81];
        let mu = sys.param(
            ParamSpec::scalar("contact.friction", friction).with_bounds(Some(0.0), Some(1.0)),
        )?;
        let kc = sys.param(
            ParamSpec::scalar("contact.stiffness", stiffness).with_bounds(Some(2e3), Some(1e5)),
        )?;
        let (m, [a, b, c]) = (self.mass, self.half);
        // Box of sides 2a, 2b, 2c: I₁ = m ((2b)² + (2c)²)/12, …
        let inertia =
            [m * (b * b + c * c) / 3.0, m * (a * a + c * c) / 3.0, m * (a * a + b * b) / 3.0];
        let body = sys.add_rigid_body(m, inertia.map(Into::into));
        let corners = [[a, b], [a, -b], [-a, b], [-a, -b]].map(|[x, y]| ContactPoint {
            body,
            offset: [x, y, -c],
            radius: self.corner_radius,
        });
        let mut contact =
            GroundContact::ground(Vec::new(), kc, mu, self.smoothing.into()).with_points(corners);
        contact.slip_velocity = self.slip_velocity;
        sys.add_force(contact);
        Ok(sys)
    }

    /// Initial state: at rest height for the true k_c, level, moving with v₀.
    pub fn x0(&self) -> State {
        let mut s = State::at_rest(1);
        s.position[0] = [
            0.0,
            0.0,
            self.half[2] + self.corner_radius - self.rest_penetration(self.stiffness_true),
        ];
        s.velocity[0] = self.v0;
        s
    }

    /// The simulation of `sys` (RK4, [`SlidingBox::dt`], [`SlidingBox::n_steps`]).
    pub fn simulation<'a>(&self, sys: &'a System) -> Simulation<'a, Rk4> {
        Simulation::new(sys, Rk4, self.dt, self.n_steps)
    }

    /// The observed trajectory of the centre at the true parameters, with uniform noise of
    /// amplitude `noise` (deterministic, from `seed`) on every coordinate; misfit weight
    /// w = 1 / (N + 1) per m², so J is the mean squared error over the steps (×½).
    pub fn observe(&self, noise: f64, seed: u64) -> Result<PositionMisfit, DynamicsError> {
        let sys = self.system(self.friction_true, self.stiffness_true)?;
        let traj = self.simulation(&sys).run(&self.x0())?;
        let mut obj = PositionMisfit::from_trajectory(&traj, 1.0 / (self.n_steps + 1) as f64);
        let u = random_direction(3 * (self.n_steps + 1), seed);
        for (k, o) in obj.observed.iter_mut().enumerate() {
            if let Some(p) = o {
                (0..3).for_each(|d| p[0][d] += noise * u[3 * k + d]);
            }
        }
        Ok(obj)
    }

    /// Recovers (μ, k_c) from `observed` by L-BFGS-B from `start` = (μ₀, k_c,0) on the
    /// adjoint gradient (store-all). The optimizer works on y = (μ, k_c / k_c,0), so that both
    /// unknowns are O(1) (k_c ≈ 10⁴ next to μ ≈ 0.4 would make the first steps meaningless);
    /// its bounds are the registry's. Each evaluation and iteration goes to `watcher` in the
    /// physical variables (names `contact.friction`, `contact.stiffness`).
    pub fn recover(
        &self,
        observed: &PositionMisfit,
        start: [f64; 2],
        params: &LbfgsbParams,
        watcher: Option<&mut Watcher>,
    ) -> Result<Recovery, DynamicsError> {
        let mut sys = self.system(start[0], start[1])?;
        let pv = ParamVector::all(&sys.registry);
        let (lo, hi) = pv.bounds();
        let scale = [1.0, start[1]];
        let y0 = [start[0], 1.0];
        let (ylo, yhi) = ([lo[0], lo[1] / scale[1]], [hi[0], hi[1] / scale[1]]);
        let x0 = self.x0();
        let watcher = watcher.map(RefCell::new);
        let res = minimize_lbfgsb(
            |y, g| {
                let p = [y[0] * scale[0], y[1] * scale[1]];
                pv.scatter(&mut sys.registry, &p)?;
                let r = self.simulation(&sys).gradient(&x0, observed, Memory::StoreAll)?;
                let gp = r.params.flatten(&pv);
                g[0] = gp[0] * scale[0];
                g[1] = gp[1] * scale[1];
                if let Some(w) = &watcher {
                    w.borrow_mut().evaluation(y, &p, &gp, r.value);
                }
                Ok::<_, DynamicsError>(r.value)
            },
            &y0,
            &ylo,
            &yhi,
            params,
            |rec| match &watcher {
                Some(w) => w.borrow_mut().iteration(rec),
                None => Control::Continue,
            },
        )?;
        Ok(Recovery {
            friction: res.x[0] * scale[0],
            stiffness: res.x[1] * scale[1],
            iterations: res.iterations,
            evaluations: res.evaluations,
            objective: res.f,
            status: res.status,
        })
    }
}

/// A chain of `n` particles (mass 1) along x, linked by springs (stiffness `spring.k`, rest
/// length 1) and dampers (`damper.c`), the first one tied to the origin by the same spring and
/// damper; no gravity. The last particle starts displaced by (0.3, 0.2, 0.1) so the chain
/// rings down slowly (light damping).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpringChain {
    /// Number of particles.
    pub n: usize,
    /// Spring stiffness k.
    pub k: f64,
    /// Damping c.
    pub c: f64,
}

impl Default for SpringChain {
    /// Four particles, k = 10, c = 0.02.
    fn default() -> Self {
        Self { n: 4, k: 10.0, c: 0.02 }
    }
}

impl SpringChain {
    /// The system with `spring.k` = k and `damper.c` = c registered.
    pub fn system(&self, k: f64, c: f64) -> Result<System, DynamicsError> {
        let mut sys = System::new();
        let kv = sys.param(ParamSpec::scalar("spring.k", k).with_bounds(Some(0.0), None))?;
        let cv = sys.param(ParamSpec::scalar("damper.c", c).with_bounds(Some(0.0), None))?;
        let mut prev = Anchor::Fixed([0.0; 3]);
        for _ in 0..self.n {
            let b = Anchor::Body(sys.add_body(1.0));
            sys.add_force(Spring { a: b, b: prev, k: kv, rest_length: 1.0.into() });
            sys.add_force(Damper { a: b, b: prev, c: cv });
            prev = b;
        }
        Ok(sys)
    }

    /// Initial state: particle i at (i + 1, 0, 0), the last one displaced.
    pub fn x0(&self) -> State {
        let mut s = State::at_rest(self.n);
        for (i, p) in s.position.iter_mut().enumerate() {
            *p = [(i + 1) as f64, 0.0, 0.0];
        }
        if let Some(p) = s.position.last_mut() {
            p[0] += 0.3;
            p[1] += 0.2;
            p[2] += 0.1;
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn box_starts_at_rest_height() {
        let b = SlidingBox::default();
        let delta = b.rest_penetration(b.stiffness_true);
        // 4 k_c ε softplus(δ/ε) = m g.
        let f = 4.0 * b.stiffness_true * b.smoothing * crate::forces::softplus(delta / b.smoothing);
        assert!((f - 9.81).abs() < 1e-10, "{f}");
        assert!((delta - 9.81 / (4.0 * 2e4)).abs() < 0.05 * delta, "{delta}");
    }
}
