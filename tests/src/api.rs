//! studiod's and studio-app's API as the tests speak it: answers decoded into
//! `studio_api`'s types ([`Reply`]), and the schedule specs most tests send.

use serde::de::DeserializeOwned;
use studio_api::{
    Code, ErrorBody,
    schedule::{Action, CronTrigger, ScheduleSpec, Trigger},
};

/// An HTTP answer as received: its status and its body, decoded into the API type the
/// test expects (`studio_api`'s, or [`ErrorBody`] for a refusal).
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub text: String,
}

impl Reply {
    /// Reads the whole answer.
    pub async fn of(resp: reqwest::Response) -> Self {
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("answer body");
        Self { status, text }
    }

    /// The body as a `T`; fails the test (showing the answer) when it is not one.
    pub fn json<T: DeserializeOwned>(&self) -> T {
        serde_json::from_str(&self.text).unwrap_or_else(|e| {
            panic!(
                "not a {}: {e}: {self}",
                std::any::type_name::<T>()
                    .rsplit("::")
                    .next()
                    .unwrap_or("body")
            )
        })
    }

    /// The body as `T` after checking the status is `status`.
    pub fn expect<T: DeserializeOwned>(&self, status: u16) -> T {
        assert_eq!(self.status, status, "{self}");
        self.json()
    }

    /// The error body of a refusal.
    pub fn error(&self) -> ErrorBody {
        self.json()
    }

    /// The status and the error body's code, for `assert_eq!(reply.code(), (404, Code::…))`.
    pub fn code(&self) -> (u16, Code) {
        (self.status, self.error().code)
    }
}

impl std::fmt::Display for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status, self.text)
    }
}

/// A command schedule: `executable args…` on `trigger`, every other field at its default.
pub fn command_spec(name: &str, trigger: Trigger, executable: &str, args: &[&str]) -> ScheduleSpec {
    ScheduleSpec {
        target: None,
        name: Some(name.into()),
        description: String::new(),
        enabled: true,
        trigger,
        action: command(executable, args),
        cwd: None,
        env: Default::default(),
        secrets: Default::default(),
        notify: Vec::new(),
        policies: Default::default(),
        on_success: None,
        on_fail: None,
    }
}

/// The action that runs `executable` with `args`.
pub fn command(executable: &str, args: &[&str]) -> Action {
    Action::Command {
        executable: executable.into(),
        args: args.iter().map(|a| (*a).to_owned()).collect(),
    }
}

/// An interval trigger: `90s`, `1h`.
pub fn every(interval: &str) -> Trigger {
    Trigger::Every(interval.into())
}

/// A cron trigger in the daemon's zone.
pub fn cron(expression: &str) -> Trigger {
    Trigger::Cron(CronTrigger {
        expression: expression.into(),
        timezone: None,
    })
}

/// A job environment from `(name, value)` pairs.
pub fn env(vars: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
    vars.iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}
