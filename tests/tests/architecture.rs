//! The invariants of docs/ARCHITECTURE.md that the source itself can show, checked on the
//! source: the crate graph, where SQL and environment reads may live, a `//!` comment on
//! every module, and no dependency a crate does not use.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
};

use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// Each workspace crate: its directory and its dependencies (normal and build).
fn crates() -> BTreeMap<String, (PathBuf, Vec<String>)> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(root())
        .output()
        .expect("cargo metadata");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).expect("metadata JSON");
    meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| {
            let dir = PathBuf::from(p["manifest_path"].as_str().expect("manifest"))
                .parent()
                .expect("crate dir")
                .to_path_buf();
            let deps = p["dependencies"]
                .as_array()
                .expect("dependencies")
                .iter()
                .filter(|d| d["kind"].as_str() != Some("dev"))
                .map(|d| d["name"].as_str().unwrap_or_default().to_owned())
                .collect();
            (
                p["name"].as_str().unwrap_or_default().to_owned(),
                (dir, deps),
            )
        })
        .collect()
}

fn studio_deps(deps: &[String]) -> Vec<&str> {
    deps.iter()
        .map(String::as_str)
        .filter(|d| d.starts_with("studio-"))
        .collect()
}

#[test]
fn the_crate_graph_runs_one_way() {
    let crates = crates();
    let deps = |name: &str| {
        &crates
            .get(name)
            .unwrap_or_else(|| panic!("no crate {name}"))
            .1
    };
    assert!(
        studio_deps(deps("studio-contract")).is_empty(),
        "contract depends on no Studio crate"
    );
    assert_eq!(
        studio_deps(deps("studio-frontdoor")),
        ["studio-contract"],
        "the front door knows the error contract and the Host rule, no route and no store"
    );
    assert_eq!(
        studio_deps(deps("studio-api")),
        ["studio-contract", "studio-schedule"],
        "the API contract stands on contract and the spec only"
    );
    assert!(
        !deps("studio-app").iter().any(|d| d == "studio-daemon"),
        "studio-app never depends on studio-daemon"
    );
    assert!(
        !deps("studio-daemon")
            .iter()
            .any(|d| d == "studio-app" || d == "studio-supervisor"),
        "studiod knows neither the app nor the supervisor"
    );
    for db in ["sqlx", "studio-store"] {
        assert!(
            !deps("studio-supervisor").iter().any(|d| d == db),
            "the supervisor never opens a database ({db})"
        );
    }
}

/// Every `.rs` file under a crate's `src/`, as `(path from the root, text)`.
fn sources() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (name, (dir, _)) in crates() {
        if name == "studio-tests" {
            continue;
        }
        let mut stack = vec![dir.join("src")];
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let text = std::fs::read_to_string(&path).expect("source");
                    let shown = path
                        .strip_prefix(root())
                        .unwrap_or(&path)
                        .display()
                        .to_string();
                    out.push((shown, text));
                }
            }
        }
    }
    out.sort();
    out
}

fn is_test_file(path: &str) -> bool {
    path.ends_with("tests.rs") || path.contains("/tests/") || path.ends_with("testing.rs")
}

#[test]
fn every_module_says_what_it_is() {
    let missing: Vec<String> = sources()
        .into_iter()
        .filter(|(_, text)| {
            !text
                .lines()
                .find(|l| !l.trim().is_empty() && !l.starts_with("#!["))
                .is_some_and(|l| l.starts_with("//!"))
        })
        .map(|(path, _)| path)
        .collect();
    assert!(
        missing.is_empty(),
        "modules without a `//!` comment: {missing:?}"
    );
}

#[test]
fn sql_lives_in_store_modules_only() {
    let outside: Vec<String> = sources()
        .into_iter()
        .filter(|(path, _)| !is_test_file(path) && !path.contains("store"))
        .filter(|(_, text)| {
            ["sqlx::query", "query_scalar(", "query_as("]
                .iter()
                .any(|q| text.contains(q))
        })
        .map(|(path, _)| path)
        .collect();
    assert!(
        outside.is_empty(),
        "SQL outside a store module: {outside:?}"
    );
}

#[test]
fn the_environment_is_read_in_config_modules_only() {
    // `entry.rs` hands `std::env::var` to its config; `home.rs` resolves the home itself.
    let config = |path: &str| {
        path.ends_with("/config.rs")
            || path.ends_with("/entry.rs")
            || path == "contract/src/home.rs"
    };
    let outside: Vec<String> = sources()
        .into_iter()
        .filter(|(path, _)| !is_test_file(path) && !config(path))
        .filter(|(_, text)| {
            text.lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .take_while(|l| !l.starts_with("#[cfg(test)]"))
                .any(|l| l.contains("env::var") || l.contains("env::vars"))
        })
        .map(|(path, _)| path)
        .collect();
    assert!(
        outside.is_empty(),
        "environment read outside a config module: {outside:?}"
    );
}

#[test]
fn every_dependency_is_used() {
    let mut unused = Vec::new();
    for (name, (dir, deps)) in crates() {
        let mut text = String::new();
        for sub in ["src", "tests", "benches", "examples", "build.rs"] {
            let mut stack = vec![dir.join(sub)];
            while let Some(p) = stack.pop() {
                if p.is_dir() {
                    stack.extend(
                        std::fs::read_dir(&p)
                            .into_iter()
                            .flatten()
                            .flatten()
                            .map(|e| e.path()),
                    );
                } else if p.extension().is_some_and(|e| e == "rs" || e == "html") {
                    text.push_str(&std::fs::read_to_string(&p).unwrap_or_default());
                }
            }
        }
        for dep in deps {
            // The protobuf code generated into OUT_DIR is what uses these.
            if name == "studio-proto" && (dep == "prost" || dep == "tonic-prost") {
                continue;
            }
            let ident = dep.replace('-', "_");
            if !text.contains(&format!("{ident}::"))
                && !text.contains(&format!("use {ident}"))
                && !text.contains(&format!("{ident}!"))
                && !text.contains(&format!("#[{ident}"))
            {
                unused.push(format!("{name} → {dep}"));
            }
        }
    }
    assert!(unused.is_empty(), "dependencies nothing uses: {unused:?}");
}
