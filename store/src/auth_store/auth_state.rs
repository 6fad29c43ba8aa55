//! The auth store (etcd's `auth` package): whether auth is enabled, its revision, the users and
//! the roles. It is state machine state like the keys: every change is a command applied in log
//! order, written into the batch that makes it durable (meta records under `auth/`), and
//! readers see it with that batch. The revision rises with every change, so a request checked
//! at the edge against an older state is refused at apply ([`AuthError::OldRevision`]).
//!
//! Records (family Meta): `auth/enabled` one byte; `auth/revision` u64 BE; `auth/user/NAME`
//! an `authpb.User` (its password a bcrypt hash, never the password); `auth/role/NAME` an
//! `authpb.Role`, its permissions sorted by key as etcd keeps them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use actcd_proto::authpb::{Permission, Role, User, UserAddOptions};
use actcd_proto::etcdserverpb::{
    AuthRoleGrantPermissionRequest, AuthRoleRevokePermissionRequest, AuthUserAddRequest,
    AuthUserChangePasswordRequest, AuthUserGrantRoleRequest, AuthUserRevokeRoleRequest,
};
use actcd_proto::key_range::KeyRange;
use prost::Message;

use crate::auth_store::error::AuthError;
use crate::auth_store::permissions::{Access, UserPermissions};
use crate::backend::engine::{Engine, Family, WriteSet};
use crate::StoreError;

/// The user and the role that may do everything.
pub const ROOT: &str = "root";

/// The meta record saying whether auth is enabled: one byte, 1 or 0 (etcd's `authEnabled`).
pub const ENABLED_KEY: &[u8] = b"auth/enabled";
/// The meta record of the auth revision, u64 big-endian (etcd's `authRevision`).
pub const REVISION_KEY: &[u8] = b"auth/revision";
/// Before a user's name: its `authpb.User` (etcd's `authUsers` bucket).
pub const USER_PREFIX: &[u8] = b"auth/user/";
/// Before a role's name: its `authpb.Role` (etcd's `authRoles` bucket).
pub const ROLE_PREFIX: &[u8] = b"auth/role/";

/// What a request needs of its user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need<'a> {
    /// Any user that exists (a valid token).
    User,
    /// The root role: user and role management, auth enable/disable, defragment, snapshot...
    Admin,
    /// READ or WRITE on every key of a range.
    Keys(Access, KeyRange<'a>),
}

/// The auth store's state.
#[derive(Debug, Clone, Default)]
pub struct AuthState {
    enabled: bool,
    revision: u64,
    users: BTreeMap<String, User>,
    roles: BTreeMap<String, Role>,
    /// Each user's merged grants, rebuilt whenever a user or a role changes (rare: auth
    /// changes are administration, checks are every request).
    permissions: HashMap<String, Arc<UserPermissions>>,
}

impl AuthState {
    /// The state stored in `engine`; a store without auth records gets etcd's fresh auth
    /// store (disabled, revision 1), written with the next batch that changes it.
    pub fn load(engine: &impl Engine) -> Result<Self, StoreError> {
        let mut state = AuthState { revision: 1, ..Default::default() };
        if let Some(bytes) = engine.get(Family::Meta, ENABLED_KEY)? {
            state.enabled = bytes.first() == Some(&1);
        }
        if let Some(bytes) = engine.get(Family::Meta, REVISION_KEY)? {
            let raw: [u8; 8] = bytes
                .as_slice()
                .try_into()
                .map_err(|_| StoreError::Corrupt("auth revision record".into()))?;
            state.revision = u64::from_be_bytes(raw);
        }
        engine.scan(Family::Meta, USER_PREFIX, &mut |key, value| {
            let Some(name) = key.strip_prefix(USER_PREFIX) else { return Ok(false) };
            let user =
                User::decode(value).map_err(|e| StoreError::Corrupt(format!("auth user record: {e}")))?;
            state.users.insert(String::from_utf8_lossy(name).into_owned(), user);
            Ok(true)
        })?;
        engine.scan(Family::Meta, ROLE_PREFIX, &mut |key, value| {
            let Some(name) = key.strip_prefix(ROLE_PREFIX) else { return Ok(false) };
            let role =
                Role::decode(value).map_err(|e| StoreError::Corrupt(format!("auth role record: {e}")))?;
            state.roles.insert(String::from_utf8_lossy(name).into_owned(), role);
            Ok(true)
        })?;
        state.rebuild_permissions();
        Ok(state)
    }

    /// Whether auth is enabled.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// The auth revision (AuthStatus's authRevision).
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The user named `name`.
    pub fn user(&self, name: &str) -> Option<&User> {
        self.users.get(name)
    }

    /// The role named `name`.
    pub fn role(&self, name: &str) -> Option<&Role> {
        self.roles.get(name)
    }

    /// Every user name, sorted.
    pub fn user_names(&self) -> Vec<String> {
        self.users.keys().cloned().collect()
    }

    /// Every role name, sorted.
    pub fn role_names(&self) -> Vec<String> {
        self.roles.keys().cloned().collect()
    }

    /// etcd's check after serving a request outside the log (a read, a time-to-live, a
    /// keep-alive): one checked at auth revision `checked_at` is refused if the auth state has
    /// moved since, so a permission revoked while a long range ran keeps its answer in. Zero
    /// is a request checked as nobody (auth disabled), which nothing can make old.
    pub fn unchanged_since(&self, checked_at: u64) -> Result<(), AuthError> {
        if checked_at != 0 && checked_at != self.revision {
            return Err(AuthError::OldRevision);
        }
        Ok(())
    }

    /// Whether `user` may do what `need` says, when auth is enabled (always, when it is not),
    /// in etcd's order. `revision` is the auth revision the user was identified at: older than
    /// the store's, a key check was made against a state that has changed since (etcd's admin
    /// check does not look at it).
    pub fn check(&self, user: &str, revision: u64, need: Need<'_>) -> Result<(), AuthError> {
        if !self.enabled {
            return Ok(());
        }
        if user.is_empty() || revision == 0 {
            return Err(AuthError::UserEmpty);
        }
        match need {
            Need::User => Ok(()),
            Need::Admin => match self.users.get(user) {
                None => Err(AuthError::UserNotFound),
                Some(found) if has_root_role(found) => Ok(()),
                Some(_) => Err(AuthError::PermissionDenied),
            },
            Need::Keys(access, range) => {
                if revision < self.revision {
                    return Err(AuthError::OldRevision);
                }
                let found = self.users.get(user).ok_or(AuthError::PermissionDenied)?;
                if has_root_role(found) {
                    return Ok(());
                }
                let granted = self.permissions.get(user).is_some_and(|p| p.permits(access, range));
                if granted {
                    Ok(())
                } else {
                    Err(AuthError::PermissionDenied)
                }
            }
        }
    }

    /// AuthEnable: needs the root user holding the root role (the role's name in its list: a
    /// role record named root need not exist); enabling twice changes nothing. As on etcd, it
    /// leaves the revision as it is.
    pub fn enable(&mut self, writes: &mut WriteSet) -> Result<(), AuthError> {
        if self.enabled {
            return Ok(());
        }
        let root = self.users.get(ROOT).ok_or(AuthError::RootUserNotExist)?;
        if !has_root_role(root) {
            return Err(AuthError::RootRoleNotExist);
        }
        self.enabled = true;
        writes.put(Family::Meta, ENABLED_KEY.to_vec(), vec![1]);
        Ok(())
    }

    /// AuthDisable; disabling twice changes nothing.
    pub fn disable(&mut self, writes: &mut WriteSet) {
        if !self.enabled {
            return;
        }
        self.enabled = false;
        writes.put(Family::Meta, ENABLED_KEY.to_vec(), vec![0]);
        self.bump(writes);
    }

    /// UserAdd; the request carries the bcrypt hash (made before the command was proposed),
    /// or no password with `options.no_password`.
    pub fn user_add(&mut self, req: &AuthUserAddRequest, writes: &mut WriteSet) -> Result<(), AuthError> {
        if req.name.is_empty() {
            return Err(AuthError::UserEmpty);
        }
        if self.users.contains_key(&req.name) {
            return Err(AuthError::UserAlreadyExist);
        }
        let no_password = req.options.as_ref().is_some_and(|o| o.no_password);
        let password = if no_password { Vec::new() } else { req.hashed_password.as_bytes().to_vec() };
        let user = User {
            name: req.name.clone().into_bytes().into(),
            password: password.into(),
            roles: Vec::new(),
            options: Some(UserAddOptions { no_password }),
        };
        self.save_user(user, writes)
    }

    /// UserDelete; the root user stays while auth is enabled.
    pub fn user_delete(&mut self, name: &str, writes: &mut WriteSet) -> Result<(), AuthError> {
        remove_record(&mut self.users, self.enabled, name, writes)?;
        self.rebuild_permissions();
        self.bump(writes);
        Ok(())
    }

    /// UserChangePassword, to the bcrypt hash the request carries.
    pub fn user_change_password(
        &mut self,
        req: &AuthUserChangePasswordRequest,
        writes: &mut WriteSet,
    ) -> Result<(), AuthError> {
        let mut user = self.user_to_change(&req.name)?;
        user.password = req.hashed_password.as_bytes().to_vec().into();
        self.save_user(user, writes)
    }

    /// UserGrantRole; `root` may be granted before a role of that name exists, and granting a
    /// role the user holds changes nothing.
    pub fn user_grant_role(
        &mut self,
        req: &AuthUserGrantRoleRequest,
        writes: &mut WriteSet,
    ) -> Result<(), AuthError> {
        let mut user = self.user_to_change(&req.user)?;
        if req.role != ROOT && !self.roles.contains_key(&req.role) {
            return Err(AuthError::RoleNotFound);
        }
        match user.roles.binary_search(&req.role) {
            Ok(_) => Ok(()),
            Err(at) => {
                user.roles.insert(at, req.role.clone());
                self.save_user(user, writes)
            }
        }
    }

    /// UserRevokeRole; root keeps its root role while auth is enabled.
    pub fn user_revoke_role(
        &mut self,
        req: &AuthUserRevokeRoleRequest,
        writes: &mut WriteSet,
    ) -> Result<(), AuthError> {
        if self.enabled && req.name == ROOT && req.role == ROOT {
            return Err(AuthError::InvalidAuthMgmt);
        }
        let mut user = self.user_to_change(&req.name)?;
        let at = user.roles.binary_search(&req.role).map_err(|_| AuthError::RoleNotGranted)?;
        user.roles.remove(at);
        self.save_user(user, writes)
    }

    /// RoleAdd.
    pub fn role_add(&mut self, name: &str, writes: &mut WriteSet) -> Result<(), AuthError> {
        if name.is_empty() {
            return Err(AuthError::RoleEmpty);
        }
        if self.roles.contains_key(name) {
            return Err(AuthError::RoleAlreadyExist);
        }
        self.save_role(
            Role { name: name.to_string().into_bytes().into(), key_permission: Vec::new() },
            writes,
        )
    }

    /// RoleDelete: also taken from every user that held it; the root role stays while auth
    /// is enabled.
    pub fn role_delete(&mut self, name: &str, writes: &mut WriteSet) -> Result<(), AuthError> {
        remove_record(&mut self.roles, self.enabled, name, writes)?;
        let holders: Vec<User> = self
            .users
            .values()
            .filter(|u| u.roles.iter().any(|r| r == name))
            .cloned()
            .map(|mut u| {
                u.roles.retain(|r| r != name);
                u
            })
            .collect();
        for user in holders {
            self.put_user(user, writes);
        }
        self.rebuild_permissions();
        self.bump(writes);
        Ok(())
    }

    /// RoleGrantPermission: a permission on the same key and range end as one the role holds
    /// replaces its type; others are kept sorted by key.
    pub fn role_grant_permission(
        &mut self,
        req: &AuthRoleGrantPermissionRequest,
        writes: &mut WriteSet,
    ) -> Result<(), AuthError> {
        let perm = req.perm.clone().ok_or(AuthError::PermissionNotGiven)?;
        if !valid_grant(&perm) {
            return Err(AuthError::InvalidAuthMgmt);
        }
        let mut role = self.role_to_change(&req.name)?;
        match role.key_permission.iter_mut().find(|p| p.key == perm.key && p.range_end == perm.range_end) {
            Some(held) => held.perm_type = perm.perm_type,
            None => {
                let at = role.key_permission.partition_point(|p| p.key <= perm.key);
                role.key_permission.insert(at, perm);
            }
        }
        self.save_role(role, writes)
    }

    /// RoleRevokePermission of the permission on exactly this key and range end.
    pub fn role_revoke_permission(
        &mut self,
        req: &AuthRoleRevokePermissionRequest,
        writes: &mut WriteSet,
    ) -> Result<(), AuthError> {
        let mut role = self.role_to_change(&req.role)?;
        let at = role
            .key_permission
            .iter()
            .position(|p| p.key == req.key && p.range_end == req.range_end)
            .ok_or(AuthError::PermissionNotGranted)?;
        role.key_permission.remove(at);
        self.save_role(role, writes)
    }

    fn user_to_change(&self, name: &str) -> Result<User, AuthError> {
        self.users.get(name).cloned().ok_or(AuthError::UserNotFound)
    }

    fn role_to_change(&self, name: &str) -> Result<Role, AuthError> {
        self.roles.get(name).cloned().ok_or(AuthError::RoleNotFound)
    }

    /// Stores a changed user: its record, then the auth revision one up.
    fn save_user(&mut self, user: User, writes: &mut WriteSet) -> Result<(), AuthError> {
        self.put_user(user, writes);
        self.bump(writes);
        Ok(())
    }

    fn save_role(&mut self, role: Role, writes: &mut WriteSet) -> Result<(), AuthError> {
        self.put_role(role, writes);
        self.bump(writes);
        Ok(())
    }

    fn put_user(&mut self, user: User, writes: &mut WriteSet) {
        let name = String::from_utf8_lossy(&user.name).into_owned();
        writes.put(Family::Meta, record_key(USER_PREFIX, &name), user.encode_to_vec());
        self.users.insert(name, user);
        self.rebuild_permissions();
    }

    fn put_role(&mut self, role: Role, writes: &mut WriteSet) {
        let name = String::from_utf8_lossy(&role.name).into_owned();
        writes.put(Family::Meta, record_key(ROLE_PREFIX, &name), role.encode_to_vec());
        self.roles.insert(name, role);
        self.rebuild_permissions();
    }

    fn bump(&mut self, writes: &mut WriteSet) {
        self.revision += 1;
        writes.put(Family::Meta, REVISION_KEY.to_vec(), self.revision.to_be_bytes().to_vec());
    }

    fn rebuild_permissions(&mut self) {
        let roles = &self.roles;
        self.permissions = self
            .users
            .iter()
            .map(|(name, user)| {
                let grants: Vec<&Permission> = user
                    .roles
                    .iter()
                    .filter_map(|r| roles.get(r))
                    .flat_map(|r| r.key_permission.iter())
                    .collect();
                (name.clone(), Arc::new(UserPermissions::new(grants.iter().copied())))
            })
            .collect();
    }
}

/// A user or a role: what the records of either share.
trait Record {
    /// The prefix of its records' keys.
    const PREFIX: &'static [u8];
    /// The error for one that does not exist.
    const ABSENT: AuthError;
}

impl Record for User {
    const PREFIX: &'static [u8] = USER_PREFIX;
    const ABSENT: AuthError = AuthError::UserNotFound;
}

impl Record for Role {
    const PREFIX: &'static [u8] = ROLE_PREFIX;
    const ABSENT: AuthError = AuthError::RoleNotFound;
}

/// Takes record `name` out of `records` and deletes it; the root user and the root role stay
/// while auth is `enabled`.
fn remove_record<T: Record>(
    records: &mut BTreeMap<String, T>,
    enabled: bool,
    name: &str,
    writes: &mut WriteSet,
) -> Result<(), AuthError> {
    if enabled && name == ROOT {
        return Err(AuthError::InvalidAuthMgmt);
    }
    if records.remove(name).is_none() {
        return Err(T::ABSENT);
    }
    writes.delete(Family::Meta, record_key(T::PREFIX, name));
    Ok(())
}

/// etcd's valid permission range: a key, and no end, an end after the key, or `\0`.
fn valid_grant(perm: &Permission) -> bool {
    !perm.key.is_empty()
        && (perm.range_end.is_empty() || perm.range_end.as_ref() == b"\0" || perm.range_end > perm.key)
}

fn has_root_role(user: &User) -> bool {
    user.roles.binary_search_by(|r| r.as_str().cmp(ROOT)).is_ok()
}

fn record_key(prefix: &[u8], name: &str) -> Vec<u8> {
    let mut key = prefix.to_vec();
    key.extend_from_slice(name.as_bytes());
    key
}
