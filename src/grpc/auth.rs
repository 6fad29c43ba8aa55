//! The Auth service while actcd has no users, roles or tokens: authentication is disabled, as
//! on a fresh etcd. AuthStatus says so, AuthDisable has nothing to do, and Authenticate answers
//! etcd's "authentication is not enabled", which etcd's clients take as "go on without a token"
//! (so `etcdctl --user name:password` works). User and role management answer the same error,
//! and AuthEnable says that authentication is not built yet.

use actcd_proto::errors::EtcdError;
use tonic::{Request, Response, Status};

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
};

use crate::grpc::status::Unsupported;
use crate::grpc::store_handle::StoreHandle;

/// The auth store's revision on a fresh etcd (set once when the store is created).
const AUTH_REVISION: u64 = 1;

/// The Auth service.
pub struct AuthService {
    store: StoreHandle,
}

impl AuthService {
    /// The service over `store` (for response headers).
    pub fn new(store: StoreHandle) -> Self {
        Self { store }
    }
}

/// etcd's answer when a request needs authentication to be enabled.
pub fn auth_not_enabled() -> Status {
    EtcdError::AuthNotEnabled.status()
}

#[tonic::async_trait]
impl Auth for AuthService {
    async fn auth_enable(
        &self,
        _: Request<AuthEnableRequest>,
    ) -> Result<Response<AuthEnableResponse>, Status> {
        Err(Unsupported::Authentication.status())
    }

    async fn auth_disable(
        &self,
        _: Request<AuthDisableRequest>,
    ) -> Result<Response<AuthDisableResponse>, Status> {
        let header = self.store.identity.header(self.store.view.revision());
        Ok(Response::new(AuthDisableResponse { header }))
    }

    async fn auth_status(
        &self,
        _: Request<AuthStatusRequest>,
    ) -> Result<Response<AuthStatusResponse>, Status> {
        let header = self.store.identity.header(self.store.view.revision());
        Ok(Response::new(AuthStatusResponse { header, enabled: false, auth_revision: AUTH_REVISION }))
    }

    async fn authenticate(
        &self,
        _: Request<AuthenticateRequest>,
    ) -> Result<Response<AuthenticateResponse>, Status> {
        Err(auth_not_enabled())
    }

    async fn user_add(
        &self,
        _: Request<AuthUserAddRequest>,
    ) -> Result<Response<AuthUserAddResponse>, Status> {
        Err(auth_not_enabled())
    }

    async fn user_get(
        &self,
        _: Request<AuthUserGetRequest>,
    ) -> Result<Response<AuthUserGetResponse>, Status> {
        Err(auth_not_enabled())
    }

    async fn user_list(
        &self,
        _: Request<AuthUserListRequest>,
    ) -> Result<Response<AuthUserListResponse>, Status> {
        Err(auth_not_enabled())
    }

    async fn user_delete(
        &self,
        _: Request<AuthUserDeleteRequest>,
    ) -> Result<Response<AuthUserDeleteResponse>, Status> {
        Err(auth_not_enabled())
    }

    async fn user_change_password(
        &self,
        _: Request<AuthUserChangePasswordRequest>,
    ) -> Result<Response<AuthUserChangePasswordResponse>, Status> {
        Err(auth_not_enabled())
    }

    async fn user_grant_role(
        &self,
        _: Request<AuthUserGrantRoleRequest>,
    ) -> Result<Response<AuthUserGrantRoleResponse>, Status> {
        Err(auth_not_enabled())
    }

    async fn user_revoke_role(
        &self,
        _: Request<AuthUserRevokeRoleRequest>,
    ) -> Result<Response<AuthUserRevokeRoleResponse>, Status> {
        Err(auth_not_enabled())
    }

    async fn role_add(
        &self,
        _: Request<AuthRoleAddRequest>,
    ) -> Result<Response<AuthRoleAddResponse>, Status> {
        Err(auth_not_enabled())
    }

    async fn role_get(
        &self,
        _: Request<AuthRoleGetRequest>,
    ) -> Result<Response<AuthRoleGetResponse>, Status> {
        Err(auth_not_enabled())
    }

    async fn role_list(
        &self,
        _: Request<AuthRoleListRequest>,
    ) -> Result<Response<AuthRoleListResponse>, Status> {
        Err(auth_not_enabled())
    }

    async fn role_delete(
        &self,
        _: Request<AuthRoleDeleteRequest>,
    ) -> Result<Response<AuthRoleDeleteResponse>, Status> {
        Err(auth_not_enabled())
    }

    async fn role_grant_permission(
        &self,
        _: Request<AuthRoleGrantPermissionRequest>,
    ) -> Result<Response<AuthRoleGrantPermissionResponse>, Status> {
        Err(auth_not_enabled())
    }

    async fn role_revoke_permission(
        &self,
        _: Request<AuthRoleRevokePermissionRequest>,
    ) -> Result<Response<AuthRoleRevokePermissionResponse>, Status> {
        Err(auth_not_enabled())
    }
}
