//! Go's `time.Duration` as text, both ways, because etcd's flags and reports use it: parsing as
//! `time.ParseDuration` does (`300ms`, `1.5s`, `1h30m`, `.5s`; units ns, us, µs, μs, ms, s, m,
//! h; a bare `0`), and printing as `Duration.String` does (`0s`, `850ns`, `1.5µs`,
//! `12.3456ms`, `2m3.5s`, `1h0m0s`).
//!
//! Parsing follows Go to the nanosecond: each number is whole plus fraction, scaled by its
//! unit in integers, so `1.000000001s` is one second and one nanosecond. A negative duration
//! (Go allows them) is refused: [`Duration`] has none, and no flag wants one.

use std::time::Duration;

/// Why a duration text is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Not a duration at all (empty, no digits, a stray character).
    #[error("invalid duration {0:?}")]
    Invalid(String),
    /// A number without a unit (only `0` may go without).
    #[error("missing unit in duration {0:?}")]
    MissingUnit(String),
    /// A unit Go does not know.
    #[error("unknown unit {unit:?} in duration {text:?}")]
    UnknownUnit {
        /// The unit as written.
        unit: String,
        /// The whole text.
        text: String,
    },
    /// Below zero.
    #[error("negative duration {0:?}")]
    Negative(String),
    /// More than `u64::MAX` nanoseconds (Go's limit is half that).
    #[error("duration {0:?} overflows")]
    Overflow(String),
}

/// Nanoseconds in one of each unit.
fn unit_nanos(unit: &str) -> Option<u128> {
    Some(match unit {
        "ns" => 1,
        "us" | "µs" | "μs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return None,
    })
}

/// Parses `text` as Go's `time.ParseDuration` does (surrounding white space aside).
pub fn parse(text: &str) -> Result<Duration, ParseError> {
    let orig = text.trim();
    let invalid = || ParseError::Invalid(orig.to_string());
    let mut s = orig;
    let negative = s.starts_with('-');
    if let Some(rest) = s.strip_prefix(['-', '+']) {
        s = rest;
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(invalid());
    }
    let mut total: u128 = 0;
    while !s.is_empty() {
        let whole_len = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (whole, rest) = s.split_at(whole_len);
        let (fraction, rest) = match rest.strip_prefix('.') {
            Some(r) => {
                let len = r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len());
                r.split_at(len)
            }
            None => ("", rest),
        };
        if whole.is_empty() && fraction.is_empty() {
            return Err(invalid());
        }
        let unit_len = rest.find(|c: char| c == '.' || c.is_ascii_digit()).unwrap_or(rest.len());
        let (unit, rest) = rest.split_at(unit_len);
        if unit.is_empty() {
            return Err(ParseError::MissingUnit(orig.to_string()));
        }
        let per = unit_nanos(unit)
            .ok_or_else(|| ParseError::UnknownUnit { unit: unit.to_string(), text: orig.to_string() })?;
        let overflow = || ParseError::Overflow(orig.to_string());
        let whole: u128 = if whole.is_empty() { 0 } else { whole.parse().map_err(|_| overflow())? };
        let mut nanos = whole.checked_mul(per).ok_or_else(overflow)?;
        // The fraction's digits, as far as they can matter (Go stops where they overflow).
        let mut scale: u128 = 1;
        let mut digits: u128 = 0;
        for d in fraction.bytes().take(30) {
            digits = digits * 10 + u128::from(d - b'0');
            scale *= 10;
        }
        nanos += digits * per / scale;
        total = total.checked_add(nanos).ok_or_else(overflow)?;
        s = rest;
    }
    if negative && total > 0 {
        return Err(ParseError::Negative(orig.to_string()));
    }
    let total = u64::try_from(total).map_err(|_| ParseError::Overflow(orig.to_string()))?;
    Ok(Duration::from_nanos(total))
}

/// `d` as Go's `time.Duration.String()` prints it.
pub fn format(d: Duration) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_match_go() {
        assert_eq!(format(Duration::ZERO), "0s");
        assert_eq!(format(Duration::from_nanos(850)), "850ns");
        assert_eq!(format(Duration::from_nanos(1_500)), "1.5µs");
        assert_eq!(format(Duration::from_nanos(12_345_600)), "12.3456ms");
        assert_eq!(format(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format(Duration::from_millis(123_500)), "2m3.5s");
        assert_eq!(format(Duration::from_secs(3600)), "1h0m0s");
    }

    #[test]
    fn go_durations_parse() {
        let ok = |s: &str| parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(ok("0"), Duration::ZERO);
        assert_eq!(ok("-0"), Duration::ZERO);
        assert_eq!(ok("300ms"), Duration::from_millis(300));
        assert_eq!(ok("1.5s"), Duration::from_millis(1500));
        assert_eq!(ok("1m30s"), Duration::from_secs(90));
        assert_eq!(ok("2h"), Duration::from_secs(7200));
        assert_eq!(ok("+5s"), Duration::from_secs(5));
        assert_eq!(ok(".5s"), Duration::from_millis(500));
        assert_eq!(ok("1.s"), Duration::from_secs(1));
        assert_eq!(ok("1.000000001s"), Duration::from_nanos(1_000_000_001));
        assert_eq!(ok("1h2m3s4ms5us6µs7μs8ns"), Duration::from_nanos(3_723_004_018_008));
        assert_eq!(ok("0s"), Duration::ZERO);
        assert_eq!(parse("5"), Err(ParseError::MissingUnit("5".to_string())));
        assert!(matches!(parse("5x"), Err(ParseError::UnknownUnit { .. })));
        for bad in ["", "s", ".", "-", "1..5s", "1s.", "5 s"] {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
        assert_eq!(parse("-1s"), Err(ParseError::Negative("-1s".to_string())));
        assert!(matches!(parse("99999999999999999999h"), Err(ParseError::Overflow(_))));
    }
}
