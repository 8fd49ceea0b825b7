//! Terminal functionals — a terminal's current, its voltage, and the device resistance — with
//! every partial derivative the adjoint engine needs, so that each can be an objective.
//!
//! For a functional J(φ, p), [`evaluate`] returns ∂J/∂φ (nodal, and summed onto the unknowns)
//! and the explicit partials ∂J/∂p. With λ the adjoint solution of (∂R/∂u)ᵀ λ_u = ∂J/∂u
//! (`d_unknowns`), spread to the nodes by `ElectricalModel::nodal_from_unknowns`, the total
//! derivative of any parameter p is
//!
//! dJ/dp = `eval.d_p` − `model.parameter_vjp(φ, T, λ, …).p`.
//!
//! - Current of a current terminal: the given I (∂J/∂I = 1).
//! - Current of a voltage terminal: its reaction I_t = wᵀ R^int(φ, p), w the indicator of its
//!   owned nodes, so ∂J/∂φ = (∂R^int/∂φ)ᵀ w and the explicit ∂J/∂p = wᵀ ∂R^int/∂p (computed
//!   with `parameter_vjp` at λ = w).
//! - Voltage: the given V (∂J/∂V = 1) or the terminal unknown (∂J/∂u_t = 1).
//! - Resistance R = (V_d − V_r) / I_d: the chain rule over the three above.

use serde::{Deserialize, Serialize};

use crate::model::{ElectricalError, ElectricalModel, TerminalKind, VjpRequest};

/// A terminal functional.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TerminalFunctional {
    /// Current INTO the device through a terminal \[A\].
    Current { terminal: String },
    /// Voltage of a terminal \[V\].
    Voltage { terminal: String },
    /// Resistance (V_drive − V_reference) / I_drive \[Ω\].
    Resistance { drive: String, reference: String },
}

/// Value and partial derivatives of a terminal functional.
#[derive(Clone, Debug, PartialEq)]
pub struct TerminalFunctionalEval {
    /// The functional's value.
    pub value: f64,
    /// ∂J/∂φ at every node (fixed nodes included), the dependence on φ of reaction currents
    /// included.
    pub d_phi: Vec<f64>,
    /// ∂J/∂u over the unknowns: the right-hand side of the adjoint solve.
    pub d_unknowns: Vec<f64>,
    /// Per volume element: explicit ∂J/∂σ₀ₑ.
    pub d_sigma_elem: Vec<f64>,
    /// Per conductor: explicit ∂J/∂α_R.
    pub d_alpha_r: Vec<f64>,
    /// Per terminal: explicit ∂J/∂I (current terminals).
    pub d_current: Vec<f64>,
    /// Per terminal: explicit ∂J/∂V (voltage terminals), through φ at its nodes included.
    pub d_voltage: Vec<f64>,
    /// Per node: explicit ∂J/∂T (zero without a temperature field).
    pub d_temperature: Vec<f64>,
    /// Per node: explicit ∂J/∂X (when requested).
    pub d_coords: Option<Vec<[f64; 3]>>,
}

/// A linear combination Σ c·(terminal quantity), the building block of the functionals.
struct Accumulator {
    /// Weights of the reaction currents (nodal).
    w: Vec<f64>,
    /// Direct nodal ∂J/∂φ (voltages of current terminals).
    d_phi: Vec<f64>,
    d_current: Vec<f64>,
    d_voltage: Vec<f64>,
}

impl Accumulator {
    fn current(&mut self, m: &ElectricalModel, k: usize, c: f64) {
        let term = &m.terminals[k];
        if term.is_voltage() {
            for &n in &term.owned_nodes {
                self.w[n] += c;
            }
        } else {
            self.d_current[k] += c;
        }
    }

    fn voltage(&mut self, m: &ElectricalModel, k: usize, c: f64) {
        let term = &m.terminals[k];
        match term.kind {
            TerminalKind::Current { .. } => self.d_phi[term.nodes[0]] += c,
            _ => self.d_voltage[k] += c,
        }
    }
}

/// Evaluate `functional` at nodal potentials `phi` and temperatures `t`, with its partial
/// derivatives (coordinates when `with_coords`).
pub fn evaluate(
    model: &ElectricalModel,
    functional: &TerminalFunctional,
    phi: &[f64],
    t: Option<&[f64]>,
    with_coords: bool,
) -> Result<TerminalFunctionalEval, ElectricalError> {
    let n_nodes = model.n_nodes();
    let n_t = model.terminals.len();
    let mut acc = Accumulator {
        w: vec![0.0; n_nodes],
        d_phi: vec![0.0; n_nodes],
        d_current: vec![0.0; n_t],
        d_voltage: vec![0.0; n_t],
    };
    let current_of = |k: usize| -> f64 {
        model.terminal_current_parameter(k).unwrap_or_else(|| model.terminal_currents(phi, t)[k])
    };
    let voltages = model.terminal_voltages(phi);
    let value = match functional {
        TerminalFunctional::Current { terminal } => {
            let k = model.terminal_index(terminal)?;
            acc.current(model, k, 1.0);
            current_of(k)
        }
        TerminalFunctional::Voltage { terminal } => {
            let k = model.terminal_index(terminal)?;
            acc.voltage(model, k, 1.0);
            voltages[k]
        }
        TerminalFunctional::Resistance { drive, reference } => {
            let d = model.terminal_index(drive)?;
            let r = model.terminal_index(reference)?;
            if d == r {
                return Err(ElectricalError::Undefined {
                    what: format!("resistance between '{drive}' and itself"),
                    reason: "the drive and reference terminals must differ".into(),
                });
            }
            let i = current_of(d);
            if i == 0.0 || !i.is_finite() {
                return Err(ElectricalError::Undefined {
                    what: format!("resistance between '{drive}' and '{reference}'"),
                    reason: format!("the current through '{drive}' is {i}"),
                });
            }
            let res = (voltages[d] - voltages[r]) / i;
            acc.voltage(model, d, 1.0 / i);
            acc.voltage(model, r, -1.0 / i);
            acc.current(model, d, -res / i);
            res
        }
    };
    let has_w = acc.w.iter().any(|&v| v != 0.0);
    let mut d_phi = acc.d_phi;
    let mut eval = TerminalFunctionalEval {
        value,
        d_phi: Vec::new(),
        d_unknowns: Vec::new(),
        d_sigma_elem: vec![0.0; model.n_volume_elements()],
        d_alpha_r: vec![0.0; model.conductors.len()],
        d_current: acc.d_current,
        d_voltage: acc.d_voltage,
        d_temperature: vec![0.0; n_nodes],
        d_coords: with_coords.then(|| vec![[0.0; 3]; n_nodes]),
    };
    if has_w {
        let kt_w = model.tangent_transpose_product(phi, t, &acc.w);
        for (d, v) in d_phi.iter_mut().zip(&kt_w) {
            *d += v;
        }
        let p = model.parameter_vjp(
            phi,
            t,
            &acc.w,
            VjpRequest {
                conductivity: true,
                terminals: false,
                temperature: true,
                coords: with_coords,
            },
        );
        eval.d_sigma_elem = p.sigma_elem;
        eval.d_alpha_r = p.alpha_r;
        eval.d_temperature = p.temperature;
        if with_coords {
            eval.d_coords = p.coords;
        }
    }
    for (k, v) in model.voltage_adjoint(&d_phi).into_iter().enumerate() {
        eval.d_voltage[k] += v;
    }
    eval.d_unknowns = model.unknowns_adjoint(&d_phi);
    eval.d_phi = d_phi;
    Ok(eval)
}
