//! Go-compatible formatting, so that the report reads exactly like etcd benchmark's: `%4.4f` and
//! `%g` numbers, `time.Duration` strings, go-humanize byte sizes, and Go duration flags
//! (`--compact-interval 5m`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Formats `x` as Go's `fmt.Sprintf("%g", x)`: the shortest representation that reads back as
/// `x`, in exponent form when the decimal exponent is below -4 or at least 6.
pub fn go_g(x: f64) -> String {
    if x.is_nan() {
        return "NaN".to_string();
    }
    if x.is_infinite() {
        return if x > 0.0 { "+Inf" } else { "-Inf" }.to_string();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    // Rust's `{:e}` is the shortest round-trip mantissa, like Go's shortest formatting.
    let sci = format!("{x:e}");
    let Some((mantissa, exp)) = sci.split_once('e') else {
        return format!("{x}");
    };
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.unsigned_abs())
    } else {
        format!("{x}")
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

/// Formats a duration as Go's `time.Duration.String()`: `0s`, `850ns`, `1.5µs`, `12.3456ms`,
/// `1.5s`, `2m3.5s`, `1h0m0s`.
pub fn go_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0s".to_string();
    }
    if ns < 1_000 {
        return format!("{ns}ns");
    }
    if ns < 1_000_000 {
        return format!("{}µs", fraction(ns, 1_000));
    }
    if ns < 1_000_000_000 {
        return format!("{}ms", fraction(ns, 1_000_000));
    }
    let total_secs = ns / 1_000_000_000;
    let sub = ns % 1_000_000_000;
    let hours = total_secs / 3600;
    let minutes = (total_secs % 3600) / 60;
    let secs = fraction((total_secs % 60) * 1_000_000_000 + sub, 1_000_000_000);
    if hours > 0 {
        format!("{hours}h{minutes}m{secs}s")
    } else if minutes > 0 {
        format!("{minutes}m{secs}s")
    } else {
        format!("{secs}s")
    }
}

/// `value / unit` with the remainder as decimals, trailing zeros dropped (Go's `fmtFrac`).
fn fraction(value: u128, unit: u128) -> String {
    let whole = value / unit;
    let rest = value % unit;
    if rest == 0 {
        return whole.to_string();
    }
    let width = unit.ilog10() as usize;
    let digits = format!("{rest:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

/// Formats a byte count as go-humanize's `Bytes` (SI units): `82 B`, `4.1 kB`, `12 MB`.
pub fn humanize_bytes(n: u64) -> String {
    const UNITS: [&str; 7] = ["B", "kB", "MB", "GB", "TB", "PB", "EB"];
    if n < 10 {
        return format!("{n} B");
    }
    let f = n as f64;
    let exp = (f.ln() / 1000f64.ln()).floor() as usize;
    let exp = exp.min(UNITS.len() - 1);
    let val = (f / 1000f64.powi(exp as i32) * 10.0 + 0.5).floor() / 10.0;
    if val < 10.0 {
        format!("{val:.1} {}", UNITS[exp])
    } else {
        format!("{val:.0} {}", UNITS[exp])
    }
}

/// Parses a Go duration string (`0`, `300ms`, `1.5s`, `5m`, `1h30m`, units ns, us, µs, ms, s,
/// m, h), as etcd's duration flags take them.
pub fn parse_go_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err("empty duration".to_string());
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        if num_len == 0 {
            return Err(format!("invalid duration {s:?}"));
        }
        let value: f64 = rest[..num_len].parse().map_err(|_| format!("invalid duration {s:?}"))?;
        rest = &rest[num_len..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => return Err(format!("missing unit in duration {s:?}")),
            unit => return Err(format!("unknown unit {unit:?} in duration {s:?}")),
        };
        total += value * scale;
        rest = &rest[unit_len..];
    }
    Duration::try_from_secs_f64(total).map_err(|e| format!("invalid duration {s:?}: {e}"))
}

/// A moment in UTC, as results name and head their files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Utc {
    /// `2026-11-30`: the results folder.
    pub date: String,
    /// `2026-11-30T05-10-00Z`: the prefix of a run's files.
    pub stamp: String,
    /// `2026-11-30 05:10 UTC`: for a summary's first line.
    pub line: String,
}

/// `t` in UTC (the proleptic Gregorian calendar, from days since 1970-01-01).
pub fn utc(t: SystemTime) -> Utc {
    let secs = t.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    let (h, m, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    // Shift the epoch to 0000-03-01 so that leap days end each 400-year era's years.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let date = format!("{year:04}-{month:02}-{day:02}");
    Utc { stamp: format!("{date}T{h:02}-{m:02}-{s:02}Z"), line: format!("{date} {h:02}:{m:02} UTC"), date }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_g_matches_go() {
        assert_eq!(go_g(0.0), "0");
        assert_eq!(go_g(10.0), "10");
        assert_eq!(go_g(99.9), "99.9");
        assert_eq!(go_g(0.001234), "0.001234");
        assert_eq!(go_g(0.0001), "0.0001");
        assert_eq!(go_g(0.00001234), "1.234e-05");
        assert_eq!(go_g(23456.78), "23456.78");
        assert_eq!(go_g(100000.0), "100000");
        assert_eq!(go_g(1000000.0), "1e+06");
        assert_eq!(go_g(1234567.0), "1.234567e+06");
        assert_eq!(go_g(-2.5e-7), "-2.5e-07");
        assert_eq!(go_g(1e100), "1e+100");
    }

    #[test]
    fn fixed_precision_matches_go() {
        assert_eq!(num(0.00123456, false), "0.0012");
        assert_eq!(num(12.0, false), "12.0000");
        assert_eq!(num(0.00123456, true), "0.00123456");
    }

    #[test]
    fn durations_match_go() {
        assert_eq!(go_duration(Duration::ZERO), "0s");
        assert_eq!(go_duration(Duration::from_nanos(850)), "850ns");
        assert_eq!(go_duration(Duration::from_nanos(1_500)), "1.5µs");
        assert_eq!(go_duration(Duration::from_nanos(12_345_600)), "12.3456ms");
        assert_eq!(go_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(go_duration(Duration::from_millis(123_500)), "2m3.5s");
        assert_eq!(go_duration(Duration::from_secs(3600)), "1h0m0s");
    }

    #[test]
    fn bytes_match_go_humanize() {
        assert_eq!(humanize_bytes(0), "0 B");
        assert_eq!(humanize_bytes(82), "82 B");
        assert_eq!(humanize_bytes(4096), "4.1 kB");
        assert_eq!(humanize_bytes(25_165_824), "25 MB");
    }

    #[test]
    fn go_durations_parse() {
        assert_eq!(parse_go_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_go_duration("300ms"), Ok(Duration::from_millis(300)));
        assert_eq!(parse_go_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_go_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("2h"), Ok(Duration::from_secs(7200)));
        assert!(parse_go_duration("5").is_err());
        assert!(parse_go_duration("5x").is_err());
        assert!(parse_go_duration("").is_err());
        assert!(parse_go_duration("s").is_err());
    }

    #[test]
    fn utc_dates() {
        let at = |secs: u64| utc(UNIX_EPOCH + Duration::from_secs(secs));
        assert_eq!(at(0).stamp, "1970-01-01T00-00-00Z");
        // 2000-02-29 12:34:56, a leap day of a 400-year leap year.
        assert_eq!(at(951_827_696).line, "2000-02-29 12:34 UTC");
        // 2026-11-30 04:06:27.
        let u = at(1_796_011_587);
        assert_eq!((u.date.as_str(), u.stamp.as_str()), ("2026-11-30", "2026-11-30T04-06-27Z"));
    }
}
