//! PNG charts for the tables, drawn on a plain RGB canvas with a built-in 5×7 bitmap font and
//! encoded by the `png` crate: grouped bars (QPS per run, storage memory per row) and lines on a
//! log-scale x axis (memory against watches). No font files and no system libraries, so a chart
//! looks the same on every machine.

type Rgb = [u8; 3];

const WHITE: Rgb = [255, 255, 255];
const BLACK: Rgb = [20, 20, 20];
const GRID: Rgb = [225, 225, 225];
const MUTED: Rgb = [110, 110, 110];
/// Series colours: blue, orange, green, red (colour-blind friendly order).
const PALETTE: [Rgb; 4] = [[31, 119, 180], [255, 127, 14], [44, 160, 44], [214, 39, 40]];

/// Glyph rows, 5 bits each (bit 4 is the left column), for the characters the charts write;
/// lower case is drawn as upper case, anything else as `?`.
fn glyph(c: char) -> [u8; 7] {
    match c.to_ascii_uppercase() {
        '0' => [0b01110, 0b10001, 0b10011, 0b10101, 0b11001, 0b10001, 0b01110],
        '1' => [0b00100, 0b01100, 0b00100, 0b00100, 0b00100, 0b00100, 0b01110],
        '2' => [0b01110, 0b10001, 0b00001, 0b00010, 0b00100, 0b01000, 0b11111],
        '3' => [0b11111, 0b00010, 0b00100, 0b00010, 0b00001, 0b10001, 0b01110],
        '4' => [0b00010, 0b00110, 0b01010, 0b10010, 0b11111, 0b00010, 0b00010],
        '5' => [0b11111, 0b10000, 0b11110, 0b00001, 0b00001, 0b10001, 0b01110],
        '6' => [0b00110, 0b01000, 0b10000, 0b11110, 0b10001, 0b10001, 0b01110],
        '7' => [0b11111, 0b00001, 0b00010, 0b00100, 0b01000, 0b01000, 0b01000],
        '8' => [0b01110, 0b10001, 0b10001, 0b01110, 0b10001, 0b10001, 0b01110],
        '9' => [0b01110, 0b10001, 0b10001, 0b01111, 0b00001, 0b00010, 0b01100],
        'A' => [0b01110, 0b10001, 0b10001, 0b11111, 0b10001, 0b10001, 0b10001],
        'B' => [0b11110, 0b10001, 0b10001, 0b11110, 0b10001, 0b10001, 0b11110],
        'C' => [0b01110, 0b10001, 0b10000, 0b10000, 0b10000, 0b10001, 0b01110],
        'D' => [0b11100, 0b10010, 0b10001, 0b10001, 0b10001, 0b10010, 0b11100],
        'E' => [0b11111, 0b10000, 0b10000, 0b11110, 0b10000, 0b10000, 0b11111],
        'F' => [0b11111, 0b10000, 0b10000, 0b11110, 0b10000, 0b10000, 0b10000],
        'G' => [0b01110, 0b10001, 0b10000, 0b10111, 0b10001, 0b10001, 0b01111],
        'H' => [0b10001, 0b10001, 0b10001, 0b11111, 0b10001, 0b10001, 0b10001],
        'I' => [0b01110, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b01110],
        'J' => [0b00111, 0b00010, 0b00010, 0b00010, 0b00010, 0b10010, 0b01100],
        'K' => [0b10001, 0b10010, 0b10100, 0b11000, 0b10100, 0b10010, 0b10001],
        'L' => [0b10000, 0b10000, 0b10000, 0b10000, 0b10000, 0b10000, 0b11111],
        'M' => [0b10001, 0b11011, 0b10101, 0b10101, 0b10001, 0b10001, 0b10001],
        'N' => [0b10001, 0b10001, 0b11001, 0b10101, 0b10011, 0b10001, 0b10001],
        'O' => [0b01110, 0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b01110],
        'P' => [0b11110, 0b10001, 0b10001, 0b11110, 0b10000, 0b10000, 0b10000],
        'Q' => [0b01110, 0b10001, 0b10001, 0b10001, 0b10101, 0b10010, 0b01101],
        'R' => [0b11110, 0b10001, 0b10001, 0b11110, 0b10100, 0b10010, 0b10001],
        'S' => [0b01111, 0b10000, 0b10000, 0b01110, 0b00001, 0b00001, 0b11110],
        'T' => [0b11111, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100],
        'U' => [0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b01110],
        'V' => [0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b01010, 0b00100],
        'W' => [0b10001, 0b10001, 0b10001, 0b10101, 0b10101, 0b10101, 0b01010],
        'X' | '×' => [0b10001, 0b10001, 0b01010, 0b00100, 0b01010, 0b10001, 0b10001],
        'Y' => [0b10001, 0b10001, 0b10001, 0b01010, 0b00100, 0b00100, 0b00100],
        'Z' => [0b11111, 0b00001, 0b00010, 0b00100, 0b01000, 0b10000, 0b11111],
        ' ' => [0; 7],
        '.' | '·' => [0, 0, 0, 0, 0, 0b01100, 0b01100],
        ',' => [0, 0, 0, 0, 0b01100, 0b00100, 0b01000],
        '-' => [0, 0, 0, 0b11111, 0, 0, 0],
        '+' => [0, 0b00100, 0b00100, 0b11111, 0b00100, 0b00100, 0],
        '/' => [0, 0b00001, 0b00010, 0b00100, 0b01000, 0b10000, 0],
        '(' => [0b00010, 0b00100, 0b01000, 0b01000, 0b01000, 0b00100, 0b00010],
        ')' => [0b01000, 0b00100, 0b00010, 0b00010, 0b00010, 0b00100, 0b01000],
        ':' => [0, 0b01100, 0b01100, 0, 0b01100, 0b01100, 0],
        '%' => [0b11000, 0b11001, 0b00010, 0b00100, 0b01000, 0b10011, 0b00011],
        '=' => [0, 0, 0b11111, 0, 0b11111, 0, 0],
        '_' => [0, 0, 0, 0, 0, 0, 0b11111],
        '*' => [0, 0b00100, 0b10101, 0b01110, 0b10101, 0b00100, 0],
        _ => [0b01110, 0b10001, 0b00001, 0b00010, 0b00100, 0, 0b00100],
    }
}

/// An RGB image being drawn.
struct Canvas {
    width: usize,
    height: usize,
    pixels: Vec<u8>,
}

impl Canvas {
    fn new(width: usize, height: usize) -> Self {
        Self { width, height, pixels: WHITE.repeat(width * height) }
    }

    fn put(&mut self, x: i64, y: i64, c: Rgb) {
        if x >= 0 && y >= 0 && (x as usize) < self.width && (y as usize) < self.height {
            let i = (y as usize * self.width + x as usize) * 3;
            self.pixels[i..i + 3].copy_from_slice(&c);
        }
    }

    fn rect(&mut self, x: i64, y: i64, w: i64, h: i64, c: Rgb) {
        for yy in y..y + h {
            for xx in x..x + w {
                self.put(xx, yy, c);
            }
        }
    }

    /// A line `thick` pixels wide (Bresenham, a square brush).
    fn line(&mut self, (x0, y0): (i64, i64), (x1, y1): (i64, i64), thick: i64, c: Rgb) {
        let (dx, dy) = ((x1 - x0).abs(), -(y1 - y0).abs());
        let (sx, sy) = (if x0 < x1 { 1 } else { -1 }, if y0 < y1 { 1 } else { -1 });
        let (mut x, mut y, mut err) = (x0, y0, dx + dy);
        loop {
            self.rect(x - thick / 2, y - thick / 2, thick, thick, c);
            if x == x1 && y == y1 {
                break;
            }
            let e2 = 2 * err;
            if e2 >= dy {
                err += dy;
                x += sx;
            }
            if e2 <= dx {
                err += dx;
                y += sy;
            }
        }
    }

    /// Text with its top-left corner at (x, y), each font pixel `scale` pixels square.
    fn text(&mut self, x: i64, y: i64, s: &str, scale: i64, c: Rgb) {
        for (i, ch) in s.chars().enumerate() {
            let gx = x + i as i64 * 6 * scale;
            for (row, bits) in glyph(ch).iter().enumerate() {
                for col in 0..5 {
                    if bits & (0b10000 >> col) != 0 {
                        self.rect(gx + col * scale, y + row as i64 * scale, scale, scale, c);
                    }
                }
            }
        }
    }

    fn encode(&self) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        let mut encoder = png::Encoder::new(&mut out, self.width as u32, self.height as u32);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header().map_err(|e| format!("PNG header: {e}"))?;
        writer.write_image_data(&self.pixels).map_err(|e| format!("PNG data: {e}"))?;
        writer.finish().map_err(|e| format!("PNG end: {e}"))?;
        Ok(out)
    }
}

/// Width of `s` in pixels at `scale`.
fn text_width(s: &str, scale: i64) -> i64 {
    s.chars().count() as i64 * 6 * scale
}

/// A value as an axis label: 950, 1.5K, 20K, 3M.
pub fn short(v: f64) -> String {
    let trim = |x: f64, unit: &str| {
        let s = if x >= 10.0 || x.fract().abs() < 1e-9 { format!("{x:.0}") } else { format!("{x:.1}") };
        format!("{s}{unit}")
    };
    let a = v.abs();
    if a >= 1e9 {
        trim(v / 1e9, "G")
    } else if a >= 1e6 {
        trim(v / 1e6, "M")
    } else if a >= 1e4 {
        trim(v / 1e3, "K")
    } else {
        trim(v, "")
    }
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

/// A named series of a chart.
#[derive(Debug, Clone)]
pub struct Series<T> {
    /// The legend's name.
    pub name: String,
    /// The values (bars: one per category, `None` for a row that did not run; lines: points).
    pub values: Vec<T>,
}

const W: i64 = 1000;
const H: i64 = 560;
const LEFT: i64 = 90;
const RIGHT: i64 = 30;
const TOP: i64 = 70;
const BOTTOM: i64 = 110;

/// Title, y-axis unit, horizontal grid with labels; returns the y scale's top.
fn frame(c: &mut Canvas, title: &str, y_unit: &str, y_max: f64) -> f64 {
    c.text(LEFT, 18, title, 2, BLACK);
    c.text(LEFT - 70, TOP - 22, y_unit, 1, MUTED);
    let t = ticks(y_max);
    let top = t.last().copied().unwrap_or(1.0);
    let plot_h = H - TOP - BOTTOM;
    for v in &t {
        let y = H - BOTTOM - (v / top * plot_h as f64).round() as i64;
        c.rect(LEFT, y, W - LEFT - RIGHT, 1, GRID);
        let label = short(*v);
        c.text(LEFT - 8 - text_width(&label, 1), y - 3, &label, 1, BLACK);
    }
    c.rect(LEFT, TOP, 1, plot_h + 1, BLACK);
    c.rect(LEFT, H - BOTTOM, W - LEFT - RIGHT, 1, BLACK);
    top
}

fn legend<T>(c: &mut Canvas, series: &[Series<T>]) {
    let mut x = W - RIGHT;
    for (i, s) in series.iter().enumerate().rev() {
        x -= text_width(&s.name, 2) + 30;
        c.rect(x, 22, 14, 14, PALETTE[i % PALETTE.len()]);
        c.text(x + 20, 22, &s.name, 2, BLACK);
    }
}

/// Grouped bars: one group per category, one bar per series, the value above each bar
/// ("skipped" where a series has no value), the category under each group.
pub fn bars(
    title: &str,
    y_unit: &str,
    categories: &[String],
    series: &[Series<Option<f64>>],
) -> Result<Vec<u8>, String> {
    let mut c = Canvas::new(W as usize, H as usize);
    let max = series.iter().flat_map(|s| s.values.iter().flatten()).fold(0.0f64, |m, v| m.max(*v));
    let top = frame(&mut c, title, y_unit, max);
    legend(&mut c, series);
    let plot_w = W - LEFT - RIGHT;
    let plot_h = (H - TOP - BOTTOM) as f64;
    let groups = categories.len().max(1) as i64;
    let group_w = plot_w / groups;
    let bar_w = ((group_w - 16) / series.len().max(1) as i64).max(2);
    for (g, cat) in categories.iter().enumerate() {
        let gx = LEFT + g as i64 * group_w + 8;
        for (i, s) in series.iter().enumerate() {
            let x = gx + i as i64 * bar_w;
            match s.values.get(g).copied().flatten() {
                Some(v) => {
                    let h = (v.max(0.0) / top * plot_h).round() as i64;
                    c.rect(x + 1, H - BOTTOM - h, bar_w - 2, h, PALETTE[i % PALETTE.len()]);
                    let label = short(v);
                    let lw = text_width(&label, 1);
                    c.text(x + (bar_w - lw) / 2, H - BOTTOM - h - 10, &label, 1, BLACK);
                }
                None => {
                    c.text(x + (bar_w - text_width("SKIP", 1)) / 2, H - BOTTOM - 10, "SKIP", 1, MUTED);
                }
            }
        }
        // Category labels alternate between two lines when they would not fit side by side.
        let cw = text_width(cat, 1);
        let line = if cw > group_w - 4 { (g % 2) as i64 } else { 0 };
        c.text(gx + (group_w - 16 - cw) / 2, H - BOTTOM + 10 + line * 14, cat, 1, BLACK);
    }
    c.encode()
}

/// Lines through each series' points (sorted by x) on a log-10 x axis, with a marker on every
/// point and the x axis labelled at powers of ten.
pub fn lines(
    title: &str,
    x_unit: &str,
    y_unit: &str,
    series: &[Series<(f64, f64)>],
) -> Result<Vec<u8>, String> {
    let mut c = Canvas::new(W as usize, H as usize);
    let points = || series.iter().flat_map(|s| s.values.iter()).filter(|(x, _)| *x > 0.0);
    let y_max = points().fold(0.0f64, |m, (_, y)| m.max(*y));
    let top = frame(&mut c, title, y_unit, y_max);
    legend(&mut c, series);
    let x_lo = points().fold(f64::INFINITY, |m, (x, _)| m.min(*x)).log10().floor();
    let x_hi = points().fold(0.0f64, |m, (x, _)| m.max(*x)).log10().ceil();
    let (x_lo, x_hi) = if x_lo.is_finite() && x_hi > x_lo { (x_lo, x_hi) } else { (0.0, 1.0) };
    let plot_w = (W - LEFT - RIGHT) as f64;
    let plot_h = (H - TOP - BOTTOM) as f64;
    let px = |x: f64| LEFT + ((x.log10() - x_lo) / (x_hi - x_lo) * plot_w).round() as i64;
    let py = |y: f64| H - BOTTOM - (y / top * plot_h).round() as i64;
    let mut e = x_lo;
    while e <= x_hi + 1e-9 {
        let x = px(10f64.powf(e));
        c.rect(x, TOP, 1, H - TOP - BOTTOM, GRID);
        let label = short(10f64.powf(e));
        c.text(x - text_width(&label, 1) / 2, H - BOTTOM + 10, &label, 1, BLACK);
        e += 1.0;
    }
    c.text(LEFT + plot_w as i64 / 2 - text_width(x_unit, 1) / 2, H - BOTTOM + 30, x_unit, 1, MUTED);
    for (i, s) in series.iter().enumerate() {
        let colour = PALETTE[i % PALETTE.len()];
        let mut pts: Vec<(f64, f64)> = s.values.iter().copied().filter(|(x, _)| *x > 0.0).collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
        for w in pts.windows(2) {
            c.line((px(w[0].0), py(w[0].1)), (px(w[1].0), py(w[1].1)), 2, colour);
        }
        for (x, y) in &pts {
            c.rect(px(*x) - 4, py(*y) - 4, 9, 9, colour);
        }
    }
    c.encode()
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
        assert_eq!((reader.info().width, reader.info().height), (W as u32, H as u32));
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
    fn labels_and_ticks_read_well() {
        assert_eq!(short(950.0), "950");
        assert_eq!(short(1500.0), "1500");
        assert_eq!(short(25_000.0), "25K");
        assert_eq!(short(2_500_000.0), "2.5M");
        assert_eq!(ticks(9.3), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(ticks(45_000.0).last().copied(), Some(50_000.0));
        assert_eq!(ticks(0.0).len(), 6, "an empty chart still has a scale");
    }
}
