//! `lease-keepalive`: each client grants one lease (TTL 100) and then keeps it alive once per
//! request, each time over a short LeaseKeepAlive stream (etcd's `KeepAliveOnce`).

use crate::conn::{Conn, OpError};
use crate::output::Out;
use crate::runner::{run_clients, Plan, Worker};
use crate::settings::Settings;
use crate::stop::Stop;
use actcd_proto::etcdserverpb::lease_client::LeaseClient;
use actcd_proto::etcdserverpb::{LeaseGrantRequest, LeaseKeepAliveRequest};
use clap::Args;
use std::future::Future;

#[derive(Debug, Clone, Args)]
pub struct LeaseKeepaliveArgs {
    /// Total number of lease keepalive requests.
    #[arg(long, default_value_t = 10000)]
    pub total: u64,
}

impl LeaseKeepaliveArgs {
    pub fn validate(&self) -> Result<(), String> {
        Ok(())
    }

    pub async fn run(self, settings: &Settings, stop: &Stop, out: &Out) {
        let worker = |conn| KeepaliveWorker { lease: LeaseClient::new(conn), id: None };
        run_clients((settings, stop, out), "lease-keepalive", Plan::new(self.total, 0), "", worker).await;
        if stop.reason().is_some_and(|r| r.contains("Unimplemented")) {
            out.note("note: the endpoint does not implement the Lease service; lease-keepalive needs it");
        }
    }
}

/// The TTL etcd benchmark grants, seconds.
const TTL: i64 = 100;

struct KeepaliveWorker {
    lease: LeaseClient<Conn>,
    id: Option<i64>,
}

impl KeepaliveWorker {
    async fn keep_alive_once(&mut self) -> Result<(), OpError> {
        // Granted on the first request (and again after a failed grant or a lost lease); a
        // failure counts as that request's error.
        let id = match self.id {
            Some(id) => id,
            None => {
                let r = self.lease.lease_grant(LeaseGrantRequest { ttl: TTL, id: 0 }).await?.into_inner();
                if !r.error.is_empty() {
                    return Err(OpError::new(format!("lease grant: {}", r.error)));
                }
                *self.id.insert(r.id)
            }
        };
        let once = futures::stream::iter([LeaseKeepAliveRequest { id }]);
        match self.lease.lease_keep_alive(once).await?.into_inner().message().await? {
            Some(r) if r.ttl > 0 => Ok(()),
            Some(_) => {
                // TTL 0: the lease is gone (expired or revoked).
                self.id = None;
                Err(OpError::new("requested lease not found"))
            }
            None => Err(OpError::new("keep-alive stream closed without a response")),
        }
    }
}

impl Worker for KeepaliveWorker {
    fn call(&mut self, _i: u64) -> (usize, impl Future<Output = Result<(), OpError>> + Send + '_) {
        (0, self.keep_alive_once())
    }
}
