//! The output of one command: etcd's report text on stdout as it goes, or one JSON document at
//! the end, and after it the client's own CPU use (from `/proc/self/stat`), so that a report
//! shows whether the client, sharing the machine with the server, was the bottleneck.

use crate::report::Stats;
use crate::settings::Settings;
use actcd_test_support::procfs::{cpu_times, CpuTimes, Proc};
use serde::Serialize;
use std::io::Write;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// This process's CPU time so far, `None` where `/proc` is missing.
pub fn cpu_now() -> Option<CpuTimes> {
    cpu_times(Proc::Me)
}

#[derive(Debug, Clone, Serialize)]
pub struct ClientCpu {
    pub user_secs: f64,
    pub sys_secs: f64,
    /// Wall-clock seconds of the measured span.
    pub wall_secs: f64,
    pub cores: usize,
    /// (user + sys) / wall: how many cores the client kept busy on average.
    pub cores_used: f64,
}

impl ClientCpu {
    /// The use between `start` and now over `wall`; `None` where `/proc` is missing.
    pub fn measure(start: Option<CpuTimes>, wall: Duration) -> Option<Self> {
        let used = cpu_now()?.since(start?);
        let wall_secs = wall.as_secs_f64();
        Some(Self {
            user_secs: used.user,
            sys_secs: used.sys,
            wall_secs,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cores_used: if wall_secs > 0.0 { (used.user + used.sys) / wall_secs } else { 0.0 },
        })
    }
}

/// The JSON document `--json` prints.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Document {
    pub command: String,
    pub endpoints: Vec<String>,
    pub conns: usize,
    pub clients: usize,
    /// The reports, in the order the text prints them.
    pub reports: Vec<Stats>,
    pub client_cpu: Option<ClientCpu>,
    /// Why the run stopped early (Ctrl-C, a fatal error, a stall, unreachable endpoint).
    pub aborted: Option<String>,
    /// Warnings and notes also printed on stderr.
    pub notes: Vec<String>,
    /// Command-specific figures (HashKV, read/write op counts).
    pub extra: serde_json::Map<String, serde_json::Value>,
}

pub struct Out {
    settings: Settings,
    doc: Mutex<Document>,
    cpu_start: Option<CpuTimes>,
    started: Instant,
}

impl Out {
    /// Output for `command` run with `settings`; the CPU clock starts now.
    pub fn new(command: &str, settings: &Settings) -> Self {
        let doc = Document {
            command: command.to_string(),
            endpoints: settings.endpoints.clone(),
            conns: settings.conns,
            clients: settings.clients,
            ..Document::default()
        };
        Self {
            doc: Mutex::new(doc),
            settings: settings.clone(),
            cpu_start: cpu_now(),
            started: Instant::now(),
        }
    }

    fn doc(&self) -> MutexGuard<'_, Document> {
        self.doc.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn document(&self) -> Document {
        self.doc().clone()
    }

    pub fn json(&self) -> bool {
        self.settings.json
    }

    /// Prints `text` as is (text mode only).
    pub fn print(&self, text: &str) {
        if !self.settings.json {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
        }
    }

    /// Prints a report (text mode: `before`, etcd's report text, `after`) or adds it to the JSON.
    pub fn report(&self, before: &str, stats: Stats, after: &str) {
        if self.settings.json {
            self.doc().reports.push(stats);
        } else {
            self.print(&format!("{before}{}{after}", stats.to_text(self.settings.precise)));
        }
    }

    /// A warning or note: on stderr, and in the JSON's notes.
    pub fn note(&self, text: impl Into<String>) {
        let text = text.into();
        eprintln!("{text}");
        self.doc().notes.push(text);
    }

    pub fn extra(&self, key: &str, value: impl Serialize) {
        let value = serde_json::to_value(value).unwrap_or_else(|e| format!("cannot encode: {e}").into());
        self.doc().extra.insert(key.to_string(), value);
    }

    /// The whole JSON document, with the client's CPU use until now and the early stop if any.
    pub fn complete(&self, aborted: Option<String>) -> Document {
        let mut doc = self.doc().clone();
        doc.client_cpu = ClientCpu::measure(self.cpu_start, self.started.elapsed());
        doc.aborted = aborted;
        doc
    }

    /// Finishes: the client's CPU use (text) or the JSON document, and the early stop if any (on
    /// stderr, after `program`'s name). Returns the exit code: 0, or 1 when stopped early.
    pub fn finish(&self, program: &str, aborted: Option<String>) -> i32 {
        let code = i32::from(aborted.is_some());
        let doc = self.complete(aborted.clone());
        if self.settings.json {
            match serde_json::to_string_pretty(&doc) {
                Ok(s) => println!("{s}"),
                Err(e) => eprintln!("error: cannot encode the JSON report: {e}"),
            }
        } else if let Some(c) = doc.client_cpu {
            self.print(&format!(
                "\nClient CPU:\n  User:\t{:.2} secs.\n  System:\t{:.2} secs.\n  Busy:\t{:.2} of {} cores over {:.2} secs.\n",
                c.user_secs, c.sys_secs, c.cores_used, c.cores, c.wall_secs
            ));
        }
        if let Some(reason) = aborted {
            eprintln!("{program}: stopped early: {reason}");
        }
        code
    }
}
