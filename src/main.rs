//! The `gradfem` command line.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use gradfem::app::{self, DEFAULT_PROBLEM};
use gradfem::mesh_report;
use gradfem::problem::ProblemFile;
use gradfem::progress::{Progress, ProgressMode};
use gradfem_solvers::taylor::TaylorParams;

/// Differentiable multiphysics finite elements: solve, and get the gradient of an objective with
/// respect to every registered parameter by the adjoint method.
///
/// With no command, runs the embedded default problem (the electro-thermo-mechanical
/// microactuator: solve, gradient, Taylor test, a short design optimization) and writes its
/// results to ./results/microactuator_builtin.
#[derive(Parser, Debug)]
#[command(name = "gradfem", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Print only errors (no progress, no tables).
    #[arg(long, global = true)]
    quiet: bool,
    /// Build a generated mesh even when its estimated memory exceeds the memory available.
    #[arg(long, global = true)]
    allow_large: bool,
    /// Refuse an ANSYS result file cut short of the length its header declares (by default
    /// its whole records are read, with a warning).
    #[arg(long, global = true)]
    strict: bool,
    /// Where to solve: `cpu` or `cuda` (overrides the problem file's `[solver] device`). With
    /// `cuda` the linear fields' systems are solved on the GPU (AMG-PCG); without a usable
    /// GPU it answers with the reason (no `cuda` feature, no driver, device or NVRTC).
    #[arg(long, global = true, value_name = "cpu|cuda")]
    device: Option<String>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Solve a problem file, write results.h5 + results.xdmf and print a summary.
    Run {
        /// Problem file (TOML).
        file: PathBuf,
        /// Print the summary as one JSON object (keys name quantities with their units).
        #[arg(long)]
        json: bool,
        /// Output directory (default: the problem's [output] directory, else
        /// ./results/<problem file name without .toml>).
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Solve, then compute the gradient of the objective with respect to every registered
    /// parameter; writes gradients.json (and per-element gradients as cell fields in the XDMF).
    Gradient {
        /// Problem file (TOML).
        file: PathBuf,
        /// Print gradients.json to standard output as well.
        #[arg(long)]
        json: bool,
        /// Output directory (default: the problem's [output] directory, else
        /// ./results/<problem file name without .toml>).
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Optimize the registered parameters (MMA with `[[optimize.constraint]]` entries
    /// `quantity ≤ upper`, bounded L-BFGS without; `[optimize] method` chooses). Writes
    /// history.csv, history.png and the final design's results. Ctrl-C stops cleanly, keeping
    /// the best design so far; `--resume` continues from the history it left.
    Optimize {
        /// Problem file (TOML) with `[parameters] register` and optionally `[optimize]`.
        file: PathBuf,
        /// Print the outcome as one JSON object.
        #[arg(long)]
        json: bool,
        /// Output directory (default: the problem's [output] directory, else
        /// ./results/<problem file name without .toml>).
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Write history.csv and history.png into DIR after every iteration, to follow the
        /// run while it goes.
        #[arg(long, value_name = "DIR")]
        watch: Option<PathBuf>,
        /// Continue an interrupted run from the last row of the output directory's
        /// history.csv (scalar design parameters; iterations and evaluations count on).
        #[arg(long)]
        resume: bool,
    },
    /// Check the gradient by a Taylor test: prints the remainders and their rates; the exit code
    /// is 0 when the observed rate reaches the minimum (`[taylor] min_rate`, default 1.9), 1
    /// otherwise. The combined test perturbs every registered parameter at once, along a seeded
    /// random direction scaled by each entry's magnitude; `--per-parameter` adds one test per
    /// registered parameter in a direction of its own, and fails when any fails.
    CheckGradient {
        /// Problem file (TOML).
        file: PathBuf,
        /// Print the Taylor table as JSON.
        #[arg(long)]
        json: bool,
        /// Also test each registered parameter on its own (scalars by a step of their own
        /// scale, vector parameters in the seeded random direction restricted to their block):
        /// a table in the text output, `per_parameter` in the JSON.
        #[arg(long)]
        per_parameter: bool,
        /// Also test the Hessian: the second-order Taylor test along the same direction, whose
        /// remainders |J(p + hδp) − J − h∇J·δp − ½h²δpᵀHδp| must fall at rate ≥ 2.9 (exact
        /// Hessian-vector products; steady thermal, electro-thermal, thermo-elastic and
        /// finite-strain problems, and problems in time, a field stepped on a cycle included).
        #[arg(long)]
        second_order: bool,
    },
    /// The exact Hessian of the objective over the registered parameters (one Hessian-vector
    /// product by the second-order adjoint per entry), its eigen-directions and, for a
    /// least-squares misfit (temperature sensors, finite-strain force and displacement curves,
    /// or a transient run's measured series), the Laplace posterior (covariance, standard
    /// deviations, correlations) beside the Gauss–Newton approximation; writes hessian.json
    /// and, for a misfit, posterior.png (marginals and pairwise ellipses); with `--direction`,
    /// one product instead. Steady thermal, electro-thermal, linear thermo-elastic and
    /// finite-strain problems, and problems in time (a field stepped on a cycle included).
    Hessian {
        /// Problem file (TOML) with `[parameters] register`.
        file: PathBuf,
        /// The observations' noise σ for the posterior of a misfit, in their unit (K for
        /// sensors, N for reaction forces; default: estimated from the residuals at the current
        /// parameters, which should be the fitted ones).
        #[arg(long)]
        noise: Option<f64>,
        /// One Hessian-vector product H·δp instead of the dense Hessian: δp as NAME=VALUE for a
        /// registered parameter (repeat for several; every entry of a per-element parameter
        /// takes VALUE; names left out are zero). Writes hessian_vector.json.
        #[arg(long = "direction", value_name = "NAME=VALUE")]
        direction: Vec<String>,
        /// Print hessian.json to standard output as well.
        #[arg(long)]
        json: bool,
        /// Output directory (default: the problem's [output] directory, else
        /// ./results/<problem file name without .toml>).
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Print counts per cell type, groups with dimension, count and measure, the bounding box and
    /// the quality summary of a mesh (.msh); for ANSYS files (.rst, .rth, .cdb) also the result
    /// sets, DOFs and element types.
    MeshInfo {
        /// Mesh file.
        file: PathBuf,
        /// Print as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Import an ANSYS result file (.rst, .rth) or archive (.cdb): write the mesh and the nodal
    /// fields of one result set to HDF5 + XDMF (.h5/.xdmf) or to CSV (.csv: node,x,y,z, then
    /// the DOFs, one row per node in ascending ANSYS node number).
    ImportAnsys {
        /// ANSYS file (.rst, .rth, .rmg, .cdb).
        file: PathBuf,
        /// Result set, 1-based.
        #[arg(long, default_value_t = 1)]
        set: usize,
        /// Output file (.h5, .xdmf or .csv).
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Fit hyperelastic material parameters to measured curves: homogeneous tests (uniaxial,
    /// equibiaxial, pure shear; Ogden, Neo-Hookean) or full specimens (mode = "fem":
    /// [hyperelastic] problem files with measured misfits, sharing the fitted parameters):
    /// parameters with standard errors, the misfit of each experiment, identify.json and
    /// fit.png (data against fitted curves).
    Identify {
        /// Identification file (.toml: [[experiment]] tables, with [model] or [[parameter]]).
        file: PathBuf,
        /// Print the report as one JSON object.
        #[arg(long)]
        json: bool,
        /// Output directory (default: ./results/<identification file name without .toml>).
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Propagate uncertainty: sample the `[uq]` table's inputs (Monte Carlo, Latin hypercube
    /// or scrambled Sobol), solve each sample and report mean, standard deviation, quantiles
    /// with standard errors, violation probabilities and first-order variance shares from
    /// the adjoint gradient at the means. Writes uq.json, samples.json, samples.csv and
    /// convergence.png; the samples go to parts/ chunk by chunk, so a rerun resumes. A failed
    /// sample is reported by its index and the others go on. Under `mpirun` (built with the
    /// `mpi` feature) the ranks share the samples and rank 0 writes the result.
    Uq {
        /// Problem file (TOML) with a [uq] table.
        #[arg(required_unless_present = "reduce")]
        file: Option<PathBuf>,
        /// Print the report (uq.json) to standard output as well.
        #[arg(long)]
        json: bool,
        /// Output directory (default: the problem's [output] directory, else
        /// ./results/<problem file name without .toml>).
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Run shard I of N (0-based): the chunks c with c mod N = I, written to parts/;
        /// `--reduce` makes the result once every shard is done.
        #[arg(long, value_name = "I/N", conflicts_with = "reduce")]
        shard: Option<String>,
        /// Reduce the parts in DIR (an output directory of sharded runs) into the result one
        /// unsharded run writes, byte for byte.
        #[arg(long, value_name = "DIR", conflicts_with_all = ["file", "output"])]
        reduce: Option<PathBuf>,
    },
    /// Convert a mesh to HDF5 + XDMF (opens in ParaView), with its group ids as cell data.
    MeshConvert {
        /// Input mesh (.msh).
        input: PathBuf,
        /// Output file (.xdmf; the .h5 is written beside it).
        output: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(gradfem::progress::colors_enabled())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", error_chain(&e));
            ExitCode::from(2)
        }
    }
}

/// The error and its causes, each cause once: typed errors often repeat their source in their
/// own message, so a cause whose text is already shown is skipped.
fn error_chain(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let c = cause.to_string();
        if text.contains(&c) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&c);
    }
    text
}

/// The Hessian report as tables: eigenvalues with their leading entries, and the posterior.
fn print_hessian(r: &gradfem::hessian::HessianReport) {
    println!(
        "Hessian of J = {:.6e} over {} entries ({} products in {:.2} s; asymmetry {:.1e})",
        r.objective,
        r.entries.len(),
        r.hessian_products,
        r.seconds,
        r.asymmetry
    );
    println!(
        "  eigenvalues of the scaled Hessian (curvature per relative change), smallest first:"
    );
    for d in r.eigen.iter().take(10) {
        let mut lead: Vec<(usize, f64)> = d.vector.iter().copied().enumerate().collect();
        lead.sort_by(|a, b| b.1.abs().total_cmp(&a.1.abs()));
        let parts: Vec<String> =
            lead.iter().take(3).map(|(i, v)| format!("{v:+.3} {}", r.entries[*i])).collect();
        println!("    {:>12.4e}  along {}", d.eigenvalue, parts.join(", "));
    }
    if !r.positive_definite {
        println!(
            "  not positive definite: the objective is not convex here (or the data do not determine every direction above)"
        );
    }
    if let Some(p) = &r.posterior {
        println!(
            "  Laplace posterior ({} observations, noise σ = {:.4e} {}{}):",
            p.sensors,
            p.noise,
            p.unit,
            if p.noise_estimated { ", estimated from the residuals" } else { "" }
        );
        println!(
            "    {:<32} {:>14} {:>14} {:>14}",
            "parameter", "value", "std dev", "Gauss–Newton"
        );
        for (i, name) in r.entries.iter().enumerate() {
            println!(
                "    {:<32} {:>14.6e} {:>14.4e} {:>14.4e}",
                name, r.values[i], p.std_dev[i], p.gauss_newton_std_dev[i]
            );
        }
        println!("    max |H − GᵀG| / max |H| = {:.2e}", p.gauss_newton_difference);
    }
}

/// A stage's progress: a spinner on a terminal, plain lines in a log, nothing when `quiet`.
fn spinner(quiet: bool, label: &str) -> Progress {
    Progress::spinner(ProgressMode::detect(quiet), label)
}

/// Whether `--allow-large` was given (set once, before any problem is read).
static ALLOW_LARGE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// Whether `--strict` was given (set once, before any file is read).
static STRICT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// `--device`, when given (set once, before any problem is read).
static DEVICE: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Apply `--device` to a problem file read from disk.
fn apply_device(file: &mut ProblemFile) {
    if let Some(d) = DEVICE.get() {
        file.spec.solver.device = d.clone();
    }
}

fn load(path: &Path, quiet: bool) -> Result<(ProblemFile, app::Problem)> {
    let pb = spinner(quiet, "setting up");
    let mut file = ProblemFile::read(path)?;
    file.allow_large = ALLOW_LARGE.load(std::sync::atomic::Ordering::Relaxed);
    file.strict = STRICT.load(std::sync::atomic::Ordering::Relaxed);
    apply_device(&mut file);
    let problem = app::build_problem(&file)?;
    pb.finish();
    Ok((file, problem))
}

fn solve(problem: &mut app::Problem, file: &ProblemFile, quiet: bool) -> Result<()> {
    let pb = spinner(quiet, "solving");
    problem.solve().with_context(|| format!("{}: forward solve", file.path.display()))?;
    pb.finish();
    Ok(())
}

fn output_dir(file: &ProblemFile, output: Option<PathBuf>) -> PathBuf {
    output.unwrap_or_else(|| file.output_directory())
}

fn print_summary(s: &app::Summary) {
    println!("{}", if s.title.is_empty() { "gradfem run" } else { &s.title });
    // Without thermal unknowns the temperature is prescribed (a mechanical or finite-strain
    // problem without [thermal]): no heat balance and no thermal solver line then.
    let thermal_solved = s.unknowns > 0;
    println!("  nodes {}, elements {}, thermal unknowns {}", s.nodes, s.elements, s.unknowns);
    println!(
        "  temperature{}: min {:.4} K, mean {:.4} K, max {:.4} K",
        if thermal_solved { "" } else { " (prescribed)" },
        s.min_temperature_k,
        s.mean_temperature_k,
        s.max_temperature_k
    );
    if let (Some(i), Some(v), Some(r), Some(p)) =
        (s.current_a, s.voltage_v, s.resistance_ohm, s.joule_power_w)
    {
        println!(
            "  electrical: current {i:.6e} A, voltage {v:.6e} V, resistance {r:.6e} Ω, Joule power {p:.6e} W"
        );
    }
    if s.coupling_schedule.contains('→') || s.coupling_schedule.contains('⇄') {
        println!("  coupling: {}", s.coupling_schedule);
    }
    if let Some(c) = &s.coupling {
        let per_field: Vec<String> =
            c.fields.iter().zip(&c.field_s).map(|(f, t)| format!("{f} {t:.3} s")).collect();
        println!(
            "  coupling: {} {} iteration(s); {}, transfers {:.3} s",
            c.scheme,
            c.iterations,
            per_field.join(", "),
            c.transfer_s
        );
    }
    let hb = &s.heat_balance;
    if thermal_solved && s.transient.is_some() {
        println!(
            "  heat balance of the last step: generated {:.6e} W + flux in {:.6e} W = convection {:.6e} W + fixed {:.6e} W + stored {:.6e} W (imbalance {:.1e})",
            hb.generated_w,
            hb.flux_in_w,
            hb.convection_out_w,
            hb.fixed_out_w,
            hb.stored_w,
            hb.relative_imbalance()
        );
    } else if thermal_solved {
        println!(
            "  heat balance: generated {:.6e} W + flux in {:.6e} W = convection {:.6e} W + fixed {:.6e} W (imbalance {:.1e})",
            hb.generated_w,
            hb.flux_in_w,
            hb.convection_out_w,
            hb.fixed_out_w,
            hb.relative_imbalance()
        );
    }
    if let Some(init) = &s.initial_state {
        println!("  initial state: {init}");
    }
    if let Some(t) = &s.transient {
        println!(
            "  transient: {} steps to t = {:.6e} s, {} factorization(s), {} Newton iteration(s); max T over time {:.4} K (values above: last state)",
            t.steps,
            t.final_time_s,
            t.factorizations,
            t.newton_iterations,
            t.max_temperature_over_time_k
        );
    }
    if let Some(u) = s.tip_displacement_m {
        println!("  tip displacement: ({:+.6e}, {:+.6e}, {:+.6e}) m", u[0], u[1], u[2]);
    }
    if let (Some(vm), Some(umax)) = (s.max_von_mises_pa, s.max_displacement_m) {
        println!("  mechanical: max von Mises {vm:.6e} Pa, max |u| {umax:.6e} m");
    }
    if let Some(fb) = &s.force_balance {
        println!(
            "  force balance: external ({:.3e}, {:.3e}, {:.3e}) N, relative imbalance {:.1e}",
            fb.external[0], fb.external[1], fb.external[2], fb.relative_imbalance
        );
    }
    if let Some(h) = &s.hyperelastic {
        let factors: Vec<String> = h.load_factors.iter().map(|f| format!("{f:.4}")).collect();
        println!(
            "  finite strain: {} load step(s) [{}], {} Newton iteration(s), {} cut-back(s), {:.3} s",
            h.load_factors.len(),
            factors.join(", "),
            h.newton_iterations,
            h.cut_backs,
            h.solve_s
        );
        for (group, f) in &h.reactions {
            println!(
                "    reaction on {group} at the last step: ({:+.6e}, {:+.6e}, {:+.6e}) N",
                f[0], f[1], f[2]
            );
        }
    }
    println!("  objective J = {:.10e}", s.objective);
    for p in &s.temperature_peaks {
        let what = if p.kind == "peak" { "KS aggregate" } else { "p-norm mean" };
        println!(
            "    term {} ({} over {}): {what} {:.4} K, true peak {:.4} K",
            p.term + 1,
            p.kind,
            p.group,
            p.aggregate_k,
            p.true_peak_k
        );
    }
    // A transient run reports its steps, Newton iterations and factorizations above.
    if thermal_solved && s.transient.is_none() {
        println!(
            "  thermal: {} solver, {} Newton iteration(s); assembly {:.3} s, factor {:.3} s, solve {:.3} s",
            s.timings.linear_solver,
            s.timings.newton_iterations,
            s.timings.assembly_s,
            s.timings.factor_s,
            s.timings.solve_s
        );
    }
}

fn print_gradients(report: &app::GradientReport) {
    println!("  gradient of J = {:.10e}:", report.objective);
    for (name, g) in &report.gradients {
        match g {
            app::GradValue::Scalar(v) => println!("    dJ/d{name:<28} = {v:+.6e}"),
            app::GradValue::Array(v) => {
                let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
                println!("    dJ/d{name:<28} : {} entries, 2-norm {norm:.6e}", v.len());
            }
        }
    }
    let t = &report.timings;
    if let (Some(forward), Some(gradient)) = (t.forward_total_s, t.gradient_total_s) {
        println!(
            "  forward {forward:.3} s, gradient {gradient:.3} s (every field, wall clock; thermal adjoint solve {:.3} s)",
            t.gradient.adjoint_solve_s
        );
    }
}

/// The Taylor settings of a problem file's `[taylor]` table, checked.
fn taylor_params(file: &ProblemFile) -> Result<TaylorParams> {
    let t = &file.spec.taylor;
    if !(t.h0 > 0.0 && t.h0.is_finite()) {
        bail!("{}: [taylor] h0 = {} must be a positive number", file.path.display(), t.h0);
    }
    if t.steps < 2 || t.steps > 60 {
        bail!(
            "{}: [taylor] steps = {}: a rate needs at least 2 steps, and beyond 60 halvings of h0 \
             the remainders are round-off",
            file.path.display(),
            t.steps
        );
    }
    if !t.min_rate.is_finite() {
        bail!("{}: [taylor] min_rate = {} must be a number", file.path.display(), t.min_rate);
    }
    Ok(TaylorParams { h0: t.h0, steps: t.steps, min_rate: t.min_rate })
}

/// An error unless some parameter is registered.
/// The mesh of a gmsh file, or of a gradfem results file (`.h5`/`.xdmf`, or any file that
/// starts with the HDF5 signature): HDF5 is recognised by its first bytes, not taken for gmsh.
fn read_mesh(path: &Path) -> Result<gradfem_mesh::Mesh> {
    const HDF5_SIGNATURE: &[u8; 8] = b"\x89HDF\r\n\x1a\n";
    let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
    let mut head = [0u8; 8];
    let is_hdf5 = std::fs::File::open(path)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head))
        .is_ok_and(|()| &head == HDF5_SIGNATURE);
    if is_hdf5 || matches!(ext.as_deref(), Some("h5" | "xdmf")) {
        let data = gradfem_io::h5::read_results(path).with_context(|| {
            format!("{}: an HDF5 file is read as gradfem results, with their mesh", path.display())
        })?;
        return Ok(data.mesh);
    }
    Ok(gradfem_io::gmsh::read_msh(path)?)
}

/// A gradient, a Taylor test or an optimization of a problem file needs its `[[objective]]`:
/// the default objective of `gradfem run` (the mean temperature, or the compliance) is not
/// something to differentiate silently.
fn need_objective(file: &ProblemFile, command: &str) -> Result<()> {
    if file.spec.objectives.is_empty() {
        bail!(
            "{}: `gradfem {command}` needs an [[objective]]: the gradient of what? (e.g. \
             [[objective]] kind = \"average\", group = \"...\"; see docs/problem-file.md)",
            file.path.display()
        );
    }
    Ok(())
}

fn need_parameters(problem: &app::Problem, file: &ProblemFile) -> Result<()> {
    if problem.registry().is_empty() {
        bail!(
            "{}: no parameters are registered ([parameters] register = [...])",
            file.path.display()
        );
    }
    Ok(())
}

fn taylor(
    problem: &mut app::Problem,
    file: &ProblemFile,
    quiet: bool,
) -> Result<gradfem_solvers::taylor::TaylorResult> {
    let params = taylor_params(file)?;
    need_parameters(problem, file)?;
    let pb = Progress::bar(ProgressMode::detect(quiet), "Taylor test", params.steps as u64 + 1);
    let result = problem.taylor_test(&params, |i| pb.set_position(i as u64))?;
    pb.finish();
    Ok(result)
}

/// One Taylor test per registered parameter (`check-gradient --per-parameter`).
fn taylor_per_parameter(
    problem: &mut app::Problem,
    file: &ProblemFile,
    quiet: bool,
) -> Result<Vec<app::ParameterTaylor>> {
    let params = taylor_params(file)?;
    need_parameters(problem, file)?;
    let total = 1 + problem.registry().len() * params.steps;
    let mode = ProgressMode::detect(quiet);
    let pb = Progress::bar(mode, "Taylor tests per parameter (solves)", total as u64);
    let parts = problem
        .taylor_test_per_parameter(&params, |i| pb.set_position(i as u64))
        .context("Taylor tests per parameter")?;
    pb.finish();
    Ok(parts)
}

/// A rate for the tables: three decimals, `-` when none was measured.
fn rate_text(r: f64) -> String {
    if r.is_finite() { format!("{r:.3}") } else { "-".to_string() }
}

/// The direction of the combined Taylor test, one line.
fn print_taylor_direction(d: &app::TaylorDirection) {
    println!(
        "direction: {}; {}; |dm| = {:.4e}, h0 = {:e}",
        d.seed.map_or("±1".to_string(), |s| format!("u_i in [-1, 1) from SplitMix64 seed {s}")),
        d.scaling,
        d.norm,
        d.h0
    );
}

/// The table of the per-parameter Taylor tests.
fn print_per_parameter(parts: &[app::ParameterTaylor], params: &TaylorParams) {
    println!(
        "per-parameter Taylor tests (h0 = {:e}, {} steps, threshold {}; a scalar is stepped by \
         ±h0 of its magnitude, a vector parameter along seed {} restricted to its block):",
        params.h0,
        params.steps,
        params.min_rate,
        app::TAYLOR_DIRECTION_SEED
    );
    let width = parts.iter().map(|p| p.name.len()).max().unwrap_or(9).max(9);
    println!(
        "  {:<width$}  {:>7}  {:<24}  {:<30}  {:>8}  verdict",
        "parameter", "entries", "direction", "rates", "min rate"
    );
    for p in parts {
        let direction = match (p.direction.step, p.direction.seed) {
            (Some(step), _) => format!("step {step:+.3e}"),
            (None, Some(seed)) => format!("seed {seed}, |dm| {:.3e}", p.direction.norm),
            (None, None) => format!("|dm| {:.3e}", p.direction.norm),
        };
        let rates: Vec<String> = p
            .rates
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let t = rate_text(*r);
                if i < p.rates_used { t } else { format!("({t})") }
            })
            .collect();
        println!(
            "  {:<width$}  {:>7}  {:<24}  {:<30}  {:>8}  {}",
            p.name,
            p.entries,
            direction,
            rates.join(" "),
            rate_text(p.observed_min_rate),
            p.verdict
        );
    }
    for p in parts.iter().filter(|p| !p.passed || p.note.is_some()) {
        if let Some(note) = &p.note {
            println!("  {}: {note}", p.name);
        }
    }
    let failed: Vec<&str> = parts.iter().filter(|p| !p.passed).map(|p| p.name.as_str()).collect();
    if parts.iter().any(|p| p.rates_used < p.rates.len()) {
        println!("  (rates in parentheses: remainders at round-off, not used for the verdict)");
    }
    if failed.is_empty() {
        println!("PASSED: every parameter");
    } else {
        println!("FAILED: {}", failed.join(", "));
    }
}

/// The correlation matrix of an identification, with its strongly correlated pairs.
fn print_correlation(c: &gradfem::identify::Correlation) {
    if c.names.len() < 2 {
        return;
    }
    println!("  correlation of the fitted parameters (covariance σ² (JᵀJ)⁻¹):");
    let width = c.names.iter().map(|n| n.chars().count()).max().unwrap_or(0);
    let header: Vec<String> =
        (1..=c.names.len()).map(|k| format!("{:>7}", format!("[{k}]"))).collect();
    println!("    {:width$}      {}", "", header.join(" "));
    for (k, (name, row)) in c.names.iter().zip(&c.matrix).enumerate() {
        let cells: Vec<String> = row
            .iter()
            .map(|r| if r.is_finite() { format!("{r:>+7.3}") } else { format!("{:>7}", "-") })
            .collect();
        println!("    {name:<width$} {:>4} {}", format!("[{}]", k + 1), cells.join(" "));
    }
    if c.matrix.iter().flatten().any(|r| r.is_nan()) {
        println!("    (not determined: JᵀJ is singular)");
    }
    let strong = c.strong_pairs(0.9);
    if !strong.is_empty() {
        let pairs: Vec<String> = strong
            .iter()
            .map(|&(i, j, r)| format!("{}–{} ({r:+.3})", c.names[i], c.names[j]))
            .collect();
        println!(
            "    strongly correlated (|ρ| > 0.9; the data determine these only together): {}",
            pairs.join(", ")
        );
    }
}

/// The output set of a run, written as one (see [`gradfem::io::output_set`]):
/// `results.xdmf`/`results.h5`, for a transient problem `time_history.csv` and
/// `time_history.png`, and `gradients.json` when a report is given; returns the XDMF path.
fn write_outputs(
    dir: &Path,
    pf: &ProblemFile,
    problem: &app::Problem,
    grad: Option<&gradfem_solvers::params::Gradient>,
    report: Option<&app::GradientReport>,
) -> Result<PathBuf> {
    let set = begin_set(dir)?;
    app::write_results(set.dir(), problem, grad)?;
    if let Some(h) = gradfem::time_history::TimeHistory::of(problem)? {
        h.write(set.dir(), &pf.spec.title).map_err(|e| anyhow::anyhow!("cannot write: {e}"))?;
    }
    if let Some(report) = report {
        app::write_gradients(&set.dir().join("gradients.json"), report)?;
    }
    commit_set(set)?;
    Ok(dir.join("results.xdmf"))
}

/// Start the output set of `dir`.
/// δp from `--direction NAME=VALUE` arguments: every entry of the named parameter takes
/// VALUE; names left out are zero.
fn parse_direction(
    problem: &gradfem::app::Problem,
    args: &[String],
) -> Result<gradfem_solvers::params::Gradient> {
    let reg = problem.registry();
    let mut dir = gradfem_solvers::params::Gradient::zeros(reg);
    for arg in args {
        let (name, value) = arg.split_once('=').ok_or_else(|| {
            anyhow::anyhow!("--direction {arg}: expected NAME=VALUE (e.g. thermal.k.domain=1.0)")
        })?;
        let value: f64 = value
            .trim()
            .parse()
            .map_err(|_| anyhow::anyhow!("--direction {arg}: '{value}' is not a number"))?;
        if !value.is_finite() {
            anyhow::bail!("--direction {arg}: the value must be finite");
        }
        let id = reg.id(name.trim()).map_err(|e| anyhow::anyhow!("--direction {arg}: {e}"))?;
        dir.get_mut(id).iter_mut().for_each(|v| *v = value);
    }
    Ok(dir)
}

fn begin_set(dir: &Path) -> Result<gradfem::io::output_set::OutputSet> {
    gradfem::io::output_set::OutputSet::begin(dir)
        .map_err(|e| anyhow::anyhow!("cannot write the outputs: {e}"))
}

/// Put a written output set in place.
fn commit_set(set: gradfem::io::output_set::OutputSet) -> Result<()> {
    let target = set.target().to_path_buf();
    set.commit().map(|_| ()).map_err(|e| {
        anyhow::anyhow!("cannot put the outputs in place at {}: {e}", target.display())
    })
}

fn run(cli: Cli) -> Result<ExitCode> {
    let quiet = cli.quiet;
    ALLOW_LARGE.store(cli.allow_large, std::sync::atomic::Ordering::Relaxed);
    STRICT.store(cli.strict, std::sync::atomic::Ordering::Relaxed);
    if let Some(d) = &cli.device {
        d.parse::<gradfem::thermal::Device>().map_err(|e| anyhow::anyhow!("--device {d}: {e}"))?;
        let _ = DEVICE.set(d.clone());
    }
    match cli.command {
        None => run_default(quiet),
        Some(Command::Run { file, json, output }) => {
            let (pf, mut problem) = load(&file, quiet || json)?;
            solve(&mut problem, &pf, quiet || json)?;
            let s = app::summary(&pf.spec.title, &problem)?;
            let dir = output_dir(&pf, output);
            let xdmf = write_outputs(&dir, &pf, &problem, None, None)?;
            if json {
                println!("{}", serde_json::to_string(&s)?);
            } else if !quiet {
                print_summary(&s);
                println!("  results: {}", xdmf.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Some(Command::Gradient { file, json, output }) => {
            let (pf, mut problem) = load(&file, quiet || json)?;
            need_objective(&pf, "gradient")?;
            let started = std::time::Instant::now();
            solve(&mut problem, &pf, quiet || json)?;
            let forward_s = started.elapsed().as_secs_f64();
            let pb = spinner(quiet || json, "adjoint gradient");
            let started = std::time::Instant::now();
            let (j, grad, timings) = problem.gradient()?;
            let gradient_s = started.elapsed().as_secs_f64();
            pb.finish();
            let mut report = app::gradient_report(&problem, j, &grad, timings);
            report.timings.forward_total_s = Some(forward_s);
            report.timings.gradient_total_s = Some(gradient_s);
            let dir = output_dir(&pf, output);
            let xdmf = write_outputs(&dir, &pf, &problem, Some(&grad), Some(&report))?;
            let gpath = dir.join("gradients.json");
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else if !quiet {
                print_gradients(&report);
                println!("  wrote {} and {}", gpath.display(), xdmf.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Some(Command::Optimize { file, json, output, watch, resume }) => {
            let (pf, mut problem) = load(&file, quiet || json)?;
            need_objective(&pf, "optimize")?;
            let mut settings = gradfem::optimize::settings(&pf, &problem)?;
            settings.watch = watch;
            let dir = output_dir(&pf, output);
            if resume {
                let history = dir.join("history.csv");
                if !history.is_file() {
                    anyhow::bail!(
                        "--resume: {} does not exist (resume reads the history an interrupted run left in its output directory; -o names another)",
                        history.display()
                    );
                }
                settings.resume = Some(history);
            }
            optimize(&mut problem, &settings, &dir, quiet, json)?;
            Ok(ExitCode::SUCCESS)
        }
        Some(Command::Hessian { file, noise, json, output, direction }) => {
            let (pf, mut problem) = load(&file, quiet || json)?;
            need_objective(&pf, "hessian")?;
            solve(&mut problem, &pf, quiet || json)?;
            if !direction.is_empty() {
                let dir = parse_direction(&problem, &direction)?;
                let pb = spinner(quiet || json, "Hessian-vector product");
                let hv = problem.hessian_vector(&dir)?;
                pb.finish();
                let reg = problem.registry();
                let mut by_name = serde_json::Map::new();
                let mut dir_by_name = serde_json::Map::new();
                let mut curvature = 0.0;
                for (id, spec) in reg.iter() {
                    curvature +=
                        dir.get(id).iter().zip(hv.get(id)).map(|(a, b)| a * b).sum::<f64>();
                    by_name.insert(spec.name.clone(), serde_json::json!(hv.get(id)));
                    dir_by_name.insert(spec.name.clone(), serde_json::json!(dir.get(id)));
                }
                let report = serde_json::json!({
                    "direction": dir_by_name,
                    "hessian_vector": by_name,
                    "curvature": curvature,
                });
                let out = output_dir(&pf, output);
                let set = begin_set(&out)?;
                let path = set.dir().join("hessian_vector.json");
                std::fs::write(&path, serde_json::to_string_pretty(&report)?).map_err(|e| {
                    anyhow::anyhow!(
                        "cannot write {}: {e}",
                        out.join("hessian_vector.json").display()
                    )
                })?;
                commit_set(set)?;
                if json {
                    println!("{}", serde_json::to_string(&report)?);
                } else if !quiet {
                    println!("H·δp (δpᵀHδp = {curvature:.6e}):");
                    for (name, v) in &by_name {
                        let v: Vec<f64> = serde_json::from_value(v.clone())?;
                        match v.as_slice() {
                            [x] => println!("  {name:<40} {x:.6e}"),
                            many => println!(
                                "  {name:<40} {} entries, |·|max {:.6e}",
                                many.len(),
                                many.iter().fold(0.0f64, |a, x| a.max(x.abs()))
                            ),
                        }
                    }
                    println!("  wrote {}", out.join("hessian_vector.json").display());
                }
                return Ok(ExitCode::SUCCESS);
            }
            let n = gradfem_solvers::params::ParamVector::all(problem.registry()).len();
            let pb = Progress::bar(
                ProgressMode::detect(quiet || json),
                "Hessian-vector products",
                n as u64,
            );
            let report =
                gradfem::hessian::compute(&mut problem, noise, |k, _| pb.set_position(k as u64))?;
            pb.finish();
            let dir = output_dir(&pf, output);
            let set = begin_set(&dir)?;
            let text = serde_json::to_string_pretty(&report)?;
            std::fs::write(set.dir().join("hessian.json"), &text).map_err(|e| {
                anyhow::anyhow!("cannot write {}: {e}", dir.join("hessian.json").display())
            })?;
            if report.posterior.is_some() {
                gradfem::hessian::plot_posterior(&report, &set.dir().join("posterior.png"))
                    .map_err(|e| {
                        anyhow::anyhow!("cannot draw {}: {e}", dir.join("posterior.png").display())
                    })?;
            }
            commit_set(set)?;
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else if !quiet {
                print_hessian(&report);
                println!("  wrote {}", dir.join("hessian.json").display());
                if report.posterior.is_some() {
                    println!("  wrote {}", dir.join("posterior.png").display());
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Some(Command::CheckGradient { file, json, per_parameter, second_order }) => {
            let (pf, mut problem) = load(&file, quiet || json)?;
            need_objective(&pf, "check-gradient")?;
            solve(&mut problem, &pf, quiet || json)?;
            let params = taylor_params(&pf)?;
            let result = taylor(&mut problem, &pf, quiet || json)?;
            let direction = problem.taylor_direction_report(&params);
            let parts = if per_parameter {
                Some(taylor_per_parameter(&mut problem, &pf, quiet || json)?)
            } else {
                None
            };
            let second = if second_order {
                let dir = problem.taylor_direction();
                let pb = spinner(quiet || json, "second-order Taylor test");
                let t = problem.taylor_test_second_order(&dir, params.h0, params.steps)?;
                pb.finish();
                Some(t)
            } else {
                None
            };
            let second_passed =
                second.as_ref().is_none_or(|t| t.min_rate().is_some_and(|r| r >= 2.9));
            let all_passed =
                result.passed && parts.iter().flatten().all(|p| p.passed) && second_passed;
            if json {
                let mut table = serde_json::json!({
                    "h": result.h,
                    "j0": result.j0,
                    "dj_dm": result.dj_dm,
                    "remainders": result.remainders,
                    "remainders_zeroth": result.remainders_zeroth,
                    "rates": result.rates,
                    "rates_zeroth": result.rates_zeroth,
                    "rates_used": result.rates_used,
                    "min_rate": result.threshold,
                    "observed_min_rate": result.min_rate(),
                    "passed": result.passed,
                    "verdict": result.verdict(),
                    "note": result.note,
                    "direction": direction,
                    "all_passed": all_passed,
                });
                if let Some(parts) = &parts {
                    table["per_parameter"] = serde_json::to_value(parts)?;
                }
                if let Some(t) = &second {
                    table["second_order"] = serde_json::to_value(t)?;
                    table["second_order"]["observed_min_rate"] = serde_json::json!(t.min_rate());
                    table["second_order"]["passed"] = serde_json::json!(second_passed);
                }
                println!("{table}");
            } else if !quiet {
                println!("{}", result.table());
                print_taylor_direction(&direction);
                if let Some(parts) = &parts {
                    println!();
                    print_per_parameter(parts, &params);
                }
                if let Some(t) = &second {
                    println!();
                    println!(
                        "second-order Taylor test (δpᵀHδp = {:.6e}): remainders should fall at rate 3",
                        t.second
                    );
                    println!(
                        "  {:>12} {:>16} {:>16} {:>8}",
                        "h", "first-order r", "second-order r", "rate"
                    );
                    for (i, h) in t.h.iter().enumerate() {
                        let rate =
                            if i > 0 { format!("{:.3}", t.rates[i - 1]) } else { "—".into() };
                        println!(
                            "  {:>12.4e} {:>16.6e} {:>16.6e} {:>8}",
                            h, t.remainders_first[i], t.remainders[i], rate
                        );
                    }
                    println!(
                        "  {}",
                        if second_passed {
                            "passed: rate ≥ 2.9"
                        } else {
                            "FAILED: rate below 2.9"
                        }
                    );
                }
            }
            Ok(if all_passed { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
        Some(Command::MeshInfo { file, json }) => {
            let report = if gradfem::ansys_import::is_ansys_path(&file) {
                let ansys = gradfem::ansys_import::AnsysFile::read(&file, cli.strict)?;
                mesh_report::MeshReport::for_ansys(&file, &ansys)
            } else {
                let mesh = read_mesh(&file)?;
                mesh_report::MeshReport::new(&file, &mesh)
            };
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                print!("{}", report.text());
            }
            Ok(ExitCode::SUCCESS)
        }
        Some(Command::ImportAnsys { file, set, output }) => {
            let s = gradfem::ansys_import::import(&file, set, &output, cli.strict)?;
            if !quiet {
                let set = s.set.map_or("mesh only".to_string(), |k| format!("result set {k}"));
                println!(
                    "wrote {} ({}; {} nodes, {} cells; fields: {})",
                    s.output,
                    set,
                    s.nodes,
                    s.cells,
                    if s.fields.is_empty() { "none".into() } else { s.fields.join(", ") }
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Some(Command::Identify { file, json, output }) => {
            let mut id = gradfem::identify::Identification::read(&file)?;
            // Under mpirun the ranks share the FEM experiments; rank 0 reports.
            #[cfg(feature = "mpi")]
            let ranks = if gradfem::ranks::launched_by_mpirun() {
                let r = gradfem::ranks::Ranks::init().map_err(anyhow::Error::msg)?;
                if let Some(f) = id.fem_mut() {
                    let dir = output
                        .clone()
                        .unwrap_or_else(|| gradfem::problem::default_output_directory(&file));
                    f.set_split(r.split_logged(&dir));
                }
                Some(r)
            } else {
                None
            };
            #[cfg(feature = "mpi")]
            let root = ranks.as_ref().is_none_or(|r| r.rank == 0);
            #[cfg(not(feature = "mpi"))]
            let root = true;
            let quiet = quiet || !root;
            let mode = ProgressMode::detect(quiet || json);
            let pb = Progress::bar(mode, "fitting (starting points)", id.starts() as u64);
            let (report, x) = id.run(|p| {
                pb.set_position(p.starts_done as u64);
                // Homogeneous fits report no iterations.
                if p.iteration > 0 {
                    pb.set_message(format!(
                        "start {}: step {}, Σ w (q − m)² = {:.4e}",
                        p.starts_done + 1,
                        p.iteration,
                        p.objective
                    ));
                }
            })?;
            pb.finish();
            if !root {
                // The curves of the plot are an exchange every rank takes part in.
                if let Some(f) = id.fem_mut() {
                    f.curves(&x)?;
                }
                return Ok(ExitCode::SUCCESS);
            }
            let dir = output.unwrap_or_else(|| gradfem::problem::default_output_directory(&file));
            let (json_path, png) = id.write(&dir, &report, &x)?;
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else if !quiet {
                println!(
                    "{} — {} fitted to {} experiment(s), best of {} start(s)",
                    if report.title.is_empty() { "identify" } else { &report.title },
                    report.model,
                    report.experiments.len(),
                    report.starts
                );
                if let Some(c) = &report.parameter_convention {
                    println!("  convention: {c}");
                }
                for (name, v) in &report.parameters {
                    match report.std_errors.get(name) {
                        Some(se) => println!("  {name:>8} = {v:>14.6e} ± {se:.2e}"),
                        None => println!("  {name:>8} = {v:>14.6e} (fixed)"),
                    }
                }
                if !report.mu_tilde.is_empty() {
                    let published: Vec<String> =
                        report.mu_tilde.iter().map(|(n, v)| format!("{n} = {v:.6e}")).collect();
                    println!("  Ogden's published moduli μ̃_p = 2μ_p/α_p: {}", published.join(", "));
                }
                print_correlation(&report.correlation);
                if let Some(post) = report.laplace.as_ref().and_then(|l| l.posterior.as_ref()) {
                    let l = report.laplace.as_ref().expect("the posterior's report");
                    println!(
                        "  Laplace posterior (exact Hessian; σ = {:.3e}): std dev vs Gauss–Newton",
                        post.noise
                    );
                    for (i, name) in l.entries.iter().enumerate() {
                        println!(
                            "  {name:>8}   {:.3e} vs {:.3e} ({:+.0} %)",
                            post.std_dev[i],
                            post.gauss_newton_std_dev[i],
                            100.0 * (post.std_dev[i] / post.gauss_newton_std_dev[i] - 1.0)
                        );
                    }
                    if let Some(weakest) = l.eigen.first() {
                        let (k, _) =
                            weakest.vector.iter().enumerate().fold((0, 0.0f64), |b, (k, v)| {
                                if v.abs() > b.1 { (k, v.abs()) } else { b }
                            });
                        println!(
                            "  least determined direction (scaled curvature {:.3e}): mostly {}",
                            weakest.eigenvalue, l.entries[k]
                        );
                    }
                }
                for e in &report.experiments {
                    let abs = e.rms_error.map_or(String::new(), |a| format!(", rms error {a:.4e}"));
                    println!(
                        "  {:<16} {:>3} points, rms relative error {:6.2} %{abs}",
                        e.name,
                        e.points,
                        100.0 * e.rms_relative_error
                    );
                }
                if let Some(g) = report.shear_modulus {
                    println!("  initial shear modulus Σμ = {g:.6e}");
                }
                if let Some(f) = &report.fem {
                    println!(
                        "  Σ w (q − m)² = {:.6e}, σ = {:.4e}; {} step(s){}, {} forward run(s), \
                         {} Jacobian(s), {:.2} s",
                        report.objective,
                        report.sigma,
                        f.iterations,
                        if f.converged { "" } else { " (iteration limit)" },
                        f.forward_runs,
                        f.jacobians,
                        f.time_s
                    );
                }
                if let Some(nh) = &report.neo_hookean {
                    let errs: Vec<String> = nh
                        .experiments
                        .iter()
                        .map(|e| format!("{} {:.2} %", e.name, 100.0 * e.rms_relative_error))
                        .collect();
                    println!(
                        "  compared with Neo-Hookean (μ = {:.6e}): rms relative error {}",
                        nh.parameters.get("mu1").copied().unwrap_or(f64::NAN),
                        errs.join(", ")
                    );
                }
                match png {
                    Ok(p) => println!("  wrote {} and {}", json_path.display(), p.display()),
                    Err(e) => println!("  wrote {} (no plot: {e})", json_path.display()),
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Some(Command::Uq { file, json, output, shard, reduce }) => {
            uq_command(file, json, output, shard, reduce, quiet)
        }
        Some(Command::MeshConvert { input, output }) => {
            let mesh = read_mesh(&input)?;
            mesh_report::convert(&mesh, &output)?;
            if !quiet {
                println!("wrote {}", output.with_extension("xdmf").display());
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `gradfem uq`: run (a shard of) a study, or reduce the parts of one.
fn uq_command(
    file: Option<PathBuf>,
    json: bool,
    output: Option<PathBuf>,
    shard: Option<String>,
    reduce: Option<PathBuf>,
    quiet: bool,
) -> Result<ExitCode> {
    use gradfem::uq;
    if let Some(dir) = reduce {
        let reduced = uq::reduce(&dir)?;
        print_uq(&reduced, json, quiet);
        return Ok(ExitCode::SUCCESS);
    }
    let file = file.expect("clap requires FILE without --reduce");
    let shard = match shard {
        Some(s) => uq::Shard::parse(&s).map_err(anyhow::Error::msg)?,
        None => uq::Shard::ALL,
    };
    let pb = spinner(quiet || json, "setting up");
    let mut pf = ProblemFile::read(&file)?;
    pf.allow_large = ALLOW_LARGE.load(std::sync::atomic::Ordering::Relaxed);
    apply_device(&mut pf);
    let dir = output_dir(&pf, output);
    let mut study = uq::Study::new(pf)?;
    pb.finish();
    #[cfg(feature = "mpi")]
    if gradfem::ranks::launched_by_mpirun() {
        if shard != uq::Shard::ALL {
            bail!("--shard and mpirun do not mix: the ranks are the shards");
        }
        let _ranks = gradfem::ranks::Ranks::init().map_err(anyhow::Error::msg)?;
        let outcome = gradfem::ranks::run_uq(&mut study, &dir, quiet || json)?;
        if let Some(reduced) = outcome {
            print_uq(&reduced, json, quiet);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let total = uq::pending(&study, &dir, shard);
    let label = if shard.count > 1 {
        format!("uq samples (shard {}/{})", shard.index, shard.count)
    } else {
        "uq samples".to_string()
    };
    let pb = Progress::bar(ProgressMode::detect(quiet || json), &label, total as u64);
    let log_name = if shard.count > 1 {
        format!("shard-{}-of-{}", shard.index, shard.count)
    } else {
        "run".to_string()
    };
    let mut log = uq::Log::open(&dir, &log_name);
    let mut done = 0u64;
    let stats = uq::run(&mut study, &dir, shard, &mut log, |r| {
        done += 1;
        pb.set_position(done);
        if let Some(e) = &r.error {
            pb.log(format!("sample {} failed: {e}", r.index));
        }
    })?;
    pb.finish();
    if shard.count > 1 {
        if !quiet {
            println!(
                "shard {}/{}: {} chunk(s) computed ({} sample(s), {:.2} s), {} already written; \
                 when every shard is done: gradfem uq --reduce {}",
                shard.index,
                shard.count,
                stats.computed,
                stats.samples,
                stats.seconds,
                stats.resumed,
                dir.display()
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let reduced = uq::reduce(&dir)?;
    if !quiet && !json && stats.resumed > 0 {
        println!("resumed: {} chunk(s) were already written", stats.resumed);
    }
    print_uq(&reduced, json, quiet);
    Ok(ExitCode::SUCCESS)
}

/// The report of `gradfem uq`: JSON, or a table.
fn print_uq(r: &gradfem::uq::Reduced, json: bool, quiet: bool) {
    let rep = &r.report;
    if json {
        println!("{}", serde_json::to_string(rep).expect("serializable"));
        return;
    }
    if quiet {
        return;
    }
    println!(
        "{} — {} samples ({} ok), {} design, seed {}",
        if rep.title.is_empty() { "gradfem uq" } else { &rep.title },
        rep.samples,
        rep.samples_ok,
        rep.design,
        rep.seed
    );
    if !rep.stop_met {
        println!("  stopping rule NOT met: {:?} (the most samples were run)", rep.stop);
    }
    for i in &rep.inputs {
        println!(
            "  input {:<40} {} mean {:.6e}, std {:.6e}{}",
            i.parameter,
            i.distribution.kind(),
            i.mean,
            i.std,
            match (&i.field, i.factor) {
                (Some(_), _) => " (a factor per cell)",
                (None, true) => " (a factor on its values)",
                (None, false) => "",
            }
        );
        if let Some(f) = &i.field {
            println!(
                "        random field over {} cells: {} correlation, length {:.4e}; {} modes carry {:.1} % of its variance",
                f.cells,
                f.covariance.name(),
                f.correlation_length,
                f.modes,
                100.0 * f.captured
            );
        }
    }
    for o in &rep.outputs {
        let s = &o.summary;
        println!(
            "  {}: mean {:.6e} ± {:.2e}, std {:.6e} ± {:.2e} (n = {})",
            o.quantity, s.mean, s.se_mean, s.std, s.se_std, s.n
        );
        let q: Vec<String> = s
            .quantiles
            .iter()
            .map(|q| format!("q{} {:.6e} ± {:.2e}", q.p, q.value, q.se))
            .collect();
        if !q.is_empty() {
            println!("    {}", q.join(", "));
        }
        for e in o.probability_above.iter().chain(&o.probability_below) {
            println!(
                "    P({} {} {}) = {:.4} ± {:.4} ({} sample(s); 95 % upper bound {:.4})",
                o.quantity,
                if e.side == "above" { ">" } else { "<" },
                e.limit,
                e.probability,
                e.se,
                e.count,
                e.upper_95
            );
        }
        match (&o.linearized, &o.note) {
            (Some(l), _) => {
                let shares: Vec<String> = l
                    .share_by_input
                    .iter()
                    .map(|(n, v)| format!("{n} {:.1} %", 100.0 * v))
                    .collect();
                println!(
                    "    first order at the means: std {:.6e}; shares {}",
                    l.shares.std,
                    shares.join(", ")
                );
            }
            (None, Some(note)) => println!("    no first-order shares: {note}"),
            (None, None) => {}
        }
    }
    if let Some(a) = &rep.acceptance {
        println!(
            "  acceptance {}: std/|mean| = {:.4} → {}",
            a.rule,
            a.ratio,
            if a.accepted { "ACCEPTED" } else { "REJECTED" }
        );
    }
    for f in &rep.failures {
        println!("  sample {} failed: {}", f.index, f.error);
    }
    match &r.png {
        Ok(p) => println!(
            "  wrote {}, {}, {}, {}",
            r.json.display(),
            r.samples_json.display(),
            r.samples_csv.display(),
            p.display()
        ),
        Err(e) => println!(
            "  wrote {}, {}, {} (no plot: {e})",
            r.json.display(),
            r.samples_json.display(),
            r.samples_csv.display()
        ),
    }
}

/// Run `[optimize]` on a problem: progress, Ctrl-C, history CSV + PNG and the final design's
/// fields written into `dir`.
fn optimize(
    problem: &mut app::Problem,
    settings: &gradfem::optimize::Settings,
    dir: &Path,
    quiet: bool,
    json: bool,
) -> Result<gradfem::optimize::Outcome> {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    {
        let stop = stop.clone();
        // A second Ctrl-C while the handler is set is ignored; the run stops at the
        // next iteration and keeps the best design.
        let _ = ctrlc::set_handler(move || stop.store(true, std::sync::atomic::Ordering::SeqCst));
    }
    let pb = spinner(quiet || json, "optimizing");
    let outcome = gradfem::optimize::run(problem, settings, stop, |it, f| {
        pb.log(format!("iteration {it}, objective {f:.6e}"));
    })?;
    pb.finish();
    let set = begin_set(dir)?;
    app::write_results(set.dir(), problem, None)?;
    outcome.watcher.write_csv(set.dir().join("history.csv"))?;
    let png_note = match outcome.watcher.write_png(set.dir().join("history.png")) {
        Ok(()) => dir.join("history.png").display().to_string(),
        Err(e) => format!("(no plot: {e})"),
    };
    commit_set(set)?;
    let xdmf = dir.join("results.xdmf");
    let names: Vec<String> = outcome.watcher.names().to_vec();
    let violations = outcome.violations(settings);
    if json {
        let out = serde_json::json!({
            "method": outcome.method,
            "initial_objective": outcome.initial_objective,
            "final_objective": outcome.final_objective,
            "constraints": settings.constraints.iter().zip(&outcome.final_constraints)
                .zip(&outcome.final_peaks)
                .map(|((c, v), peak)| serde_json::json!({
                    "name": c.label,
                    "value": v,
                    "upper": c.upper,
                    "aggregate": c.peak.as_ref().map(|p| if p.aggregate_is_ks { "ks" } else { "p_norm" }),
                    "true_peak_K": peak,
                }))
                .collect::<Vec<_>>(),
            "design": problem.registry().iter().map(|(_, s)| (s.name.clone(), s.values.clone()))
                .collect::<std::collections::BTreeMap<_, _>>(),
            "iterations": outcome.iterations,
            "evaluations": outcome.evaluations,
            "status": outcome.status,
            "converged": outcome.converged,
            "feasible": outcome.feasible,
            "violations": violations,
            "stopped": outcome.stopped,
        });
        println!("{out}");
    } else if !quiet {
        println!(
            "objective {:.6e} -> {:.6e} in {} iteration(s), {} evaluation(s) ({})",
            outcome.initial_objective,
            outcome.final_objective,
            outcome.iterations,
            outcome.evaluations,
            match outcome.method {
                gradfem::optimize::Method::Mma => "MMA",
                gradfem::optimize::Method::Lbfgs => "L-BFGS",
                gradfem::optimize::Method::NewtonCg => "Newton-CG",
            }
        );
        println!("  {}", outcome.status);
        if settings.constraints.is_empty() {
        } else if violations.is_empty() {
            println!("  feasible: every constraint holds");
        } else {
            println!("  INFEASIBLE: {}", violations.join("; "));
        }
        for ((c, v), peak) in
            settings.constraints.iter().zip(&outcome.final_constraints).zip(&outcome.final_peaks)
        {
            match (peak, &c.peak) {
                (Some(t), Some(p)) => println!(
                    "  constraint '{}': {} {v:.6e}, true peak over {} {t:.4} K (bound {})",
                    c.label,
                    if p.aggregate_is_ks { "KS aggregate" } else { "p-norm mean" },
                    p.group,
                    c.upper
                ),
                _ => println!("  constraint '{}': {v:.6e} (bound {})", c.label, c.upper),
            }
        }
        let first = outcome.watcher.history().first().map(|r| r.params.clone()).unwrap_or_default();
        let last = outcome.final_params.clone();
        for (i, n) in names.iter().enumerate() {
            if let (Some(a), Some(b)) = (first.get(i), last.get(i)) {
                println!("  {n:<40} {a:.6e} -> {b:.6e}");
            }
        }
        println!("  wrote {}, {}, {}", dir.join("history.csv").display(), png_note, xdmf.display());
    }
    Ok(outcome)
}

fn run_default(quiet: bool) -> Result<ExitCode> {
    let started = std::time::Instant::now();
    let mut pf = ProblemFile::parse(
        Path::new("<embedded microactuator_builtin.toml>"),
        DEFAULT_PROBLEM.to_string(),
    )?;
    apply_device(&mut pf);
    let mut problem = app::build_problem(&pf)?;
    let forward_started = std::time::Instant::now();
    solve(&mut problem, &pf, quiet)?;
    let forward_s = forward_started.elapsed().as_secs_f64();
    let s = app::summary(&pf.spec.title, &problem)?;
    if !quiet {
        print_summary(&s);
    }
    let pb = spinner(quiet, "adjoint gradient");
    let gradient_started = std::time::Instant::now();
    let (j, grad, timings) = problem.gradient()?;
    let gradient_s = gradient_started.elapsed().as_secs_f64();
    pb.finish();
    let mut report = app::gradient_report(&problem, j, &grad, timings);
    report.timings.forward_total_s = Some(forward_s);
    report.timings.gradient_total_s = Some(gradient_s);
    if !quiet {
        print_gradients(&report);
    }
    let result = taylor(&mut problem, &pf, quiet)?;
    if !quiet {
        println!("{}", result.table());
    }
    let dir = pf.output_directory();
    let xdmf = app::write_results(&dir, &problem, Some(&grad))?;
    let gpath = dir.join("gradients.json");
    app::write_gradients(&gpath, &report)?;
    if !quiet {
        println!("results: {} (open in ParaView), gradients: {}", xdmf.display(), gpath.display());
        println!("design optimization ([optimize] of the embedded problem):");
    }
    let settings = gradfem::optimize::settings(&pf, &problem)?;
    let design_dir = dir.join("design");
    optimize(&mut problem, &settings, &design_dir, quiet, false)?;
    if !quiet {
        println!("done in {:.1} s", started.elapsed().as_secs_f64());
    }
    Ok(if result.passed { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
