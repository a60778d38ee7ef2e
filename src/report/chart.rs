//! Small inline-SVG charts for `report.html`: lines (time series, CDFs) and grouped bars.
//! No chart library and no network: the page carries its own drawings.

use std::fmt::Write;

/// Colours of runs (or instances), in order; colour-blind-safe (Okabe–Ito, then Tableau).
pub const PALETTE: [&str; 12] = [
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#8c564b",
    "#7f7f7f", "#bcbd22", "#17becf", "#9467bd",
];

pub fn colour(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// One line of a chart.
#[derive(Clone, Debug)]
pub struct Series {
    pub name: String,
    pub colour: &'static str,
    pub points: Vec<(f64, f64)>,
    pub dashed: bool,
    /// A dot at each point instead of a line through them (a scatter of trials).
    pub markers: bool,
}

/// A line chart: x and y axes with ticks, one polyline per series, a legend.
#[derive(Clone, Debug, Default)]
pub struct LineChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
    /// Draw as steps (CDFs, sampled state) rather than straight segments.
    pub step: bool,
    /// Fix the y range (e.g. 0..1 for a CDF or a fraction).
    pub y_range: Option<(f64, f64)>,
    /// Logarithmic x axis (points with x ≤ 0 are left out).
    pub x_log: bool,
}

const W: f64 = 560.0;
const H: f64 = 300.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 34.0;
const BOTTOM: f64 = 44.0;

/// Escapes text for HTML and SVG.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// About `n` round tick values covering `lo..=hi`.
pub fn ticks(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite()) || hi <= lo {
        return vec![lo];
    }
    let raw = (hi - lo) / n.max(1) as f64;
    let step = crate::observe::timeseries::nice(raw);
    let first = (lo / step).ceil() * step;
    let mut out = Vec::new();
    let mut k = 0.0;
    while first + k * step <= hi + step * 1e-9 && out.len() < 50 {
        // Rounding keeps 0.30000000000000004 off the axis.
        let v = first + k * step;
        out.push(if v.abs() < step * 1e-9 { 0.0 } else { v });
        k += 1.0;
    }
    out
}

/// Ticks of a log axis over log10 values `lo..=hi`: 1, 2 and 5 × 10ⁿ (only the powers of
/// ten when the axis spans more than three decades).
pub fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let mantissas: &[f64] = if hi - lo > 3.0 {
        &[1.0]
    } else {
        &[1.0, 2.0, 5.0]
    };
    let mut out = Vec::new();
    let mut d = lo.floor();
    while d <= hi.ceil() && out.len() < 40 {
        for m in mantissas {
            let v = (m * 10f64.powf(d)).log10();
            if v >= lo - 1e-9 && v <= hi + 1e-9 {
                out.push(v);
            }
        }
        d += 1.0;
    }
    out
}

/// A tick label: short, no trailing zeros.
pub fn label(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        let m = format!("{:.3}", v / 1e6);
        format!("{}M", m.trim_end_matches('0').trim_end_matches('.'))
    } else if a >= 1e4 {
        format!("{:.1}k", v / 1e3).replace(".0k", "k")
    } else if a == 0.0 || a >= 1.0 {
        let s = format!("{v:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        let s = format!("{v:.4}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// Horizontal grid lines with their labels at the left edge, one per tick.
fn y_grid(s: &mut String, ticks: Vec<f64>, py: impl Fn(f64) -> f64) {
    for v in ticks {
        let y = py(v);
        let _ = write!(
            s,
            r#"<line class="grid" x1="{LEFT}" x2="{}" y1="{y:.1}" y2="{y:.1}"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"#,
            W - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            label(v)
        );
    }
}

/// Keeps at most `n` points of a line, evenly spaced (the first and the last kept).
pub fn thin(points: &[(f64, f64)], n: usize) -> Vec<(f64, f64)> {
    if points.len() <= n || n < 2 {
        return points.to_vec();
    }
    (0..n)
        .map(|i| points[i * (points.len() - 1) / (n - 1)])
        .collect()
}

impl LineChart {
    /// The chart as an `<svg>` element (class `chart`, one `<path class="series">` per
    /// series with its name in `data-name`).
    pub fn svg(&self) -> String {
        let log = self.x_log;
        let tx = |x: f64| if log { x.log10() } else { x };
        let pts = self
            .series
            .iter()
            .flat_map(|s| s.points.iter())
            .map(|&(x, y)| (tx(x), y));
        let (mut x0, mut x1, mut y0, mut y1) = (
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::INFINITY,
            f64::NEG_INFINITY,
        );
        for (x, y) in pts {
            if x.is_finite() && y.is_finite() {
                x0 = x0.min(x);
                x1 = x1.max(x);
                y0 = y0.min(y);
                y1 = y1.max(y);
            }
        }
        let mut s = String::new();
        let head = |s: &mut String, data: &str| {
            let _ = write!(
                s,
                r#"<svg class="chart" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" aria-label="{t}"{data}><title>{t}</title><text class="title" x="{}" y="18" text-anchor="middle">{t}</text>"#,
                W / 2.0,
                t = esc(&self.title)
            );
        };
        if !x0.is_finite() {
            head(&mut s, "");
            let _ = write!(
                s,
                r#"<text class="empty" x="{}" y="{}" text-anchor="middle">no data</text></svg>"#,
                W / 2.0,
                H / 2.0
            );
            return s;
        }
        if let Some((a, b)) = self.y_range {
            y0 = a;
            y1 = b;
        } else {
            y0 = y0.min(0.0);
            if y1 <= y0 {
                y1 = y0 + 1.0;
            }
            y1 += (y1 - y0) * 0.05;
        }
        if x1 <= x0 {
            x1 = x0 + 1.0;
        }
        head(
            &mut s,
            &format!(
                r#" data-x0="{x0}" data-x1="{x1}" data-y0="{y0}" data-y1="{y1}"{}"#,
                if log { r#" data-xlog="1""# } else { "" }
            ),
        );
        let px = |x: f64| LEFT + (x - x0) / (x1 - x0) * (W - LEFT - RIGHT);
        let py = |y: f64| H - BOTTOM - (y - y0) / (y1 - y0) * (H - TOP - BOTTOM);
        // Grid, ticks and labels.
        s.push_str(r#"<g class="axes">"#);
        y_grid(&mut s, ticks(y0, y1, 5), py);
        let x_ticks = if log {
            log_ticks(x0, x1)
        } else {
            ticks(x0, x1, 6)
        };
        for v in x_ticks {
            let x = px(v);
            let _ = write!(
                s,
                r#"<line class="grid" x1="{x:.1}" x2="{x:.1}" y1="{TOP}" y2="{}"/><text x="{x:.1}" y="{}" text-anchor="middle">{}</text>"#,
                H - BOTTOM,
                H - BOTTOM + 16.0,
                label(if log { 10f64.powf(v) } else { v })
            );
        }
        let _ = write!(
            s,
            r#"<rect class="frame" x="{LEFT}" y="{TOP}" width="{}" height="{}"/>"#,
            W - LEFT - RIGHT,
            H - TOP - BOTTOM
        );
        let _ = write!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            LEFT + (W - LEFT - RIGHT) / 2.0,
            H - 8.0,
            esc(&self.x_label)
        );
        let _ = write!(
            s,
            r#"<text x="14" y="{}" text-anchor="middle" transform="rotate(-90 14 {})">{}</text>"#,
            TOP + (H - TOP - BOTTOM) / 2.0,
            TOP + (H - TOP - BOTTOM) / 2.0,
            esc(&self.y_label)
        );
        s.push_str("</g>");
        // Lines, and dots for the series drawn as points.
        for series in self.series.iter().filter(|s| s.markers) {
            let _ = write!(
                s,
                r#"<g class="markers" data-name="{}" fill="{}">"#,
                esc(&series.name),
                series.colour
            );
            for &(x, y) in &series.points {
                let x = tx(x);
                if x.is_finite() && y.is_finite() {
                    let _ = write!(
                        s,
                        r#"<circle cx="{:.1}" cy="{:.1}" r="3"/>"#,
                        px(x),
                        py(y.clamp(y0, y1))
                    );
                }
            }
            s.push_str("</g>");
        }
        for series in self.series.iter().filter(|s| !s.markers) {
            let mut d = String::new();
            let mut last: Option<(f64, f64)> = None;
            for &(x, y) in &series.points {
                let x = tx(x);
                if !(x.is_finite() && y.is_finite()) {
                    continue;
                }
                let (cx, cy) = (px(x), py(y.clamp(y0, y1)));
                match last {
                    None => {
                        let _ = write!(d, "M{cx:.1},{cy:.1}");
                    }
                    Some(_) if self.step => {
                        let _ = write!(d, "H{cx:.1}V{cy:.1}");
                    }
                    Some(_) => {
                        let _ = write!(d, "L{cx:.1},{cy:.1}");
                    }
                }
                last = Some((cx, cy));
            }
            let _ = write!(
                s,
                r#"<path class="series" data-name="{}" d="{d}" stroke="{}"{}/>"#,
                esc(&series.name),
                series.colour,
                if series.dashed {
                    r#" stroke-dasharray="5 3""#
                } else {
                    ""
                }
            );
        }
        // Legend (top right, inside the frame, over a veil so lines do not hide it).
        let entries = self.series.len().min(12);
        if entries > 0 {
            let longest = self
                .series
                .iter()
                .take(entries)
                .map(|s| s.name.chars().count())
                .max()
                .unwrap_or(0) as f64;
            let width = longest * 6.2 + 34.0;
            let _ = write!(
                s,
                r##"<rect class="veil" x="{:.1}" y="{}" width="{width:.1}" height="{}" fill="#fff" fill-opacity="0.85"/>"##,
                W - RIGHT - 2.0 - width,
                TOP + 3.0,
                entries as f64 * 14.0 + 4.0
            );
        }
        for (i, series) in self.series.iter().enumerate().take(12) {
            let y = TOP + 12.0 + i as f64 * 14.0;
            if series.markers {
                let _ = write!(
                    s,
                    r#"<g class="legend" data-name="{n}"><circle cx="{}" cy="{y}" r="3" fill="{}"/><text x="{}" y="{}" text-anchor="end">{n}</text></g>"#,
                    W - RIGHT - 14.0,
                    series.colour,
                    W - RIGHT - 26.0,
                    y + 4.0,
                    n = esc(&series.name)
                );
                continue;
            }
            let _ = write!(
                s,
                r#"<g class="legend" data-name="{n}"><line x1="{}" x2="{}" y1="{y}" y2="{y}" stroke="{}" stroke-width="2"{}/><text x="{}" y="{}" text-anchor="end">{n}</text></g>"#,
                W - RIGHT - 22.0,
                W - RIGHT - 6.0,
                series.colour,
                if series.dashed {
                    r#" stroke-dasharray="5 3""#
                } else {
                    ""
                },
                W - RIGHT - 26.0,
                y + 4.0,
                n = esc(&series.name)
            );
        }
        s.push_str("</svg>");
        s
    }
}

/// Grouped bars: one group per category (e.g. p50, p90, p99), one bar per run.
#[derive(Clone, Debug, Default)]
pub struct BarChart {
    pub title: String,
    pub y_label: String,
    pub categories: Vec<String>,
    /// (run name, colour, one value per category).
    pub bars: Vec<(String, &'static str, Vec<f64>)>,
    /// Name the bars in a legend (top right; the y axis leaves room for it). Without it the
    /// page's run swatches name them.
    pub legend: bool,
}

impl BarChart {
    pub fn svg(&self) -> String {
        let max = self
            .bars
            .iter()
            .flat_map(|b| b.2.iter().copied())
            .filter(|v| v.is_finite())
            .fold(0.0f64, f64::max);
        let entries = if self.legend {
            self.bars.len().min(12)
        } else {
            0
        };
        let legend_h = if entries > 0 {
            entries as f64 * 14.0 + 6.0
        } else {
            0.0
        };
        let plot_h = H - TOP - BOTTOM;
        let top = if max > 0.0 { max * 1.08 } else { 1.0 } * plot_h / (plot_h - legend_h);
        let py = |y: f64| H - BOTTOM - y / top * (H - TOP - BOTTOM);
        let mut s = String::new();
        let _ = write!(
            s,
            r#"<svg class="chart bars" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" aria-label="{t}"><title>{t}</title><text class="title" x="{}" y="18" text-anchor="middle">{t}</text>"#,
            W / 2.0,
            t = esc(&self.title)
        );
        // No value at all (a run that completed no request has no percentile): said as the
        // line charts say it, not drawn as bars of 0.
        if !self.bars.iter().flat_map(|b| &b.2).any(|v| v.is_finite()) {
            let _ = write!(
                s,
                r#"<text class="empty" x="{}" y="{}" text-anchor="middle">no data</text></svg>"#,
                W / 2.0,
                H / 2.0
            );
            return s;
        }
        s.push_str(r#"<g class="axes">"#);
        y_grid(&mut s, ticks(0.0, top, 5), py);
        let _ = write!(
            s,
            r#"<text x="14" y="{c}" text-anchor="middle" transform="rotate(-90 14 {c})">{}</text></g>"#,
            esc(&self.y_label),
            c = TOP + (H - TOP - BOTTOM) / 2.0
        );
        let groups = self.categories.len().max(1) as f64;
        let slot = (W - LEFT - RIGHT) / groups;
        let n = self.bars.len().max(1) as f64;
        let bar = (slot * 0.8 / n).min(40.0);
        for (c, cat) in self.categories.iter().enumerate() {
            let x0 = LEFT + slot * c as f64 + (slot - bar * n) / 2.0;
            for (b, (name, colour, values)) in self.bars.iter().enumerate() {
                let given = values.get(c).copied().unwrap_or(0.0);
                let (v, shown) = if given.is_finite() {
                    (given.max(0.0), label(given.max(0.0)))
                } else {
                    (0.0, "n/a".to_string())
                };
                let x = x0 + bar * b as f64;
                let _ = write!(
                    s,
                    r#"<rect class="bar" data-name="{}" x="{x:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{colour}"><title>{}: {} = {}</title></rect>"#,
                    esc(name),
                    py(v),
                    (bar - 2.0).max(1.0),
                    H - BOTTOM - py(v),
                    esc(name),
                    esc(cat),
                    shown
                );
            }
            let _ = write!(
                s,
                r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
                LEFT + slot * (c as f64 + 0.5),
                H - BOTTOM + 16.0,
                esc(cat)
            );
        }
        for (i, (name, colour, _)) in self.bars.iter().enumerate().take(entries) {
            let y = TOP + 12.0 + i as f64 * 14.0;
            let _ = write!(
                s,
                r#"<g class="legend" data-name="{n}"><rect x="{}" y="{}" width="10" height="10" fill="{colour}"/><text x="{}" y="{}" text-anchor="end">{n}</text></g>"#,
                W - RIGHT - 16.0,
                y - 5.0,
                W - RIGHT - 20.0,
                y + 4.0,
                n = esc(name)
            );
        }
        s.push_str("</svg>");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(ticks(0.0, 10.0, 5), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(
            ticks(0.0, 1.0, 5),
            vec![0.0, 0.2, 0.4, 0.6000000000000001, 0.8, 1.0]
        );
        let t = ticks(13.0, 87.0, 4);
        assert_eq!(t, vec![20.0, 40.0, 60.0, 80.0]);
    }

    #[test]
    fn log_ticks_are_one_two_five_per_decade() {
        let t: Vec<f64> = log_ticks(1.0, 2.5)
            .into_iter()
            .map(|v| (10f64.powf(v) * 1000.0).round() / 1000.0)
            .collect();
        assert_eq!(t, vec![10.0, 20.0, 50.0, 100.0, 200.0]);
        assert_eq!(log_ticks(0.0, 5.0).len(), 6);
    }

    #[test]
    fn labels_are_short() {
        assert_eq!(label(0.0), "0");
        assert_eq!(label(2.5), "2.5");
        assert_eq!(label(20000.0), "20k");
        assert_eq!(label(0.05), "0.05");
        assert_eq!(label(1_500_000.0), "1.5M");
    }

    #[test]
    fn a_line_chart_draws_one_path_per_series_inside_the_frame() {
        let chart = LineChart {
            title: "t <1>".into(),
            series: vec![
                Series {
                    name: "a".into(),
                    colour: colour(0),
                    points: vec![(0.0, 0.0), (1.0, 2.0), (2.0, 1.0)],
                    dashed: false,
                    markers: false,
                },
                Series {
                    name: "b".into(),
                    colour: colour(1),
                    points: vec![(0.0, 1.0), (2.0, 3.0)],
                    dashed: true,
                    markers: false,
                },
            ],
            ..Default::default()
        };
        let svg = chart.svg();
        assert_eq!(svg.matches(r#"<path class="series""#).count(), 2);
        assert!(svg.contains("t &lt;1&gt;"));
        // Every path coordinate lies inside the plotting frame.
        for path in svg.split(r#" d=""#).skip(1) {
            let d = path.split('"').next().unwrap();
            for pair in d.split(['M', 'L']).filter(|p| !p.is_empty()) {
                let (x, y) = pair.split_once(',').unwrap();
                let (x, y): (f64, f64) = (x.parse().unwrap(), y.parse().unwrap());
                assert!((LEFT..=W - RIGHT).contains(&x), "{x}");
                assert!((TOP..=H - BOTTOM).contains(&y), "{y}");
            }
        }
    }

    /// A run that completed no request has no percentiles: they were drawn as bars of 0
    /// titled "= 0" beside a summary saying n/a.
    #[test]
    fn a_bar_without_a_value_is_not_drawn_as_zero() {
        let chart = |values: Vec<f64>| {
            BarChart {
                title: "TTFT percentiles".into(),
                y_label: "ms".into(),
                categories: vec!["p50".into(), "p99".into()],
                bars: vec![("a".into(), colour(0), values)],
                legend: false,
            }
            .svg()
        };
        let none = chart(vec![f64::NAN, f64::NAN]);
        assert!(none.contains(">no data</text>"), "{none}");
        assert!(!none.contains(r#"class="bar""#), "{none}");
        let one = chart(vec![f64::NAN, 12.0]);
        assert!(
            one.contains("a: p50 = n/a") && one.contains("a: p99 = 12"),
            "{one}"
        );
    }

    #[test]
    fn thinning_keeps_ends() {
        let pts: Vec<(f64, f64)> = (0..1000).map(|i| (i as f64, 0.0)).collect();
        let t = thin(&pts, 11);
        assert_eq!(t.len(), 11);
        assert_eq!(t[0].0, 0.0);
        assert_eq!(t[10].0, 999.0);
    }
}
