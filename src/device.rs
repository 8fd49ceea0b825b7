//! Forward solve and per-element gradient of a steady, linear field on a device (the GPU
//! backend `gradfem-gpu`, or its CPU twin): the thermal field through
//! [`ThermalProblem::device_gradient`](crate::thermal::ThermalProblem::device_gradient), the
//! linear elastic field through [`elastic_gradient`].

use gradfem_coupling::RunError;
use gradfem_coupling::fields::mechanical::MechanicalField;
use gradfem_gpu::{DeviceSystem, Seed};
use gradfem_mechanical::ObjectiveKind;

pub use gradfem_gpu::{CgParams, Device, GpuError, Preconditioner};

/// A forward solve and the gradient of the objective with respect to a per-element
/// coefficient (the conductivity k_e or Young's modulus E_e of every volume element).
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceGradient {
    /// What ran it: `cuda (<device>)`, `cpu-twin`, or `cpu (<linear solver>)`.
    pub backend: String,
    /// The objective J.
    pub objective: f64,
    /// dJ/dc_e for every volume element, in model element order.
    pub gradient: Vec<f64>,
    /// The nodal solution: temperature, or displacement (`3·node + i`); empty when the
    /// objective was evaluated on the device (the compliance of [`elastic_gradient`]).
    pub solution: Vec<f64>,
    /// Forward and adjoint CG iterations (device runs; an adjoint answered from the forward
    /// solution counts 0).
    pub cg_iterations: Option<[usize; 2]>,
    /// Seconds of the forward solve (device: assembly, CG, download of the solution).
    pub forward_s: f64,
    /// Seconds of the objective, adjoint solve and gradient.
    pub gradient_s: f64,
    /// Seconds setting the device up (compiling the kernels, uploading the mesh); 0 on the CPU.
    pub setup_s: f64,
}

/// One forward solve of the linear elastic `field` and dJ/dE_e of its objective with respect
/// to the Young's modulus of every volume element, by the device pipeline on `device`
/// ([`Device::Cuda`]: the GPU; [`Device::Cpu`]: the pipeline's CPU twin, one thread), at the
/// field's current E and ν, CG preconditioned by `preconditioner` (Jacobi, or AMG with the
/// rigid-body modes and, on quadratic cells, from the vertices' displacement; its hierarchy
/// built on the host once per call). The field's own solution
/// is left as it was.
///
/// A compliance objective under homogeneous constraints and without thermal strain runs
/// wholly on the device: its value
/// is a device dot product and its adjoint the forward solution (no second solve), so only E
/// goes in and J and dJ/dE come out (the result's `solution` is empty). Any other objective is
/// evaluated on the host from the downloaded displacement, its ∂J/∂u seeds the device
/// adjoint, and explicit ∂J/∂E_e terms (von Mises) are added to the result.
///
/// Errors name the reason: no `cuda` feature, driver, device or NVRTC; what the model has
/// that the device kernels do not cover (mixed or other cells); CG that does not converge.
pub fn elastic_gradient(
    field: &MechanicalField,
    device: Device,
    cg: &CgParams,
    preconditioner: Preconditioner,
) -> Result<DeviceGradient, RunError> {
    let err = |e: GpuError| RunError::Setup(format!("mechanical on the {device} device: {e}"));
    let model = &field.model;
    let system = DeviceSystem::elastic(model, field.pattern())
        .map_err(err)?
        .with_coarse_space(field.vertex_coarse_space());
    let compliance_only =
        field.objective.iter().all(|t| matches!(t.kind, ObjectiveKind::Compliance));
    let self_adjoint = system.compliance_is_self_adjoint().is_ok();
    let mut explicit = Vec::new();
    let objective = |u: &[f64]| {
        let e = gradfem_mechanical::linear::objective::evaluate(model, &field.objective, u, false)
            .map_err(|e| GpuError::Input(e.to_string()))?;
        explicit = e.d_young_elem;
        Ok((e.value, Seed::Vector(e.d_displacement)))
    };
    let young = &model.young_elem[..model.n_volume_elements()];
    let run = if compliance_only && self_adjoint {
        let weight = field.objective.iter().map(|t| t.weight).sum();
        gradfem_gpu::run_compliance_on(device, &system, young, cg, preconditioner, weight)
    } else {
        gradfem_gpu::run_on(device, &system, young, cg, preconditioner, objective)
    }
    .map_err(err)?;
    let mut gradient = run.gradient;
    for (g, x) in gradient.iter_mut().zip(&explicit) {
        *g += x;
    }
    Ok(DeviceGradient {
        backend: run.backend,
        objective: run.objective,
        gradient,
        solution: run.solution,
        cg_iterations: Some([run.forward_cg.iterations, run.adjoint_cg.iterations]),
        forward_s: run.forward_s,
        gradient_s: run.objective_s + run.gradient_s,
        setup_s: run.setup_s,
    })
}
