//! studio-evidence-bench: the evidence chain's figures for `docs/PERFORMANCE.md`.
//!
//! `cargo run --release -p studio-tests --bin studio-evidence-bench`
//!
//! Seals 100,000 rows shaped as approval steps (each timed: the hashing and the MAC a
//! status change will pay on top of its row), writes them as a bundle, and verifies the
//! bundle from its bytes with and without the key, three times each.

use std::time::{Duration, Instant};

use serde_json::json;
use studio_evidence::{Chain, Entry, GENESIS, Key, verify_bundle, write_bundle};

const ROWS: i64 = 100_000;
const KINDS: [&str; 4] = ["requested", "granted", "consumed", "launched"];

fn pct(samples: &mut [Duration], p: f64) -> f64 {
    samples.sort();
    let i = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[i].as_secs_f64() * 1e6
}

fn main() {
    let key = [0x5a; 32];
    let mut chain = Chain::new(GENESIS, Key::new(&key));
    let mut seal_times = Vec::with_capacity(ROWS as usize);
    let mut rows = Vec::with_capacity(ROWS as usize);
    for seq in 1..=ROWS {
        let entry = Entry {
            seq,
            at_ms: 1_764_000_000_000 + seq * 1_000,
            kind: KINDS[(seq % 4) as usize].into(),
            content: json!({
                "approval_id": format!("019ae1f0-0000-7000-8000-{seq:012}"),
                "run_id": format!("019ae1f0-1111-7000-8000-{seq:012}"),
                "schedule_id": "019ae1f0-2222-7000-8000-000000000001",
                "action_sha256": "ab".repeat(32),
                "principal": "019ae1f0-3333-7000-8000-000000000001",
            }),
        };
        let t = Instant::now();
        let sealed = chain.seal(entry).expect("seal");
        seal_times.push(t.elapsed());
        rows.push(sealed);
    }
    let mut bundle = Vec::new();
    write_bundle(&mut bundle, GENESIS, &rows, &Key::new(&key)).expect("write the bundle");

    println!("# studio-evidence-bench\n");
    println!(
        "sealing a row (canonical JSON, two SHA-256, one HMAC): p50 {:.1} µs, p99 {:.1} µs",
        pct(&mut seal_times, 0.5),
        pct(&mut seal_times, 0.99)
    );
    println!(
        "bundle of {ROWS} rows: {:.1} MiB",
        bundle.len() as f64 / (1024.0 * 1024.0)
    );
    for (label, with_key) in [("hashes only", false), ("hashes and MACs", true)] {
        let mut best = Duration::MAX;
        for _ in 0..3 {
            let key = with_key.then(|| Key::new(&key));
            let t = Instant::now();
            let verified = verify_bundle(bundle.as_slice(), key.as_ref()).expect("verifies");
            best = best.min(t.elapsed());
            assert_eq!(verified.rows, ROWS as usize);
        }
        println!(
            "verifying it, {label}: {:.2} s ({:.0} rows/s), best of 3",
            best.as_secs_f64(),
            ROWS as f64 / best.as_secs_f64()
        );
    }
}
