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

use tonic::{Request, Response, Status};

use actcd_edge::status::{auth_status, task_status, to_status};
use actcd_proto::etcdserverpb::auth_server::Auth;
use actcd_proto::etcdserverpb::{
    AuthDisableRequest, AuthDisableResponse, AuthEnableRequest, AuthEnableResponse, AuthRoleAddRequest,
    AuthRoleAddResponse, AuthRoleDeleteRequest, AuthRoleDeleteResponse, AuthRoleGetRequest,
    AuthRoleGetResponse, AuthRoleGrantPermissionRequest, AuthRoleGrantPermissionResponse,
    AuthRoleListRequest, AuthRoleListResponse, AuthRoleRevokePermissionRequest,
    AuthRoleRevokePermissionResponse, AuthStatusRequest, AuthStatusResponse, AuthUserAddRequest,
    AuthUserAddResponse, AuthUserChangePasswordRequest, AuthUserChangePasswordResponse,
    AuthUserDeleteRequest, AuthUserDeleteResponse, AuthUserGetRequest, AuthUserGetResponse,
    AuthUserGrantRoleRequest, AuthUserGrantRoleResponse, AuthUserListRequest, AuthUserListResponse,
    AuthUserRevokeRoleRequest, AuthUserRevokeRoleResponse, AuthenticateRequest, AuthenticateResponse,
    ResponseHeader,
};

use actcd_store::apply::command::{AuthenticateCommand, WriteRequest};
use actcd_store::auth_store::{AuthError, Caller, Need};
use actcd_store::{Command, StoreError};

use crate::grpc::store_handle::StoreHandle;
use crate::grpc::tokens::Tokens;

/// Authenticate gives up after this many checks overtaken by auth changes.
const AUTHENTICATE_ATTEMPTS: usize = 3;
/// Letters in a simple token before its `.N` suffix (etcd's length).
const TOKEN_LETTERS: usize = 16;

/// The Auth service.
pub struct AuthService {
    store: StoreHandle,
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

    fn header(&self) -> Option<ResponseHeader> {
        self.store.identity.header(self.store.view.revision())
    }

    /// Proposes an auth change from the request's sender and answers with a full header.
    async fn change<R, T>(
        &self,
        request: Request<T>,
        into: impl FnOnce(T) -> R,
    ) -> Result<Response<R::Response>, Status>
    where
        R: WriteRequest,
        R::Response: HasHeader,
    {
        let who = self.store.who(&request).await?;
        let mut resp = self.store.write(&who, into(request.into_inner())).await?;
        self.store.identity.fill(resp.header_mut());
        Ok(Response::new(resp))
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

/// A response with etcd's header, which the service completes with the member's identity.
trait HasHeader {
    fn header_mut(&mut self) -> &mut Option<ResponseHeader>;
}

macro_rules! has_header {
    ($($t:ty),*) => { $(impl HasHeader for $t { fn header_mut(&mut self) -> &mut Option<ResponseHeader> { &mut self.header } })* };
}

has_header!(
    AuthEnableResponse,
    AuthDisableResponse,
    AuthUserAddResponse,
    AuthUserDeleteResponse,
    AuthUserChangePasswordResponse,
    AuthUserGrantRoleResponse,
    AuthUserRevokeRoleResponse,
    AuthRoleAddResponse,
    AuthRoleDeleteResponse,
    AuthRoleGrantPermissionResponse,
    AuthRoleRevokePermissionResponse
);

#[tonic::async_trait]
impl Auth for AuthService {
    async fn auth_enable(
        &self,
        request: Request<AuthEnableRequest>,
    ) -> Result<Response<AuthEnableResponse>, Status> {
        self.change(request, |r| r).await
    }

    async fn auth_disable(
        &self,
        request: Request<AuthDisableRequest>,
    ) -> Result<Response<AuthDisableResponse>, Status> {
        self.change(request, |r| r).await
    }

    async fn auth_status(
        &self,
        _: Request<AuthStatusRequest>,
    ) -> Result<Response<AuthStatusResponse>, Status> {
        let auth = self.store.view.auth().map_err(to_status)?;
        Ok(Response::new(AuthStatusResponse {
            header: self.header(),
            enabled: auth.enabled(),
            auth_revision: auth.revision(),
        }))
    }

    async fn authenticate(
        &self,
        request: Request<AuthenticateRequest>,
    ) -> Result<Response<AuthenticateResponse>, Status> {
        let req = request.into_inner();
        let mut last = StoreError::Auth(AuthError::OldRevision);
        for _ in 0..AUTHENTICATE_ATTEMPTS {
            match self.authenticate_once(&req).await {
                Ok(mut resp) => {
                    if resp.header.is_none() {
                        resp.header = self.header();
                    }
                    self.store.identity.fill(&mut resp.header);
                    return Ok(Response::new(resp));
                }
                Err(err @ StoreError::Auth(AuthError::OldRevision)) => last = err,
                Err(err) => return Err(to_status(err)),
            }
        }
        Err(to_status(last))
    }

    async fn user_add(
        &self,
        request: Request<AuthUserAddRequest>,
    ) -> Result<Response<AuthUserAddResponse>, Status> {
        let who = self.store.who(&request).await?;
        let mut req = request.into_inner();
        if req.name.is_empty() {
            return Err(auth_status(AuthError::UserEmpty));
        }
        let no_password = req.options.as_ref().is_some_and(|o| o.no_password);
        if !no_password && req.hashed_password.is_empty() {
            req.hashed_password = self.hash(std::mem::take(&mut req.password)).await?;
        }
        req.password.clear();
        let mut resp = self.store.write(&who, req).await?;
        self.store.identity.fill(&mut resp.header);
        Ok(Response::new(resp))
    }

    async fn user_get(
        &self,
        request: Request<AuthUserGetRequest>,
    ) -> Result<Response<AuthUserGetResponse>, Status> {
        let who = self.store.who(&request).await?;
        // A user may read its own record; anyone else's needs root.
        if who.user() != Some(request.get_ref().name.as_str()) {
            who.need(Need::Admin)?;
        }
        self.store.linearize().await?;
        let auth = self.store.view.auth().map_err(to_status)?;
        let user = auth.user(&request.get_ref().name).ok_or_else(|| auth_status(AuthError::UserNotFound))?;
        Ok(Response::new(AuthUserGetResponse { header: self.header(), roles: user.roles.clone() }))
    }

    async fn user_list(
        &self,
        request: Request<AuthUserListRequest>,
    ) -> Result<Response<AuthUserListResponse>, Status> {
        self.store.who(&request).await?.need(Need::Admin)?;
        self.store.linearize().await?;
        let users = self.store.view.auth().map_err(to_status)?.user_names();
        Ok(Response::new(AuthUserListResponse { header: self.header(), users }))
    }

    async fn user_delete(
        &self,
        request: Request<AuthUserDeleteRequest>,
    ) -> Result<Response<AuthUserDeleteResponse>, Status> {
        self.change(request, |r| r).await
    }

    async fn user_change_password(
        &self,
        request: Request<AuthUserChangePasswordRequest>,
    ) -> Result<Response<AuthUserChangePasswordResponse>, Status> {
        let who = self.store.who(&request).await?;
        let mut req = request.into_inner();
        if req.hashed_password.is_empty() {
            req.hashed_password = self.hash(std::mem::take(&mut req.password)).await?;
        }
        req.password.clear();
        let mut resp = self.store.write(&who, req).await?;
        self.store.identity.fill(&mut resp.header);
        Ok(Response::new(resp))
    }

    async fn user_grant_role(
        &self,
        request: Request<AuthUserGrantRoleRequest>,
    ) -> Result<Response<AuthUserGrantRoleResponse>, Status> {
        self.change(request, |r| r).await
    }

    async fn user_revoke_role(
        &self,
        request: Request<AuthUserRevokeRoleRequest>,
    ) -> Result<Response<AuthUserRevokeRoleResponse>, Status> {
        self.change(request, |r| r).await
    }

    async fn role_add(
        &self,
        request: Request<AuthRoleAddRequest>,
    ) -> Result<Response<AuthRoleAddResponse>, Status> {
        if request.get_ref().name.is_empty() {
            return Err(auth_status(AuthError::RoleEmpty));
        }
        self.change(request, |r| r).await
    }

    async fn role_get(
        &self,
        request: Request<AuthRoleGetRequest>,
    ) -> Result<Response<AuthRoleGetResponse>, Status> {
        let who = self.store.who(&request).await?;
        // A user may read the roles it holds; any other needs root.
        let holds = who
            .user()
            .and_then(|u| who.auth().user(u))
            .is_some_and(|u| u.roles.contains(&request.get_ref().role));
        if !holds {
            who.need(Need::Admin)?;
        }
        self.store.linearize().await?;
        let auth = self.store.view.auth().map_err(to_status)?;
        let role = auth.role(&request.get_ref().role).ok_or_else(|| auth_status(AuthError::RoleNotFound))?;
        Ok(Response::new(AuthRoleGetResponse { header: self.header(), perm: role.key_permission.clone() }))
    }

    async fn role_list(
        &self,
        request: Request<AuthRoleListRequest>,
    ) -> Result<Response<AuthRoleListResponse>, Status> {
        self.store.who(&request).await?.need(Need::Admin)?;
        self.store.linearize().await?;
        let roles = self.store.view.auth().map_err(to_status)?.role_names();
        Ok(Response::new(AuthRoleListResponse { header: self.header(), roles }))
    }

    async fn role_delete(
        &self,
        request: Request<AuthRoleDeleteRequest>,
    ) -> Result<Response<AuthRoleDeleteResponse>, Status> {
        self.change(request, |r| r).await
    }

    async fn role_grant_permission(
        &self,
        request: Request<AuthRoleGrantPermissionRequest>,
    ) -> Result<Response<AuthRoleGrantPermissionResponse>, Status> {
        self.change(request, |r| r).await
    }

    async fn role_revoke_permission(
        &self,
        request: Request<AuthRoleRevokePermissionRequest>,
    ) -> Result<Response<AuthRoleRevokePermissionResponse>, Status> {
        self.change(request, |r| r).await
    }
}
