//! The etcd API a member serves, declared once: each service of the protos ([`etcd_api!`]'s
//! table: its proto name, its generated tonic server, the instance of [`EtcdServices`] that
//! answers it), and each of its methods that etcd's JSON gateway answers (the path under
//! /v3, how the call goes, the service's function). The gRPC router registers the services
//! from it ([`routes`]) and the gateway routes its paths from it (`crate::http::gateway`), so
//! a service or a path is added in one row.

use std::sync::Arc;

use tonic::service::interceptor::InterceptedService;
use tonic::service::Routes;

use actcd_proto::etcdserverpb::{
    auth_server::AuthServer, cluster_server::ClusterServer, kv_server::KvServer, lease_server::LeaseServer,
    maintenance_server::MaintenanceServer,
};
use actcd_proto::health::health_server::HealthServer;
use actcd_proto::v3electionpb::election_server::ElectionServer;
use actcd_proto::v3lockpb::lock_server::LockServer;

use crate::grpc::health::HealthService;
use crate::grpc::require_leader::RequireLeader;
use crate::grpc::services::EtcdServices;
use crate::grpc::watch_route::WatchRoute;

/// Hands the table to `$then!`, a macro that takes rows of this form:
///
/// ```text
/// "proto.Service" TonicServer field_of_EtcdServices {
///     Method "/gateway/path" => unary|stream|handler function [learner],
/// }
/// ```
///
/// `unary` and `stream` (a server stream) call the service's `function` with the decoded
/// request; `handler` names a gateway function of its own (the client streams). A method
/// with no row has no gateway path (etcd's has none either); one with two rows has two.
/// `learner` marks the calls a learner serves (etcd's learner interceptors: Status, Range, whose
/// handler refuses a linearizable one itself, and, from etcd 3.4.28, Snapshot); a learner
/// refuses every other row, on gRPC and on the gateway alike.
macro_rules! etcd_api {
    ($then:ident) => {
        $then! {
            "etcdserverpb.KV" KvServer kv {
                Range "/kv/range" => unary range_message learner,
                Put "/kv/put" => unary put,
                DeleteRange "/kv/deleterange" => unary delete_range,
                Txn "/kv/txn" => unary txn,
                Compact "/kv/compaction" => unary compact,
            }
            "etcdserverpb.Watch" WatchRoute watch {
                Watch "/watch" => handler watch,
            }
            "etcdserverpb.Lease" LeaseServer lease {
                LeaseGrant "/lease/grant" => unary lease_grant,
                LeaseRevoke "/lease/revoke" => unary lease_revoke,
                LeaseKeepAlive "/lease/keepalive" => handler keep_alive,
                LeaseTimeToLive "/lease/timetolive" => unary lease_time_to_live,
                LeaseLeases "/lease/leases" => unary lease_leases,
                // etcd 3.4 answers these under /v3/kv/lease/ too (their older paths).
                LeaseRevoke "/kv/lease/revoke" => unary lease_revoke,
                LeaseTimeToLive "/kv/lease/timetolive" => unary lease_time_to_live,
                LeaseLeases "/kv/lease/leases" => unary lease_leases,
            }
            "etcdserverpb.Cluster" ClusterServer maintenance {
                MemberAdd "/cluster/member/add" => unary member_add,
                MemberRemove "/cluster/member/remove" => unary member_remove,
                MemberUpdate "/cluster/member/update" => unary member_update,
                MemberList "/cluster/member/list" => unary member_list,
                MemberPromote "/cluster/member/promote" => unary member_promote,
            }
            "etcdserverpb.Maintenance" MaintenanceServer maintenance {
                Alarm "/maintenance/alarm" => unary alarm,
                Status "/maintenance/status" => unary status learner,
                Defragment "/maintenance/defragment" => unary defragment,
                // etcd 3.4 gives Hash and HashKV this one path; Hash answers it.
                Hash "/maintenance/hash" => unary hash,
                Snapshot "/maintenance/snapshot" => stream snapshot learner,
                MoveLeader "/maintenance/transfer-leadership" => unary move_leader,
            }
            "etcdserverpb.Auth" AuthServer auth {
                AuthEnable "/auth/enable" => unary auth_enable,
                AuthDisable "/auth/disable" => unary auth_disable,
                AuthStatus "/auth/status" => unary auth_status,
                Authenticate "/auth/authenticate" => unary authenticate,
                UserAdd "/auth/user/add" => unary user_add,
                UserGet "/auth/user/get" => unary user_get,
                UserList "/auth/user/list" => unary user_list,
                UserDelete "/auth/user/delete" => unary user_delete,
                UserChangePassword "/auth/user/changepw" => unary user_change_password,
                UserGrantRole "/auth/user/grant" => unary user_grant_role,
                UserRevokeRole "/auth/user/revoke" => unary user_revoke_role,
                RoleAdd "/auth/role/add" => unary role_add,
                RoleGet "/auth/role/get" => unary role_get,
                RoleList "/auth/role/list" => unary role_list,
                RoleDelete "/auth/role/delete" => unary role_delete,
                RoleGrantPermission "/auth/role/grant" => unary role_grant_permission,
                RoleRevokePermission "/auth/role/revoke" => unary role_revoke_permission,
            }
            "v3lockpb.Lock" LockServer lock {
                Lock "/lock/lock" => unary lock,
                Unlock "/lock/unlock" => unary unlock,
            }
            "v3electionpb.Election" ElectionServer election {
                Campaign "/election/campaign" => unary campaign,
                Proclaim "/election/proclaim" => unary proclaim,
                Leader "/election/leader" => unary leader,
                Observe "/election/observe" => stream observe,
                Resign "/election/resign" => unary resign,
            }
        }
    };
}
pub(crate) use etcd_api;

/// One service of the table, as the gRPC router serves it: the Watch route as it is (it
/// checks require-leader itself, and watches its streams' leader too); every other service
/// with etcd's require-leader check on each call and the largest request etcd takes.
macro_rules! served {
    (WatchRoute, $etcd:ident . $field:ident, $leader:ident, $max:ident) => {
        WatchRoute::new(Arc::clone(&$etcd.$field), $max)
    };
    ($server:ident, $etcd:ident . $field:ident, $leader:ident, $max:ident) => {
        InterceptedService::new(
            $server::from_arc(Arc::clone(&$etcd.$field)).max_decoding_message_size($max),
            $leader.interceptor(),
        )
    };
}

/// The one word a row may end with; any other is a compile error rather than a row silently
/// left unmarked.
macro_rules! learner_mark {
    (learner) => {};
}

/// Writes [`routes`] and [`learner_serves`] from the table.
macro_rules! registered {
    (@rows $list:ident $service:literal $($method:ident $path:literal => $kind:ident $call:ident $($learner:ident)?,)*) => {
        $($list.push(format!("/{}/{}", $service, stringify!($method)));)*
    };
    (@learner $path:ident $service:literal $($method:ident $route:literal => $kind:ident $call:ident $($learner:ident)?,)*) => {
        $($(
            learner_mark!($learner);
            if $path == concat!("/", $service, "/", stringify!($method)) || $path == $route {
                return true;
            }
        )?)*
    };
    ($($service:literal $server:ident $field:ident { $($rows:tt)* })*) => {
        /// The gRPC services of a client URL: every service of the table, over `etcd`'s
        /// instances, decoding requests of up to `max_message` bytes; and the standard
        /// grpc.health.v1 service, which etcd serves on its client port too.
        pub fn routes(etcd: &EtcdServices, leader: &RequireLeader, max_message: usize) -> Routes {
            let mut routes = Routes::builder();
            $(routes.add_service(served!($server, etcd.$field, leader, max_message));)*
            routes.add_service(HealthServer::new(HealthService));
            routes.routes()
        }

        /// Whether a learner serves the call on `path`: a gRPC path, or a gateway path under
        /// /v3 (the prefix stripped).
        pub fn learner_serves(path: &str) -> bool {
            $(registered!(@learner path $service $($rows)*);)*
            false
        }

        /// Each row's gRPC path, for the check that the table names only the protos' methods
        /// (tests/it/gateway.rs: this crate's own tests would link RocksDB once more).
        pub fn paths() -> Vec<String> {
            let mut rows = Vec::new();
            $(registered!(@rows rows $service $($rows)*);)*
            rows
        }
    };
}
etcd_api!(registered);
