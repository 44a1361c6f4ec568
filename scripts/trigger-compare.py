#!/usr/bin/env python3
"""Runs the same writes on studiod's SQLite schema and on its PostgreSQL schema, and
compares what the triggers (and the constraints) make of them.

    scripts/trigger-compare.py POSTGRES_URL [--schema NAME] [--keep] [-v]

SQLite: every migration of migrations/daemon/ applied (executescript, in numeric order)
to a fresh temporary file, written with foreign keys on, as studiod opens it.
PostgreSQL: migrations/postgres/0001_schema.sql applied (through `psql`) in a new schema
of its own (schema_compare_<pid>, first on the search_path), dropped afterwards unless
--keep; --schema NAME uses NAME instead.

Then each step — one statement, written as the daemon's store writes it (or one text per
dialect where a literal differs, e.g. a BLOB) — runs on both, each in its own
transaction (autocommit). After every step the two must agree on:

  * whether the statement was refused, and why: a trigger's RAISE by its message text
    (which must be the same), or the kind of constraint (UNIQUE, CHECK, NOT NULL,
    FOREIGN KEY); each step also names the outcome it expects, so a step that fails on
    both sides for a reason of its own (a typo) is caught too;
  * every row of every table (REAL/DOUBLE PRECISION compared as floats, BLOB/BYTEA as
    hex), the schedules' strips (`recent_runs`) byte for byte.

Prints a line per step that differs (every step with -v), and "N passed, N failed";
exits 1 on any difference, 0 when none (2 on an apply error). Python 3 standard library
and psql only.
"""

import argparse
import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SQLITE_DIR = ROOT / "migrations" / "daemon"
# Every PostgreSQL migration, in order (psql applies them as one transaction).
POSTGRES_FILES = sorted((ROOT / "migrations" / "postgres").glob("[0-9][0-9][0-9][0-9]_*.sql"))

OK = "ok"
UNIQUE = "unique"
CHECK = "check"
NOT_NULL = "not_null"
FOREIGN_KEY = "foreign_key"

PG_CODES = {"23505": UNIQUE, "23514": CHECK, "23502": NOT_NULL, "23503": FOREIGN_KEY}


def raised(message):
    return f"raise: {message}"


# ----------------------------------------------------------------------------- SQL text


def lit(v):
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return "'" + str(v).replace("'", "''") + "'"


def blob(hex_digits):
    """A BLOB/BYTEA literal: (SQLite text, PostgreSQL text)."""
    return f"x'{hex_digits}'", f"'\\x{hex_digits}'::bytea"


def schedule(sid, name, enabled=1, kind="every", next_fire=None, at=0):
    return (
        "INSERT INTO schedules (id, name, spec, enabled, trigger_kind, timezone, "
        "timezone_source, anchor_ms, next_fire_at_ms, last_fired_at_ms, cadence_ms, max_runs, "
        "runs_counted, created_at_ms, updated_at_ms, revision, managed_by, owner_key, source) "
        f"VALUES ({lit(sid)}, {lit(name)}, '{{}}', {enabled}, {lit(kind)}, NULL, NULL, 0, "
        f"{lit(next_fire)}, NULL, NULL, NULL, 0, {at}, {at}, 1, NULL, NULL, NULL)"
    )


def run(rid, sid, status, created, kind="scheduled", finished=None, occurrence=None,
        task_id=None, **extra):
    """The insert of `insert_run` (runs.rs), with `extra` columns as a restore writes."""
    cols = ("id, schedule_id, schedule_name, occurrence_key, kind, status, reason, action, "
            "scheduled_at_ms, created_at_ms, finished_at_ms, counted, chain_parent_id, "
            "chain_depth, replaces_run_id, follow_ups, attempt, approval_id, task_id, "
            "worker_id, fence, lease_expires_at_ms")
    vals = (f"{lit(rid)}, {lit(sid)}, (SELECT name FROM schedules WHERE id = {lit(sid)}), "
            f"{lit(occurrence)}, {lit(kind)}, {lit(status)}, NULL, '{{}}', NULL, {created}, "
            f"{lit(finished)}, 0, NULL, 0, NULL, NULL, 1, NULL, {lit(task_id)}, NULL, NULL, NULL")
    for k, v in extra.items():
        cols += f", {k}"
        vals += f", {lit(v)}"
    return f"INSERT INTO runs ({cols}) VALUES ({vals})"


def step(rid, to, frm, now=None, terminal=False, cost=None, error_line=None, tokens=None):
    """The compare-and-set of `step_in` (runs.rs), binds written as literals."""
    return (
        f"UPDATE runs SET status = {lit(to)}, reason = COALESCE(NULL, reason), "
        f"finished_at_ms = CASE WHEN {lit(terminal)} THEN {lit(now)} ELSE finished_at_ms END, "
        "exit_code = COALESCE(NULL, exit_code), signal = COALESCE(NULL, signal), "
        "stdout_tail = COALESCE(NULL, stdout_tail), stderr_tail = COALESCE(NULL, stderr_tail), "
        "stdout_bytes = COALESCE(NULL, stdout_bytes), stderr_bytes = COALESCE(NULL, stderr_bytes), "
        f"cost_usd = COALESCE({lit(cost)}, cost_usd), tokens = COALESCE({lit(tokens)}, tokens), "
        f"error_line = COALESCE({lit(error_line)}, error_line), "
        "counted = CASE WHEN false THEN 1 ELSE counted END "
        f"WHERE id = {lit(rid)} AND status = {lit(frm)}"
    )


def evidence(seq, chain, run_id=None, at=1000):
    return (
        "INSERT INTO evidence (seq, at_ms, kind, content, content_sha256, chain_sha256, mac, "
        f"approval_id, run_id) VALUES ({seq}, {at + seq}, 'approval_requested', '{{}}', "
        f"'c{seq}', {lit(chain)}, 'm{seq}', NULL, {lit(run_id)})"
    )


def checkpoint(through, chain, at=5000):
    """`delete_evidence_chunk`'s upsert (retention.rs)."""
    return (
        "INSERT INTO evidence_checkpoint (id, through_seq, chain_sha256, at_ms) "
        f"VALUES (1, {through}, {lit(chain)}, {at}) ON CONFLICT (id) DO UPDATE SET "
        f"through_seq = {through}, chain_sha256 = {lit(chain)}, at_ms = {at}"
    )


H = 3_600_000  # an hour in ms

ADMIN = raised("admin_events is append-only")
EVIDENCE_UPDATE = raised("evidence is append-only")
EVIDENCE_DELETE = raised("evidence is append-only: only rows behind its checkpoint are pruned")
CHECKPOINT_INSERT = raised("an evidence checkpoint names a stored row and its chain hash")
CHECKPOINT_UPDATE = raised("the evidence checkpoint only moves on, to a stored row")
CHECKPOINT_DELETE = raised("the evidence checkpoint is never removed")

# Ids that sort differently bytewise (SQLite's BINARY) and in a natural-language collation.
STRIP_IDS = ["B-1", "a-1", "a1", "A-2", "b", "_x", "Z", "z-9", "é", "e", "0", "-0"]
ERROR_LINES = [
    'said "no"', "back\\slash", "new\nline\ttab", "\x01\x1f control", "ünïcödé ✓ 😀",
    "it's", "</script>", None, "", "[\"json\", 1]", "\u2028sep", "slash/here",
]


def steps():
    s = []
    add = lambda label, sql, expect=OK: s.append((label, sql, expect))  # noqa: E731

    # ---- the audit trail is append-only (0001)
    add("epoch", "INSERT INTO epochs (epoch, pid, started_at_ms) VALUES ('e1', 7, 10)")
    lite_d1, pg_d1 = blob("01" * 32)
    lite_d2, pg_d2 = blob("02" * 32)
    add("principal",
        ("INSERT INTO principals (id, epoch, kind, origin, role, device, token_digest, "
         "decision_digest, decision_expires_at_ms, expires_at_ms, created_at_ms, "
         f"last_seen_at_ms) VALUES ('p1', 'e1', 'browser', 'o', 'operator', NULL, {lite_d1}, "
         f"{lite_d2}, 5, 9, 1, 1)",
         "INSERT INTO principals (id, epoch, kind, origin, role, device, token_digest, "
         "decision_digest, decision_expires_at_ms, expires_at_ms, created_at_ms, "
         f"last_seen_at_ms) VALUES ('p1', 'e1', 'browser', 'o', 'operator', NULL, {pg_d1}, "
         f"{pg_d2}, 5, 9, 1, 1)"))
    add("principal: defaults (expires_at_ms, role)",
        ("INSERT INTO principals (id, epoch, kind, origin, token_digest, decision_digest, "
         f"decision_expires_at_ms, created_at_ms, last_seen_at_ms) VALUES ('p2', 'e1', 'b', "
         f"'o', {blob('03')[0]}, {blob('04')[0]}, 0, 1, 1)",
         "INSERT INTO principals (id, epoch, kind, origin, token_digest, decision_digest, "
         f"decision_expires_at_ms, created_at_ms, last_seen_at_ms) VALUES ('p2', 'e1', 'b', "
         f"'o', {blob('03')[1]}, {blob('04')[1]}, 0, 1, 1)"))
    add("principal: the same token digest is refused",
        ("INSERT INTO principals (id, epoch, kind, origin, token_digest, decision_digest, "
         f"decision_expires_at_ms, created_at_ms, last_seen_at_ms) VALUES ('p3', 'e1', 'b', "
         f"'o', {lite_d1}, {blob('05')[0]}, 0, 1, 1)",
         "INSERT INTO principals (id, epoch, kind, origin, token_digest, decision_digest, "
         f"decision_expires_at_ms, created_at_ms, last_seen_at_ms) VALUES ('p3', 'e1', 'b', "
         f"'o', {pg_d1}, {blob('05')[1]}, 0, 1, 1)"), UNIQUE)
    add("principal: an unknown epoch is refused",
        ("INSERT INTO principals (id, epoch, kind, origin, token_digest, decision_digest, "
         f"decision_expires_at_ms, created_at_ms, last_seen_at_ms) VALUES ('p4', 'nope', 'b', "
         f"'o', {blob('06')[0]}, {blob('07')[0]}, 0, 1, 1)",
         "INSERT INTO principals (id, epoch, kind, origin, token_digest, decision_digest, "
         f"decision_expires_at_ms, created_at_ms, last_seen_at_ms) VALUES ('p4', 'nope', 'b', "
         f"'o', {blob('06')[1]}, {blob('07')[1]}, 0, 1, 1)"), FOREIGN_KEY)
    add("principal: an unknown role is refused",
        "UPDATE principals SET role = 'owner' WHERE id = 'p1'", CHECK)
    add("principal: set role", "UPDATE principals SET role = 'viewer' WHERE id = 'p1' "
        "AND epoch = 'e1' AND revoked_at_ms IS NULL AND expires_at_ms > 0")
    add("admin event (append_event)",
        "INSERT INTO admin_events (at_ms, kind, epoch, principal_id, detail) "
        "VALUES (5, 'epoch_started', 'e1', NULL, '{}')")
    add("admin event: detail's default",
        "INSERT INTO admin_events (at_ms, kind, epoch) VALUES (6, 'paired', 'e1')")
    add("admin event (audit::append)",
        "INSERT INTO admin_events (at_ms, kind, epoch, principal_id, role, origin, object, "
        "detail, schedule_id) VALUES (7, 'schedule.create', 'e1', 'p1', 'admin', 'o', "
        "'schedule:s1', '{\"a\":1}', 's1')")
    add("admin events: UPDATE refused", "UPDATE admin_events SET kind = 'x' WHERE id = 1", ADMIN)
    add("admin events: UPDATE of every row refused", "UPDATE admin_events SET detail = '{}'", ADMIN)
    add("admin events: DELETE refused", "DELETE FROM admin_events", ADMIN)
    add("admin events: DELETE of one row refused", "DELETE FROM admin_events WHERE id = 2", ADMIN)
    add("admin events: a DELETE that matches no row is no change",
        "DELETE FROM admin_events WHERE id = 999")
    add("admin events: an UPDATE that matches no row is no change",
        "UPDATE admin_events SET kind = 'x' WHERE id = 999")

    # ---- schedules, runs and the rollups (0002, 0004, 0014)
    add("schedule s1", schedule("s1", "alpha", next_fire=100))
    add("schedule s2", schedule("s2", "Beta", next_fire=100))
    add("schedule s3 (cron, disabled)", schedule("s3", "gamma", enabled=0, kind="cron"))
    add("schedule: a taken name is refused", schedule("s4", "alpha"), UNIQUE)
    add("schedule: an unknown trigger kind is refused", schedule("s5", "delta", kind="weekly"),
        CHECK)
    add("fire claim (Cursor::Advance)",
        "UPDATE schedules SET last_fired_at_ms = 100, runs_counted = runs_counted + 1, "
        "next_fire_at_ms = CASE WHEN max_runs IS NOT NULL AND runs_counted + 1 >= max_runs "
        "THEN NULL ELSE 200 END WHERE id = 's1' AND enabled = 1 AND next_fire_at_ms = 100 "
        "AND (1 = 0 OR max_runs IS NULL OR runs_counted < max_runs)")
    add("run r1 queued: counted in its hour, strip, has_runs",
        run("r1", "s1", "queued", H + 5, occurrence="s1:100"))
    add("transition of r1",
        "INSERT INTO run_transitions (run_id, from_status, to_status, reason, at_ms) "
        "VALUES ('r1', NULL, 'queued', NULL, 3600005)")
    add("run: the same occurrence is refused",
        run("r1b", "s1", "queued", H + 6, occurrence="s1:100"), UNIQUE)
    add("run: an unknown status is refused", run("rx", "s1", "paused", H), CHECK)
    add("run: an unknown kind is refused", run("rx", "s1", "queued", H, kind="cron"), CHECK)
    add("run: an unknown schedule is refused", run("rx", "nope", "queued", H), FOREIGN_KEY)
    add("run: no action is refused",
        "INSERT INTO runs (id, kind, status, action, created_at_ms) "
        "VALUES ('rx', 'manual', 'queued', NULL, 1)", NOT_NULL)
    add("r1 queued → running (tasks.rs)",
        "UPDATE runs SET status = 'running' WHERE id = 'r1' AND status = 'queued'")
    add("r1 dispatched (mark_dispatched)",
        "UPDATE runs SET dispatched_at_ms = 3600010, pid = 42, pid_start_ticks = 9, "
        "boot_id = 'b', program = COALESCE('/bin/true', program), "
        "deadline_at_ms = COALESCE(NULL, deadline_at_ms) "
        "WHERE id = 'r1' AND dispatched_at_ms IS NULL")
    add("r1 running → completed with cost: outcome, spend, strip",
        step("r1", "completed", "running", now=H + 100, terminal=True, cost=0.25))
    add("r1: a step from a status it is not in changes nothing",
        step("r1", "failed", "running", now=H + 200, terminal=True, cost=9.0))
    add("run r2 inserted failed (finished): outcome at once, cost at once",
        run("r2", "s1", "failed", H + 50, kind="manual", finished=H + 150, cost_usd=0.5,
            error_line="boom"))
    add("run r3 chain step completed later: no outcome",
        run("r3", "s1", "completed", H + 60, kind="chain", finished=H + 900))
    add("run r4 running, then timed out earlier than the outcome: outcome kept",
        run("r4", "s1", "running", H + 70))
    add("r4 → timed_out at an earlier instant",
        step("r4", "timed_out", "running", now=H + 120, terminal=True, error_line="deadline"))
    add("run r5 completed at the same instant as the outcome: it takes over (>=)",
        run("r5", "s1", "completed", H + 80, finished=H + 150))
    add("run r6 queued, cost reported while queued",
        run("r6", "s1", "queued", 2 * H + 1))
    add("r6 cost set: spend adds", "UPDATE runs SET cost_usd = 0.125 WHERE id = 'r6'")
    add("r6 cost changed: spend moves by the difference",
        "UPDATE runs SET cost_usd = 0.375 WHERE id = 'r6'")
    add("r6 cost set to the same value: no change", "UPDATE runs SET cost_usd = 0.375 WHERE id = 'r6'")
    add("r6 cost cleared: spend takes it back", "UPDATE runs SET cost_usd = NULL WHERE id = 'r6'")
    add("r6 status set to itself: no count moves, the strip recomputes",
        "UPDATE runs SET status = status WHERE id = 'r6'")
    add("r6 → failed with no finish time: no outcome (NULL >= …)",
        "UPDATE runs SET status = 'failed', finished_at_ms = NULL WHERE id = 'r6'")
    add("r6 → skipped while moving hours: old hour -1, new hour +1",
        "UPDATE runs SET status = 'skipped', created_at_ms = created_at_ms + 3600000 "
        "WHERE id = 'r6'")
    add("r6 error line set: strip recomputes",
        "UPDATE runs SET error_line = 'late \"quote\"' WHERE id = 'r6'")
    add("run r7 at a negative instant: % truncates alike",
        run("r7", "s1", "queued", -5, kind="manual"))
    add("run r8 of no schedule, completed with cost: counts only",
        run("r8", None, "completed", 3 * H, kind="manual", finished=3 * H + 1, cost_usd=1.5))
    add("r8 cost changed, no schedule: no spend", "UPDATE runs SET cost_usd = 2.5 WHERE id = 'r8'")
    add("r8 → failed, no schedule: counts move, no outcome",
        "UPDATE runs SET status = 'failed' WHERE id = 'r8'")
    add("task run r9 (kind task)", run("r9", None, "queued", 3 * H + 2, kind="task", task_id="t1"))
    add("run r10 for s2 awaiting approval", run("r10", "s2", "awaiting_approval", 4 * H))
    add("r10 → denied: not an outcome",
        "UPDATE runs SET status = 'denied', finished_at_ms = 14400001 WHERE id = 'r10'")
    add("r10 approval id (approvals::raise)", "UPDATE runs SET approval_id = 'a1' WHERE id = 'r10'")
    add("run r11 for s2 inserted with a cost (spend 0.1)",
        run("r11", "s2", "completed", 4 * H + 1, kind="manual", finished=4 * H + 2, cost_usd=0.1))
    add("run r12 for s2 queued", run("r12", "s2", "queued", 4 * H + 3))
    add("r12 cost 0.3 (spend 0.1 + 0.3)", "UPDATE runs SET cost_usd = 0.3 WHERE id = 'r12'")
    add("r12 cost 0.3 again: no change (not + 0.3 - 0.3, which rounds)",
        "UPDATE runs SET cost_usd = 0.3 WHERE id = 'r12'")
    add("four runs of s2 in one INSERT (ties on the finish instant: the later row wins)",
        "INSERT INTO runs (id, schedule_id, kind, status, action, created_at_ms, "
        "finished_at_ms, cost_usd, error_line) VALUES "
        f"('m1', 's2', 'scheduled', 'failed', '{{}}', {6 * H}, {6 * H + 10}, 0.5, 'boom'), "
        f"('m2', 's2', 'manual', 'completed', '{{}}', {6 * H + 1}, {6 * H + 10}, NULL, NULL), "
        f"('m3', 's2', 'chain', 'failed', '{{}}', {7 * H}, {7 * H + 40}, 0.25, NULL), "
        f"('m4', 's2', 'scheduled', 'running', '{{}}', {7 * H + 50}, NULL, NULL, NULL), "
        f"('m5', 's2', 'scheduled', 'running', '{{}}', {7 * H + 51}, NULL, NULL, NULL)")
    add("two runs of s2 end in one UPDATE at the same instant",
        "UPDATE runs SET status = CASE id WHEN 'm4' THEN 'failed' ELSE 'timed_out' END, "
        f"finished_at_ms = {8 * H} WHERE id IN ('m5', 'm4')")
    add("many queued runs cancelled at once (multi-row status change)",
        "UPDATE runs SET status = 'cancelled' WHERE status IN ('queued', 'running')")

    # ---- strips: order (bytewise ids), JSON text (escapes), the newest ten, deletes (0014)
    for i, (rid, line) in enumerate(zip(STRIP_IDS, ERROR_LINES)):
        created = 5 * H + (i // 3)  # ties of three: the id orders them, bytewise, newest first
        add(f"strip run {rid!r}", run(rid, "s3", "failed", created, finished=created + 1,
                                      error_line=line))
    add("strip: an error line changed to one with quotes, backslash, CR, BS, FF, DEL",
        "UPDATE runs SET error_line = 'q\"\\/x\r\b\f\x7f' WHERE id = 'Z'")
    add("strip: a shown run deleted recomputes (the eleventh appears)",
        "DELETE FROM runs WHERE id = 'z-9'")
    add("strip made stale by hand", "UPDATE schedules SET recent_runs = 'stale' WHERE id = 's3'")
    add("strip: a run it does not show deleted leaves it as it is",
        "DELETE FROM runs WHERE id = '-0'")
    add("strip: a run whose id is in its text deleted recomputes",
        "UPDATE schedules SET recent_runs = '[\"b\"]' WHERE id = 's3'")
    add("strip: … (the delete)", "DELETE FROM runs WHERE id = 'b'")
    add("strip: several runs deleted at once, shown and not",
        "DELETE FROM runs WHERE schedule_id = 's3' AND id IN ('B-1', 'a-1', 'e', '0')")
    add("strip: runs of one schedule deleted by retention (json_each list)",
        "DELETE FROM runs WHERE id IN ('r3', 'r5')")
    add("restore take-back of an hourly count (take_back_rollups)",
        f"UPDATE run_counts_hourly SET runs = runs - 1 WHERE hour_ms = {H + 80} - {H + 80} % 3600000 "
        "AND status = 'completed'")
    add("restore take-back of spend", "UPDATE schedules SET spend_usd = spend_usd - 0.25 WHERE id = 's1'")
    add("restore: r5 inserted again with every column it had",
        run("r5", "s1", "completed", H + 80, finished=H + 150, cost_usd=0.0625, error_line=None,
            stdout_tail="out", logs_pruned_at_ms=None))
    add("hourly counts pruned (prune_run_counts)", f"DELETE FROM run_counts_hourly WHERE hour_ms < {2 * H}")
    add("r2 status set to itself after its hour was pruned: no count appears",
        "UPDATE runs SET status = status WHERE id = 'r2'")
    add("r1 → failed after its hour was pruned: no row to take from",
        "UPDATE runs SET status = 'failed' WHERE id = 'r1'")
    add("schedule s1 deleted: its runs keep no schedule (ON DELETE SET NULL)",
        "DELETE FROM schedules WHERE id = 's1' AND revision = 1")
    add("orphan run r2 → completed: counts only",
        "UPDATE runs SET status = 'completed' WHERE id = 'r2'")
    add("orphan run r4 deleted", "DELETE FROM runs WHERE id = 'r4'")

    # ---- transitions and events (identity columns, as AUTOINCREMENT)
    add("transition 2", "INSERT INTO run_transitions (run_id, from_status, to_status, reason, at_ms) "
        "VALUES ('r1', 'queued', 'running', NULL, 3600006)")
    add("transitions pruned", "DELETE FROM run_transitions WHERE run_id = 'r1'")
    add("transition restored with its id (restore_rows)",
        "INSERT INTO run_transitions (id, run_id, from_status, to_status, reason, at_ms) "
        "VALUES (1, 'r1', NULL, 'queued', NULL, 3600005)")
    add("transition after a restore takes the next id",
        "INSERT INTO run_transitions (run_id, from_status, to_status, reason, at_ms) "
        "VALUES ('r2', NULL, 'failed', 'x', 9)")
    for i in range(4):
        add(f"event {i + 1}", f"INSERT INTO events (at_ms, kind, data) VALUES ({i}, 'run', '{{}}')")
    add("events pruned (prune_events)",
        "DELETE FROM events WHERE seq <= (SELECT MAX(seq) FROM events) - 2")
    add("event after a prune takes the next seq",
        "INSERT INTO events (at_ms, kind, data) VALUES (9, 'schedule', '{\"x\":1}')")
    add("retention pass (begin_pass)",
        "INSERT INTO retention_passes (trigger, started_at_ms, outcome, archive_dir) "
        "VALUES ('clock', 1, 'running', NULL)")
    add("retention pass finished (finish_pass)",
        "UPDATE retention_passes SET finished_at_ms = 2, outcome = 'completed', error = NULL, "
        "pruned = '{\"runs\":2}', archives = 1, chunks = 1, longest_chunk_ms = 1.5, "
        "checkpoint = NULL WHERE id = 1")
    add("retention pass: an unknown outcome is refused",
        "UPDATE retention_passes SET outcome = 'done' WHERE id = 1", CHECK)
    add("retention policy upsert",
        "INSERT INTO retention_policy (id, policy, source, updated_at_ms, updated_by) "
        "VALUES (1, '{}', 'api', 3, 'p1') ON CONFLICT (id) DO UPDATE SET policy = '{}', "
        "source = 'api', updated_at_ms = 3, updated_by = 'p1'")
    add("retention policy upsert again",
        "INSERT INTO retention_policy (id, policy, source, updated_at_ms, updated_by) "
        "VALUES (1, '{\"k\":1}', 'config', 4, NULL) ON CONFLICT (id) DO UPDATE SET "
        "policy = '{\"k\":1}', source = 'config', updated_at_ms = 4, updated_by = NULL")
    add("retention policy: a second row is refused",
        "INSERT INTO retention_policy (id, policy, source, updated_at_ms) VALUES (2, '{}', 'api', 1)",
        CHECK)

    # ---- evidence and its checkpoint (0019, 0026)
    for seq in range(1, 7):
        add(f"evidence {seq}", evidence(seq, f"h{seq}", run_id="r1" if seq == 2 else None))
    add("evidence: the same seq is refused", evidence(3, "hx"), UNIQUE)
    add("evidence: UPDATE refused", "UPDATE evidence SET mac = 'x' WHERE seq = 1", EVIDENCE_UPDATE)
    add("evidence: DELETE without a checkpoint refused", "DELETE FROM evidence WHERE seq = 1",
        EVIDENCE_DELETE)
    add("checkpoint naming a wrong hash refused", checkpoint(2, "h3"), CHECKPOINT_INSERT)
    add("checkpoint naming no stored row refused", checkpoint(9, "h9"), CHECKPOINT_INSERT)
    add("checkpoint with id 2 and a wrong hash: the trigger refuses first",
        "INSERT INTO evidence_checkpoint (id, through_seq, chain_sha256, at_ms) VALUES (2, 2, 'no', 1)",
        CHECKPOINT_INSERT)
    add("checkpoint with id 2 and the right hash: CHECK refuses",
        "INSERT INTO evidence_checkpoint (id, through_seq, chain_sha256, at_ms) VALUES (2, 2, 'h2', 1)",
        CHECK)
    add("checkpoint at 2 (delete_evidence_chunk)", checkpoint(2, "h2"))
    add("evidence behind the checkpoint pruned", "DELETE FROM evidence WHERE seq <= 2")
    add("evidence ahead of the checkpoint: DELETE refused", "DELETE FROM evidence WHERE seq = 3",
        EVIDENCE_DELETE)
    add("evidence: a DELETE reaching past the checkpoint is refused whole",
        "DELETE FROM evidence WHERE seq <= 4", EVIDENCE_DELETE)
    add("checkpoint moved on to 4 (upsert)", checkpoint(4, "h4", at=6000))
    add("checkpoint moved back by upsert to a pruned row: the INSERT trigger refuses",
        checkpoint(1, "h1"), CHECKPOINT_INSERT)
    add("a pruned row written again (seq 2)", evidence(2, "h2"))
    add("checkpoint moved back by upsert to a stored row: the UPDATE trigger refuses",
        checkpoint(2, "h2"), CHECKPOINT_UPDATE)
    add("checkpoint moved back by UPDATE refused",
        "UPDATE evidence_checkpoint SET through_seq = 3, chain_sha256 = 'h3'", CHECKPOINT_UPDATE)
    add("checkpoint given a wrong hash by UPDATE refused",
        "UPDATE evidence_checkpoint SET chain_sha256 = 'zz'", CHECKPOINT_UPDATE)
    add("checkpoint UPDATE of its time only", "UPDATE evidence_checkpoint SET at_ms = 7000")
    add("checkpoint moved on by UPDATE", "UPDATE evidence_checkpoint SET through_seq = 5, "
        "chain_sha256 = 'h5' WHERE id = 1")
    add("checkpoint: DELETE refused", "DELETE FROM evidence_checkpoint", CHECKPOINT_DELETE)
    add("checkpoint: a DELETE that matches no row is no change",
        "DELETE FROM evidence_checkpoint WHERE id = 2")
    add("evidence behind the checkpoint pruned (3..5, and the rewritten 2)",
        "DELETE FROM evidence WHERE seq <= 5")
    add("evidence: UPDATE still refused", "UPDATE evidence SET kind = 'x'", EVIDENCE_UPDATE)
    add("evidence 7", evidence(7, "h7", run_id="r9"))

    # ---- the other constraints
    add("fence taken (tasks.rs)", "UPDATE fences SET last = last + 1")
    add("fence: a second row is refused", "INSERT INTO fences (id, last) VALUES (2, 0)", CHECK)
    add("health probe upsert",
        "INSERT INTO health_probe (id, probed_at_ms) VALUES (1, 5) "
        "ON CONFLICT (id) DO UPDATE SET probed_at_ms = excluded.probed_at_ms")
    add("health probe upsert again",
        "INSERT INTO health_probe (id, probed_at_ms) VALUES (1, 6) "
        "ON CONFLICT (id) DO UPDATE SET probed_at_ms = excluded.probed_at_ms")
    n12, n11 = blob("00" * 12), blob("00" * 11)
    add("secret",
        tuple(f"INSERT INTO secrets (name, nonce, ciphertext, created_at_ms, updated_at_ms, "
              f"updated_by) VALUES ('k', {n}, {c}, 1, 1, NULL)"
              for n, c in zip(n12, blob("abcd"))))
    add("secret: an 11-byte nonce is refused",
        tuple(f"INSERT INTO secrets (name, nonce, ciphertext, created_at_ms, updated_at_ms) "
              f"VALUES ('k2', {n}, {n}, 1, 1)" for n in n11), CHECK)
    add("endpoint: an unknown format is refused",
        tuple(f"INSERT INTO notify_endpoints (name, url, format, nonce, ciphertext, "
              f"created_at_ms) VALUES ('e', 'http://x', 'xml', {n}, {n}, 1)" for n in n12), CHECK)
    add("notification", "INSERT INTO notify_outbox (id, endpoint, event, run_id, schedule_id, "
        "task_id, payload, status, next_attempt_at_ms, created_at_ms, updated_at_ms) VALUES "
        "('d1', 'e', 'run.failed', 'r2', NULL, NULL, '{}', 'pending', 5, 1, 1)")
    add("notification: an unknown status is refused",
        "UPDATE notify_outbox SET status = 'sent' WHERE id = 'd1'", CHECK)
    add("notify streak upsert", "INSERT INTO notify_streaks (owner, failures, updated_at_ms) "
        "VALUES ('s2', 1, 2) ON CONFLICT (owner) DO UPDATE SET failures = 1, updated_at_ms = 2")
    add("notify streak default", "INSERT INTO notify_streaks (owner, updated_at_ms) VALUES ('s9', 2)")
    add("approval pending", "INSERT INTO approvals (id, run_id, schedule_id, schedule_name, "
        "action_json, action_sha256, requested_by, requested_at_ms, expires_at_ms, "
        "distinct_from_requester, status) VALUES ('a1', 'r10', 's2', 'Beta', '{}', 'x', NULL, "
        "1, 2, 0, 'pending')")
    add("approval: a second open one for the run is refused (approvals_open_per_run)",
        "INSERT INTO approvals (id, run_id, action_json, action_sha256, requested_at_ms, "
        "expires_at_ms, status) VALUES ('a2', 'r10', '{}', 'x', 1, 2, 'granted')", UNIQUE)
    add("approval voided", "UPDATE approvals SET status = 'voided' WHERE id = 'a1'")
    add("approval: a new open one once the old is void",
        "INSERT INTO approvals (id, run_id, action_json, action_sha256, requested_at_ms, "
        "expires_at_ms, status) VALUES ('a2', 'r10', '{}', 'x', 1, 2, 'granted')")
    add("approval: an unknown status is refused",
        "UPDATE approvals SET status = 'maybe' WHERE id = 'a2'", CHECK)
    add("task", "INSERT INTO tasks (id, idempotency_key, spec, spec_sha256, status, "
        "created_at_ms, updated_at_ms) VALUES ('t1', 'k1', '{}', 'x', 'queued', 1, 1)")
    add("task: the same idempotency key is refused",
        "INSERT INTO tasks (id, idempotency_key, spec, spec_sha256, status, created_at_ms, "
        "updated_at_ms) VALUES ('t2', 'k1', '{}', 'x', 'queued', 1, 1)", UNIQUE)
    add("task: priority 10 is refused",
        "INSERT INTO tasks (id, spec, spec_sha256, priority, status, created_at_ms, "
        "updated_at_ms) VALUES ('t3', '{}', 'x', 10, 'queued', 1, 1)", CHECK)
    add("worker", "INSERT INTO workers (id, name, labels, cert_sha256, cert_serial, "
        "cert_not_after_ms, enrolled_at_ms) VALUES ('w1', 'w', 'gpu', 'c', '1', 9, 1)")
    add("worker: capacity 0 is refused", "UPDATE workers SET capacity = 0 WHERE id = 'w1'", CHECK)
    add("worker join token", "INSERT INTO worker_join_tokens (digest, created_at_ms, "
        "expires_at_ms) VALUES ('d', 1, 2)")
    add("allow-list entry", "INSERT INTO command_allowlist (executable, added_at_ms, added_by) "
        "VALUES ('true', 1, 'seed') ON CONFLICT (executable) DO NOTHING")
    add("allow-list entry again: nothing", "INSERT INTO command_allowlist (executable, "
        "added_at_ms, added_by) VALUES ('true', 2, 'p1') ON CONFLICT (executable) DO NOTHING")
    add("daemon fact", "INSERT INTO daemon_facts (name, value) VALUES ('seeded', '1') "
        "ON CONFLICT (name) DO NOTHING")
    return s


# ----------------------------------------------------------------------------- engines


def classify_sqlite(e):
    m = str(e)
    for prefix, kind in (("UNIQUE constraint failed", UNIQUE), ("CHECK constraint failed", CHECK),
                         ("NOT NULL constraint failed", NOT_NULL),
                         ("FOREIGN KEY constraint failed", FOREIGN_KEY)):
        if m.startswith(prefix):
            return kind
    if isinstance(e, sqlite3.IntegrityError):
        return raised(m)  # RAISE(ABORT, m) in a trigger
    return f"error: {m}"


def classify_pg(stderr):
    m = re.search(r"^ERROR:\s+([0-9A-Z]{5}):\s+(.*)$", stderr, re.MULTILINE)
    if not m:
        return f"error: {stderr.strip()}"
    code, message = m.groups()
    if code == "P0001":
        return raised(message)
    return PG_CODES.get(code, f"error: {code} {message}")


class Sqlite:
    def __init__(self, path, directory):
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA foreign_keys = ON")  # as studiod opens its store
        files = sorted(
            (int(re.match(r"^(\d+)_", p.name).group(1)), p)
            for p in directory.glob("*.sql")
            if re.match(r"^\d+_", p.name)
        )
        for _, path in files:
            self.db.executescript(path.read_text())
        self.db.execute("PRAGMA foreign_keys = ON")
        self.tables = [
            r[0]
            for r in self.db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name NOT LIKE 'sqlite%' AND name <> '_sqlx_migrations' ORDER BY name"
            )
        ]
        self.real = {
            t: {r[1] for r in self.db.execute(f'PRAGMA table_info("{t}")') if r[2].upper() == "REAL"}
            for t in self.tables
        }

    def execute(self, sql):
        try:
            self.db.execute(sql)
            return OK
        except sqlite3.Error as e:
            return classify_sqlite(e)

    def dump(self):
        out = {}
        for t in self.tables:
            cur = self.db.execute(f'SELECT * FROM "{t}"')
            names = [d[0] for d in cur.description]
            rows = []
            for r in cur.fetchall():
                row = {}
                for k, v in zip(names, r):
                    row[k] = "\\x" + v.hex() if isinstance(v, bytes) else v
                rows.append(row)
            out[t] = rows
        return out


class Postgres:
    def __init__(self, url, schema, tables):
        self.url, self.schema, self.tables = url, schema, tables
        parts = ", ".join(
            f"'{t}', (SELECT COALESCE(json_agg(to_jsonb(x)), '[]'::json) FROM {t} AS x)"
            for t in tables
        )
        self.dump_sql = f"SELECT '@@' || json_build_object({parts})::text"

    def run(self, *commands):
        cmd = ["psql", "-X", "-q", "-A", "-t", "-v", "VERBOSITY=verbose", "-d", self.url]
        for c in commands:
            cmd += ["-c", c]
        env = dict(os.environ)
        env["PGOPTIONS"] = (env.get("PGOPTIONS", "") + f' -c search_path="{self.schema}"').strip()
        return subprocess.run(cmd, capture_output=True, text=True, env=env)

    def execute_and_dump(self, sql):
        done = self.run(sql, self.dump_sql)
        dump_line = next((l for l in done.stdout.split("\n") if l.startswith("@@")), None)
        if dump_line is None:
            raise RuntimeError(f"no dump from PostgreSQL: {done.stderr}")
        outcome = classify_pg(done.stderr) if "ERROR:" in done.stderr else OK
        return outcome, json.loads(dump_line[2:])


def normalize(dump, real):
    out = {}
    for t, rows in dump.items():
        norm = []
        for r in rows:
            norm.append({k: (float(v) if k in real[t] and v is not None else v) for k, v in r.items()})
        out[t] = sorted(norm, key=lambda r: json.dumps(r, sort_keys=True, ensure_ascii=False))
    return out


def diff_tables(a, b):
    lines = []
    for t in sorted(set(a) | set(b)):
        ra, rb = a.get(t), b.get(t)
        if ra == rb:
            continue
        lines.append(f"    table {t}:")
        sa = {json.dumps(r, sort_keys=True, ensure_ascii=False) for r in ra or []}
        sb = {json.dumps(r, sort_keys=True, ensure_ascii=False) for r in rb or []}
        for r in sorted(sa - sb):
            lines.append(f"      SQLite only:     {r}")
        for r in sorted(sb - sa):
            lines.append(f"      PostgreSQL only: {r}")
    return lines


def psql_admin(url, sql, file=None, schema=None):
    cmd = ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url]
    if file:
        cmd.append("-1")
        for f in file if isinstance(file, list) else [file]:
            cmd += ["-f", str(f)]
    else:
        cmd += ["-c", sql]
    env = dict(os.environ)
    if schema:
        env["PGOPTIONS"] = (env.get("PGOPTIONS", "") + f' -c search_path="{schema}"').strip()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError((done.stderr or done.stdout).strip())
    return done.stdout


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("url", help="postgres://… of a database to apply 0001_schema.sql to")
    p.add_argument("--schema", help="apply into this schema (default: a new one, dropped after)")
    p.add_argument("--keep", action="store_true", help="keep the schema this run created")
    p.add_argument("-v", "--verbose", action="store_true", help="print every step")
    p.add_argument("--sqlite-dir", type=Path, default=SQLITE_DIR)
    p.add_argument("--postgres-file", type=Path, action="append",
                   help="a migration to apply instead of migrations/postgres/*.sql (repeatable)")
    args = p.parse_args()

    schema = args.schema or f"schema_compare_{os.getpid()}"
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", schema):
        print("trigger-compare: --schema must be a plain identifier", file=sys.stderr)
        return 2
    created = False
    passed = failed = 0
    with tempfile.TemporaryDirectory(prefix="trigger-compare-") as tmp:
        try:
            lite = Sqlite(os.path.join(tmp, "state.db"), args.sqlite_dir)
        except sqlite3.Error as e:
            print(f"trigger-compare: the SQLite migrations do not apply: {e}", file=sys.stderr)
            return 2
        try:
            exists = psql_admin(
                args.url, f"SELECT 1 FROM pg_namespace WHERE nspname = '{schema}'"
            ).strip().endswith("1")
            if not exists:
                psql_admin(args.url, f'CREATE SCHEMA "{schema}"')
                created = True
            psql_admin(args.url, None, file=args.postgres_file or POSTGRES_FILES, schema=schema)
            pg = Postgres(args.url, schema, lite.tables)

            # The freshly migrated databases (seed rows included) must agree first.
            _, before = pg.execute_and_dump("SELECT 1")
            if normalize(before, lite.real) != normalize(lite.dump(), lite.real):
                print("DIFF the freshly migrated databases differ")
                for line in diff_tables(normalize(lite.dump(), lite.real),
                                        normalize(before, lite.real)):
                    print(line)
                failed += 1
            else:
                passed += 1

            last_table_diff = []
            for label, sql, expect in steps():
                lite_sql, pg_sql = sql if isinstance(sql, tuple) else (sql, sql)
                got_lite = lite.execute(lite_sql)
                got_pg, pg_dump = pg.execute_and_dump(pg_sql)
                a = normalize(lite.dump(), lite.real)
                b = normalize(pg_dump, lite.real)
                problems = []
                if got_lite != expect:
                    problems.append(f"    SQLite gave {got_lite!r}, the step expects {expect!r}")
                if got_pg != got_lite:
                    problems.append(f"    SQLite: {got_lite!r}\n    PostgreSQL: {got_pg!r}")
                table_diff = diff_tables(a, b)
                if table_diff and table_diff == last_table_diff:
                    problems.append("    (the tables differ as after the step before)")
                else:
                    problems += table_diff
                last_table_diff = table_diff
                if problems:
                    failed += 1
                    print(f"DIFF {label}\n    {pg_sql}")
                    for line in problems:
                        print(line)
                else:
                    passed += 1
                    if args.verbose:
                        print(f"ok   {label}: {got_lite}")
        except RuntimeError as e:
            print(f"trigger-compare: PostgreSQL: {e}", file=sys.stderr)
            return 2
        finally:
            if created and not args.keep:
                try:
                    psql_admin(args.url, f'DROP SCHEMA "{schema}" CASCADE')
                except RuntimeError as e:
                    print(f"trigger-compare: could not drop schema {schema}: {e}", file=sys.stderr)
            try:
                lite.db.close()
            except NameError:
                pass

    print(f"trigger-compare: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
