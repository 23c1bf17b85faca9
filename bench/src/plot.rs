//! Charts of a sweep: time against threads (a line per batch size), the
//! grid as a heat map, and the contenders as bars. Each is written as
//! SVG and PNG.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use zinstall_tune::peers::Tool;
use zinstall_tune::report::Samples;
use zinstall_tune::sweep::Grid;

type R = Result<(), String>;

fn median(samples: &[Samples], name: &str) -> Option<f64> {
    samples
        .iter()
        .find(|s| s.tool == name && !s.times.is_empty())
        .map(|s| s.median().as_secs_f64())
}

/// Writes `stem.svg` and `stem.png` with `draw`.
fn both(
    stem: &Path,
    size: (u32, u32),
    draw_svg: impl Fn(&DrawingArea<SVGBackend, Shift>) -> R,
    draw_png: impl Fn(&DrawingArea<BitMapBackend, Shift>) -> R,
) -> R {
    let svg = stem.with_extension("svg");
    {
        let root = SVGBackend::new(&svg, size).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        draw_svg(&root)?;
        root.present()
            .map_err(|e| format!("{}: {e}", svg.display()))?;
    }
    let png = stem.with_extension("png");
    let root = BitMapBackend::new(&png, size).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    draw_png(&root)?;
    root.present()
        .map_err(|e| format!("{}: {e}", png.display()))
}

struct Lines<'a> {
    grid: &'a Grid,
    samples: &'a [Samples],
    title: &'a str,
}

trait Draw<DB: DrawingBackend> {
    fn draw(&self, root: &DrawingArea<DB, Shift>) -> R;
}

impl<DB: DrawingBackend> Draw<DB> for Lines<'_> {
    fn draw(&self, root: &DrawingArea<DB, Shift>) -> R {
        let n = self.grid.threads.len();
        let ymax = self
            .samples
            .iter()
            .map(|s| s.median().as_secs_f64())
            .fold(0.0, f64::max)
            * 1.1;
        let mut chart = ChartBuilder::on(root)
            .caption(self.title, ("sans-serif", 22))
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(55)
            .build_cartesian_2d(
                -0.3f64..(n as f64 - 0.7),
                0f64..ymax.max(0.001),
            )
            .map_err(|e| e.to_string())?;
        let threads = self.grid.threads.clone();
        chart
            .configure_mesh()
            .x_desc("COPY_THREADS")
            .y_desc("median seconds")
            .x_labels(n)
            .x_label_formatter(&|x| {
                let i = x.round() as usize;
                if (x - i as f64).abs() < 0.01 {
                    threads.get(i).map(|t| t.to_string()).unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .draw()
            .map_err(|e| e.to_string())?;
        for (k, &b) in self.grid.batches.iter().enumerate() {
            let color = Palette99::pick(k).to_rgba();
            let pts: Vec<(f64, f64)> = self
                .grid
                .threads
                .iter()
                .enumerate()
                .filter_map(|(i, &t)| {
                    median(self.samples, &Tool::zinstall(t, b).name())
                        .map(|m| (i as f64, m))
                })
                .collect();
            chart
                .draw_series(LineSeries::new(
                    pts.clone(),
                    color.stroke_width(2),
                ))
                .map_err(|e| e.to_string())?
                .label(format!("COPY_BATCH={b}"))
                .legend(move |(x, y)| {
                    PathElement::new(
                        vec![(x, y), (x + 20, y)],
                        color.stroke_width(2),
                    )
                });
            chart
                .draw_series(
                    pts.into_iter().map(|p| Circle::new(p, 3, color.filled())),
                )
                .map_err(|e| e.to_string())?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| e.to_string())
    }
}

struct Heat<'a> {
    grid: &'a Grid,
    samples: &'a [Samples],
    title: &'a str,
}

impl<DB: DrawingBackend> Draw<DB> for Heat<'_> {
    fn draw(&self, root: &DrawingArea<DB, Shift>) -> R {
        let (nt, nb) = (self.grid.threads.len(), self.grid.batches.len());
        let meds: Vec<f64> = self
            .samples
            .iter()
            .filter(|s| s.tool.starts_with("zinstall "))
            .map(|s| s.median().as_secs_f64())
            .collect();
        let lo = meds.iter().cloned().fold(f64::INFINITY, f64::min);
        let hi = meds.iter().cloned().fold(0.0, f64::max);
        let mut chart = ChartBuilder::on(root)
            .caption(self.title, ("sans-serif", 22))
            .margin(15)
            .x_label_area_size(30)
            .y_label_area_size(30)
            .build_cartesian_2d(0f64..nt as f64, 0f64..nb as f64)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_labels(0)
            .y_labels(0)
            .x_desc("COPY_THREADS (columns)")
            .y_desc("COPY_BATCH (rows)")
            .draw()
            .map_err(|e| e.to_string())?;
        for (i, &t) in self.grid.threads.iter().enumerate() {
            for (j, &b) in self.grid.batches.iter().enumerate() {
                let Some(m) =
                    median(self.samples, &Tool::zinstall(t, b).name())
                else {
                    continue;
                };
                let f = if hi > lo { (m - lo) / (hi - lo) } else { 0.0 };
                let color = RGBColor(
                    (60.0 + 195.0 * f) as u8,
                    (200.0 - 150.0 * f) as u8,
                    90,
                );
                let cell =
                    [(i as f64, j as f64), (i as f64 + 1.0, j as f64 + 1.0)];
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        cell,
                        color.filled(),
                    )))
                    .map_err(|e| e.to_string())?;
                for (k, line) in [format!("{t} x {b}"), format!("{m:.3} s")]
                    .into_iter()
                    .enumerate()
                {
                    chart
                        .draw_series(std::iter::once(Text::new(
                            line,
                            (i as f64 + 0.08, j as f64 + 0.7 - 0.25 * k as f64),
                            ("sans-serif", 14).into_font().color(&BLACK),
                        )))
                        .map_err(|e| e.to_string())?;
                }
            }
        }
        Ok(())
    }
}

struct Bars<'a> {
    rows: Vec<(String, f64)>,
    title: &'a str,
}

impl<DB: DrawingBackend> Draw<DB> for Bars<'_> {
    fn draw(&self, root: &DrawingArea<DB, Shift>) -> R {
        let n = self.rows.len();
        let xmax = self.rows.iter().map(|r| r.1).fold(0.0, f64::max) * 1.15;
        let mut chart = ChartBuilder::on(root)
            .caption(self.title, ("sans-serif", 22))
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(10)
            .build_cartesian_2d(0f64..xmax.max(0.001), 0f64..n as f64)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(0)
            .x_desc("median seconds")
            .draw()
            .map_err(|e| e.to_string())?;
        for (i, (name, v)) in self.rows.iter().enumerate() {
            let y = (n - 1 - i) as f64;
            let color = if name.starts_with("zinstall") {
                RGBColor(40, 120, 200)
            } else {
                RGBColor(170, 170, 170)
            };
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(0.0, y + 0.15), (*v, y + 0.85)],
                    color.filled(),
                )))
                .map_err(|e| e.to_string())?;
            chart
                .draw_series(std::iter::once(Text::new(
                    format!("{name}  {v:.3} s"),
                    (xmax * 0.01, y + 0.62),
                    ("sans-serif", 15).into_font().color(&BLACK),
                )))
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

/// Writes `lines`, `heatmap` and `peers` charts (SVG and PNG) into `dir`.
pub fn sweep_charts(
    dir: &Path,
    tree: &str,
    grid: &Grid,
    samples: &[Samples],
) -> R {
    let lines = Lines {
        grid,
        samples,
        title: &format!("zinstall copy of {tree}: time against threads"),
    };
    both(
        &dir.join("lines"),
        (900, 600),
        |r| lines.draw(r),
        |r| lines.draw(r),
    )?;
    let heat = Heat {
        grid,
        samples,
        title: &format!("zinstall copy of {tree}: median seconds"),
    };
    both(
        &dir.join("heatmap"),
        (900, 600),
        |r| heat.draw(r),
        |r| heat.draw(r),
    )?;
    let mut rows: Vec<(String, f64)> = samples
        .iter()
        .filter(|s| !s.times.is_empty())
        .filter(|s| {
            !s.tool.starts_with("zinstall ")
                || s.tool == "zinstall 8x128"
                || s.tool == "zinstall 1x1"
        })
        .map(|s| (s.tool.clone(), s.median().as_secs_f64()))
        .collect();
    if let Some((p, s)) = zinstall_tune::sweep::best(samples, grid) {
        let name = format!("{} (best)", p.tool().name());
        rows.push((name, s.median().as_secs_f64()));
    }
    rows.sort_by(|a, b| a.1.total_cmp(&b.1));
    let bars = Bars {
        rows,
        title: &format!("copying {tree}: zinstall and its peers"),
    };
    both(
        &dir.join("peers"),
        (900, 500),
        |r| bars.draw(r),
        |r| bars.draw(r),
    )
}
