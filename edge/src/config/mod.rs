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
    error_line, listen_urls, parse_duration, tracing_filter, Config, FlagError, DEFAULT_MAX_REQUEST_BYTES,
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

#[cfg(test)]
mod tests {
    use std::ffi::OsString;
    use std::time::Duration;

    use super::{load, LoadError, Note};

    /// The environment of [`load`]: `pairs` as the process's variables.
    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs.iter().map(|(k, v)| (OsString::from(k), OsString::from(v))).collect()
    }

    fn args_of(list: &[&str]) -> Vec<OsString> {
        std::iter::once("actcd").chain(list.iter().copied()).map(OsString::from).collect()
    }

    /// Every flag is also its ETCD_* variable, taken where the flag is not given; a variable
    /// beside its flag, or with a value the flag refuses, stops the start with etcd's words.
    #[test]
    fn etcd_variables_fill_in_the_flags_not_given() {
        let env = vars(&[
            ("ETCD_NAME", "from-env"),
            ("ETCD_LISTEN_CLIENT_URLS", "http://127.0.0.1:1,http://127.0.0.1:2"),
            ("ETCD_CLIENT_CERT_AUTH", "true"),
            ("ETCD_EXPERIMENTAL_WATCH_PROGRESS_NOTIFY_INTERVAL", "90s"),
            ("ETCD_NO_SUCH_FLAG", "1"),
            ("ETCDCTL_API", "3"),
        ]);
        let loaded = load(&args_of(&["--max-txn-ops", "7"]), &env).unwrap();
        let c = &loaded.config;
        assert_eq!(c.name, "from-env");
        assert_eq!(c.listen_client_urls, ["http://127.0.0.1:1", "http://127.0.0.1:2"]);
        assert!(c.client_tls.client_cert_auth);
        assert_eq!(c.watch_progress_notify_interval, Duration::from_secs(90));
        assert_eq!(c.max_txn_ops, 7, "a flag with no variable is kept");
        assert!(loaded
            .notes
            .contains(&Note::Warn("unrecognized environment variable ETCD_NO_SUCH_FLAG=1".into())));
        assert!(loaded
            .notes
            .contains(&Note::Info("recognized and used environment variable ETCD_NAME=from-env".into())));
        assert!(!loaded.notes.iter().any(|n| format!("{n:?}").contains("ETCDCTL")), "not etcd's prefix");

        let shadowed = load(&args_of(&["--name", "flag"]), &vars(&[("ETCD_NAME", "env")])).unwrap_err();
        assert_eq!(
            shadowed.to_string(),
            r#"conflicting environment variable "ETCD_NAME" is shadowed by corresponding command-line flag (either unset environment variable or disable flag)"#
        );
        let shadowed = load(&args_of(&["--data-dir=d"]), &vars(&[("ETCD_DATA_DIR", "d")])).unwrap_err();
        assert!(
            matches!(shadowed, LoadError::ShadowedVariable(ref key) if key == "ETCD_DATA_DIR"),
            "{shadowed}"
        );

        let bad = load(&args_of(&[]), &vars(&[("ETCD_HEARTBEAT_INTERVAL", "abc")])).unwrap_err().to_string();
        assert!(bad.starts_with(r#"invalid value "abc" for ETCD_HEARTBEAT_INTERVAL: "#), "{bad}");
        let bad =
            load(&args_of(&[]), &vars(&[("ETCD_INITIAL_CLUSTER_STATE", "maybe")])).unwrap_err().to_string();
        assert!(bad.starts_with(r#"invalid value "maybe" for ETCD_INITIAL_CLUSTER_STATE"#), "{bad}");
    }

    /// etcd's YAML keys, TLS nested as etcd nests it, Go's types; with a file, flags and
    /// variables are ignored (even ones that would conflict), as etcd ignores them.
    #[test]
    fn a_config_file_overrules_flags_and_variables() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("etcd.conf.yml");
        std::fs::write(
            &path,
            "name: from-file\n\
             data-dir: /var/lib/etcd\n\
             wal-dir:\n\
             enable-v2: true\n\
             heartbeat-interval: 50\n\
             election-timeout: 500\n\
             listen-client-urls: http://127.0.0.1:3379,http://127.0.0.1:3380\n\
             experimental-watch-progress-notify-interval: 1500000000\n\
             cipher-suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384]\n\
             client-transport-security:\n  cert-file: /c.crt\n  key-file: /c.key\n  client-cert-auth: true\n  client-cert-file: /x\n\
             peer-transport-security:\n  trusted-ca-file: /ca.crt\n  auto-tls: true\n  allowed-cn: [member]\n\
             cert-file: /top-level-is-not-etcds\n",
        )
        .unwrap();
        let env = vars(&[("ETCD_NAME", "env"), ("ETCD_MAX_TXN_OPS", "3")]);
        let file = path.to_str().unwrap();
        let loaded =
            load(&args_of(&["--config-file", file, "--name", "flag", "--max-txn-ops=9"]), &env).unwrap();
        let c = &loaded.config;
        assert_eq!((c.name.as_str(), c.data_dir.to_str().unwrap()), ("from-file", "/var/lib/etcd"));
        assert_eq!((c.heartbeat_interval, c.election_timeout, c.max_txn_ops), (50, 500, 128));
        assert_eq!(c.listen_client_urls, ["http://127.0.0.1:3379", "http://127.0.0.1:3380"]);
        assert_eq!(c.watch_progress_notify_interval, Duration::from_millis(1500));
        assert_eq!(c.cipher_suites.len(), 2);
        assert_eq!(c.client_tls.cert_file.as_deref(), Some(std::path::Path::new("/c.crt")));
        assert_eq!(c.client_tls.key_file.as_deref(), Some(std::path::Path::new("/c.key")));
        assert!(c.client_tls.client_cert_auth && c.peer_tls.auto_tls);
        assert_eq!(c.peer_tls.trusted_ca_file.as_deref(), Some(std::path::Path::new("/ca.crt")));
        assert_eq!(c.peer_cert_allowed_cn.as_deref(), Some("member"));
        assert!(
            c.client_tls.trusted_ca_file.is_none() && !c.client_tls.auto_tls,
            "client and peer TLS stay apart"
        );
        assert!(loaded
            .notes
            .iter()
            .any(|n| matches!(n, Note::Info(l) if l.starts_with("Loading server configuration from"))));
        assert!(
            loaded.notes.contains(&Note::Warn(
                "ignoring config file keys actcd has no setting for: wal-dir, enable-v2, client-transport-security.client-cert-file, cert-file".into()
            )),
            "{:?}",
            loaded.notes
        );

        // ETCD_CONFIG_FILE names the file as the flag does.
        let by_variable = load(&args_of(&[]), &vars(&[("ETCD_CONFIG_FILE", file)])).unwrap();
        assert_eq!(by_variable.config.name, "from-file");

        let refused = |text: &str| {
            std::fs::write(&path, text).unwrap();
            load(&args_of(&["--config-file", file]), &[]).unwrap_err().to_string()
        };
        assert!(refused("name: 123\n").ends_with("name: expected a string"));
        assert!(
            refused("heartbeat-interval: \"100\"\n").ends_with("heartbeat-interval: expected a whole number")
        );
        assert!(refused("experimental-watch-progress-notify-interval: 5s\n").contains("whole nanoseconds"));
        assert!(refused("client-transport-security:\n  client-cert-auth: yes please\n")
            .ends_with("expected true or false"));
        assert!(
            refused("initial-cluster-state: maybe\n").contains("'maybe'"),
            "the flag's own parser checks it"
        );
        assert!(refused("- a\n- b\n").ends_with("not a map of etcd's configuration keys"));
        assert!(refused("name: [unclosed\n").contains("not YAML"));
        std::fs::remove_file(&path).unwrap();
        assert!(load(&args_of(&["--config-file", file]), &[])
            .unwrap_err()
            .to_string()
            .contains("cannot read it"));
    }

    /// Each source in etcd's order: a file wins over everything, a flag over its variable (given
    /// beside it, the variable is refused), a variable over the default.
    #[test]
    fn the_sources_rank_file_then_flag_then_variable_then_default() {
        let ops = |args: &[&str], env: &[(&str, &str)]| {
            load(&args_of(args), &vars(env)).map(|l| l.config.max_txn_ops)
        };
        assert_eq!(ops(&[], &[]).unwrap(), 128, "etcd's default");
        assert_eq!(ops(&[], &[("ETCD_MAX_TXN_OPS", "3")]).unwrap(), 3);
        assert_eq!(ops(&["--max-txn-ops=9"], &[]).unwrap(), 9);
        assert_eq!(ops(&["--max-txn-ops=9"], &[("ETCD_NAME", "n")]).unwrap(), 9, "another flag's variable");
        assert!(matches!(
            ops(&["--max-txn-ops=9"], &[("ETCD_MAX_TXN_OPS", "3")]),
            Err(LoadError::ShadowedVariable(_))
        ));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("etcd.yml");
        std::fs::write(&path, "max-txn-ops: 5\n").unwrap();
        let file = path.to_str().unwrap();
        assert_eq!(
            ops(&["--config-file", file, "--max-txn-ops=9"], &[("ETCD_MAX_TXN_OPS", "3")]).unwrap(),
            5
        );
        assert_eq!(ops(&["--config-file", file], &[]).unwrap(), 5);
        std::fs::write(&path, "name: only-the-name\n").unwrap();
        assert_eq!(
            ops(&["--config-file", file, "--max-txn-ops=9"], &[("ETCD_MAX_TXN_OPS", "3")]).unwrap(),
            128,
            "with a file, a key it lacks keeps its default, not the flag's or the variable's value"
        );
    }

    /// A Go bool from a variable takes strconv.ParseBool's words, as etcd's flag package does.
    #[test]
    fn boolean_variables_take_gos_words_and_refuse_others() {
        let loaded = |env: &[(&str, &str)]| load(&args_of(&[]), &vars(env));
        let c = loaded(&[("ETCD_AUTO_TLS", "T"), ("ETCD_STRICT_RECONFIG_CHECK", "0")]).unwrap().config;
        assert!(c.client_tls.auto_tls);
        assert!(!c.strict_reconfig_check, "0 turns off a flag that defaults to true");
        let bad = loaded(&[("ETCD_AUTO_TLS", "yes")]).unwrap_err().to_string();
        assert!(bad.starts_with(r#"invalid value "yes" for ETCD_AUTO_TLS: "#), "{bad}");
        assert!(bad.contains("--auto-tls"), "the flag's parser names the flag: {bad}");
    }

    /// --help and --version are answers, not failures: clap's text on stdout.
    #[test]
    fn help_and_version_come_back_as_answers() {
        for flag in ["--help", "--version"] {
            match load(&args_of(&[flag]), &[]) {
                Err(LoadError::Flags(err)) => assert!(!err.use_stderr(), "{flag}"),
                other => panic!("{flag}: {other:?}"),
            }
        }
        let version = match load(&args_of(&["--version"]), &[]) {
            Err(LoadError::Flags(err)) => err.to_string(),
            other => panic!("{other:?}"),
        };
        assert!(version.contains(&format!("etcd API Version: {}\n", crate::SERVER_VERSION)), "{version}");
    }
}
