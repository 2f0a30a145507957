//! The demo's plot, as SVG and PNG: the phases as a timeline, then one panel per app with
//! the share of its answers by cluster stacked to 100% (so no cluster's line hides
//! another's), then p50/p99 latency — second by second, on one time axis.

use std::path::Path;

use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use super::traffic::{Record, quantile};

/// Where the plot's text font is looked for (Debian's `fonts-dejavu-core` first).
const FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

/// What is drawn: one panel per app, each showing the share of its answers by cluster
/// (clusters stacked in this order, each in its colour).
pub struct Layout<'a> {
    pub apps: &'a [&'a str],
    pub clusters: &'a [(&'a str, RGBColor)],
}

const WIDTH: u32 = 1100;
/// Heights of the phase strip, of each app's panel and of the latency panel.
const STRIP: u32 = 96;
const APP_PANEL: u32 = 210;
const LATENCY_PANEL: u32 = 280;
/// Room left of each plot for the y labels: the same in every panel, so that their time
/// axes line up under the phase strip.
const Y_LABELS: u32 = 56;
const MARGIN: u32 = 12;

fn size(apps: usize) -> (u32, u32) {
    (
        WIDTH,
        STRIP + APP_PANEL * u32::try_from(apps).unwrap_or(1) + LATENCY_PANEL,
    )
}

/// Write `<stem>.svg` and `<stem>.png`; the paths written. Laying out text takes a font's
/// metrics, for the SVG too: without a TrueType font on the machine there is no plot.
pub fn write(
    stem: &Path,
    record: &Record,
    layout: &Layout<'_>,
) -> Result<Vec<std::path::PathBuf>, String> {
    if !register_font() {
        return Err(format!(
            "no TrueType font found (looked for {}; Debian: apt install fonts-dejavu-core)",
            FONTS.join(", ")
        ));
    }
    let size = size(layout.apps.len());
    let svg = stem.with_extension("svg");
    draw(
        SVGBackend::new(&svg, size).into_drawing_area(),
        record,
        layout,
    )?;
    let png = stem.with_extension("png");
    draw(
        BitMapBackend::new(&png, size).into_drawing_area(),
        record,
        layout,
    )?;
    Ok(vec![svg, png])
}

fn register_font() -> bool {
    FONTS.iter().any(|path| {
        std::fs::read(path).ok().is_some_and(|bytes| {
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok()
        })
    })
}

/// A phase as drawn: its name and the seconds it spans.
struct Band<'a> {
    name: &'a str,
    from: f64,
    to: f64,
}

fn bands(record: &Record, end: f64) -> Vec<Band<'_>> {
    let starts: Vec<f64> = record
        .phases
        .iter()
        .map(|p| p.start.as_secs_f64())
        .collect();
    record
        .phases
        .iter()
        .enumerate()
        .map(|(i, p)| Band {
            name: &p.name,
            from: starts[i],
            to: starts.get(i + 1).copied().unwrap_or(end),
        })
        .collect()
}

/// Shades alternating phases, so a phase reads as one column through every panel.
const BAND_SHADE: RGBColor = RGBColor(236, 236, 236);

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    record: &Record,
    layout: &Layout<'_>,
) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(e)?;
    let n = record.seconds.len().max(1) as f64;
    let bands = bands(record, n);
    let (strip, rest) = root.split_vertically(STRIP);
    let mut panels = Vec::new();
    let mut rest = rest;
    for _ in layout.apps {
        let (panel, below) = rest.split_vertically(APP_PANEL);
        panels.push(panel);
        rest = below;
    }
    let latency_area = rest;

    draw_strip(&strip, &bands, n, record).map_err(e)?;
    for (app, area) in layout.apps.iter().zip(&panels) {
        draw_app(area, app, layout.clusters, &bands, record, n).map_err(e)?;
    }
    draw_latency(&latency_area, &bands, record, n).map_err(e)?;
    root.present().map_err(e)?;
    Ok(())
}

/// The title and the phases as a timeline: each phase's span shaded and named, names
/// stacked in rows where they would overlap.
fn draw_strip<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    bands: &[Band<'_>],
    n: f64,
    record: &Record,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let failed: u64 = record.seconds.iter().map(|s| s.failed).sum();
    let ok: u64 = record.seconds.iter().map(|s| s.ok).sum();
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!(
                "sluice demo: {ok} requests answered, {failed} failed — phases (seconds since the consumers started)"
            ),
            ("sans-serif", 18),
        )
        .margin_left(MARGIN)
        .margin_right(MARGIN)
        .margin_top(6)
        .y_label_area_size(Y_LABELS)
        .build_cartesian_2d(0f64..n, 0f64..3f64)?;
    // Pixels per second, to know how wide a name is on the time axis.
    let plot_px = f64::from(WIDTH - Y_LABELS - 2 * MARGIN);
    let chars_per_second = plot_px / n / 7.0;
    for (i, b) in bands.iter().enumerate() {
        let shade = if i % 2 == 0 { BAND_SHADE } else { WHITE };
        chart.draw_series(std::iter::once(Rectangle::new(
            [(b.from, 0.0), (b.to, 3.0)],
            shade.filled(),
        )))?;
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(b.from, 0.0), (b.from, 3.0)],
            BLACK.mix(0.5),
        )))?;
    }
    // Names after every band, so a name wider than its phase runs on over the next one, on
    // the first row where it meets no other name.
    let mut row_ends = [f64::MIN; 3];
    for b in bands {
        let label = format!("{} ({:.0} s)", b.name, b.to - b.from);
        let width = label.chars().count() as f64 / chars_per_second;
        let row = (0..row_ends.len())
            .find(|&r| row_ends[r] <= b.from)
            .unwrap_or(row_ends.len() - 1);
        row_ends[row] = b.from + 0.3 + width;
        chart.draw_series(std::iter::once(Text::new(
            label,
            (b.from + 0.3, 2.85 - row as f64),
            ("sans-serif", 13),
        )))?;
    }
    Ok(())
}

/// Alternate phases shaded, under a panel's series.
fn shade_bands<DB: DrawingBackend>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    bands: &[Band<'_>],
    top: f64,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    for b in bands.iter().step_by(2) {
        chart.draw_series(std::iter::once(Rectangle::new(
            [(b.from, 0.0), (b.to, top)],
            BAND_SHADE.mix(0.6).filled(),
        )))?;
    }
    Ok(())
}

/// Phase boundaries as vertical lines, over a panel's series.
fn mark_phases<DB: DrawingBackend>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    bands: &[Band<'_>],
    top: f64,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    for b in bands.iter().skip(1) {
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(b.from, 0.0), (b.from, top)],
            BLACK.mix(0.6).stroke_width(1),
        )))?;
    }
    Ok(())
}

/// One app's answers by cluster, per second, stacked to 100%: each cluster's share is the
/// height of its colour, so no cluster's line can hide another's.
fn draw_app<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    app: &str,
    clusters: &[(&str, RGBColor)],
    bands: &[Band<'_>],
    record: &Record,
    n: f64,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("{app}: share of its answers by cluster (%)"),
            ("sans-serif", 16),
        )
        .margin_left(MARGIN)
        .margin_right(MARGIN)
        .margin_top(4)
        .x_label_area_size(24)
        .y_label_area_size(Y_LABELS)
        .build_cartesian_2d(0f64..n, 0f64..100f64)?;
    chart
        .configure_mesh()
        .disable_mesh()
        .y_labels(3)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .y_desc("%")
        .draw()?;
    // The cumulative share up to and including each cluster, per second; seconds without
    // an answer of this app draw nothing.
    let cumulative: Vec<Vec<Option<f64>>> = (0..clusters.len())
        .map(|k| {
            record
                .seconds
                .iter()
                .map(|s| {
                    clusters[..=k]
                        .iter()
                        .map(|(c, _)| s.share(app, c))
                        .sum::<Option<f64>>()
                        .map(|v| v * 100.0)
                })
                .collect()
        })
        .collect();
    // The widest stack first, so each cluster shows as the band between its stack and the
    // one before it.
    for (k, (cluster, color)) in clusters.iter().enumerate().rev() {
        let color = *color;
        for (i, y) in cumulative[k].iter().enumerate() {
            let Some(y) = *y else { continue };
            let x = i as f64;
            chart.draw_series(std::iter::once(Rectangle::new(
                [(x, 0.0), (x + 1.0, y)],
                color.mix(0.85).filled(),
            )))?;
        }
        chart
            .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())?
            .label(format!("answered by {cluster}"))
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.filled()));
    }
    mark_phases(&mut chart, bands, 100.0)?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.9))
        .draw()?;
    Ok(())
}

/// p50 and p99 of successful requests per second; seconds with a failed request marked.
fn draw_latency<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    bands: &[Band<'_>],
    record: &Record,
    n: f64,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let per_second: Vec<(f64, f64, f64, u64)> = record
        .seconds
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut l = s.latencies.clone();
            (
                i as f64 + 0.5,
                quantile(&mut l, 0.5),
                quantile(&mut l, 0.99),
                s.failed,
            )
        })
        .collect();
    let top_ms = per_second
        .iter()
        .map(|p| p.2)
        .fold(1.0f64, f64::max)
        .min(1000.0)
        // Head room for the legend above the highest p99.
        * 1.5;
    let failed: u64 = per_second.iter().map(|p| p.3).sum();
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("latency of every app's answers (ms) — {failed} failed requests in all"),
            ("sans-serif", 16),
        )
        .margin_left(MARGIN)
        .margin_right(MARGIN)
        .margin_top(4)
        .margin_bottom(8)
        .x_label_area_size(40)
        .y_label_area_size(Y_LABELS)
        .build_cartesian_2d(0f64..n, 0f64..top_ms)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .light_line_style(WHITE)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .x_desc("seconds since the consumers started")
        .y_desc("ms")
        .draw()?;
    shade_bands(&mut chart, bands, top_ms)?;
    mark_phases(&mut chart, bands, top_ms)?;
    for (name, pick, color) in [
        ("p50", 1usize, RGBColor(40, 140, 60)),
        ("p99", 2, RGBColor(150, 60, 160)),
    ] {
        let points: Vec<(f64, f64)> = per_second
            .iter()
            .map(|p| (p.0, if pick == 1 { p.1 } else { p.2 }))
            .collect();
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .draw_series(
            per_second
                .iter()
                .filter(|p| p.3 > 0)
                .map(|p| Circle::new((p.0, top_ms * 0.95), 4, RED.filled())),
        )?
        .label("a second with a failed request")
        .legend(|(x, y)| Circle::new((x + 10, y), 4, RED.filled()));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.9))
        .draw()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::traffic::{PhaseSpan, Second};
    use super::*;

    /// A move of shop from east to west, then a drain that moves cart: the plot of it is
    /// written (`SLUICE_PLOT_KEEP=DIR` keeps it there, to look at).
    #[test]
    fn draws_every_app_and_phase() {
        if !register_font() {
            eprintln!("no TrueType font: nothing to draw");
            return;
        }
        let phases = [
            ("steady on east", 0, 8),
            ("move shop to west", 8, 14),
            ("steady on west", 14, 22),
            ("drain east", 22, 24),
            ("after the drain", 24, 32),
        ];
        let mut record = Record::default();
        for t in 0..32u64 {
            let phase = phases.iter().find(|p| (p.1..p.2).contains(&t)).unwrap();
            let shop_west = match t {
                0..10 => 0,
                10..14 => (t - 9) * 20,
                _ => 100,
            };
            let cart_west = if t < 23 { 0 } else { 100 };
            let mut s = Second {
                phase: phase.0.into(),
                ok: 200,
                failed: 0,
                latencies: (0..200).map(|i| 800 + i * 5).collect(),
                ..Default::default()
            };
            for (app, west) in [("shop", shop_west), ("cart", cart_west)] {
                s.answered.insert((app.into(), "east".into()), 100 - west);
                s.answered.insert((app.into(), "west".into()), west);
            }
            record.seconds.push(s);
        }
        record.phases = phases
            .iter()
            .map(|(name, from, to)| PhaseSpan {
                name: (*name).into(),
                start: Duration::from_secs(*from),
                end: Some(Duration::from_secs(*to)),
                ..Default::default()
            })
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let keep = std::env::var_os("SLUICE_PLOT_KEEP").map(std::path::PathBuf::from);
        let at = keep.as_deref().unwrap_or(dir.path()).join("demo");
        let layout = Layout {
            apps: &["shop", "cart"],
            clusters: &[("east", RED), ("west", BLUE)],
        };
        let written = write(&at, &record, &layout).unwrap();
        assert_eq!(written.len(), 2);
        let svg = std::fs::read_to_string(&written[0]).unwrap();
        for text in [
            "shop: share",
            "cart: share",
            "drain east",
            "answered by west",
            "p99",
        ] {
            assert!(svg.contains(text), "the plot has no {text:?}");
        }
        assert!(std::fs::metadata(&written[1]).unwrap().len() > 10_000);
    }
}
