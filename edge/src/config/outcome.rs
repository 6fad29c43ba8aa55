//! What reading a configuration yields: the configuration and the lines to log about it (once
//! logging is set up: its level is part of the configuration), or why there is none.

use std::path::PathBuf;

use crate::config::flags::Config;

/// A configuration and what was noticed while reading it, to log once logging is set up
/// (its level is part of the configuration).
#[derive(Debug)]
pub struct Loaded {
    /// The configuration to run with.
    pub config: Config,
    /// etcd logs the same lines: the file in use, each variable used or not recognised, and
    /// (actcd only) each file key it ignores.
    pub notes: Vec<Note>,
}

/// A line for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    /// Logged at info.
    Info(String),
    /// Logged at warn.
    Warn(String),
}

/// Why no configuration came out.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Bad flags, or `--help` and `--version`, whose text is the error's.
    #[error(transparent)]
    Flags(#[from] clap::Error),
    /// etcd's words, so scripts that grep for them keep working.
    #[error("conflicting environment variable {0:?} is shadowed by corresponding command-line flag (either unset environment variable or disable flag)")]
    ShadowedVariable(String),
    /// A variable whose value its flag refuses.
    #[error("invalid value {value:?} for {key}: {reason}")]
    BadVariable {
        /// The variable.
        key: String,
        /// Its value.
        value: String,
        /// What the flag's parser said.
        reason: String,
    },
    /// The file cannot be read, is not YAML, or holds a value its key refuses.
    #[error("config file {path}: {reason}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
}
