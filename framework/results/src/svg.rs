//! Charts as inline SVG, drawn here rather than by a script library: the report
//! stays one small file with no network request and nothing to execute before
//! it shows, every figure is computed in Rust where it is tested, and the
//! charts print and zoom like text. Lines, points, log or linear axes with
//! round ticks, horizontal reference lines (SLO bounds), a legend whose entries
//! toggle their series (the report's one small script), and a tooltip on every
//! marker.

use std::fmt::Write as _;

/// The colours of series, in order (colour-blind-safe, Okabe-Ito).
pub const PALETTE: [&str; 8] = [
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442",
];

const W: f64 = 660.0;
const H: f64 = 330.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 18.0;
const TOP: f64 = 44.0;
const BOTTOM: f64 = 46.0;

/// An axis scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// Linear.
    Linear,
    /// Base-10 logarithmic (non-positive values are left out).
    Log,
}

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Joined points; a NaN `y` breaks the line.
    Line,
    /// Joined points with a marker (and tooltip) on each.
    LineMarkers,
    /// Unjoined dots (scatter).
    Points,
}

/// One series.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend name.
    pub name: String,
    /// The points.
    pub points: Vec<(f64, f64)>,
    /// How it is drawn.
    pub style: Style,
    /// Dashed (a second figure of the same run, such as p99 beside p50).
    pub dashed: bool,
    /// Index into [`PALETTE`] (wraps).
    pub colour: usize,
    /// Per point, its 95% interval in `y`, drawn as an error bar (empty: none).
    pub errors: Vec<Option<[f64; 2]>>,
}

impl Series {
    /// A solid line of colour `colour`.
    pub fn line(name: impl Into<String>, colour: usize, points: Vec<(f64, f64)>) -> Self {
        Self {
            name: name.into(),
            points,
            style: Style::Line,
            dashed: false,
            colour,
            errors: Vec::new(),
        }
    }

    /// The same series with an interval per point (`errors[i]` for
    /// `points[i]`), drawn as error bars.
    pub fn with_errors(mut self, errors: Vec<Option<[f64; 2]>>) -> Self {
        self.errors = errors;
        self
    }

    /// The error bars that can be drawn: (x, low, high).
    fn bars(&self, x: Scale, y: Scale) -> impl Iterator<Item = (f64, f64, f64)> + '_ {
        self.points
            .iter()
            .zip(&self.errors)
            .filter_map(move |(&(px, py), e)| {
                let [lo, hi] = (*e)?;
                (usable((px, py), x, y) && usable((px, lo), x, y) && usable((px, hi), x, y))
                    .then_some((px, lo, hi))
            })
    }

    /// The same series with another style.
    pub fn styled(mut self, style: Style) -> Self {
        self.style = style;
        self
    }

    /// The same series, dashed.
    pub fn dashed(mut self) -> Self {
        self.dashed = true;
        self
    }

    fn has_data(&self, x: Scale, y: Scale) -> bool {
        self.points.iter().any(|p| usable(*p, x, y))
    }
}

/// A horizontal reference line.
#[derive(Debug, Clone)]
pub struct Rule {
    /// Its `y`.
    pub y: f64,
    /// Its label.
    pub label: String,
}

/// One chart.
#[derive(Debug, Clone)]
pub struct Chart {
    /// A stable id (used for the element id).
    pub id: String,
    /// Title above the plot.
    pub title: String,
    /// Label of the x axis.
    pub x_label: String,
    /// Label of the y axis.
    pub y_label: String,
    /// The x scale.
    pub x_scale: Scale,
    /// The y scale.
    pub y_scale: Scale,
    /// Start the y axis at zero (linear scales).
    pub y_from_zero: bool,
    /// The series.
    pub series: Vec<Series>,
    /// Reference lines.
    pub rules: Vec<Rule>,
    /// Shaded spans of `x`.
    pub bands: Vec<Band>,
}

/// A shaded span of `x` (a run's transient, say), with a label.
#[derive(Debug, Clone)]
pub struct Band {
    /// Where it begins.
    pub from: f64,
    /// Where it ends.
    pub to: f64,
    /// Its label.
    pub label: String,
}

fn usable((x, y): (f64, f64), xs: Scale, ys: Scale) -> bool {
    x.is_finite()
        && y.is_finite()
        && (xs == Scale::Linear || x > 0.0)
        && (ys == Scale::Linear || y > 0.0)
}

/// Escapes text for HTML and SVG.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// A number in few characters: `0.25`, `12.5`, `1.2k`, `3M`.
pub fn short(v: f64) -> String {
    let a = v.abs();
    let (d, suffix) = if a >= 1e9 {
        (v / 1e9, "G")
    } else if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e4 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    if d != 0.0 && d.abs() < 1e-3 {
        return format!("{d:.0e}");
    }
    let t = if (d == d.round() && d.abs() < 1e15) || d.abs() >= 100.0 {
        format!("{d:.0}")
    } else if d.abs() >= 10.0 {
        format!("{d:.1}")
    } else if d.abs() >= 0.1 {
        format!("{d:.2}")
    } else {
        format!("{d:.3}")
    };
    let t = if t.contains('.') {
        t.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        t
    };
    format!("{t}{suffix}")
}

/// An axis: the data range mapped onto pixels.
#[derive(Debug, Clone, Copy)]
struct Axis {
    scale: Scale,
    lo: f64,
    hi: f64,
    p0: f64,
    p1: f64,
}

impl Axis {
    fn new(scale: Scale, lo: f64, hi: f64, p0: f64, p1: f64, from_zero: bool) -> Self {
        let (mut lo, mut hi) = (lo, hi);
        match scale {
            Scale::Linear => {
                if from_zero && lo > 0.0 {
                    lo = 0.0;
                }
                if hi <= lo {
                    let pad = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
                    lo -= if from_zero && lo == 0.0 { 0.0 } else { pad };
                    hi += pad;
                }
                let step = nice_step((hi - lo) / 5.0);
                lo = (lo / step).floor() * step;
                hi = (hi / step).ceil() * step;
            }
            Scale::Log => {
                // Beyond 1e±300 a decade's power no longer round-trips.
                lo = 10f64.powf(lo.clamp(1e-300, 1e300).log10().floor());
                hi = 10f64.powf(hi.clamp(1e-300, 1e300).log10().ceil());
                if hi <= lo {
                    hi = lo * 10.0;
                }
            }
        }
        // Ranges at the ends of f64 round to infinity or zero: fall back to a
        // unit range rather than draw nothing or loop over ticks.
        if !(lo.is_finite() && hi.is_finite() && hi > lo && (scale == Scale::Linear || lo > 0.0)) {
            (lo, hi) = match scale {
                Scale::Linear => (0.0, 1.0),
                Scale::Log => (1.0, 10.0),
            };
        }
        Self {
            scale,
            lo,
            hi,
            p0,
            p1,
        }
    }

    fn f(&self, v: f64) -> f64 {
        match self.scale {
            Scale::Linear => v,
            Scale::Log => v.log10(),
        }
    }

    fn px(&self, v: f64) -> f64 {
        let (a, b) = (self.f(self.lo), self.f(self.hi));
        self.p0 + (self.f(v) - a) / (b - a) * (self.p1 - self.p0)
    }

    fn ticks(&self) -> Vec<f64> {
        match self.scale {
            Scale::Linear => {
                let step = nice_step((self.hi - self.lo) / 5.0);
                let n = ((self.hi - self.lo) / step).round().clamp(1.0, 50.0) as i64;
                (0..=n).map(|i| self.lo + i as f64 * step).collect()
            }
            Scale::Log => {
                let a = self.lo.log10().round().clamp(-300.0, 300.0) as i32;
                let b = (self.hi.log10().round().clamp(-300.0, 300.0) as i32).clamp(a, a + 50);
                let decades = b - a;
                let mut t = Vec::new();
                for e in a..=b {
                    let base = 10f64.powi(e);
                    t.push(base);
                    if decades <= 2 && e < b {
                        t.push(2.0 * base);
                        t.push(5.0 * base);
                    }
                }
                t
            }
        }
    }
}

fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let mag = 10f64.powf(raw.log10().floor());
    let n = raw / mag;
    let m = if n <= 1.0 {
        1.0
    } else if n <= 2.0 {
        2.0
    } else if n <= 5.0 {
        5.0
    } else {
        10.0
    };
    m * mag
}

impl Chart {
    /// A chart with no series yet.
    pub fn new(id: &str, title: &str, x_label: &str, y_label: &str) -> Self {
        Self {
            id: id.to_owned(),
            title: title.to_owned(),
            x_label: x_label.to_owned(),
            y_label: y_label.to_owned(),
            x_scale: Scale::Linear,
            y_scale: Scale::Linear,
            y_from_zero: true,
            series: Vec::new(),
            rules: Vec::new(),
            bands: Vec::new(),
        }
    }

    /// Whether any series has a point to draw.
    pub fn has_data(&self) -> bool {
        self.series
            .iter()
            .any(|s| s.has_data(self.x_scale, self.y_scale))
    }

    /// The chart as an `<svg>` element (`None` when there is nothing to draw).
    pub fn svg(&self) -> Option<String> {
        if !self.has_data() {
            return None;
        }
        let pts = || {
            self.series.iter().flat_map(|s| {
                s.points
                    .iter()
                    .copied()
                    .filter(|p| usable(*p, self.x_scale, self.y_scale))
            })
        };
        let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
        for (x, y) in pts() {
            x0 = x0.min(x);
            x1 = x1.max(x);
            y0 = y0.min(y);
            y1 = y1.max(y);
        }
        for r in &self.rules {
            if r.y.is_finite() && (self.y_scale == Scale::Linear || r.y > 0.0) {
                y0 = y0.min(r.y);
                y1 = y1.max(r.y);
            }
        }
        for s in &self.series {
            for (_, lo, hi) in s.bars(self.x_scale, self.y_scale) {
                y0 = y0.min(lo);
                y1 = y1.max(hi);
            }
        }
        let xa = Axis::new(self.x_scale, x0, x1, LEFT, W - RIGHT, false);
        let ya = Axis::new(self.y_scale, y0, y1, H - BOTTOM, TOP, self.y_from_zero);
        let mut o = String::with_capacity(4096);
        let id = esc(&self.id);
        let _ = write!(
            o,
            r#"<svg class="chart" id="{id}" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" aria-label="{t}" xmlns="http://www.w3.org/2000/svg">"#,
            t = esc(&self.title)
        );
        let _ = write!(
            o,
            r#"<text class="title" x="{LEFT}" y="18">{}</text>"#,
            esc(&self.title)
        );
        // Grid and ticks.
        o.push_str(r#"<g class="axes">"#);
        for t in xa.ticks() {
            let x = xa.px(t);
            let _ = write!(
                o,
                r#"<line class="grid" x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{b}"/><text class="tick" x="{x:.1}" y="{ty}" text-anchor="middle">{l}</text>"#,
                b = H - BOTTOM,
                ty = H - BOTTOM + 15.0,
                l = short(t)
            );
        }
        for t in ya.ticks() {
            let y = ya.px(t);
            let _ = write!(
                o,
                r#"<line class="grid" x1="{LEFT}" y1="{y:.1}" x2="{r}" y2="{y:.1}"/><text class="tick" x="{tx}" y="{ty:.1}" text-anchor="end">{l}</text>"#,
                r = W - RIGHT,
                tx = LEFT - 6.0,
                ty = y + 4.0,
                l = short(t)
            );
        }
        let _ = write!(
            o,
            r#"<rect class="frame" x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}"/><text class="label" x="{cx}" y="{ly}" text-anchor="middle">{xl}</text><text class="label" transform="translate(14 {cy}) rotate(-90)" text-anchor="middle">{yl}</text></g>"#,
            pw = W - LEFT - RIGHT,
            ph = H - TOP - BOTTOM,
            cx = (LEFT + W - RIGHT) / 2.0,
            ly = H - 8.0,
            cy = (TOP + H - BOTTOM) / 2.0,
            xl = esc(&self.x_label),
            yl = esc(&self.y_label),
        );
        // Shaded spans, clipped to the plot.
        for b in &self.bands {
            if !(b.from.is_finite() && b.to.is_finite() && b.to > b.from) {
                continue;
            }
            let (x0, x1) = (
                xa.px(b.from).clamp(LEFT, W - RIGHT),
                xa.px(b.to).clamp(LEFT, W - RIGHT),
            );
            if x1 <= x0 {
                continue;
            }
            let _ = write!(
                o,
                r#"<g class="band"><rect x="{x0:.1}" y="{TOP}" width="{w:.1}" height="{ph}"/><text x="{tx:.1}" y="{ty}">{l}</text></g>"#,
                w = x1 - x0,
                ph = H - TOP - BOTTOM,
                tx = x0 + 4.0,
                ty = TOP + 14.0,
                l = esc(&b.label)
            );
        }
        // Reference lines.
        for r in &self.rules {
            if !(r.y.is_finite() && (self.y_scale == Scale::Linear || r.y > 0.0)) {
                continue;
            }
            let y = ya.px(r.y);
            let _ = write!(
                o,
                r#"<g class="rule"><line x1="{LEFT}" y1="{y:.1}" x2="{x2}" y2="{y:.1}"/><text x="{tx}" y="{ty:.1}">{l}</text></g>"#,
                x2 = W - RIGHT,
                tx = LEFT + 4.0,
                ty = y - 4.0,
                l = esc(&r.label)
            );
        }
        // Data.
        o.push_str(r#"<g class="data">"#);
        for (i, s) in self.series.iter().enumerate() {
            let colour = PALETTE[s.colour % PALETTE.len()];
            let dash = if s.dashed {
                r#" stroke-dasharray="6 4""#
            } else {
                ""
            };
            let _ = write!(o, r#"<g class="series s{i}" data-series="{i}">"#);
            let mut path = String::new();
            let mut pen_down = false;
            for &(x, y) in &s.points {
                if !usable((x, y), self.x_scale, self.y_scale) {
                    pen_down = false;
                    continue;
                }
                let (px, py) = (xa.px(x), ya.px(y));
                match s.style {
                    Style::Points => {
                        let _ = write!(path, "M{px:.1} {py:.1}h0");
                    }
                    // A segment starts with a zero-length stroke, so that a
                    // point between two gaps still shows as a dot.
                    _ if pen_down => {
                        let _ = write!(path, "L{px:.1} {py:.1}");
                    }
                    _ => {
                        let _ = write!(path, "M{px:.1} {py:.1}h0");
                        pen_down = true;
                    }
                }
            }
            let (width, cap) = match s.style {
                Style::Points => (4.0, r#" stroke-linecap="round""#),
                _ => (2.0, r#" stroke-linecap="round" stroke-linejoin="round""#),
            };
            let _ = write!(
                o,
                r#"<path d="{path}" fill="none" stroke="{colour}" stroke-width="{width}"{cap}{dash} opacity="{op}"/>"#,
                op = if s.style == Style::Points { 0.55 } else { 1.0 }
            );
            for (x, lo, hi) in s.bars(self.x_scale, self.y_scale) {
                let (px, plo, phi) = (xa.px(x), ya.px(lo), ya.px(hi));
                let _ = write!(
                    o,
                    r#"<path class="error" d="M{px:.1} {plo:.1}V{phi:.1}M{a:.1} {plo:.1}h8M{a:.1} {phi:.1}h8" fill="none" stroke="{colour}" stroke-width="1.2"><title>{}: {} to {} (95% interval)</title></path>"#,
                    esc(&s.name),
                    short(lo),
                    short(hi),
                    a = px - 4.0
                );
            }
            if s.style == Style::LineMarkers {
                for &(x, y) in &s.points {
                    if usable((x, y), self.x_scale, self.y_scale) {
                        let _ = write!(
                            o,
                            r#"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{colour}"><title>{}: {}, {}</title></circle>"#,
                            xa.px(x),
                            ya.px(y),
                            esc(&s.name),
                            short(x),
                            short(y)
                        );
                    }
                }
            }
            o.push_str("</g>");
        }
        o.push_str("</g>");
        // Legend, top right, one entry per series.
        let mut lx = W - RIGHT;
        let mut entries = String::new();
        for (i, s) in self.series.iter().enumerate().rev() {
            if !s.has_data(self.x_scale, self.y_scale) {
                continue;
            }
            let name = if s.name.chars().count() > 28 {
                format!("{}…", s.name.chars().take(27).collect::<String>())
            } else {
                s.name.clone()
            };
            let wdt = 22.0 + 6.2 * name.chars().count() as f64;
            lx -= wdt + 8.0;
            let colour = PALETTE[s.colour % PALETTE.len()];
            let dash = if s.dashed {
                r#" stroke-dasharray="4 3""#
            } else {
                ""
            };
            let _ = write!(
                entries,
                r#"<g class="legend-item" data-series="{i}" transform="translate({lx:.1} 36)"><line x1="0" y1="-4" x2="16" y2="-4" stroke="{colour}" stroke-width="2.5"{dash}/><text x="20" y="0">{}</text><title>{}: click to hide or show</title></g>"#,
                esc(&name),
                esc(&s.name)
            );
        }
        o.push_str(r#"<g class="legend">"#);
        o.push_str(&entries);
        o.push_str("</g></svg>");
        Some(o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_data() {
        let a = Axis::new(Scale::Linear, 3.2, 97.0, 0.0, 100.0, true);
        assert_eq!(a.ticks(), vec![0.0, 20.0, 40.0, 60.0, 80.0, 100.0]);
        let l = Axis::new(Scale::Log, 0.4, 230.0, 0.0, 100.0, false);
        assert_eq!(l.ticks(), vec![0.1, 1.0, 10.0, 100.0, 1000.0]);
        assert!((l.px(10.0) - 50.0).abs() < 1e-9);
        // Ranges at the ends of f64 stay drawable, with few ticks.
        for (scale, lo, hi) in [
            (Scale::Linear, 0.0, 1.7e308),
            (Scale::Linear, -1e308, 1e308),
            (Scale::Log, 1e-320, 1e300),
            (Scale::Log, 1.0, 1.7e308),
        ] {
            let a = Axis::new(scale, lo, hi, 0.0, 100.0, false);
            let t = a.ticks();
            assert!(
                t.len() <= 60 && t.iter().all(|v| a.px(*v).is_finite()),
                "{a:?}"
            );
        }
        // A flat series still gets a range.
        let f = Axis::new(Scale::Linear, 5.0, 5.0, 0.0, 100.0, false);
        assert!(f.lo < 5.0 && f.hi > 5.0, "{f:?}");
    }

    #[test]
    fn short_numbers() {
        assert_eq!(short(0.0), "0");
        assert_eq!(short(0.25), "0.25");
        assert_eq!(short(12.5), "12.5");
        assert_eq!(short(1500.0), "1500");
        assert_eq!(short(25_000.0), "25k");
        assert_eq!(short(3_000_000.0), "3M");
        assert_eq!(short(0.001234), "0.001");
        assert_eq!(short(0.0001), "1e-4");
    }

    #[test]
    fn a_chart_draws_its_series_rules_and_legend_escaped() {
        let mut c = Chart::new("c1", "TTFT <p99>", "time (s)", "ms");
        c.series.push(Series::line(
            "run \"a\"",
            0,
            vec![(0.0, 1.0), (1.0, f64::NAN), (2.0, 3.0)],
        ));
        c.series
            .push(Series::line("b", 1, vec![(1.0, 2.0)]).styled(Style::LineMarkers));
        c.rules.push(Rule {
            y: 2.5,
            label: "SLO".into(),
        });
        let svg = c.svg().unwrap_or_default();
        assert!(svg.contains("TTFT &lt;p99&gt;"), "{svg}");
        assert!(svg.contains("run &quot;a&quot;"));
        // The NaN breaks the line: two moves in the first path.
        let first = svg.split("<path d=\"").nth(1).unwrap_or_default();
        let d = first.split('"').next().unwrap_or_default();
        assert_eq!(d.matches('M').count(), 2, "{d}");
        assert!(svg.contains("<circle"));
        assert!(svg.contains(r#"class="rule""#));
        assert_eq!(svg.matches("legend-item").count(), 2);
    }

    #[test]
    fn a_band_is_shaded_within_the_plot_and_an_empty_one_is_not() {
        let mut c = Chart::new("c", "t", "x", "y");
        c.series
            .push(Series::line("a", 0, vec![(0.0, 1.0), (10.0, 2.0)]));
        for (from, to) in [(0.0, 2.5), (-5.0, 50.0), (3.0, 3.0), (f64::NAN, 1.0)] {
            c.bands.push(Band {
                from,
                to,
                label: "transient <left out>".into(),
            });
        }
        let svg = c.svg().unwrap_or_default();
        assert_eq!(svg.matches(r#"class="band""#).count(), 2, "{svg}");
        assert!(svg.contains("transient &lt;left out&gt;"));
        // The second is clipped to the plot: it starts where the first does.
        let xs: Vec<&str> = svg
            .split(r#"<g class="band"><rect x=""#)
            .skip(1)
            .map(|r| r.split('"').next().unwrap_or_default())
            .collect();
        assert_eq!(xs.len(), 2);
        assert_eq!(xs[0], xs[1]);
    }

    #[test]
    fn nothing_to_draw_is_no_chart() {
        let mut c = Chart::new("c", "t", "x", "y");
        assert!(c.svg().is_none());
        c.y_scale = Scale::Log;
        c.series.push(Series::line("zero", 0, vec![(1.0, 0.0)]));
        assert!(c.svg().is_none());
    }
}
