//! studio-redact-bench: the redactor's throughput for `docs/PERFORMANCE.md`.
//!
//! `cargo run --release -p studio-tests --bin studio-redact-bench`
//!
//! 64 MiB of typical log text (timestamped service lines, HTTP access lines, JSON events
//! with token counts, compiler and test output, hashes) through one `Redactor`, as a
//! job's drain feeds it: in 64 KiB reads (a busy job), 4 KiB reads (a pipe's buffer), and
//! one line per read (a line-buffered job that the drain keeps up with). With no secret
//! configured (shapes only); with three 40-byte secrets configured and none present; and
//! with one of them, raw, in a Basic credential or percent-encoded, about every 4 KiB.
//! MB/s is 10^6 bytes of input per second, the median of three runs.

use std::{sync::Arc, time::Instant};

use studio_runner::{
    Redaction,
    redact::{Patterns, Redactor},
};

const TOTAL: usize = 64 << 20;
const SECRETS: [&str; 3] = [
    "Xr7pQ2mL9vT4kZ8wB1nC6yH3jF5dG0sA-e2Rt9Uq",
    "ops/db:pa55w0rd!with&symbols=and spaces~1",
    "8f1c0b7e4d2a9c6f3e5b1a7d0c8e2f4b6a9d1c3e",
];

/// A small deterministic generator (xorshift64*), so every run sees the same text.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn hex(&mut self, len: usize) -> String {
        (0..len)
            .map(|_| char::from(b"0123456789abcdef"[self.below(16) as usize]))
            .collect()
    }
}

fn line(rng: &mut Rng) -> String {
    let (h, m, s, ms) = (rng.below(24), rng.below(60), rng.below(60), rng.below(1000));
    let at = format!("2025-11-24T{h:02}:{m:02}:{s:02}.{ms:03}Z");
    match rng.below(8) {
        0 | 1 => format!(
            "{at} INFO  studio::scheduler{{run=019ae1f0-{}}}: dispatched task {} to worker-{} in {} ms (queue depth {})\n",
            rng.hex(12),
            rng.below(100_000),
            rng.below(8),
            rng.below(200),
            rng.below(20)
        ),
        2 => format!(
            "10.0.{}.{} - - [{at}] \"GET /api/runs?limit=50&cursor={} HTTP/1.1\" 200 {} \"-\" \"Mozilla/5.0 (X11; Linux x86_64)\"\n",
            rng.below(256),
            rng.below(256),
            rng.hex(16),
            rng.below(90_000)
        ),
        3 => format!(
            "{{\"level\":\"info\",\"ts\":\"{at}\",\"msg\":\"completion finished\",\"model\":\"large-2\",\"prompt_tokens\":{},\"completion_tokens\":{},\"cost_usd\":0.{:04}}}\n",
            rng.below(8000),
            rng.below(2000),
            rng.below(10_000)
        ),
        4 => format!(
            "warning: unused variable: `item_{}`\n  --> src/pipeline/stage_{}.rs:{}:{}\n",
            rng.below(100),
            rng.below(10),
            rng.below(900),
            rng.below(80)
        ),
        5 => format!(
            "test pipeline::tests::batch_{}_is_processed_in_order ... ok\n",
            rng.below(5000)
        ),
        6 => format!(
            "{at} DEBUG fetched artifact sha256:{} ({} bytes) from https://cache.example.internal/v2/blobs/{}\n",
            rng.hex(64),
            rng.below(10_000_000),
            rng.hex(24)
        ),
        _ => format!(
            "{at} WARN  retrying upload of part {} after a timeout (attempt {} of 5, backoff {} ms)\n",
            rng.below(500),
            rng.below(5) + 1,
            rng.below(4000)
        ),
    }
}

/// 64 MiB of log lines; with `secrets`, one of them in some form about every 4 KiB (how
/// many, the second).
fn text(secrets: bool) -> (Vec<u8>, usize) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut out = String::with_capacity(TOTAL + 4096);
    let mut next_secret = 4096;
    let mut n = 0;
    while out.len() < TOTAL {
        out.push_str(&line(&mut rng));
        if secrets && out.len() >= next_secret {
            let value = SECRETS[n % 3];
            let form = match n % 3 {
                0 => format!("connecting with {value}\n"),
                1 => format!(
                    "> Authorization: Basic {}\n",
                    base64(format!("svc:{value}").as_bytes())
                ),
                _ => format!("GET /hook?key={}\n", percent(value)),
            };
            out.push_str(&form);
            n += 1;
            next_secret += 3584 + rng.below(1024) as usize;
        }
    }
    (out.into_bytes(), n)
}

/// Standard base64, padded (this package does not depend on the base64 crate).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for group in bytes.chunks(3) {
        let n = group
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= group.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn percent(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            b => format!("%{b:02X}"),
        })
        .collect()
}

#[derive(Clone, Copy)]
enum Reads {
    Of(usize),
    Lines,
}

impl Reads {
    fn name(self) -> String {
        match self {
            Reads::Of(n) => format!("{} KiB", n / 1024),
            Reads::Lines => "a line".into(),
        }
    }
}

/// One timed pass, as a drain runs it (one output buffer, emptied after each read): the
/// seconds the redactor took.
fn timed(patterns: &Arc<Patterns>, pieces: &[&[u8]]) -> f64 {
    let mut r = Redactor::new(patterns.clone());
    let mut out = Vec::with_capacity(128 * 1024);
    let t = Instant::now();
    for piece in pieces {
        r.feed_into(piece, &mut out);
        out.clear();
    }
    r.finish_into(&mut out);
    t.elapsed().as_secs_f64()
}

/// What the redactor wrote, untimed: its length and how many values it redacted.
fn written(patterns: &Arc<Patterns>, pieces: &[&[u8]]) -> (usize, usize) {
    let mut r = Redactor::new(patterns.clone());
    let mut out = Vec::new();
    for piece in pieces {
        r.feed_into(piece, &mut out);
    }
    r.finish_into(&mut out);
    for value in SECRETS {
        let shown = out.windows(value.len()).any(|w| w == value.as_bytes());
        assert!(!shown, "a value was written");
    }
    let labels = out.windows(10).filter(|w| w == b"[redacted:").count();
    (out.len(), labels)
}

fn main() {
    println!("# studio-redact-bench\n");
    let (plain, _) = text(false);
    let (seeded, placed) = text(true);
    let none = Arc::new(Patterns::new(&[]).expect("no patterns"));
    let three: Vec<Redaction> = SECRETS
        .iter()
        .enumerate()
        .map(|(i, v)| Redaction {
            name: format!("S{i}"),
            value: (*v).into(),
        })
        .collect();
    let three = Arc::new(Patterns::new(&three).expect("patterns"));
    println!(
        "3 secrets: {:?}, automata {} KiB; {placed} values placed in the text with \
         secrets (\"redacted\" counts the labels written)\n",
        three,
        three.memory_usage() / 1024
    );
    let cases: [(&str, &Arc<Patterns>, &[u8]); 3] = [
        ("no secret configured, none present", &none, &plain),
        ("3 secrets configured, none present", &three, &plain),
        ("3 secrets configured, one every ~4 KiB", &three, &seeded),
    ];
    println!(
        "{:<40} {:>8} {:>8} {:>9} {:>10}",
        "text (64 MiB of log lines)", "reads", "MB/s", "redacted", "out MiB"
    );
    for (name, patterns, text) in cases {
        for reads in [Reads::Of(64 * 1024), Reads::Of(4096), Reads::Lines] {
            let pieces: Vec<&[u8]> = match reads {
                Reads::Of(n) => text.chunks(n).collect(),
                Reads::Lines => text.split_inclusive(|&b| b == b'\n').collect(),
            };
            let mut runs: Vec<f64> = (0..3).map(|_| timed(patterns, &pieces)).collect();
            runs.sort_by(f64::total_cmp);
            let secs = runs[1];
            let (written, labels) = written(patterns, &pieces);
            println!(
                "{:<40} {:>8} {:>8.0} {:>9} {:>10.1}",
                name,
                reads.name(),
                text.len() as f64 / secs / 1e6,
                labels,
                written as f64 / (1 << 20) as f64
            );
        }
    }
}
