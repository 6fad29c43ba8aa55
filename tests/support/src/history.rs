//! A recorded history of KV calls: what each client asked, when (a monotonic clock), and what
//! came back. The linearizability checker reads it; the live runs and the simulated server
//! write it.

use std::time::Instant;

pub use crate::etcd_model::{Request, Response};

/// Nanoseconds on the history's monotonic clock; `NEVER` is the return time of a call whose
/// outcome is unknown (it may take effect at any time after its call).
pub type Nanos = u64;

/// The return time of a call that never returned.
pub const NEVER: Nanos = u64::MAX;

/// How a call ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Answered: the store's answer.
    Ok(Response),
    /// etcd's ErrCompacted: the revision asked for is below the compacted revision.
    Compacted,
    /// etcd's ErrFutureRev: the revision asked for is above the current revision.
    FutureRevision,
    /// A timeout, a lost connection or another error: a write may or may not have happened.
    Unknown(String),
}

impl Outcome {
    /// The outcome a gRPC answer stands for.
    pub fn from_result(result: Result<Response, tonic::Status>) -> Outcome {
        match result {
            Ok(response) => Outcome::Ok(response),
            Err(s) if s.message() == "etcdserver: mvcc: required revision has been compacted" => {
                Outcome::Compacted
            }
            Err(s) if s.message() == "etcdserver: mvcc: required revision is a future revision" => {
                Outcome::FutureRevision
            }
            Err(s) => Outcome::Unknown(format!("{:?}: {}", s.code(), s.message())),
        }
    }
}

/// One call by one client.
#[derive(Clone, Debug, PartialEq)]
pub struct Op {
    /// Who made the call (a client whose call had an unknown outcome goes on under another id).
    pub client: usize,
    /// When the call was made.
    pub call: Nanos,
    /// `NEVER` when the outcome is unknown.
    pub ret: Nanos,
    /// What was asked.
    pub request: Request,
    /// What came back.
    pub outcome: Outcome,
}

impl Op {
    /// Whether the request can change the store (a read-only txn cannot).
    pub fn may_write(&self) -> bool {
        match &self.request {
            Request::Put(_) | Request::Delete(_) => true,
            Request::Txn(t) => t.success.iter().chain(&t.failure).any(|op| {
                !matches!(op.request, Some(actcd_proto::etcdserverpb::request_op::Request::RequestRange(_)))
            }),
            Request::Range(_) | Request::Compact(_) => false,
        }
    }

    /// A short description for violation reports.
    pub fn describe(&self) -> String {
        let ret = if self.ret == NEVER { "never".to_string() } else { format!("{:.3} ms", ms(self.ret)) };
        let what = match &self.request {
            Request::Range(r) => {
                let what = if r.range_end.is_empty() {
                    format!("get {}", show(&r.key))
                } else {
                    format!("range {}..{}", show(&r.key), show(&r.range_end))
                };
                let at = if r.revision == 0 { "latest".to_string() } else { r.revision.to_string() };
                format!("{what} at {at}")
            }
            Request::Put(p) => format!("put {}={}", show(&p.key), show(&p.value)),
            Request::Delete(d) if d.range_end.is_empty() => format!("delete {}", show(&d.key)),
            Request::Delete(d) => format!("delete {}..{}", show(&d.key), show(&d.range_end)),
            Request::Txn(t) => {
                format!("txn ({} compares, {}/{} ops)", t.compare.len(), t.success.len(), t.failure.len())
            }
            Request::Compact(c) => format!("compact {}", c.revision),
        };
        let outcome = match &self.outcome {
            Outcome::Ok(r) => format!("ok at revision {}", r.revision()),
            Outcome::Compacted => "compacted".to_string(),
            Outcome::FutureRevision => "future revision".to_string(),
            Outcome::Unknown(e) => format!("unknown ({e})"),
        };
        format!("client {} {what} → {outcome} [{:.3} ms, {ret}]", self.client, ms(self.call))
    }
}

fn ms(n: Nanos) -> f64 {
    n as f64 / 1e6
}

/// Bytes as text where they are text.
pub fn show(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The history's clock: nanoseconds since it started.
#[derive(Clone, Copy)]
pub struct Clock(Instant);

impl Clock {
    /// A clock starting now.
    pub fn start() -> Self {
        Clock(Instant::now())
    }

    /// Nanoseconds since the clock started.
    pub fn now(&self) -> Nanos {
        self.0.elapsed().as_nanos() as Nanos
    }
}
