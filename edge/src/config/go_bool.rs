//! etcd's boolean flags as Go's `flag` package takes them: `--auto-tls` alone is true,
//! `--auto-tls=false` sets it (the `=` is needed: a separate word is the next argument), and
//! the value is read by Go's `strconv.ParseBool`, which also takes 1, t, T, TRUE, True and their
//! false forms (etcd's ETCD_* variables and scripts use them).

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Arg, ArgAction};

/// The words `strconv.ParseBool` takes as true.
const TRUE: [&str; 6] = ["1", "t", "T", "TRUE", "true", "True"];
/// And as false.
const FALSE: [&str; 6] = ["0", "f", "F", "FALSE", "false", "False"];

/// A flag taken as a Go bool.
pub trait GoBool {
    /// The flag as a Go bool that is `default` when not given. The default is also the
    /// attribute of a derived flag: `#[arg(long = "...", go_bool = false)]`.
    fn go_bool(self, default: bool) -> Self;
}

impl GoBool for Arg {
    fn go_bool(self, default: bool) -> Self {
        let words = TRUE.iter().chain(&FALSE).copied();
        self.num_args(0..=1)
            .require_equals(true)
            .default_value(if default { "true" } else { "false" })
            .default_missing_value("true")
            .action(ArgAction::Set)
            .value_parser(PossibleValuesParser::new(words).map(|word| TRUE.contains(&word.as_str())))
            .hide_possible_values(true)
    }
}
