//! `txn-put`: transactions of `--txn-ops` puts, request `i` putting the key numbers
//! `i·ops .. i·ops + ops` (mod `--key-space-size`).

use super::put::Load;
use super::put_op;
use crate::conn::{kv_client, Conn, OpError};
use crate::keys::varint_key;
use crate::output::Out;
use crate::runner::{run_clients, Worker};
use crate::settings::Settings;
use crate::stop::Stop;
use actcd_proto::etcdserverpb::kv_client::KvClient;
use actcd_proto::etcdserverpb::TxnRequest;
use bytes::Bytes;
use clap::Args;
use std::future::Future;

#[derive(Debug, Clone, Args)]
pub struct TxnPutArgs {
    #[command(flatten)]
    pub load: Load,
    /// Number of puts per txn.
    #[arg(long, default_value_t = 1)]
    pub txn_ops: u64,
}

impl TxnPutArgs {
    pub fn validate(&self) -> Result<(), String> {
        self.load.validate()?;
        if self.txn_ops == 0 {
            return Err("--txn-ops must be at least 1".to_string());
        }
        if self.txn_ops > self.load.key_space_size {
            return Err(format!(
                "expected --txn-ops no larger than --key-space-size, got txn-ops({}) key-space-size({})",
                self.txn_ops, self.load.key_space_size
            ));
        }
        Ok(())
    }

    pub async fn run(self, settings: &Settings, stop: &Stop, out: &Out) {
        let a = self;
        let value = a.load.value();
        let worker = |conn| TxnPutWorker { kv: kv_client(conn), a: a.clone(), value: value.clone() };
        run_clients((settings, stop, out), "txn-put", a.load.plan(), "\n", worker).await;
    }
}

/// The transaction `txn-put` sends as request `i`: `ops` puts of keys `(i·ops + j) mod space`.
fn txn_put_request(i: u64, a: &TxnPutArgs, value: &Bytes) -> TxnRequest {
    let (ops, space) = (a.txn_ops, a.load.key_space_size);
    let key = |j: u64| Bytes::from(varint_key(i.wrapping_mul(ops).wrapping_add(j) % space, a.load.key_size));
    TxnRequest { success: (0..ops).map(|j| put_op(key(j), value.clone())).collect(), ..Default::default() }
}

struct TxnPutWorker {
    kv: KvClient<Conn>,
    a: TxnPutArgs,
    value: Bytes,
}

impl Worker for TxnPutWorker {
    fn call(&mut self, i: u64) -> (usize, impl Future<Output = Result<(), OpError>> + Send + '_) {
        let req = txn_put_request(i, &self.a, &self.value);
        (0, async move { self.kv.txn(req).await.map(|_| ()).map_err(OpError::from) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actcd_proto::etcdserverpb::request_op::Request;

    #[test]
    fn txn_put_keys_walk_the_key_space() {
        let load = Load { key_size: 8, val_size: 1, rate: 0, total: 1, key_space_size: 5 };
        let t = txn_put_request(3, &TxnPutArgs { load, txn_ops: 2 }, &Bytes::from_static(b"v"));
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
