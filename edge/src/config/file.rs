//! `--config-file`: etcd's YAML configuration, key by key onto actcd's flags.
//!
//! etcd decodes the file into its Go config struct, so its rules are Go's JSON rules:
//! - a key is the flag's name, except TLS, nested as `client-transport-security:` and
//!   `peer-transport-security:` maps whose keys drop the `peer-` prefix;
//! - a value has its field's type (a number is not a string, durations are whole
//!   nanoseconds), and a null leaves the default;
//! - URL lists are one comma-separated string, cipher suites a YAML list;
//! - a key etcd does not know is ignored. actcd ignores those and the etcd keys it has no
//!   setting for, and names them in one warning rather than say nothing.
//!
//! Some flags have no key in any etcd version (the CRL files, 3.4's allowed peer CN and
//! hostname; 3.5 added `allowed-cn` and `allowed-hostname` under peer-transport-security,
//! read here): with a config file they keep their defaults, as on etcd.

use std::ffi::OsString;
use std::path::Path;

use yaml_rust2::{Yaml, YamlLoader};

use crate::config::outcome::{LoadError, Note};
use crate::config::tls_group::{ClientTls, PeerTls};
use crate::tls::FlagNames;

/// What a key's value must be, by the Go type of etcd's field.
#[derive(Clone, Copy)]
enum Kind {
    Text,
    Count,
    Switch,
    /// A `time.Duration`: whole nanoseconds.
    Nanos,
    /// A list of strings, one flag value joined with commas.
    Texts,
    /// 3.5's allowed-cn / allowed-hostname, a list; actcd's flag takes one name, as 3.4's.
    OneText,
}

/// Top-level keys: etcd 3.4's name, the flag it sets, the value's kind.
const KEYS: &[(&str, &str, Kind)] = &[
    ("name", "name", Kind::Text),
    ("data-dir", "data-dir", Kind::Text),
    ("listen-client-urls", "listen-client-urls", Kind::Text),
    ("advertise-client-urls", "advertise-client-urls", Kind::Text),
    ("listen-peer-urls", "listen-peer-urls", Kind::Text),
    ("initial-advertise-peer-urls", "initial-advertise-peer-urls", Kind::Text),
    ("listen-metrics-urls", "listen-metrics-urls", Kind::Text),
    ("initial-cluster", "initial-cluster", Kind::Text),
    ("initial-cluster-state", "initial-cluster-state", Kind::Text),
    ("initial-cluster-token", "initial-cluster-token", Kind::Text),
    ("strict-reconfig-check", "strict-reconfig-check", Kind::Switch),
    // etcd 3.6's key (3.5 spells it experimental-max-learners).
    ("max-learners", "max-learners", Kind::Count),
    ("experimental-max-learners", "max-learners", Kind::Count),
    ("experimental-initial-corrupt-check", "experimental-initial-corrupt-check", Kind::Switch),
    ("experimental-corrupt-check-time", "experimental-corrupt-check-time", Kind::Nanos),
    ("auto-compaction-mode", "auto-compaction-mode", Kind::Text),
    ("auto-compaction-retention", "auto-compaction-retention", Kind::Text),
    ("heartbeat-interval", "heartbeat-interval", Kind::Count),
    ("election-timeout", "election-timeout", Kind::Count),
    ("snapshot-count", "snapshot-count", Kind::Count),
    ("backend-batch-limit", "backend-batch-limit", Kind::Count),
    ("quota-backend-bytes", "quota-backend-bytes", Kind::Count),
    ("max-txn-ops", "max-txn-ops", Kind::Count),
    ("max-request-bytes", "max-request-bytes", Kind::Count),
    ("auth-token", "auth-token", Kind::Text),
    ("auth-token-ttl", "auth-token-ttl", Kind::Count),
    ("bcrypt-cost", "bcrypt-cost", Kind::Count),
    ("cipher-suites", "cipher-suites", Kind::Texts),
    ("tls-min-version", "tls-min-version", Kind::Text),
    ("tls-max-version", "tls-max-version", Kind::Text),
    ("log-level", "log-level", Kind::Text),
    ("cors", "cors", Kind::Text),
    (
        "experimental-watch-progress-notify-interval",
        "experimental-watch-progress-notify-interval",
        Kind::Nanos,
    ),
    // actcd's own tunables, which etcd has no key for: with a file they are set here or nowhere.
    ("serving-threads", "serving-threads", Kind::Count),
    // The two thread counts `serving-threads` replaced.
    ("watch-shards", "serving-threads", Kind::Count),
    ("stream-threads", "serving-threads", Kind::Count),
    ("read-budget-bytes", "read-budget-bytes", Kind::Count),
];

/// A `*-transport-security:` map's keys, the same in both maps, onto one set of TLS flags.
fn security(names: &FlagNames) -> Vec<(&'static str, &'static str, Kind)> {
    let flag = |name: &'static str| name.trim_start_matches("--");
    vec![
        ("cert-file", flag(names.cert_file), Kind::Text),
        ("key-file", flag(names.key_file), Kind::Text),
        ("trusted-ca-file", flag(names.trusted_ca_file), Kind::Text),
        ("client-cert-auth", flag(names.client_cert_auth), Kind::Switch),
        ("auto-tls", flag(names.auto_tls), Kind::Switch),
    ]
}

/// `peer-transport-security:` keys beyond the shared ones.
const PEER_ONLY: [(&str, &str, Kind); 2] = [
    ("allowed-cn", "peer-cert-allowed-cn", Kind::OneText),
    ("allowed-hostname", "peer-cert-allowed-hostname", Kind::OneText),
];

/// What the file adds to an empty command line.
pub struct FromFile {
    /// `--flag=value` for each key read.
    pub args: Vec<OsString>,
    /// The keys ignored, in one warning.
    pub notes: Vec<Note>,
}

/// Reads the file at `path` into flags.
pub fn read(path: &Path) -> Result<FromFile, LoadError> {
    let bad = |reason: String| LoadError::File { path: path.to_owned(), reason };
    let text = std::fs::read_to_string(path).map_err(|err| bad(format!("cannot read it: {err}")))?;
    let docs = YamlLoader::load_from_str(&text).map_err(|err| bad(format!("not YAML: {err}")))?;
    let mut flags = Flags::default();
    match docs.first() {
        None | Some(Yaml::Null) => {}
        Some(Yaml::Hash(map)) => {
            for (key, value) in map {
                let key = key.as_str().ok_or_else(|| bad(format!("{key:?} is not a key name")))?;
                match key {
                    "client-transport-security" => flags.nested(key, value, &security(ClientTls::names())),
                    "peer-transport-security" => {
                        let keys: Vec<_> = security(PeerTls::names()).into_iter().chain(PEER_ONLY).collect();
                        flags.nested(key, value, &keys)
                    }
                    _ => flags.key(key, key, value, KEYS),
                }
                .map_err(bad)?;
            }
        }
        Some(_) => return Err(bad("not a map of etcd's configuration keys".into())),
    }
    let mut notes = Vec::new();
    if !flags.ignored.is_empty() {
        notes.push(Note::Warn(format!(
            "ignoring config file keys actcd has no setting for: {}",
            flags.ignored.join(", ")
        )));
    }
    Ok(FromFile { args: flags.args, notes })
}

/// The flags read so far and the keys passed over.
#[derive(Default)]
struct Flags {
    args: Vec<OsString>,
    ignored: Vec<String>,
}

impl Flags {
    /// A TLS map: each of its keys through `table`.
    fn nested(&mut self, name: &str, value: &Yaml, table: &[(&str, &str, Kind)]) -> Result<(), String> {
        match value {
            Yaml::Null => Ok(()),
            Yaml::Hash(map) => {
                for (key, value) in map {
                    let key = key.as_str().ok_or_else(|| format!("{name}: {key:?} is not a key name"))?;
                    self.key(&format!("{name}.{key}"), key, value, table)?;
                }
                Ok(())
            }
            _ => Err(format!("{name}: expected a map of TLS settings")),
        }
    }

    /// One key (`shown` in messages) looked up in `table` and its value as a flag.
    fn key(
        &mut self,
        shown: &str,
        key: &str,
        value: &Yaml,
        table: &[(&str, &str, Kind)],
    ) -> Result<(), String> {
        let Some(&(_, flag, kind)) = table.iter().find(|(name, _, _)| *name == key) else {
            self.ignored.push(shown.to_owned());
            return Ok(());
        };
        let text = match (kind, value) {
            (_, Yaml::Null) => return Ok(()),
            (Kind::Text | Kind::OneText, Yaml::String(text)) => text.clone(),
            (Kind::Count, Yaml::Integer(n)) if *n >= 0 => n.to_string(),
            (Kind::Switch, Yaml::Boolean(on)) => on.to_string(),
            (Kind::Nanos, Yaml::Integer(n)) if *n >= 0 => format!("{n}ns"),
            (Kind::Texts, Yaml::Array(items)) => strings(shown, items)?.join(","),
            (Kind::OneText, Yaml::Array(items)) => match strings(shown, items)?.as_slice() {
                [one] => one.clone(),
                _ => {
                    return Err(format!(
                        "{shown}: actcd takes one name here (etcd 3.4's flag), not {}",
                        items.len()
                    ))
                }
            },
            (kind, _) => return Err(format!("{shown}: expected {}", expected(kind))),
        };
        self.args.push(format!("--{flag}={text}").into());
        Ok(())
    }
}

/// A YAML list's strings.
fn strings(shown: &str, items: &[Yaml]) -> Result<Vec<String>, String> {
    items
        .iter()
        .map(|item| {
            item.as_str().map(str::to_owned).ok_or_else(|| format!("{shown}: expected a list of strings"))
        })
        .collect()
}

/// What a kind's values look like, for its error.
fn expected(kind: Kind) -> &'static str {
    match kind {
        Kind::Text => "a string",
        Kind::Count => "a whole number",
        Kind::Switch => "true or false",
        Kind::Nanos => "a duration in whole nanoseconds, as etcd reads it",
        Kind::Texts => "a list of strings",
        Kind::OneText => "a string or a list of one string",
    }
}

#[cfg(test)]
mod tests {
    use super::{read, Note};
    use crate::config::LoadError;

    /// The flags and notes `text` gives as a config file.
    fn flags(text: &str) -> Result<(Vec<String>, Vec<Note>), String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("etcd.yml");
        std::fs::write(&path, text).unwrap();
        match read(&path) {
            Ok(read) => {
                Ok((read.args.iter().map(|a| a.to_string_lossy().into_owned()).collect(), read.notes))
            }
            Err(LoadError::File { reason, .. }) => Err(reason),
            Err(other) => panic!("{other}"),
        }
    }

    /// Go's types become the flags' texts: nanoseconds gain their unit, lists their commas,
    /// a null is no flag at all; TLS keys become the flag of their map.
    #[test]
    fn each_key_becomes_its_flag() {
        let (args, notes) = flags(
            "experimental-corrupt-check-time: 5000000000\n\
             cipher-suites: [A, B]\n\
             strict-reconfig-check: false\n\
             snapshot-count: 7\n\
             name: ~\n\
             experimental-max-learners: 2\n\
             client-transport-security:\n  key-file: /k\n\
             peer-transport-security:\n  key-file: /pk\n  client-cert-auth: true\n  allowed-hostname: [m1]\n",
        )
        .unwrap();
        assert_eq!(
            args,
            [
                "--experimental-corrupt-check-time=5000000000ns",
                "--cipher-suites=A,B",
                "--strict-reconfig-check=false",
                "--snapshot-count=7",
                "--max-learners=2",
                "--key-file=/k",
                "--peer-key-file=/pk",
                "--peer-client-cert-auth=true",
                "--peer-cert-allowed-hostname=m1",
            ]
        );
        assert!(notes.is_empty(), "{notes:?}");
        assert_eq!(flags("").unwrap().0, Vec::<String>::new(), "an empty file is etcd's defaults");
    }

    #[test]
    fn a_value_of_the_wrong_type_names_its_key() {
        let refused = |text: &str| flags(text).unwrap_err();
        assert_eq!(refused("snapshot-count: -1\n"), "snapshot-count: expected a whole number");
        assert_eq!(refused("cipher-suites: A\n"), "cipher-suites: expected a list of strings");
        assert_eq!(refused("cipher-suites: [1, 2]\n"), "cipher-suites: expected a list of strings");
        assert_eq!(
            refused("peer-transport-security:\n  allowed-cn: [a, b]\n"),
            "peer-transport-security.allowed-cn: actcd takes one name here (etcd 3.4's flag), not 2"
        );
        assert_eq!(
            refused("client-transport-security: on\n"),
            "client-transport-security: expected a map of TLS settings"
        );
        assert_eq!(refused("1: x\n"), "Integer(1) is not a key name");
    }
}
