//! The output of one command: etcd's report text on stdout as it goes, or one JSON document at
//! the end, and the client's own CPU use after it.

use crate::cpu::{self, ClientCpu};
use crate::report::Stats;
use crate::settings::Settings;
use actcd_test_support::procfs::CpuTimes;
use serde::Serialize;
use std::io::Write;
use std::sync::Mutex;
use std::time::Instant;

/// The output of one command: etcd's text on stdout as it goes, or one JSON document at the end.
pub struct Out {
    settings: Settings,
    doc: Mutex<Document>,
    cpu_start: Option<CpuTimes>,
    started: Instant,
}

/// The JSON document `--json` prints.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Document {
    /// The command (`put`, `range`, ...).
    pub command: String,
    /// The endpoints.
    pub endpoints: Vec<String>,
    /// Connections.
    pub conns: usize,
    /// Clients.
    pub clients: usize,
    /// The reports, in the order the text prints them.
    pub reports: Vec<Stats>,
    /// The client's own CPU use over the command.
    pub client_cpu: Option<ClientCpu>,
    /// Why the run stopped early (Ctrl-C, a fatal error, a stall, unreachable endpoint).
    pub aborted: Option<String>,
    /// Warnings and notes also printed on stderr.
    pub notes: Vec<String>,
    /// Command-specific figures (HashKV, read/write op counts).
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl Out {
    /// Output for `command` run with `settings`; the CPU clock starts now.
    pub fn new(command: &str, settings: &Settings) -> Self {
        Self {
            doc: Mutex::new(Document {
                command: command.to_string(),
                endpoints: settings.endpoints.clone(),
                conns: settings.conns,
                clients: settings.clients,
                ..Document::default()
            }),
            settings: settings.clone(),
            cpu_start: cpu::now(),
            started: Instant::now(),
        }
    }

    fn doc(&self) -> std::sync::MutexGuard<'_, Document> {
        self.doc.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What the JSON document holds so far.
    pub fn document(&self) -> Document {
        self.doc().clone()
    }

    /// Whether `--json` is on.
    pub fn json(&self) -> bool {
        self.settings.json
    }

    /// Prints `text` as is (text mode only).
    pub fn print(&self, text: &str) {
        if !self.settings.json {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(text.as_bytes());
            let _ = out.flush();
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

    /// A command-specific figure for the JSON.
    pub fn extra(&self, key: &str, value: serde_json::Value) {
        self.doc().extra.insert(key.to_string(), value);
    }

    /// The whole JSON document, with the client's CPU use until now and the early stop if any.
    pub fn complete(&self, aborted: Option<String>) -> Document {
        let mut doc = self.doc().clone();
        doc.client_cpu = ClientCpu::measure(self.cpu_start, self.started.elapsed());
        doc.aborted = aborted;
        doc
    }

    /// Finishes: the client's CPU use (text) or the JSON document, and the early stop if any
    /// (on stderr, after `program`'s name). Returns the process exit code: 0, or 1 when the run
    /// was stopped early.
    pub fn finish(&self, program: &str, aborted: Option<String>) -> i32 {
        let code = if aborted.is_some() { 1 } else { 0 };
        let doc = self.complete(aborted.clone());
        if self.settings.json {
            match serde_json::to_string_pretty(&doc) {
                Ok(s) => println!("{s}"),
                Err(e) => eprintln!("error: cannot encode the JSON report: {e}"),
            }
        } else if let Some(cpu) = doc.client_cpu {
            self.print(&cpu.to_text());
        }
        if let Some(reason) = aborted {
            eprintln!("{program}: stopped early: {reason}");
        }
        code
    }
}
