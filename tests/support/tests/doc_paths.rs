//! The words stay tied to the code: every path of the tree that the README, docs/ or a crate's
//! `# Layout` comment names exists, and every module a `# Layout` lists is a module of that
//! folder. Moving a file without its docs fails here rather than in a newcomer's hands.
//! (docs/journal/ is a dated record of what was true then, so it is not checked.)

// A failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

/// Top-level folders whose paths the docs name.
const ROOTS: [&str; 14] = [
    "src",
    "edge",
    "store",
    "actors",
    "raft",
    "proto",
    "benches",
    "tests",
    "scripts",
    "docs",
    "grafana",
    "packaging",
    "fuzz",
    ".ci",
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().and_then(Path::parent).unwrap().to_path_buf()
}

/// The tree paths named in `text`: a top-level folder, a slash, then path characters. A
/// trailing `.` or `,` ends the sentence, not the path; `<...>` and `*` mark a pattern.
fn named_paths(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let bytes = text.as_bytes();
    for root in ROOTS {
        let needle = format!("{root}/");
        let mut from = 0;
        while let Some(at) = text[from..].find(&needle) {
            let start = from + at;
            from = start + needle.len();
            // Part of a longer word (`my-src/`, `~/tests/`) or a URL: not a tree path.
            if start > 0
                && matches!(bytes[start - 1], b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'-' | b'/' | b'~' | b'.' | b'$')
            {
                continue;
            }
            let rest = &text[start..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-')))
                .unwrap_or(rest.len());
            let after = rest[end..].chars().next();
            if matches!(after, Some('<' | '*' | '{' | '$')) {
                continue;
            }
            let path = rest[..end].trim_end_matches(['.', ',']);
            // etcd's own files, cited from its source (Go, or `file:line`), are not ours.
            let cited =
                rest[end..].starts_with(':') && rest[end + 1..].starts_with(|c: char| c.is_ascii_digit());
            if path.ends_with(".go") || cited {
                continue;
            }
            if path.len() > needle.len() {
                found.push(path.to_owned());
            }
        }
    }
    found
}

fn docs() -> Vec<PathBuf> {
    let root = workspace();
    let mut files = vec![root.join("README.md"), root.join("grafana/README.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    files
}

#[test]
fn every_path_the_docs_name_exists() {
    let root = workspace();
    let mut missing = Vec::new();
    for doc in docs() {
        let text = std::fs::read_to_string(&doc).unwrap();
        for path in named_paths(&text) {
            if !root.join(&path).exists() {
                missing.push(format!("{}: {path}", doc.strip_prefix(&root).unwrap().display()));
            }
        }
    }
    assert!(missing.is_empty(), "paths named in docs that do not exist:\n{}", missing.join("\n"));
}

/// The Rust file names a text quotes alone, as `` `name.rs` ``, without a folder.
fn quoted_file_names(text: &str) -> Vec<&str> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|quoted| {
            quoted.len() > 3
                && quoted.ends_with(".rs")
                && quoted[..quoted.len() - 3]
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        })
        .collect()
}

/// The names of the tree's Rust files, wherever they are.
fn rust_file_names(dir: &Path, out: &mut std::collections::BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() && name != "target" && !name.starts_with('.') {
            rust_file_names(&path, out);
        } else if name.ends_with(".rs") {
            out.insert(name);
        }
    }
}

/// A file named without its folder (`shared.rs`, the folder said in the sentence) must still
/// be a file of the tree: a rename leaves such names behind as easily as whole paths.
#[test]
fn every_file_name_the_docs_quote_exists() {
    let root = workspace();
    let mut names = std::collections::BTreeSet::new();
    for top in ROOTS {
        if root.join(top).is_dir() {
            rust_file_names(&root.join(top), &mut names);
        }
    }
    let mut missing = Vec::new();
    for doc in docs() {
        let text = std::fs::read_to_string(&doc).unwrap();
        for name in quoted_file_names(&text) {
            if !names.contains(name) {
                missing.push(format!("{}: {name}", doc.strip_prefix(&root).unwrap().display()));
            }
        }
    }
    assert!(quoted_file_names("in `a.rs`, not `b.go`, `c/d.rs` or `x`: `e_2.rs`") == ["a.rs", "e_2.rs"]);
    assert!(missing.is_empty(), "file names quoted in docs that no file has:\n{}", missing.join("\n"));
}

/// Every crate root and folder module with a `# Layout` section, as (file, its folder).
fn layouts(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if !matches!(name.as_str(), "target" | "node_modules" | ".git" | "corpus" | "results") {
                layouts(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            if text.lines().any(|l| l.trim() == "//! # Layout") {
                out.push(path);
            }
        }
    }
}

/// The `[`name`]` items of a `# Layout` section's bullets (`//! - [`name`]: ...`).
fn layout_items(text: &str) -> Vec<String> {
    let mut items = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        let Some(doc) = line.strip_prefix("//!") else {
            if inside {
                break;
            }
            continue;
        };
        let doc = doc.trim();
        if doc == "# Layout" {
            inside = true;
        } else if inside {
            if let Some(item) = doc.strip_prefix("- [`").and_then(|r| r.split_once("`]")).map(|(i, _)| i) {
                items.push(item.to_owned());
            }
        }
    }
    items
}

#[test]
fn every_module_a_layout_lists_exists() {
    let root = workspace();
    let mut files = Vec::new();
    for dir in ROOTS {
        if root.join(dir).is_dir() {
            layouts(&root.join(dir), &mut files);
        }
    }
    assert!(files.len() >= 10, "found only {} `# Layout` sections", files.len());
    let mut missing = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for item in layout_items(&text) {
            // `crate::x` or `super::x` items name modules elsewhere: the compiler checks those.
            let first = item.split("::").next().unwrap();
            if item.contains("::") || first.chars().next().is_some_and(|c| c.is_ascii_uppercase()) {
                continue;
            }
            // Declared in the file (inline, or a file the compiler found), and not only listed.
            let declared = [format!("mod {first};"), format!("mod {first} {{")]
                .iter()
                .any(|d| text.contains(d.as_str()));
            if !declared {
                missing.push(format!("{}: {item}", file.strip_prefix(&root).unwrap().display()));
            }
        }
    }
    assert!(missing.is_empty(), "modules listed under `# Layout` that do not exist:\n{}", missing.join("\n"));
}

#[test]
fn the_path_finder_reads_sentences_and_skips_patterns() {
    let text = "See store/src/mvcc/index.rs, then raft/src/wal. Not ~/tests/x, not mysrc/a, \
                not benches/results/<date>/x, not etcd's tests/e2e/a_test.go or scripts/v.txt:3, \
                but tests/it/main.rs";
    assert_eq!(named_paths(text), vec!["store/src/mvcc/index.rs", "raft/src/wal", "tests/it/main.rs"],);
    let layout =
        "//! Intro.\n//!\n//! # Layout\n//! - [`a`]: one.\n//! - [`b::c`]: two.\n//!   more\n\npub mod a;\n";
    assert_eq!(layout_items(layout), vec!["a", "b::c"]);
}

/// design.md's map has a row for every crate and folder that lists its modules.
#[test]
fn design_md_maps_every_folder_with_a_layout() {
    let root = workspace();
    let design = std::fs::read_to_string(root.join("docs/design.md")).unwrap();
    let map = &design[design.find("## Where the code is").unwrap()..];
    let mut files = Vec::new();
    for dir in ROOTS {
        if root.join(dir).is_dir() {
            layouts(&root.join(dir), &mut files);
        }
    }
    let mut missing = Vec::new();
    for file in files {
        let stem = file.file_stem().unwrap().to_string_lossy().into_owned();
        if !matches!(stem.as_str(), "lib" | "main" | "mod") {
            continue;
        }
        let folder = file.parent().unwrap().strip_prefix(&root).unwrap().display().to_string();
        if !map.contains(&format!("| `{folder}/` |")) {
            missing.push(folder);
        }
    }
    assert!(
        missing.is_empty(),
        "folders with a # Layout and no row in docs/design.md:\n{}",
        missing.join("\n")
    );
}
