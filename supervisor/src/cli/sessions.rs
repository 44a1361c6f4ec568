//! `studio sessions`: the paired browsers of studiod's current epoch
//! (`GET /api/studio/sessions`), with each one's role and when it paired, was last seen
//! and expires; `studio sessions role ID ROLE` changes one's role (`PATCH`) and
//! `studio sessions revoke ID` revokes it (`DELETE`).

use studio_api::{Session, SessionChange, SessionRevoked, Sessions};
use studio_contract::{home::Home, role::Role};

use crate::{
    Error,
    cli::{
        Remote, SessionsCommand,
        client::{connect, encode},
        table::{Style, Table, Tone, now_ms, relative, text},
    },
    output::print_json,
};

pub(crate) async fn run(
    home: &Home,
    command: Option<SessionsCommand>,
    remote: Remote,
) -> Result<u8, Error> {
    match command {
        None => list(home, remote).await,
        Some(SessionsCommand::Role { id, role }) => {
            let client = connect(home, &remote).await?;
            let path = format!("/api/studio/sessions/{}", encode(&id));
            let role = Role::from(role);
            let answer: Session = client.patch(&path, &SessionChange { role }).await?;
            if remote.json {
                print_json(&answer)?;
            } else {
                outln!("{} is now {}", answer.id, answer.role.as_str())?;
            }
            Ok(0)
        }
        Some(SessionsCommand::Revoke { id }) => {
            let client = connect(home, &remote).await?;
            let path = format!("/api/studio/sessions/{}", encode(&id));
            let answer: SessionRevoked = client.call(reqwest::Method::DELETE, &path).await?;
            if remote.json {
                print_json(&answer)?;
            } else {
                outln!("{} is revoked", answer.id)?;
            }
            Ok(0)
        }
    }
}

async fn list(home: &Home, remote: Remote) -> Result<u8, Error> {
    let client = connect(home, &remote).await?;
    let answer: Sessions = client.get("/api/studio/sessions").await?;
    if remote.json {
        print_json(&answer)?;
        return Ok(0);
    }
    let table = table(&answer.sessions, now_ms());
    if table.is_empty() {
        errln!("no paired browsers in this epoch (`studio pair` prints a link)");
    } else {
        out!("{}", table.render(Style::detect()))?;
    }
    Ok(0)
}

/// One row per session, oldest first as studiod lists them.
fn table(sessions: &[Session], now: i64) -> Table {
    let mut table = Table::new(&[
        "ID",
        "ROLE",
        "DEVICE",
        "ORIGIN",
        "CREATED",
        "LAST SEEN",
        "EXPIRES",
        "REVOKED",
    ]);
    for s in sessions {
        let expired = s
            .expires_at
            .parse::<jiff::Timestamp>()
            .is_ok_and(|t| t.as_millisecond() <= now);
        let revoked = s.revoked_at.is_some();
        table.row(vec![
            (text(&s.id), Tone::Plain),
            (text(s.role.as_str()), Tone::Plain),
            (text(&s.device), Tone::Plain),
            (text(&s.origin), Tone::Plain),
            (relative(&s.created_at, now), Tone::Plain),
            (relative(&s.last_seen_at, now), Tone::Plain),
            (
                relative(&s.expires_at, now),
                if expired { Tone::Warn } else { Tone::Plain },
            ),
            (
                relative(&s.revoked_at, now),
                if revoked { Tone::Bad } else { Tone::Dim },
            ),
        ]);
    }
    table
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn each_session_shows_its_role_and_expiry() {
        let now = 1_767_225_600_000; // 2026-01-01T00:00:00Z
        let sessions: Sessions = serde_json::from_value(json!({"sessions": [
            {"id": "a", "origin": "http://127.0.0.1:8765", "role": "admin",
             "device": "Firefox 133 on Linux", "created_at": "2025-12-31T23:00:00Z", "last_seen_at": "2025-12-31T23:58:00Z",
             "expires_at": "2026-01-30T23:00:00Z", "revoked_at": null, "current": false},
            {"id": "b", "origin": "http://127.0.0.1:8765", "role": "viewer",
             "created_at": "2025-11-01T00:00:00Z", "last_seen_at": "2025-11-02T00:00:00Z",
             "expires_at": "2025-12-01T00:00:00Z", "revoked_at": "2025-11-03T00:00:00Z",
             "current": true}]}))
        .expect("sessions");
        let sessions = sessions.sessions;
        assert_eq!(
            table(&sessions, now).render(Style::plain()),
            "ID  ROLE    DEVICE                ORIGIN                 CREATED  LAST SEEN  EXPIRES  REVOKED\n\
             a   admin   Firefox 133 on Linux  http://127.0.0.1:8765  1h ago   2m ago     in 29d   -\n\
             b   viewer  -                     http://127.0.0.1:8765  61d ago  60d ago    31d ago  59d ago\n"
        );
    }
}
