//! Records the compiler's version for `actcd --version` (etcd prints its Go version there).

use std::process::Command;

fn main() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map(|text| text.trim().to_owned())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=ACTCD_RUSTC_VERSION={version}");
    println!("cargo:rerun-if-env-changed=ACTCD_GIT_SHA");
    println!("cargo:rerun-if-changed=build.rs");
}
