//! Counts and bytes as etcd's benchmark tables write them (1k, 2.5M; MB of 10^6; B or KB a
//! connection, stream or watch), and counts as the command line takes them: one owner for every
//! table of the crate.

/// A count as etcd's table writes it: 1k, 2.5M, 50.
pub fn count(n: u64) -> String {
    let short = |v: f64, unit: &str| {
        if v.fract() == 0.0 {
            format!("{v:.0}{unit}")
        } else {
            format!("{v}{unit}")
        }
    };
    if n >= 1_000_000 && n % 100_000 == 0 {
        short(n as f64 / 1e6, "M")
    } else if n >= 1000 && n % 100 == 0 {
        short(n as f64 / 1e3, "k")
    } else {
        n.to_string()
    }
}

/// A count as `--rows` writes it: 1000, 1k, 2.5M.
pub fn parse_count(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (digits, mult) = match s.char_indices().last() {
        Some((i, 'k' | 'K')) => (&s[..i], 1_000.0),
        Some((i, 'm' | 'M')) => (&s[..i], 1_000_000.0),
        _ => (s, 1.0),
    };
    let v: f64 = digits.parse().map_err(|_| format!("{s:?} is not a count (like 1000, 1k or 2.5M)"))?;
    let n = v * mult;
    if !(n >= 1.0 && n.fract() == 0.0 && n <= 1e12) {
        return Err(format!("{s:?} is not a positive whole count"));
    }
    Ok(n as u64)
}

/// Bytes as etcd's table writes memory: MB (10^6), one decimal below 100.
pub fn mb(bytes: f64) -> String {
    let v = bytes / 1e6;
    if v.abs() < 100.0 {
        format!("{v:.1} MB")
    } else {
        format!("{v:.0} MB")
    }
}

/// Bytes per item: B below 10 kB, else KB (10^3), as etcd quotes c1/c2/c3.
pub fn per_item(bytes: f64) -> String {
    if bytes.abs() < 10e3 {
        format!("{bytes:.0} B")
    } else {
        format!("{:.1} KB", bytes / 1e3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_read_like_etcd() {
        assert_eq!(count(1000), "1k");
        assert_eq!(count(2_500_000), "2.5M");
        assert_eq!(count(10_000_000), "10M");
        assert_eq!(count(50), "50");
        assert_eq!(count(1234), "1234");
    }
}
