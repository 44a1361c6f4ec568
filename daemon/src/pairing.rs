//! Pairing codes: their shape, the bound on outstanding codes, the failure rate limit
//! and the past-epoch classification. The codes themselves are rows (their digests:
//! `store::identity`), so a code minted through one studiod of a cluster is redeemed
//! through any; what is here is in memory, with the clock passed in, so every rule is
//! testable without sleeping. The rate limit is each studiod's own.

use std::collections::VecDeque;

use studio_contract::{
    error::{ApiError, Code},
    secret::{self, Digest},
};

/// A code is the epoch's first 8 hex chars followed by 192 random bits in base64url.
pub(crate) const PREFIX_LEN: usize = 8;
const CODE_BYTES: usize = 24;
/// At most this many codes of an epoch are outstanding; minting another drops the oldest.
pub(crate) const MAX_OUTSTANDING: usize = 16;
pub(crate) const FAILURE_LIMIT: usize = 10;
pub(crate) const FAILURE_WINDOW_MS: i64 = 60_000;

/// A new code: shown once, stored only as its digest.
#[derive(Debug)]
pub(crate) struct Minted {
    pub code: String,
    pub digest: Digest,
    pub expires_at_ms: i64,
}

#[derive(Debug)]
pub(crate) struct CodeBook {
    prefix: String,
    past_prefixes: Vec<String>,
    ttl_ms: i64,
    failures: VecDeque<i64>,
}

fn prefix_of(epoch: &str) -> String {
    epoch.get(..PREFIX_LEN).unwrap_or(epoch).to_owned()
}

impl CodeBook {
    pub(crate) fn new(epoch: &str, past_epochs: &[String], ttl_ms: i64) -> Self {
        let prefix = prefix_of(epoch);
        Self {
            past_prefixes: past_epochs
                .iter()
                .map(|e| prefix_of(e))
                .filter(|p| *p != prefix)
                .collect(),
            prefix,
            ttl_ms,
            failures: VecDeque::new(),
        }
    }

    /// The book of the epoch that follows this one: the failures seen so far still count.
    pub(crate) fn next(&self, old: &str, new: &str) -> Self {
        let mut past = self.past_prefixes.clone();
        past.push(prefix_of(old));
        let prefix = prefix_of(new);
        past.retain(|p| *p != prefix);
        Self {
            prefix,
            past_prefixes: past,
            ttl_ms: self.ttl_ms,
            failures: self.failures.clone(),
        }
    }

    /// A fresh code and when it expires.
    pub(crate) fn mint(&self, now_ms: i64) -> Minted {
        let code = format!(
            "{}{}",
            self.prefix,
            secret::base64url(&secret::random_bytes::<CODE_BYTES>())
        );
        Minted {
            digest: secret::digest(&code),
            code,
            expires_at_ms: now_ms + self.ttl_ms,
        }
    }

    /// Refuses every attempt while the failure window is full.
    pub(crate) fn check_rate(&mut self, now_ms: i64) -> Result<(), ApiError> {
        while self
            .failures
            .front()
            .is_some_and(|t| *t <= now_ms - FAILURE_WINDOW_MS)
        {
            self.failures.pop_front();
        }
        if self.failures.len() >= FAILURE_LIMIT {
            return Err(ApiError::new(
                Code::RateLimited,
                "too many failed pairing attempts, try again later",
            ));
        }
        Ok(())
    }

    /// A code that could not be spent (unknown, used or expired): counted toward the rate
    /// limit and answered `epoch_ended` when it names an earlier epoch.
    pub(crate) fn refuse(&mut self, code: &str, now_ms: i64) -> ApiError {
        self.failures.push_back(now_ms);
        if let Some(prefix) = code.get(..PREFIX_LEN)
            && prefix != self.prefix
            && self.past_prefixes.iter().any(|p| p == prefix)
        {
            return ApiError::new(
                Code::EpochEnded,
                "this pairing code belongs to an earlier epoch",
            );
        }
        ApiError::new(
            Code::PairingCodeInvalid,
            "unknown, used or expired pairing code",
        )
    }

    #[cfg(test)]
    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EPOCH: &str = "0123456789abcdef0123456789abcdef";

    fn book() -> CodeBook {
        CodeBook::new(
            EPOCH,
            &["fedcba9876543210fedcba9876543210".to_owned()],
            120_000,
        )
    }

    #[test]
    fn code_shape_names_the_epoch() {
        let minted = book().mint(1_000);
        assert_eq!(minted.code.len(), 8 + 32);
        assert!(minted.code.starts_with("01234567"));
        assert_eq!(minted.digest, secret::digest(&minted.code));
        assert_eq!(minted.expires_at_ms, 121_000);
    }

    #[test]
    fn past_epoch_prefix_answers_epoch_ended() {
        let mut b = book();
        let stale = format!("fedcba98{}", "A".repeat(32));
        assert_eq!(b.refuse(&stale, 0).code, Code::EpochEnded);
        let unknown = format!("aaaaaaaa{}", "A".repeat(32));
        assert_eq!(b.refuse(&unknown, 0).code, Code::PairingCodeInvalid);
        let current = format!("01234567{}", "A".repeat(32));
        assert_eq!(b.refuse(&current, 0).code, Code::PairingCodeInvalid);
    }

    #[test]
    fn the_next_epochs_book_knows_this_one_as_past() {
        let mut b = book();
        for t in 0..3 {
            b.refuse("nope", t);
        }
        let mut next = b.next(EPOCH, "89abcdef00000000");
        assert_eq!(next.prefix(), "89abcdef");
        assert!(next.mint(0).code.starts_with("89abcdef"));
        let old = format!("01234567{}", "A".repeat(32));
        assert_eq!(next.refuse(&old, 3).code, Code::EpochEnded);
        let older = format!("fedcba98{}", "A".repeat(32));
        assert_eq!(next.refuse(&older, 3).code, Code::EpochEnded);
        // The failures carried over: 3 + 2 so far, 5 more fill the window.
        for t in 0..5 {
            assert!(next.check_rate(4).is_ok());
            next.refuse("nope", 4 + t);
        }
        assert_eq!(
            next.check_rate(10).map_err(|e| e.code),
            Err(Code::RateLimited)
        );
    }

    #[test]
    fn failures_rate_limit_until_the_window_clears() {
        let mut b = book();
        for t in 0..FAILURE_LIMIT as i64 {
            assert!(b.check_rate(t).is_ok());
            b.refuse("nope", t);
        }
        assert_eq!(
            b.check_rate(100).map_err(|e| e.code),
            Err(Code::RateLimited)
        );
        assert_eq!(
            b.check_rate(FAILURE_WINDOW_MS - 1).map_err(|e| e.code),
            Err(Code::RateLimited)
        );
        // The first failure (t = 0) leaves the window.
        assert!(b.check_rate(FAILURE_WINDOW_MS).is_ok());
    }
}
