//! Drawing a statemap as SVG.
//!
//! Time runs left to right; each entity is a row; each interval is a
//! rectangle coloured by its state. Intervals narrower than a pixel are
//! gathered into one rectangle coloured by the state that dominates it,
//! so a long recording stays a small file. Every rectangle's width is the
//! exact sum of the intervals it stands for, so the widths of an entity's
//! rectangles always add up to its span times the scale.
//!
//! Each rectangle carries a `<title>` that a viewer shows on hover: the
//! entity, the state (or, for a gathered one, the state that dominates
//! it and the share of each), when it starts and how long it lasts. The
//! time axis counts in one unit (s, ms or µs) chosen from the length of
//! the map. Opened in a browser, the drawing zooms: the mouse wheel over
//! the rows zooms the time axis around the pointer, dragging pans, and a
//! double click shows the whole map again (a small script in the SVG,
//! which renderers that run no scripts ignore).

use std::fmt::Write as _;
use std::io::{self, Write};

use super::Statemap;
use super::summary::intervals;

/// Layout of the drawing.
#[derive(Clone, Debug)]
pub struct RenderOptions {
    /// Total width in pixels.
    pub width: f64,
    /// Width of the entity label column.
    pub label_width: f64,
    /// Rectangles narrower than this are gathered (pixels).
    pub min_rect: f64,
}

impl Default for RenderOptions {
    fn default() -> Self {
        RenderOptions {
            width: 1200.0,
            label_width: 110.0,
            min_rect: 1.0,
        }
    }
}

/// Renders `map` as an SVG document.
pub fn render_svg(
    map: &Statemap,
    opts: &RenderOptions,
    mut out: impl Write,
) -> io::Result<()> {
    let rows = intervals(map);
    let d = Drawing::new(map, opts, &rows);
    let mut s = String::new();
    d.head(&mut s, rows.len());
    let mut labels = String::new();
    let (x0, top, plot_w, plot_h) = (d.x0, d.top, d.plot_w, d.plot_h);
    let _ = writeln!(
        s,
        "<clipPath id=\"clip\"><rect x=\"{x0}\" y=\"{top}\" \
         width=\"{plot_w}\" height=\"{plot_h}\"/></clipPath>\n\
         <g id=\"plot\" clip-path=\"url(#clip)\"><rect x=\"{x0}\" \
         y=\"{top}\" width=\"{plot_w}\" height=\"{plot_h}\" \
         fill=\"white\"/>\n<g id=\"rows\">"
    );
    for (r, (name, spans)) in rows.iter().enumerate() {
        d.row(&mut s, &mut labels, r, name, spans);
    }
    let _ = writeln!(s, "</g></g>");
    s.push_str(&labels);
    // Time axis with round ticks.
    let axis_y = top + plot_h + 4.0;
    d.axis(&mut s, axis_y);
    d.legend(&mut s, axis_y);
    let _ = writeln!(
        s,
        "<script><![CDATA[\n{}]]></script>",
        ZOOM_SCRIPT
            .replace("@X0@", &format!("{x0}"))
            .replace("@W@", &format!("{plot_w}"))
            .replace("@SPAN@", &format!("{}", d.span as f64 / d.unit.ns))
            .replace("@UNIT@", d.unit.name)
            .replace("@AXISY@", &format!("{axis_y}"))
    );
    s.push_str("</svg>\n");
    out.write_all(s.as_bytes())?;
    out.flush()
}

/// The drawing of a map: its geometry, and the span of time it shows.
struct Drawing<'a> {
    map: &'a Statemap,
    opts: &'a RenderOptions,
    /// The plot's left edge (the label column's width).
    x0: f64,
    /// The first row's top.
    top: f64,
    plot_w: f64,
    plot_h: f64,
    row_h: f64,
    height: f64,
    /// Pixels per nanosecond.
    scale: f64,
    /// The first time in the map, and the length of the map from it.
    t_min: u64,
    span: u64,
    unit: Unit,
}

/// Intervals of a row gathered into one rectangle: its x and width, the
/// time in each state, and the time it starts and ends.
struct Gathered {
    x: f64,
    w: f64,
    time_in: Vec<u64>,
    t0: u64,
    t1: u64,
}

impl<'a> Drawing<'a> {
    fn new(
        map: &'a Statemap,
        opts: &'a RenderOptions,
        rows: &[(String, Vec<super::summary::Interval>)],
    ) -> Self {
        let t_min = rows
            .iter()
            .filter_map(|(_, s)| s.first().map(|i| i.0))
            .min()
            .unwrap_or(0);
        let t_max = map.end().max(t_min.saturating_add(1));
        let n = rows.len().max(1);
        // Rows shrink as entities grow: 28 px for a few, 10 px for 64.
        let row_h = (640.0 / n as f64).clamp(8.0, 28.0);
        let (top, plot_w) = (56.0, opts.width - opts.label_width - 20.0);
        let plot_h = row_h * n as f64;
        let legend_rows = map.meta.states.len().div_ceil(4);
        let height = top + plot_h + 40.0 + 22.0 * legend_rows as f64 + 10.0;
        let span = t_max - t_min;
        Drawing {
            map,
            opts,
            x0: opts.label_width,
            top,
            plot_w,
            plot_h,
            row_h,
            height,
            scale: plot_w / (t_max - t_min).max(1) as f64,
            t_min,
            span,
            unit: Unit::for_span(span),
        }
    }

    /// The document's start: its size, background, title and subtitle
    /// (`rows` entities).
    fn head(&self, s: &mut String, rows: usize) {
        let (map, x0, height) = (self.map, self.x0, self.height);
        let _ = writeln!(
            s,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" \
             height=\"{height:.0}\" viewBox=\"0 0 {w} {height:.0}\" \
             font-family=\"sans-serif\" font-size=\"12\">",
            w = self.opts.width
        );
        let _ = writeln!(
            s,
            "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>"
        );
        let mut title = map.meta.title.clone();
        if let Some(h) = &map.meta.host {
            title.push_str(" on ");
            title.push_str(h);
        }
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"22\" font-size=\"16\" font-weight=\"bold\">{}</text>",
            x0,
            esc(&title)
        );
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"40\" fill=\"#555\">{} {}s, {}</text>",
            x0,
            rows,
            esc(&map.meta.entity_kind.to_lowercase()),
            fmt_ns(self.span)
        );
    }

    /// Row `r`, the entity `name`: its label into `labels`, its
    /// intervals into `s`, those narrower than `min_rect` gathered.
    fn row(
        &self,
        s: &mut String,
        labels: &mut String,
        r: usize,
        name: &str,
        spans: &[super::summary::Interval],
    ) {
        let (x0, row_h) = (self.x0, self.row_h);
        let y = self.top + r as f64 * row_h;
        let _ = writeln!(
            labels,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" \
             font-size=\"{:.0}\">{}</text>",
            x0 - 6.0,
            y + row_h * 0.75,
            (row_h * 0.8).min(12.0),
            esc(name)
        );
        let _ =
            writeln!(s, "<g class=\"entity\" data-entity=\"{}\">", esc(name));
        let mut pending: Option<Gathered> = None;
        for &(t0, t1, st) in spans {
            let x = x0 + (t0 - self.t_min) as f64 * self.scale;
            let w = (t1 - t0) as f64 * self.scale;
            let p = pending.get_or_insert_with(|| Gathered {
                x,
                w: 0.0,
                time_in: vec![0; self.map.meta.states.len().max(1)],
                t0,
                t1: t0,
            });
            p.w += w;
            p.t1 = t1;
            if let Some(slot) = p.time_in.get_mut(st as usize) {
                *slot = slot.saturating_add(t1 - t0);
            }
            if p.w >= self.opts.min_rect
                && let Some(p) = pending.take()
            {
                self.rect(s, name, y, &p);
            }
        }
        if let Some(p) = pending.take()
            && p.w > 0.0
        {
            self.rect(s, name, y, &p);
        }
        let _ = writeln!(s, "</g>");
    }

    /// One rectangle of the entity `name` at `y`, coloured by the state
    /// that dominates it, its title telling the share of each.
    fn rect(&self, s: &mut String, name: &str, y: f64, p: &Gathered) {
        let states = &self.map.meta.states;
        let Gathered {
            x,
            w,
            time_in,
            t0,
            t1,
        } = p;
        let state = time_in
            .iter()
            .enumerate()
            .max_by_key(|(_, t)| **t)
            .map_or(0, |(i, _)| i);
        let color = states.get(state).map_or("#000000", |d| d.color.as_str());
        let state_name = |i: usize| states.get(i).map_or("?", |d| &d.name);
        let total = t1 - t0;
        let mut title = format!(
            "{name}: {} at {}, {}",
            state_name(state),
            fmt_time(t0 - self.t_min, self.unit),
            fmt_ns(total)
        );
        let shares: Vec<(usize, u64)> = time_in
            .iter()
            .copied()
            .enumerate()
            .filter(|(_, t)| *t > 0)
            .collect();
        if shares.len() > 1 {
            title.push_str(" (");
            for (k, (i, t)) in shares.iter().enumerate() {
                if k > 0 {
                    title.push_str(", ");
                }
                let _ = write!(
                    title,
                    "{} {:.0}%",
                    state_name(*i),
                    *t as f64 * 100.0 / total.max(1) as f64
                );
            }
            title.push(')');
        }
        let _ = writeln!(
            s,
            "<rect x=\"{x:.4}\" y=\"{y:.2}\" width=\"{w:.6}\" \
             height=\"{:.2}\" fill=\"{}\"><title>{}</title></rect>",
            self.row_h - 1.0,
            esc(color),
            esc(&title)
        );
    }

    /// The time axis at `axis_y`, its ticks at round times.
    fn axis(&self, s: &mut String, axis_y: f64) {
        let x0 = self.x0;
        let _ = writeln!(
            s,
            "<line x1=\"{x0}\" y1=\"{axis_y}\" x2=\"{:.1}\" y2=\"{axis_y}\" \
             stroke=\"#333\"/>",
            x0 + self.plot_w
        );
        let step = nice_step(self.span / 8);
        let _ = writeln!(s, "<g id=\"axis\">");
        let mut t = 0u64;
        loop {
            let x = x0 + t as f64 * self.scale;
            let _ = writeln!(
                s,
                "<line x1=\"{x:.1}\" y1=\"{axis_y}\" x2=\"{x:.1}\" y2=\"{:.1}\" \
                 stroke=\"#333\"/><text x=\"{x:.1}\" y=\"{:.1}\" \
                 text-anchor=\"middle\" font-size=\"11\">{}</text>",
                axis_y + 5.0,
                axis_y + 18.0,
                fmt_time(t, self.unit)
            );
            // The last tick may be the last one u64 can count to.
            match t.checked_add(step) {
                Some(next) if next <= self.span => t = next,
                _ => break,
            }
        }
        let _ = writeln!(s, "</g>");
    }

    /// The legend below the axis at `axis_y`, four states to a row.
    fn legend(&self, s: &mut String, axis_y: f64) {
        let legend_y = axis_y + 36.0;
        for (i, st) in self.map.meta.states.iter().enumerate() {
            let lx = self.x0 + (i % 4) as f64 * (self.plot_w / 4.0);
            let ly = legend_y + (i / 4) as f64 * 22.0;
            let _ = writeln!(
                s,
                "<rect x=\"{lx:.1}\" y=\"{:.1}\" width=\"14\" height=\"14\" \
                 fill=\"{}\" stroke=\"#333\"/><text x=\"{:.1}\" y=\"{ly:.1}\">{}</text>",
                ly - 11.0,
                esc(&st.color),
                lx + 20.0,
                esc(&st.name)
            );
        }
    }
}

/// Wheel zoom, drag pan and double-click reset of the rows, redrawing
/// the time axis. Placeholders: @X0@ (plot left), @W@ (plot width),
/// @SPAN@ (the map's length in @UNIT@), @AXISY@ (the axis line's y).
const ZOOM_SCRIPT: &str = r##"(function () {
  var svg = document.currentScript ? document.currentScript.ownerSVGElement
    : document.querySelector("svg");
  if (!svg || !svg.createSVGPoint) return;
  var NS = "http://www.w3.org/2000/svg", x0 = @X0@, w = @W@, span = @SPAN@;
  var plot = svg.getElementById("plot"), rows = svg.getElementById("rows");
  var axis = svg.getElementById("axis");
  var k = 1, tx = 0, drag = null;
  function px(e) {
    var p = svg.createSVGPoint(); p.x = e.clientX; p.y = e.clientY;
    return p.matrixTransform(svg.getScreenCTM().inverse()).x;
  }
  function fmt(v, step) {
    var d = Math.max(0, Math.min(6, -Math.floor(Math.log10(step))));
    return v.toFixed(d) + " @UNIT@";
  }
  function draw() {
    tx = Math.min(0, Math.max(w - w * k, tx));
    rows.setAttribute("transform",
      "translate(" + (x0 + tx) + ",0) scale(" + k + ",1) translate(" + -x0 + ",0)");
    while (axis.firstChild) axis.removeChild(axis.firstChild);
    var a = -tx / (w * k) * span, b = a + span / k, raw = (b - a) / 8;
    var p = Math.pow(10, Math.floor(Math.log10(raw))), step = p;
    [1, 2, 5, 10].some(function (m) { step = m * p; return step >= raw; });
    var y = @AXISY@;
    for (var t = Math.ceil(a / step) * step; t <= b + 1e-9; t += step) {
      var x = x0 + (t - a) / (b - a) * w;
      var l = document.createElementNS(NS, "line");
      l.setAttribute("x1", x); l.setAttribute("x2", x);
      l.setAttribute("y1", y); l.setAttribute("y2", y + 5);
      l.setAttribute("stroke", "#333"); axis.appendChild(l);
      var s = document.createElementNS(NS, "text");
      s.setAttribute("x", x); s.setAttribute("y", y + 18);
      s.setAttribute("text-anchor", "middle"); s.setAttribute("font-size", "11");
      s.textContent = fmt(t, step); axis.appendChild(s);
    }
  }
  plot.addEventListener("wheel", function (e) {
    e.preventDefault();
    var m = px(e) - x0, nk = Math.max(1, Math.min(1e6, k * Math.pow(1.0015, -e.deltaY)));
    tx = m - (m - tx) * nk / k; k = nk; draw();
  });
  plot.addEventListener("mousedown", function (e) { drag = [px(e), tx]; });
  window.addEventListener("mousemove", function (e) {
    if (drag) { tx = drag[1] + px(e) - drag[0]; draw(); }
  });
  window.addEventListener("mouseup", function () { drag = null; });
  plot.addEventListener("dblclick", function () { k = 1; tx = 0; draw(); });
})();
"##;

/// The one unit the time axis counts in.
#[derive(Clone, Copy, Debug)]
struct Unit {
    name: &'static str,
    ns: f64,
}

impl Unit {
    /// Seconds from 2 s up, milliseconds from 2 ms, else microseconds.
    fn for_span(span: u64) -> Unit {
        if span >= 2_000_000_000 {
            Unit { name: "s", ns: 1e9 }
        } else if span >= 2_000_000 {
            Unit {
                name: "ms",
                ns: 1e6,
            }
        } else {
            Unit {
                name: "µs",
                ns: 1e3,
            }
        }
    }
}

/// A time in `unit`, with as many decimals as it needs (at most 3).
fn fmt_time(ns: u64, unit: Unit) -> String {
    let v = ns as f64 / unit.ns;
    let mut t = format!("{v:.3}");
    while t.contains('.') && (t.ends_with('0') || t.ends_with('.')) {
        t.pop();
    }
    format!("{t} {}", unit.name)
}

/// A tick step of 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: u64) -> u64 {
    let mut p = 1u64;
    loop {
        for m in [1, 2, 5] {
            if p.saturating_mul(m) >= raw.max(1) {
                return p.saturating_mul(m);
            }
        }
        p = p.saturating_mul(10);
    }
}

fn fmt_ns(ns: u64) -> String {
    if ns >= 1_000_000_000 {
        format!("{:.2} s", ns as f64 / 1e9)
    } else if ns >= 1_000_000 {
        format!("{:.1} ms", ns as f64 / 1e6)
    } else if ns >= 1_000 {
        format!("{:.1} µs", ns as f64 / 1e3)
    } else {
        format!("{ns} ns")
    }
}

fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c if (c as u32) < 0x20 => out.push(' '),
            c => out.push(c),
        }
    }
    out
}
