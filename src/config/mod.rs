//! How a member is configured, as etcd takes it: from its flags, from an ETCD_* variable for
//! each flag not given, or wholly from a YAML file (`--config-file`, or ETCD_CONFIG_FILE),
//! which then overrules both.
//!
//! The variables and the file's keys are each turned into flags (`--key=value`) and parsed
//! with the flags' own parsers, so a value is checked, and a default written, in one place
//! whatever the source.
//!
//! # Layout
//! - `flags`: the flags, named and defaulted as etcd's ([`Config`]), and their value parsers.
//! - `environment`: ETCD_* variables read as flags; one that a flag shadows stops the start.
//! - `file`: the YAML file's keys (etcd's, TLS nested as etcd nests it) read as flags.
//! - `outcome`: what reading yields: the configuration and lines to log, or why not.
//! - `go_bool`: a boolean flag as Go's `flag` package takes it.
//! - `tls_group`: one set of TLS flags, for the client URLs and again for the peer URLs.

mod environment;
mod file;
mod flags;
mod go_bool;
mod outcome;
mod tls_group;

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{CommandFactory, FromArgMatches, Parser};

pub use flags::{
    error_line, listen_urls, parse_duration, tracing_filter, Config, DEFAULT_MAX_REQUEST_BYTES,
    DEFAULT_QUOTA_BYTES,
};
pub use outcome::{LoadError, Loaded, Note};
pub use tls_group::{ClientTls, PeerTls, TlsGroup};

/// The configuration from `args` (the command line, program name first) and `vars` (the
/// process's environment), as etcd 3.4 reads its own: a config file wins over everything,
/// else the flags given, else their variables, else the defaults.
pub fn load(args: &[OsString], vars: &[(OsString, OsString)]) -> Result<Loaded, LoadError> {
    let command = Config::command();
    let given = command.clone().try_get_matches_from(args)?;
    let from_flags = Config::from_arg_matches(&given)?;
    let program = args.first().cloned().unwrap_or_else(|| "actcd".into());

    let file = from_flags.config_file.clone().or_else(|| {
        vars.iter().find(|(key, _)| key == environment::CONFIG_FILE).map(|(_, path)| PathBuf::from(path))
    });
    if let Some(path) = file {
        let read = file::read(&path)?;
        let mut argv = vec![program];
        argv.extend(read.args);
        let config = Config::try_parse_from(argv)
            .map_err(|err| LoadError::File { path: path.clone(), reason: error_line(&err) })?;
        let mut notes = vec![Note::Info(format!(
            "Loading server configuration from {path:?}. Other configuration command line flags and environment variables will be ignored if provided."
        ))];
        notes.extend(read.notes);
        return Ok(Loaded { config, notes });
    }

    let read = environment::read(&command, &given, vars)?;
    if read.args.is_empty() {
        return Ok(Loaded { config: from_flags, notes: read.notes });
    }
    let mut argv = args.to_vec();
    argv.extend(read.args);
    Ok(Loaded { config: Config::try_parse_from(argv)?, notes: read.notes })
}
