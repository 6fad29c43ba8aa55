//! When a run happened, in UTC, in the three forms its results use: the folder, the prefix of
//! its files and the first line of a summary.

use jiff::Timestamp;

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

impl Utc {
    /// Now.
    pub fn now() -> Self {
        Self::at(Timestamp::now())
    }

    /// The moment `t`.
    pub fn at(t: Timestamp) -> Self {
        Self {
            date: t.strftime("%Y-%m-%d").to_string(),
            stamp: t.strftime("%Y-%m-%dT%H-%M-%SZ").to_string(),
            line: t.strftime("%Y-%m-%d %H:%M UTC").to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        let at = |secs: i64| Utc::at(Timestamp::from_second(secs).expect("in range"));
        assert_eq!(at(0).stamp, "1970-01-01T00-00-00Z");
        // 2000-02-29 12:34:56, a leap day of a 400-year leap year.
        assert_eq!(at(951_827_696).line, "2000-02-29 12:34 UTC");
        // 2026-11-30 04:06:27.
        let u = at(1_796_011_587);
        assert_eq!((u.date.as_str(), u.stamp.as_str()), ("2026-11-30", "2026-11-30T04-06-27Z"));
    }
}
