//! `convergence.png` of `gradfem uq`: the running mean of each followed output after each
//! chunk, with its ±2 standard-error band, one panel per output (at most four).

use std::path::Path;

use crate::uq::Report;

/// Draw the convergence plot of `report` into `file` (a `.png` path).
pub fn convergence(report: &Report, file: &Path) -> Result<(), String> {
    use plotters::prelude::*;
    let e = |x: &dyn std::fmt::Display| x.to_string();
    let shown = report.outputs.len().clamp(1, 4);
    let root = BitMapBackend::new(file, (480 * shown as u32, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let title = if report.title.is_empty() { "gradfem uq" } else { &report.title };
    let root = root
        .titled(&format!("{title}: running mean ± 2 SE ({})", report.design), ("sans-serif", 18))
        .map_err(|x| e(&x))?;
    let panels = root.split_evenly((1, shown));
    for (k, (panel, out)) in panels.iter().zip(&report.outputs).enumerate() {
        let pts: Vec<(f64, f64, f64)> = report
            .convergence
            .iter()
            .filter(|p| p.mean[k].is_finite())
            .map(|p| (p.samples as f64, p.mean[k], if p.se[k].is_finite() { p.se[k] } else { 0.0 }))
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
            .y_desc(out.quantity.as_str())
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
