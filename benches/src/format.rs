//! Go-compatible number formatting, so that the report reads exactly like etcd benchmark's:
//! `%4.4f` and `%g` numbers and go-humanize byte sizes (Go's durations are in
//! `actcd_proto::go_duration`).

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
    fn bytes_match_go_humanize() {
        assert_eq!(humanize_bytes(0), "0 B");
        assert_eq!(humanize_bytes(82), "82 B");
        assert_eq!(humanize_bytes(4096), "4.1 kB");
        assert_eq!(humanize_bytes(25_165_824), "25 MB");
    }
}
