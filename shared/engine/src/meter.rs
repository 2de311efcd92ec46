//! How far a long read has come: the scan adds the bytes it consumed to a
//! [`Meter`] that another thread (the pipeline's progress file)
//! reads. The engine only counts; it writes nothing.

use std::io::{BufRead, Read};
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes of the source read so far.
#[derive(Debug, Default)]
pub struct Meter(AtomicU64);

impl Meter {
    pub fn add(&self, bytes: u64) {
        self.0.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn read(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A reader that adds what is consumed from it to a [`Meter`].
pub(crate) struct Metered<'a, R> {
    inner: R,
    meter: &'a Meter,
}

impl<'a, R> Metered<'a, R> {
    pub fn new(inner: R, meter: &'a Meter) -> Metered<'a, R> {
        Metered { inner, meter }
    }
}

impl<R: Read> Read for Metered<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.meter.add(n as u64);
        Ok(n)
    }
}

impl<R: BufRead> BufRead for Metered<'_, R> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        self.inner.fill_buf()
    }

    fn consume(&mut self, amount: usize) {
        self.meter.add(amount as u64);
        self.inner.consume(amount);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_what_is_consumed_by_lines_and_by_reads() {
        let meter = Meter::default();
        let mut r = Metered::new(&b"one\ntwo\nthree"[..], &meter);
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        assert_eq!(meter.read(), 4);
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).unwrap();
        assert_eq!(meter.read(), 13);
    }
}
