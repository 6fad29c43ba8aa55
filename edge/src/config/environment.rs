//! ETCD_* variables as etcd 3.4's `flags.SetFlagsFromEnv` reads them: every flag `--a-b` is
//! also the variable `ETCD_A_B`, used when the flag is not on the command line. A variable
//! set beside its flag is a mistake etcd refuses to guess about (which one did the operator
//! mean?), and so does actcd; an ETCD_* variable that names no flag is only warned about,
//! since the same environment often serves tools of several versions.

use std::ffi::OsString;

use clap::parser::ValueSource;
use clap::{ArgMatches, Command};

use crate::config::flags::error_line;
use crate::config::outcome::{LoadError, Note};

/// The variable naming the config file: read before the others, which a file overrules.
pub const CONFIG_FILE: &str = "ETCD_CONFIG_FILE";

/// What the variables add to the command line.
pub struct FromVariables {
    /// `--flag=value` for each variable used.
    pub args: Vec<OsString>,
    /// Each variable used or not recognised, as etcd logs them.
    pub notes: Vec<Note>,
}

/// The variable a flag is read from: `--initial-cluster-token` is ETCD_INITIAL_CLUSTER_TOKEN.
pub fn variable(flag: &str) -> String {
    format!("ETCD_{}", flag.to_ascii_uppercase().replace('-', "_"))
}

/// The flags that `vars` give, for `command`'s flags missing from `given` (its parse of the
/// command line). Each value is checked by its flag's parser here, so that a bad one is
/// reported under the variable's name.
pub fn read(
    command: &Command,
    given: &ArgMatches,
    vars: &[(OsString, OsString)],
) -> Result<FromVariables, LoadError> {
    let mut read = FromVariables { args: Vec::new(), notes: Vec::new() };
    for (key, value) in vars {
        let (Some(key), Some(value)) = (key.to_str(), value.to_str()) else { continue };
        if !key.starts_with("ETCD_") || key == CONFIG_FILE {
            continue;
        }
        let Some(arg) = command.get_arguments().find(|arg| {
            arg.get_long().is_some_and(|long| long != "help" && long != "version" && variable(long) == key)
        }) else {
            read.notes.push(Note::Warn(format!("unrecognized environment variable {key}={value}")));
            continue;
        };
        if given.value_source(arg.get_id().as_str()) == Some(ValueSource::CommandLine) {
            return Err(LoadError::ShadowedVariable(key.to_owned()));
        }
        let flag = format!("--{}={value}", arg.get_long().unwrap_or_default());
        if let Err(err) = command.clone().try_get_matches_from(["actcd", flag.as_str()]) {
            let reason = error_line(&err);
            return Err(LoadError::BadVariable { key: key.to_owned(), value: value.to_owned(), reason });
        }
        read.notes.push(Note::Info(format!("recognized and used environment variable {key}={value}")));
        read.args.push(flag.into());
    }
    Ok(read)
}
