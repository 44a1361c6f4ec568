//! Which environment variables a job's own `env` may set. The allow-list names which
//! programs may run; these rules keep a schedule from changing which *code* an allowed
//! program loads: the search path, the dynamic loader, interpreters' module and start-up
//! hooks, and the variables the runner sets itself. Validation refuses them with the
//! field path; the runner drops them again as a second line.
//!
//! A list of names can never be complete for every program: an allowed program that
//! reads code from a variable not named here (or from its arguments) is the machine
//! owner's choice to allow (`docs/SCHEDULER.md`, threat model).

/// Refused exactly.
const NAMES: &[&str] = &[
    // Set by the runner: which programs a name finds, where a program's home is.
    "PATH",
    "HOME",
    "USER",
    "SHELL",
    // Shells: start-up files, word splitting, traced prompts, exported functions.
    "ENV",
    "IFS",
    "CDPATH",
    "GLOBIGNORE",
    "SHELLOPTS",
    "PS4",
    "PROMPT_COMMAND",
    // glibc: character-set converters, locale and message catalogues, resolver files.
    "LOCPATH",
    "NLSPATH",
    "HOSTALIASES",
    "RESOLV_HOST_CONF",
    // Interpreters and runtimes: extra modules and start-up code.
    "CLASSPATH",
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS",
    "NODE_OPTIONS",
    "NODE_PATH",
    "PHPRC",
    "PHP_INI_SCAN_DIR",
    "TCLLIBPATH",
    "GEM_HOME",
    "GEM_PATH",
    "BUNDLE_GEMFILE",
    "R_PROFILE",
    "R_PROFILE_USER",
    "R_ENVIRON",
    "R_ENVIRON_USER",
    "R_LIBS",
    "R_LIBS_USER",
    // Programs that programs start.
    "EDITOR",
    "VISUAL",
    "PAGER",
    "MANPAGER",
    "BROWSER",
    "LESSOPEN",
    "LESSCLOSE",
    "SSH_ASKPASS",
    "SUDO_ASKPASS",
];

/// Refused with every name that starts so.
const PREFIXES: &[&str] = &[
    "STUDIO_",  // the runner's own (run id, result file, …)
    "LD_",      // the dynamic loader: LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT, …
    "DYLD_",    // the same on macOS
    "GCONV",    // GCONV_PATH: glibc loads converter modules from it
    "GLIBC_",   // GLIBC_TUNABLES
    "BASH_",    // BASH_ENV, BASH_FUNC_*, BASH_LOADABLES_PATH
    "PYTHON",   // PYTHONPATH, PYTHONSTARTUP, PYTHONHOME, PYTHONWARNINGS (imports), …
    "PERL",     // PERL5LIB, PERL5OPT, PERLLIB, PERL5DB
    "RUBY",     // RUBYLIB, RUBYOPT
    "LUA_",     // LUA_PATH, LUA_CPATH, LUA_INIT
    "GIT_",     // GIT_EXEC_PATH, GIT_SSH_COMMAND, GIT_CONFIG_*
    "XDG_",     // where programs read their configuration
    "OPENSSL_", // OPENSSL_CONF, OPENSSL_ENGINES (loadable engines)
    "GIO_",     // GIO_EXTRA_MODULES
    "GTK_",     // GTK_PATH, GTK_MODULES
    "QT_",      // QT_PLUGIN_PATH
];

/// Why a schedule may not set `name`, or `None` when it may.
pub fn refusal(name: &str) -> Option<&'static str> {
    if name.starts_with("STUDIO_") {
        Some("STUDIO_* variables are set by the runner and cannot be overridden")
    } else if NAMES.contains(&name) || PREFIXES.iter().any(|p| name.starts_with(p)) {
        Some(
            "changes which program or code a job loads (search path, loader, interpreter \
             or start-up hooks), so a schedule may not set it",
        )
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::refusal;

    #[test]
    fn loader_and_search_path_variables_are_refused() {
        for name in [
            "PATH",
            "LD_PRELOAD",
            "LD_AUDIT",
            "LD_LIBRARY_PATH",
            "GCONV_PATH",
            "GLIBC_TUNABLES",
            "BASH_ENV",
            "PYTHONPATH",
            "PERL5OPT",
            "NODE_OPTIONS",
            "GIT_SSH_COMMAND",
            "HOME",
            "STUDIO_RUN_ID",
        ] {
            assert!(refusal(name).is_some(), "{name}");
        }
    }

    #[test]
    fn ordinary_variables_pass() {
        for name in [
            "MODE",
            "DATABASE_URL",
            "RUST_LOG",
            "TZ",
            "LANG",
            "LC_ALL",
            "PATHS",
        ] {
            assert_eq!(refusal(name), None, "{name}");
        }
    }

    #[test]
    fn the_runners_own_prefix_says_so() {
        assert!(refusal("STUDIO_X").is_some_and(|r| r.contains("runner")));
    }
}
