//! Why the auth store refused a request: each is one of etcd's auth errors (rpctypes), whose
//! gRPC code and text `actcd_proto::errors` owns. They travel between members inside a
//! command's answer, hence serde.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// A refusal by the auth store, named as etcd names it.
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AuthError {
    /// AuthEnable without a user named root.
    #[error("root user does not exist")]
    RootUserNotExist,
    /// AuthEnable while the root user lacks the root role.
    #[error("root user does not have root role")]
    RootRoleNotExist,
    /// UserAdd of a name that is taken.
    #[error("user name already exists")]
    UserAlreadyExist,
    /// A request that needs a user came without one (no token, or a user add without a name).
    #[error("user name is empty")]
    UserEmpty,
    /// The named user does not exist.
    #[error("user name not found")]
    UserNotFound,
    /// RoleAdd of a name that is taken.
    #[error("role name already exists")]
    RoleAlreadyExist,
    /// The named role does not exist.
    #[error("role name not found")]
    RoleNotFound,
    /// RoleAdd without a name.
    #[error("role name is empty")]
    RoleEmpty,
    /// Authenticate with an unknown user or a wrong password.
    #[error("authentication failed, invalid user ID or password")]
    AuthFailed,
    /// The user's roles do not grant what the request needs.
    #[error("permission denied")]
    PermissionDenied,
    /// UserRevokeRole of a role the user does not hold.
    #[error("role is not granted to the user")]
    RoleNotGranted,
    /// RoleGrantPermission without a permission.
    #[error("permission not given")]
    PermissionNotGiven,
    /// RoleRevokePermission of a permission the role does not hold.
    #[error("permission is not granted to the role")]
    PermissionNotGranted,
    /// An auth request that needs auth enabled (Authenticate) while it is disabled.
    #[error("authentication is not enabled")]
    NotEnabled,
    /// Authenticate of a user added without a password (it signs in by certificate only).
    #[error("authentication failed, password was given for no password user")]
    NoPasswordUser,
    /// Authenticate on a member whose JWT key can only verify.
    #[error("token signing attempted with verify-only key")]
    VerifyOnlyKey,
    /// A token that is unknown, expired or badly signed.
    #[error("invalid auth token")]
    InvalidToken,
    /// Removing the root user or its root role while auth is enabled.
    #[error("invalid auth management")]
    InvalidAuthMgmt,
    /// The request was checked against auth state that changed before it was applied.
    #[error("revision of auth store is old")]
    OldRevision,
}
