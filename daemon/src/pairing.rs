//! Pairing codes: minting, single-use spending, expiry, the bound on outstanding codes,
//! the failure rate limit and the past-epoch classification. Pure in-memory state with
//! the clock passed in, so every rule is testable without sleeping.

use std::collections::VecDeque;

use studio_contract::{
    error::{ApiError, Code},
    role::Role,
    secret::{self, Digest},
};

/// A code is the epoch's first 8 hex chars followed by 192 random bits in base64url.
pub(crate) const PREFIX_LEN: usize = 8;
const CODE_BYTES: usize = 24;
pub(crate) const MAX_OUTSTANDING: usize = 16;
pub(crate) const FAILURE_LIMIT: usize = 10;
pub(crate) const FAILURE_WINDOW_MS: i64 = 60_000;

#[derive(Debug)]
struct Outstanding {
    digest: Digest,
    expires_at_ms: i64,
    /// The role the browser that redeems it gets.
    role: Role,
}

#[derive(Debug)]
pub(crate) struct CodeBook {
    prefix: String,
    past_prefixes: Vec<String>,
    ttl_ms: i64,
    // Only digests: a memory dump yields no usable code.
    outstanding: VecDeque<Outstanding>,
    failures: VecDeque<i64>,
}

impl CodeBook {
    pub(crate) fn new(epoch: &str, past_epochs: &[String], ttl_ms: i64) -> Self {
        let prefix_of = |e: &str| e.get(..PREFIX_LEN).unwrap_or(e).to_owned();
        let prefix = prefix_of(epoch);
        Self {
            past_prefixes: past_epochs
                .iter()
                .map(|e| prefix_of(e))
                .filter(|p| *p != prefix)
                .collect(),
            prefix,
            ttl_ms,
            outstanding: VecDeque::new(),
            failures: VecDeque::new(),
        }
    }

    /// A fresh code for `role` and when it expires; the oldest code is dropped beyond the
    /// bound.
    pub(crate) fn mint(&mut self, role: Role, now_ms: i64) -> (String, i64) {
        self.outstanding.retain(|c| c.expires_at_ms > now_ms);
        while self.outstanding.len() >= MAX_OUTSTANDING {
            self.outstanding.pop_front();
        }
        let code = format!(
            "{}{}",
            self.prefix,
            secret::base64url(&secret::random_bytes::<CODE_BYTES>())
        );
        let expires_at_ms = now_ms + self.ttl_ms;
        self.outstanding.push_back(Outstanding {
            digest: secret::digest(&code),
            expires_at_ms,
            role,
        });
        (code, expires_at_ms)
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

    /// Spends a code (single use). Call only after the origin was accepted, so a code
    /// presented from a refused origin stays valid. Failures count toward the rate limit.
    /// Answers the role the code was minted for.
    pub(crate) fn spend(&mut self, code: &str, now_ms: i64) -> Result<Role, ApiError> {
        let result = self.try_spend(code, now_ms);
        if result.is_err() {
            self.failures.push_back(now_ms);
        }
        result
    }

    fn try_spend(&mut self, code: &str, now_ms: i64) -> Result<Role, ApiError> {
        let presented = secret::digest(code);
        // Scan every entry so the time taken does not depend on which one matched.
        let mut found = None;
        for (i, c) in self.outstanding.iter().enumerate() {
            if secret::digests_equal(&c.digest, &presented) {
                found = Some(i);
            }
        }
        if let Some(entry) = found.and_then(|i| self.outstanding.remove(i)) {
            if entry.expires_at_ms > now_ms {
                return Ok(entry.role);
            }
        } else if let Some(prefix) = code.get(..PREFIX_LEN)
            && prefix != self.prefix
            && self.past_prefixes.iter().any(|p| p == prefix)
        {
            return Err(ApiError::new(
                Code::EpochEnded,
                "this pairing code belongs to an earlier daemon start",
            ));
        }
        Err(ApiError::new(
            Code::PairingCodeInvalid,
            "unknown, used or expired pairing code",
        ))
    }

    #[cfg(test)]
    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    #[cfg(test)]
    pub(crate) fn outstanding(&self) -> usize {
        self.outstanding.len()
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
        let (code, exp) = book().mint(Role::Admin, 1_000);
        assert_eq!(code.len(), 8 + 32);
        assert!(code.starts_with("01234567"));
        assert_eq!(exp, 121_000);
    }

    #[test]
    fn codes_are_single_use() {
        let mut b = book();
        let (code, _) = b.mint(Role::Viewer, 0);
        assert_eq!(
            b.spend(&code, 1).ok(),
            Some(Role::Viewer),
            "the code's own role"
        );
        assert_eq!(
            b.spend(&code, 2).map_err(|e| e.code),
            Err(Code::PairingCodeInvalid)
        );
    }

    #[test]
    fn codes_expire() {
        let mut b = book();
        let (code, exp) = b.mint(Role::Admin, 0);
        assert_eq!(
            b.spend(&code, exp).map_err(|e| e.code),
            Err(Code::PairingCodeInvalid)
        );
        let (code, exp) = b.mint(Role::Admin, 0);
        assert!(b.spend(&code, exp - 1).is_ok());
    }

    #[test]
    fn outstanding_codes_are_bounded_dropping_the_oldest() {
        let mut b = book();
        let (first, _) = b.mint(Role::Admin, 0);
        let (second, _) = b.mint(Role::Admin, 0);
        for _ in 0..MAX_OUTSTANDING - 1 {
            b.mint(Role::Admin, 0);
        }
        assert_eq!(b.outstanding(), MAX_OUTSTANDING);
        assert_eq!(
            b.spend(&first, 1).map_err(|e| e.code),
            Err(Code::PairingCodeInvalid)
        );
        assert!(b.spend(&second, 1).is_ok());
    }

    #[test]
    fn past_epoch_prefix_answers_epoch_ended() {
        let mut b = book();
        let stale = format!("fedcba98{}", "A".repeat(32));
        assert_eq!(
            b.spend(&stale, 0).map_err(|e| e.code),
            Err(Code::EpochEnded)
        );
        let unknown = format!("aaaaaaaa{}", "A".repeat(32));
        assert_eq!(
            b.spend(&unknown, 0).map_err(|e| e.code),
            Err(Code::PairingCodeInvalid)
        );
        let current = format!("01234567{}", "A".repeat(32));
        assert_eq!(
            b.spend(&current, 0).map_err(|e| e.code),
            Err(Code::PairingCodeInvalid)
        );
    }

    #[test]
    fn failures_rate_limit_until_the_window_clears() {
        let mut b = book();
        let (good, _) = b.mint(Role::Admin, 0);
        for t in 0..FAILURE_LIMIT as i64 {
            assert!(b.check_rate(t).is_ok());
            assert!(b.spend("nope", t).is_err());
        }
        assert_eq!(
            b.check_rate(100).map_err(|e| e.code),
            Err(Code::RateLimited)
        );
        assert_eq!(
            b.check_rate(FAILURE_WINDOW_MS - 1).map_err(|e| e.code),
            Err(Code::RateLimited)
        );
        // The first failure (t = 0) leaves the window; the good code was never spent.
        assert!(b.check_rate(FAILURE_WINDOW_MS).is_ok());
        assert!(b.spend(&good, FAILURE_WINDOW_MS).is_ok());
    }
}
