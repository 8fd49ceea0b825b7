//! The coupling engine on its own: fields built in code on a generated box, a field defined
//! here (outside the engine, as a new physics would be) joining the graph through the
//! `Field` trait alone, located errors for transfers between fields that do not cover each
//! other, and the two cycle schemes agreeing.

use std::any::Any;

use gradfem_coupling::fields::electrical::{ElectricalField, TerminalTerm};
use gradfem_coupling::fields::thermal::ThermalField;
use gradfem_coupling::{
    CoupledProblem, CycleScheme, Field, LinearChoice, Port, Reverse, RunError, Seed, SolveMode,
};
use gradfem_electrical::{ConductorSpec, TerminalFunctional, TerminalKind, TerminalSpec};
use gradfem_mesh::generate::{BoxSpec, box_mesh};
use gradfem_mesh::{CellType, Mesh, PhysicalGroup};
use gradfem_solvers::params::{ParamId, ParamRegistry, ParamSpec};
use gradfem_solvers::taylor::TaylorParams;
use gradfem_thermal::{BcKind, BcSpec, ConductivityLaw, ObjectiveKind, ObjectiveTerm, RegionSpec};

/// A bar 10 × 2 × 1 mm in Hex8 cells, with the box's groups and a volume group `left` of the
/// cells with x < 5 mm.
fn bar() -> Mesh {
    let mut mesh = box_mesh(&BoxSpec {
        origin: [0.0; 3],
        lengths: [0.01, 0.002, 0.001],
        divisions: [10, 2, 1],
        cell_type: CellType::Hex8,
    });
    let left: Vec<_> = mesh.cells_of_dim(3).filter(|&c| mesh.cell_centroid(c)[0] < 0.005).collect();
    let tag = mesh.groups.iter().map(|g| g.tag).max().unwrap_or(0) + 1;
    mesh.groups.push(PhysicalGroup { name: "left".into(), tag, dim: 3, cells: left });
    mesh
}

fn thermal(mesh: &Mesh, group: &str, objective: Vec<ObjectiveTerm>) -> ThermalField {
    let regions =
        [RegionSpec { group: group.into(), k0: 30.0, law: ConductivityLaw::Constant, source: 0.0 }];
    let bcs = [
        BcSpec { group: "xmin".into(), kind: BcKind::Temperature { value: 293.15 } },
        BcSpec { group: "zmax".into(), kind: BcKind::Convection { h: 500.0, t_inf: 293.15 } },
    ];
    ThermalField::new(mesh, &regions, &bcs, objective, LinearChoice::Cholesky).unwrap()
}

fn electrical(mesh: &Mesh, group: &str, alpha_r: f64) -> ElectricalField {
    let conductor = ConductorSpec::with_resistivity(
        group,
        5e-5,
        gradfem_electrical::ResistivityLaw::Linear { alpha_r },
        293.15,
    );
    let terminals = [
        TerminalSpec { group: "xmin".into(), kind: TerminalKind::Voltage { value: 0.2 } },
        TerminalSpec { group: "xmax".into(), kind: TerminalKind::Ground },
    ];
    let objective = vec![TerminalTerm {
        weight: 1.0,
        functional: TerminalFunctional::Current { terminal: "xmin".into() },
    }];
    ElectricalField::new(mesh, &[conductor], &terminals, objective).unwrap()
}

/// A field defined outside the engine: a nodal "sensor reading" s = c · T of the temperature
/// it takes as input (R(s; T, c) = s − c T = 0), with the objective ½ Σ (s − d)² and the
/// gain c registrable as `probe.gain`.
struct Probe {
    gain: f64,
    target: f64,
    gain_id: Option<ParamId>,
    temperature: Option<Vec<f64>>,
    s: Option<Vec<f64>>,
}

impl Field for Probe {
    fn name(&self) -> &str {
        "probe"
    }
    fn outputs(&self) -> Vec<Port> {
        vec![Port::nodal("reading", 1)]
    }
    fn inputs(&self) -> Vec<Port> {
        vec![Port::nodal("temperature", 1)]
    }
    fn available_parameters(&self) -> Vec<String> {
        vec!["probe.gain".into()]
    }
    fn owns(&self, name: &str) -> bool {
        name.starts_with("probe.")
    }
    fn register(
        &mut self,
        registry: &mut ParamRegistry,
        name: &str,
        _bounds: Option<[f64; 2]>,
    ) -> Result<ParamId, RunError> {
        if name != "probe.gain" {
            return Err(RunError::UnknownParameter(name.into()));
        }
        let id = registry.register(ParamSpec::scalar(name, self.gain))?;
        self.gain_id = Some(id);
        Ok(id)
    }
    fn apply_parameters(
        &mut self,
        registry: &ParamRegistry,
        _coordinates: Option<&[[f64; 3]]>,
    ) -> Result<(), RunError> {
        if let Some(id) = self.gain_id {
            self.gain = registry.values(id)[0];
        }
        self.s = None;
        Ok(())
    }
    fn set_input(&mut self, _port: usize, values: &[f64]) -> Result<(), RunError> {
        self.temperature = Some(values.to_vec());
        self.s = None;
        Ok(())
    }
    fn solve(&mut self, _mode: SolveMode) -> Result<(), RunError> {
        let t = self.temperature.as_ref().ok_or_else(|| RunError::Setup("no input".into()))?;
        self.s = Some(t.iter().map(|t| self.gain * t).collect());
        Ok(())
    }
    fn is_solved(&self) -> bool {
        self.s.is_some()
    }
    fn state(&self) -> Option<&[f64]> {
        self.s.as_deref()
    }
    fn start_state(&self) -> Vec<f64> {
        vec![0.0; self.temperature.as_ref().map_or(0, Vec::len)]
    }
    fn objective(&self) -> Result<(f64, Vec<f64>), RunError> {
        let s = self.s.as_ref().ok_or_else(|| RunError::Setup("solve first".into()))?;
        let j = 0.5 * s.iter().map(|v| (v - self.target).powi(2)).sum::<f64>();
        Ok((j, vec![j]))
    }
    fn objective_seed(&self, _rev: &mut Reverse) -> Result<Seed, RunError> {
        let s = self.s.as_ref().ok_or_else(|| RunError::Setup("solve first".into()))?;
        Ok(Seed { state: s.iter().map(|v| v - self.target).collect(), ..Default::default() })
    }
    fn adjoint_solve(&mut self, state_bar: &[f64], _u: &[f64]) -> Result<Vec<f64>, RunError> {
        Ok(state_bar.to_vec()) // ∂R/∂s = I
    }
    fn input_vjp(&self, _port: usize, lambda: &[f64]) -> Result<Vec<f64>, RunError> {
        Ok(lambda.iter().map(|l| self.gain * l).collect()) // −(∂R/∂T)ᵀ λ = c λ
    }
    fn accumulate(
        &self,
        lambda: &[f64],
        _state_bar: &[f64],
        rev: &mut Reverse,
        inputs: &[usize],
    ) -> Result<Vec<(usize, Vec<f64>)>, RunError> {
        let t = self.temperature.as_ref().expect("solved");
        if let Some(id) = self.gain_id {
            // −λᵀ ∂R/∂c = λᵀ T.
            rev.grad.get_mut(id)[0] += lambda.iter().zip(t).map(|(l, t)| l * t).sum::<f64>();
        }
        inputs.iter().map(|&p| Ok((p, self.input_vjp(p, lambda)?))).collect()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// The Joule-heated bar (ρ(T) when `alpha_r` ≠ 0) read by a probe.
fn heated_bar_with_probe(alpha_r: f64, scheme: CycleScheme) -> CoupledProblem {
    let mesh = bar();
    // The thermal term: the misfit of one sensor to the ambient temperature (J then measures
    // the heating, not the 293 K it starts from).
    let sensor = ObjectiveTerm {
        weight: 1.0,
        kind: ObjectiveKind::Misfit { sensors: vec![[0.006, 0.001, 0.0005, 293.15]] },
    };
    let mut p = CoupledProblem::new(mesh.clone());
    p.add_field(Box::new(electrical(&mesh, "domain", alpha_r))).unwrap();
    p.add_field(Box::new(thermal(&mesh, "domain", vec![sensor]))).unwrap();
    p.add_field(Box::new(Probe {
        gain: 1.0,
        target: 293.15,
        gain_id: None,
        temperature: None,
        s: None,
    }))
    .unwrap();
    p.add_transfer("joule_heat", "electrical", "joule_heat", "thermal", "heat_source").unwrap();
    p.add_transfer("reading", "thermal", "temperature", "probe", "temperature").unwrap();
    if alpha_r != 0.0 {
        p.add_transfer("resistivity", "thermal", "temperature", "electrical", "temperature")
            .unwrap();
    }
    p.cycle.scheme = scheme;
    for name in [
        "probe.gain",
        "electrical.alpha_r.domain",
        "load.xmin.voltage",
        "thermal.k.domain",
        "bc.zmax.h",
        "mesh.coordinates",
    ] {
        p.register(name, None).unwrap();
    }
    p
}

#[test]
fn a_field_defined_outside_the_engine_joins_the_graph_and_its_gradient() {
    for alpha_r in [0.0, 2e-3] {
        let mut p = heated_bar_with_probe(alpha_r, CycleScheme::Monolithic);
        let want = if alpha_r == 0.0 {
            "electrical → thermal → probe"
        } else {
            "[electrical ⇄ thermal] → probe"
        };
        assert_eq!(p.graph().to_string(), want);
        let r = p.taylor_test(&TaylorParams::default(), |_| {}).unwrap();
        assert!(r.passed && r.min_rate() >= 1.9, "α_R = {alpha_r}:\n{}", r.table());
        for t in p.taylor_test_per_parameter(&TaylorParams::default(), |_| {}).unwrap() {
            assert!(t.passed, "α_R = {alpha_r}: {}: {}\n{}", t.name, t.verdict, t.result.table());
        }
    }
}

#[test]
fn both_cycle_schemes_give_one_state_and_one_gradient() {
    let mut results = Vec::new();
    for scheme in [CycleScheme::Monolithic, CycleScheme::Staggered] {
        let mut p = heated_bar_with_probe(2e-3, scheme);
        let (j, g, _) = p.gradient().unwrap();
        let report = &p.cycle_reports[0];
        assert_eq!(report.fields, ["electrical", "thermal"]);
        assert!(report.adjoint_iterations >= 1, "{report:?}");
        let flat = g.flatten(&gradfem_solvers::params::ParamVector::all(p.registry()));
        results.push((j, flat));
    }
    let ((j0, g0), (j1, g1)) = (&results[0], &results[1]);
    assert!((j0 - j1).abs() <= 1e-9 * j0.abs(), "J {j0} vs {j1}");
    let scale = g0.iter().fold(0.0_f64, |m, v| m.max(v.abs()));
    for (a, b) in g0.iter().zip(g1) {
        assert!((a - b).abs() <= 1e-7 * scale, "{a} vs {b}");
    }
}

#[test]
fn a_transfer_onto_cells_the_target_does_not_cover_is_a_located_error() {
    let mesh = bar();
    let mut p = CoupledProblem::new(mesh.clone());
    p.add_field(Box::new(electrical(&mesh, "domain", 0.0))).unwrap();
    p.add_field(Box::new(thermal(&mesh, "left", Vec::new()))).unwrap();
    let e = p
        .add_transfer("joule_heat", "electrical", "joule_heat", "thermal", "heat_source")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("transfer 'joule_heat'") && e.contains("cell ") && e.contains("thermal"),
        "{e}"
    );
    // Unknown fields and ports are named.
    let e = p.add_transfer("x", "electrical", "nope", "thermal", "heat_source").unwrap_err();
    assert!(e.to_string().contains("no output 'nope'"), "{e}");
    let e = p.add_transfer("x", "magnetic", "a", "thermal", "heat_source").unwrap_err();
    assert!(e.to_string().contains("'magnetic'") && e.to_string().contains("electrical, thermal"));
    // The layouts of a nodal output and a point input do not match.
    let e = p.add_transfer("x", "electrical", "potential", "thermal", "heat_source").unwrap_err();
    assert!(e.to_string().contains("layouts do not match"), "{e}");
}

#[test]
fn an_unknown_parameter_lists_the_whole_problem_s_names() {
    let mut p = heated_bar_with_probe(0.0, CycleScheme::Monolithic);
    let e = p.register("probe.offset", None).unwrap_err().to_string();
    assert!(
        e.contains("probe.gain")
            && e.contains("thermal.k.domain")
            && e.contains("mesh.coordinates"),
        "{e}"
    );
}
