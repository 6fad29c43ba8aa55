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

#[cfg(test)]
mod tests {
    use clap::{Arg, Command};

    use super::GoBool;

    /// `--on` (a Go bool defaulting to `default`) and a positional argument after it.
    fn parse(default: bool, args: &[&str]) -> Result<(bool, Option<String>), clap::Error> {
        let command = Command::new("t").arg(Arg::new("on").long("on").go_bool(default)).arg(Arg::new("rest"));
        let matches = command.try_get_matches_from(std::iter::once("t").chain(args.iter().copied()))?;
        Ok((
            matches.get_one::<bool>("on").copied().unwrap_or(default),
            matches.get_one::<String>("rest").cloned(),
        ))
    }

    /// strconv.ParseBool's words, from Go's source: each takes effect whatever the default.
    #[test]
    fn every_word_go_parses_is_taken_and_no_other() {
        for default in [false, true] {
            for word in ["1", "t", "T", "TRUE", "true", "True"] {
                assert!(parse(default, &[&format!("--on={word}")]).unwrap().0, "{word}");
            }
            for word in ["0", "f", "F", "FALSE", "false", "False"] {
                assert!(!parse(default, &[&format!("--on={word}")]).unwrap().0, "{word}");
            }
        }
        for word in ["yes", "no", "on", "tRUE", "2", ""] {
            let err = parse(false, &[&format!("--on={word}")]).unwrap_err().to_string();
            assert!(err.contains("--on"), "{word:?}: {err}");
        }
    }

    /// As in Go's flag package: alone the flag is true, and a word after it is not its value.
    #[test]
    fn alone_a_flag_is_true_and_the_next_word_is_the_next_argument() {
        assert_eq!(parse(false, &[]).unwrap(), (false, None));
        assert_eq!(parse(true, &[]).unwrap(), (true, None));
        assert_eq!(parse(false, &["--on"]).unwrap(), (true, None));
        assert_eq!(parse(false, &["--on", "false"]).unwrap(), (true, Some("false".into())));
    }
}
