//! The last N bytes of a stream, cut so the text starts on a UTF-8 character boundary.

use std::collections::VecDeque;

#[derive(Debug)]
pub struct Tail {
    cap: usize,
    buf: VecDeque<u8>,
}

impl Tail {
    pub fn new(cap: usize) -> Self {
        Self {
            cap,
            buf: VecDeque::with_capacity(cap.min(1 << 16)),
        }
    }

    pub fn push(&mut self, chunk: &[u8]) {
        let keep = &chunk[chunk.len().saturating_sub(self.cap)..];
        let overflow = (self.buf.len() + keep.len()).saturating_sub(self.cap);
        self.buf.drain(..overflow);
        self.buf.extend(keep);
    }

    /// The kept bytes as text: leading continuation bytes of a character cut in half are
    /// dropped; any other invalid byte becomes U+FFFD.
    pub fn text(&self) -> String {
        let bytes: Vec<u8> = self.buf.iter().copied().collect();
        let start = bytes
            .iter()
            .take(3)
            .take_while(|b| (**b & 0b1100_0000) == 0b1000_0000)
            .count();
        String::from_utf8_lossy(&bytes[start..]).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_bytes() {
        let mut t = Tail::new(4);
        t.push(b"ab");
        t.push(b"cdef");
        assert_eq!(t.text(), "cdef");
        t.push(b"0123456789");
        assert_eq!(t.text(), "6789");
    }

    #[test]
    fn never_starts_inside_a_character() {
        // "é" is two bytes, "€" three: a 4-byte tail of "a€é" would start inside "€".
        let mut t = Tail::new(4);
        t.push("a€é".as_bytes());
        assert_eq!(t.text(), "é");
        let mut t = Tail::new(5);
        t.push("a€é".as_bytes());
        assert_eq!(t.text(), "€é");
    }
}
