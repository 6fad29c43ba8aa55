//! Numbers as text, in one place: Go's `%4.4f` and `%g` and go-humanize's byte sizes, so that
//! the report reads exactly like etcd benchmark's (Go's durations are in
//! `actcd_proto::go_duration`); and counts and bytes as etcd's benchmark tables write them
//! (1k, 2.5M; MB of 10^6; B or KB an item), for `actcd-tables`' tables and charts.

/// Formats `x` as Go's `fmt.Sprintf("%g", x)`: the shortest representation that reads back as
/// `x`, in exponent form when the decimal exponent is below -4 or at least 6.
pub fn go_g(x: f64) -> String {
    if !x.is_finite() || x == 0.0 {
        return match x {
            _ if x.is_nan() => "NaN",
            _ if x == f64::INFINITY => "+Inf",
            _ if x == f64::NEG_INFINITY => "-Inf",
            _ if x.is_sign_negative() => "-0",
            _ => "0",
        }
        .to_string();
    }
    // Rust's `{:e}` is the shortest round-trip mantissa, like Go's shortest formatting.
    let sci = format!("{x:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..6).contains(&exp) {
        format!("{x}")
    } else {
        format!("{mantissa}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.unsigned_abs())
    }
}

/// Formats `x` the way etcd's report does: `%4.4f`, or `%g` with `--precise`.
pub fn num(x: f64, precise: bool) -> String {
    if precise {
        go_g(x)
    } else {
        format!("{x:4.4}")
    }
}

/// `v` with one decimal below `fine`, whole from there on, then `unit`.
fn decimals(v: f64, fine: f64, unit: &str) -> String {
    if v.abs() < fine {
        format!("{v:.1}{unit}")
    } else {
        format!("{v:.0}{unit}")
    }
}

/// A byte count as go-humanize's `Bytes` (SI units): `82 B`, `4.1 kB`, `12 MB`.
pub fn humanize_bytes(n: u64) -> String {
    const UNITS: [&str; 7] = [" B", " kB", " MB", " GB", " TB", " PB", " EB"];
    if n < 10 {
        return format!("{n} B");
    }
    let exp = (((n as f64).ln() / 1000f64.ln()).floor() as usize).min(UNITS.len() - 1);
    // go-humanize rounds to a tenth before it picks the format.
    let val = (n as f64 / 1000f64.powi(exp as i32) * 10.0 + 0.5).floor() / 10.0;
    decimals(val, 10.0, UNITS[exp])
}

/// Bytes as etcd's tables write memory: MB (10^6), one decimal below 100.
pub fn mb(bytes: f64) -> String {
    decimals(bytes / 1e6, 100.0, " MB")
}

/// Bytes per item: B below 10 kB, else KB (10^3), as etcd quotes c1/c2/c3.
pub fn per_item(bytes: f64) -> String {
    if bytes.abs() < 10e3 {
        decimals(bytes, 0.0, " B")
    } else {
        decimals(bytes / 1e3, f64::INFINITY, " KB")
    }
}

/// A count as etcd's tables write it, exactly: 1k, 2.5M, 50, 1234.
pub fn count(n: u64) -> String {
    if n >= 1_000_000 && n % 100_000 == 0 {
        format!("{}M", n as f64 / 1e6)
    } else if n >= 1000 && n % 100 == 0 {
        format!("{}k", n as f64 / 1e3)
    } else {
        n.to_string()
    }
}

/// A value as a chart labels it, rounded: 950, 1.5k, 25k, 2.5M, 3G.
pub fn short(v: f64) -> String {
    let (f, unit) =
        [(1e9, "G"), (1e6, "M"), (1e3, "k")].into_iter().find(|(f, _)| v.abs() >= *f).unwrap_or((1.0, ""));
    let x = v / f;
    // Display drops a ".0": 2.0 prints as 2.
    format!("{}{unit}", if x.abs() < 10.0 { (x * 10.0).round() / 10.0 } else { x.round() })
}

/// A markdown table's header and alignment rows for `columns` (`a | b | c`): numbers
/// right-aligned, the text columns (run, coefficient, consistency) left.
pub fn table_head(columns: &str) -> String {
    let align = columns.split(" | ").map(|c| match c {
        "coefficient" | "consistency" => "---",
        c if c.starts_with("run") => "---",
        _ => "---:",
    });
    format!("| {columns} |\n| {} |\n", align.collect::<Vec<_>>().join(" | "))
}

/// A count as `--rows` writes it: 1000, 1k, 2.5M.
pub fn parse_count(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (digits, mult) = match s.char_indices().last() {
        Some((i, 'k' | 'K')) => (&s[..i], 1e3),
        Some((i, 'm' | 'M')) => (&s[..i], 1e6),
        _ => (s, 1.0),
    };
    let v: f64 = digits.parse().map_err(|_| format!("{s:?} is not a count (like 1000, 1k or 2.5M)"))?;
    let n = v * mult;
    if !(n >= 1.0 && n.fract() == 0.0 && n <= 1e12) {
        return Err(format!("{s:?} is not a positive whole count"));
    }
    Ok(n as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_g_matches_go() {
        for (x, go) in [
            (0.0, "0"),
            (10.0, "10"),
            (99.9, "99.9"),
            (0.001234, "0.001234"),
            (0.0001, "0.0001"),
            (0.00001234, "1.234e-05"),
            (23456.78, "23456.78"),
            (100000.0, "100000"),
            (1000000.0, "1e+06"),
            (1234567.0, "1.234567e+06"),
            (-2.5e-7, "-2.5e-07"),
            (1e100, "1e+100"),
        ] {
            assert_eq!(go_g(x), go);
        }
        assert_eq!(num(0.00123456, false), "0.0012");
        assert_eq!(num(12.0, false), "12.0000");
        assert_eq!(num(0.00123456, true), "0.00123456");
    }

    #[test]
    fn bytes_match_go_humanize() {
        assert_eq!(humanize_bytes(0), "0 B");
        assert_eq!(humanize_bytes(82), "82 B");
        assert_eq!(humanize_bytes(4096), "4.1 kB");
        assert_eq!(humanize_bytes(25_165_824), "25 MB");
    }

    #[test]
    fn counts_and_labels_read_like_etcd() {
        assert_eq!(
            [count(1000), count(2_500_000), count(10_000_000), count(50), count(1234)],
            ["1k", "2.5M", "10M", "50", "1234"]
        );
        assert_eq!(
            [short(950.0), short(1500.0), short(25_000.0), short(2_500_000.0), short(0.0)],
            ["950", "1.5k", "25k", "2.5M", "0"]
        );
        assert_eq!(
            [mb(88.5e6), mb(1315e6), per_item(228.0), per_item(23.8e3)],
            ["88.5 MB", "1315 MB", "228 B", "23.8 KB"]
        );
        assert_eq!(parse_count("2.5k"), Ok(2500));
        assert_eq!(table_head("run | QPS"), "| run | QPS |\n| --- | ---: |\n");
        assert!(parse_count("1.5").is_err() && parse_count("x").is_err());
    }
}
