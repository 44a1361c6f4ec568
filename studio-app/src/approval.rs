//! What an approval request binds, read for people: the action it will run (a command
//! line, each argument quoted where a shell would need it, or an agent's prompt, model
//! and profile), its working directory, the names of the environment variables it sets
//! and the follow-ups that run under the same grant. The Approvals page, a run's page,
//! the attention queue and the Tasks pages say it alike.
//!
//! Invariant: nothing studiod bound is left out; a binding this module cannot read is
//! shown as the JSON studiod sent.

use serde::Deserialize;
use studio_api::schedule::{Action, FollowUp};

/// `Approval::action` as studiod writes it (`{"action", "cwd", "env", "follow_ups"?}`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    action: Action,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    env: Vec<String>,
    #[serde(default)]
    follow_ups: Option<FollowUps>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FollowUps {
    #[serde(default)]
    on_success: Option<FollowUp>,
    #[serde(default)]
    on_fail: Option<FollowUp>,
}

/// One action, ready to print.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Work {
    /// The executable and its arguments as one line.
    Command(String),
    /// An agent's prompt, and its model and profile (`None`: the runner's default).
    Agent {
        prompt: String,
        model: Option<String>,
        profile: Option<String>,
    },
}

impl Work {
    pub(crate) fn of(action: &Action) -> Self {
        match action {
            Action::Command { executable, args } => Self::Command(command_line(executable, args)),
            Action::Agent {
                prompt,
                model,
                profile,
            } => Self::Agent {
                prompt: prompt.clone(),
                model: model.clone(),
                profile: profile.clone(),
            },
        }
    }

    /// One line: the command line, or `agent: ` and the prompt's first line.
    pub(crate) fn summary(&self) -> String {
        match self {
            Self::Command(line) => line.clone(),
            Self::Agent { prompt, .. } => {
                let first = prompt.lines().next().unwrap_or_default();
                let more = if first.len() < prompt.trim_end().len() {
                    " …"
                } else {
                    ""
                };
                format!("agent: {first}{more}")
            }
        }
    }
}

/// A follow-up: when it runs ("after a success", "after a failure, then after a
/// success") and what it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Step {
    pub(crate) when: String,
    pub(crate) work: Work,
}

/// Everything a grant lets run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Bound {
    pub(crate) work: Work,
    pub(crate) cwd: Option<String>,
    /// The names of the variables set (studiod never sends their values).
    pub(crate) env: Vec<String>,
    /// Depth first, a success's chain before a failure's.
    pub(crate) follow_ups: Vec<Step>,
}

impl Bound {
    /// Reads studiod's binding; `None` when it is not one this version knows.
    pub(crate) fn read(action: &serde_json::Value) -> Option<Self> {
        let wire = Wire::deserialize(action).ok()?;
        let mut follow_ups = Vec::new();
        if let Some(f) = &wire.follow_ups {
            steps(
                "",
                f.on_success.as_ref(),
                f.on_fail.as_ref(),
                &mut follow_ups,
            );
        }
        Some(Self {
            work: Work::of(&wire.action),
            cwd: wire.cwd,
            env: wire.env,
            follow_ups,
        })
    }
}

/// Appends the follow-ups of one chain node, each named by the path that leads to it.
fn steps(
    before: &str,
    on_success: Option<&FollowUp>,
    on_fail: Option<&FollowUp>,
    out: &mut Vec<Step>,
) {
    for (node, when) in [
        (on_success, "after a success"),
        (on_fail, "after a failure"),
    ] {
        let Some(node) = node else { continue };
        let when = if before.is_empty() {
            when.to_owned()
        } else {
            format!("{before}, then {when}")
        };
        out.push(Step {
            when: when.clone(),
            work: Work::of(&node.action),
        });
        steps(
            &when,
            node.on_success.as_deref(),
            node.on_fail.as_deref(),
            out,
        );
    }
}

/// `executable args…` as one line, each word single-quoted when a POSIX shell would read
/// it otherwise, so that the line says exactly which words the job receives.
pub(crate) fn command_line(executable: &str, args: &[String]) -> String {
    std::iter::once(executable)
        .chain(args.iter().map(String::as_str))
        .map(quoted)
        .collect::<Vec<_>>()
        .join(" ")
}

fn quoted(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_@%+=:,./-".contains(&b));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// The first twelve hex digits of a SHA-256: enough to tell two apart at a glance (the
/// whole one goes in a title).
pub(crate) fn short_hash(hex: &str) -> &str {
    hex.get(..12).unwrap_or(hex)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_line_quotes_only_the_words_a_shell_would_split() {
        let args = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            command_line("sh", &args(&["-c", "echo 'hi' > /tmp/x"])),
            r"sh -c 'echo '\''hi'\'' > /tmp/x'"
        );
        assert_eq!(
            command_line("/usr/bin/rsync", &args(&["-a", "src/", "host:dst", ""])),
            "/usr/bin/rsync -a src/ host:dst ''"
        );
    }

    #[test]
    fn a_binding_reads_with_its_follow_ups_in_order() {
        let bound = Bound::read(&serde_json::json!({
            "action": {"kind": "command", "executable": "deploy", "args": ["--prod"]},
            "cwd": "/srv", "env": ["TOKEN", "MODE"],
            "follow_ups": {
                "on_success": {"action": {"kind": "agent", "prompt": "summarise\nbriefly", "model": "large"},
                               "on_fail": {"action": {"kind": "command", "executable": "notify"}}},
                "on_fail": null
            }
        }))
        .expect("a binding");
        assert_eq!(bound.work, Work::Command("deploy --prod".into()));
        assert_eq!(bound.cwd.as_deref(), Some("/srv"));
        assert_eq!(bound.env, ["TOKEN", "MODE"]);
        let steps: Vec<(&str, String)> = bound
            .follow_ups
            .iter()
            .map(|s| (s.when.as_str(), s.work.summary()))
            .collect();
        assert_eq!(
            steps,
            [
                ("after a success", "agent: summarise …".to_owned()),
                ("after a success, then after a failure", "notify".to_owned()),
            ]
        );
        assert!(Bound::read(&serde_json::json!({"action": "rm -rf /"})).is_none());
        assert!(
            Bound::read(&serde_json::json!({
                "action": {"kind": "command", "executable": "x"}, "extra": 1
            }))
            .is_none(),
            "a field this version does not know is not dropped silently"
        );
    }

    #[test]
    fn hashes_are_shortened_to_twelve_digits() {
        assert_eq!(short_hash(&"ab".repeat(32)), "abababababab");
        assert_eq!(short_hash("abc"), "abc");
    }
}
