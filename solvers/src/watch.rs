//! Parameter watching: a per-iteration record of an optimization (parameters, gradient,
//! objective), written as CSV and plotted as PNG.
//!
//! [`minimize_lbfgsb_watched`] runs [`minimize_lbfgsb`] and fills a [`Watcher`]; a caller that
//! optimizes in other variables than the watched ones (scaled, log) feeds the watcher itself:
//! [`Watcher::evaluation`] from the objective closure with the watched values, and
//! [`Watcher::iteration`] from the optimizer's callback, which matches the iterate to the
//! evaluation at the same point (bitwise) and appends one [`WatchRow`].
//!
//! Files are written atomically: to a temporary file in the target's directory, then renamed
//! over the target (a rename within one file system is atomic on POSIX), so a reader never
//! sees a half-written file. Written here rather than with `gradfem-io` so that the solvers
//! (and the field crates that use them) do not depend on the I/O crate for two small files.

use std::cell::RefCell;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::optimize::{Control, IterationRecord, LbfgsbParams, OptimizeResult, minimize_lbfgsb};
use thiserror::Error;

/// Errors of writing a watch history.
#[derive(Debug, Error)]
pub enum WatchError {
    /// Creating, writing or renaming a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file concerned.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A history file read back is not one this module writes.
    #[error("{path}:{line}: {message}")]
    Format {
        /// The file read.
        path: PathBuf,
        /// The line (1-based).
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The plotting backend failed (font, encoder, …).
    #[error("{path}: plotting failed: {message}")]
    Plot {
        /// The PNG being drawn.
        path: PathBuf,
        /// The backend's message.
        message: String,
    },
}

/// One optimizer iteration as watched.
#[derive(Debug, Clone, PartialEq)]
pub struct WatchRow {
    /// Iteration number (0 = the start).
    pub iteration: usize,
    /// Objective J.
    pub objective: f64,
    /// Watched parameter values (the watcher's names, in order).
    pub params: Vec<f64>,
    /// dJ/d(parameter) at those values (NaN where no evaluation matched the iterate).
    pub gradient: Vec<f64>,
    /// Infinity norm of the optimizer's projected gradient (in the optimizer's variables).
    pub grad_norm: f64,
    /// Objective evaluations so far.
    pub evaluations: usize,
    /// Values of the watcher's extra columns (constraint quantities, true peaks, …), without
    /// gradients; empty when the watcher has none.
    pub extras: Vec<f64>,
}

/// An evaluation waiting to be matched to an iteration: (optimizer point, params, J, gradient).
type Pending = (Vec<f64>, Vec<f64>, f64, Vec<f64>);

/// Collects one [`WatchRow`] per optimizer iteration.
#[derive(Debug, Clone, Default)]
pub struct Watcher {
    names: Vec<String>,
    extras: Vec<String>,
    rows: Vec<WatchRow>,
    pending: Vec<Pending>,
}

impl Watcher {
    /// A watcher of the named parameters (CSV columns and plot legend).
    pub fn new(names: Vec<String>) -> Self {
        Self::with_extras(names, Vec::new())
    }

    /// A watcher of the named parameters and of extra named values without gradients
    /// (constraint quantities, say), which follow the gradient columns in the CSV.
    pub fn with_extras(names: Vec<String>, extras: Vec<String>) -> Self {
        Self { names, extras, rows: Vec::new(), pending: Vec::new() }
    }

    /// The watched parameters' names.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The extra columns' names.
    pub fn extra_names(&self) -> &[String] {
        &self.extras
    }

    /// The rows collected so far.
    pub fn history(&self) -> &[WatchRow] {
        &self.rows
    }

    /// Records one objective evaluation: `x` the optimizer's point (to match it to an
    /// iteration), `params` and `gradient` in the watched variables, `objective` = J.
    /// Panics if `params` or `gradient` do not have one entry per name.
    pub fn evaluation(&mut self, x: &[f64], params: &[f64], gradient: &[f64], objective: f64) {
        assert!(
            params.len() == self.names.len() && gradient.len() == self.names.len(),
            "Watcher::evaluation: {} names, {} params, {} gradient entries",
            self.names.len(),
            params.len(),
            gradient.len()
        );
        self.pending.push((x.to_vec(), params.to_vec(), objective, gradient.to_vec()));
    }

    /// Appends the row of an optimizer iteration, taking parameters and gradient from the
    /// latest evaluation at `rec.x` (bitwise); if none matched (an optimizer that does not
    /// evaluate at its iterates), the parameters are `rec.x` when it has one entry per name
    /// (else NaN) and the gradient NaN. Clears the pending evaluations. Returns
    /// [`Control::Continue`] so that it can be the whole callback.
    pub fn iteration(&mut self, rec: &IterationRecord) -> Control {
        let hit = self.pending.iter().rev().find(|(x, ..)| {
            x.len() == rec.x.len() && x.iter().zip(&rec.x).all(|(a, b)| a.to_bits() == b.to_bits())
        });
        let n = self.names.len();
        let (params, gradient) = match hit {
            Some((_, p, _, g)) => (p.clone(), g.clone()),
            None if rec.x.len() == n => (rec.x.clone(), vec![f64::NAN; n]),
            None => (vec![f64::NAN; n], vec![f64::NAN; n]),
        };
        self.rows.push(WatchRow {
            iteration: rec.iteration,
            objective: rec.f,
            params,
            gradient,
            grad_norm: rec.grad_norm,
            evaluations: rec.evaluations,
            extras: vec![f64::NAN; self.extras.len()],
        });
        self.pending.clear();
        Control::Continue
    }

    /// Appends a row directly.
    pub fn push(&mut self, row: WatchRow) {
        assert!(
            row.params.len() == self.names.len()
                && row.gradient.len() == self.names.len()
                && row.extras.len() == self.extras.len(),
            "Watcher::push: {} names and {} extras, row has {} params, {} gradient entries, {} extras",
            self.names.len(),
            self.extras.len(),
            row.params.len(),
            row.gradient.len(),
            row.extras.len()
        );
        self.rows.push(row);
    }

    /// The history as CSV text (RFC 4180: a name holding a comma, a quote or a line break is
    /// quoted, its quotes doubled): header
    /// `iteration,objective,grad_norm,evaluations,<name>…,grad.<name>…,<extra>…`, one line per
    /// row, numbers in Rust's shortest round-trip form (exact when parsed back).
    pub fn to_csv(&self) -> String {
        let mut header: Vec<String> =
            ["iteration", "objective", "grad_norm", "evaluations"].map(String::from).to_vec();
        header.extend(self.names.iter().cloned());
        header.extend(self.names.iter().map(|n| format!("grad.{n}")));
        header.extend(self.extras.iter().cloned());
        let mut s = header.iter().map(|h| csv_field(h)).collect::<Vec<_>>().join(",");
        s.push('\n');
        for r in &self.rows {
            s.push_str(&format!(
                "{},{},{},{}",
                r.iteration, r.objective, r.grad_norm, r.evaluations
            ));
            for v in r.params.iter().chain(&r.gradient).chain(&r.extras) {
                s.push_str(&format!(",{v}"));
            }
            s.push('\n');
        }
        s
    }

    /// Reads a history written by [`Watcher::write_csv`] back, given the number of watched
    /// parameters (the rest of the columns after their gradients are extras). Errors name the
    /// file and the line.
    pub fn read_csv(path: impl AsRef<Path>, n_params: usize) -> Result<Self, WatchError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|source| WatchError::Io { path: path.to_path_buf(), source })?;
        let bad = |line: usize, message: String| WatchError::Format {
            path: path.to_path_buf(),
            line,
            message,
        };
        let records = parse_csv(&text).map_err(|(line, m)| bad(line, m))?;
        let Some((header_line, header)) = records.first() else {
            return Err(bad(1, "the file is empty (no header)".into()));
        };
        let fixed = ["iteration", "objective", "grad_norm", "evaluations"];
        if header.len() < 4 + 2 * n_params || header[..4] != fixed {
            return Err(bad(
                *header_line,
                format!(
                    "the header is not a watch history of {n_params} parameter(s): expected `{}` followed by {} parameter and {n_params} gradient columns, found {} column(s)",
                    fixed.join(","),
                    n_params,
                    header.len()
                ),
            ));
        }
        let names = header[4..4 + n_params].to_vec();
        let extras = header[4 + 2 * n_params..].to_vec();
        let mut w = Watcher::with_extras(names, extras);
        for (line, fields) in &records[1..] {
            if fields.len() != header.len() {
                return Err(bad(
                    *line,
                    format!("{} field(s), the header has {}", fields.len(), header.len()),
                ));
            }
            let num = |k: usize| -> Result<f64, WatchError> {
                fields[k].trim().parse::<f64>().map_err(|_| {
                    bad(*line, format!("column '{}': '{}' is not a number", header[k], fields[k]))
                })
            };
            let count = |k: usize| -> Result<usize, WatchError> {
                fields[k].trim().parse::<usize>().map_err(|_| {
                    bad(*line, format!("column '{}': '{}' is not a count", header[k], fields[k]))
                })
            };
            let values = |r: std::ops::Range<usize>| r.map(num).collect::<Result<Vec<_>, _>>();
            w.rows.push(WatchRow {
                iteration: count(0)?,
                objective: num(1)?,
                grad_norm: num(2)?,
                evaluations: count(3)?,
                params: values(4..4 + n_params)?,
                gradient: values(4 + n_params..4 + 2 * n_params)?,
                extras: values(4 + 2 * n_params..header.len())?,
            });
        }
        Ok(w)
    }

    /// Writes [`Watcher::to_csv`] to `path` atomically (module docs).
    pub fn write_csv(&self, path: impl AsRef<Path>) -> Result<(), WatchError> {
        let path = path.as_ref();
        let csv = self.to_csv();
        atomic_write(path, |tmp| {
            let mut f = std::fs::File::create(tmp)?;
            f.write_all(csv.as_bytes())?;
            f.sync_all()
        })
        .map_err(|source| WatchError::Io { path: path.to_path_buf(), source })
    }

    /// Plots the history to a PNG at `path` (900 × 700 pixels), atomically: top, each watched
    /// parameter divided by its value at the first row (so parameters of different units share
    /// one axis; a parameter starting at 0 is plotted as is), one line per parameter against
    /// the iteration; bottom, the objective on a logarithmic axis (non-positive values are
    /// left out).
    pub fn write_png(&self, path: impl AsRef<Path>) -> Result<(), WatchError> {
        let path = path.as_ref();
        let tmp = temp_path(path);
        let res = self.draw(&tmp);
        if let Err(message) = res {
            let _ = std::fs::remove_file(&tmp);
            return Err(WatchError::Plot { path: path.to_path_buf(), message });
        }
        std::fs::rename(&tmp, path).map_err(|source| {
            let _ = std::fs::remove_file(&tmp);
            WatchError::Io { path: path.to_path_buf(), source }
        })
    }

    fn draw(&self, file: &Path) -> Result<(), String> {
        use plotters::prelude::*;
        let e = |x: &dyn std::fmt::Display| x.to_string();
        let root = BitMapBackend::new(file, (900, 700)).into_drawing_area();
        root.fill(&WHITE).map_err(|x| e(&x))?;
        let (top, bottom) = root.split_vertically(400);
        let n_it = self.rows.last().map_or(1, |r| r.iteration.max(1)) as f64;
        let scaled: Vec<Vec<(f64, f64)>> = (0..self.names.len())
            .map(|j| {
                let p0 = self.rows.first().map_or(1.0, |r| r.params[j]);
                let s = if p0 != 0.0 && p0.is_finite() { p0.abs() } else { 1.0 };
                self.rows
                    .iter()
                    .filter(|r| r.params[j].is_finite())
                    .map(|r| (r.iteration as f64, r.params[j] / s))
                    .collect()
            })
            .collect();
        let (mut lo, mut hi) = scaled
            .iter()
            .flatten()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| (a.min(p.1), b.max(p.1)));
        if !(lo.is_finite() && hi.is_finite()) {
            (lo, hi) = (0.0, 1.0);
        }
        let pad = 0.05 * (hi - lo).max(1e-12);
        let mut chart = ChartBuilder::on(&top)
            .caption("parameters / initial value", ("sans-serif", 20))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..n_it, (lo - pad)..(hi + pad))
            .map_err(|x| e(&x))?;
        chart.configure_mesh().x_desc("iteration").draw().map_err(|x| e(&x))?;
        for (j, pts) in scaled.iter().enumerate() {
            let color = Palette99::pick(j).to_rgba();
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
                .map_err(|x| e(&x))?
                .label(self.names[j].clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|x| e(&x))?;
        let obj: Vec<(f64, f64)> = self
            .rows
            .iter()
            .filter(|r| r.objective > 0.0 && r.objective.is_finite())
            .map(|r| (r.iteration as f64, r.objective))
            .collect();
        let (omin, omax) = obj
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| (a.min(p.1), b.max(p.1)));
        let (omin, omax) = if omin.is_finite() { (omin / 2.0, omax * 2.0) } else { (0.1, 10.0) };
        let mut chart = ChartBuilder::on(&bottom)
            .caption("objective", ("sans-serif", 20))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..n_it, (omin..omax).log_scale())
            .map_err(|x| e(&x))?;
        chart
            .configure_mesh()
            .x_desc("iteration")
            .y_label_formatter(&|v| format!("{v:.0e}"))
            .draw()
            .map_err(|x| e(&x))?;
        chart.draw_series(LineSeries::new(obj, BLACK.stroke_width(2))).map_err(|x| e(&x))?;
        root.present().map_err(|x| e(&x))?;
        Ok(())
    }
}

/// One CSV field: quoted (quotes doubled) when it holds a comma, a quote or a line break.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// A CSV record: the line it starts on and its fields.
type CsvRecord = (usize, Vec<String>);

/// Splits RFC 4180 text into records of fields, each with the line it starts on; an error
/// gives the line of an unterminated quote.
fn parse_csv(text: &str) -> Result<Vec<CsvRecord>, (usize, String)> {
    let mut records = Vec::new();
    let mut chars = text.chars().peekable();
    let mut line = 1;
    while chars.peek().is_some() {
        let start = line;
        let mut fields = Vec::new();
        let mut field = String::new();
        loop {
            match chars.next() {
                None => {
                    fields.push(std::mem::take(&mut field));
                    break;
                }
                Some('"') if field.is_empty() => loop {
                    match chars.next() {
                        None => return Err((start, "a quoted field is not closed".into())),
                        Some('"') if chars.peek() == Some(&'"') => {
                            chars.next();
                            field.push('"');
                        }
                        Some('"') => break,
                        Some(c) => {
                            line += usize::from(c == '\n');
                            field.push(c);
                        }
                    }
                },
                Some(',') => fields.push(std::mem::take(&mut field)),
                Some('\r') if chars.peek() == Some(&'\n') => {}
                Some('\n') => {
                    line += 1;
                    fields.push(std::mem::take(&mut field));
                    break;
                }
                Some(c) => field.push(c),
            }
        }
        if !(fields.len() == 1 && fields[0].is_empty()) {
            records.push((start, fields));
        }
    }
    Ok(records)
}

/// A temporary path next to `path` (same directory, so the rename stays on one file system).
fn temp_path(path: &Path) -> PathBuf {
    let name = path.file_name().map_or_else(|| "out".into(), |n| n.to_string_lossy().into_owned());
    let ext = path.extension().map_or_else(String::new, |e| format!(".{}", e.to_string_lossy()));
    path.with_file_name(format!(".{name}.{}.tmp{ext}", std::process::id()))
}

/// Writes through `write(tmp)` to a temporary file next to `path`, then renames it over `path`;
/// removes the temporary file on failure.
fn atomic_write(
    path: &Path,
    write: impl FnOnce(&Path) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let tmp = temp_path(path);
    let res = write(&tmp).and_then(|()| std::fs::rename(&tmp, path));
    if res.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    res
}

/// [`minimize_lbfgsb`] with every iteration recorded in `watcher`, whose names are those of the
/// optimizer's variables (the watched values are the optimizer's `x` and gradient).
pub fn minimize_lbfgsb_watched<E>(
    mut f: impl FnMut(&[f64], &mut [f64]) -> Result<f64, E>,
    x0: &[f64],
    lower: &[f64],
    upper: &[f64],
    params: &LbfgsbParams,
    watcher: &mut Watcher,
) -> Result<OptimizeResult, E> {
    let cell = RefCell::new(watcher);
    minimize_lbfgsb(
        |x, g| {
            let v = f(x, g)?;
            cell.borrow_mut().evaluation(x, x, g, v);
            Ok(v)
        },
        x0,
        lower,
        upper,
        params,
        |rec| cell.borrow_mut().iteration(rec),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quadratic_watch() -> Watcher {
        let mut w = Watcher::new(vec!["a".into(), "b.k".into()]);
        // J = (a − 1)² + 10 (b − 2)².
        let res = minimize_lbfgsb_watched(
            |x, g| {
                g[0] = 2.0 * (x[0] - 1.0);
                g[1] = 20.0 * (x[1] - 2.0);
                Ok::<_, std::convert::Infallible>(
                    (x[0] - 1.0).powi(2) + 10.0 * (x[1] - 2.0).powi(2),
                )
            },
            &[3.0, 0.5],
            &[-10.0, -10.0],
            &[10.0, 10.0],
            &LbfgsbParams::default(),
            &mut w,
        )
        .unwrap();
        assert_eq!(w.history().len(), res.iterations + 1);
        w
    }

    #[test]
    fn csv_has_one_row_per_iteration_with_matching_gradients() {
        let w = quadratic_watch();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("watch.csv");
        w.write_csv(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let mut lines = text.lines();
        assert_eq!(
            lines.next().unwrap(),
            "iteration,objective,grad_norm,evaluations,a,b.k,grad.a,grad.b.k"
        );
        let rows: Vec<Vec<f64>> =
            lines.map(|l| l.split(',').map(|v| v.parse().unwrap()).collect()).collect();
        assert_eq!(rows.len(), w.history().len());
        // Row 0 is the start; every row's gradient is that of J at its parameters.
        assert_eq!(&rows[0][..2], &[0.0, 26.5]);
        for (i, r) in rows.iter().enumerate() {
            assert_eq!(r[0], i as f64);
            let (a, b) = (r[4], r[5]);
            assert_eq!(r[1], (a - 1.0).powi(2) + 10.0 * (b - 2.0).powi(2), "row {i}");
            assert_eq!((r[6], r[7]), (2.0 * (a - 1.0), 20.0 * (b - 2.0)), "row {i}");
        }
        let last = rows.last().unwrap();
        assert!((last[4] - 1.0).abs() < 1e-6 && (last[5] - 2.0).abs() < 1e-6, "{last:?}");
        // Nothing but the target is left in the directory (the temporary file was renamed).
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap()).collect();
        assert_eq!(names.len(), 1);
    }

    /// Names with commas and quotes are quoted, so every line has the header's field count,
    /// and the history reads back exactly (extras included).
    #[test]
    fn csv_quotes_names_and_reads_back_exactly() {
        let mut w = Watcher::with_extras(
            vec!["load.a, b".into()],
            vec!["max T (p-norm, p = 8) ≤ 450".into(), "say \"peak\"".into()],
        );
        for i in 0..3 {
            w.push(WatchRow {
                iteration: i,
                objective: 0.1 * i as f64 + 1.0 / 3.0,
                params: vec![2.0f64.sqrt() + i as f64],
                gradient: vec![-1e-300 * i as f64],
                grad_norm: f64::NAN,
                evaluations: 2 * i + 1,
                extras: vec![450.0 - i as f64, f64::INFINITY],
            });
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.csv");
        w.write_csv(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with(
            "iteration,objective,grad_norm,evaluations,\"load.a, b\",\"grad.load.a, b\",\"max T (p-norm, p = 8) ≤ 450\",\"say \"\"peak\"\"\"\n"
        ), "{text}");
        let back = Watcher::read_csv(&path, 1).unwrap();
        assert_eq!(back.names(), w.names());
        assert_eq!(back.extra_names(), w.extra_names());
        assert_eq!(back.history().len(), 3);
        for (a, b) in back.history().iter().zip(w.history()) {
            assert_eq!(
                (a.iteration, a.evaluations, a.objective),
                (b.iteration, b.evaluations, b.objective)
            );
            assert_eq!((&a.params, &a.gradient, &a.extras), (&b.params, &b.gradient, &b.extras));
            assert!(a.grad_norm.is_nan());
        }
        std::fs::write(&path, "iteration,objective,grad_norm,evaluations,a,grad.a\n0,1,2,3,4\n")
            .unwrap();
        let err = Watcher::read_csv(&path, 1).unwrap_err().to_string();
        assert!(err.contains("h.csv:2:") && err.contains("5 field(s), the header has 6"), "{err}");
    }

    #[test]
    fn png_is_a_valid_png() {
        let w = quadratic_watch();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("watch.png");
        w.write_png(&path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert!(bytes.len() > 1000, "{} bytes", bytes.len());
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        // IHDR: width 900, height 700.
        assert_eq!(&bytes[12..16], b"IHDR");
        assert_eq!(u32::from_be_bytes(bytes[16..20].try_into().unwrap()), 900);
        assert_eq!(u32::from_be_bytes(bytes[20..24].try_into().unwrap()), 700);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn write_to_missing_directory_is_an_error_with_the_path() {
        let w = quadratic_watch();
        let err = w.write_csv("/nonexistent-gradfem-dir/x.csv").unwrap_err();
        assert!(err.to_string().contains("/nonexistent-gradfem-dir/x.csv"), "{err}");
    }
}
