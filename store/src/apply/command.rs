//! The write seam: every change to the store is a [`Command`] applied in order by the single
//! writer. Revisions are assigned when a command is applied, never before, so a replicated log
//! can sit in front of [`crate::apply::writer::StoreCore::apply`] and feed it the same commands.
//!
//! Callers do not build commands: they submit a request through [`WriteRequest`], which names
//! the response type each request gets back. The one place that turns a [`CommandResponse`]
//! back into that type is here, generated for each pair by the same macro that puts the request
//! in its command, so a service never matches on a response kind.

use actcd_proto::etcdserverpb::{
    AlarmRequest, AlarmResponse, AuthDisableRequest, AuthDisableResponse, AuthEnableRequest,
    AuthEnableResponse, AuthRoleAddRequest, AuthRoleAddResponse, AuthRoleDeleteRequest,
    AuthRoleDeleteResponse, AuthRoleGrantPermissionRequest, AuthRoleGrantPermissionResponse,
    AuthRoleRevokePermissionRequest, AuthRoleRevokePermissionResponse, AuthUserAddRequest,
    AuthUserAddResponse, AuthUserChangePasswordRequest, AuthUserChangePasswordResponse,
    AuthUserDeleteRequest, AuthUserDeleteResponse, AuthUserGrantRoleRequest, AuthUserGrantRoleResponse,
    AuthUserRevokeRoleRequest, AuthUserRevokeRoleResponse, AuthenticateResponse, CompactionRequest,
    CompactionResponse, DeleteRangeRequest, DeleteRangeResponse, LeaseGrantRequest, LeaseGrantResponse,
    LeaseRevokeRequest, LeaseRevokeResponse, PutRequest, PutResponse, ResponseHeader, TxnRequest,
    TxnResponse,
};
use prost::Message;

use crate::auth_store::caller::{Caller, RequestHeader};
use crate::error::StoreError;

/// A request the writer applies, and the response it answers with.
pub trait WriteRequest: Sized {
    /// What the writer answers.
    type Response;
    /// The command that carries this request.
    fn into_command(self) -> Command;
    /// The typed answer out of the writer's answer to [`WriteRequest::into_command`].
    fn response(answer: CommandResponse) -> Result<Self::Response, StoreError>;
    /// The writer's answer that carries `response`.
    fn answer(response: Self::Response) -> CommandResponse;
    /// The header of `response`: the writer sets its revision, the edge the member's identity.
    fn header_mut(response: &mut Self::Response) -> &mut Option<ResponseHeader>;
}

macro_rules! commands {
    ($($(#[$doc:meta])* $variant:ident($request:ty) -> $response:ty = $tag:literal,)*) => {
        /// A write request, as the client sent it (and, for a lease grant, with its ID chosen).
        #[derive(Debug, Clone, PartialEq)]
        pub enum Command {
            $($(#[$doc])* $variant($request),)*
            /// A client's command with the user it came from, checked again at apply.
            As(Box<Authorized>),
        }

        /// The answer to a [`Command`]; its header carries only the revision (the gRPC edge
        /// adds the rest).
        #[derive(Debug, Clone, PartialEq)]
        pub enum CommandResponse {
            $(#[doc = concat!("Answer to [`Command::", stringify!($variant), "`].")] $variant($response),)*
        }

        impl Command {
            /// The size of the request as the client marshalled it, for `--max-request-bytes`.
            pub fn encoded_len(&self) -> usize {
                match self {
                    $(Command::$variant(req) => req.encoded_len(),)*
                    Command::As(authorized) => authorized.command.encoded_len(),
                }
            }

            /// The command as it travels in a log entry: its tag, then the request in etcd's
            /// protobuf encoding (so the log holds exactly what the client sent).
            pub fn encode(&self) -> Vec<u8> {
                match self {
                    $(Command::$variant(req) => tagged($tag, req),)*
                    Command::As(authorized) => authorized.encode(),
                }
            }

            /// The command [`Command::encode`] wrote.
            pub fn decode(bytes: &[u8]) -> Result<Self, StoreError> {
                let (tag, body) = untag(bytes)?;
                match tag {
                    $($tag => Ok(Command::$variant(decode_body(body)?)),)*
                    AUTHORIZED_TAG => Authorized::decode(body).map(|a| Command::As(Box::new(a))),
                    other => Err(StoreError::Corrupt(format!("unknown command tag {other}"))),
                }
            }
        }

        impl CommandResponse {
            /// The answer as it travels between members: its command's tag, then the response
            /// in etcd's protobuf encoding.
            pub fn encode(&self) -> Vec<u8> {
                match self {
                    $(CommandResponse::$variant(resp) => tagged($tag, resp),)*
                }
            }

            /// The answer [`CommandResponse::encode`] wrote.
            pub fn decode(bytes: &[u8]) -> Result<Self, StoreError> {
                let (tag, body) = untag(bytes)?;
                match tag {
                    $($tag => Ok(CommandResponse::$variant(decode_body(body)?)),)*
                    other => Err(StoreError::Corrupt(format!("unknown response tag {other}"))),
                }
            }
        }

        $(impl WriteRequest for $request {
            type Response = $response;

            fn into_command(self) -> Command {
                Command::$variant(self)
            }

            fn response(answer: CommandResponse) -> Result<$response, StoreError> {
                match answer {
                    CommandResponse::$variant(resp) => Ok(resp),
                    #[allow(unreachable_patterns)]
                    other => Err(StoreError::WrongAnswer(format!("{other:?}"))),
                }
            }

            fn answer(response: $response) -> CommandResponse {
                CommandResponse::$variant(response)
            }

            fn header_mut(response: &mut $response) -> &mut Option<ResponseHeader> {
                &mut response.header
            }
        })*
    };
}

// The tags are written into the Raft log: never reuse or renumber one.
commands! {
    /// KV.Put.
    Put(PutRequest) -> PutResponse = 1,
    /// KV.DeleteRange.
    DeleteRange(DeleteRangeRequest) -> DeleteRangeResponse = 2,
    /// KV.Txn with at least one write op (read-only txns are served from the read view).
    Txn(TxnRequest) -> TxnResponse = 3,
    /// KV.Compact.
    Compact(CompactionRequest) -> CompactionResponse = 4,
    /// Lease.LeaseGrant, its ID already chosen (non-zero) by the caller.
    LeaseGrant(LeaseGrantRequest) -> LeaseGrantResponse = 5,
    /// Lease.LeaseRevoke, or a lease's expiry: its keys are deleted in one revision.
    LeaseRevoke(LeaseRevokeRequest) -> LeaseRevokeResponse = 6,
    /// Maintenance.Alarm: raise or clear an alarm (a GET is served from the read view).
    Alarm(AlarmRequest) -> AlarmResponse = 7,
    /// Auth.AuthEnable.
    AuthEnable(AuthEnableRequest) -> AuthEnableResponse = 8,
    /// Auth.AuthDisable.
    AuthDisable(AuthDisableRequest) -> AuthDisableResponse = 9,
    /// Auth.Authenticate, the password checked and the simple token chosen by the edge.
    Authenticate(AuthenticateCommand) -> AuthenticateResponse = 10,
    /// Auth.UserAdd, the password already a bcrypt hash (`hashedPassword`; `password` empty).
    UserAdd(AuthUserAddRequest) -> AuthUserAddResponse = 11,
    /// Auth.UserDelete.
    UserDelete(AuthUserDeleteRequest) -> AuthUserDeleteResponse = 12,
    /// Auth.UserChangePassword, hashed as for UserAdd.
    UserChangePassword(AuthUserChangePasswordRequest) -> AuthUserChangePasswordResponse = 13,
    /// Auth.UserGrantRole.
    UserGrantRole(AuthUserGrantRoleRequest) -> AuthUserGrantRoleResponse = 14,
    /// Auth.UserRevokeRole.
    UserRevokeRole(AuthUserRevokeRoleRequest) -> AuthUserRevokeRoleResponse = 15,
    /// Auth.RoleAdd.
    RoleAdd(AuthRoleAddRequest) -> AuthRoleAddResponse = 16,
    /// Auth.RoleDelete.
    RoleDelete(AuthRoleDeleteRequest) -> AuthRoleDeleteResponse = 17,
    /// Auth.RoleGrantPermission.
    RoleGrantPermission(AuthRoleGrantPermissionRequest) -> AuthRoleGrantPermissionResponse = 18,
    /// Auth.RoleRevokePermission.
    RoleRevokePermission(AuthRoleRevokePermissionRequest) -> AuthRoleRevokePermissionResponse = 19,
}

/// The tag of [`Command::As`]: the header, length-delimited, then the command as it is encoded
/// alone.
const AUTHORIZED_TAG: u8 = 0;

/// A command and the client it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Authorized {
    /// Who sent it.
    pub caller: Caller,
    /// What it asks (never itself [`Command::As`]).
    pub command: Command,
}

impl Command {
    /// `self`, sent by `caller`.
    pub fn from_caller(self, caller: Caller) -> Command {
        Command::As(Box::new(Authorized { caller, command: self }))
    }

    /// The command and its sender: [`Caller::anonymous`] for a command sent without one
    /// (auth was disabled where it entered).
    pub fn caller(&self) -> (Option<&Caller>, &Command) {
        match self {
            Command::As(authorized) => (Some(&authorized.caller), &authorized.command),
            other => (None, other),
        }
    }
}

impl Authorized {
    fn encode(&self) -> Vec<u8> {
        let header = RequestHeader::from(&self.caller);
        let inner = self.command.encode();
        let mut bytes = Vec::with_capacity(1 + header.encoded_len() + 2 + inner.len());
        bytes.push(AUTHORIZED_TAG);
        // Writing into a Vec cannot run out of room.
        let _ = header.encode_length_delimited(&mut bytes);
        bytes.extend_from_slice(&inner);
        bytes
    }

    fn decode(mut body: &[u8]) -> Result<Self, StoreError> {
        let header = RequestHeader::decode_length_delimited(&mut body)
            .map_err(|e| StoreError::Corrupt(format!("undecodable request header: {e}")))?;
        let command = Command::decode(body)?;
        if matches!(command, Command::As(_)) {
            return Err(StoreError::Corrupt("a request header inside a request header".into()));
        }
        Ok(Authorized { caller: header.into(), command })
    }
}

/// Authenticate as the log carries it: the fields of etcd's `InternalAuthenticateRequest` that
/// apply needs (the password was checked before proposing and is not logged).
#[derive(Clone, PartialEq, prost::Message)]
pub struct AuthenticateCommand {
    /// The user.
    #[prost(string, tag = "1")]
    pub name: String,
    /// The token every member records for the user (empty for JWT, which no member records).
    #[prost(string, tag = "3")]
    pub simple_token: String,
}

fn tagged(tag: u8, message: &impl Message) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(1 + message.encoded_len());
    bytes.push(tag);
    // Writing into a Vec cannot run out of room.
    let _ = message.encode(&mut bytes);
    bytes
}

fn untag(bytes: &[u8]) -> Result<(u8, &[u8]), StoreError> {
    bytes
        .split_first()
        .map(|(tag, body)| (*tag, body))
        .ok_or_else(|| StoreError::Corrupt("empty command".into()))
}

fn decode_body<M: Message + Default>(body: &[u8]) -> Result<M, StoreError> {
    M::decode(body).map_err(|e| StoreError::Corrupt(format!("undecodable command: {e}")))
}
