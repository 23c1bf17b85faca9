//! Where the tunables come from: flag > environment > defaults file >
//! built-in default.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::Args;
use zinstall_engine::{DefaultsFile, Tunables};

pub use zinstall_core::paths::{DEFAULTS_ENV, DEFAULTS_FILE};

/// Flags that set the engine's knobs, shared by every command that copies.
#[derive(Args, Debug, Clone, Default)]
pub struct TunableArgs {
    /// Worker threads (COPY_THREADS; default 8).
    #[arg(long, value_name = "N")]
    pub threads: Option<String>,
    /// Walker threads reading directories (COPY_WALKERS; default 0: one
    /// per 4 workers, at most one per 4 cores).
    #[arg(long, value_name = "N")]
    pub walkers: Option<String>,
    /// Jobs per batch handed to a worker (COPY_BATCH; default 128).
    #[arg(long, value_name = "N")]
    pub batch: Option<String>,
    /// Read/write buffer per worker in bytes (COPY_BUFSIZE; default
    /// 1048576).
    #[arg(long, value_name = "BYTES")]
    pub bufsize: Option<String>,
    /// When written data starts back to the disk: sync (in runs that
    /// flush at the end), always or never (COPY_WRITEBACK; default sync).
    #[arg(long, value_name = "WHEN")]
    pub writeback: Option<String>,
    /// Defaults file to read instead of /etc/default/zinstall (also
    /// ZINSTALL_DEFAULTS); it must exist (/dev/null: none).
    #[arg(long, value_name = "FILE")]
    pub defaults: Option<PathBuf>,
}

impl TunableArgs {
    /// The defaults file in effect.
    pub fn defaults_path(
        &self,
        env: &impl Fn(&str) -> Option<OsString>,
    ) -> PathBuf {
        if let Some(p) = &self.defaults {
            return p.clone();
        }
        match env(DEFAULTS_ENV) {
            Some(p) if !p.is_empty() => PathBuf::from(p),
            _ => PathBuf::from(DEFAULTS_FILE),
        }
    }

    /// Resolves the tunables with `env` as the environment.
    pub fn resolve_with(
        &self,
        env: impl Fn(&str) -> Option<OsString>,
    ) -> zinstall_engine::Result<Tunables> {
        let path = self.defaults_path(&env);
        // A file named, with --defaults or ZINSTALL_DEFAULTS, must be
        // there (/dev/null names none); the system's may be missing:
        // built-in defaults then.
        let file = if path == Path::new(DEFAULTS_FILE) {
            DefaultsFile::load(&path)?
        } else {
            DefaultsFile::load_required(&path)?
        };
        let mut t = Tunables::from_defaults(&file)?;
        t.apply_env(&env)?;
        for (key, flag, v) in [
            ("COPY_THREADS", "--threads", &self.threads),
            ("COPY_WALKERS", "--walkers", &self.walkers),
            ("COPY_BATCH", "--batch", &self.batch),
            ("COPY_BUFSIZE", "--bufsize", &self.bufsize),
            ("COPY_WRITEBACK", "--writeback", &self.writeback),
        ] {
            if let Some(v) = v {
                t.set(key, v, Path::new(flag), 0)?;
            }
        }
        Ok(t)
    }

    /// Resolves the tunables from the process environment.
    pub fn resolve(&self) -> zinstall_engine::Result<Tunables> {
        self.resolve_with(|k| std::env::var_os(k))
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn flag_beats_env_beats_file() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("zinstall");
        std::fs::write(&f, "COPY_THREADS=3\nCOPY_BATCH=5\nCOPY_BUFSIZE=8192\n")
            .unwrap();
        let args = TunableArgs {
            threads: Some("2".into()),
            defaults: Some(f.clone()),
            ..Default::default()
        };
        let env = |k: &str| (k == "ZINSTALL_COPY_BATCH").then(|| "7".into());
        let t = args.resolve_with(env).unwrap();
        assert_eq!(
            (t.copy_threads, t.copy_batch, t.copy_bufsize),
            (2, 7, 8192)
        );
    }

    #[test]
    fn env_names_the_defaults_file() {
        let args = TunableArgs::default();
        let env = |k: &str| (k == DEFAULTS_ENV).then(|| "/x/y".into());
        assert_eq!(args.defaults_path(&env), Path::new("/x/y"));
        assert_eq!(args.defaults_path(&|_| None), Path::new(DEFAULTS_FILE));
    }

    #[test]
    fn a_defaults_file_named_by_flag_or_environment_must_exist() {
        let args = TunableArgs {
            defaults: Some("/nonexistent/zinstall".into()),
            ..Default::default()
        };
        let e = args.resolve_with(|_| None).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/zinstall"), "{e}");
        let env = |k: &str| {
            (k == DEFAULTS_ENV).then(|| "/nonexistent/zinstall".into())
        };
        let e = TunableArgs::default().resolve_with(env).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/zinstall"), "{e}");
        // /dev/null names none: the built-in defaults.
        let env = |k: &str| (k == DEFAULTS_ENV).then(|| "/dev/null".into());
        let t = TunableArgs::default().resolve_with(env).unwrap();
        assert_eq!(t, Tunables::default());
    }

    #[test]
    fn bad_flag_value_names_the_flag() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("empty");
        std::fs::write(&f, "").unwrap();
        let args = TunableArgs {
            batch: Some("0".into()),
            defaults: Some(f),
            ..Default::default()
        };
        let e = args.resolve_with(|_| None).unwrap_err();
        assert!(e.to_string().starts_with("--batch: COPY_BATCH=0"), "{e}");
    }
}
