//! The Auth service: etcd's users, roles and key-range permissions. Every change is a command
//! through the Raft log (the state machine owns the auth state and checks the sender is root);
//! reads of the auth state (user and role gets and lists) wait for the read barrier, as etcd
//! serves them through its log. Passwords are hashed here with bcrypt, before the command is
//! proposed, so the log and the state hold hashes only and apply stays deterministic; the
//! hashing and the password check run on the blocking pool (a hash at cost 10 is ~50-100 ms).
//!
//! Authenticate checks the password against this member's auth state, chooses a simple token
//! and proposes it: every member learns the token when it applies the command, so the token is
//! good on any member. If the auth state changed between the check and the apply (a password
//! changed), apply refuses with "revision of auth store is old" and the check is made again.

use std::sync::Arc;

use tonic::{Request, Status};

use actcd_edge::status::{auth_status, task_status, to_status};
use actcd_proto::etcdserverpb::{
    AuthRoleAddRequest, AuthRoleAddResponse, AuthRoleGetRequest, AuthRoleGetResponse, AuthRoleListRequest,
    AuthRoleListResponse, AuthStatusRequest, AuthStatusResponse, AuthUserAddRequest, AuthUserAddResponse,
    AuthUserChangePasswordRequest, AuthUserChangePasswordResponse, AuthUserGetRequest, AuthUserGetResponse,
    AuthUserListRequest, AuthUserListResponse, AuthenticateRequest, AuthenticateResponse,
};

use actcd_store::apply::command::AuthenticateCommand;
use actcd_store::auth_store::{AuthError, AuthState, Caller, Need};
use actcd_store::{Command, StoreError};

use crate::grpc::store_handle::StoreHandle;
use crate::grpc::tokens::Tokens;
use crate::grpc::who::Who;

/// Authenticate gives up after this many checks overtaken by auth changes.
const AUTHENTICATE_ATTEMPTS: usize = 3;
/// Letters in a simple token before its `.N` suffix (etcd's length).
const TOKEN_LETTERS: usize = 16;

/// The Auth service.
pub struct AuthService {
    pub(super) store: StoreHandle,
    bcrypt_cost: u32,
    issued: std::sync::atomic::AtomicU64,
    /// bcrypt runs at most this many hashes at once: it is slow on purpose, and a loop of wrong
    /// passwords must not take every core from the write path. More callers wait their turn.
    hashing: tokio::sync::Semaphore,
}

impl AuthService {
    /// The service over `store`, hashing passwords at `bcrypt_cost` (`--bcrypt-cost`).
    pub fn new(store: StoreHandle, bcrypt_cost: u32) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let hashing = tokio::sync::Semaphore::new((cores / 2).max(1));
        Self { store, bcrypt_cost, issued: std::sync::atomic::AtomicU64::new(0), hashing }
    }

    /// A bcrypt hash of `password`, made on the blocking pool.
    /// etcd's `$2a$` form (Go's bcrypt writes it), so that hashes move between the two.
    async fn hash(&self, password: String) -> Result<String, Status> {
        let cost = self.bcrypt_cost;
        let _turn = self.hashing.acquire().await.map_err(|_| Status::unavailable("actcd: stopping"))?;
        tokio::task::spawn_blocking(move || bcrypt::hash_with_result(password, cost))
            .await
            .map_err(task_status)?
            .map(|hashed| hashed.format_for_version(bcrypt::Version::TwoA))
            .map_err(|e| Status::unknown(format!("actcd: cannot hash the password: {e}")))
    }

    /// A fresh simple token: random letters, then `.` and a member-local count, as etcd's look.
    fn simple_token(&self) -> Result<String, Status> {
        const LETTERS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
        let mut random = [0u8; TOKEN_LETTERS];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut random)
            .map_err(|_| Status::internal("actcd: no random bytes for a token"))?;
        let letters: String =
            random.iter().map(|b| LETTERS[usize::from(*b) % LETTERS.len()] as char).collect();
        let n = self.issued.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        Ok(format!("{letters}.{n}"))
    }

    /// One Authenticate try: the password checked at the current auth revision, the token
    /// proposed with that revision.
    async fn authenticate_once(&self, req: &AuthenticateRequest) -> Result<AuthenticateResponse, StoreError> {
        self.store.reads.wait().await?;
        let auth = self.store.view.auth()?;
        if !auth.enabled() {
            return Err(AuthError::NotEnabled.into());
        }
        let user = auth.user(&req.name).ok_or(AuthError::AuthFailed)?;
        if user.options.as_ref().is_some_and(|o| o.no_password) {
            return Err(AuthError::NoPasswordUser.into());
        }
        let hash = String::from_utf8_lossy(&user.password).into_owned();
        let password = req.password.clone();
        let _turn = self.hashing.acquire().await.map_err(|_| StoreError::Stopped("stopping".into()))?;
        let matches = tokio::task::spawn_blocking(move || bcrypt::verify(password, &hash).unwrap_or(false))
            .await
            .map_err(|e| StoreError::Stopped(format!("password check failed: {e}")))?;
        if !matches {
            return Err(AuthError::AuthFailed.into());
        }
        if let Tokens::Jwt(jwt) = &*self.store.tokens {
            // Stateless: signed here, at the revision the password was checked at.
            let token = match jwt.sign(&req.name, auth.revision()) {
                Some(signed) => {
                    signed.map_err(|e| StoreError::Stopped(format!("cannot sign a token: {e}")))?
                }
                None => return Err(StoreError::Auth(AuthError::VerifyOnlyKey)),
            };
            return Ok(AuthenticateResponse { header: None, token });
        }
        let token = self.simple_token().map_err(|s| StoreError::Stopped(s.message().to_string()))?;
        let command =
            Command::Authenticate(AuthenticateCommand { name: req.name.clone(), simple_token: token })
                .from_caller(Caller::User { name: req.name.clone(), auth_revision: auth.revision() });
        self.store.propose::<AuthenticateCommand>(command).await
    }
}

/// The handlers of the calls that are more than a change proposed as it came
/// (`crate::grpc::services`).
impl AuthService {
    pub(super) async fn status(&self, _: Request<AuthStatusRequest>) -> Result<AuthStatusResponse, Status> {
        let auth = self.store.view.auth().map_err(to_status)?;
        Ok(AuthStatusResponse {
            header: self.store.header(),
            enabled: auth.enabled(),
            auth_revision: auth.revision(),
        })
    }

    pub(super) async fn issue_token(
        &self,
        request: Request<AuthenticateRequest>,
    ) -> Result<AuthenticateResponse, Status> {
        let req = request.into_inner();
        let mut last = StoreError::Auth(AuthError::OldRevision);
        for _ in 0..AUTHENTICATE_ATTEMPTS {
            match self.authenticate_once(&req).await {
                Ok(mut resp) => {
                    if resp.header.is_none() {
                        resp.header = self.store.header();
                    }
                    self.store.identity.fill(&mut resp.header);
                    return Ok(resp);
                }
                Err(err @ StoreError::Auth(AuthError::OldRevision)) => last = err,
                Err(err) => return Err(to_status(err)),
            }
        }
        Err(to_status(last))
    }

    pub(super) async fn add_user(
        &self,
        request: Request<AuthUserAddRequest>,
    ) -> Result<AuthUserAddResponse, Status> {
        let who = self.store.who(&request).await?;
        let mut req = request.into_inner();
        if req.name.is_empty() {
            return Err(auth_status(AuthError::UserEmpty));
        }
        let no_password = req.options.as_ref().is_some_and(|o| o.no_password);
        self.hash_into(&mut req.password, &mut req.hashed_password, !no_password).await?;
        self.store.write_answered(&who, req).await
    }

    pub(super) async fn get_user(
        &self,
        request: Request<AuthUserGetRequest>,
    ) -> Result<AuthUserGetResponse, Status> {
        let name = request.get_ref().name.as_str();
        // A user may read its own record; anyone else's needs root.
        let auth = self.auth_for(&request, |who| who.user() == Some(name)).await?;
        let user = auth.user(name).ok_or_else(|| auth_status(AuthError::UserNotFound))?;
        Ok(AuthUserGetResponse { header: self.store.header(), roles: user.roles.clone() })
    }

    pub(super) async fn list_users(
        &self,
        request: Request<AuthUserListRequest>,
    ) -> Result<AuthUserListResponse, Status> {
        let users = self.admin_view(&request).await?.user_names();
        Ok(AuthUserListResponse { header: self.store.header(), users })
    }

    pub(super) async fn change_password(
        &self,
        request: Request<AuthUserChangePasswordRequest>,
    ) -> Result<AuthUserChangePasswordResponse, Status> {
        let who = self.store.who(&request).await?;
        let mut req = request.into_inner();
        self.hash_into(&mut req.password, &mut req.hashed_password, true).await?;
        self.store.write_answered(&who, req).await
    }

    pub(super) async fn add_role(
        &self,
        request: Request<AuthRoleAddRequest>,
    ) -> Result<AuthRoleAddResponse, Status> {
        if request.get_ref().name.is_empty() {
            return Err(auth_status(AuthError::RoleEmpty));
        }
        self.store.submit(request).await
    }

    pub(super) async fn list_roles(
        &self,
        request: Request<AuthRoleListRequest>,
    ) -> Result<AuthRoleListResponse, Status> {
        let roles = self.admin_view(&request).await?.role_names();
        Ok(AuthRoleListResponse { header: self.store.header(), roles })
    }

    pub(super) async fn get_role(
        &self,
        request: Request<AuthRoleGetRequest>,
    ) -> Result<AuthRoleGetResponse, Status> {
        let name = &request.get_ref().role;
        // A user may read the roles it holds; any other needs root.
        let holds =
            |who: &Who| who.user().and_then(|u| who.auth().user(u)).is_some_and(|u| u.roles.contains(name));
        let auth = self.auth_for(&request, holds).await?;
        let role = auth.role(name).ok_or_else(|| auth_status(AuthError::RoleNotFound))?;
        Ok(AuthRoleGetResponse { header: self.store.header(), perm: role.key_permission.clone() })
    }

    /// The auth state for a caller with the root role, once the read barrier let it be read.
    async fn admin_view<T>(&self, request: &Request<T>) -> Result<Arc<AuthState>, Status> {
        self.auth_for(request, |_| false).await
    }

    /// The auth state for a caller that has the root role or is `own`er of what it reads,
    /// once the read barrier let it be read.
    async fn auth_for<T>(
        &self,
        request: &Request<T>,
        own: impl FnOnce(&Who) -> bool,
    ) -> Result<Arc<AuthState>, Status> {
        let who = self.store.who(request).await?;
        if !own(&who) {
            who.need(Need::Admin)?;
        }
        self.store.linearize().await?;
        self.store.view.auth().map_err(to_status)
    }

    /// The request's password as a bcrypt hash in `hashed` when `wanted` and no hash came
    /// with it; the password itself is never proposed.
    async fn hash_into(
        &self,
        password: &mut String,
        hashed: &mut String,
        wanted: bool,
    ) -> Result<(), Status> {
        if wanted && hashed.is_empty() {
            *hashed = self.hash(std::mem::take(password)).await?;
        }
        password.clear();
        Ok(())
    }
}
