//! Counting and hashing what passes through a reader or a writer, so that a member's
//! size and SHA-256 are known as it streams, with no second pass and no whole copy.

use std::io::{self, Read, Write};

use ring::digest::{Context, SHA256};
use studio_contract::secret::hex;

/// A writer that counts and hashes every byte it passes on.
pub(crate) struct HashingWriter<W> {
    inner: W,
    ctx: Context,
    bytes: u64,
}

impl<W: Write> HashingWriter<W> {
    pub(crate) fn new(inner: W) -> Self {
        Self {
            inner,
            ctx: Context::new(&SHA256),
            bytes: 0,
        }
    }

    /// The bytes written and their SHA-256, in lowercase hex.
    pub(crate) fn finish(self) -> (u64, String) {
        (self.bytes, hex(self.ctx.finish().as_ref()))
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.ctx.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// A reader that counts and hashes every byte it yields, and remembers the first error
/// of the reader it wraps (so that a caller can tell it from one of its own).
pub(crate) struct HashingReader<R> {
    inner: R,
    ctx: Context,
    bytes: u64,
    failed: Option<String>,
}

impl<R: Read> HashingReader<R> {
    pub(crate) fn new(inner: R) -> Self {
        Self {
            inner,
            ctx: Context::new(&SHA256),
            bytes: 0,
            failed: None,
        }
    }

    /// The first error the wrapped reader returned, if any.
    pub(crate) fn failed(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// The bytes read and their SHA-256, in lowercase hex.
    pub(crate) fn finish(self) -> (u64, String) {
        (self.bytes, hex(self.ctx.finish().as_ref()))
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.inner.read(buf) {
            Ok(n) => {
                self.ctx.update(&buf[..n]);
                self.bytes += n as u64;
                Ok(n)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Err(e),
            Err(e) => {
                self.failed.get_or_insert_with(|| e.to_string());
                Err(e)
            }
        }
    }
}
