//! The user commands. This module is the command line: `studio up | status | restart |
//! stop | pair | logs | schedule | runs | run | sessions | audit | task | worker | app |
//! secret | notify | evidence | backup | restore | archive | retention`, with the environment
//! equivalents, turned into typed configuration. Clap's own usage errors exit with status
//! 2; so do the checks made here. Its submodules carry the commands out.
//!
//! Invariant: this tree imports nothing from what `studio up` runs (`supervise`) but its
//! entry point: `up` builds an [`UpConfig`] for `supervise::up`.

pub(crate) mod allow;
pub(crate) mod approvals;
pub(crate) mod apps;
pub(crate) mod archive;
pub(crate) mod audit;
pub(crate) mod backup;
pub(crate) mod client;
pub(crate) mod cluster;
pub(crate) mod commands;
pub(crate) mod declare;
pub(crate) mod evidence;
pub(crate) mod notify;
pub mod preview;
pub(crate) mod retention;
pub(crate) mod runs;
pub(crate) mod schedules;
pub(crate) mod secrets;
pub(crate) mod sessions;
pub(crate) mod table;
pub(crate) mod tasks;
pub(crate) mod workers;

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};
use studio_contract::{home::Home, origin, role::Role};

use crate::{
    Error,
    cli::preview::{PreviewRequest, PreviewTrigger},
    control::ChildName,
    supervise::UpConfig,
};

#[derive(Debug, Parser)]
#[command(
    name = "studio",
    version,
    about = "Studio: start, watch and stop studiod and studio-app",
    after_help = "This one executable also carries both children: `studio daemon [FLAGS]` runs studiod \
                  and `studio app [FLAGS]` runs studio-app in the foreground (`--help` lists their \
                  flags); `studio up` starts them that way. `studio app token|list|revoke|join` \
                  are this CLI's own (`studio app --help` is studio-app's)."
)]
pub struct Cli {
    /// The Studio home (default: $XDG_STATE_HOME/studio or ~/.local/state/studio).
    /// On a worker's machine (`studio worker`, `worker join|allow|check`) it names the
    /// worker's own home instead.
    #[arg(long, global = true, env = "STUDIO_HOME", value_name = "DIR")]
    pub home: Option<PathBuf>,
    /// Whether `--home` was on the command line (not from `STUDIO_HOME`): only then does
    /// it name a worker's home.
    #[arg(skip)]
    pub home_on_command_line: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start studiod and studio-app in the foreground and print a pairing link.
    Up(UpArgs),
    /// Show the supervisor and its children, and the cluster as studiod reports it.
    Status {
        /// The control socket's JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// The studiod processes sharing the home's database: the leader, its term and each
    /// member (also shown by `status`; this works without a supervisor); `seed` readies
    /// a new member's home.
    #[command(args_conflicts_with_subcommands = true)]
    Cluster {
        #[command(subcommand)]
        command: Option<ClusterCommand>,
        #[command(flatten)]
        remote: Remote,
    },
    /// The epoch every paired browser belongs to: `rotate` ends it on purpose.
    Epoch {
        #[command(subcommand)]
        command: EpochCommand,
    },
    /// Restart one child (also brings back a failed one).
    Restart { child: ChildArg },
    /// Stop the app, then the daemon, then the supervisor; returns once all are gone.
    Stop,
    /// Print a fresh pairing link.
    Pair {
        /// Also open it in the browser.
        #[arg(long)]
        open: bool,
        /// What the browser that opens it may do: viewer (read), operator (also run,
        /// edit and decide) or admin (also delete and revoke others).
        #[arg(long, value_enum, default_value_t = RoleArg::Admin)]
        role: RoleArg,
    },
    /// Print a child's log.
    Logs {
        child: ChildArg,
        /// Keep printing as it grows (across rotation).
        #[arg(short = 'f', long)]
        follow: bool,
    },
    /// Work with schedules.
    Schedule {
        #[command(subcommand)]
        command: ScheduleCommand,
    },
    /// Recent runs.
    Runs(RunsArgs),
    /// One run.
    Run {
        #[command(subcommand)]
        command: RunCommand,
    },
    /// The command allow-list: which executables `command` actions may run.
    Allow {
        #[command(subcommand)]
        command: AllowCommand,
    },
    /// Paired browsers of the daemon's current epoch, with their roles and when each
    /// expires; `role` and `revoke` change one.
    Sessions {
        #[command(subcommand)]
        command: Option<SessionsCommand>,
        #[command(flatten)]
        remote: Remote,
    },
    /// The audit trail: who changed what, when, in what role and from where.
    Audit(AuditArgs),
    /// Approval requests: runs of approval-gated schedules waiting for a person (who
    /// decides in the cockpit: the daemon token cannot), and the decisions made.
    Approvals {
        #[command(subcommand)]
        command: Option<ApprovalsCommand>,
        #[command(flatten)]
        list: ApprovalsArgs,
    },
    /// On-demand tasks: submit work, follow it, cancel it.
    Task {
        #[command(subcommand)]
        command: TaskCommand,
    },
    /// Remote workers: enrol them with one-time join tokens, list and revoke them; and,
    /// on a worker's machine, join, keep its allow-list and run it (`studio worker` with
    /// no subcommand runs this machine's worker until Ctrl-C or SIGTERM).
    Worker(WorkerArgs),
    /// studio-apps on other hosts: enrol one with a one-time join token, list and revoke
    /// them; and, on the app's host, join (`studio app` followed by flags instead runs
    /// studio-app itself).
    #[command(disable_help_subcommand = true)]
    App {
        #[command(subcommand)]
        command: AppCommand,
    },
    /// Secrets: named values studiod keeps sealed and gives only to the jobs that name
    /// them (`"secrets": {"VAR": "NAME"}` in a schedule or a task, `studio task submit
    /// --secret VAR=NAME`). Nothing ever prints a value.
    Secret {
        #[command(subcommand)]
        command: SecretCommand,
    },
    /// Notifications: endpoints (URLs that receive signed JSON or Slack messages) and the
    /// deliveries the `notify` rules of schedules and tasks make to them.
    Notify {
        #[command(subcommand)]
        command: NotifyCommand,
    },
    /// The evidence log of human decisions.
    Evidence {
        #[command(subcommand)]
        command: EvidenceCommand,
    },
    /// Copy both stores of the running Studio into a new directory: each as one
    /// consistent snapshot, with `backup.json` (sizes, SHA-256). The keys in `run/` are not
    /// copied: keep them apart.
    Backup {
        /// A new or empty directory.
        dest: PathBuf,
        #[command(flatten)]
        remote: Remote,
    },
    /// Put a backup's stores back into this home, which must be stopped; what they
    /// replace is kept beside them (`*.before-restore-<ms>`).
    Restore {
        /// A directory `studio backup` made.
        src: PathBuf,
    },
    /// Retention archives: the ZIP64 files a retention pass writes before it deletes a
    /// chunk of rows (list and verify them offline, or put one back).
    Archive {
        #[command(subcommand)]
        command: ArchiveCommand,
    },
    /// Retention: how long studiod keeps finished runs, their logs and ended
    /// notifications, and the passes that prune the rest (archiving it first when a
    /// directory is set).
    Retention {
        #[command(subcommand)]
        command: RetentionCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum RetentionCommand {
    /// The policy in force, where it comes from, the next pass and the latest passes.
    Show {
        #[command(flatten)]
        remote: Remote,
    },
    /// Replace the whole policy (admin), from flags or from a JSON file.
    ///
    /// The flags build the whole policy: what is not given is left out, and a part left
    /// out keeps everything it governs, whatever was set before (`--runs-max-age 30d`
    /// alone keeps all logs and notifications). `--file` takes the policy as JSON
    /// instead, like {"runs": {"max_age": "30d", "keep_last": 5}}; it cannot be mixed
    /// with the flags, and `{}` keeps everything. Intervals read like 90s, 15m, 6h or
    /// 30d. Refused while STUDIO_RETENTION sets the policy. Prints the new state as
    /// `show` does.
    Set(Box<RetentionSetArgs>),
    /// Run a pass now and wait for it to end (minutes on a large home).
    ///
    /// Daemon token only. Prints the rows it pruned by table, the archives and chunks,
    /// the longest chunk transaction, the WAL checkpoint and the outcome; exit status 1
    /// when the pass failed (what it pruned before stays pruned).
    Run {
        /// Archive each chunk into DIR on studiod's machine (made if missing) before it is
        /// deleted, instead of the policy's archive directory; a relative DIR is taken
        /// from here.
        #[arg(long, value_name = "DIR")]
        archive_dir: Option<PathBuf>,
        #[command(flatten)]
        remote: Remote,
    },
}

/// `studio retention set`: the policy as flags, or `--file`.
#[derive(Debug, Args)]
pub struct RetentionSetArgs {
    /// Prune finished runs older than AGE (by when they finished), with their
    /// transitions, approvals and log folders; evidence rows older than AGE go too.
    #[arg(long, value_name = "AGE")]
    pub runs_max_age: Option<String>,
    /// Keep the last N finished runs of each schedule, whatever their age (a task counts
    /// as one, with all its attempts); with --runs-max-age, a run goes only when it is
    /// both older and not among them.
    #[arg(long, value_name = "N")]
    pub runs_keep_last: Option<u32>,
    /// Keep at most N bytes of run logs (at least 1048576): past it, the logs of the
    /// oldest finished runs go (the runs stay, with the tails of their output).
    #[arg(long, value_name = "N")]
    pub logs_max_bytes: Option<u64>,
    /// Keep delivered notifications this long.
    #[arg(long, value_name = "AGE")]
    pub notifications_delivered: Option<String>,
    /// Keep dead-lettered notifications this long.
    #[arg(long, value_name = "AGE")]
    pub notifications_dead: Option<String>,
    /// Passes that run on their own archive each chunk into DIR before deleting it
    /// (without it they delete without archiving); a relative DIR is taken from here.
    #[arg(long, value_name = "DIR")]
    pub archive_dir: Option<PathBuf>,
    /// How often a pass runs on its own (1m to 7d; left out: 1h).
    #[arg(long, value_name = "EVERY")]
    pub interval: Option<String>,
    /// The whole policy as JSON, from FILE (`-`: stdin), instead of the flags above.
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    #[command(flatten)]
    pub remote: Remote,
}

#[derive(Debug, Subcommand)]
pub enum ArchiveCommand {
    /// The archives in a directory, one line each.
    ///
    /// File, kind, when it was made, size, log files and rows by table; an archive that
    /// cannot be read says why on its line. Only manifests are read: `verify` checks
    /// contents.
    List {
        /// The archive directory (a retention `archive_dir`).
        dir: PathBuf,
        /// A JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Check one archive offline, without studiod.
    ///
    /// Every member's size and SHA-256 against its manifest, every row, and an evidence
    /// archive's chain (with the key, its MACs). Exit status 1 when it does not verify,
    /// 2 when it is no archive.
    Verify {
        /// The archive (`<kind>-<time>-<id>.zip`).
        file: PathBuf,
        /// The home's evidence key (`run/evidence.key`: 64 hex digits), to check an
        /// evidence archive's MACs.
        #[arg(long, value_name = "FILE")]
        key: Option<PathBuf>,
    },
    /// Put an archive's rows and log files back into the running Studio.
    ///
    /// studiod inserts its rows, sets the kept rows it changed back as they were and
    /// writes its log files (daemon token only). It reads FILE itself, so FILE must be
    /// on studiod's machine; it is verified here first, and a broken one is refused
    /// before anything is sent.
    Restore {
        /// The archive.
        file: PathBuf,
        #[command(flatten)]
        remote: Remote,
    },
}

/// The words after `studio app` that name [`AppCommand`]s: the `studio` executable gives
/// those command lines to this CLI, and any other `studio app …` to studio-app.
pub const APP_SUBCOMMANDS: [&str; 4] = ["token", "list", "revoke", "join"];

#[derive(Debug, Subcommand)]
pub enum AppCommand {
    /// Make a one-time join token for a studio-app on another host (daemon token only).
    ///
    /// Prints only the token on stdout; stderr says when it expires and what to run on
    /// the app's host (`studio app join --server … --token …`). The token also pins
    /// studiod's authority. Needs studiod's apps listener (STUDIO_APPS_ADDR).
    Token {
        /// How long it may be used: 30m, 1h, 2d (at most 7 days; default 1h).
        #[arg(long, value_name = "TTL")]
        ttl: Option<String>,
        /// Write the token to this file (0600) instead of stdout, for `studio app join
        /// --token-file` on the app's host.
        #[arg(long, value_name = "FILE", conflicts_with = "json")]
        out: Option<PathBuf>,
        #[command(flatten)]
        remote: Remote,
    },
    /// The enrolled studio-apps: id, name, when each joined, when its certificate
    /// expires, and whether it is active, expired or revoked.
    List {
        #[command(flatten)]
        remote: Remote,
    },
    /// Revoke an enrolled app at once (daemon token only): its certificate admits it no
    /// more, and it must join again with a new token.
    Revoke {
        /// The app's id, or a prefix only it starts with (`studio app list` shows them).
        id: String,
        #[command(flatten)]
        remote: Remote,
    },
    /// On the app's host, once: enrol this home's studio-app with studiod.
    ///
    /// Makes a key here (it never leaves this home), sends a certificate request with
    /// the token over a connection that trusts only the authority the token pins, and
    /// keeps the certificate studiod issues in the home's run/app/ (key.pem, cert.pem,
    /// ca.pem and id, each 0600). Then start studio-app on this home with `--studiod
    /// HOST:PORT`. Joining again replaces an earlier enrolment.
    Join(AppJoinArgs),
}

/// `studio app join`.
#[derive(Debug, Args)]
pub struct AppJoinArgs {
    /// studiod's apps listener (`server` in the answer of `studio app token --json`).
    #[arg(long, value_name = "HOST:PORT")]
    pub server: String,
    #[command(flatten)]
    pub token: JoinTokenArg,
    /// A name for this app in `studio app list` (default: this host's name).
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Keep this home's enrolment when it has one valid for more than 30 more days,
    /// without reading or spending the token: a join that runs at every start, as in a
    /// compose file, enrols once.
    #[arg(long)]
    pub unless_enrolled: bool,
}

/// `studio worker`: a subcommand, or none to run this machine's worker.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct WorkerArgs {
    #[command(subcommand)]
    pub command: Option<WorkerCommand>,
    #[command(flatten)]
    pub run: WorkerRunArgs,
}

/// How `studio worker` runs this machine's worker.
#[derive(Debug, Args)]
pub struct WorkerRunArgs {
    /// How many jobs it runs at once.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    pub capacity: u32,
    /// Offer only these of the labels its join token granted, comma-separated (default:
    /// all of them).
    #[arg(long, value_name = "L,…", value_delimiter = ',')]
    pub labels: Option<Vec<String>>,
    #[command(flatten)]
    pub home: WorkerHome,
}

/// The worker's own home, on its machine: `--home DIR` or `--worker-home DIR` on the
/// command line, else `STUDIO_WORKER_HOME`, else `~/.studio-worker` (never the Studio
/// home of `STUDIO_HOME`).
#[derive(Debug, Clone, Args)]
pub struct WorkerHome {
    /// The worker's home: its key, certificate and allow-list, as `--home` (default:
    /// $STUDIO_WORKER_HOME, else ~/.studio-worker).
    #[arg(long = "worker-home", value_name = "DIR")]
    pub worker_home: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum WorkerCommand {
    /// One-time join tokens (admin).
    Token {
        #[command(subcommand)]
        command: WorkerTokenCommand,
    },
    /// Every worker: studiod's built-in one, then the enrolled ones, with their labels,
    /// load and whether they are connected.
    List {
        #[command(flatten)]
        remote: Remote,
    },
    /// Revoke a worker: its certificate admits it no more, and its running attempts end
    /// `worker_lost`.
    Revoke {
        /// The worker's id, or a prefix that names one (`studio worker list` shows them).
        id: String,
        #[command(flatten)]
        remote: Remote,
    },
    /// Enrol this machine as a worker with a join token (`studio worker token create`
    /// on Studio's machine prints one, and this command).
    Join(WorkerJoinArgs),
    /// This worker's own allow-list, kept on its machine: what it runs, whatever studiod
    /// asks.
    Allow {
        #[command(subcommand)]
        command: WorkerAllowCommand,
    },
    /// Connect once with this worker's certificate and say whether studiod admits it.
    Check {
        #[command(flatten)]
        home: WorkerHome,
    },
}

#[derive(Debug, Subcommand)]
pub enum WorkerTokenCommand {
    /// Print a new join token (shown once): its labels, expiry and the join command go
    /// to stderr.
    Create {
        /// The labels a worker enrolled with it may offer, comma-separated.
        #[arg(long, value_name = "L,…", value_delimiter = ',')]
        labels: Vec<String>,
        /// How long it may be used: 30m, 1h, 2d (at most 7d; default 1h).
        #[arg(long, value_name = "TTL")]
        ttl: Option<String>,
        /// Write the token to this file (0600) instead of stdout, for `studio worker
        /// join --token-file` on the worker's machine.
        #[arg(long, value_name = "FILE", conflicts_with = "json")]
        out: Option<PathBuf>,
        #[command(flatten)]
        remote: Remote,
    },
}

/// Hands a new join token over: to `out` (written 0600, atomically) when given, else
/// alone on stdout.
pub(crate) fn hand_over(token: &str, out: Option<&std::path::Path>) -> Result<(), crate::Error> {
    match out {
        None => outln!("{token}"),
        Some(path) => {
            studio_contract::home::Home::write_secret(path, &format!("{token}\n"))
                .map_err(|e| crate::Error::Usage(format!("--out {}: {e}", path.display())))?;
            errln!("the token is in {} (0600)", path.display());
            Ok(())
        }
    }
}

/// A one-time join token: on the command line, or from a file or stdin (a command line
/// is readable by every user of the machine, a 0600 file or a pipe is not).
#[derive(Debug, Clone, Args)]
#[group(required = true, multiple = false)]
pub struct JoinTokenArg {
    /// The join token (other users of this machine can read a command line: prefer
    /// --token-file).
    #[arg(long, value_name = "T")]
    pub token: Option<String>,
    /// Read the join token from this file (`-`: standard input).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
}

impl JoinTokenArg {
    /// The token's text, surrounding whitespace removed; a file that cannot be read is
    /// the user's error (one line, exit 2).
    pub fn read(&self) -> Result<String, crate::Error> {
        use std::io::Read;
        let text = match (&self.token, &self.token_file) {
            (Some(token), _) => token.clone(),
            (None, Some(path)) if path.as_os_str() == "-" => {
                let mut text = String::new();
                std::io::stdin()
                    .take(4096)
                    .read_to_string(&mut text)
                    .map_err(|e| crate::Error::Usage(format!("--token-file -: {e}")))?;
                text
            }
            (None, Some(path)) => std::fs::read_to_string(path).map_err(|e| {
                crate::Error::Usage(format!("--token-file {}: {e}", path.display()))
            })?,
            (None, None) => {
                return Err(crate::Error::Usage(
                    "a join token is needed: --token or --token-file".into(),
                ));
            }
        };
        Ok(text.trim().to_owned())
    }
}

#[derive(Debug, Args)]
pub struct WorkerJoinArgs {
    /// studiod's worker listener (`server` of the token's answer).
    #[arg(long, value_name = "HOST:PORT")]
    pub server: String,
    #[command(flatten)]
    pub token: JoinTokenArg,
    /// A name for this worker in `studio worker list` (default: this machine's host
    /// name).
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Keep this home's enrolment when it has one with this server valid for more than 30
    /// more days, without reading or spending the token: a join that runs at every start,
    /// as in a compose file, enrols once.
    #[arg(long)]
    pub unless_enrolled: bool,
    #[command(flatten)]
    pub home: WorkerHome,
}

#[derive(Debug, Subcommand)]
pub enum WorkerAllowCommand {
    /// What this worker runs.
    List {
        #[command(flatten)]
        home: WorkerHome,
    },
    /// Allow executables: bare names (found on the worker's PATH) or absolute paths.
    Add {
        #[arg(required = true, value_name = "ENTRY")]
        entries: Vec<String>,
        #[command(flatten)]
        home: WorkerHome,
    },
    /// Stop allowing executables.
    Remove {
        #[arg(required = true, value_name = "ENTRY")]
        entries: Vec<String>,
        #[command(flatten)]
        home: WorkerHome,
    },
}

#[derive(Debug, Subcommand)]
pub enum TaskCommand {
    /// Submit a task: `studio task submit [OPTIONS] -- EXECUTABLE [ARGS…]`, or `--agent
    /// PROMPT`. Prints its id.
    Submit(Box<TaskSubmitArgs>),
    /// Tasks, newest at the bottom (a queued task no worker serves shows `unmatched`).
    List {
        /// Only these statuses, comma-separated (queued, leased, running, completed,
        /// failed, timed_out, cancelled, retry_wait, awaiting_approval, denied, expired).
        #[arg(long, value_name = "S")]
        status: Option<String>,
        /// Only tasks that need this label.
        #[arg(long, value_name = "L")]
        label: Option<String>,
        /// How many recent tasks (1 to 500).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u16).range(1..=500))]
        limit: u16,
        #[command(flatten)]
        remote: Remote,
    },
    /// One task with its attempts.
    Show(RunIdArgs),
    /// Print the output of a task's latest attempt.
    Logs {
        #[command(flatten)]
        task: RunIdArgs,
        /// stderr instead of stdout.
        #[arg(long)]
        stderr: bool,
        /// Keep printing until the attempt ends.
        #[arg(short = 'f', long)]
        follow: bool,
    },
    /// Cancel a task: a queued one at once, a running one through its attempt.
    Cancel(RunIdArgs),
    /// Queue an ended task (failed, timed out, cancelled) for another attempt now.
    Retry(RunIdArgs),
}

#[derive(Debug, Args)]
pub struct TaskSubmitArgs {
    /// A label the worker must have (repeat for more).
    #[arg(long, value_name = "L")]
    pub label: Vec<String>,
    /// 0 (lowest) to 9 (highest).
    #[arg(long, default_value_t = studio_api::schedule::task::DEFAULT_PRIORITY,
          value_parser = clap::value_parser!(u8).range(0..=9))]
    pub priority: u8,
    /// An idempotency key: the same key again answers the task it made.
    #[arg(long, value_name = "K")]
    pub key: Option<String>,
    /// At most LIMIT tasks of KEY at once (`KEY` alone: one).
    #[arg(long, value_name = "KEY[:LIMIT]")]
    pub concurrency: Option<String>,
    /// Seconds the job may run.
    #[arg(long, value_name = "SECS")]
    pub deadline: Option<u64>,
    /// Up to N attempts in all, after a failure, a timeout or a lost worker (waits of up
    /// to 5 s, doubling, at most 5 min, each drawn at random).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100))]
    pub attempts: Option<u32>,
    /// Hold the task until a person grants it in the cockpit; the request expires after
    /// this long (`15m`, `24h`).
    #[arg(long, value_name = "WAIT")]
    pub approval: Option<String>,
    /// The job's working directory (absolute).
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<String>,
    /// An environment variable for the job (repeat for more).
    #[arg(long, value_name = "NAME=VALUE")]
    pub env: Vec<String>,
    /// A secret for the job's environment: the variable and the name of a secret studiod
    /// keeps (`studio secret set SECRET`); repeat for more.
    #[arg(long, value_name = "NAME=SECRET")]
    pub secret: Vec<String>,
    /// Run the agent with this prompt instead of a command.
    #[arg(long, value_name = "PROMPT")]
    pub agent: Option<String>,
    /// The agent's model.
    #[arg(long, requires = "agent")]
    pub model: Option<String>,
    /// The agent's profile.
    #[arg(long, requires = "agent")]
    pub profile: Option<String>,
    #[command(flatten)]
    pub remote: Remote,
    /// The executable and its arguments, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    /// One request: exactly what will run, its hash, who asked, its expiry, its decision
    /// and its evidence rows.
    Show {
        /// The request's id (`studio approvals` lists them).
        id: String,
        #[command(flatten)]
        remote: Remote,
    },
}

#[derive(Debug, Args)]
pub struct ApprovalsArgs {
    /// Only requests in these statuses, comma-separated (pending, granted, denied,
    /// expired, voided, consumed).
    #[arg(long, value_name = "S")]
    pub status: Option<String>,
    /// Only requests of this schedule (name or id).
    #[arg(long, value_name = "NAME")]
    pub schedule: Option<String>,
    /// How many recent requests (1 to 500).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u16).range(1..=500))]
    pub limit: u16,
    #[command(flatten)]
    pub remote: Remote,
}

#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Make what every member shares (`run/evidence.key`, `run/secrets.key` and the
    /// authority in `run/ca/`) in this home, keeping any already there, before its studiod
    /// first starts: the first member's home, which `seed --from` then copies (a container
    /// has no shell to wait for a studiod to make them).
    Init,
    /// Ready this home to join a cluster: copy what every member must share from a
    /// member's home (`run/evidence.key`, `run/secrets.key` and the authority in
    /// `run/ca/`), before this home's studiod first starts. Files already the same are
    /// left; a different one is refused (this home has sealed with keys of its own).
    Seed {
        /// A member's home (or a copy of its `run/`, in a directory of its own).
        #[arg(long, value_name = "DIR")]
        from: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
pub enum EpochCommand {
    /// End the epoch and start another (the daemon token): every browser paired through
    /// any studiod of the cluster pairs again, and pairing codes not yet used are void.
    Rotate {
        #[command(flatten)]
        remote: Remote,
    },
}

#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// Give a session another role; its next request is judged by it.
    Role {
        /// The session's id (`studio sessions` lists them).
        id: String,
        #[arg(value_enum)]
        role: RoleArg,
    },
    /// Revoke a session at once; the browser must pair again.
    Revoke {
        /// The session's id.
        id: String,
    },
}

/// `--role` of `studio pair`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RoleArg {
    Viewer,
    Operator,
    Admin,
}

impl From<RoleArg> for Role {
    fn from(r: RoleArg) -> Self {
        match r {
            RoleArg::Viewer => Role::Viewer,
            RoleArg::Operator => Role::Operator,
            RoleArg::Admin => Role::Admin,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum SecretCommand {
    /// Set a secret's value (admin), read from stdin, never from the command line: typed
    /// at a prompt that does not show it, or piped in (`studio secret set NAME < FILE`,
    /// for a long or multi-line value). One trailing newline is dropped.
    Set {
        /// 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit.
        name: String,
        #[command(flatten)]
        remote: Remote,
    },
    /// Every secret: when it was set, by whom, and the schedules and unfinished tasks
    /// that name it.
    List {
        #[command(flatten)]
        remote: Remote,
    },
    /// Delete a secret (admin); refused while a schedule or an unfinished task names it.
    Delete {
        name: String,
        #[command(flatten)]
        remote: Remote,
    },
}

#[derive(Debug, Subcommand)]
pub enum NotifyCommand {
    /// Notification endpoints: where rules send (`"notify": [{"on": […], "to": NAME}]`).
    Endpoint {
        #[command(subcommand)]
        command: EndpointCommand,
    },
    /// The newest deliveries (the oldest of them first), each with its attempts and the
    /// receiver's last answer.
    Deliveries(DeliveriesArgs),
}

#[derive(Debug, Subcommand)]
pub enum EndpointCommand {
    /// Make an endpoint (admin). Prints its signing secret alone on stdout: it is shown
    /// this once, and the receiver checks `Studio-Signature` with it.
    Add {
        /// 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit.
        name: String,
        /// Where deliveries go: an http or https URL (never one of this machine's own
        /// Studio listeners).
        url: String,
        /// What it receives: the event as JSON, or Slack's `{"text": …}`.
        #[arg(long, value_enum, default_value_t = FormatArg::Json)]
        format: FormatArg,
        #[command(flatten)]
        remote: Remote,
    },
    /// Every endpoint, with the schedules and unfinished tasks whose rules send to it.
    List {
        #[command(flatten)]
        remote: Remote,
    },
    /// Delete an endpoint (admin); refused while a rule sends to it.
    Delete {
        name: String,
        #[command(flatten)]
        remote: Remote,
    },
    /// Queue a test delivery to an endpoint.
    Test {
        name: String,
        /// Wait (up to 30 s) until it is delivered or dead, and say how the receiver
        /// answered; exit status 1 unless it was delivered.
        #[arg(long)]
        wait: bool,
        #[command(flatten)]
        remote: Remote,
    },
}

/// `--format` of `studio notify endpoint add`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
    Json,
    Slack,
}

impl From<FormatArg> for studio_api::EndpointFormat {
    fn from(f: FormatArg) -> Self {
        match f {
            FormatArg::Json => Self::Json,
            FormatArg::Slack => Self::Slack,
        }
    }
}

#[derive(Debug, Args)]
pub struct DeliveriesArgs {
    /// Only this run's.
    #[arg(long, value_name = "ID")]
    pub run: Option<String>,
    /// Only to this endpoint.
    #[arg(long, value_name = "NAME")]
    pub endpoint: Option<String>,
    /// Only in this status.
    #[arg(long, value_enum, value_name = "S")]
    pub status: Option<DeliveryStatusArg>,
    /// How many recent deliveries (1 to 500).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u16).range(1..=500))]
    pub limit: u16,
    #[command(flatten)]
    pub remote: Remote,
}

/// `--status` of `studio notify deliveries`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DeliveryStatusArg {
    Pending,
    Delivered,
    Dead,
}

impl DeliveryStatusArg {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Delivered => "delivered",
            Self::Dead => "dead",
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum EvidenceCommand {
    /// Write the evidence log as a bundle (JSON lines) to standard output: a header
    /// signed with the home's key, then one sealed row per line.
    Export {
        /// Only rows sealed at or after this RFC 3339 instant (the header then names the
        /// chain hash the first row follows).
        #[arg(long, value_name = "T")]
        since: Option<String>,
        /// studiod's URL (default: the home's running daemon, else http://127.0.0.1:8766).
        #[arg(long, env = "STUDIO_DAEMON_URL", value_name = "URL")]
        daemon: Option<String>,
    },
    /// Check an exported bundle offline, without studiod or its database: every row's
    /// hashes and, with the key, every MAC. Names the first row an edit, a deletion, an
    /// insertion or a reordering breaks; exit status 1 when one does.
    Verify {
        /// The bundle (JSON lines, as `studio evidence export` writes it).
        bundle: PathBuf,
        /// The home's evidence key (`run/evidence.key`: 64 hex digits), to check MACs.
        #[arg(long, value_name = "FILE")]
        key: Option<PathBuf>,
        /// A directory of retention archives: its evidence archives are checked and
        /// chained in front of the bundle, as one chain from the log's first row (a
        /// bundle exported after a prune starts where the last archive ends).
        #[arg(long, value_name = "DIR")]
        archives: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub enum AllowCommand {
    /// Allow executables at once: bare names (found on studiod's PATH when a run starts)
    /// or absolute paths.
    Add(AllowArgs),
    /// Stop allowing executables: no run starts them from then on.
    Remove(AllowArgs),
    /// What is allowed, and where each name leads on studiod's PATH.
    List {
        #[command(flatten)]
        remote: Remote,
    },
}

#[derive(Debug, Args)]
pub struct AllowArgs {
    #[arg(required = true, value_name = "EXECUTABLE")]
    pub executables: Vec<String>,
    #[command(flatten)]
    pub remote: Remote,
}

#[derive(Debug, Subcommand)]
pub enum ScheduleCommand {
    /// Print the next fire instants of a trigger (no daemon needed, no file touched).
    Preview(PreviewArgs),
    /// Check ScheduleSet files locally: no daemon contacted, nothing written.
    Validate {
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
    },
    /// Show what applying the files would change (exit 0 nothing, 1 changes, 2 errors).
    Plan(PlanArgs),
    /// Plan, confirm, then apply the files.
    Apply {
        #[command(flatten)]
        plan: PlanArgs,
        /// Apply without asking.
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// Write the stored schedules as ScheduleSet YAML, one document per project.
    Export {
        /// Only this project.
        #[arg(long, value_name = "P")]
        project: Option<String>,
        /// Write `<DIR>/<project>.yaml` instead of printing.
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        #[command(flatten)]
        remote: Remote,
    },
    /// List schedules.
    List {
        /// Only names containing this text.
        #[arg(long, short = 'q', value_name = "TEXT")]
        query: Option<String>,
        /// Only enabled (true) or disabled (false) ones.
        #[arg(long, value_name = "BOOL")]
        enabled: Option<bool>,
        #[command(flatten)]
        out: Remote,
    },
    /// Show one schedule.
    Show(NameArgs),
    /// Enable a schedule.
    Enable(NameArgs),
    /// Disable a schedule.
    Disable(NameArgs),
    /// Run a schedule now (a manual run).
    Trigger(NameArgs),
    /// Delete a schedule (its runs stay).
    Delete(NameArgs),
}

/// How a command reaches studiod and prints its answer.
#[derive(Debug, Clone, Default, Args)]
pub struct Remote {
    /// studiod's URL (default: the home's running daemon, else http://127.0.0.1:8766).
    #[arg(long, env = "STUDIO_DAEMON_URL", value_name = "URL")]
    pub daemon: Option<String>,
    /// The API's JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Wait up to SECS for studiod to answer (one starting beside this command, as a
    /// compose file's one-shot services do) instead of failing at once.
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub wait_for_studiod: Option<u64>,
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Delete owned schedules that left the files (instead of disabling them).
    #[arg(long)]
    pub prune: bool,
    /// Take over schedules the files name that were created by hand (never ones owned
    /// by another document).
    #[arg(long)]
    pub adopt: bool,
    #[command(flatten)]
    pub remote: Remote,
}

#[derive(Debug, Args)]
pub struct NameArgs {
    /// A schedule name (`project/member`) or id.
    pub name: String,
    #[command(flatten)]
    pub remote: Remote,
}

#[derive(Debug, Args)]
pub struct RunsArgs {
    /// Only runs of this schedule (name or id).
    #[arg(long, value_name = "NAME")]
    pub schedule: Option<String>,
    /// Only runs in this status (queued, running, completed, failed, timed_out,
    /// cancelled, skipped, awaiting_approval, denied, expired).
    #[arg(long, value_name = "S")]
    pub status: Option<String>,
    /// How many recent runs (1 to 500).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u16).range(1..=500))]
    pub limit: u16,
    /// Keep printing run changes as they happen.
    #[arg(short = 'f', long)]
    pub follow: bool,
    #[command(flatten)]
    pub remote: Remote,
}

#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Only rows about this schedule (name or id; a deleted schedule by its id) and its
    /// runs.
    #[arg(long, value_name = "NAME")]
    pub schedule: Option<String>,
    /// Only rows about this run.
    #[arg(long, value_name = "ID")]
    pub run: Option<String>,
    /// Only rows of this session id (`daemon` for the daemon token).
    #[arg(long, value_name = "ID")]
    pub principal: Option<String>,
    /// Only rows of these kinds, comma-separated (schedule_created, schedule_updated,
    /// schedule_enabled, schedule_disabled, schedule_deleted, run_triggered,
    /// run_cancelled, approval_granted, approval_denied, task_submitted, task_cancelled,
    /// task_retried, worker_token_created, worker_joined, worker_revoked, secret_set,
    /// secret_deleted, endpoint_created, endpoint_deleted, retention_policy_set, retention_pass,
    /// wal_checkpoint, archive_restored, pairing_minted, pairing_redeemed, pairing_failed, session_revoked, role_changed,
    /// allowlist_changed, epoch_started, epoch_stopped, epoch_rotated).
    #[arg(long, value_name = "KINDS")]
    pub kind: Option<String>,
    /// Only rows at or after this RFC 3339 instant.
    #[arg(long, value_name = "T")]
    pub since: Option<String>,
    /// How many recent rows (1 to 500).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u16).range(1..=500))]
    pub limit: u16,
    #[command(flatten)]
    pub remote: Remote,
}

#[derive(Debug, Subcommand)]
pub enum RunCommand {
    /// Show one run with its transitions.
    Show(RunIdArgs),
    /// Print a run's output.
    Logs {
        #[command(flatten)]
        run: RunIdArgs,
        /// stderr instead of stdout.
        #[arg(long)]
        stderr: bool,
        /// Keep printing until the run ends.
        #[arg(short = 'f', long)]
        follow: bool,
    },
    /// Cancel a queued or running run.
    Cancel(RunIdArgs),
}

#[derive(Debug, Args)]
pub struct RunIdArgs {
    pub id: String,
    #[command(flatten)]
    pub remote: Remote,
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("trigger").required(true).args(["cron", "every"])))]
pub struct PreviewArgs {
    /// A cron expression (5 fields, or 6 with seconds first), like "30 2 * * *".
    ///
    /// When day of month and day of week are both restricted (anything but a bare `*`;
    /// a step like `*/2` counts), a day matching either fires: "0 0 */2 * 1" fires on odd
    /// days and on Mondays, as in croniter (cronie would fire on Mondays only).
    #[arg(long, value_name = "EXPR")]
    pub cron: Option<String>,
    /// An interval, like 90s, 15m, 6h or 1h30m; anchored at --from.
    #[arg(long, value_name = "INTERVAL")]
    pub every: Option<String>,
    /// The IANA zone (default: STUDIO_SCHEDULER_TZ, else the host's).
    #[arg(long, value_name = "ZONE")]
    pub tz: Option<String>,
    /// Fires strictly after this RFC 3339 instant (default: now).
    #[arg(long, value_name = "RFC3339")]
    pub from: Option<String>,
    /// How many fires to print (1 to 1000; default 5).
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
}

impl PreviewArgs {
    pub fn into_request(self) -> PreviewRequest {
        // The argument group makes exactly one of the two present.
        let trigger = match (self.cron, self.every) {
            (Some(expr), _) => PreviewTrigger::Cron(expr),
            (None, Some(interval)) => PreviewTrigger::Every(interval),
            (None, None) => PreviewTrigger::Every(String::new()),
        };
        PreviewRequest {
            trigger,
            tz: self.tz,
            from: self.from,
            count: self.count,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ChildArg {
    App,
    Daemon,
}

impl From<ChildArg> for ChildName {
    fn from(c: ChildArg) -> Self {
        match c {
            ChildArg::App => ChildName::App,
            ChildArg::Daemon => ChildName::Daemon,
        }
    }
}

#[derive(Debug, Args)]
pub struct UpArgs {
    /// Where studio-app listens for browsers.
    #[arg(
        long,
        env = "STUDIO_APP_ADDR",
        default_value = "127.0.0.1:8765",
        value_name = "IP:PORT"
    )]
    pub app_addr: SocketAddr,
    /// Where studiod listens.
    #[arg(
        long,
        env = "STUDIO_DAEMON_ADDR",
        default_value = "127.0.0.1:8766",
        value_name = "IP:PORT"
    )]
    pub daemon_addr: SocketAddr,
    /// Open the pairing link in the browser.
    #[arg(long)]
    pub open: bool,
    #[arg(long, env = "STUDIO_DAEMON_BIN", hide = true)]
    pub daemon_bin: Option<PathBuf>,
    #[arg(long, env = "STUDIO_APP_BIN", hide = true)]
    pub app_bin: Option<PathBuf>,
    #[arg(long, env = "STUDIO_PUBLIC_ORIGIN", hide = true)]
    pub public_origin: Option<String>,
    #[arg(
        long,
        env = "STUDIO_STOP_GRACE_MS",
        default_value_t = studio_contract::lifecycle::STOP_GRACE_MS,
        hide = true
    )]
    pub stop_grace_ms: u64,
    #[arg(
        long,
        env = "STUDIO_READY_TIMEOUT_MS",
        default_value_t = 30_000,
        hide = true
    )]
    pub ready_timeout_ms: u64,
    #[arg(long, env = "STUDIO_LOG_MAX_BYTES", default_value_t = 10 * 1024 * 1024, hide = true)]
    pub log_max_bytes: u64,
    #[arg(long, env = "STUDIO_LOG_KEEP", default_value_t = 5, hide = true)]
    pub log_keep: u32,
}

impl Cli {
    /// Parses `args` (the first is the program name), noting where `--home` came from.
    pub fn try_from_args(
        args: impl IntoIterator<Item = impl Into<std::ffi::OsString> + Clone>,
    ) -> Result<Self, clap::Error> {
        use clap::{CommandFactory, FromArgMatches, parser::ValueSource};
        let matches = Self::command().try_get_matches_from(args)?;
        let mut cli = Self::from_arg_matches(&matches)?;
        cli.home_on_command_line = matches.value_source("home") == Some(ValueSource::CommandLine);
        Ok(cli)
    }

    pub fn home(&self) -> Home {
        Home::resolve(self.home.clone())
    }
}

impl UpArgs {
    /// Checks and completes the flags; `token_from_env` says whether STUDIO_TOKEN is set.
    pub fn into_config(self, home: Home, token_from_env: bool) -> Result<UpConfig, Error> {
        if self.app_addr.port() == 0 {
            // studiod must know the app's origin before the app starts.
            return Err(Error::Usage(
                "--app-addr needs a fixed port (studiod is told the app's origin before the app binds)".into(),
            ));
        }
        let public_origin = match self.public_origin.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(o) => Some(origin::normalize(o).ok_or_else(|| {
                Error::Usage(format!(
                    "STUDIO_PUBLIC_ORIGIN is not an http(s) origin: {o:?}"
                ))
            })?),
        };
        Ok(UpConfig {
            home,
            app_addr: self.app_addr,
            daemon_addr: self.daemon_addr,
            open: self.open,
            daemon_bin: self.daemon_bin,
            app_bin: self.app_bin,
            public_origin,
            token_from_env,
            stop_grace: Duration::from_millis(self.stop_grace_ms),
            ready_timeout: Duration::from_millis(self.ready_timeout_ms),
            // The caller reads the variable studiod reads (`lib::run`).
            daemon_lock_wait: studio_contract::home::DAEMON_LOCK_WAIT,
            log_max_bytes: self.log_max_bytes,
            log_keep: self.log_keep,
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn preview_help_names_the_day_rule_with_an_example() {
        let err = Cli::try_parse_from(["studio", "schedule", "preview", "--help"])
            .expect_err("help is printed, not parsed");
        let help = err.to_string();
        assert!(
            help.contains("0 0 */2 * 1") && help.contains("croniter") && help.contains("cronie"),
            "{help}"
        );
    }

    #[test]
    fn usage_errors_exit_2() {
        let err = Cli::try_parse_from(["studio", "restart", "db"]).expect_err("bad child");
        assert_eq!(err.exit_code(), 2);
        let err = Cli::try_parse_from(["studio", "up", "--app-addr", "nope"]).expect_err("addr");
        assert_eq!(err.exit_code(), 2);
        assert_eq!(Error::Usage("x".into()).exit_code(), 2);
    }

    fn archive(args: &[&str]) -> Result<ArchiveCommand, clap::Error> {
        let cli = Cli::try_parse_from(["studio", "archive"].iter().chain(args))?;
        let Command::Archive { command } = cli.command else {
            panic!("not archive")
        };
        Ok(command)
    }

    #[test]
    fn archive_list_verify_and_restore_parse() {
        assert!(matches!(
            archive(&["list", "/a"]).expect("parses"),
            ArchiveCommand::List { dir, json: false } if dir == std::path::Path::new("/a")
        ));
        assert!(matches!(
            archive(&["list", "/a", "--json"]).expect("parses"),
            ArchiveCommand::List { json: true, .. }
        ));
        assert!(matches!(
            archive(&["verify", "x.zip", "--key", "k"]).expect("parses"),
            ArchiveCommand::Verify { file, key: Some(key) }
                if file == std::path::Path::new("x.zip") && key == std::path::Path::new("k")
        ));
        assert!(matches!(
            archive(&["restore", "x.zip", "--json", "--daemon", "http://127.0.0.1:9"])
                .expect("parses"),
            ArchiveCommand::Restore { file, remote }
                if file == std::path::Path::new("x.zip") && remote.json
        ));
        for bad in [
            &[][..],
            &["list"],
            &["verify"],
            &["verify", "a.zip", "b.zip"],
            &["verify", "a.zip", "--key"],
            &["restore"],
            &["restore", "a.zip", "b.zip"],
            &["prune", "/a"],
        ] {
            let err = archive(bad).expect_err("refused");
            assert_eq!(err.exit_code(), 2, "{bad:?}");
        }
    }

    fn retention(args: &[&str]) -> Result<RetentionCommand, clap::Error> {
        let cli = Cli::try_parse_from(["studio", "retention"].iter().chain(args))?;
        let Command::Retention { command } = cli.command else {
            panic!("not retention")
        };
        Ok(command)
    }

    #[test]
    fn retention_show_set_and_run_parse() {
        assert!(matches!(
            retention(&["show", "--json", "--daemon", "http://127.0.0.1:9"]).expect("parses"),
            RetentionCommand::Show { remote }
                if remote.json && remote.daemon.as_deref() == Some("http://127.0.0.1:9")
        ));
        let RetentionCommand::Set(set) = retention(&[
            "set",
            "--runs-max-age",
            "30d",
            "--runs-keep-last",
            "5",
            "--logs-max-bytes",
            "2097152",
            "--notifications-delivered",
            "7d",
            "--notifications-dead",
            "30d",
            "--archive-dir",
            "arch",
            "--interval",
            "1h",
            "--json",
        ])
        .expect("parses") else {
            panic!("not set")
        };
        assert_eq!(
            (
                set.runs_max_age.as_deref(),
                set.runs_keep_last,
                set.logs_max_bytes
            ),
            (Some("30d"), Some(5), Some(2_097_152))
        );
        assert_eq!(
            (
                set.notifications_delivered.as_deref(),
                set.notifications_dead.as_deref(),
                set.interval.as_deref()
            ),
            (Some("7d"), Some("30d"), Some("1h"))
        );
        assert_eq!(
            set.archive_dir.as_deref(),
            Some(std::path::Path::new("arch"))
        );
        assert!(set.remote.json && set.file.is_none());
        assert!(matches!(
            retention(&["set", "--file", "-"]).expect("parses"),
            RetentionCommand::Set(set) if set.file.as_deref() == Some(std::path::Path::new("-"))
        ));
        assert!(matches!(
            retention(&["run", "--archive-dir", "/a", "--json"]).expect("parses"),
            RetentionCommand::Run { archive_dir: Some(dir), remote }
                if dir == std::path::Path::new("/a") && remote.json
        ));
        assert!(matches!(
            retention(&["run"]).expect("parses"),
            RetentionCommand::Run {
                archive_dir: None,
                ..
            }
        ));
        for bad in [
            &[][..],
            &["show", "now"],
            &["set", "--runs-keep-last", "many"],
            &["set", "--logs-max-bytes", "-1"],
            &["set", "--file"],
            &["run", "--archive-dir"],
            &["run", "/a"],
            &["prune"],
        ] {
            let err = retention(bad).expect_err("refused");
            assert_eq!(err.exit_code(), 2, "{bad:?}");
        }
    }

    #[test]
    fn retention_set_help_says_what_is_left_out_is_kept() {
        let err = Cli::try_parse_from(["studio", "retention", "set", "--help"])
            .expect_err("help is printed, not parsed");
        let help = err.to_string();
        assert!(
            help.contains("keeps everything it governs") && help.contains("cannot be mixed"),
            "{help}"
        );
    }

    #[test]
    fn evidence_verify_takes_archives() {
        let verify = |args: &[&str]| -> Result<_, clap::Error> {
            let cli = Cli::try_parse_from(["studio", "evidence", "verify"].iter().chain(args))?;
            match cli.command {
                Command::Evidence {
                    command:
                        EvidenceCommand::Verify {
                            bundle,
                            key,
                            archives,
                        },
                } => Ok((bundle, key, archives)),
                other => panic!("not evidence verify: {other:?}"),
            }
        };
        let (bundle, key, archives) =
            verify(&["b.jsonl", "--archives", "/arch", "--key", "k"]).expect("parses");
        assert_eq!(bundle, std::path::Path::new("b.jsonl"));
        assert_eq!(key.as_deref(), Some(std::path::Path::new("k")));
        assert_eq!(archives.as_deref(), Some(std::path::Path::new("/arch")));
        assert_eq!(verify(&["b.jsonl"]).expect("parses").2, None);
        let err = verify(&["b.jsonl", "--archives"]).expect_err("no dir");
        assert_eq!(err.exit_code(), 2);
    }

    #[test]
    fn schedule_preview_takes_exactly_one_trigger() {
        let cli = Cli::try_parse_from([
            "studio",
            "schedule",
            "preview",
            "--cron",
            "0 * * * *",
            "--tz",
            "UTC",
            "--count",
            "3",
        ])
        .expect("parses");
        let Command::Schedule {
            command: ScheduleCommand::Preview(args),
        } = cli.command
        else {
            panic!("not schedule preview")
        };
        let req = args.into_request();
        assert_eq!(req.trigger, PreviewTrigger::Cron("0 * * * *".into()));
        assert_eq!((req.tz.as_deref(), req.count), (Some("UTC"), Some(3)));
        for bad in [
            &["studio", "schedule", "preview"][..],
            &[
                "studio",
                "schedule",
                "preview",
                "--cron",
                "* * * * *",
                "--every",
                "1m",
            ],
            &[
                "studio", "schedule", "preview", "--every", "1m", "--count", "-1",
            ],
        ] {
            let err = Cli::try_parse_from(bad).expect_err("refused");
            assert_eq!(err.exit_code(), 2, "{bad:?}");
        }
    }

    #[test]
    fn up_flags_become_a_config() {
        let cli = Cli::try_parse_from([
            "studio",
            "--home",
            "/tmp/h",
            "up",
            "--app-addr",
            "0.0.0.0:9000",
            "--daemon-addr",
            "127.0.0.1:0",
            "--public-origin",
            "HTTPS://Studio.Example:443",
        ])
        .expect("parses");
        let home = cli.home();
        let Command::Up(args) = cli.command else {
            panic!("not up")
        };
        let cfg = args.into_config(home, false).expect("valid");
        assert_eq!(cfg.home.root(), std::path::Path::new("/tmp/h"));
        assert_eq!(cfg.app_origin(), "http://127.0.0.1:9000");
        assert_eq!(cfg.app_url(), "https://studio.example");
        assert_eq!(cfg.stop_grace, Duration::from_secs(5));
        assert_eq!(cfg.daemon_lock_wait, Duration::from_secs(15));
        assert_eq!(cfg.log_keep, 5);
    }

    fn worker(args: &[&str]) -> Result<WorkerArgs, clap::Error> {
        let cli = Cli::try_parse_from(["studio", "worker"].iter().chain(args))?;
        let Command::Worker(args) = cli.command else {
            panic!("not worker")
        };
        Ok(args)
    }

    #[test]
    fn worker_with_no_subcommand_runs_the_worker() {
        let args = worker(&[]).expect("parses");
        assert!(args.command.is_none());
        assert_eq!((args.run.capacity, args.run.labels), (2, None));
        let args = worker(&[
            "--capacity",
            "8",
            "--labels",
            "gpu,linux",
            "--worker-home",
            "/w",
        ])
        .expect("parses");
        assert_eq!(args.run.capacity, 8);
        assert_eq!(
            args.run.labels.as_deref(),
            Some(&["gpu".to_owned(), "linux".to_owned()][..])
        );
        assert_eq!(
            args.run.home.worker_home.as_deref(),
            Some(std::path::Path::new("/w"))
        );
        for bad in [
            &["--capacity", "0"][..],
            &["--capacity", "many"],
            &["--capacity", "3", "list"],
            &["--home-of-worker", "/w"],
        ] {
            let err = worker(bad).expect_err("refused");
            assert_eq!(err.exit_code(), 2, "{bad:?}");
        }
    }

    /// `--home` is noted when it is on the command line, before or after the subcommand;
    /// what it names on a worker's side is `workers::Homes`' business.
    #[test]
    fn worker_join_parses_and_notes_a_home_on_the_command_line() {
        let cli = Cli::try_from_args([
            "studio",
            "worker",
            "join",
            "--server",
            "studio.example:8767",
            "--token",
            "T",
            "--name",
            "gpu-box",
            "--worker-home",
            "/w",
            "--home",
            "/studio",
        ])
        .expect("parses");
        assert_eq!(cli.home.as_deref(), Some(std::path::Path::new("/studio")));
        assert!(cli.home_on_command_line);
        for args in [
            &["studio", "--home", "/w", "worker", "check"][..],
            &["studio", "worker", "allow", "list", "--home", "/w"],
        ] {
            let parsed = Cli::try_from_args(args).expect("parses");
            assert!(parsed.home_on_command_line, "{args:?}");
        }
        let parsed = Cli::try_from_args(["studio", "worker", "check"]).expect("parses");
        assert!(
            !parsed.home_on_command_line,
            "STUDIO_HOME is not the command line"
        );
        let Command::Worker(WorkerArgs {
            command: Some(WorkerCommand::Join(join)),
            ..
        }) = cli.command
        else {
            panic!("not worker join")
        };
        assert_eq!(
            (
                join.server.as_str(),
                join.token.token.as_deref().unwrap_or_default(),
                join.name.as_deref()
            ),
            ("studio.example:8767", "T", Some("gpu-box"))
        );
        assert_eq!(
            join.home.worker_home.as_deref(),
            Some(std::path::Path::new("/w"))
        );
        for bad in [&["join", "--token", "T"][..], &["join", "--server", "h:1"]] {
            assert_eq!(worker(bad).expect_err("refused").exit_code(), 2, "{bad:?}");
        }
    }

    #[test]
    fn worker_tokens_list_revoke_and_allow_parse() {
        let Some(WorkerCommand::Token {
            command:
                WorkerTokenCommand::Create {
                    labels,
                    ttl,
                    remote,
                    ..
                },
        }) = worker(&[
            "token",
            "create",
            "--labels",
            "gpu,linux",
            "--ttl",
            "2d",
            "--json",
        ])
        .expect("parses")
        .command
        else {
            panic!("not token create")
        };
        assert_eq!(
            (labels, ttl.as_deref(), remote.json),
            (vec!["gpu".to_owned(), "linux".to_owned()], Some("2d"), true)
        );
        let Some(WorkerCommand::Token {
            command: WorkerTokenCommand::Create { labels, ttl, .. },
        }) = worker(&["token", "create"]).expect("parses").command
        else {
            panic!("not token create")
        };
        assert!(labels.is_empty() && ttl.is_none());
        assert!(matches!(
            worker(&["list", "--json"]).expect("parses").command,
            Some(WorkerCommand::List { remote }) if remote.json
        ));
        assert!(matches!(
            worker(&["revoke", "0192f3a4"]).expect("parses").command,
            Some(WorkerCommand::Revoke { id, .. }) if id == "0192f3a4"
        ));
        assert!(matches!(
            worker(&["allow", "add", "make", "/usr/bin/git", "--worker-home", "/w"])
                .expect("parses")
                .command,
            Some(WorkerCommand::Allow {
                command: WorkerAllowCommand::Add { entries, home },
            }) if entries == ["make", "/usr/bin/git"]
                && home.worker_home.as_deref() == Some(std::path::Path::new("/w"))
        ));
        assert!(matches!(
            worker(&["allow", "list"]).expect("parses").command,
            Some(WorkerCommand::Allow {
                command: WorkerAllowCommand::List { .. },
            })
        ));
        for bad in [
            &["revoke"][..],
            &["allow", "add"],
            &["allow", "remove"],
            &["token"],
        ] {
            assert_eq!(worker(bad).expect_err("refused").exit_code(), 2, "{bad:?}");
        }
    }

    fn app(args: &[&str]) -> Result<AppCommand, clap::Error> {
        let cli = Cli::try_parse_from(["studio", "app"].iter().chain(args))?;
        let Command::App { command } = cli.command else {
            panic!("not app")
        };
        Ok(command)
    }

    #[test]
    fn app_token_list_revoke_and_join_parse() {
        assert!(matches!(
            app(&["token", "--ttl", "2d", "--json"]).expect("parses"),
            AppCommand::Token { ttl: Some(ttl), remote, out: None } if ttl == "2d" && remote.json
        ));
        assert!(matches!(
            app(&["token"]).expect("parses"),
            AppCommand::Token { ttl: None, remote, out: None } if !remote.json
        ));
        assert!(matches!(
            app(&["list", "--json", "--daemon", "http://127.0.0.1:9"]).expect("parses"),
            AppCommand::List { remote }
                if remote.json && remote.daemon.as_deref() == Some("http://127.0.0.1:9")
        ));
        assert!(matches!(
            app(&["revoke", "0192f3a4"]).expect("parses"),
            AppCommand::Revoke { id, .. } if id == "0192f3a4"
        ));
        let cli = Cli::try_parse_from([
            "studio",
            "app",
            "join",
            "--server",
            "studio.example:8768",
            "--token",
            "T",
            "--name",
            "edge-1",
            "--home",
            "/app-home",
        ])
        .expect("parses");
        assert_eq!(cli.home(), Home::new("/app-home"));
        let Command::App {
            command: AppCommand::Join(join),
        } = cli.command
        else {
            panic!("not app join")
        };
        assert_eq!(
            (
                join.server.as_str(),
                join.token.token.as_deref().unwrap_or_default(),
                join.name.as_deref()
            ),
            ("studio.example:8768", "T", Some("edge-1"))
        );
        for bad in [
            &[][..],
            &["help"],
            &["token", "--ttl"],
            &["list", "extra"],
            &["revoke"],
            &["join", "--token", "T"],
            &["join", "--server", "h:1"],
            &["join", "--server", "h:1", "--token", "T", "--labels", "gpu"],
            &[
                "join",
                "--server",
                "h:1",
                "--token",
                "T",
                "--token-file",
                "f",
            ],
            &["token", "--out", "f", "--json"],
        ] {
            assert_eq!(app(bad).expect_err("refused").exit_code(), 2, "{bad:?}");
        }
    }

    /// A join token read from a file is trimmed; a file that cannot be read is the
    /// user's error, named.
    #[test]
    fn a_join_token_comes_from_the_line_or_a_file() {
        let dir = std::env::temp_dir().join(format!(
            "studio-token-file-{}-{}",
            std::process::id(),
            table::now_ms()
        ));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("token");
        std::fs::write(&file, "  studio-join.x.y\n").expect("write");
        let from = |token: Option<&str>, file: Option<&std::path::Path>| JoinTokenArg {
            token: token.map(str::to_owned),
            token_file: file.map(std::path::Path::to_path_buf),
        };
        assert_eq!(from(Some(" T "), None).read().expect("line"), "T");
        assert_eq!(
            from(None, Some(&file)).read().expect("file"),
            "studio-join.x.y"
        );
        let missing = dir.join("missing");
        let err = from(None, Some(&missing)).read().expect_err("unreadable");
        assert_eq!(err.exit_code(), 2);
        assert!(err.to_string().contains("--token-file"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn secret(args: &[&str]) -> Result<SecretCommand, clap::Error> {
        let cli = Cli::try_parse_from(["studio", "secret"].iter().chain(args))?;
        let Command::Secret { command } = cli.command else {
            panic!("not secret")
        };
        Ok(command)
    }

    /// A value is never an argument: `set` takes the name alone, and reads stdin.
    #[test]
    fn secret_set_list_and_delete_parse() {
        assert!(matches!(
            secret(&["set", "github", "--json", "--daemon", "http://127.0.0.1:9"])
                .expect("parses"),
            SecretCommand::Set { name, remote }
                if name == "github"
                    && remote.json
                    && remote.daemon.as_deref() == Some("http://127.0.0.1:9")
        ));
        assert!(matches!(
            secret(&["list"]).expect("parses"),
            SecretCommand::List { remote } if !remote.json
        ));
        assert!(matches!(
            secret(&["list", "--json"]).expect("parses"),
            SecretCommand::List { remote } if remote.json
        ));
        assert!(matches!(
            secret(&["delete", "slack.hook"]).expect("parses"),
            SecretCommand::Delete { name, remote } if name == "slack.hook" && !remote.json
        ));
        for bad in [
            &[][..],
            &["set"],
            &["set", "github", "hunter22"],
            &["set", "github", "--value", "hunter22"],
            &["delete"],
            &["list", "github"],
        ] {
            let err = secret(bad).expect_err("refused");
            assert_eq!(err.exit_code(), 2, "{bad:?}");
        }
    }

    fn notify(args: &[&str]) -> Result<NotifyCommand, clap::Error> {
        let cli = Cli::try_parse_from(["studio", "notify"].iter().chain(args))?;
        let Command::Notify { command } = cli.command else {
            panic!("not notify")
        };
        Ok(command)
    }

    fn endpoint(args: &[&str]) -> Result<EndpointCommand, clap::Error> {
        match notify(&[&["endpoint"][..], args].concat())? {
            NotifyCommand::Endpoint { command } => Ok(command),
            other => panic!("not notify endpoint: {other:?}"),
        }
    }

    #[test]
    fn notify_endpoint_add_list_delete_and_test_parse() {
        assert!(matches!(
            endpoint(&["add", "ops", "https://hooks.example/studio"]).expect("parses"),
            EndpointCommand::Add { name, url, format: FormatArg::Json, remote }
                if name == "ops" && url == "https://hooks.example/studio" && !remote.json
        ));
        assert!(matches!(
            endpoint(&["add", "chat", "https://hooks.slack.com/x", "--format", "slack", "--json"])
                .expect("parses"),
            EndpointCommand::Add { format: FormatArg::Slack, remote, .. } if remote.json
        ));
        assert_eq!(
            studio_api::EndpointFormat::from(FormatArg::Slack),
            studio_api::EndpointFormat::Slack
        );
        assert!(matches!(
            endpoint(&["list", "--json"]).expect("parses"),
            EndpointCommand::List { remote } if remote.json
        ));
        assert!(matches!(
            endpoint(&["delete", "ops", "--daemon", "http://127.0.0.1:9"]).expect("parses"),
            EndpointCommand::Delete { name, remote }
                if name == "ops" && remote.daemon.as_deref() == Some("http://127.0.0.1:9")
        ));
        assert!(matches!(
            endpoint(&["test", "ops"]).expect("parses"),
            EndpointCommand::Test { name, wait: false, .. } if name == "ops"
        ));
        assert!(matches!(
            endpoint(&["test", "ops", "--wait"]).expect("parses"),
            EndpointCommand::Test { wait: true, .. }
        ));
        for bad in [
            &[][..],
            &["add", "ops"],
            &["add", "ops", "https://h", "--format", "xml"],
            &["add", "ops", "https://h", "extra"],
            &["delete"],
            &["test"],
            &["list", "ops"],
        ] {
            let err = endpoint(bad).expect_err("refused");
            assert_eq!(err.exit_code(), 2, "{bad:?}");
        }
    }

    #[test]
    fn notify_deliveries_takes_its_filters() {
        let NotifyCommand::Deliveries(args) = notify(&["deliveries"]).expect("parses") else {
            panic!("not deliveries")
        };
        assert_eq!(
            (
                args.run,
                args.endpoint,
                args.status,
                args.limit,
                args.remote.json
            ),
            (None, None, None, 50, false)
        );
        let NotifyCommand::Deliveries(args) = notify(&[
            "deliveries",
            "--run",
            "0190aa",
            "--endpoint",
            "ops",
            "--status",
            "dead",
            "--limit",
            "5",
            "--json",
        ])
        .expect("parses") else {
            panic!("not deliveries")
        };
        assert_eq!(args.run.as_deref(), Some("0190aa"));
        assert_eq!(args.endpoint.as_deref(), Some("ops"));
        assert_eq!(args.status.map(DeliveryStatusArg::as_str), Some("dead"));
        assert_eq!((args.limit, args.remote.json), (5, true));
        for bad in [
            &["deliveries", "--status", "failed"][..],
            &["deliveries", "--limit", "0"],
            &["deliveries", "--limit", "501"],
            &["deliveries", "ops"],
        ] {
            let err = notify(bad).expect_err("refused");
            assert_eq!(err.exit_code(), 2, "{bad:?}");
        }
    }

    #[test]
    fn task_submit_takes_secrets_by_name() {
        let cli = Cli::try_parse_from([
            "studio",
            "task",
            "submit",
            "--secret",
            "GITHUB_TOKEN=github",
            "--env",
            "MODE=full",
            "--secret",
            "NPM_TOKEN=npm",
            "--",
            "make",
            "release",
        ])
        .expect("parses");
        let Command::Task {
            command: TaskCommand::Submit(args),
        } = cli.command
        else {
            panic!("not task submit")
        };
        assert_eq!(args.secret, ["GITHUB_TOKEN=github", "NPM_TOKEN=npm"]);
        assert_eq!(args.env, ["MODE=full"]);
        assert_eq!(args.command, ["make", "release"]);
        let err = Cli::try_parse_from(["studio", "task", "submit", "--secret"])
            .expect_err("a flag without its value");
        assert_eq!(err.exit_code(), 2);
    }

    #[test]
    fn an_app_port_of_zero_is_refused() {
        let cli =
            Cli::try_parse_from(["studio", "up", "--app-addr", "127.0.0.1:0"]).expect("parses");
        let home = cli.home();
        let Command::Up(args) = cli.command else {
            panic!("not up")
        };
        assert!(matches!(
            args.into_config(home, false),
            Err(Error::Usage(_))
        ));
    }
}
