//! PNG charts for the tables, drawn with plotters on an RGB bitmap with the DejaVu Sans font
//! (from the `dejavu` crate, rendered by ab_glyph) and encoded by the `png` crate: grouped bars
//! (QPS per run, storage memory per row) and lines on a log-scale x axis (memory against
//! watches). No font files or system libraries are looked up, so a chart looks the same on
//! every machine.

use actcd_bench::format::short;
use plotters::coord::{CoordTranslate, Shift};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{register_font, FontStyle, RGBColor};
use std::sync::OnceLock;

const MUTED: RGBColor = RGBColor(110, 110, 110);
/// Series colours: blue, orange, green, red (colour-blind friendly order).
const PALETTE: [RGBColor; 4] =
    [RGBColor(31, 119, 180), RGBColor(255, 127, 14), RGBColor(44, 160, 44), RGBColor(214, 39, 40)];
/// The font family every text uses, registered once from the bundled font.
const FONT: &str = "sans-serif";

const W: u32 = 1000;
const H: u32 = 560;

/// Registers the bundled font under [`FONT`] (once per process).
fn fonts() -> Result<(), String> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            register_font(FONT, FontStyle::Normal, dejavu::sans::regular())
                .and_then(|_| register_font(FONT, FontStyle::Bold, dejavu::sans::bold()))
                .map_err(|_| "the bundled DejaVu Sans font does not load".to_string())
        })
        .clone()
}

/// Ticks from 0 to at least `max`: about five steps of 1, 2 or 5 × 10^k.
fn ticks(max: f64) -> Vec<f64> {
    let max = if max > 0.0 && max.is_finite() { max } else { 1.0 };
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * mag).find(|s| *s >= raw).unwrap_or(10.0 * mag);
    let n = (max / step).ceil() as usize;
    (0..=n).map(|i| i as f64 * step).collect()
}

/// A named series of a chart: its legend's name, and its values (bars: one per category,
/// `None` for a row that did not run; lines: points).
#[derive(Debug, Clone)]
pub struct Series<T> {
    pub name: String,
    pub values: Vec<T>,
}

fn colour(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

fn legend<'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, BitMapBackend<'a>, CT>,
    pos: SeriesLabelPosition,
) -> Result<(), String> {
    let mut labels = chart.configure_series_labels();
    labels.position(pos).background_style(WHITE.mix(0.9)).border_style(MUTED).label_font((FONT, 14));
    labels.draw().map_err(|e| e.to_string())
}

/// A chart titled `title` on `root`, with room for labels under it and left of it.
fn chart_on<'a, 'b>(
    root: &'a DrawingArea<BitMapBackend<'b>, Shift>,
    title: &str,
    x_labels: u32,
) -> ChartBuilder<'a, 'b, BitMapBackend<'b>> {
    let mut chart = ChartBuilder::on(root);
    chart.caption(title, (FONT, 22).into_font().style(FontStyle::Bold)).margin(20);
    chart.x_label_area_size(x_labels).y_label_area_size(80);
    chart
}

fn png_of(
    draw: impl FnOnce(&DrawingArea<BitMapBackend<'_>, Shift>) -> Result<(), String>,
) -> Result<Vec<u8>, String> {
    fonts()?;
    let mut rgb = vec![0u8; (W * H * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, (W, H)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        draw(&root)?;
        root.present().map_err(|e| e.to_string())?;
    }
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, W, H);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().map_err(|e| format!("PNG header: {e}"))?;
    writer.write_image_data(&rgb).map_err(|e| format!("PNG data: {e}"))?;
    writer.finish().map_err(|e| format!("PNG end: {e}"))?;
    Ok(out)
}

/// Grouped bars: one group per category, one bar per series, the value above each bar
/// ("skipped" where a series has no value), the category under each group.
pub fn bars(
    title: &str,
    y_unit: &str,
    categories: &[String],
    series: &[Series<Option<f64>>],
) -> Result<Vec<u8>, String> {
    let max = series.iter().flat_map(|s| s.values.iter().flatten()).fold(0.0f64, |m, v| m.max(*v));
    let top = ticks(max).last().copied().unwrap_or(1.0);
    let groups = categories.len().max(1);
    let slots = series.len().max(1) as f64;
    png_of(|root| {
        let mut chart = chart_on(root, title, 70)
            .build_cartesian_2d(0f64..groups as f64, 0f64..top)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_desc(y_unit)
            .y_label_formatter(&|v| short(*v))
            .label_style((FONT, 13))
            .draw()
            .map_err(|e| e.to_string())?;
        let width = 0.8 / slots;
        let bar = |g: usize, i: usize| {
            let x0 = g as f64 + 0.1 + i as f64 * width;
            (x0, x0 + width)
        };
        for (i, s) in series.iter().enumerate() {
            let c = colour(i);
            let drawn = s.values.iter().take(groups).enumerate().filter_map(|(g, v)| {
                let (x0, x1) = bar(g, i);
                v.map(|v| Rectangle::new([(x0 + 0.005, 0.0), (x1 - 0.005, v.max(0.0))], c.filled()))
            });
            chart
                .draw_series(drawn)
                .map_err(|e| e.to_string())?
                .label(s.name.clone())
                .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 12, y + 6)], c.filled()));
            let above = Pos::new(HPos::Center, VPos::Bottom);
            let labels = s.values.iter().take(groups).enumerate().map(|(g, v)| {
                let (x0, x1) = bar(g, i);
                let x = (x0 + x1) / 2.0;
                match v {
                    Some(v) => {
                        Text::new(short(*v), (x, v.max(0.0)), (FONT, 12).into_font().color(&BLACK).pos(above))
                    }
                    None => Text::new(
                        "skipped".to_string(),
                        (x, 0.0),
                        (FONT, 12).into_font().color(&MUTED).pos(above),
                    ),
                }
            });
            chart.draw_series(labels).map_err(|e| e.to_string())?;
        }
        // Category labels under the groups, alternating between two lines when they would not
        // fit side by side.
        let group_px = (W as f64 - 120.0) / groups as f64;
        for (g, cat) in categories.iter().enumerate() {
            let (x, y) = chart.backend_coord(&(g as f64 + 0.5, 0.0));
            let line = if cat.len() as f64 * 7.0 > group_px - 4.0 { (g % 2) as i32 } else { 0 };
            let style = (FONT, 13).into_font().color(&BLACK).pos(Pos::new(HPos::Center, VPos::Top));
            root.draw(&Text::new(cat.clone(), (x, y + 8 + line * 16), style)).map_err(|e| e.to_string())?;
        }
        legend(&mut chart, SeriesLabelPosition::UpperRight)
    })
}

/// Lines through each series' points (sorted by x) on a log-10 x axis, with a marker on every
/// point and the x axis labelled at powers of ten.
pub fn lines(
    title: &str,
    x_unit: &str,
    y_unit: &str,
    series: &[Series<(f64, f64)>],
) -> Result<Vec<u8>, String> {
    let points = || series.iter().flat_map(|s| s.values.iter()).filter(|(x, _)| *x > 0.0);
    let y_max = points().fold(0.0f64, |m, (_, y)| m.max(*y));
    let top = ticks(y_max).last().copied().unwrap_or(1.0);
    let x_lo = points().fold(f64::INFINITY, |m, (x, _)| m.min(*x)).log10().floor();
    let x_hi = points().fold(0.0f64, |m, (x, _)| m.max(*x)).log10().ceil();
    let (x_lo, x_hi) = if x_lo.is_finite() && x_hi > x_lo { (x_lo, x_hi) } else { (0.0, 1.0) };
    png_of(|root| {
        let mut chart = chart_on(root, title, 60)
            .build_cartesian_2d((10f64.powf(x_lo)..10f64.powf(x_hi)).log_scale(), 0f64..top)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc(x_unit)
            .y_desc(y_unit)
            .x_label_formatter(&|v| short(*v))
            .y_label_formatter(&|v| short(*v))
            .label_style((FONT, 13))
            .draw()
            .map_err(|e| e.to_string())?;
        for (i, s) in series.iter().enumerate() {
            let c = colour(i);
            let mut pts: Vec<(f64, f64)> = s.values.iter().copied().filter(|(x, _)| *x > 0.0).collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))
                .map_err(|e| e.to_string())?
                .label(s.name.clone())
                .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 12, y + 6)], c.filled()));
            chart
                .draw_series(
                    pts.iter().map(|p| EmptyElement::at(*p) + Rectangle::new([(-4, -4), (5, 5)], c.filled())),
                )
                .map_err(|e| e.to_string())?;
        }
        legend(&mut chart, SeriesLabelPosition::UpperLeft)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_png(b: &[u8]) -> bool {
        b.starts_with(&[0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a])
    }

    #[test]
    fn charts_are_pngs_that_decode() {
        let cats = vec!["put-1x1".to_string(), "range-s-100x1000".to_string()];
        let series = vec![
            Series { name: "etcd".to_string(), values: vec![Some(2600.0), Some(11000.0)] },
            Series { name: "actcd".to_string(), values: vec![Some(2800.0), None] },
        ];
        let b = bars("QPS", "requests/s", &cats, &series).expect("encodes");
        assert!(is_png(&b) && b.len() > 2000, "{} bytes", b.len());
        let decoder = png::Decoder::new(std::io::Cursor::new(&b));
        let reader = decoder.read_info().expect("decodes");
        assert_eq!((reader.info().width, reader.info().height), (W, H));
        let l = lines(
            "memory vs watches",
            "watches",
            "MB",
            &[Series { name: "actcd".to_string(), values: vec![(1e3, 48.0), (1e6, 674.0), (2.5e7, 5028.0)] }],
        )
        .expect("encodes");
        assert!(is_png(&l) && l.len() > 2000);
        // No points at all still draws an empty frame.
        assert!(is_png(&lines("empty", "x", "y", &[]).expect("encodes")));
    }

    #[test]
    fn ticks_read_well() {
        assert_eq!(ticks(9.3), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(ticks(45_000.0).last().copied(), Some(50_000.0));
        assert_eq!(ticks(0.0).len(), 6, "an empty chart still has a scale");
    }
}
