//! lz4, frame after frame, skippable frames skipped and a frame without
//! its end mark read as truncated.

use std::io::{self, BufRead, Read};

use super::input::Peeked;
use super::magic::LZ4;

/// lz4 frames one after another, skippable frames skipped; `lz4_flex`
/// reads each frame and checks its checksums.
pub(super) struct Lz4Frames<R: BufRead> {
    frames: lz4_flex::frame::FrameDecoder<Peeked<R>>,
    /// A frame is being read.
    in_frame: bool,
}

/// A skippable frame's magic, lz4's and zstd's, without its low nibble.
const SKIPPABLE: u32 = 0x184d_2a50;

impl<R: BufRead> Lz4Frames<R> {
    pub(super) fn new(r: R) -> Self {
        Lz4Frames {
            frames: lz4_flex::frame::FrameDecoder::new(Peeked::new(r)),
            in_frame: false,
        }
    }

    /// Between frames: skips skippable frames; false at the end of the
    /// stream, true before an lz4 frame.
    fn next_frame(&mut self) -> io::Result<bool> {
        let input = self.frames.get_mut();
        loop {
            let head = input.peek(8)?;
            if head.is_empty() {
                return Ok(false);
            }
            if head.starts_with(LZ4) {
                return Ok(true);
            }
            if head.len() < 4 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "a frame's magic number is cut off",
                ));
            }
            let magic =
                u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
            if magic & !0xf != SKIPPABLE {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "at byte {}: {magic:#010x} is not an lz4 frame's \
                         magic number",
                        input.taken
                    ),
                ));
            }
            if head.len() < 8 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "a skippable frame's header is cut off",
                ));
            }
            let len = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
            let want = 8 + u64::from(len);
            let got =
                io::copy(&mut input.by_ref().take(want), &mut io::sink())?;
            if got < want {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "a skippable frame is cut off",
                ));
            }
        }
    }
}

impl<R: BufRead> Read for Lz4Frames<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if !self.in_frame {
                if !self.next_frame()? {
                    return Ok(0);
                }
                self.in_frame = true;
            }
            let n = self.frames.read(buf)?;
            if n > 0 {
                return Ok(n);
            }
            // lz4_flex ends a frame at its end mark, having read exactly
            // the frame, but also where the input ends between blocks:
            // only the first is a frame's end.
            if self.frames.get_ref().met_end {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "a frame ends without its end mark",
                ));
            }
            self.in_frame = false;
        }
    }
}
