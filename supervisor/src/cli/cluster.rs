//! The cluster as studiod reports it (`GET /api/admin/cluster`, docs/FLEETS.md): the
//! members sharing its database, the leader and its term. `studio cluster` prints it
//! alone (a server whose studiod a service manager runs has no supervisor to ask);
//! `studio status` adds it under the supervisor's table. `studio epoch rotate` ends the
//! epoch on purpose (`POST /api/admin/epoch/rotate`).

use reqwest::Method;
use studio_api::{ClusterMember, ClusterState, EpochRotated};
use studio_contract::home::Home;

use crate::{
    Error,
    cli::{
        Remote,
        client::connect,
        table::{Style, Table, Tone, now_ms, relative},
    },
    output::print_json,
};

const PATH: &str = "/api/admin/cluster";

/// `studio cluster`.
pub(crate) async fn show(home: &Home, remote: &Remote) -> Result<u8, Error> {
    let state = fetch(home, remote).await?;
    if remote.json {
        print_json(&state)?;
    } else {
        out!("{}", render(&state, now_ms(), Style::detect()))?;
    }
    Ok(0)
}

/// `studio epoch rotate`.
pub(crate) async fn rotate(home: &Home, remote: &Remote) -> Result<u8, Error> {
    let rotated: EpochRotated = connect(home, remote)
        .await?
        .call(Method::POST, "/api/admin/epoch/rotate")
        .await?;
    if remote.json {
        print_json(&rotated)?;
    } else {
        out!(
            "epoch {} ended; every browser pairs again (`studio pair`) under epoch {}\n",
            rotated.previous,
            rotated.epoch
        )?;
    }
    Ok(0)
}

/// The cluster of the home's studiod.
pub(crate) async fn fetch(home: &Home, remote: &Remote) -> Result<ClusterState, Error> {
    connect(home, remote).await?.get(PATH).await
}

fn tone(state: &str) -> Tone {
    match state {
        "leading" => Tone::Good,
        "silent" => Tone::Bad,
        "stopped" => Tone::Dim,
        _ => Tone::Plain,
    }
}

/// The human form: one line for the term and its leader, then a row per member.
pub(crate) fn render(c: &ClusterState, now_ms: i64, style: Style) -> String {
    let leader = c.leader.as_deref().unwrap_or("none");
    let since = c
        .leader_since
        .as_deref()
        .map(|at| format!(" since {}", relative(at, now_ms)))
        .unwrap_or_default();
    let mut out = format!(
        "cluster on {}: term {}, leader {leader}{since} (failover {} s; answered by {})\n",
        c.database, c.term, c.failover_secs, c.answered_by
    );
    let mut table = Table::new(&["MEMBER", "STATE", "HOST", "PID", "ADDR", "SEEN", "STARTED"]);
    for m in &c.members {
        let ClusterMember {
            id,
            state,
            host,
            pid,
            addr,
            started_at,
            seen_at,
            ..
        } = m;
        table.row(vec![
            (id.clone(), Tone::Plain),
            (state.clone(), tone(state)),
            (host.clone(), Tone::Plain),
            (pid.to_string(), Tone::Plain),
            (addr.clone(), Tone::Plain),
            (relative(seen_at, now_ms), Tone::Plain),
            (relative(started_at, now_ms), Tone::Dim),
        ]);
    }
    out.push_str(&table.render(style));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str, state: &str, seen: &str) -> ClusterMember {
        ClusterMember {
            id: id.into(),
            state: state.into(),
            host: "h1".into(),
            pid: 42,
            addr: "127.0.0.1:8766".into(),
            started_at: "2026-12-03T10:00:00Z".into(),
            seen_at: seen.into(),
            stopped_at: None,
        }
    }

    #[test]
    fn the_table_names_the_term_the_leader_and_each_member() {
        let now = "2026-12-03T10:05:00Z"
            .parse::<jiff::Timestamp>()
            .expect("instant")
            .as_millisecond();
        let state = ClusterState {
            database: "postgres".into(),
            term: 7,
            leader: Some("aa11".into()),
            leader_since: Some("2026-12-03T10:04:00Z".into()),
            answered_by: "bb22".into(),
            failover_secs: 5,
            members: vec![
                member("aa11", "leading", "2026-12-03T10:05:00Z"),
                member("bb22", "following", "2026-12-03T10:04:59Z"),
                member("cc33", "silent", "2026-12-03T10:02:00Z"),
            ],
        };
        let text = render(&state, now, Style::plain());
        assert!(
            text.starts_with(
                "cluster on postgres: term 7, leader aa11 since 1m ago (failover 5 s; answered by bb22)\n"
            ),
            "{text}"
        );
        let rows: Vec<&str> = text.lines().skip(2).collect();
        assert_eq!(rows.len(), 3, "{text}");
        assert!(
            rows[0].starts_with("aa11") && rows[0].contains("leading") && rows[0].contains("now")
        );
        assert!(
            rows[2].contains("silent") && rows[2].contains("3m ago"),
            "{text}"
        );
    }
}
