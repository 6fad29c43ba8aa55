//! One set of etcd's TLS flags, declared once for both sets: the client URLs' (`--cert-file`
//! ...) and the peer URLs' (`--peer-cert-file` ...) differ only in their names and help, which
//! [`FlagNames`] and the help lines here give.

use std::ops::Deref;
use std::path::PathBuf;

use clap::{value_parser, Arg, ArgMatches, Args, Command, FromArgMatches};

use crate::config::go_bool::GoBool;
use crate::tls::{FlagNames, TlsFlags, CLIENT_FLAGS, PEER_FLAGS};

/// A set's names, and the help and value name (as clap's derive names it) of its flags, in
/// [`TlsGroup`]'s field order.
struct Declared {
    names: &'static FlagNames,
    help: [(&'static str, &'static str); 6],
}

static CLIENT_DECLARED: Declared = Declared {
    names: &CLIENT_FLAGS,
    help: [
        ("Path to the client server TLS cert file", "CERT_FILE"),
        ("Path to the client server TLS key file", "KEY_FILE"),
        ("Path to the client server TLS trusted CA cert file", "TRUSTED_CA_FILE"),
        ("Enable client cert authentication", "CLIENT_CERT_AUTH"),
        ("Path to the client certificate revocation list file", "CLIENT_CRL_FILE"),
        ("Client TLS using generated certificates", "AUTO_TLS"),
    ],
};

static PEER_DECLARED: Declared = Declared {
    names: &PEER_FLAGS,
    help: [
        ("Path to the peer server TLS cert file", "PEER_CERT_FILE"),
        ("Path to the peer server TLS key file", "PEER_KEY_FILE"),
        ("Path to the peer server TLS trusted CA file", "PEER_TRUSTED_CA_FILE"),
        ("Enable peer client cert authentication", "PEER_CLIENT_CERT_AUTH"),
        ("Path to the peer certificate revocation list file", "PEER_CRL_FILE"),
        ("Peer TLS using self-generated certificates if --peer-key-file and --peer-cert-file are not provided", "PEER_AUTO_TLS"),
    ],
};

/// One set of TLS flags: the peer URLs' when `PEER`, else the client URLs'. It holds the
/// set's own six flags (read through `Deref`); the cipher suites and versions both sets share,
/// and the peers' allowed name, come with [`TlsGroup::flags`].
#[derive(Debug, Clone)]
pub struct TlsGroup<const PEER: bool>(TlsFlags);

/// The client URLs' TLS flags.
pub type ClientTls = TlsGroup<false>;
/// The peer URLs' TLS flags.
pub type PeerTls = TlsGroup<true>;

impl<const PEER: bool> TlsGroup<PEER> {
    fn declared() -> &'static Declared {
        if PEER {
            &PEER_DECLARED
        } else {
            &CLIENT_DECLARED
        }
    }

    /// The set's flag names.
    pub fn names() -> &'static FlagNames {
        Self::declared().names
    }

    /// These flags with `shared`'s cipher suites, versions and allowed name.
    pub fn flags(&self, shared: TlsFlags) -> TlsFlags {
        let TlsFlags { allowed_name, cipher_suites, min_version, max_version, .. } = shared;
        TlsFlags { allowed_name, cipher_suites, min_version, max_version, ..self.0.clone() }
    }
}

impl<const PEER: bool> Deref for TlsGroup<PEER> {
    type Target = TlsFlags;

    fn deref(&self) -> &TlsFlags {
        &self.0
    }
}

/// A flag's id: its long name.
fn long(flag: &'static str) -> &'static str {
    flag.trim_start_matches("--")
}

/// A flag's argument, with its help and value name.
fn arg(flag: &'static str, (help, value): (&'static str, &'static str)) -> Arg {
    Arg::new(long(flag)).long(long(flag)).value_name(value).help(help)
}

/// A file flag's argument.
fn file(flag: &'static str, help: (&'static str, &'static str)) -> Arg {
    arg(flag, help).value_parser(value_parser!(PathBuf))
}

/// A switch's argument.
fn switch(flag: &'static str, help: (&'static str, &'static str)) -> Arg {
    arg(flag, help).go_bool(false)
}

impl<const PEER: bool> Args for TlsGroup<PEER> {
    fn augment_args(command: Command) -> Command {
        let Declared { names, help } = Self::declared();
        command
            .arg(file(names.cert_file, help[0]))
            .arg(file(names.key_file, help[1]))
            .arg(file(names.trusted_ca_file, help[2]))
            .arg(switch(names.client_cert_auth, help[3]))
            .arg(file(names.crl_file, help[4]))
            .arg(switch(names.auto_tls, help[5]))
    }

    fn augment_args_for_update(command: Command) -> Command {
        Self::augment_args(command)
    }
}

impl<const PEER: bool> FromArgMatches for TlsGroup<PEER> {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let names = Self::names();
        let file = |flag| matches.get_one::<PathBuf>(long(flag)).cloned();
        let switch = |flag| matches.get_one::<bool>(long(flag)).copied().unwrap_or(false);
        Ok(Self(TlsFlags {
            names,
            cert_file: file(names.cert_file),
            key_file: file(names.key_file),
            trusted_ca_file: file(names.trusted_ca_file),
            client_cert_auth: switch(names.client_cert_auth),
            crl_file: file(names.crl_file),
            auto_tls: switch(names.auto_tls),
            ..TlsFlags::default()
        }))
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use clap::{Args, Command, FromArgMatches};

    use super::{ClientTls, PeerTls};
    use crate::tls::TlsFlags;

    /// Both sets on one command line, as the Config declares them.
    fn both(args: &[&str]) -> (ClientTls, PeerTls) {
        let command = PeerTls::augment_args(ClientTls::augment_args(Command::new("t")));
        let matches = command.try_get_matches_from(std::iter::once("t").chain(args.iter().copied())).unwrap();
        (ClientTls::from_arg_matches(&matches).unwrap(), PeerTls::from_arg_matches(&matches).unwrap())
    }

    #[test]
    fn the_two_sets_read_only_their_own_flags() {
        let (client, peer) =
            both(&["--cert-file=c", "--peer-cert-file=p", "--peer-crl-file=crl", "--auto-tls"]);
        assert_eq!(client.cert_file.as_deref(), Some(Path::new("c")));
        assert_eq!(peer.cert_file.as_deref(), Some(Path::new("p")));
        assert!(client.crl_file.is_none() && peer.crl_file.as_deref() == Some(Path::new("crl")));
        assert!(client.auto_tls && !peer.auto_tls);
        assert_eq!(client.names.cert_file, "--cert-file");
        assert_eq!(peer.names.cert_file, "--peer-cert-file");
    }

    /// A set's own flags, with what the sets share taken from `shared`.
    #[test]
    fn a_set_takes_the_shared_flags_and_keeps_its_own() {
        let (client, _) = both(&["--key-file=k", "--client-cert-auth"]);
        let shared = TlsFlags {
            cipher_suites: vec!["S".into()],
            max_version: Some("TLS1.2".into()),
            key_file: Some("not-this".into()),
            ..TlsFlags::default()
        };
        let flags = client.flags(shared);
        assert_eq!(flags.cipher_suites, ["S"]);
        assert_eq!(flags.max_version.as_deref(), Some("TLS1.2"));
        assert_eq!(flags.key_file.as_deref(), Some(Path::new("k")));
        assert!(flags.client_cert_auth);
    }
}
