//! A decompression stage: a stream read (and decompressed) ahead on a
//! thread of its own, handed over in chunks through a bounded queue.
//!
//! Decompressing is most of the work of reading a compressed archive:
//! zstd gives about 1 GB/s on one core, gzip less. Done in the thread
//! that also parses the tar and dispatches its members, it adds its
//! whole time to the unpack; on its own thread it overlaps with the
//! parsing, the workers' writes and the disk, and the reader only waits
//! when the decompressor falls behind.
//!
//! The thread is scoped ([`std::thread::scope`]), so the stream may
//! borrow (an OCI blob read through its digest check). Chunks go back to
//! the thread to be refilled, so the stage holds at most `DEPTH + 2`
//! chunks whatever the stream's length. A reader that stops early drops
//! the queue, and the thread stops at its next chunk.

use std::io::{self, Read};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::thread::{self, Scope, ScopedJoinHandle};

/// Bytes per chunk: enough that the handover (a channel send, some
/// 8,000 a gigabyte) costs nothing next to the decompression, little
/// enough to stay in a core's cache between the two threads.
pub const CHUNK: usize = 128 << 10;
/// Chunks queued ahead of the reader: with the two being filled and
/// read, at most 1.25 MiB in flight whatever the stream.
pub const DEPTH: usize = 8;

/// What the decompressing thread hands over.
enum Msg {
    Data(Vec<u8>),
    /// The stream ended: no more data.
    End,
    /// Reading failed; the error as the stream gave it.
    Failed(io::Error),
}

/// The reading end of the stage: what the thread read, in order.
pub struct Ahead {
    rx: Receiver<Msg>,
    back: Sender<Vec<u8>>,
    chunk: Vec<u8>,
    pos: usize,
    ended: bool,
}

/// Starts reading `r` ahead on a thread named `name` in `scope`. The
/// thread hands `r` back when it stops (at the stream's end, an error,
/// or once the [`Ahead`] is dropped): what it kept count of (a digest of
/// what it read) is the caller's again once joined.
pub fn read_ahead<'scope, R>(
    scope: &'scope Scope<'scope, '_>,
    name: &str,
    mut r: R,
) -> io::Result<(Ahead, ScopedJoinHandle<'scope, R>)>
where
    R: Read + Send + 'scope,
{
    let (tx, rx) = mpsc::sync_channel::<Msg>(DEPTH);
    let (back, returned) = mpsc::channel::<Vec<u8>>();
    let handle = thread::Builder::new().name(name.to_string()).spawn_scoped(
        scope,
        move || {
            fill(&mut r, &tx, &returned);
            r
        },
    )?;
    let ahead = Ahead {
        rx,
        back,
        chunk: Vec::new(),
        pos: 0,
        ended: false,
    };
    Ok((ahead, handle))
}

/// The thread: reads chunk after chunk until the end, an error, or a
/// reader that went away.
fn fill(r: &mut impl Read, tx: &SyncSender<Msg>, returned: &Receiver<Vec<u8>>) {
    loop {
        let mut buf = returned.try_recv().unwrap_or_default();
        buf.resize(CHUNK, 0);
        let n = match crate::compress::read_up_to(r, &mut buf) {
            Ok(n) => n,
            Err(e) => {
                let _gone = tx.send(Msg::Failed(e));
                return;
            }
        };
        if n == 0 {
            let _gone = tx.send(Msg::End);
            return;
        }
        buf.truncate(n);
        if tx.send(Msg::Data(buf)).is_err() {
            return;
        }
    }
}

impl Read for Ahead {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.chunk.len() {
            if self.ended || buf.is_empty() {
                return Ok(0);
            }
            let used = std::mem::take(&mut self.chunk);
            if used.capacity() > 0 {
                let _gone = self.back.send(used);
            }
            self.pos = 0;
            match self.rx.recv() {
                Ok(Msg::Data(d)) => self.chunk = d,
                Ok(Msg::End) => self.ended = true,
                Ok(Msg::Failed(e)) => {
                    self.ended = true;
                    return Err(e);
                }
                // Gone without a word: the thread panicked. The stream is
                // not known to have ended, so it must not look as if.
                Err(_) => {
                    self.ended = true;
                    return Err(io::Error::other(
                        "the decompressing thread stopped before the stream's end",
                    ));
                }
            }
        }
        let n = buf.len().min(self.chunk.len() - self.pos);
        buf[..n].copy_from_slice(&self.chunk[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

#[cfg(test)]
mod test {
    use super::*;

    /// A reader giving `data` a few bytes at a time, then failing.
    struct Trickle<'a> {
        data: &'a [u8],
        fail: bool,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.data.is_empty() {
                return if self.fail {
                    Err(io::Error::new(io::ErrorKind::InvalidData, "bad"))
                } else {
                    Ok(0)
                };
            }
            let n = buf.len().min(self.data.len()).min(1000);
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 31 % 251) as u8).collect()
    }

    #[test]
    fn hands_over_every_byte_in_order() {
        // Several chunks and a partial last one, read in odd sizes.
        let data = pattern(CHUNK * (DEPTH + 3) + 12_345);
        let got = thread::scope(|s| {
            let (mut a, _) = read_ahead(
                s,
                "test",
                Trickle {
                    data: &data,
                    fail: false,
                },
            )
            .unwrap();
            let mut got = Vec::new();
            let mut buf = vec![0u8; 7777];
            loop {
                let n = a.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
            }
            got
        });
        assert_eq!(got.len(), data.len());
        assert!(got == data);
    }

    #[test]
    fn an_error_reaches_the_reader_after_the_data_before_it() {
        let data = pattern(CHUNK + 10);
        thread::scope(|s| {
            let (mut a, _) = read_ahead(
                s,
                "test",
                Trickle {
                    data: &data,
                    fail: true,
                },
            )
            .unwrap();
            let mut got = Vec::new();
            let e = a.read_to_end(&mut got).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData);
            assert_eq!(got.len(), CHUNK, "the full chunk before the error");
            assert!(got[..] == data[..CHUNK]);
        });
    }

    #[test]
    fn a_reader_that_stops_early_stops_the_thread() {
        // An endless stream: the scope can only end if the thread sees
        // the reader go.
        struct Endless;
        impl Read for Endless {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                buf.fill(1);
                Ok(buf.len())
            }
        }
        thread::scope(|s| {
            let (mut a, handle) = read_ahead(s, "test", Endless).unwrap();
            let mut b = [0u8; 10];
            a.read_exact(&mut b).unwrap();
            assert_eq!(b, [1; 10]);
            drop(a);
            // The stream comes back once the thread sees the reader go.
            let _stream: Endless = handle.join().unwrap();
        });
    }

    #[test]
    fn a_panicking_stream_is_an_error_not_an_end() {
        struct Panics;
        impl Read for Panics {
            fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
                panic!("decoder bug");
            }
        }
        let mut seen: Option<io::Result<usize>> = None;
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            thread::scope(|s| {
                let (mut a, _) = read_ahead(s, "test", Panics).unwrap();
                let mut got = Vec::new();
                seen = Some(a.read_to_end(&mut got));
            })
        }));
        // The reader saw an error, never a clean end; the scope then
        // re-raises the thread's panic.
        let e = seen.expect("the reader ran").unwrap_err();
        assert!(e.to_string().contains("stopped before the stream's end"));
        assert!(r.is_err());
    }
}
