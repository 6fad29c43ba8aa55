//! The auth commands as the writer applies them: each changes the auth state through its own
//! rule ([`crate::auth_store::AuthState`]), writes the records into the batch, and leaves the new
//! state for the commit to publish, so readers and token checks see it once it is durable.

use actcd_proto::etcdserverpb::{AuthenticateResponse, ResponseHeader};

use crate::apply::command::{AuthenticateCommand, Command, CommandResponse, WriteRequest};
use crate::apply::writer::StoreCore;
use crate::auth_store::{AuthError, Caller};
use crate::backend::engine::Engine;
use crate::error::StoreError;
use crate::mvcc::batch::{Batch, TokenChange};

impl<E: Engine> StoreCore<E> {
    /// Applies `command` if it is an auth command; `None` for any other.
    pub(crate) fn apply_auth(
        &mut self,
        caller: &Caller,
        command: &Command,
        batch: &mut Batch,
    ) -> Option<Result<CommandResponse, StoreError>> {
        let header = Some(ResponseHeader { revision: self.current, ..Default::default() });
        let writes = &mut batch.writes;
        let auth = &mut self.auth;
        let answer = match command {
            Command::AuthEnable(req) => done(req, header, auth.enable(writes)),
            Command::AuthDisable(req) => {
                auth.disable(writes);
                batch.tokens.push(TokenChange::AllVoid);
                done(req, header, Ok(()))
            }
            Command::Authenticate(req) => authenticate(auth, caller, req, &mut batch.tokens)
                .map(|token| CommandResponse::Authenticate(AuthenticateResponse { header, token })),
            Command::UserAdd(req) => done(req, header, auth.user_add(req, writes)),
            Command::UserDelete(req) => {
                let made = auth.user_delete(&req.name, writes);
                void_tokens(&made, &req.name, &mut batch.tokens);
                done(req, header, made)
            }
            Command::UserChangePassword(req) => {
                let made = auth.user_change_password(req, writes);
                void_tokens(&made, &req.name, &mut batch.tokens);
                done(req, header, made)
            }
            Command::UserGrantRole(req) => done(req, header, auth.user_grant_role(req, writes)),
            Command::UserRevokeRole(req) => done(req, header, auth.user_revoke_role(req, writes)),
            Command::RoleAdd(req) => done(req, header, auth.role_add(&req.name, writes)),
            Command::RoleDelete(req) => done(req, header, auth.role_delete(&req.role, writes)),
            Command::RoleGrantPermission(req) => done(req, header, auth.role_grant_permission(req, writes)),
            Command::RoleRevokePermission(req) => done(req, header, auth.role_revoke_permission(req, writes)),
            _ => return None,
        };
        if answer.is_ok() {
            batch.auth = Some(self.auth.clone());
        }
        Some(answer.map_err(StoreError::from))
    }
}

/// The answer to `_request` once its change is `made`: a response with the header alone.
fn done<R: WriteRequest>(
    _request: &R,
    header: Option<ResponseHeader>,
    made: Result<(), AuthError>,
) -> Result<CommandResponse, AuthError>
where
    R::Response: Default,
{
    made.map(|()| {
        let mut response = R::Response::default();
        *R::header_mut(&mut response) = header;
        R::answer(response)
    })
}

/// A user's tokens end once its password changed or it went.
fn void_tokens(made: &Result<(), AuthError>, user: &str, tokens: &mut Vec<TokenChange>) {
    if made.is_ok() {
        tokens.push(TokenChange::UserVoid(user.to_string()));
    }
}

/// Authenticate at apply: the edge checked the password at some auth revision; if the state
/// changed since (a password changed, the user went), the check is void and the edge asks again.
fn authenticate(
    auth: &crate::auth_store::AuthState,
    caller: &Caller,
    req: &AuthenticateCommand,
    tokens: &mut Vec<TokenChange>,
) -> Result<String, AuthError> {
    if !auth.enabled() {
        return Err(AuthError::NotEnabled);
    }
    if auth.user(&req.name).is_none() {
        return Err(AuthError::AuthFailed);
    }
    match caller {
        Caller::User { auth_revision, .. } if *auth_revision == auth.revision() => {}
        _ => return Err(AuthError::OldRevision),
    }
    if !req.simple_token.is_empty() {
        tokens.push(TokenChange::Issued { token: req.simple_token.clone(), user: req.name.clone() });
    }
    Ok(req.simple_token.clone())
}

#[cfg(test)]
mod tests {
    use actcd_proto::authpb::permission::Type as PermType;
    use actcd_proto::authpb::Permission;
    use actcd_proto::etcdserverpb::{
        request_op, AuthEnableRequest, AuthRoleAddRequest, AuthRoleGrantPermissionRequest,
        AuthRoleRevokePermissionRequest, AuthUserAddRequest, AuthUserGrantRoleRequest, CompactionRequest,
        PutRequest, RangeRequest, RequestOp, TxnRequest,
    };

    use super::*;
    use crate::apply::writer::StoreConfig;
    use crate::backend::memory::MemoryEngine;

    fn user(name: &str, rev: u64) -> Caller {
        Caller::User { name: name.into(), auth_revision: rev }
    }

    /// Applies `command` as `caller` in a batch of its own and commits it.
    fn apply(
        core: &mut StoreCore<MemoryEngine>,
        caller: Caller,
        command: Command,
    ) -> Result<CommandResponse, StoreError> {
        let mut batch = Batch::default();
        let answer = core.apply(&command.from_caller(caller), &mut batch);
        core.commit_by_log(batch, core.applied_index() + 1).expect("commits");
        answer
    }

    fn put(key: &str) -> Command {
        Command::Put(PutRequest { key: key.to_string().into(), value: "v".into(), ..Default::default() })
    }

    /// Root, and alice with READWRITE on prefix `a/`; auth enabled. Returns the auth revision.
    fn setup(core: &mut StoreCore<MemoryEngine>) -> u64 {
        let anyone = Caller::anonymous();
        let add = |name: &str| {
            Command::UserAdd(AuthUserAddRequest {
                name: name.into(),
                hashed_password: "$2a$04$x".into(),
                ..Default::default()
            })
        };
        for command in [
            add("root"),
            add("alice"),
            Command::UserGrantRole(AuthUserGrantRoleRequest { user: "root".into(), role: "root".into() }),
            Command::RoleAdd(AuthRoleAddRequest { name: "r".into() }),
            Command::RoleGrantPermission(AuthRoleGrantPermissionRequest {
                name: "r".into(),
                perm: Some(Permission {
                    perm_type: PermType::Readwrite as i32,
                    key: "a/".into(),
                    range_end: "a0".into(),
                }),
            }),
            Command::UserGrantRole(AuthUserGrantRoleRequest { user: "alice".into(), role: "r".into() }),
        ] {
            apply(core, anyone.clone(), command).expect("set up while auth is disabled");
        }
        let before = core.auth.revision();
        apply(core, anyone, Command::AuthEnable(AuthEnableRequest {})).expect("root exists with its role");
        assert_eq!(core.auth.revision(), before, "enabling leaves the revision as it is, as on etcd");
        before
    }

    #[test]
    fn apply_checks_each_write_against_the_auth_state_of_its_place_in_the_log() {
        let mut core = StoreCore::open(MemoryEngine::new(), StoreConfig::default()).expect("opens");
        let rev = setup(&mut core);
        apply(&mut core, user("alice", rev), put("a/1")).expect("inside alice's prefix");
        let denied = apply(&mut core, user("alice", rev), put("b"));
        assert_eq!(denied, Err(StoreError::Auth(AuthError::PermissionDenied)));
        assert_eq!(
            apply(&mut core, Caller::anonymous(), put("a/2")),
            Err(StoreError::Auth(AuthError::UserEmpty))
        );
        apply(&mut core, user("root", rev), put("b")).expect("root may write anything");

        // A txn is checked op by op, both branches and nested txns, whatever its outcome.
        let nested = TxnRequest {
            success: vec![RequestOp {
                request: Some(request_op::Request::RequestTxn(TxnRequest {
                    failure: vec![RequestOp {
                        request: Some(request_op::Request::RequestPut(PutRequest {
                            key: "secret".into(),
                            ..Default::default()
                        })),
                    }],
                    ..Default::default()
                })),
            }],
            ..Default::default()
        };
        let txn = apply(&mut core, user("alice", rev), Command::Txn(nested));
        assert_eq!(
            txn,
            Err(StoreError::Auth(AuthError::PermissionDenied)),
            "the nested branch that would not run"
        );
        let read_secret = TxnRequest {
            failure: vec![RequestOp {
                request: Some(request_op::Request::RequestRange(RangeRequest {
                    key: "secret".into(),
                    ..Default::default()
                })),
            }],
            success: vec![RequestOp {
                request: Some(request_op::Request::RequestPut(PutRequest {
                    key: "a/3".into(),
                    ..Default::default()
                })),
            }],
            ..Default::default()
        };
        assert_eq!(
            apply(&mut core, user("alice", rev), Command::Txn(read_secret)),
            Err(StoreError::Auth(AuthError::PermissionDenied))
        );

        // A revoke lands between two of alice's writes that the edge checked at `rev`: the
        // second is refused at apply, because the auth state moved on.
        let revoke = Command::RoleRevokePermission(AuthRoleRevokePermissionRequest {
            role: "r".into(),
            key: "a/".into(),
            range_end: "a0".into(),
        });
        apply(&mut core, user("root", rev), revoke).expect("root revokes");
        assert_eq!(
            apply(&mut core, user("alice", rev), put("a/4")),
            Err(StoreError::Auth(AuthError::OldRevision)),
            "checked at the edge before the revoke"
        );
        let now = core.auth.revision();
        assert_eq!(
            apply(&mut core, user("alice", now), put("a/4")),
            Err(StoreError::Auth(AuthError::PermissionDenied)),
            "checked again after it"
        );
        assert_eq!(
            apply(
                &mut core,
                user("alice", now),
                Command::Compact(CompactionRequest { revision: 1, physical: false })
            ),
            Err(StoreError::Auth(AuthError::PermissionDenied)),
            "compaction needs root"
        );
    }

    #[test]
    fn auth_rules_refuse_what_etcd_refuses_and_the_state_survives_a_reopen() {
        let engine = MemoryEngine::new();
        let mut core = StoreCore::open(engine.clone(), StoreConfig::default()).expect("opens");
        let anyone = Caller::anonymous();
        assert_eq!(
            apply(&mut core, anyone.clone(), Command::AuthEnable(AuthEnableRequest {})),
            Err(StoreError::Auth(AuthError::RootUserNotExist))
        );
        let rev = setup(&mut core);
        let root = user("root", rev);
        let cases = [
            (
                Command::UserAdd(AuthUserAddRequest { name: "alice".into(), ..Default::default() }),
                AuthError::UserAlreadyExist,
            ),
            (Command::RoleAdd(AuthRoleAddRequest { name: "r".into() }), AuthError::RoleAlreadyExist),
            (
                Command::UserGrantRole(AuthUserGrantRoleRequest {
                    user: "alice".into(),
                    role: "nope".into(),
                }),
                AuthError::RoleNotFound,
            ),
            (
                Command::UserDelete(actcd_proto::etcdserverpb::AuthUserDeleteRequest { name: "root".into() }),
                AuthError::InvalidAuthMgmt,
            ),
            (
                Command::RoleGrantPermission(AuthRoleGrantPermissionRequest { name: "r".into(), perm: None }),
                AuthError::PermissionNotGiven,
            ),
            (
                Command::RoleGrantPermission(AuthRoleGrantPermissionRequest {
                    name: "r".into(),
                    perm: Some(Permission { perm_type: 0, key: "z".into(), range_end: "a".into() }),
                }),
                AuthError::InvalidAuthMgmt,
            ),
            (
                Command::RoleRevokePermission(AuthRoleRevokePermissionRequest {
                    role: "r".into(),
                    key: "a/".into(),
                    range_end: "".into(),
                }),
                AuthError::PermissionNotGranted,
            ),
        ];
        for (command, refusal) in cases {
            let before = core.auth.revision();
            assert_eq!(apply(&mut core, root.clone(), command), Err(StoreError::Auth(refusal)));
            assert_eq!(core.auth.revision(), before, "a refusal bumps nothing");
        }
        assert_eq!(
            apply(&mut core, user("alice", rev), Command::RoleAdd(AuthRoleAddRequest { name: "x".into() })),
            Err(StoreError::Auth(AuthError::PermissionDenied)),
            "management needs root"
        );
        drop(core);
        let reopened = StoreCore::open(engine, StoreConfig::default()).expect("reopens");
        let auth = reopened.read_view().auth().expect("readable");
        assert!(auth.enabled());
        assert_eq!(auth.revision(), rev);
        assert_eq!(auth.user_names(), vec!["alice".to_string(), "root".to_string()]);
        assert_eq!(auth.user("alice").map(|u| u.roles.clone()), Some(vec!["r".to_string()]));
        assert_eq!(auth.role("r").map(|r| r.key_permission.len()), Some(1));
    }
}
