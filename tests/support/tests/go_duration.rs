//! Go's duration text, read and written as Go's `time` package does.

use std::time::Duration;

use actcd_test_support::go_duration::{format, parse, ParseError};

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
