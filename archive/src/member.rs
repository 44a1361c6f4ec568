//! Member names: the only names an archive may hold, and what each one names. A name is
//! matched whole against a short grammar, so nothing absolute, no `..`, no backslash, no
//! NUL and no directory entry gets through; a log member comes out as a checked
//! `(run_id, file)` pair, never as a path.

/// The manifest's member name.
pub(crate) const MANIFEST: &str = "manifest.json";

/// What a valid member name names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Member {
    Manifest,
    /// `rows/<table>.jsonl`
    Rows(String),
    /// `preimages/<table>.jsonl`
    Preimages(String),
    /// `logs/<run_id>/<file>`
    Log {
        run_id: String,
        file: String,
    },
}

impl Member {
    /// What `name` names, or `None` when the format allows no such member.
    pub(crate) fn parse(name: &str) -> Option<Self> {
        if name == MANIFEST {
            return Some(Self::Manifest);
        }
        let table = |file: &str| {
            file.strip_suffix(".jsonl")
                .filter(|t| valid_table(t))
                .map(str::to_owned)
        };
        match name.split('/').collect::<Vec<_>>().as_slice() {
            ["rows", file] => table(file).map(Self::Rows),
            ["preimages", file] => table(file).map(Self::Preimages),
            ["logs", run_id, file] if valid_run_id(run_id) && valid_file_name(file) => {
                Some(Self::Log {
                    run_id: (*run_id).to_owned(),
                    file: (*file).to_owned(),
                })
            }
            _ => None,
        }
    }

    /// The member's name in the archive.
    pub(crate) fn name(&self) -> String {
        match self {
            Self::Manifest => MANIFEST.to_owned(),
            Self::Rows(table) => format!("rows/{table}.jsonl"),
            Self::Preimages(table) => format!("preimages/{table}.jsonl"),
            Self::Log { run_id, file } => format!("logs/{run_id}/{file}"),
        }
    }

    /// Whether the member holds rows, one JSON object per line.
    pub(crate) fn is_jsonl(&self) -> bool {
        matches!(self, Self::Rows(_) | Self::Preimages(_))
    }
}

/// Whether `s` may name a table: `[a-z_]{1,64}`.
pub fn valid_table(s: &str) -> bool {
    (1..=64).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
}

/// Whether `s` may name a run's log folder: `[A-Za-z0-9_-]{1,64}`.
pub fn valid_run_id(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Whether `s` may name a log file: `[A-Za-z0-9._-]{1,128}`, not starting with `.` (so
/// neither `.` nor `..`).
pub fn valid_file_name(s: &str) -> bool {
    (1..=128).contains(&s.len())
        && !s.starts_with('.')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_shapes_parse_and_nothing_else_does() {
        assert_eq!(
            Member::parse("rows/runs.jsonl"),
            Some(Member::Rows("runs".into()))
        );
        assert_eq!(
            Member::parse("preimages/run_transitions.jsonl"),
            Some(Member::Preimages("run_transitions".into()))
        );
        assert_eq!(
            Member::parse("logs/0190aa-Bb_1/stdout.log"),
            Some(Member::Log {
                run_id: "0190aa-Bb_1".into(),
                file: "stdout.log".into()
            })
        );
        assert_eq!(Member::parse("manifest.json"), Some(Member::Manifest));
        for bad in [
            "",
            "/abs",
            "rows/",
            "rows/Runs.jsonl",
            "rows/runs.json",
            "rows/.jsonl",
            "rows/a/b.jsonl",
            "logs/../../etc/passwd",
            "logs/a/..",
            "logs/a/.",
            "logs/a/.hidden",
            "logs/a/b/c",
            "logs/a/",
            "logs//f",
            "logs/a\\b/f",
            "logs/a/f\0",
            "logs/a/f g",
            "./manifest.json",
            "manifest.json/",
            "other/x",
        ] {
            assert_eq!(Member::parse(bad), None, "{bad:?}");
        }
        assert!(valid_table(&"a".repeat(64)) && !valid_table(&"a".repeat(65)));
        assert!(valid_file_name(&"f".repeat(128)) && !valid_file_name(&"f".repeat(129)));
    }

    #[test]
    fn a_name_parses_back_to_itself() {
        for name in [
            "rows/a.jsonl",
            "preimages/b_c.jsonl",
            "logs/r/f.1",
            MANIFEST,
        ] {
            assert_eq!(Member::parse(name).map(|m| m.name()).as_deref(), Some(name));
        }
    }
}
