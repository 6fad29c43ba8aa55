//! `range key [end]`: the same Range request `--total` times, linearizable or serializable, with
//! `--limit`, `--count-only`, `--keys-only` and `--prefix`; with `--stream`, as RangeStream
//! (etcd 3.7), each stream read to its end.

use crate::conn::{kv_client, Conn, OpError};
use crate::output::Out;
use crate::runner::{run_clients, Plan, Worker};
use crate::settings::Settings;
use crate::stop::Stop;
use actcd_proto::etcdserverpb::kv_client::KvClient;
use actcd_proto::etcdserverpb::RangeRequest;
use actcd_proto::key_range::prefix_end;
use bytes::Bytes;
use clap::{ArgAction, Args};
use std::future::Future;

#[derive(Debug, Clone, Default, Args)]
pub struct RangeArgs {
    /// The key (or the start of the range).
    pub key: String,
    /// The end of the range (exclusive).
    pub end: Option<String>,
    /// Total number of range requests.
    #[arg(long, default_value_t = 10000)]
    pub total: u64,
    /// Maximum requests per second (0 is no limit).
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
    /// Linearizable (l) or Serializable (s).
    #[arg(long, value_enum, default_value = "l")]
    pub consistency: Consistency,
    /// Maximum number of results (0 is no limit).
    #[arg(long, default_value_t = 0)]
    pub limit: i64,
    /// Only get the count.
    #[arg(long, num_args = 0..=1, require_equals = true, default_value_t = false, default_missing_value = "true", action = ArgAction::Set)]
    pub count_only: bool,
    /// Only get the keys.
    #[arg(long, num_args = 0..=1, require_equals = true, default_value_t = false, default_missing_value = "true", action = ArgAction::Set)]
    pub keys_only: bool,
    /// Range over every key with the prefix `key`.
    #[arg(long, num_args = 0..=1, require_equals = true, default_value_t = false, default_missing_value = "true", action = ArgAction::Set)]
    pub prefix: bool,
    /// Use RangeStream instead of unary Range.
    #[arg(long, num_args = 0..=1, require_equals = true, default_value_t = false, default_missing_value = "true", action = ArgAction::Set)]
    pub stream: bool,
}

impl RangeArgs {
    pub fn validate(&self) -> Result<(), String> {
        if self.prefix && self.end.is_some() {
            return Err("--prefix and an end key cannot be combined".to_string());
        }
        if self.limit < 0 {
            return Err(format!("--limit must not be negative, got {}", self.limit));
        }
        Ok(())
    }

    pub async fn run(self, settings: &Settings, stop: &Stop, out: &Out) {
        let req = self.request();
        out.print(if req.serializable {
            "bench with serializable range\n"
        } else {
            "bench with linearizable range\n"
        });
        let worker = |conn| RangeWorker { kv: kv_client(conn), req: req.clone(), stream: self.stream };
        run_clients((settings, stop, out), "range", Plan::new(self.total, self.rate), "", worker).await;
    }

    fn request(&self) -> RangeRequest {
        let key = self.key.as_bytes().to_vec();
        let range_end =
            if self.prefix { prefix_end(&key) } else { self.end.clone().unwrap_or_default().into_bytes() };
        RangeRequest {
            key: Bytes::from(key),
            range_end: Bytes::from(range_end),
            limit: self.limit,
            serializable: self.consistency == Consistency::S,
            keys_only: self.keys_only,
            count_only: self.count_only,
            ..Default::default()
        }
    }
}

/// `--consistency`: linearizable (l) or serializable (s).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Consistency {
    #[default]
    L,
    S,
}

struct RangeWorker {
    kv: KvClient<Conn>,
    req: RangeRequest,
    stream: bool,
}

impl Worker for RangeWorker {
    fn call(&mut self, _i: u64) -> (usize, impl Future<Output = Result<(), OpError>> + Send + '_) {
        let req = self.req.clone();
        (0, async move {
            if !self.stream {
                return self.kv.range(req).await.map(|_| ()).map_err(OpError::from);
            }
            // Each chunk is dropped as it arrives: the request is done at the stream's end.
            let mut chunks = self.kv.range_stream(req).await?.into_inner();
            while chunks.message().await?.is_some() {}
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::execute::parse_flags;

    #[test]
    fn flags_make_the_request_and_bad_combinations_are_refused() {
        let parse = |args: &[&str]| parse_flags::<RangeArgs>(args).expect("parses");
        let r = parse(&["--prefix", "foo", "--consistency", "s"]).request();
        assert_eq!((&r.key[..], &r.range_end[..], r.serializable), (&b"foo"[..], &b"fop"[..], true));
        let a = parse(&["a", "z", "--limit", "5"]);
        let r = a.request();
        assert_eq!((&r.range_end[..], r.limit, a.stream, r.serializable), (&b"z"[..], 5, false, false));
        assert!(parse(&["--stream", "a"]).stream);

        assert!(parse(&["--prefix", "a", "b"]).validate().is_err());
        assert!(parse_flags::<RangeArgs>(&["a", "--consistency", "x"]).is_err());
        assert!(parse_flags::<RangeArgs>(&[]).is_err());
    }
}
