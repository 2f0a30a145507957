//! The demo's plot: each app's traffic share by answering cluster, and p50/p99 latency,
//! second by second, with the phases marked, as SVG and PNG.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::traffic::{Record, quantile};

/// Where the plot's text font is looked for (Debian's `fonts-dejavu-core` first).
const FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

/// The series drawn: (app, cluster, colour).
pub type Series<'a> = &'a [(&'a str, &'a str, RGBColor)];

const SIZE: (u32, u32) = (1100, 760);

/// Write `<stem>.svg` and `<stem>.png`; the paths written. Laying out text takes a font's
/// metrics, for the SVG too: without a TrueType font on the machine there is no plot.
pub fn write(
    stem: &Path,
    record: &Record,
    series: Series<'_>,
) -> Result<Vec<std::path::PathBuf>, String> {
    if !register_font() {
        return Err(format!(
            "no TrueType font found (looked for {}; Debian: apt install fonts-dejavu-core)",
            FONTS.join(", ")
        ));
    }
    let svg = stem.with_extension("svg");
    draw(
        SVGBackend::new(&svg, SIZE).into_drawing_area(),
        record,
        series,
    )?;
    let png = stem.with_extension("png");
    draw(
        BitMapBackend::new(&png, SIZE).into_drawing_area(),
        record,
        series,
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

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    record: &Record,
    series: Series<'_>,
) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(e)?;
    let (top, bottom) = root.split_vertically(SIZE.1 / 2);
    let n = record.seconds.len().max(1) as f64;

    let mut share = ChartBuilder::on(&top)
        .caption(
            "Traffic share by answering cluster (% of each app's answers per second)",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(32)
        .y_label_area_size(48)
        .build_cartesian_2d(0f64..n, 0f64..105f64)
        .map_err(e)?;
    share
        .configure_mesh()
        .light_line_style(WHITE)
        .x_desc("seconds since the consumers started")
        .y_desc("%")
        .draw()
        .map_err(e)?;
    for (app, cluster, color) in series {
        // A step per second: the share held for the whole second it was measured in.
        let points: Vec<(f64, f64)> = record
            .seconds
            .iter()
            .enumerate()
            .filter_map(|(i, s)| Some((i as f64, s.share(app, cluster)? * 100.0)))
            .flat_map(|(x, y)| [(x, y), (x + 1.0, y)])
            .collect();
        let color = *color;
        share
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(e)?
            .label(format!("{app} on {cluster}"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    for p in &record.phases {
        let x = p.start.as_secs_f64();
        share
            .draw_series(std::iter::once(PathElement::new(
                vec![(x, 0.0), (x, 105.0)],
                BLACK.mix(0.35),
            )))
            .map_err(e)?;
        share
            .draw_series(std::iter::once(Text::new(
                p.name.clone(),
                (x + 0.3, 52.0),
                ("sans-serif", 13),
            )))
            .map_err(e)?;
    }
    share
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.85))
        .draw()
        .map_err(e)?;

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
        * 1.1;
    let failed: u64 = per_second.iter().map(|p| p.3).sum();
    let mut latency = ChartBuilder::on(&bottom)
        .caption(
            format!("Latency per second (ms) — {failed} failed requests in all"),
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(32)
        .y_label_area_size(48)
        .build_cartesian_2d(0f64..n, 0f64..top_ms)
        .map_err(e)?;
    latency
        .configure_mesh()
        .light_line_style(WHITE)
        .x_desc("seconds since the consumers started")
        .y_desc("ms")
        .draw()
        .map_err(e)?;
    for (name, pick, color) in [
        ("p50", 1usize, RGBColor(40, 140, 60)),
        ("p99", 2, RGBColor(150, 60, 160)),
    ] {
        let points: Vec<(f64, f64)> = per_second
            .iter()
            .map(|p| (p.0, if pick == 1 { p.1 } else { p.2 }))
            .collect();
        latency
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(e)?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    latency
        .draw_series(
            per_second
                .iter()
                .filter(|p| p.3 > 0)
                .map(|p| Circle::new((p.0, top_ms * 0.95), 4, RED.filled())),
        )
        .map_err(e)?;
    for p in &record.phases {
        let x = p.start.as_secs_f64();
        latency
            .draw_series(std::iter::once(PathElement::new(
                vec![(x, 0.0), (x, top_ms)],
                BLACK.mix(0.35),
            )))
            .map_err(e)?;
    }
    latency
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.85))
        .draw()
        .map_err(e)?;
    root.present().map_err(e)?;
    Ok(())
}
