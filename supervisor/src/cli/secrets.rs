//! `studio secret set|list|delete`: the secrets studiod keeps sealed for jobs
//! (`/api/secrets`, docs/OPERATIONS.md, "Secrets"), with the daemon token.
//!
//! Invariant: a value only ever goes in, and only through stdin (never argv, where `ps`
//! and shell history keep it); nothing here prints, logs or quotes one.

use std::io::{self, BufRead, IsTerminal, Read};

use reqwest::{Method, StatusCode};
use rustix::termios::{
    LocalModes, OptionalActions, SpecialCodeIndex, Termios, tcgetattr, tcsetattr,
};
use studio_api::{Code, ErrorBody, Secret, SecretList, SecretValue};
use studio_contract::home::Home;

use crate::{
    Error,
    cli::{
        Remote, SecretCommand,
        client::{connect, encode},
        table::{Style, Table, Tone, now_ms, relative, text},
    },
    output::print_json,
};

const PATH: &str = "/api/secrets";
/// The most bytes studiod keeps in a value: more is refused before anything is sent.
const MAX_VALUE: usize = 64 * 1024;

pub(crate) async fn run(
    home: &Home,
    command: SecretCommand,
    shutdown: impl Future<Output = ()>,
) -> Result<u8, Error> {
    match command {
        SecretCommand::Set { name, remote } => set(home, &name, &remote, shutdown).await,
        SecretCommand::List { remote } => list(home, &remote).await,
        SecretCommand::Delete { name, remote } => delete(home, &name, &remote).await,
    }
}

/// A name studiod could hold (a secret's, an endpoint's: `what`), or a usage error
/// before anything is read or sent.
pub(crate) fn checked_name<'a>(what: &str, name: &'a str) -> Result<&'a str, Error> {
    if studio_schedule::is_secret_name(name) {
        Ok(name)
    } else {
        Err(Error::Usage(format!(
            "{what} name {name:?}: 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit"
        )))
    }
}

async fn set(
    home: &Home,
    name: &str,
    remote: &Remote,
    shutdown: impl Future<Output = ()>,
) -> Result<u8, Error> {
    let name = checked_name("secret", name)?;
    // Before the value is asked for: a missing token should not cost a typed secret.
    let client = connect(home, remote).await?;
    let value = read_value(name, shutdown).await?;
    let path = format!("{PATH}/{}", encode(name));
    let (status, secret): (StatusCode, Secret) =
        match client.put(&path, &SecretValue { value }).await {
            Ok(answer) => answer,
            // A name or a value studiod cannot take is the user's input: one line, exit 2.
            Err(Error::Api(f)) if f.body.code == Code::ValidationFailed => {
                return Err(Error::Usage(refusal(name, &f.body)));
            }
            Err(e) => return Err(e),
        };
    if status == StatusCode::CREATED {
        errln!("secret {} set (new)", secret.name);
    } else {
        errln!("secret {} replaced", secret.name);
    }
    if remote.json {
        print_json(&secret)?;
    }
    Ok(0)
}

/// A `validation_failed` answer as one line: `the value: a value is at least 6 bytes …`.
fn refusal(name: &str, body: &ErrorBody) -> String {
    let parts: Vec<String> = body
        .errors
        .iter()
        .map(|e| match e.path.as_str() {
            "name" => format!("secret name {name:?}: {}", e.reason),
            "value" => format!("the value: {}", e.reason),
            path => format!("{path}: {}", e.reason),
        })
        .collect();
    if parts.is_empty() {
        body.message.clone()
    } else {
        parts.join("; ")
    }
}

/// The value on stdin: typed at a prompt that does not show it when stdin is a terminal,
/// else all of stdin. Ctrl-C (or SIGTERM) while it is awaited gives up, with the terminal
/// as it was.
async fn read_value(name: &str, shutdown: impl Future<Output = ()>) -> Result<String, Error> {
    let quiet = if io::stdin().is_terminal() {
        let quiet = Quiet::new()
            .map_err(|e| Error::io("cannot turn off the terminal's echo", io::Error::from(e)))?;
        err!("value for {name} (not shown): ");
        Some(quiet)
    } else {
        None
    };
    let typed = quiet.is_some();
    let (tx, rx) = tokio::sync::oneshot::channel();
    // A thread of its own, not tokio's blocking pool: a read given up on must not hold
    // the process open at exit.
    std::thread::spawn(move || {
        let stdin = io::stdin().lock();
        let _ = tx.send(if typed {
            typed_line(stdin).and_then(|line| value_from(&line[..]))
        } else {
            value_from(stdin)
        });
    });
    let read = tokio::select! {
        read = rx => read.unwrap_or_else(|_| Err(Error::Failed("the value could not be read".into()))),
        () = shutdown => Err(Error::Failed("interrupted: no secret was set".into())),
    };
    if let Some(quiet) = quiet {
        drop(quiet);
        // Enter was not echoed either.
        errln!("");
    }
    read
}

/// The terminal on stdin without echo, read a key at a time (so a pasted value longer
/// than the terminal's line buffer arrives whole), as it was again once dropped. Signals
/// stay on: Ctrl-C reaches `shutdown`.
struct Quiet {
    saved: Termios,
}

impl Quiet {
    fn new() -> rustix::io::Result<Self> {
        let saved = tcgetattr(io::stdin())?;
        let mut quiet = saved.clone();
        quiet
            .local_modes
            .remove(LocalModes::ECHO | LocalModes::ECHONL | LocalModes::ICANON);
        quiet.special_codes[SpecialCodeIndex::VMIN] = 1;
        quiet.special_codes[SpecialCodeIndex::VTIME] = 0;
        // Flush: anything typed ahead was echoed, so it is no part of a hidden value.
        tcsetattr(io::stdin(), OptionalActions::Flush, &quiet)?;
        Ok(Self { saved })
    }
}

impl Drop for Quiet {
    fn drop(&mut self) {
        let _ = tcsetattr(io::stdin(), OptionalActions::Now, &self.saved);
    }
}

/// One line typed at a terminal without line editing of its own: Enter ends it,
/// Backspace erases a character, Ctrl-U the line, and Ctrl-D on an empty line ends the
/// input. Bytes past what studiod keeps are dropped (the value is then refused as long).
fn typed_line(input: impl BufRead) -> Result<Vec<u8>, Error> {
    let mut line = Vec::new();
    for byte in input.bytes() {
        match byte.map_err(|e| Error::io("cannot read the value from the terminal", e))? {
            b'\r' | b'\n' => break,
            0x04 if line.is_empty() => break,
            0x04 => {}
            // Backspace (DEL or ^H): a whole UTF-8 character.
            0x7f | 0x08 => while line.pop().is_some_and(|b| b & 0xc0 == 0x80) {},
            0x15 => line.clear(),
            b if line.len() <= MAX_VALUE => line.push(b),
            _ => {}
        }
    }
    Ok(line)
}

/// The value `input` holds: all of it but one trailing newline (`\n` or `\r\n`). Refused
/// (exit 2) when empty, longer than studiod keeps, or not UTF-8; studiod judges the rest.
fn value_from(input: impl Read) -> Result<String, Error> {
    let mut bytes = Vec::new();
    // Enough to tell a value that is too long, without reading an endless stream.
    input
        .take(MAX_VALUE as u64 + 3)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io("cannot read the value from stdin", e))?;
    if bytes.ends_with(b"\n") {
        bytes.pop();
        if bytes.ends_with(b"\r") {
            bytes.pop();
        }
    }
    if bytes.is_empty() {
        return Err(Error::Usage(
            "the value is empty: type it at the prompt, or pipe it in (`studio secret set NAME < FILE`)"
                .into(),
        ));
    }
    if bytes.len() > MAX_VALUE {
        return Err(Error::Usage(format!(
            "the value is longer than {MAX_VALUE} bytes, the most studiod keeps"
        )));
    }
    String::from_utf8(bytes).map_err(|_| {
        Error::Usage("the value is not UTF-8 text (it becomes an environment variable)".into())
    })
}

async fn list(home: &Home, remote: &Remote) -> Result<u8, Error> {
    let answer: SecretList = connect(home, remote).await?.get(PATH).await?;
    if remote.json {
        print_json(&answer)?;
    } else if answer.secrets.is_empty() {
        errln!("no secrets (`studio secret set NAME` sets one)");
    } else {
        out!(
            "{}",
            table(&answer.secrets, now_ms()).render(Style::detect())
        )?;
    }
    Ok(0)
}

/// One row per secret, by name: when it was last set, by whom, and what names it.
fn table(secrets: &[Secret], now: i64) -> Table {
    let mut table = Table::new(&["NAME", "SET", "BY", "USED BY"]);
    for s in secrets {
        let used_by = s.used_by.join(", ");
        table.row(vec![
            (text(&s.name), Tone::Plain),
            (relative(&s.updated_at, now), Tone::Dim),
            (text(&s.updated_by), Tone::Plain),
            (
                text(&used_by),
                if used_by.is_empty() {
                    Tone::Dim
                } else {
                    Tone::Plain
                },
            ),
        ]);
    }
    table
}

async fn delete(home: &Home, name: &str, remote: &Remote) -> Result<u8, Error> {
    let name = checked_name("secret", name)?;
    let client = connect(home, remote).await?;
    let path = format!("{PATH}/{}", encode(name));
    let secret: Secret = match client.call(Method::DELETE, &path).await {
        Ok(secret) => secret,
        // studiod's message says what to do: no such secret, or who still names it.
        Err(Error::Api(f)) if matches!(f.body.code, Code::SecretNotFound | Code::SecretInUse) => {
            return Err(Error::Failed(format!("secret {name}: {}", f.body.message)));
        }
        Err(e) => return Err(e),
    };
    if remote.json {
        print_json(&secret)?;
    } else {
        outln!("deleted secret {}", secret.name)?;
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use studio_api::FieldError;

    use super::*;

    fn usage(r: Result<String, Error>) -> String {
        match r {
            Err(e @ Error::Usage(_)) => {
                assert_eq!(e.exit_code(), 2);
                e.to_string()
            }
            other => panic!("not a usage error: {other:?}"),
        }
    }

    #[test]
    fn one_trailing_newline_is_dropped() {
        let value = |s: &[u8]| value_from(s).expect("a value");
        assert_eq!(value(b"hunter22\n"), "hunter22");
        assert_eq!(value(b"hunter22\r\n"), "hunter22");
        assert_eq!(value(b"hunter22"), "hunter22");
        assert_eq!(value(b"hunter22\n\n"), "hunter22\n", "only one");
        assert_eq!(
            value(b"hunter22\r"),
            "hunter22\r",
            "a lone CR is the value's"
        );
        assert_eq!(value(b" spaced \n"), " spaced ", "nothing else is trimmed");
        assert_eq!(
            value(b"-----BEGIN KEY-----\nabc\n-----END KEY-----\n"),
            "-----BEGIN KEY-----\nabc\n-----END KEY-----"
        );
    }

    #[test]
    fn an_empty_a_long_or_a_binary_value_is_refused() {
        for empty in [&b""[..], b"\n", b"\r\n"] {
            let why = usage(value_from(empty));
            assert!(why.starts_with("the value is empty"), "{why}");
        }
        let long = vec![b'a'; MAX_VALUE + 1];
        assert!(usage(value_from(&long[..])).contains("longer than 65536 bytes"));
        let mut most = vec![b'a'; MAX_VALUE];
        most.push(b'\n');
        assert_eq!(value_from(&most[..]).expect("fits").len(), MAX_VALUE);
        assert!(usage(value_from(&[0xff, 0xfe, b'a', b'b', b'c', b'd'][..])).contains("UTF-8"));
    }

    #[test]
    fn a_typed_line_ends_at_enter_and_honours_erasing() {
        let line = |s: &[u8]| String::from_utf8(typed_line(s).expect("read")).expect("utf-8");
        assert_eq!(line(b"s3cret!\rignored"), "s3cret!");
        assert_eq!(line(b"s3cret!\n"), "s3cret!");
        assert_eq!(line(b"s3crex\x7ft!\r"), "s3cret!");
        assert_eq!(
            line("pä\x08ss\r".as_bytes()),
            "pss",
            "a character, not a byte"
        );
        assert_eq!(line(b"wrong\x15right!\r"), "right!");
        assert_eq!(
            line(b"\x04more"),
            "",
            "Ctrl-D on an empty line ends the input"
        );
        assert_eq!(line(b"ab\x04cd\r"), "abcd", "and is ignored after text");
        assert_eq!(line(b"no enter"), "no enter");
        let long = vec![b'x'; MAX_VALUE + 10];
        assert_eq!(typed_line(&long[..]).expect("read").len(), MAX_VALUE + 1);
        assert!(usage(value_from(&typed_line(&long[..]).expect("read")[..])).contains("longer"));
    }

    #[test]
    fn bad_names_are_refused_before_anything_is_read() {
        assert_eq!(
            checked_name("secret", "github.token-1").expect("valid"),
            "github.token-1"
        );
        for bad in ["", "-x", "a/b", "has space", &"n".repeat(65)] {
            let err = checked_name("secret", bad).expect_err(bad);
            assert_eq!(err.exit_code(), 2, "{bad}");
        }
    }

    #[test]
    fn a_refusal_names_what_is_wrong_in_one_line() {
        let body = |message: &str, errors| ErrorBody {
            code: Code::ValidationFailed,
            message: message.into(),
            errors,
            name: None,
            plan: None,
        };
        let both = body(
            "invalid",
            vec![
                FieldError::new("value", "a value is at least 6 bytes"),
                FieldError::new("name", "too long"),
            ],
        );
        assert_eq!(
            refusal("gh", &both),
            r#"the value: a value is at least 6 bytes; secret name "gh": too long"#
        );
        let bare = body("the body is wrong", Vec::new());
        assert_eq!(refusal("gh", &bare), "the body is wrong");
    }

    #[test]
    fn the_table_names_who_set_each_and_what_uses_it() {
        let now = 1_767_225_600_000; // 2026-01-01T00:00:00Z
        let secret = |name: &str, by: Option<&str>, used_by: &[&str]| Secret {
            name: name.into(),
            created_at: "2025-12-01T00:00:00Z".into(),
            updated_at: "2025-12-31T23:57:00Z".into(),
            updated_by: by.map(str::to_owned),
            used_by: used_by.iter().map(|s| (*s).to_owned()).collect(),
        };
        let rendered = table(
            &[
                secret("github", Some("daemon"), &["demo/release", "task 0190aa"]),
                secret("unused", None, &[]),
            ],
            now,
        )
        .render(Style::plain());
        assert_eq!(
            rendered,
            "NAME    SET     BY      USED BY\n\
             github  3m ago  daemon  demo/release, task 0190aa\n\
             unused  3m ago  -       -\n"
        );
    }
}
