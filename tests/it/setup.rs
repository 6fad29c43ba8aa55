//! The README's two commands and what they install: CI runs the README's test command, the
//! README's first etcdctl session works against a started server, and the Debian tools the
//! tests drive are the versions the tests were written against. Debian's package versions are
//! not pinned by scripts/install-deps.sh (a point release removes the old ones), so this is
//! where a tool that moved under the tests gets noticed.

use std::path::Path;
use std::process::Command;

use crate::harness::{etcd_binary, etcdctl_binary, Server};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The body of the ```sh block that follows the README line `<!-- {marker} -->`.
fn readme_block(marker: &str) -> String {
    let readme = std::fs::read_to_string(Path::new(ROOT).join("README.md")).unwrap();
    let tag = format!("<!-- {marker} -->");
    let after = readme.split_once(&tag).unwrap_or_else(|| panic!("README has no {tag}")).1;
    let body = after
        .trim_start()
        .strip_prefix("```sh\n")
        .unwrap_or_else(|| panic!("{tag} is not followed by a sh block"));
    body.split_once("\n```").unwrap_or_else(|| panic!("{tag}'s block is not closed")).0.to_string()
}

#[test]
fn ci_runs_the_readme_test_command() {
    let command = readme_block("test-command");
    assert_eq!(command.lines().count(), 1, "one command: {command:?}");
    let ci = std::fs::read_to_string(Path::new(ROOT).join(".ci/run")).unwrap();
    let last = ci.lines().map(str::trim).rfind(|l| !l.is_empty() && !l.starts_with('#')).unwrap();
    assert_eq!(last, format!("exec {command}"), ".ci/run must end by running the README's test command");

    let server = readme_block("server-command");
    assert_eq!(server.lines().count(), 1, "one command: {server:?}");
    for script in [&command, &server] {
        let path = Path::new(ROOT).join(script.split_whitespace().next().unwrap());
        assert!(path.is_file(), "{} exists", path.display());
    }
}

/// The README's first session, run by bash as a new user would paste it (etcdctl's endpoint
/// from ETCDCTL_ENDPOINTS, since the README talks to the default port).
#[tokio::test]
async fn readme_first_session_runs_against_actcd() {
    let session = readme_block("first-session");
    assert!(session.contains("etcdctl"), "{session}");
    let server = Server::temp_actcd(&[]).await;
    let bin_dir = etcdctl_binary().parent().unwrap().to_path_buf();
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &session])
        .env("ETCDCTL_ENDPOINTS", &server.address)
        .env("PATH", format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default()))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the session failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(!stdout.is_empty());
}

/// `program args` printed a line with `prefix` followed by a version: that version's numbers.
fn version(program: &str, args: &[&str], prefix: &str) -> Vec<u32> {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e} (scripts/install-deps.sh test)"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let rest = text
        .lines()
        .find_map(|l| l.trim().strip_prefix(prefix))
        .unwrap_or_else(|| panic!("{program} {args:?} printed no line starting {prefix:?}: {text}"));
    let numbers: String =
        rest.trim_start_matches(['v', ' ']).chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
    numbers.split('.').filter(|s| !s.is_empty()).map(|s| s.parse().unwrap()).collect()
}

#[test]
fn debian_tools_are_the_versions_the_tests_assume() {
    let etcd = etcd_binary();
    let etcd = etcd.to_str().unwrap();
    let etcdctl = etcdctl_binary();
    let etcdctl = etcdctl.to_str().unwrap();
    // The differential tests compare against etcd 3.4's answers (error texts, Status fields).
    assert_eq!(version(etcd, &["--version"], "etcd Version:")[..2], [3, 4], "etcd 3.4");
    assert_eq!(version(etcdctl, &["version"], "etcdctl version:")[..2], [3, 4], "etcdctl 3.4");
    // The dashboard checks use PromQL and promtool subcommands of Prometheus 2.
    assert!(version("/usr/bin/prometheus", &["--version"], "prometheus, version")[0] >= 2);
    assert!(version("promtool", &["--version"], "promtool, version")[0] >= 2);
    // etcd-client's build: protoc 3.12+ for proto3 optional, and its well-known imports.
    assert!(version("protoc", &["--version"], "libprotoc")[..] >= [3, 12][..]);
    for proto in ["descriptor.proto", "struct.proto"] {
        let path = Path::new("/usr/include/google/protobuf").join(proto);
        assert!(path.is_file(), "{} (Debian's libprotobuf-dev)", path.display());
    }
    // strace's -yy descriptor paths; python3's f-strings and http.server; OpenSSL 3's CLI.
    assert!(version("strace", &["-V"], "strace -- version")[0] >= 5);
    assert!(version("python3", &["--version"], "Python")[..] >= [3, 9][..]);
    assert!(version("curl", &["--version"], "curl")[0] >= 7);
    assert!(version("openssl", &["version"], "OpenSSL")[0] >= 3);
    for tool in ["fiu-run", "fiu-ctrl"] {
        let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .any(|d| d.join(tool).is_file());
        assert!(found, "{tool} on PATH (Debian's fiu-utils)");
    }
}
