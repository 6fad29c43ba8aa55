//! Who sent a request, and whether the auth state lets them: the one place the gRPC edge reads
//! a token. While auth is disabled nobody is asked anything and writes travel bare; once it is
//! enabled, a request's `token` metadata (clientv3 sends it with every call; etcd 3.5's gateway
//! sends `authorization`) names its user, and a request without one is the empty user, whom
//! every check refuses with etcd's "user name is empty".
//!
//! The edge checks before it proposes, so a refused write costs no log entry; the command then
//! carries the user and the auth revision of that check, and apply checks again at its point
//! in the log (a permission revoked in between takes effect, as on etcd).

use std::sync::Arc;
use std::time::Instant;

use tonic::metadata::MetadataMap;
use tonic::{Request, Status};

use actcd_edge::status::{auth_status, to_status};
use actcd_proto::etcdserverpb::TxnRequest;
use actcd_store::auth_store::needs::{check_command, check_read_only_txn, check_renewal, LeaseKeys};
use actcd_store::auth_store::{AuthError, AuthState, Caller, Need};
use actcd_store::{Command, ReadView, RocksEngine, StoreError};

use crate::grpc::tokens::Tokens;
use crate::transport::connections::ConnInfo;

/// The metadata keys a token arrives under.
const TOKEN_KEYS: [&str; 2] = ["token", "authorization"];

/// The token in a request's metadata, if any.
pub fn token(metadata: &MetadataMap) -> Option<&str> {
    TOKEN_KEYS.iter().find_map(|key| metadata.get(*key)).and_then(|v| v.to_str().ok())
}

/// The Common Name of the request's client certificate, unless the request came through a
/// gRPC gateway (which presents the server's own certificate: etcd ignores it then).
pub fn common_name<T>(request: &Request<T>) -> Option<&str> {
    common_name_of(request.metadata(), request.extensions())
}

/// [`common_name`] from a request's parts.
pub fn common_name_of<'a>(metadata: &MetadataMap, extensions: &'a tonic::Extensions) -> Option<&'a str> {
    if metadata.contains_key("grpcgateway-accept") {
        return None;
    }
    extensions.get::<ConnInfo>()?.common_name.as_deref()
}

/// A request's sender, identified against one auth state.
pub struct Who {
    auth: Arc<AuthState>,
    sender: Sender,
}

enum Sender {
    /// Auth is disabled: nobody is asked anything, and a token is ignored (etcd 3.4.28 on).
    Anyone,
    /// The user a token named, or the empty user without one.
    Known(Caller),
    /// A token this member does not know (expired, forgotten at a restart, or made up).
    BadToken,
}

impl Who {
    /// Identifies the sender of a request with `metadata`.
    pub fn of<T>(view: &ReadView<RocksEngine>, tokens: &Tokens, request: &Request<T>) -> Result<Who, Status> {
        Self::with_token(view, tokens, token(request.metadata()), common_name(request)).map_err(to_status)
    }

    /// Identifies the sender of a request that came with `token` (or none) over a connection
    /// whose client certificate names `common_name`. A simple token names its user at the
    /// current auth revision, a JWT at the revision it was signed at; without a token, the
    /// certificate's Common Name is the user (a token, valid or not, wins, as on etcd).
    pub fn with_token(
        view: &ReadView<RocksEngine>,
        tokens: &Tokens,
        token: Option<&str>,
        common_name: Option<&str>,
    ) -> Result<Who, StoreError> {
        let auth = view.auth()?;
        let known = |name, auth_revision| Sender::Known(Caller::User { name, auth_revision });
        let sender = match (token, tokens) {
            _ if !auth.enabled() => Sender::Anyone,
            (Some(token), Tokens::Simple) => match view.token_user(token, Instant::now())? {
                Some(name) => known(name, auth.revision()),
                None => Sender::BadToken,
            },
            (Some(token), Tokens::Jwt(jwt)) => match jwt.verify(token) {
                Some((name, revision)) => known(name, revision),
                None => Sender::BadToken,
            },
            (None, _) => match common_name {
                Some(name) => known(name.to_string(), auth.revision()),
                None => Sender::Known(Caller::anonymous()),
            },
        };
        Ok(Who { auth, sender })
    }

    /// Whether the sender has `need` (anything goes while auth is disabled).
    pub fn check(&self, need: Need<'_>) -> Result<(), AuthError> {
        match &self.sender {
            Sender::Anyone | Sender::Known(Caller::Member) => Ok(()),
            Sender::Known(Caller::User { name, auth_revision }) => {
                self.auth.check(name, *auth_revision, need)
            }
            Sender::BadToken => Err(AuthError::InvalidToken),
        }
    }

    /// [`Who::check`], refused with etcd's status.
    pub fn need(&self, need: Need<'_>) -> Result<(), Status> {
        self.check(need).map_err(auth_status)
    }

    /// `command` as the log carries it from this sender, once the edge has checked it.
    pub fn command(&self, command: Command, lease_keys: &LeaseKeys<'_>) -> Result<Command, StoreError> {
        match &self.sender {
            Sender::Anyone => Ok(command),
            Sender::Known(caller) => {
                check_command(&self.auth, caller, &command, lease_keys)?;
                Ok(command.from_caller(caller.clone()))
            }
            Sender::BadToken => Err(AuthError::InvalidToken.into()),
        }
    }

    /// The auth revision the sender was identified at: zero while auth is disabled, or when
    /// the token was bad (the check refused it already).
    pub fn checked_at(&self) -> u64 {
        match &self.sender {
            Sender::Known(Caller::User { auth_revision, .. }) => *auth_revision,
            _ => 0,
        }
    }

    /// etcd's doSerialize: an answer read from this member's view after the check is
    /// refused with "revision of auth store is old" if the auth state moved meanwhile.
    pub fn still_current(&self, view: &ReadView<RocksEngine>) -> Result<(), Status> {
        let checked_at = self.checked_at();
        if checked_at == 0 {
            // Nobody was checked (auth disabled): no lock to take on the read path.
            return Ok(());
        }
        let auth = view.auth().map_err(to_status)?;
        auth.unchanged_since(checked_at).map_err(auth_status)
    }

    /// Whether the sender may renew lease `id` (a user with WRITE on every key it holds).
    pub fn renewal(&self, id: i64, lease_keys: &LeaseKeys<'_>) -> Result<(), AuthError> {
        match &self.sender {
            Sender::Anyone => Ok(()),
            Sender::Known(caller) => check_renewal(&self.auth, caller, id, lease_keys),
            Sender::BadToken => Err(AuthError::InvalidToken),
        }
    }

    /// Refuses a read-only txn unless its sender may read everything it reads.
    pub fn read_only_txn(&self, req: &TxnRequest) -> Result<(), Status> {
        let checked = match &self.sender {
            Sender::Anyone => Ok(()),
            Sender::Known(caller) => check_read_only_txn(&self.auth, caller, req),
            Sender::BadToken => Err(AuthError::InvalidToken),
        };
        checked.map_err(auth_status)
    }

    /// Whether the request came with a token this member does not know.
    pub fn bad_token(&self) -> bool {
        matches!(self.sender, Sender::BadToken)
    }

    /// The user's name, when auth is enabled and the request named one.
    pub fn user(&self) -> Option<&str> {
        match &self.sender {
            Sender::Known(Caller::User { name, .. }) if !name.is_empty() => Some(name),
            _ => None,
        }
    }

    /// The auth state the sender was identified against.
    pub fn auth(&self) -> &AuthState {
        &self.auth
    }
}
