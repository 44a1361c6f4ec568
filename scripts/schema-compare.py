#!/usr/bin/env python3
"""Compares studiod's SQLite schema with its PostgreSQL schema.

    scripts/schema-compare.py POSTGRES_URL [--schema NAME] [--keep]

Applies every SQLite migration (migrations/daemon/NNNN_*.sql, in numeric order, each
with executescript) to a fresh temporary SQLite file, and migrations/postgres/0001_schema.sql
to the PostgreSQL database at POSTGRES_URL (through `psql`, in one transaction), then
compares what each holds:

  * the set of tables (and of views);
  * per table: the ordered column names, each column's type (INTEGER → bigint,
    REAL → double precision, TEXT → text, BLOB → bytea), NOT NULL-ness, whether it has a
    default and the default's value; the primary key, the UNIQUE constraints, the foreign
    keys (columns, table, referenced columns, ON DELETE / ON UPDATE) and the number of
    CHECK constraints;
  * per table: every index by name, with its key columns (and their direction), whether
    it is unique and whether it is partial;
  * the set of trigger names, with each trigger's table, timing, event (and UPDATE OF
    columns) and row level.

Ignored on each side alike: SQLite's own objects (sqlite_sequence, sqlite_autoindex_*) and
sqlx's _sqlx_migrations, and the indexes PostgreSQL makes for PRIMARY KEY and UNIQUE
constraints (*_pkey, *_key) — those constraints are compared as constraints instead. A
primary key's columns count as NOT NULL on the SQLite side too: PostgreSQL's keys cannot
hold NULL, and SQLite's hold none in practice (an INTEGER PRIMARY KEY never does; see
migrations/postgres/NOTES.md).

By default the PostgreSQL schema is created in a new schema of its own
(schema_compare_<pid>, first on the search_path) that is dropped afterwards, so the
database is left as it was; --schema NAME applies it into NAME instead (created if
missing), --keep keeps what was created. Prints every difference; exits 1 if there is
any, 0 if none (2 on a usage or apply error). Python 3 standard library and psql only.
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

TYPE_MAP = {
    "INTEGER": "bigint",
    "REAL": "double precision",
    "TEXT": "text",
    "BLOB": "bytea",
}
FK_ACTIONS = {
    "a": "NO ACTION",
    "r": "RESTRICT",
    "c": "CASCADE",
    "n": "SET NULL",
    "d": "SET DEFAULT",
}
IGNORED_TABLES = {"sqlite_sequence", "_sqlx_migrations"}


class ApplyError(Exception):
    pass


# ----------------------------------------------------------------------------- SQLite


def sqlite_migrations(directory):
    files = []
    for path in directory.glob("*.sql"):
        m = re.match(r"^(\d+)_", path.name)
        if m:
            files.append((int(m.group(1)), path))
    return [p for _, p in sorted(files)]


def apply_sqlite(path, directory):
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA foreign_keys = ON")
    for migration in sqlite_migrations(directory):
        try:
            db.executescript(migration.read_text())
        except sqlite3.Error as e:
            raise ApplyError(f"{migration.name}: {e}") from e
    return db


def strip_sql_comments(sql):
    """SQL text without -- comments (string literals kept as they are)."""
    out, i, n = [], 0, len(sql)
    while i < n:
        c = sql[i]
        if c == "'":
            j = i + 1
            while j < n:
                if sql[j] == "'":
                    if j + 1 < n and sql[j + 1] == "'":
                        j += 2
                        continue
                    break
                j += 1
            out.append(sql[i : j + 1])
            i = j + 1
        elif sql.startswith("--", i):
            j = sql.find("\n", i)
            i = n if j < 0 else j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def count_checks(create_sql):
    text = re.sub(r"'(?:[^']|'')*'", "''", strip_sql_comments(create_sql))
    return len(re.findall(r"\bCHECK\s*\(", text, re.IGNORECASE))


TRIGGER_RE = re.compile(
    r"CREATE\s+TRIGGER\s+(?:IF\s+NOT\s+EXISTS\s+)?\"?(\w+)\"?\s+"
    r"(BEFORE|AFTER|INSTEAD\s+OF)?\s*"
    r"(INSERT|DELETE|UPDATE(?:\s+OF\s+([\w\s,\"]+?))?)\s+ON\s+\"?(\w+)\"?",
    re.IGNORECASE | re.DOTALL,
)


def sqlite_schema(db):
    q = lambda sql, *a: db.execute(sql, a).fetchall()  # noqa: E731
    schema = {"tables": {}, "views": set(), "triggers": {}}
    tables = q(
        "SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY name"
    )
    for name, create_sql in tables:
        if name in IGNORED_TABLES or name.startswith("sqlite_"):
            continue
        info = q(f'PRAGMA table_info("{name}")')
        pk = [r[1] for r in sorted((r for r in info if r[5] > 0), key=lambda r: r[5])]
        columns = []
        for cid, col, decl, notnull, dflt, pkpos in info:
            columns.append(
                {
                    "name": col,
                    "type": TYPE_MAP.get(decl.upper(), f"?{decl}"),
                    "notnull": bool(notnull) or pkpos > 0,
                    "default": dflt,
                }
            )
        indexes, uniques = {}, []
        for _seq, iname, unique, origin, partial in q(f'PRAGMA index_list("{name}")'):
            keys = [
                r
                for r in q(f'PRAGMA index_xinfo("{iname}")')
                if r[5] == 1  # key columns (not the rowid tail)
            ]
            cols = [
                (r[2] if r[1] >= 0 else "<expression>") + (" DESC" if r[3] else "")
                for r in keys
            ]
            if origin == "u":
                uniques.append(tuple(c for c in cols))
            if origin in ("u", "pk") or iname.startswith("sqlite_autoindex_"):
                continue
            indexes[iname] = {
                "columns": cols,
                "unique": bool(unique),
                "partial": bool(partial),
            }
        fks = {}
        for fid, seq, ref, frm, to, on_update, on_delete, _match in q(
            f'PRAGMA foreign_key_list("{name}")'
        ):
            fk = fks.setdefault(
                fid,
                {"columns": [], "table": ref, "ref": [], "on_update": on_update,
                 "on_delete": on_delete},
            )
            fk["columns"].append(frm)
            fk["ref"].append(to)
        for fk in fks.values():
            if any(c is None for c in fk["ref"]):
                ref_info = q(f'PRAGMA table_info("{fk["table"]}")')
                fk["ref"] = [
                    r[1] for r in sorted((r for r in ref_info if r[5] > 0), key=lambda r: r[5])
                ]
        schema["tables"][name] = {
            "columns": columns,
            "pk": tuple(pk),
            "uniques": sorted(uniques),
            "fks": sorted(
                (tuple(f["columns"]), f["table"], tuple(f["ref"]), f["on_delete"], f["on_update"])
                for f in fks.values()
            ),
            "checks": count_checks(create_sql),
            "indexes": indexes,
        }
    schema["views"] = {r[0] for r in q("SELECT name FROM sqlite_master WHERE type = 'view'")}
    for name, table, sql in q(
        "SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'trigger'"
    ):
        m = TRIGGER_RE.search(strip_sql_comments(sql))
        if not m:
            schema["triggers"][name] = {"table": table, "unparsed": sql}
            continue
        timing = re.sub(r"\s+", " ", (m.group(2) or "BEFORE").upper())
        event = m.group(3).split()[0].upper()
        cols = (
            sorted(c.strip().strip('"') for c in m.group(4).split(","))
            if m.group(4)
            else []
        )
        schema["triggers"][name] = {
            "table": table,
            "timing": timing,
            "event": event,
            "columns": cols,
            "row": True,  # SQLite's triggers are all FOR EACH ROW
        }
    return schema


def sqlite_default_values(db, schema):
    values = {}
    for table, t in schema["tables"].items():
        for c in t["columns"]:
            if c["default"] is not None:
                values[(table, c["name"])] = db.execute(f"SELECT {c['default']}").fetchone()[0]
    return values


# ----------------------------------------------------------------------------- PostgreSQL


def psql(url, sql=None, file=None, schema=None, single_transaction=False):
    cmd = ["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", url]
    if single_transaction:
        cmd.append("-1")
    if file is not None:
        for f in file if isinstance(file, list) else [file]:
            cmd += ["-f", str(f)]
    else:
        cmd += ["-c", sql]
    env = dict(os.environ)
    if schema is not None:
        env["PGOPTIONS"] = (env.get("PGOPTIONS", "") + f" -c search_path={schema}").strip()
    env.setdefault("PGCONNECT_TIMEOUT", "10")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise ApplyError((done.stderr or done.stdout).strip())
    return done.stdout


def quote_literal(s):
    return "'" + s.replace("'", "''") + "'"


def quote_ident(s):
    return '"' + s.replace('"', '""') + '"'


PG_INTROSPECT = """
WITH ns AS (SELECT oid FROM pg_namespace WHERE nspname = {schema}),
tbl AS (
    SELECT c.oid, c.relname FROM pg_class c, ns
    WHERE c.relnamespace = ns.oid AND c.relkind IN ('r', 'p')
)
SELECT json_build_object(
  'tables', COALESCE((SELECT json_object_agg(t.relname, json_build_object(
    'columns', (
      SELECT json_agg(json_build_object(
          'name', a.attname,
          'type', format_type(a.atttypid, a.atttypmod),
          'notnull', a.attnotnull,
          'default', pg_get_expr(d.adbin, d.adrelid),
          'identity', a.attidentity
        ) ORDER BY a.attnum)
      FROM pg_attribute a
      LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
      WHERE a.attrelid = t.oid AND a.attnum > 0 AND NOT a.attisdropped),
    'constraints', COALESCE((
      SELECT json_agg(json_build_object(
          'type', con.contype,
          'columns', (SELECT json_agg(a.attname ORDER BY k.i)
                      FROM unnest(con.conkey) WITH ORDINALITY AS k(n, i)
                      JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.n),
          'table', CASE WHEN con.contype = 'f' THEN (SELECT relname FROM pg_class WHERE oid = con.confrelid) END,
          'ref', CASE WHEN con.contype = 'f' THEN
                   (SELECT json_agg(a.attname ORDER BY k.i)
                    FROM unnest(con.confkey) WITH ORDINALITY AS k(n, i)
                    JOIN pg_attribute a ON a.attrelid = con.confrelid AND a.attnum = k.n) END,
          'on_delete', con.confdeltype,
          'on_update', con.confupdtype,
          'def', pg_get_constraintdef(con.oid)
        ))
      FROM pg_constraint con WHERE con.conrelid = t.oid), '[]'::json),
    'indexes', COALESCE((
      SELECT json_agg(json_build_object(
          'name', ic.relname,
          'unique', i.indisunique,
          'partial', i.indpred IS NOT NULL,
          'columns', (
            SELECT json_agg(
                CASE WHEN i.indkey[k.n - 1] = 0 THEN '<expression>'
                     ELSE pg_get_indexdef(i.indexrelid, k.n, true) END
                || CASE WHEN (i.indoption[k.n - 1] & 1) = 1 THEN ' DESC' ELSE '' END
                ORDER BY k.n)
            FROM generate_series(1, i.indnkeyatts) AS k(n))
        ))
      FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
      WHERE i.indrelid = t.oid
        AND NOT EXISTS (SELECT 1 FROM pg_constraint con
                        WHERE con.conrelid = i.indrelid AND con.conindid = i.indexrelid
                          AND con.contype IN ('p', 'u', 'x'))), '[]'::json)
  )) FROM tbl t), '{{}}'::json),
  'views', COALESCE((SELECT json_agg(c.relname) FROM pg_class c, ns
                     WHERE c.relnamespace = ns.oid AND c.relkind IN ('v', 'm')), '[]'::json),
  'triggers', COALESCE((
    SELECT json_agg(json_build_object(
        'name', tg.tgname,
        'table', t.relname,
        'type', tg.tgtype,
        'columns', (SELECT json_agg(a.attname ORDER BY a.attname)
                    FROM pg_attribute a
                    WHERE a.attrelid = tg.tgrelid AND a.attnum = ANY (tg.tgattr::int2[]))
      ))
    FROM pg_trigger tg JOIN tbl t ON t.oid = tg.tgrelid
    WHERE NOT tg.tgisinternal), '[]'::json)
)
"""


def pg_schema(url, schema):
    raw = json.loads(psql(url, PG_INTROSPECT.format(schema=quote_literal(schema))))
    out = {"tables": {}, "views": set(raw["views"]), "triggers": {}}
    for name, t in raw["tables"].items():
        if name in IGNORED_TABLES:
            continue
        cons = t["constraints"]
        pk = [tuple(c["columns"]) for c in cons if c["type"] == "p"]
        out["tables"][name] = {
            "columns": [
                {
                    "name": c["name"],
                    "type": c["type"],
                    "notnull": c["notnull"],
                    "default": c["default"],
                    "identity": c["identity"],
                }
                for c in t["columns"]
            ],
            "pk": pk[0] if pk else (),
            "uniques": sorted(tuple(c["columns"]) for c in cons if c["type"] == "u"),
            "fks": sorted(
                (
                    tuple(c["columns"]),
                    c["table"],
                    tuple(c["ref"]),
                    FK_ACTIONS.get(c["on_delete"], c["on_delete"]),
                    FK_ACTIONS.get(c["on_update"], c["on_update"]),
                )
                for c in cons
                if c["type"] == "f"
            ),
            "checks": sum(1 for c in cons if c["type"] == "c"),
            "indexes": {
                i["name"]: {
                    "columns": i["columns"],
                    "unique": i["unique"],
                    "partial": i["partial"],
                }
                for i in t["indexes"]
            },
        }
    for tg in raw["triggers"]:
        ty = tg["type"]
        timing = "INSTEAD OF" if ty & 64 else ("BEFORE" if ty & 2 else "AFTER")
        events = [e for bit, e in ((4, "INSERT"), (8, "DELETE"), (16, "UPDATE"), (32, "TRUNCATE")) if ty & bit]
        out["triggers"][tg["name"]] = {
            "table": tg["table"],
            "timing": timing,
            "event": "+".join(events),
            "columns": tg["columns"] or [],
            "row": bool(ty & 1),
        }
    return out


def pg_default_values(url, schema, pg):
    exprs = [
        (table, c["name"], c["default"])
        for table, t in pg["tables"].items()
        for c in t["columns"]
        if c["default"] is not None
    ]
    if not exprs:
        return {}
    sql = "SELECT json_build_array(" + ", ".join(f"({e})::text" for _, _, e in exprs) + ")"
    values = json.loads(psql(url, sql, schema=quote_ident(schema)))
    return {(t, c): v for (t, c, _), v in zip(exprs, values)}


# ----------------------------------------------------------------------------- comparison


def same_value(a, b):
    if a is None or b is None:
        return a is b
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return str(a) == str(b)


def compare(lite, pg, lite_defaults, pg_defaults):
    diffs = []
    say = diffs.append
    lt, pt = set(lite["tables"]), set(pg["tables"])
    for t in sorted(lt - pt):
        say(f"table {t}: in SQLite only")
    for t in sorted(pt - lt):
        say(f"table {t}: in PostgreSQL only")
    for t in sorted(lt & pt):
        a, b = lite["tables"][t], pg["tables"][t]
        an = [c["name"] for c in a["columns"]]
        bn = [c["name"] for c in b["columns"]]
        if an != bn:
            say(f"table {t}: columns differ\n    SQLite:     {an}\n    PostgreSQL: {bn}")
        bcols = {c["name"]: c for c in b["columns"]}
        for ac in a["columns"]:
            bc = bcols.get(ac["name"])
            if bc is None:
                continue
            where = f"column {t}.{ac['name']}"
            if ac["type"] != bc["type"]:
                say(f"{where}: type {ac['type']} in SQLite, {bc['type']} in PostgreSQL")
            if ac["notnull"] != bc["notnull"]:
                say(f"{where}: NOT NULL {ac['notnull']} in SQLite, {bc['notnull']} in PostgreSQL")
            has_a, has_b = ac["default"] is not None, bc["default"] is not None
            if has_a != has_b:
                say(f"{where}: default {ac['default']!r} in SQLite, {bc['default']!r} in PostgreSQL")
            elif has_a:
                va, vb = lite_defaults.get((t, ac["name"])), pg_defaults.get((t, ac["name"]))
                if not same_value(va, vb):
                    say(f"{where}: default's value {va!r} in SQLite, {vb!r} in PostgreSQL")
        for key, label in (("pk", "primary key"), ("uniques", "UNIQUE constraints"),
                           ("fks", "foreign keys"), ("checks", "CHECK constraints")):
            if a[key] != b[key]:
                say(f"table {t}: {label} differ\n    SQLite:     {a[key]}\n    PostgreSQL: {b[key]}")
        ai, bi = a["indexes"], b["indexes"]
        for i in sorted(set(ai) - set(bi)):
            say(f"index {i} on {t}: in SQLite only {ai[i]}")
        for i in sorted(set(bi) - set(ai)):
            say(f"index {i} on {t}: in PostgreSQL only {bi[i]}")
        for i in sorted(set(ai) & set(bi)):
            if ai[i] != bi[i]:
                say(f"index {i} on {t}: differs\n    SQLite:     {ai[i]}\n    PostgreSQL: {bi[i]}")
    # An index of one table named on another shows above as two one-sided indexes.
    for v in sorted(lite["views"] - pg["views"]):
        say(f"view {v}: in SQLite only")
    for v in sorted(pg["views"] - lite["views"]):
        say(f"view {v}: in PostgreSQL only")
    ag, bg = lite["triggers"], pg["triggers"]
    for g in sorted(set(ag) - set(bg)):
        say(f"trigger {g}: in SQLite only")
    for g in sorted(set(bg) - set(ag)):
        say(f"trigger {g}: in PostgreSQL only")
    for g in sorted(set(ag) & set(bg)):
        if ag[g] != bg[g]:
            say(f"trigger {g}: differs\n    SQLite:     {ag[g]}\n    PostgreSQL: {bg[g]}")
    return diffs


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("url", help="postgres://… of a database to apply 0001_schema.sql to")
    p.add_argument("--schema", help="apply into this schema (default: a new one, dropped after)")
    p.add_argument("--keep", action="store_true", help="keep the schema this run created")
    p.add_argument("--sqlite-dir", type=Path, default=SQLITE_DIR)
    p.add_argument("--postgres-file", type=Path, action="append",
                   help="a migration to apply instead of migrations/postgres/*.sql (repeatable)")
    args = p.parse_args()

    schema = args.schema or f"schema_compare_{os.getpid()}"
    created = False
    with tempfile.TemporaryDirectory(prefix="schema-compare-") as tmp:
        try:
            db = apply_sqlite(os.path.join(tmp, "state.db"), args.sqlite_dir)
            lite = sqlite_schema(db)
            lite_defaults = sqlite_default_values(db, lite)
            db.close()
        except ApplyError as e:
            print(f"schema-compare: the SQLite migrations do not apply: {e}", file=sys.stderr)
            return 2
        try:
            exists = psql(
                args.url,
                f"SELECT count(*) FROM pg_namespace WHERE nspname = {quote_literal(schema)}",
            ).strip() != "0"
            if not exists:
                psql(args.url, f"CREATE SCHEMA {quote_ident(schema)}")
                created = True
            try:
                psql(args.url, file=args.postgres_file or POSTGRES_FILES, schema=quote_ident(schema),
                     single_transaction=True)
            except ApplyError as e:
                print(f"schema-compare: the PostgreSQL migrations do not apply: {e}",
                      file=sys.stderr)
                return 2
            pg = pg_schema(args.url, schema)
            pg_defaults = pg_default_values(args.url, schema, pg)
        except ApplyError as e:
            print(f"schema-compare: PostgreSQL: {e}", file=sys.stderr)
            return 2
        finally:
            if created and not args.keep:
                try:
                    psql(args.url, f"DROP SCHEMA {quote_ident(schema)} CASCADE")
                except ApplyError as e:
                    print(f"schema-compare: could not drop schema {schema}: {e}", file=sys.stderr)

    diffs = compare(lite, pg, lite_defaults, pg_defaults)
    for d in diffs:
        print(d)
    tables = len(lite["tables"])
    columns = sum(len(t["columns"]) for t in lite["tables"].values())
    indexes = sum(len(t["indexes"]) for t in lite["tables"].values())
    if diffs:
        print(f"schema-compare: {len(diffs)} difference(s)")
        return 1
    print(
        f"schema-compare: no differences ({tables} tables, {columns} columns, "
        f"{indexes} indexes, {len(lite['triggers'])} triggers, {len(lite['views'])} views)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
