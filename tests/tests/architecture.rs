//! The invariants of docs/ARCHITECTURE.md that the source itself can show, checked on the
//! source: the crate graph, where SQL and environment reads may live, a `//!` comment on
//! every module, no dependency a crate does not use, and module imports that run one way
//! inside studio-app and the supervisor.

use std::{
    collections::{BTreeMap, BTreeSet},
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
        studio_deps(deps("studio-evidence")),
        ["studio-contract"],
        "evidence verifies offline: no store, no daemon, no route"
    );
    assert_eq!(
        studio_deps(deps("studio-archive")),
        ["studio-contract", "studio-evidence"],
        "archives are written and read offline: no store, no daemon, no route"
    );
    for dep in ["sqlx", "tokio"] {
        assert!(
            !deps("studio-archive").iter().any(|d| d == dep),
            "studio-archive is synchronous and opens no database ({dep})"
        );
    }
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
        for path in rust_files(&dir.join("src")) {
            let text = std::fs::read_to_string(&path).expect("source");
            let shown = path
                .strip_prefix(root())
                .unwrap_or(&path)
                .display()
                .to_string();
            out.push((shown, text));
        }
    }
    out.sort();
    out
}

/// Every `.rs` file under `dir`, at any depth.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files
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

/// `text` without comments, and with the characters that shape code (braces, `;`, `:`,
/// `#`) masked inside string and char literals, so that neither a path in prose nor a
/// brace in a format string counts as code.
fn code_of(text: &str) -> String {
    let s = text.as_bytes();
    let mut out = Vec::with_capacity(s.len());
    let mask = |b: u8| match b {
        b'{' | b'}' | b';' | b':' | b'#' | b'$' => b'_',
        b => b,
    };
    let mut i = 0;
    while i < s.len() {
        let rest = &s[i..];
        let after_ident = i > 0 && is_ident_byte(s[i - 1]) && s[i - 1] != b'b';
        if rest.starts_with(b"//") {
            while i < s.len() && s[i] != b'\n' {
                i += 1;
            }
        } else if rest.starts_with(b"/*") {
            let mut depth = 0;
            while i < s.len() {
                if s[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if s[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if !after_ident && (rest.starts_with(b"r#\"") || rest.starts_with(b"r\"")) {
            let hashes = rest[1..].iter().take_while(|b| **b == b'#').count();
            let mut close = vec![b'"'];
            close.extend(std::iter::repeat_n(b'#', hashes));
            out.push(b'"');
            i += 2 + hashes;
            while i < s.len() && !s[i..].starts_with(&close) {
                out.push(mask(s[i]));
                i += 1;
            }
            out.push(b'"');
            i += close.len();
        } else if s[i] == b'"' || (s[i] == b'\'' && s.get(i + 2) == Some(&b'\'')) {
            // A string, or a char literal such as `'{'` or `'"'`.
            let quote = s[i];
            out.push(quote);
            i += 1;
            while i < s.len() && s[i] != quote {
                if s[i] == b'\\' {
                    out.push(b'_');
                    i += 1;
                }
                if let Some(b) = s.get(i) {
                    out.push(mask(*b));
                }
                i += 1;
            }
            out.push(quote);
            i += 1;
        } else if s[i] == b'\'' && s.get(i + 1) == Some(&b'\\') {
            // An escaped char literal: `'\n'`, `'\''`, `'\u{..}'`.
            i += 3;
            while i < s.len() && s[i] != b'\'' {
                i += 1;
            }
            i += 1;
            out.extend_from_slice(b"' '");
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn is_ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

fn skip_ws(s: &[u8], i: &mut usize) {
    while s.get(*i).is_some_and(u8::is_ascii_whitespace) {
        *i += 1;
    }
}

fn ident(s: &[u8], i: &mut usize) -> String {
    let start = *i;
    while s.get(*i).copied().is_some_and(is_ident_byte) {
        *i += 1;
    }
    String::from_utf8_lossy(&s[start..*i]).into_owned()
}

/// The paths named by the use tree (or inline path) at `s[*i..]`, each as its segments
/// after `prefix`: `a::{b, c::d as e}` gives `a::b` and `a::c::d`.
fn use_tree(s: &[u8], i: &mut usize, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let depth = prefix.len();
    loop {
        skip_ws(s, i);
        match s.get(*i) {
            Some(b'{') => {
                *i += 1;
                loop {
                    skip_ws(s, i);
                    match s.get(*i) {
                        None => break,
                        Some(b'}') => {
                            *i += 1;
                            break;
                        }
                        Some(b',') => *i += 1,
                        Some(_) => {
                            let before = *i;
                            use_tree(s, i, prefix, out);
                            if *i == before {
                                *i += 1;
                            }
                        }
                    }
                }
                break;
            }
            Some(b) if is_ident_byte(*b) => {
                let name = ident(s, i);
                if name != "self" {
                    prefix.push(name);
                }
                if s[*i..].starts_with(b"::") {
                    *i += 2;
                    continue;
                }
                out.push(prefix.clone());
                let mut j = *i;
                skip_ws(s, &mut j);
                if s[j..].starts_with(b"as ") {
                    *i = j + 3;
                    skip_ws(s, i);
                    ident(s, i);
                }
                break;
            }
            _ => {
                out.push(prefix.clone());
                break;
            }
        }
    }
    prefix.truncate(depth);
}

/// The end of the item that starts at `s[i..]`: its `;`, or the `}` closing its body.
fn item_end(s: &[u8], mut i: usize) -> usize {
    let is_use = s[i..].starts_with(b"use ");
    let mut depth = 0usize;
    while i < s.len() {
        match s[i] {
            b'{' => depth += 1,
            b'}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 && !is_use {
                    return i + 1;
                }
            }
            b';' if depth == 0 => return i + 1,
            _ => {}
        }
        i += 1;
    }
    i
}

/// `code` without its `#[cfg(test)]` items, and the files of the `#[cfg(test)] mod x;`
/// among them (relative to the crate's `src/`).
fn without_test_items(code: &str, file: &str) -> (String, Vec<String>) {
    const MARK: &str = "#[cfg(test)]";
    let s = code.as_bytes();
    let dir = Path::new(file).parent().unwrap_or(Path::new(""));
    let own = if file == "mod.rs" || file.ends_with("/mod.rs") || file == "lib.rs" {
        dir.to_path_buf()
    } else {
        PathBuf::from(file.trim_end_matches(".rs"))
    };
    let (mut kept, mut files, mut from) = (String::new(), Vec::new(), 0);
    while let Some(at) = code[from..].find(MARK).map(|n| from + n) {
        kept.push_str(&code[from..at]);
        let mut i = at + MARK.len();
        let mut path_attr = None;
        loop {
            skip_ws(s, &mut i);
            if !s[i..].starts_with(b"#[") {
                break;
            }
            let close = code[i..].find(']').map_or(s.len(), |n| i + n + 1);
            if let Some(p) = code[i..close].split('"').nth(1) {
                path_attr = Some(p.to_owned());
            }
            i = close;
        }
        for vis in ["pub(crate) ", "pub(super) ", "pub "] {
            if s[i..].starts_with(vis.as_bytes()) {
                i += vis.len();
            }
        }
        let end = item_end(s, i);
        let item = &code[i..end];
        if let Some(name) = item.strip_prefix("mod ").and_then(|m| m.strip_suffix(';')) {
            let name = name.trim();
            match path_attr {
                Some(p) => files.push(dir.join(p).display().to_string()),
                None => {
                    files.push(own.join(format!("{name}.rs")).display().to_string());
                    files.push(own.join(name).join("mod.rs").display().to_string());
                }
            }
        }
        from = end;
    }
    kept.push_str(&code[from..]);
    (kept, files)
}

/// A crate's module import graph at file granularity: each module (its file's path under
/// `src/` without `.rs` or `/mod.rs`, `lib` for the root) and the modules it names
/// through `crate::…` and `super::…` paths. A path names the deepest module it reaches
/// (`crate::a::b::f` names `a/b` if that file exists, else `a`); one that reaches no
/// module names an item of the crate root, which is no edge. Test modules and test files
/// are left out.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    for path in rust_files(src) {
        let rel = path
            .strip_prefix(src)
            .expect("under src")
            .display()
            .to_string();
        // `main.rs` is a binary's own crate root, not a module of the library.
        if rel != "main.rs" && !rel.ends_with("tests.rs") {
            let text = std::fs::read_to_string(&path).expect("source");
            files.push((rel, text));
        }
    }
    let mut test_files = BTreeSet::new();
    let mut code = BTreeMap::new();
    for (rel, text) in files {
        let (kept, tests) = without_test_items(&code_of(&text), &rel);
        test_files.extend(tests);
        code.insert(rel, kept);
    }
    code.retain(|rel, _| !test_files.contains(rel));
    let module = |rel: &str| {
        let m = rel.trim_end_matches(".rs").trim_end_matches("/mod");
        if m == "lib" || m == "mod" {
            "lib".to_owned()
        } else {
            m.to_owned()
        }
    };
    let modules: BTreeSet<String> = code.keys().map(|rel| module(rel)).collect();
    let resolve = |segments: &[String]| {
        (1..=segments.len())
            .rev()
            .map(|n| segments[..n].join("/"))
            .find(|m| modules.contains(m))
    };
    let mut graph = BTreeMap::new();
    for (rel, text) in &code {
        let from = module(rel);
        let parent: Vec<String> = match from.rsplit_once('/') {
            Some((p, _)) => p.split('/').map(str::to_owned).collect(),
            None => Vec::new(),
        };
        let s = text.as_bytes();
        let mut paths = Vec::new();
        for (anchor, base) in [("crate::", Vec::new()), ("super::", parent)] {
            for (at, _) in text.match_indices(anchor) {
                let before = at.checked_sub(1).map(|b| s[b]);
                if before.is_some_and(|b| is_ident_byte(b) || b == b'$' || b == b':') {
                    continue;
                }
                let mut i = at + anchor.len();
                let mut prefix = base.clone();
                // `super::super::x` climbs once more.
                while anchor == "super::" && s[i..].starts_with(b"super::") {
                    prefix.pop();
                    i += "super::".len();
                }
                use_tree(s, &mut i, &mut prefix, &mut paths);
            }
        }
        let targets: BTreeSet<String> = paths
            .iter()
            .filter_map(|p| resolve(p))
            .filter(|m| *m != from)
            .collect();
        graph.insert(from, targets);
    }
    graph
}

/// A circle of imports in `graph`, if there is one, as the modules along it.
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit<'a>(
        m: &'a str,
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|p| *p == m) {
            let mut circle: Vec<String> = path[start..].iter().map(|p| (*p).to_owned()).collect();
            circle.push(m.to_owned());
            return Some(circle);
        }
        if !done.insert(m) {
            return None;
        }
        path.push(m);
        for next in graph.get(m).into_iter().flatten() {
            if let Some(circle) = visit(next, graph, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|m| visit(m, graph, &mut Vec::new(), &mut done))
}

#[test]
fn module_imports_run_one_way() {
    for krate in ["studio-app", "supervisor"] {
        let graph = module_graph(&root().join(krate).join("src"));
        if let Some(circle) = cycle(&graph) {
            panic!(
                "{krate}: modules import each other in a circle: {}",
                circle.join(" → ")
            );
        }
    }

    // studio-app: state, upstream client, handlers, then router and server.
    let app = module_graph(&root().join("studio-app/src"));
    let handler = |m: &str| {
        [
            "http",
            "status",
            "pairing",
            "forward",
            "attention/routes",
            "pages",
        ]
        .contains(&m)
            || m.starts_with("pages/")
    };
    for (lower, may_use_state) in [
        ("state", true),
        ("proxy", false),
        ("pool", false),
        ("daemon", false),
        ("attention/store", false),
        ("attention/source", false),
    ] {
        let imports = app
            .get(lower)
            .unwrap_or_else(|| panic!("studio-app has no module {lower}"));
        let above: Vec<&String> = imports
            .iter()
            .filter(|m| handler(m) || (!may_use_state && *m == "state"))
            .collect();
        assert!(
            above.is_empty(),
            "studio-app's {lower} imports from a layer above it: {above:?}"
        );
    }

    // The supervisor: what `studio up` runs and the user commands are two trees; only the
    // CLI's `up` reaches the supervising tree, through its entry point.
    let supervisor = module_graph(&root().join("supervisor/src"));
    fn tree(m: &str) -> Option<&str> {
        m.split('/')
            .next()
            .filter(|t| ["cli", "supervise"].contains(t))
    }
    for tree_root in ["cli", "supervise"] {
        assert!(
            supervisor.contains_key(tree_root),
            "the supervisor has no {tree_root} tree"
        );
    }
    // What both trees use sits at the root and imports from neither; the root itself
    // (`lib`, `entry`) dispatches to both.
    let shared = ["config", "output", "control", "pairing", "logs", "testdir"];
    for (m, imports) in &supervisor {
        if tree(m).is_some() || m == "lib" || m == "entry" {
            continue;
        }
        assert!(
            shared.contains(&m.as_str()),
            "the supervisor's {m} is in neither tree (cli/, supervise/) nor among what both use"
        );
        let into: Vec<&String> = imports.iter().filter(|i| tree(i).is_some()).collect();
        assert!(
            into.is_empty(),
            "the supervisor's shared {m} imports from a tree: {into:?}"
        );
    }
    let crossing: Vec<String> = supervisor
        .iter()
        .flat_map(|(from, to)| to.iter().map(move |to| (from, to)))
        .filter(|(from, to)| tree(from).is_some_and(|f| tree(to).is_some_and(|t| f != t)))
        // `crate::supervise::up` names the function the tree re-exports, though by the
        // rule above it resolves to its (private) file.
        .filter(|(from, to)| {
            !(*from == "cli" && ["supervise", "supervise/up"].contains(&to.as_str()))
        })
        .map(|(from, to)| format!("{from} → {to}"))
        .collect();
    assert!(
        crossing.is_empty(),
        "the supervisor's trees import each other (only cli → supervise, for `up`): {crossing:?}"
    );
}
