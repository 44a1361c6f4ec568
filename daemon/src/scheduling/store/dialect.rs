//! What differs between the two databases' SQL, kept small: statements are written once,
//! in the SQL both read (placeholders `$1`, `$2`, …; the few SQLite functions they use
//! exist on PostgreSQL as functions of the same name, `migrations/postgres/0002`), and
//! [`adapt`] drops what only SQLite's planner reads: `INDEXED BY` (PostgreSQL's planner
//! picks its index itself) and `LIMIT -1` (a subquery SQLite must not fold).

use std::borrow::Cow;

use studio_store::Dialect;

/// `sql` as `dialect` reads it: itself on SQLite; on PostgreSQL without its
/// `INDEXED BY name` clauses and with `LIMIT -1` as `OFFSET 0` (the same fence).
pub(super) fn adapt(
    dialect: Dialect,
    sql: impl Into<Cow<'static, str>>,
) -> sqlx::AssertSqlSafe<Cow<'static, str>> {
    let sql = sql.into();
    if dialect == Dialect::Sqlite || !(sql.contains("INDEXED BY") || sql.contains("LIMIT -1")) {
        return sqlx::AssertSqlSafe(sql);
    }
    sqlx::AssertSqlSafe(Cow::Owned(without_hints(&sql)))
}

fn without_hints(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut rest = sql;
    while let Some(at) = rest.find(" INDEXED BY ") {
        out.push_str(&rest[..at]);
        let after = &rest[at + " INDEXED BY ".len()..];
        let name_end = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        rest = &after[name_end..];
    }
    out.push_str(rest);
    out.replace("LIMIT -1", "OFFSET 0")
}

/// The dialect of a connection (a transaction's, say).
pub(super) fn of(conn: &sqlx::AnyConnection) -> Dialect {
    if conn.backend_name().eq_ignore_ascii_case("postgresql") {
        Dialect::Postgres
    } else {
        Dialect::Sqlite
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_reads_no_index_hint_and_no_negative_limit() {
        let sql = "SELECT a FROM t INDEXED BY t_by_a WHERE x IN (SELECT y FROM u INDEXED BY u_y) \
                   AND z = (SELECT 1 FROM v LIMIT -1)";
        assert_eq!(adapt(Dialect::Sqlite, sql).0, sql);
        assert_eq!(
            adapt(Dialect::Postgres, sql).0,
            "SELECT a FROM t WHERE x IN (SELECT y FROM u) AND z = (SELECT 1 FROM v OFFSET 0)"
        );
    }
}
