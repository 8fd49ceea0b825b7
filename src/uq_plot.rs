//! `convergence.png` of `gradfem uq`: the running mean of each followed output after each
//! chunk, with its ±2 standard-error band, one panel per output (at most four).

use std::path::Path;

/// The running means of the outputs: after `samples[j]` samples, output k had the mean
/// `mean[j][k]` with standard error `se[j][k]`.
pub struct Running<'a> {
    /// The plot's title.
    pub title: &'a str,
    /// The design's name.
    pub design: &'a str,
    /// The outputs' names.
    pub names: Vec<&'a str>,
    /// Samples run at each point.
    pub samples: Vec<usize>,
    /// Means per point and output.
    pub mean: Vec<&'a [f64]>,
    /// Standard errors per point and output.
    pub se: Vec<&'a [f64]>,
}

/// Draw the convergence plot into `file` (a `.png` path).
pub fn convergence(run: &Running, file: &Path) -> Result<(), String> {
    use plotters::prelude::*;
    let e = |x: &dyn std::fmt::Display| x.to_string();
    let shown = run.names.len().clamp(1, 4);
    let root = BitMapBackend::new(file, (480 * shown as u32, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let title = if run.title.is_empty() { "gradfem uq" } else { run.title };
    let root = root
        .titled(&format!("{title}: running mean ± 2 SE ({})", run.design), ("sans-serif", 18))
        .map_err(|x| e(&x))?;
    let panels = root.split_evenly((1, shown));
    for (k, (panel, name)) in panels.iter().zip(&run.names).enumerate() {
        let pts: Vec<(f64, f64, f64)> = (0..run.samples.len())
            .filter(|&j| run.mean[j][k].is_finite())
            .map(|j| {
                let se = run.se[j][k];
                (run.samples[j] as f64, run.mean[j][k], if se.is_finite() { se } else { 0.0 })
            })
            .collect();
        if pts.is_empty() {
            continue;
        }
        let x_max = pts.last().map_or(1.0, |p| p.0).max(2.0);
        let (lo, hi) = pts.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| {
            (a.min(p.1 - 2.0 * p.2), b.max(p.1 + 2.0 * p.2))
        });
        let pad = 0.08 * (hi - lo).max(1e-12 * hi.abs().max(1e-300));
        let mut chart = ChartBuilder::on(panel)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(80)
            .build_cartesian_2d(0.0..x_max, (lo - pad)..(hi + pad))
            .map_err(|x| e(&x))?;
        chart
            .configure_mesh()
            .x_desc("samples")
            .y_desc(*name)
            .y_label_formatter(&|v| format!("{v:.4e}"))
            .draw()
            .map_err(|x| e(&x))?;
        let band: Vec<(f64, f64)> = pts
            .iter()
            .map(|p| (p.0, p.1 + 2.0 * p.2))
            .chain(pts.iter().rev().map(|p| (p.0, p.1 - 2.0 * p.2)))
            .collect();
        chart
            .draw_series(std::iter::once(Polygon::new(band, BLUE.mix(0.18))))
            .map_err(|x| e(&x))?;
        chart
            .draw_series(LineSeries::new(pts.iter().map(|p| (p.0, p.1)), BLUE.stroke_width(2)))
            .map_err(|x| e(&x))?;
        chart
            .draw_series(pts.iter().map(|p| Circle::new((p.0, p.1), 3, BLUE.filled())))
            .map_err(|x| e(&x))?;
    }
    root.present().map_err(|x| e(&x))
}
