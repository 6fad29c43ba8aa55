//! The parts of Maintenance and Cluster that etcdctl's everyday commands need: Status
//! (`endpoint status`), Alarm GET (`endpoint health`) and MemberList (`member list`).

use tonic::{Request, Response, Status};

use actcd_proto::etcdserverpb::cluster_server::Cluster;
use actcd_proto::etcdserverpb::maintenance_server::Maintenance;
use actcd_proto::etcdserverpb::{
    alarm_request::AlarmAction, AlarmRequest, AlarmResponse, Member, MemberListRequest, MemberListResponse,
    StatusRequest, StatusResponse,
};

use crate::kv::StoreHandle;

/// The version actcd reports: clients gate features (such as progress requests) on a
/// 3.6-series server.
pub const SERVER_VERSION: &str = "3.6.0";
/// The storage version reported by Status.
pub const STORAGE_VERSION: &str = "3.6.0";

/// Maintenance and Cluster services over one store.
pub struct MaintenanceService {
    store: StoreHandle,
    name: String,
    client_urls: Vec<String>,
    quota_bytes: u64,
}

impl MaintenanceService {
    /// Services for the member `name` advertising `client_urls`.
    pub fn new(store: StoreHandle, name: String, client_urls: Vec<String>, quota_bytes: u64) -> Self {
        Self { store, name, client_urls, quota_bytes }
    }

    fn member(&self) -> Member {
        Member {
            id: self.store.identity.member_id,
            name: self.name.clone(),
            peer_ur_ls: Vec::new(),
            client_ur_ls: self.client_urls.clone(),
            is_learner: false,
        }
    }
}

#[tonic::async_trait]
impl Maintenance for MaintenanceService {
    async fn alarm(&self, request: Request<AlarmRequest>) -> Result<Response<AlarmResponse>, Status> {
        match AlarmAction::try_from(request.get_ref().action) {
            Ok(AlarmAction::Get) => Ok(Response::new(AlarmResponse {
                header: self.store.identity.header(self.store.view.revision()),
                alarms: Vec::new(),
            })),
            _ => Err(Status::unimplemented("actcd: raising and clearing alarms is not supported yet")),
        }
    }

    async fn status(&self, _: Request<StatusRequest>) -> Result<Response<StatusResponse>, Status> {
        let view = &self.store.view;
        let db_size = i64::try_from(view.db_size()).unwrap_or(i64::MAX);
        let applied = view.applied_index();
        Ok(Response::new(StatusResponse {
            header: self.store.identity.header(view.revision()),
            version: SERVER_VERSION.into(),
            db_size,
            leader: self.store.identity.member_id,
            raft_index: applied,
            raft_term: self.store.identity.raft_term,
            raft_applied_index: applied,
            errors: Vec::new(),
            db_size_in_use: db_size,
            is_learner: false,
            storage_version: STORAGE_VERSION.into(),
            db_size_quota: i64::try_from(self.quota_bytes).unwrap_or(i64::MAX),
            downgrade_info: None,
        }))
    }
}

#[tonic::async_trait]
impl Cluster for MaintenanceService {
    async fn member_list(
        &self,
        _: Request<MemberListRequest>,
    ) -> Result<Response<MemberListResponse>, Status> {
        Ok(Response::new(MemberListResponse {
            header: self.store.identity.header(self.store.view.revision()),
            members: vec![self.member()],
        }))
    }
}
