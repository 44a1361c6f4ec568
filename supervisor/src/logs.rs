//! Children's output on disk: `logs/<child>.log` with size-based rotation, the bounded
//! line reader that drains a child's pipes, and the follower behind `studio logs -f`.

use std::{
    fs::{self, File, OpenOptions},
    io::{self, Seek, SeekFrom, Write},
    os::unix::fs::{MetadataExt, OpenOptionsExt},
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// Longest line kept whole; a longer one is split, so a child printing without newlines
/// cannot make the supervisor buffer without bound.
pub(crate) const MAX_LINE: usize = 64 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rotation {
    /// Rotate before a write would take the file past this size.
    pub(crate) max_bytes: u64,
    /// How many rotated files (`.1` … `.keep`) to keep.
    pub(crate) keep: u32,
}

impl Default for Rotation {
    fn default() -> Self {
        Self {
            max_bytes: 10 * 1024 * 1024,
            keep: 5,
        }
    }
}

/// An append-only log file that rotates itself: `x.log` → `x.log.1` → … → `x.log.<keep>`.
#[derive(Debug)]
pub(crate) struct RotatingLog {
    path: PathBuf,
    rotation: Rotation,
    file: File,
    size: u64,
}

/// One log shared by the stdout and stderr drains of every run of a child.
pub(crate) type SharedLog = Arc<Mutex<RotatingLog>>;

fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

fn rotated(path: &Path, n: u32) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

impl RotatingLog {
    pub(crate) fn open(path: impl Into<PathBuf>, rotation: Rotation) -> io::Result<Self> {
        let path = path.into();
        let file = open_append(&path)?;
        let size = file.metadata()?.len();
        Ok(Self {
            path,
            rotation,
            file,
            size,
        })
    }

    pub(crate) fn shared(self) -> SharedLog {
        Arc::new(Mutex::new(self))
    }

    /// Appends one line (a newline is added).
    pub(crate) fn write_line(&mut self, line: &[u8]) -> io::Result<()> {
        let len = line.len() as u64 + 1;
        if self.size > 0 && self.size + len > self.rotation.max_bytes {
            self.rotate()?;
        }
        let mut buf = Vec::with_capacity(line.len() + 1);
        buf.extend_from_slice(line);
        buf.push(b'\n');
        // One write per line, so the two streams' lines never interleave mid-line.
        self.file.write_all(&buf)?;
        self.size += len;
        Ok(())
    }

    fn rotate(&mut self) -> io::Result<()> {
        if self.rotation.keep == 0 {
            // O_APPEND writes land at the new end, so truncating in place is enough.
            self.file.set_len(0)?;
            self.size = 0;
            return Ok(());
        }
        let _ = fs::remove_file(rotated(&self.path, self.rotation.keep));
        for n in (1..self.rotation.keep).rev() {
            match fs::rename(rotated(&self.path, n), rotated(&self.path, n + 1)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        fs::rename(&self.path, rotated(&self.path, 1))?;
        self.file = open_append(&self.path)?;
        self.size = 0;
        Ok(())
    }
}

/// Writes a line to a shared log; a failing disk is reported, never fatal to the child.
pub(crate) fn append(log: &SharedLog, line: &[u8]) {
    let result = match log.lock() {
        Ok(mut log) => log.write_line(line),
        Err(poisoned) => poisoned.into_inner().write_line(line),
    };
    if let Err(error) = result {
        tracing::warn!(%error, "could not write a child's log line");
    }
}

/// The next line of `reader` without its newline, split at `max` bytes; `None` at EOF.
pub(crate) async fn read_line_bounded<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> io::Result<Option<()>> {
    buf.clear();
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok((!buf.is_empty()).then_some(()));
        }
        let room = max - buf.len();
        let window = &available[..available.len().min(room)];
        if let Some(i) = window.iter().position(|b| *b == b'\n') {
            buf.extend_from_slice(&window[..i]);
            reader.consume(i + 1);
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
            return Ok(Some(()));
        }
        let taken = window.len();
        buf.extend_from_slice(window);
        reader.consume(taken);
        if buf.len() >= max {
            return Ok(Some(()));
        }
    }
}

/// Reads a log file from the start and keeps reading as it grows, across rotation
/// (the path naming a new file) and truncation.
#[derive(Debug)]
pub(crate) struct Follower {
    path: PathBuf,
    open: Option<(File, u64)>,
}

impl Follower {
    pub(crate) fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            open: None,
        }
    }

    /// Copies whatever is new to `out`; call it again to follow.
    pub(crate) fn poll(&mut self, out: &mut impl Write) -> io::Result<()> {
        if self.open.is_none() {
            match File::open(&self.path) {
                Ok(f) => {
                    let ino = f.metadata()?.ino();
                    self.open = Some((f, ino));
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        let Some((file, ino)) = self.open.as_mut() else {
            return Ok(());
        };
        let pos = file.stream_position()?;
        if file.metadata()?.len() < pos {
            // Truncated in place: start again from its beginning.
            file.seek(SeekFrom::Start(0))?;
        }
        io::copy(file, out)?;
        let rotated = match fs::metadata(&self.path) {
            Ok(m) => m.ino() != *ino,
            Err(e) if e.kind() == io::ErrorKind::NotFound => true,
            Err(e) => return Err(e),
        };
        if rotated {
            // The old file was fully read above; the next poll opens the new one.
            self.open = None;
            return self.poll(out);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::TestDir;

    fn read(path: &Path) -> String {
        fs::read_to_string(path).unwrap_or_default()
    }

    #[test]
    fn rotates_by_size_and_keeps_n_files() {
        let dir = TestDir::new("rotate");
        let path = dir.path().join("app.log");
        let mut log = RotatingLog::open(
            &path,
            Rotation {
                max_bytes: 20,
                keep: 2,
            },
        )
        .expect("open");
        // 10 bytes a line: two lines fill a file.
        for i in 0..7 {
            log.write_line(format!("line {i:04}").as_bytes())
                .expect("write");
        }
        assert_eq!(read(&path), "line 0006\n");
        assert_eq!(read(&rotated(&path, 1)), "line 0004\nline 0005\n");
        assert_eq!(read(&rotated(&path, 2)), "line 0002\nline 0003\n");
        assert!(
            !rotated(&path, 3).exists(),
            "only two rotated files are kept"
        );
        for p in [path.clone(), rotated(&path, 1), rotated(&path, 2)] {
            let len = fs::metadata(&p).expect("meta").len();
            assert!(len <= 20, "{} is {len} bytes", p.display());
        }
    }

    #[test]
    fn reopening_appends_and_counts_the_existing_size() {
        let dir = TestDir::new("reopen");
        let path = dir.path().join("daemon.log");
        let rotation = Rotation {
            max_bytes: 15,
            keep: 5,
        };
        RotatingLog::open(&path, rotation)
            .expect("open")
            .write_line(b"first 0")
            .expect("write");
        let mut again = RotatingLog::open(&path, rotation).expect("reopen");
        again.write_line(b"second").expect("write");
        assert_eq!(read(&path), "first 0\nsecond\n");
        again.write_line(b"third").expect("write");
        assert_eq!(read(&path), "third\n");
        assert_eq!(read(&rotated(&path, 1)), "first 0\nsecond\n");
    }

    #[test]
    fn keep_zero_truncates() {
        let dir = TestDir::new("keep0");
        let path = dir.path().join("a.log");
        let mut log = RotatingLog::open(
            &path,
            Rotation {
                max_bytes: 8,
                keep: 0,
            },
        )
        .expect("open");
        log.write_line(b"aaaa").expect("write");
        log.write_line(b"bbbb").expect("write");
        assert_eq!(read(&path), "bbbb\n");
        assert!(!rotated(&path, 1).exists());
    }

    #[tokio::test]
    async fn long_lines_are_split_and_crlf_trimmed() {
        let input: &[u8] = b"abcdefghij\nshort\r\nlast";
        let mut reader = tokio::io::BufReader::with_capacity(3, input);
        let mut buf = Vec::new();
        let mut lines = Vec::new();
        while read_line_bounded(&mut reader, &mut buf, 4)
            .await
            .expect("read")
            .is_some()
        {
            lines.push(String::from_utf8_lossy(&buf).into_owned());
        }
        assert_eq!(lines, ["abcd", "efgh", "ij", "shor", "t", "last"]);
    }

    #[test]
    fn follower_reads_across_rotation() {
        let dir = TestDir::new("follow");
        let path = dir.path().join("app.log");
        let mut follower = Follower::new(&path);
        let mut out = Vec::new();
        follower.poll(&mut out).expect("missing file is fine");
        assert!(out.is_empty());
        let mut log = RotatingLog::open(
            &path,
            Rotation {
                max_bytes: 12,
                keep: 1,
            },
        )
        .expect("open");
        log.write_line(b"one").expect("write");
        follower.poll(&mut out).expect("poll");
        log.write_line(b"two").expect("write");
        log.write_line(b"three").expect("write");
        // "three" rotated the file: "one two" moved to .1, "three" starts the new file.
        log.write_line(b"four").expect("write");
        follower.poll(&mut out).expect("poll");
        assert_eq!(String::from_utf8_lossy(&out), "one\ntwo\nthree\nfour\n");
    }
}
