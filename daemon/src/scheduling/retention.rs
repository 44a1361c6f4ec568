//! Retention passes (docs/OPERATIONS.md, "Retention and archives").
//!
//! A pass runs on its own every `interval` (default 1 h) and on request, one at a time.
//! In order it: removes log folders a stopped pass left behind; prunes ended
//! notifications; prunes runs of schedules, then tasks with their attempts; prunes the
//! evidence log's oldest rows behind a checkpoint; trims run logs to the byte cap; and
//! checkpoints the WAL. Each chunk (at most [`CHUNK`] rows of its main table) is read,
//! archived when an archive directory is set (a ZIP64 file built, fsynced and verified
//! before it is renamed into place: `studio_archive::write`), then deleted in its own short
//! transaction that first checks the rows are still those archived. A failed archive
//! ends the pass before its chunk is deleted; chunks committed before stay pruned.
//! Log folders are removed only after their chunk commits.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::{Arc, atomic::Ordering},
    time::{Duration, Instant},
};

use serde_json::json;
use studio_api::types::{RetentionPolicy, WalCheckpoint};
use studio_archive::{Kind as ArchiveKind, LogFile};
use studio_contract::{error::FieldError, time::now_ms};
use studio_schedule::duration::parse_interval;

use super::{
    Scheduler,
    engine::EngineError,
    store::{Chunk, Deleted, EvidenceChunk, Note, PassRow, RestoreError, Rows},
};
use crate::audit::{Actor, Kind};

/// The most rows of a chunk's main table (runs, notifications, evidence rows).
pub(crate) const CHUNK: usize = 100;

/// How often a pass runs on its own unless the policy says otherwise.
pub(crate) const DEFAULT_INTERVAL_MS: i64 = 3_600_000;

/// A log folder without its run is removed once it is this old (a pass that stopped
/// between a chunk's commit and the removal of its folders left it).
const ORPHAN_AGE: Duration = Duration::from_secs(3_600);

/// Why a pass or a restore did not run or stopped.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RetentionError {
    #[error("a retention pass is running")]
    Busy,
    /// What the caller sent (a directory, a file) is not usable.
    #[error("{0}")]
    Invalid(String),
    /// A restore would duplicate rows or log folders.
    #[error("{0}")]
    Exists(String),
    #[error(transparent)]
    Engine(#[from] EngineError),
}

impl From<crate::store::StoreError> for RetentionError {
    fn from(e: crate::store::StoreError) -> Self {
        Self::Engine(e.into())
    }
}

/// The checks of a policy, as the API reports them.
pub(crate) fn check_policy(p: &RetentionPolicy) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut interval = |path: &str, text: Option<&String>, min_ms: i64, max_ms: i64| {
        let Some(text) = text else { return };
        match parse_interval(text) {
            Ok(ms) if ms < min_ms || ms > max_ms => errors.push(FieldError::new(
                path,
                format!("must be from {} to {}", words(min_ms), words(max_ms)),
            )),
            Ok(_) => {}
            Err(why) => errors.push(FieldError::new(path, why)),
        }
    };
    const DAY: i64 = 86_400_000;
    if let Some(runs) = &p.runs {
        interval("runs.max_age", runs.max_age.as_ref(), 1_000, 36_500 * DAY);
    }
    if let Some(n) = &p.notifications {
        interval(
            "notifications.delivered",
            n.delivered.as_ref(),
            1_000,
            36_500 * DAY,
        );
        interval("notifications.dead", n.dead.as_ref(), 1_000, 36_500 * DAY);
    }
    interval("interval", p.interval.as_ref(), 60_000, 7 * DAY);
    if p.runs.as_ref().and_then(|r| r.keep_last) == Some(0) {
        errors.push(FieldError::new(
            "runs.keep_last",
            "must be at least 1 (leave it out to keep runs by age only)",
        ));
    }
    if p.logs
        .as_ref()
        .and_then(|l| l.max_bytes)
        .is_some_and(|b| b < 1 << 20)
    {
        errors.push(FieldError::new(
            "logs.max_bytes",
            "must be at least 1048576 (1 MiB)",
        ));
    }
    if let Some(dir) = &p.archive_dir
        && (!Path::new(dir).is_absolute() || dir.contains('\0'))
    {
        errors.push(FieldError::new(
            "archive_dir",
            "must be an absolute directory",
        ));
    }
    errors
}

fn words(ms: i64) -> String {
    match ms {
        ms if ms % 86_400_000 == 0 => format!("{}d", ms / 86_400_000),
        ms if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        ms => format!("{}s", ms / 1_000),
    }
}

fn interval_ms(text: Option<&String>) -> Option<i64> {
    text.and_then(|t| parse_interval(t).ok())
}

/// How often passes run under `policy`.
pub(crate) fn pass_interval_ms(policy: &RetentionPolicy) -> i64 {
    interval_ms(policy.interval.as_ref()).unwrap_or(DEFAULT_INTERVAL_MS)
}

/// What one pass has done so far.
#[derive(Debug, Default)]
struct Progress {
    pruned: BTreeMap<String, u64>,
    archives: u64,
    chunks: u64,
    longest: Duration,
}

impl Progress {
    fn add(&mut self, what: &str, n: u64) {
        if n > 0 {
            *self.pruned.entry(what.to_owned()).or_default() += n;
        }
    }
}

/// One chunk ready to archive and delete.
struct Pending<'a> {
    kind: ArchiveKind,
    chunk: &'a Chunk,
    evidence: Option<&'a EvidenceChunk>,
    /// Run folders whose files go into the archive.
    logs: &'a [String],
}

impl Scheduler {
    /// The policy in force and where it comes from (`default`, `api`, `config`).
    pub(crate) async fn retention_policy(
        &self,
    ) -> Result<(RetentionPolicy, Option<super::store::PolicyRow>), EngineError> {
        let row = self.store.retention_policy().await?;
        let policy = row.as_ref().map(|r| r.policy.clone()).unwrap_or_default();
        Ok((policy, row))
    }

    /// When the next pass runs on its own (ms), once the loop has planned it.
    pub(crate) fn next_retention_pass_ms(&self) -> Option<i64> {
        match self.retention_next.load(Ordering::Relaxed) {
            0 => None,
            at => Some(at),
        }
    }

    /// Sets the policy through the API (refused while the configuration sets it).
    pub(crate) async fn set_retention_policy(
        &self,
        policy: &RetentionPolicy,
        by: &Actor,
    ) -> Result<(), RetentionError> {
        if self.config.retention.is_some() {
            return Err(RetentionError::Invalid(
                "the policy is set by STUDIO_RETENTION in studiod's configuration".into(),
            ));
        }
        let note = Note {
            by,
            kind: Kind::RetentionPolicySet,
            object: "retention".into(),
            schedule_id: None,
            detail: json!({ "policy": policy }),
        };
        self.store
            .set_retention_policy(policy, "api", Some(&by.principal), Some(&note), now_ms())
            .await?;
        self.retention_wake.notify_one();
        Ok(())
    }

    /// At start: the configured policy replaces the stored one (audited when it
    /// changes); without one, a policy the configuration set before becomes the API's.
    pub(super) async fn load_retention_policy(&self) -> Result<(), crate::store::StoreError> {
        let stored = self.store.retention_policy().await?;
        let at = now_ms();
        match (&self.config.retention, stored) {
            (Some(policy), stored) => {
                if stored
                    .as_ref()
                    .is_none_or(|s| &s.policy != policy || s.source != "config")
                {
                    let by = Actor::studiod(&self.config.epoch.get());
                    let note = Note {
                        by: &by,
                        kind: Kind::RetentionPolicySet,
                        object: "retention".into(),
                        schedule_id: None,
                        detail: json!({ "policy": policy, "source": "config" }),
                    };
                    self.store
                        .set_retention_policy(policy, "config", None, Some(&note), at)
                        .await?;
                }
            }
            (None, Some(s)) if s.source == "config" => {
                self.store
                    .set_retention_policy(&s.policy, "api", s.updated_by.as_deref(), None, at)
                    .await?;
            }
            (None, _) => {}
        }
        self.store.end_interrupted_passes(at).await?;
        Ok(())
    }

    /// Runs a pass every interval until studiod stops; a policy change replans it.
    pub(super) async fn retention_forever(self: Arc<Self>) {
        let stop = self.stop.clone();
        // A clock pass refused before it could start (an archive directory that cannot
        // be made) writes no row: the next waits an interval from it all the same.
        let mut tried: Option<i64> = None;
        loop {
            let interval = match self.retention_policy().await {
                Ok((policy, _)) => pass_interval_ms(&policy),
                Err(error) => {
                    tracing::error!(error = %crate::error::chain(&error), "cannot read the retention policy");
                    DEFAULT_INTERVAL_MS
                }
            };
            let last = self
                .store
                .retention_passes(1)
                .await
                .ok()
                .and_then(|p| p.first().map(|p| p.started_at_ms));
            let now = now_ms();
            let last = last.max(tried);
            let at = last.map_or(now + interval, |l| (l + interval).max(now + 1_000));
            self.retention_next.store(at, Ordering::Relaxed);
            let wait = Duration::from_millis(u64::try_from(at - now).unwrap_or(0));
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = self.retention_wake.notified() => continue,
                () = stop.triggered() => return,
            }
            tried = Some(now_ms());
            match self.retention_pass("clock", None).await {
                Ok(pass) => {
                    tracing::info!(pass = pass.id, outcome = %pass.outcome, "retention pass")
                }
                Err(RetentionError::Busy) => {}
                Err(error) => {
                    tracing::error!(error = %crate::error::chain(&error), "retention pass failed");
                }
            }
        }
    }

    /// Runs one pass now (`Busy` while one runs). `archive_dir`, else the policy's, gets
    /// an archive of each chunk before it is deleted.
    pub(crate) async fn retention_pass(
        &self,
        trigger: &str,
        archive_dir: Option<&str>,
    ) -> Result<PassRow, RetentionError> {
        let Ok(_one) = self.retention_lock.try_lock() else {
            return Err(RetentionError::Busy);
        };
        let (policy, _) = self.retention_policy().await?;
        let dir = archive_dir.or(policy.archive_dir.as_deref());
        let dir = dir
            .map(|d| {
                studio_store::backup_dir(d)
                    .map_err(|why| RetentionError::Invalid(format!("archive_dir {why}")))
            })
            .transpose()?;
        let dir_text = dir.as_ref().map(|d| d.display().to_string());
        let started = now_ms();
        let id = self
            .store
            .begin_pass(trigger, dir_text.as_deref(), started)
            .await?;
        let mut progress = Progress::default();
        let result = self.prune(&policy, dir.as_deref(), &mut progress).await;
        // PostgreSQL keeps its own write-ahead log: no checkpoint of ours there.
        let checkpoint = self.checkpoint().await.transpose();
        let (outcome, error) = match &result {
            Ok(()) => ("completed", None),
            Err(e) => ("failed", Some(crate::error::chain(e))),
        };
        if let Some(error) = &error {
            tracing::error!(pass = id, %error, "retention pass stopped");
        }
        let pass = PassRow {
            id,
            trigger: trigger.to_owned(),
            started_at_ms: started,
            finished_at_ms: Some(now_ms()),
            outcome: outcome.to_owned(),
            error,
            archive_dir: dir_text,
            pruned: progress.pruned,
            archives: progress.archives,
            chunks: progress.chunks,
            longest_chunk_ms: progress.longest.as_secs_f64() * 1_000.0,
            checkpoint: checkpoint.as_ref().and_then(|c| c.as_ref().ok()).cloned(),
        };
        let by = Actor::studiod(&self.config.epoch.get());
        let mut notes = vec![Note {
            by: &by,
            kind: Kind::RetentionPass,
            object: format!("retention_pass:{id}"),
            schedule_id: None,
            detail: json!({
                "trigger": trigger, "outcome": outcome, "error": pass.error,
                "pruned": pass.pruned, "archives": pass.archives, "chunks": pass.chunks,
                "archive_dir": pass.archive_dir,
            }),
        }];
        match &checkpoint {
            None => {}
            Some(Ok(c)) => notes.push(Note {
                by: &by,
                kind: Kind::WalCheckpoint,
                object: format!("retention_pass:{id}"),
                schedule_id: None,
                detail: json!({
                    "result": if c.busy { "busy" } else { "ok" },
                    "log_frames": c.log_frames, "checkpointed_frames": c.checkpointed_frames,
                    "wal_bytes_before": c.wal_bytes_before, "wal_bytes_after": c.wal_bytes_after,
                    "took_ms": c.took_ms,
                }),
            }),
            Some(Err(e)) => notes.push(Note {
                by: &by,
                kind: Kind::WalCheckpoint,
                object: format!("retention_pass:{id}"),
                schedule_id: None,
                detail: json!({ "result": "error", "error": crate::error::chain(e) }),
            }),
        }
        self.store.finish_pass(&pass, &notes).await?;
        Ok(pass)
    }

    async fn prune(
        &self,
        policy: &RetentionPolicy,
        dir: Option<&Path>,
        progress: &mut Progress,
    ) -> Result<(), RetentionError> {
        let now = now_ms();
        self.sweep_orphan_logs(progress).await?;
        if let Some(n) = &policy.notifications {
            let delivered = interval_ms(n.delivered.as_ref()).map(|w| now - w);
            let dead = interval_ms(n.dead.as_ref()).map(|w| now - w);
            let ids = self.store.notification_candidates(delivered, dead).await?;
            for ids in ids.chunks(CHUNK) {
                self.check_stop()?;
                let chunk = self.store.read_notifications_chunk(ids).await?;
                let pending = Pending {
                    kind: ArchiveKind::Notifications,
                    chunk: &chunk,
                    evidence: None,
                    logs: &[],
                };
                let archived = self.archive(dir, &pending, progress).await?;
                let began = Instant::now();
                let deleted = self.store.delete_notifications_chunk(&chunk).await?;
                self.committed(deleted, began, &chunk, archived, progress)
                    .await;
            }
        }
        let runs = policy.runs.clone().unwrap_or_default();
        let cutoff = interval_ms(runs.max_age.as_ref()).map(|age| now - age);
        let keep = runs.keep_last.map(i64::from);
        if cutoff.is_some() || keep.is_some() {
            let (cutoff, keep) = (cutoff.unwrap_or(i64::MAX), keep.unwrap_or(0));
            let ids = self.store.run_candidates(cutoff, keep, now).await?;
            for ids in ids.chunks(CHUNK) {
                self.prune_runs(ids, &[], dir, progress).await?;
            }
            let tasks = self.store.task_candidates(cutoff, keep).await?;
            let mut group: (Vec<String>, Vec<String>) = Default::default();
            for (task, runs) in tasks {
                if !group.1.is_empty() && group.0.len() + runs.len() > CHUNK {
                    let (r, t) = std::mem::take(&mut group);
                    self.prune_runs(&r, &t, dir, progress).await?;
                }
                group.0.extend(runs);
                group.1.push(task);
            }
            if !group.1.is_empty() {
                self.prune_runs(&group.0, &group.1, dir, progress).await?;
            }
        }
        if let Some(age) = interval_ms(runs.max_age.as_ref()) {
            while let Some(chunk) = self.store.evidence_chunk(now - age, CHUNK as i64).await? {
                self.check_stop()?;
                let rows = Chunk {
                    ids: Vec::new(),
                    tables: vec![("evidence", chunk.rows.clone())],
                    preimages: Vec::new(),
                };
                let pending = Pending {
                    kind: ArchiveKind::Evidence,
                    chunk: &rows,
                    evidence: Some(&chunk),
                    logs: &[],
                };
                let archived = self.archive(dir, &pending, progress).await?;
                let began = Instant::now();
                let deleted = self.store.delete_evidence_chunk(&chunk, now_ms()).await?;
                self.committed(deleted, began, &rows, archived, progress)
                    .await;
                if deleted == Deleted::Changed {
                    break;
                }
            }
        }
        if let Some(cap) = policy.logs.as_ref().and_then(|l| l.max_bytes) {
            self.cap_logs(cap, dir, progress).await?;
        }
        Ok(())
    }

    fn check_stop(&self) -> Result<(), RetentionError> {
        if self.stop.is_triggered() {
            return Err(RetentionError::Invalid("studiod is stopping".into()));
        }
        Ok(())
    }

    /// Archives, deletes and clears the folders of one chunk of runs and tasks.
    async fn prune_runs(
        &self,
        runs: &[String],
        tasks: &[String],
        dir: Option<&Path>,
        progress: &mut Progress,
    ) -> Result<(), RetentionError> {
        self.check_stop()?;
        let chunk = self.store.read_runs_chunk(runs, tasks).await?;
        let pending = Pending {
            kind: ArchiveKind::Runs,
            chunk: &chunk,
            evidence: None,
            logs: runs,
        };
        let archived = self.archive(dir, &pending, progress).await?;
        let began = Instant::now();
        let deleted = self.store.delete_runs_chunk(&chunk, tasks).await?;
        if self
            .committed(deleted, began, &chunk, archived, progress)
            .await
        {
            self.remove_run_dirs(runs, progress).await;
        }
        Ok(())
    }

    /// Trims kept logs to `cap` bytes: the oldest finished runs' folders first.
    async fn cap_logs(
        &self,
        cap: u64,
        dir: Option<&Path>,
        progress: &mut Progress,
    ) -> Result<(), RetentionError> {
        let mut over = self.store.kept_log_bytes().await?.saturating_sub(cap);
        while over > 0 {
            self.check_stop()?;
            let oldest = self.store.oldest_logs(CHUNK as i64).await?;
            if oldest.is_empty() {
                break;
            }
            let mut ids = Vec::new();
            for (id, bytes) in oldest {
                ids.push(id);
                over = over.saturating_sub(bytes);
                if over == 0 {
                    break;
                }
            }
            let preimages: Rows = ids
                .iter()
                .map(|id| {
                    let mut row = serde_json::Map::new();
                    row.insert("id".into(), id.clone().into());
                    row.insert("logs_pruned_at_ms".into(), serde_json::Value::Null);
                    row
                })
                .collect();
            let chunk = Chunk {
                ids: ids.clone(),
                tables: Vec::new(),
                preimages: vec![("runs", preimages)],
            };
            let pending = Pending {
                kind: ArchiveKind::Logs,
                chunk: &chunk,
                evidence: None,
                logs: &ids,
            };
            let archived = self.archive(dir, &pending, progress).await?;
            let began = Instant::now();
            let marked = self.store.mark_logs_pruned(&ids, now_ms()).await?;
            progress.longest = progress.longest.max(began.elapsed());
            progress.chunks += 1;
            if marked.len() != ids.len()
                && let Some(path) = archived
            {
                // Another pass of this studiod cannot run; a restore may have raced.
                tracing::warn!(archive = %path.display(), "a log chunk changed while it was archived");
            }
            progress.add("log_runs", marked.len() as u64);
            self.remove_run_dirs(&marked, progress).await;
        }
        Ok(())
    }

    /// Writes the chunk's archive when a directory is set; its path. A failure ends the
    /// pass before the chunk is deleted.
    async fn archive(
        &self,
        dir: Option<&Path>,
        pending: &Pending<'_>,
        progress: &mut Progress,
    ) -> Result<Option<PathBuf>, RetentionError> {
        let Some(dir) = dir else { return Ok(None) };
        let logs = self.log_files(pending.logs).await;
        let chunk = studio_archive::Chunk {
            kind: pending.kind,
            created_at_ms: now_ms(),
            studio_version: env!("CARGO_PKG_VERSION").to_owned(),
            tables: owned(&pending.chunk.tables),
            preimages: owned(&pending.chunk.preimages),
            logs,
            evidence: pending.evidence.map(|e| studio_archive::EvidenceSpan {
                previous_chain_sha256: studio_contract::secret::hex(&e.previous),
                first_seq: e.first_seq,
                last_seq: e.last_seq,
                last_chain_sha256: e.last_chain.clone(),
            }),
        };
        let dir = dir.to_path_buf();
        let written = tokio::task::spawn_blocking(move || studio_archive::write(&dir, &chunk))
            .await
            .map_err(|e| RetentionError::Invalid(format!("the archive writer stopped: {e}")))?
            .map_err(|e| RetentionError::Invalid(format!("cannot archive a chunk: {e}")))?;
        progress.archives += 1;
        Ok(Some(written.path))
    }

    /// Counts a chunk's transaction; true when it committed. A chunk whose rows changed
    /// after they were archived loses its archive (the rows stay in the store).
    async fn committed(
        &self,
        deleted: Deleted,
        began: Instant,
        chunk: &Chunk,
        archived: Option<PathBuf>,
        progress: &mut Progress,
    ) -> bool {
        progress.longest = progress.longest.max(began.elapsed());
        match deleted {
            Deleted::Done => {
                progress.chunks += 1;
                for (table, n) in chunk.counts() {
                    progress.add(table, n);
                }
                true
            }
            Deleted::Changed => {
                if let Some(path) = archived {
                    progress.archives = progress.archives.saturating_sub(1);
                    let removed = tokio::task::spawn_blocking(move || {
                        std::fs::remove_file(&path)?;
                        sync_parent(&path)
                    })
                    .await;
                    if !matches!(removed, Ok(Ok(()))) {
                        tracing::warn!("cannot remove the archive of a chunk that changed");
                    }
                }
                false
            }
        }
    }

    /// The regular files of the runs' folders, as archive members.
    async fn log_files(&self, runs: &[String]) -> Vec<LogFile> {
        let root = self.runs_dir.clone();
        let runs = runs.to_vec();
        tokio::task::spawn_blocking(move || {
            let mut files = Vec::new();
            for run in runs.into_iter().filter(|r| studio_archive::valid_run_id(r)) {
                let Ok(entries) = std::fs::read_dir(root.join(&run)) else {
                    continue;
                };
                let mut names: Vec<_> = entries
                    .filter_map(Result::ok)
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                    .filter_map(|e| e.file_name().into_string().ok())
                    .filter(|n| studio_archive::valid_file_name(n))
                    .collect();
                names.sort();
                for file in names {
                    files.push(LogFile {
                        path: root.join(&run).join(&file),
                        run_id: run.clone(),
                        file,
                    });
                }
            }
            files
        })
        .await
        .unwrap_or_default()
    }

    /// Removes the folders of runs whose rows are gone or whose logs are pruned.
    async fn remove_run_dirs(&self, runs: &[String], progress: &mut Progress) {
        let root = self.runs_dir.clone();
        let runs = runs.to_vec();
        let (dirs, bytes) = tokio::task::spawn_blocking(move || {
            let (mut dirs, mut bytes) = (0u64, 0u64);
            // Only a run id names a folder: never a path out of `runs/`.
            for run in runs.into_iter().filter(|r| studio_archive::valid_run_id(r)) {
                let path = root.join(&run);
                let size = dir_bytes(&path);
                match std::fs::remove_dir_all(&path) {
                    Ok(()) => {
                        dirs += 1;
                        bytes += size;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => {
                        tracing::warn!(run = %run, error = %e, "cannot remove a run's folder")
                    }
                }
            }
            (dirs, bytes)
        })
        .await
        .unwrap_or_default();
        progress.add("log_dirs", dirs);
        progress.add("log_bytes", bytes);
    }

    /// Removes run folders older than an hour whose run is gone, and a stopped restore's
    /// staging folders as old.
    async fn sweep_orphan_logs(&self, progress: &mut Progress) -> Result<(), RetentionError> {
        let root = self.runs_dir.clone();
        let old: Vec<String> = tokio::task::spawn_blocking(move || {
            let Ok(entries) = std::fs::read_dir(&root) else {
                return Vec::new();
            };
            entries
                .filter_map(Result::ok)
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .filter(|e| {
                    e.metadata()
                        .and_then(|m| m.modified())
                        .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > ORPHAN_AGE))
                })
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| {
                    // A restore that stopped before moving its folders in left these.
                    if n.starts_with(".restore-") {
                        let _ = std::fs::remove_dir_all(root.join(n));
                        return false;
                    }
                    studio_archive::valid_run_id(n)
                })
                .collect()
        })
        .await
        .unwrap_or_default();
        for batch in old.chunks(500) {
            let kept = self.store.runs_that_exist(batch).await?;
            let gone: Vec<String> = batch
                .iter()
                .filter(|id| !kept.contains(id))
                .cloned()
                .collect();
            self.remove_run_dirs(&gone, progress).await;
        }
        Ok(())
    }

    /// `PRAGMA wal_checkpoint(TRUNCATE)`, with the WAL's size before and after (`None`:
    /// the database is not a SQLite file).
    async fn checkpoint(&self) -> Result<Option<WalCheckpoint>, EngineError> {
        let wal = self.home_dir().join("state.db-wal");
        let size = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
        let before = size(&wal);
        let began = Instant::now();
        let Some((busy, log_frames, checkpointed_frames)) = self.store.checkpoint_wal().await?
        else {
            return Ok(None);
        };
        Ok(Some(WalCheckpoint {
            at: studio_contract::time::rfc3339(now_ms()),
            busy,
            log_frames,
            checkpointed_frames,
            wal_bytes_before: before,
            wal_bytes_after: size(&wal),
            took_ms: began.elapsed().as_secs_f64() * 1_000.0,
        }))
    }

    /// Puts an archive's rows and log files back (`Exists` when any is there already;
    /// nothing is written then). Evidence archives stay archives: the live log continues
    /// from their checkpoint, and `studio evidence verify --archives` reads them.
    pub(crate) async fn restore_archive(
        &self,
        file: &Path,
        by: &Actor,
    ) -> Result<studio_api::types::ArchiveRestored, RetentionError> {
        // A pass must not prune what is being put back, nor a restore race another.
        let Ok(_one) = self.retention_lock.try_lock() else {
            return Err(RetentionError::Busy);
        };
        let path = file.to_path_buf();
        let read = tokio::task::spawn_blocking(move || read_archive(&path))
            .await
            .map_err(|e| RetentionError::Invalid(format!("the archive reader stopped: {e}")))??;
        let Restorable {
            manifest,
            tables,
            preimages,
            mut archive,
        } = read;
        if manifest.kind == ArchiveKind::Evidence {
            return Err(RetentionError::Invalid(
                "an evidence archive is not restored: the live log continues from it; check \
                 it with `studio evidence verify --archives`"
                    .into(),
            ));
        }
        // Log folders first, beside their place; moved in only once the rows commit.
        // Named by studiod, never by the archive.
        let staging = self.runs_dir.join(format!(
            ".restore-{}",
            studio_contract::secret::hex(&studio_contract::secret::random_bytes::<8>())
        ));
        let runs_dir = self.runs_dir.clone();
        let files = archive.log_files();
        let stage = staging.clone();
        let (archive, staged) = tokio::task::spawn_blocking(move || {
            let staged = stage_logs(&mut archive, &files, &runs_dir, &stage);
            (archive, staged)
        })
        .await
        .map_err(|e| RetentionError::Invalid(format!("the archive reader stopped: {e}")))?;
        drop(archive);
        let (runs, log_files) = match staged {
            Ok(staged) => staged,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&staging);
                return Err(e);
            }
        };
        let note = Note {
            by,
            kind: Kind::ArchiveRestored,
            object: format!("archive:{}", manifest.archive_id),
            schedule_id: None,
            detail: json!({ "kind": manifest.kind.as_str(), "file": file.display().to_string() }),
        };
        let restored = self
            .store
            .restore_rows(&tables, &preimages, &note, now_ms())
            .await;
        let (rows, set_back) = match restored {
            Ok(done) => done,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&staging);
                return Err(match e {
                    RestoreError::Invalid(why) => RetentionError::Invalid(why),
                    RestoreError::Exists(why) => RetentionError::Exists(why),
                    RestoreError::Store(e) => e.into(),
                });
            }
        };
        for run in &runs {
            if let Err(e) = std::fs::rename(staging.join(run), self.runs_dir.join(run)) {
                tracing::warn!(run = %run, error = %e, "cannot move a restored log folder into place");
            }
        }
        let _ = std::fs::remove_dir_all(&staging);
        Ok(studio_api::types::ArchiveRestored {
            archive_id: manifest.archive_id.clone(),
            kind: manifest.kind.as_str().to_owned(),
            rows: rows.into_iter().filter(|(_, n)| *n > 0).collect(),
            preimages: set_back.into_iter().filter(|(_, n)| *n > 0).collect(),
            log_files,
        })
    }
}

fn owned(tables: &[(&'static str, Rows)]) -> Vec<(String, Rows)> {
    tables
        .iter()
        .map(|(t, rows)| ((*t).to_owned(), rows.clone()))
        .collect()
}

fn sync_parent(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(dir) => std::fs::File::open(dir)?.sync_all(),
        None => Ok(()),
    }
}

fn dir_bytes(path: &Path) -> u64 {
    std::fs::read_dir(path).map_or(0, |entries| {
        entries
            .filter_map(Result::ok)
            .filter_map(|e| e.metadata().ok())
            .filter(std::fs::Metadata::is_file)
            .map(|m| m.len())
            .sum()
    })
}

/// An archive opened and checked, with what a restore writes.
struct Restorable {
    manifest: studio_archive::Manifest,
    tables: Vec<(String, Rows)>,
    preimages: Vec<(String, Rows)>,
    archive: studio_archive::Archive,
}

fn read_archive(path: &Path) -> Result<Restorable, RetentionError> {
    if !path.is_absolute() {
        return Err(RetentionError::Invalid(
            "file must be an absolute path".into(),
        ));
    }
    let mut archive = studio_archive::Archive::open(path)
        .map_err(|e| RetentionError::Invalid(format!("{}: {e}", path.display())))?;
    let manifest = archive.manifest().clone();
    let mut tables = Vec::new();
    for table in manifest.tables.keys() {
        let rows = archive
            .rows(table)
            .map_err(|e| RetentionError::Invalid(e.to_string()))?;
        // A run's id names its log folder: only a run id's characters come back.
        if table == "runs"
            && let Some(bad) = rows.iter().find(|r| {
                !r.get("id")
                    .and_then(serde_json::Value::as_str)
                    .is_some_and(studio_archive::valid_run_id)
            })
        {
            return Err(RetentionError::Invalid(format!(
                "runs holds a row whose id is not a run id: {}",
                bad.get("id").map(ToString::to_string).unwrap_or_default()
            )));
        }
        tables.push((table.clone(), rows));
    }
    // Rows other rows name go in first (tasks before their attempts is not needed: no
    // foreign keys between them), in a fixed order for a stable audit.
    tables.sort_by_key(|(t, _)| table_rank(t));
    let mut preimages = Vec::new();
    for table in manifest.preimages.keys() {
        let rows = archive
            .preimages(table)
            .map_err(|e| RetentionError::Invalid(e.to_string()))?;
        preimages.push((table.clone(), rows));
    }
    Ok(Restorable {
        manifest,
        tables,
        preimages,
        archive,
    })
}

fn table_rank(table: &str) -> usize {
    [
        "tasks",
        "runs",
        "run_transitions",
        "approvals",
        "notify_outbox",
        "notify_attempts",
    ]
    .iter()
    .position(|t| *t == table)
    .unwrap_or(usize::MAX)
}

/// Writes the archive's log files under `staging/<run>/`, refusing a run whose folder
/// exists; the runs staged and the files written.
fn stage_logs(
    archive: &mut studio_archive::Archive,
    files: &[(String, String)],
    runs_dir: &Path,
    staging: &Path,
) -> Result<(Vec<String>, u64), RetentionError> {
    use std::os::unix::fs::DirBuilderExt;
    let mut runs: Vec<String> = files.iter().map(|(run, _)| run.clone()).collect();
    runs.sort();
    runs.dedup();
    for run in &runs {
        if runs_dir.join(run).exists() {
            return Err(RetentionError::Exists(format!(
                "the log folder of run {run} exists: nothing was restored"
            )));
        }
    }
    let io = |what: &str, e: std::io::Error| RetentionError::Invalid(format!("{what}: {e}"));
    for run in &runs {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(staging.join(run))
            .map_err(|e| io("cannot make a log folder", e))?;
    }
    let mut written = 0;
    for (run, file) in files {
        let path = staging.join(run).join(file);
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| io("cannot write a log file", e))?;
        archive
            .read_log(run, file, &mut out)
            .map_err(|e| RetentionError::Invalid(e.to_string()))?;
        out.sync_all()
            .map_err(|e| io("cannot write a log file", e))?;
        written += 1;
    }
    Ok((runs, written))
}
