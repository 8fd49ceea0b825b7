//! The `gradfem` command line.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use gradfem::app::{self, DEFAULT_PROBLEM};
use gradfem::mesh_report;
use gradfem::problem::ProblemFile;
use gradfem_solvers::taylor::TaylorParams;
use indicatif::{ProgressBar, ProgressStyle};

/// Differentiable multiphysics finite elements: solve, and get the gradient of an objective with
/// respect to every registered parameter by the adjoint method.
///
/// With no command, runs the embedded default problem (the electro-thermo-mechanical
/// microactuator: solve, gradient, Taylor test, a short design optimization) and writes its
/// results to ./results.
#[derive(Parser, Debug)]
#[command(name = "gradfem", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Print only errors (no progress, no tables).
    #[arg(long, global = true)]
    quiet: bool,
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
        /// Output directory (default: the problem's [output] directory, else ./results).
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
        /// Output directory (default: the problem's [output] directory, else ./results).
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
        /// Output directory (default: the problem's [output] directory, else ./results).
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
    /// is 0 when the observed rate reaches the minimum (default 1.9), 1 otherwise.
    CheckGradient {
        /// Problem file (TOML).
        file: PathBuf,
        /// Print the Taylor table as JSON.
        #[arg(long)]
        json: bool,
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
        /// Output directory (default: results).
        #[arg(short, long)]
        output: Option<PathBuf>,
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

fn spinner(quiet: bool, msg: &str) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new_spinner();
    pb.set_style(
        ProgressStyle::with_template("{spinner} {msg} [{elapsed}]").expect("valid template"),
    );
    pb.set_message(msg.to_string());
    pb.enable_steady_tick(Duration::from_millis(100));
    pb
}

fn load(path: &Path, quiet: bool) -> Result<(ProblemFile, app::Problem)> {
    let pb = spinner(quiet, "setting up");
    let file = ProblemFile::read(path)?;
    let problem = app::build_problem(&file)?;
    pb.finish_and_clear();
    Ok((file, problem))
}

fn solve(problem: &mut app::Problem, quiet: bool) -> Result<()> {
    let pb = spinner(quiet, "solving");
    problem.solve().context("forward solve")?;
    pb.finish_and_clear();
    Ok(())
}

fn output_dir(file: &ProblemFile, output: Option<PathBuf>) -> PathBuf {
    output.unwrap_or_else(|| PathBuf::from(&file.spec.output.directory))
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
        println!(
            "  coupling: {} iteration(s); electrical {:.3} s, Joule {:.3} s, thermal {:.3} s",
            c.coupling_iterations, c.electrical_s, c.joule_s, c.thermal_s
        );
    }
    let hb = &s.heat_balance;
    if thermal_solved {
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
    if thermal_solved {
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
    println!(
        "  forward {:.3} s, gradient {:.3} s (adjoint solve {:.3} s)",
        report.timings.forward.assembly_s
            + report.timings.forward.factor_s
            + report.timings.forward.solve_s
            + report.timings.hyperelastic_forward_s.unwrap_or(0.0),
        report.timings.gradient.gradient_s,
        report.timings.gradient.adjoint_solve_s
    );
}

fn taylor(
    problem: &mut app::Problem,
    file: &ProblemFile,
    quiet: bool,
) -> Result<gradfem_solvers::taylor::TaylorResult> {
    let params = TaylorParams {
        h0: file.spec.taylor.h0,
        steps: file.spec.taylor.steps,
        min_rate: file.spec.taylor.min_rate,
    };
    if problem.registry().is_empty() {
        bail!(
            "{}: no parameters are registered ([parameters] register = [...])",
            file.path.display()
        );
    }
    let pb = if quiet { ProgressBar::hidden() } else { ProgressBar::new(params.steps as u64 + 1) };
    pb.set_style(
        ProgressStyle::with_template("Taylor test {bar:30} {pos}/{len} solves [{elapsed}]")
            .expect("valid template"),
    );
    let result = problem.taylor_test(&params, |i| pb.set_position(i as u64))?;
    pb.finish_and_clear();
    Ok(result)
}

fn run(cli: Cli) -> Result<ExitCode> {
    let quiet = cli.quiet;
    match cli.command {
        None => run_default(quiet),
        Some(Command::Run { file, json, output }) => {
            let (pf, mut problem) = load(&file, quiet || json)?;
            solve(&mut problem, quiet || json)?;
            let s = app::summary(&pf.spec.title, &problem)?;
            let dir = output_dir(&pf, output);
            let xdmf = app::write_results(&dir, &problem, None)?;
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
            solve(&mut problem, quiet || json)?;
            let pb = spinner(quiet || json, "adjoint gradient");
            let (j, grad, timings, blocks) = problem.gradient()?;
            pb.finish_and_clear();
            let report = app::gradient_report(&problem, j, &grad, timings, blocks);
            let dir = output_dir(&pf, output);
            let xdmf = app::write_results(&dir, &problem, Some(&grad))?;
            let gpath = dir.join("gradients.json");
            app::write_gradients(&gpath, &report)?;
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
        Some(Command::CheckGradient { file, json }) => {
            let (pf, mut problem) = load(&file, quiet || json)?;
            solve(&mut problem, quiet || json)?;
            let result = taylor(&mut problem, &pf, quiet || json)?;
            if json {
                let table = serde_json::json!({
                    "h": result.h,
                    "j0": result.j0,
                    "dj_dm": result.dj_dm,
                    "remainders": result.remainders,
                    "remainders_zeroth": result.remainders_zeroth,
                    "rates": result.rates,
                    "rates_zeroth": result.rates_zeroth,
                    "min_rate": result.min_rate(),
                    "passed": result.passed,
                    "note": result.note,
                });
                println!("{table}");
            } else if !quiet {
                println!("{}", result.table());
            }
            Ok(if result.passed { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
        Some(Command::MeshInfo { file, json }) => {
            let report = if gradfem::ansys_import::is_ansys_path(&file) {
                let ansys = gradfem::ansys_import::AnsysFile::read(&file)?;
                mesh_report::MeshReport::for_ansys(&file, &ansys)
            } else {
                let mesh = gradfem_io::gmsh::read_msh(&file)?;
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
            let s = gradfem::ansys_import::import(&file, set, &output)?;
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
            let pb = if quiet || json {
                ProgressBar::hidden()
            } else {
                ProgressBar::new(id.starts() as u64)
            };
            pb.set_style(
                ProgressStyle::with_template(
                    "fitting {bar:30} {pos}/{len} starting points [{elapsed}] {msg}",
                )
                .expect("valid template"),
            );
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
            pb.finish_and_clear();
            let dir = output.unwrap_or_else(|| PathBuf::from("results"));
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
                for (name, v) in &report.parameters {
                    match report.std_errors.get(name) {
                        Some(se) => println!("  {name:>8} = {v:>14.6e} ± {se:.2e}"),
                        None => println!("  {name:>8} = {v:>14.6e} (fixed)"),
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
        Some(Command::MeshConvert { input, output }) => {
            let mesh = gradfem_io::gmsh::read_msh(&input)?;
            mesh_report::convert(&mesh, &output)?;
            if !quiet {
                println!("wrote {}", output.with_extension("xdmf").display());
            }
            Ok(ExitCode::SUCCESS)
        }
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
    let pb = if quiet || json { ProgressBar::hidden() } else { ProgressBar::new_spinner() };
    pb.set_style(
        ProgressStyle::with_template("{spinner} optimizing: {msg} [{elapsed}]")
            .expect("valid template"),
    );
    pb.enable_steady_tick(Duration::from_millis(100));
    let outcome = gradfem::optimize::run(problem, settings, stop, |it, f| {
        pb.set_message(format!("iteration {it}, objective {f:.6e}"));
    })?;
    pb.finish_and_clear();
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let xdmf = app::write_results(dir, problem, None)?;
    outcome.watcher.write_csv(dir.join("history.csv"))?;
    let png = dir.join("history.png");
    let png_note = match outcome.watcher.write_png(&png) {
        Ok(()) => png.display().to_string(),
        Err(e) => format!("(no plot: {e})"),
    };
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
    let pf = ProblemFile::parse(
        Path::new("<embedded microactuator_builtin.toml>"),
        DEFAULT_PROBLEM.to_string(),
    )?;
    let mut problem = app::build_problem(&pf)?;
    solve(&mut problem, quiet)?;
    let s = app::summary(&pf.spec.title, &problem)?;
    if !quiet {
        print_summary(&s);
    }
    let pb = spinner(quiet, "adjoint gradient");
    let (j, grad, timings, blocks) = problem.gradient()?;
    pb.finish_and_clear();
    let report = app::gradient_report(&problem, j, &grad, timings, blocks);
    if !quiet {
        print_gradients(&report);
    }
    let result = taylor(&mut problem, &pf, quiet)?;
    if !quiet {
        println!("{}", result.table());
    }
    let dir = PathBuf::from("results");
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
