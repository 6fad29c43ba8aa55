//! `txn-put`: transactions of `--txn-ops` puts, request `i` putting the key numbers
//! `i·ops .. i·ops + ops` (mod `--key-space-size`).

use crate::conn::{channel_for, connect, kv_client, Conn};
use crate::keys::{check_key_space, random_bytes, varint_key};
use crate::output::Out;
use crate::runner::{run_report, OpError, Plan, Worker};
use crate::settings::Settings;
use crate::stop::Stop;
use actcd_proto::etcdserverpb::kv_client::KvClient;
use actcd_proto::etcdserverpb::request_op::Request;
use actcd_proto::etcdserverpb::{PutRequest, RequestOp, TxnRequest};
use bytes::Bytes;
use clap::Args;
use std::future::Future;

/// `txn-put`'s flags.
#[derive(Debug, Clone, Args)]
pub struct TxnPutArgs {
    /// Key size of txn put.
    #[arg(long, default_value_t = 8)]
    pub key_size: usize,
    /// Value size of txn put.
    #[arg(long, default_value_t = 8)]
    pub val_size: usize,
    /// Number of puts per txn.
    #[arg(long, default_value_t = 1)]
    pub txn_ops: u64,
    /// Maximum txns per second (0 is no limit).
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
    /// Total number of txn requests.
    #[arg(long, default_value_t = 10000)]
    pub total: u64,
    /// Maximum possible keys.
    #[arg(long, default_value_t = 1)]
    pub key_space_size: u64,
}

impl TxnPutArgs {
    /// Checks the flags.
    pub fn validate(&self) -> Result<(), String> {
        check_key_space(self.key_size, self.key_space_size)?;
        if self.txn_ops == 0 {
            return Err("--txn-ops must be at least 1".to_string());
        }
        if self.txn_ops > self.key_space_size {
            return Err(format!(
                "expected --txn-ops no larger than --key-space-size, got txn-ops({}) key-space-size({})",
                self.txn_ops, self.key_space_size
            ));
        }
        Ok(())
    }

    /// Runs `txn-put`.
    pub async fn run(self, settings: &Settings, stop: &Stop, out: &Out) {
        let a = self;
        let Some(channels) = connect(settings, stop, out, &["txn-put"]).await else {
            return;
        };
        let value = Bytes::from(random_bytes(a.val_size));
        let workers: Vec<TxnPutWorker> = (0..settings.clients)
            .map(|c| TxnPutWorker {
                kv: kv_client(channel_for(&channels, c)),
                ops: a.txn_ops,
                space: a.key_space_size,
                key_size: a.key_size,
                value: value.clone(),
            })
            .collect();
        run_report(settings, stop, out, "txn-put", Plan::new(a.total, a.rate), workers, "\n").await;
    }
}

/// A txn op putting `value` at `key`.
pub fn put_op(key: Bytes, value: Bytes) -> RequestOp {
    RequestOp { request: Some(Request::RequestPut(PutRequest { key, value, ..Default::default() })) }
}

/// The transaction `txn-put` sends as request `i`: `ops` puts of keys `(i·ops + j) mod space`.
pub fn txn_put_request(i: u64, ops: u64, space: u64, key_size: usize, value: &Bytes) -> TxnRequest {
    TxnRequest {
        success: (0..ops)
            .map(|j| {
                let n = (i.wrapping_mul(ops).wrapping_add(j)) % space;
                put_op(Bytes::from(varint_key(n, key_size)), value.clone())
            })
            .collect(),
        ..Default::default()
    }
}

struct TxnPutWorker {
    kv: KvClient<Conn>,
    ops: u64,
    space: u64,
    key_size: usize,
    value: Bytes,
}

impl Worker for TxnPutWorker {
    fn call(&mut self, i: u64) -> (usize, impl Future<Output = Result<(), OpError>> + Send + '_) {
        let req = txn_put_request(i, self.ops, self.space, self.key_size, &self.value);
        (0, async move { self.kv.txn(req).await.map(|_| ()).map_err(OpError::from) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn txn_put_keys_walk_the_key_space() {
        let v = Bytes::from_static(b"v");
        let t = txn_put_request(3, 2, 5, 8, &v);
        let keys: Vec<Vec<u8>> = t
            .success
            .iter()
            .filter_map(|op| match &op.request {
                Some(Request::RequestPut(p)) => Some(p.key.to_vec()),
                _ => None,
            })
            .collect();
        // i=3, ops=2: key numbers 6 % 5 = 1 and 7 % 5 = 2.
        assert_eq!(keys, vec![varint_key(1, 8), varint_key(2, 8)]);
    }
}
