//! The one instance of each etcd service a member runs, and the handler of each of its calls.
//! Every client listener's gRPC router and the JSON gateway call these same instances, so a
//! caller meets the same checks whichever door it takes, and Authenticate's bcrypt budget (the
//! AuthService's semaphore) is one for the member, not one per listener.

use std::sync::Arc;

use actcd_proto::etcdserverpb::auth_server::Auth;
use actcd_proto::etcdserverpb::cluster_server::Cluster;
use actcd_proto::etcdserverpb::kv_server::Kv;
use actcd_proto::etcdserverpb::lease_server::Lease;
use actcd_proto::etcdserverpb::maintenance_server::Maintenance;
use actcd_proto::etcdserverpb::{
    AlarmRequest, AlarmResponse, AuthDisableRequest, AuthDisableResponse, AuthEnableRequest,
    AuthEnableResponse, AuthRoleAddRequest, AuthRoleAddResponse, AuthRoleDeleteRequest,
    AuthRoleDeleteResponse, AuthRoleGetRequest, AuthRoleGetResponse, AuthRoleGrantPermissionRequest,
    AuthRoleGrantPermissionResponse, AuthRoleListRequest, AuthRoleListResponse,
    AuthRoleRevokePermissionRequest, AuthRoleRevokePermissionResponse, AuthStatusRequest, AuthStatusResponse,
    AuthUserAddRequest, AuthUserAddResponse, AuthUserChangePasswordRequest, AuthUserChangePasswordResponse,
    AuthUserDeleteRequest, AuthUserDeleteResponse, AuthUserGetRequest, AuthUserGetResponse,
    AuthUserGrantRoleRequest, AuthUserGrantRoleResponse, AuthUserListRequest, AuthUserListResponse,
    AuthUserRevokeRoleRequest, AuthUserRevokeRoleResponse, AuthenticateRequest, AuthenticateResponse,
    CompactionRequest, CompactionResponse, DefragmentRequest, DefragmentResponse, DeleteRangeRequest,
    DeleteRangeResponse, DowngradeRequest, DowngradeResponse, HashKvRequest, HashKvResponse, HashRequest,
    HashResponse, LeaseGrantRequest, LeaseGrantResponse, LeaseKeepAliveRequest, LeaseKeepAliveResponse,
    LeaseLeasesRequest, LeaseLeasesResponse, LeaseRevokeRequest, LeaseRevokeResponse, LeaseTimeToLiveRequest,
    LeaseTimeToLiveResponse, MemberAddRequest, MemberAddResponse, MemberListRequest, MemberListResponse,
    MemberPromoteRequest, MemberPromoteResponse, MemberRemoveRequest, MemberRemoveResponse,
    MemberUpdateRequest, MemberUpdateResponse, MoveLeaderRequest, MoveLeaderResponse, PutRequest,
    PutResponse, RangeRequest, RangeResponse, RangeStreamResponse, SnapshotRequest, SnapshotResponse,
    StatusRequest, StatusResponse, TxnRequest, TxnResponse,
};
use tonic::codegen::BoxStream;
use tonic::Streaming;

use super::auth::AuthService;
use super::concurrency::election::ElectionService;
use super::concurrency::local::Backends;
use super::concurrency::lock::LockService;
use super::kv::KvService;
use super::lease::LeaseService;
use super::maintenance::{ClusterOps, MaintenanceService};
use super::store_handle::StoreHandle;
use super::watch::WatchService;

/// The services, each shared by every door to it.
pub struct EtcdServices {
    /// Reads on the read view, writes through the log.
    pub kv: Arc<KvService>,
    /// One stream actor per stream; also what Lock and Election wait on.
    pub watch: Arc<WatchService>,
    /// Grants, revokes and keep-alive streams.
    pub lease: Arc<LeaseService>,
    /// Maintenance and Cluster: one type serves both.
    pub maintenance: Arc<MaintenanceService>,
    /// Users, roles, tokens; holds the member's one bcrypt budget.
    pub auth: Arc<AuthService>,
    /// Clients of `kv`, `watch` and `lease`, as etcd's are of its own.
    pub lock: Arc<LockService>,
    /// As `lock`.
    pub election: Arc<ElectionService>,
}

impl EtcdServices {
    /// Builds the services over `store` beside the `watch` and `lease` services the caller
    /// started (they own actors and arbiters); `quota_bytes` and `bcrypt_cost` are the flags
    /// Maintenance and Auth need, `cluster` what changes the membership and the leader.
    pub fn new(
        store: &StoreHandle,
        watch: Arc<WatchService>,
        lease: Arc<LeaseService>,
        quota_bytes: u64,
        bcrypt_cost: u32,
        cluster: ClusterOps,
    ) -> Self {
        let kv = Arc::new(KvService::new(store.clone()));
        let backends = Backends { kv: Arc::clone(&kv), watch: Arc::clone(&watch), lease: Arc::clone(&lease) };
        Self {
            maintenance: Arc::new(MaintenanceService::new(store.clone(), quota_bytes, cluster)),
            auth: Arc::new(AuthService::new(store.clone(), bcrypt_cost)),
            lock: Arc::new(LockService::new(backends.clone())),
            election: Arc::new(ElectionService::new(backends)),
            kv,
            watch,
            lease,
        }
    }
}

/// Implements each tonic service trait from rows `call(Request) -> Answer = handler;`: the call
/// awaits `self.handler(request)` and sends its answer (a message, or a stream of them); a row
/// that ends `as is` has a handler that makes the whole response itself. Handlers are named
/// apart from the calls, which the JSON gateway calls through the traits.
macro_rules! etcd_calls {
    ($(impl $service:ident for $type:ty {
        $($call:ident($request:ty) -> $answer:ty = $($handler:ident).+ $(as $is:ident)?;)*
    })*) => {$(
        #[tonic::async_trait]
        impl $service for $type {
            $(async fn $call(
                &self,
                request: tonic::Request<$request>,
            ) -> Result<tonic::Response<$answer>, tonic::Status> {
                let answer = self.$($handler).+(request).await;
                etcd_calls!(@send answer $($is)?)
            })*
        }
    )*};
    (@send $answer:ident) => {
        $answer.map(tonic::Response::new)
    };
    (@send $answer:ident is) => {
        $answer
    };
}

etcd_calls! {
    impl Kv for KvService {
        range(RangeRequest) -> RangeResponse = range_answer as is;
        range_stream(RangeRequest) -> BoxStream<RangeStreamResponse> = range_chunks;
        put(PutRequest) -> PutResponse = store.submit;
        delete_range(DeleteRangeRequest) -> DeleteRangeResponse = store.submit;
        txn(TxnRequest) -> TxnResponse = run_txn;
        compact(CompactionRequest) -> CompactionResponse = store.submit;
    }
    impl Lease for LeaseService {
        lease_grant(LeaseGrantRequest) -> LeaseGrantResponse = grant;
        lease_revoke(LeaseRevokeRequest) -> LeaseRevokeResponse = revoke;
        lease_keep_alive(Streaming<LeaseKeepAliveRequest>) -> BoxStream<LeaseKeepAliveResponse> = keep_alive;
        lease_time_to_live(LeaseTimeToLiveRequest) -> LeaseTimeToLiveResponse = time_to_live;
        lease_leases(LeaseLeasesRequest) -> LeaseLeasesResponse = list;
    }
    impl Maintenance for MaintenanceService {
        alarm(AlarmRequest) -> AlarmResponse = alarms;
        status(StatusRequest) -> StatusResponse = member_status;
        defragment(DefragmentRequest) -> DefragmentResponse = defragment_engine;
        hash(HashRequest) -> HashResponse = hash_engine;
        hash_kv(HashKvRequest) -> HashKvResponse = hash_history;
        snapshot(SnapshotRequest) -> BoxStream<SnapshotResponse> = snapshot_chunks;
        move_leader(MoveLeaderRequest) -> MoveLeaderResponse = transfer_leadership;
        downgrade(DowngradeRequest) -> DowngradeResponse = downgrade_refused;
    }
    impl Cluster for MaintenanceService {
        member_add(MemberAddRequest) -> MemberAddResponse = add;
        member_remove(MemberRemoveRequest) -> MemberRemoveResponse = remove;
        member_update(MemberUpdateRequest) -> MemberUpdateResponse = update;
        member_promote(MemberPromoteRequest) -> MemberPromoteResponse = promote;
        member_list(MemberListRequest) -> MemberListResponse = list;
    }
    impl Auth for AuthService {
        auth_enable(AuthEnableRequest) -> AuthEnableResponse = store.submit;
        auth_disable(AuthDisableRequest) -> AuthDisableResponse = store.submit;
        auth_status(AuthStatusRequest) -> AuthStatusResponse = status;
        authenticate(AuthenticateRequest) -> AuthenticateResponse = issue_token;
        user_add(AuthUserAddRequest) -> AuthUserAddResponse = add_user;
        user_get(AuthUserGetRequest) -> AuthUserGetResponse = get_user;
        user_list(AuthUserListRequest) -> AuthUserListResponse = list_users;
        user_delete(AuthUserDeleteRequest) -> AuthUserDeleteResponse = store.submit;
        user_change_password(AuthUserChangePasswordRequest) -> AuthUserChangePasswordResponse = change_password;
        user_grant_role(AuthUserGrantRoleRequest) -> AuthUserGrantRoleResponse = store.submit;
        user_revoke_role(AuthUserRevokeRoleRequest) -> AuthUserRevokeRoleResponse = store.submit;
        role_add(AuthRoleAddRequest) -> AuthRoleAddResponse = add_role;
        role_get(AuthRoleGetRequest) -> AuthRoleGetResponse = get_role;
        role_list(AuthRoleListRequest) -> AuthRoleListResponse = list_roles;
        role_delete(AuthRoleDeleteRequest) -> AuthRoleDeleteResponse = store.submit;
        role_grant_permission(AuthRoleGrantPermissionRequest) -> AuthRoleGrantPermissionResponse = store.submit;
        role_revoke_permission(AuthRoleRevokePermissionRequest) -> AuthRoleRevokePermissionResponse = store.submit;
    }
}
