//! The environment of a job: cleared, then only what is named here. No daemon secret can
//! reach a job, because nothing is inherited unless it is on this list; and a schedule's
//! own variables never include one that changes which code runs
//! (`studio_contract::jobenv`), even if validation was bypassed.

use std::collections::BTreeMap;

use studio_contract::jobenv;

/// Host variables a job inherits (plus every `LC_*`).
pub const INHERITED: &[&str] = &["PATH", "HOME", "LANG", "TZ", "USER"];

/// When the host has no `PATH`.
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The variables of `host` a job may inherit.
pub fn inheritable(host: impl IntoIterator<Item = (String, String)>) -> Vec<(String, String)> {
    host.into_iter()
        .filter(|(k, _)| INHERITED.contains(&k.as_str()) || k.starts_with("LC_"))
        .collect()
}

/// Builds a job's whole environment from the host's, the schedule's own `extra`
/// variables (less any that `jobenv` refuses), and the runner's `STUDIO_*` ones.
pub fn job_env(
    host: impl IntoIterator<Item = (String, String)>,
    extra: &BTreeMap<String, String>,
    studio: &[(&str, String)],
) -> Vec<(String, String)> {
    let mut env: BTreeMap<String, String> = inheritable(host).into_iter().collect();
    env.entry("PATH".into())
        .or_insert_with(|| DEFAULT_PATH.into());
    for (k, v) in extra {
        if jobenv::refusal(k).is_none() {
            env.insert(k.clone(), v.clone());
        }
    }
    for (k, v) in studio {
        env.insert((*k).to_owned(), v.clone());
    }
    env.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_allow_list_is_inherited() {
        let host = [
            ("PATH", "/bin"),
            ("HOME", "/home/u"),
            ("LC_ALL", "C"),
            ("STUDIO_TOKEN", "secret"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
            ("LD_PRELOAD", "/evil.so"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()));
        let extra = BTreeMap::from([
            ("MODE".to_owned(), "full".to_owned()),
            ("STUDIO_RUN_ID".to_owned(), "forged".to_owned()),
            ("PATH".to_owned(), "/tmp/evil".to_owned()),
            ("LD_PRELOAD".to_owned(), "/tmp/evil.so".to_owned()),
            ("LD_AUDIT".to_owned(), "/tmp/evil.so".to_owned()),
        ]);
        let env = job_env(host, &extra, &[("STUDIO_RUN_ID", "r1".into())]);
        let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["HOME", "LC_ALL", "MODE", "PATH", "STUDIO_RUN_ID"]);
        assert!(
            env.iter()
                .all(|(_, v)| v != "secret" && !v.starts_with("/tmp/evil"))
        );
        assert!(env.contains(&("PATH".into(), "/bin".into())));
        assert!(env.contains(&("STUDIO_RUN_ID".into(), "r1".into())));
    }

    #[test]
    fn a_missing_path_gets_a_default() {
        let env = job_env(Vec::new(), &BTreeMap::new(), &[]);
        assert_eq!(env, vec![("PATH".to_owned(), DEFAULT_PATH.to_owned())]);
    }
}
