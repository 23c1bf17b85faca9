//! The engine's knobs: worker count, batch size, buffer size.
//!
//! Each has one default, defined here and nowhere else, and the same name
//! in three places: `COPY_THREADS` in `/etc/default/zinstall` and the man
//! page, `ZINSTALL_COPY_THREADS` in the environment, `copy_threads` here.
//! Precedence (the binary applies it) is flag > environment > file >
//! default.

use std::ffi::OsString;
use std::num::{IntErrorKind, ParseIntError};
use std::path::Path;

use crate::defaults::DefaultsFile;
use crate::error::{DefaultsProblem, Error, Result};

/// Worker threads. On a 32-thread machine zone installs were fastest near
/// 8 workers (batches of 128); beyond that workers mostly wait on the
/// walker and on filesystem locks. `zinstall tune` finds a machine's own.
pub const DEFAULT_COPY_THREADS: usize = 8;
/// Jobs per batch handed to a worker. Batching amortises the channel's
/// synchronisation over many small files; 128 was best in the same sweep.
pub const DEFAULT_COPY_BATCH: usize = 128;
/// Bytes per read/write when the kernel cannot copy for us.
/// `std::fs::copy`-sized buffers (8 KiB) cost a system call pair per 8 KiB;
/// 1 MiB made zone installs several times faster.
pub const DEFAULT_COPY_BUFSIZE: usize = 1 << 20;

/// The accepted range of each knob: (key, min, max).
const LIMITS: [(&str, u64, u64); 3] = [
    ("COPY_THREADS", 1, 1024),
    // 128 was best; past 65536 a batch amortises nothing more and only
    // holds work back from idle workers.
    ("COPY_BATCH", 1, 1 << 16),
    // Under 4 KiB a buffer costs more in system calls than it saves in
    // memory. Every worker holds one: at 64 MiB the system calls saved
    // are long negligible (1 MiB was the measured knee), and more would
    // be gigabytes per worker.
    ("COPY_BUFSIZE", 4096, 64 << 20),
];

/// Tunables of one copier run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tunables {
    /// Number of worker threads (`COPY_THREADS`).
    pub copy_threads: usize,
    /// Jobs per batch (`COPY_BATCH`).
    pub copy_batch: usize,
    /// Read/write buffer size in bytes, one buffer per worker
    /// (`COPY_BUFSIZE`).
    pub copy_bufsize: usize,
}

impl Default for Tunables {
    fn default() -> Self {
        Tunables {
            copy_threads: DEFAULT_COPY_THREADS,
            copy_batch: DEFAULT_COPY_BATCH,
            copy_bufsize: DEFAULT_COPY_BUFSIZE,
        }
    }
}

impl Tunables {
    /// The keys understood in a defaults file, in order.
    pub const KEYS: [&'static str; 3] =
        ["COPY_THREADS", "COPY_BATCH", "COPY_BUFSIZE"];

    /// Defaults overridden by the settings of `file`.
    pub fn from_defaults(file: &DefaultsFile) -> Result<Self> {
        let mut t = Tunables::default();
        for key in Self::KEYS {
            if let Some(s) = file.get(key) {
                t.set(key, &s.value, file.path(), s.line)?;
            }
        }
        Ok(t)
    }

    /// Loads `path` (missing means defaults) and applies it.
    pub fn load(path: &Path) -> Result<Self> {
        Self::from_defaults(&DefaultsFile::load(path)?)
    }

    /// Applies `ZINSTALL_<KEY>` variables found through `lookup`, so that
    /// the caller decides where the environment comes from.
    pub fn apply_env(
        &mut self,
        lookup: impl Fn(&str) -> Option<OsString>,
    ) -> Result<()> {
        for key in Self::KEYS {
            let var = format!("ZINSTALL_{key}");
            if let Some(v) = lookup(&var) {
                let v = v.to_string_lossy();
                self.set(key, &v, Path::new(&var), 0)?;
            }
        }
        Ok(())
    }

    /// Sets one knob from its text, checking its range. `origin` and
    /// `line` say where the text came from, for the error.
    pub fn set(
        &mut self,
        key: &str,
        text: &str,
        origin: &Path,
        line: usize,
    ) -> Result<()> {
        let (_, min, max) = LIMITS
            .iter()
            .find(|(k, _, _)| *k == key)
            .copied()
            .unwrap_or((key, 0, u64::MAX));
        let err = |problem| Error::Defaults {
            file: origin.to_path_buf(),
            line,
            key: key.to_string(),
            value: text.to_string(),
            problem,
        };
        let n: u64 = text.trim().parse().map_err(|e: ParseIntError| {
            // Digits past u64 are a number, just far out of range.
            err(match e.kind() {
                IntErrorKind::PosOverflow => {
                    DefaultsProblem::OutOfRange { min, max }
                }
                _ => DefaultsProblem::NotANumber,
            })
        })?;
        if n < min || n > max {
            return Err(err(DefaultsProblem::OutOfRange { min, max }));
        }
        let n = n as usize;
        match key {
            "COPY_THREADS" => self.copy_threads = n,
            "COPY_BATCH" => self.copy_batch = n,
            "COPY_BUFSIZE" => self.copy_bufsize = n,
            _ => {}
        }
        Ok(())
    }

    /// Checks that every knob is in range (for values set directly).
    pub fn validate(&self) -> Result<()> {
        let mut copy = *self;
        for (key, v) in Self::KEYS.iter().zip([
            self.copy_threads,
            self.copy_batch,
            self.copy_bufsize,
        ]) {
            copy.set(key, &v.to_string(), Path::new("tunables"), 0)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod test {
    use super::*;

    fn file(s: &str) -> Result<Tunables> {
        let f = DefaultsFile::parse(Path::new("/d"), s.as_bytes())?;
        Tunables::from_defaults(&f)
    }

    #[test]
    fn defaults_then_file_then_env() {
        let mut t = file("COPY_THREADS=3\n").unwrap();
        assert_eq!(t.copy_threads, 3);
        assert_eq!(t.copy_batch, DEFAULT_COPY_BATCH);
        t.apply_env(|k| (k == "ZINSTALL_COPY_BATCH").then(|| "9".into()))
            .unwrap();
        assert_eq!((t.copy_threads, t.copy_batch), (3, 9));
    }

    #[test]
    fn out_of_range_and_non_numbers_are_errors() {
        for bad in [
            "COPY_THREADS=0\n",
            "COPY_BATCH=0\n",
            "COPY_BUFSIZE=4095\n",
            "COPY_THREADS=eight\n",
            "COPY_THREADS=-1\n",
            "COPY_THREADS=1025\n",
            "COPY_BATCH=65537\n",
            "COPY_BUFSIZE=67108865\n",
            "COPY_BUFSIZE=1073741824\n",
            "COPY_BUFSIZE=18446744073709551615\n",
            "COPY_BUFSIZE=99999999999999999999999999\n",
            "COPY_THREADS=\n",
            "COPY_THREADS=1e3\n",
        ] {
            let e = file(bad).unwrap_err();
            let s = e.to_string();
            assert!(s.starts_with("/d:1: COPY_"), "{bad}: {s}");
        }
        let mut t = Tunables::default();
        let e = t
            .apply_env(|k| (k == "ZINSTALL_COPY_THREADS").then(|| "x".into()))
            .unwrap_err();
        assert!(e.to_string().contains("ZINSTALL_COPY_THREADS"), "{e}");
    }

    #[test]
    fn errors_name_file_line_key_and_value() {
        let e = file("# c\nCOPY_BATCH=2\nCOPY_BUFSIZE=99999999999999999999\n")
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "/d:3: COPY_BUFSIZE=99999999999999999999: out of range (must be \
             4096 to 67108864)"
        );
        let t = file(
            "COPY_THREADS=1024\nCOPY_BATCH=65536\nCOPY_BUFSIZE=67108864\n",
        )
        .unwrap();
        assert_eq!(
            (t.copy_threads, t.copy_batch, t.copy_bufsize),
            (1024, 65536, 64 << 20)
        );
        t.validate().unwrap();
    }

    #[test]
    fn unknown_keys_are_left_alone() {
        assert_eq!(file("OTHER=1\n").unwrap(), Tunables::default());
    }
}
