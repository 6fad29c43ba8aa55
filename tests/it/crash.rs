//! Durability: SIGKILL under a concurrent write load, several times; every acknowledged write
//! must be readable at its acknowledged revision after the restart.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::GetOptions;

use crate::harness::Server;

/// (key, value, revision) of every acknowledged put.
type Acked = Arc<Mutex<Vec<(String, String, i64)>>>;

async fn write_until_killed(
    server: &Server,
    cycle: usize,
    writers: usize,
    acked: Acked,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    for w in 0..writers {
        let mut client = server.client().await;
        let acked = Arc::clone(&acked);
        tasks.push(tokio::spawn(async move {
            for i in 0.. {
                let key = format!("c{cycle}/w{w}/{}", i % 20);
                let value = format!("{cycle}-{w}-{i}");
                // Never retried: a write whose answer was lost is simply not counted.
                match client.put(key.clone(), value.clone(), None).await {
                    Ok(resp) => {
                        let rev = resp.header().map(|h| h.revision()).unwrap_or(0);
                        acked.lock().unwrap().push((key, value, rev));
                    }
                    Err(_) => return,
                }
            }
        }));
    }
    tasks
}

#[tokio::test]
async fn kill_9_under_load_loses_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let mut last_revision = 0;
    let mut total_acked = 0;
    for cycle in 0..3 {
        let mut server = Server::actcd(dir.path(), &[]).await;
        let mut checker = server.client().await;

        let acked: Acked = Arc::default();
        let tasks = write_until_killed(&server, cycle, 8, Arc::clone(&acked)).await;
        tokio::time::sleep(Duration::from_millis(700)).await;
        server.kill();
        for t in tasks {
            let _ = tokio::time::timeout(Duration::from_secs(10), t).await;
        }
        drop(checker);

        let server = Server::actcd(dir.path(), &[]).await;
        checker = server.client().await;
        let acked = acked.lock().unwrap().clone();
        assert!(!acked.is_empty(), "cycle {cycle}: the load acknowledged nothing");
        let now = checker.get("c", Some(GetOptions::new().with_prefix().with_count_only())).await.unwrap();
        let current = now.header().unwrap().revision();
        let newest_acked = acked.iter().map(|a| a.2).max().unwrap_or(0);
        assert!(
            current >= newest_acked,
            "cycle {cycle}: revision went back from {newest_acked} to {current}"
        );
        assert!(newest_acked > last_revision, "cycle {cycle}: revisions repeated");
        for (key, value, rev) in &acked {
            let got = checker.get(key.as_str(), Some(GetOptions::new().with_revision(*rev))).await.unwrap();
            let kv = got.kvs().first().unwrap_or_else(|| panic!("cycle {cycle}: acked {key}@{rev} is gone"));
            assert_eq!(
                (kv.value(), kv.mod_revision()),
                (value.as_bytes(), *rev),
                "cycle {cycle}: {key}@{rev}"
            );
        }
        total_acked += acked.len();
        last_revision = current;
    }
    eprintln!("kill -9: 3 cycles, {total_acked} acknowledged writes, 0 lost");
}
