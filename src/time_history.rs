//! The history of a transient run over its states: `time_history.csv` (time, peak temperature,
//! the tip displacement and the objective's value at each state) and `time_history.png` (the
//! peak temperature and the tip displacement against time), written atomically.

use std::path::{Path, PathBuf};

use crate::app::Problem;
use crate::run::RunError;

/// One row per state of the last transient run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TimeHistory {
    /// t \[s\].
    pub time: Vec<f64>,
    /// The largest nodal temperature \[K\].
    pub max_temperature: Vec<f64>,
    /// The mean displacement of the mechanical tip group \[m\] (empty without one).
    pub tip: Vec<[f64; 3]>,
    /// The objective terms at each state, unweighted in time (J weighs them by the
    /// `[transient] objective` rule).
    pub objective: Vec<f64>,
}

impl TimeHistory {
    /// The history of a solved transient problem (None for a steady one).
    pub fn of(problem: &Problem) -> Result<Option<Self>, RunError> {
        let Some(tr) = problem.transient() else { return Ok(None) };
        let (times, states) =
            tr.states().ok_or_else(|| RunError::Setup("transient: solve first".into()))?;
        let max_temperature = states
            .iter()
            .map(|t| t.iter().copied().filter(|v| v.is_finite()).fold(f64::NEG_INFINITY, f64::max))
            .collect();
        let tip = problem.mechanical_history().map_or_else(Vec::new, |m| m.tip);
        Ok(Some(TimeHistory {
            time: times.to_vec(),
            max_temperature,
            tip,
            objective: problem.transient_state_values()?,
        }))
    }

    /// The CSV text: a header and one row per state.
    pub fn csv(&self) -> String {
        let mut out = String::from("time_s,max_temperature_K");
        if !self.tip.is_empty() {
            out.push_str(",tip_displacement_x_m,tip_displacement_y_m,tip_displacement_z_m");
        }
        out.push_str(",objective\n");
        for n in 0..self.time.len() {
            out.push_str(&format!("{:e},{:e}", self.time[n], self.max_temperature[n]));
            if let Some(u) = self.tip.get(n) {
                out.push_str(&format!(",{:e},{:e},{:e}", u[0], u[1], u[2]));
            }
            out.push_str(&format!(",{:e}\n", self.objective[n]));
        }
        out
    }

    /// Write `time_history.csv` and `time_history.png` into `dir` (each atomically); returns
    /// their paths.
    pub fn write(&self, dir: &Path, title: &str) -> Result<(PathBuf, PathBuf), String> {
        let csv = dir.join("time_history.csv");
        gradfem_io::atomic::write_bytes_atomic(&csv, self.csv().as_bytes())
            .map_err(|e| format!("{}: {e}", csv.display()))?;
        let png = dir.join("time_history.png");
        // plotters picks the format by the extension: the partial file ends in .png too.
        let partial = dir.join(".time_history.partial.png");
        self.plot(&partial, title)
            .and_then(|()| std::fs::rename(&partial, &png).map_err(|e| e.to_string()))
            .map_err(|e| {
                let _ = std::fs::remove_file(&partial);
                format!("{}: {e}", png.display())
            })?;
        Ok((csv, png))
    }

    /// The peak temperature and, with a tip group, the tip displacement components against
    /// time in milliseconds.
    fn plot(&self, file: &Path, title: &str) -> Result<(), String> {
        use plotters::prelude::*;
        let e = |x: &dyn std::fmt::Display| x.to_string();
        let panels_n = if self.tip.is_empty() { 1 } else { 2 };
        let root = BitMapBackend::new(file, (560 * panels_n as u32, 460)).into_drawing_area();
        root.fill(&WHITE).map_err(|x| e(&x))?;
        let root = root
            .titled(if title.is_empty() { "transient run" } else { title }, ("sans-serif", 20))
            .map_err(|x| e(&x))?;
        let panels = root.split_evenly((1, panels_n));
        let t_ms: Vec<f64> = self.time.iter().map(|t| t * 1e3).collect();
        let t_end = t_ms.last().copied().unwrap_or(1.0).max(f64::MIN_POSITIVE);
        let range = |v: &mut dyn Iterator<Item = f64>| {
            let (lo, hi) =
                v.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| (a.min(x), b.max(x)));
            let pad = 0.06 * (hi - lo).max(1e-12 * hi.abs().max(1.0));
            (lo - pad)..(hi + pad)
        };
        let mut chart = ChartBuilder::on(&panels[0])
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d(0.0..t_end, range(&mut self.max_temperature.iter().copied()))
            .map_err(|x| e(&x))?;
        chart
            .configure_mesh()
            .x_desc("time (ms)")
            .y_desc("peak temperature (K)")
            .draw()
            .map_err(|x| e(&x))?;
        chart
            .draw_series(LineSeries::new(
                t_ms.iter().copied().zip(self.max_temperature.iter().copied()),
                RED.stroke_width(2),
            ))
            .map_err(|x| e(&x))?;
        if !self.tip.is_empty() {
            let um: Vec<[f64; 3]> = self.tip.iter().map(|u| u.map(|v| v * 1e6)).collect();
            let largest = um.iter().flatten().fold(0.0f64, |a, v| a.max(v.abs()));
            // The components that move the tip visibly.
            let shown: Vec<usize> =
                (0..3).filter(|&k| um.iter().any(|u| u[k].abs() >= 1e-3 * largest)).collect();
            let mut values = um.iter().flat_map(|u| shown.iter().map(move |&k| u[k]));
            let mut chart = ChartBuilder::on(&panels[1])
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(64)
                .build_cartesian_2d(0.0..t_end, range(&mut values))
                .map_err(|x| e(&x))?;
            chart
                .configure_mesh()
                .x_desc("time (ms)")
                .y_desc("tip displacement (µm)")
                .draw()
                .map_err(|x| e(&x))?;
            for &k in &shown {
                let colour = Palette99::pick(k).to_rgba();
                chart
                    .draw_series(LineSeries::new(
                        t_ms.iter().copied().zip(um.iter().map(|u| u[k])),
                        colour.stroke_width(2),
                    ))
                    .map_err(|x| e(&x))?
                    .label(["u_x", "u_y", "u_z"][k])
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour));
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()
                .map_err(|x| e(&x))?;
        }
        root.present().map_err(|x| e(&x))
    }
}
