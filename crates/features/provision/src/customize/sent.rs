//! The customisation as another process sends it: every file the options
//! name already read, by the caller, into the request. `zinstall
//! --daemon` reads the files with the checks a local provision makes
//! ([`resolve`]: the same plan, then its contents), and zinstalld builds
//! its plan from the contents alone ([`plan`]), checked again: it never
//! opens a path a client named.

use std::path::{Path, PathBuf};
use std::time::Duration;

use zinstall_core::foreign::{self, Follow, Kind};

use super::plan::{
    Customization, NewPassword, Secret, SentCopy, Steps, prepare, refuse,
};
use super::run;
use super::spec::{RunStep, SshPublicKey, WriteFile};
use super::wire::{
    CustomizeRequest, GuestRequest, MAX_SENT_FILE, SentFile, SentKeys,
    SentPassword, SentRun, SentScript, SentSecret, SentWrite,
};
use crate::error::ProvisionError;
use crate::options::{CustomizeOptions, DEFAULT_RUN_TIMEOUT, MAX_RUN_TIMEOUT};

/// `what` refused for its size when over [`MAX_SENT_FILE`].
pub(crate) fn check_size(
    option: &'static str,
    path: &Path,
    len: usize,
) -> Result<(), ProvisionError> {
    if len > MAX_SENT_FILE {
        return Err(refuse(
            option,
            &path.to_string_lossy(),
            path,
            format!(
                "{len} bytes: zinstalld is sent files of at most {} KiB \
                 each; run without --daemon, or make it smaller",
                MAX_SENT_FILE >> 10
            ),
        ));
    }
    Ok(())
}

/// The options made into a request for `count` guests named `name`-N:
/// checked and every file they name read as a local provision reads
/// them, then their contents taken; `None` when nothing is asked. A
/// directory to copy in is refused: a request carries files.
pub fn resolve(
    opts: &CustomizeOptions,
    count: usize,
    name: &str,
) -> Result<Option<CustomizeRequest>, ProvisionError> {
    let Some(c) = prepare(opts, count, name)? else {
        return Ok(None);
    };
    let guests = c
        .all()
        .iter()
        .map(guest_request)
        .collect::<Result<_, _>>()?;
    Ok(Some(CustomizeRequest {
        guests,
        run_timeout: opts.run_timeout,
    }))
}

/// One guest's planned steps as sent.
fn guest_request(st: &Steps) -> Result<GuestRequest, ProvisionError> {
    let mut g = GuestRequest::default();
    for ci in &st.copy_in {
        g.copy_in.push(sent_copy(&ci.local, &ci.remote_dir)?);
    }
    g.writes = st
        .writes
        .iter()
        .map(|w| SentWrite {
            path: w.path.clone(),
            content: w.content.clone(),
        })
        .collect();
    g.timezone = st.timezone.clone();
    g.passwords = st
        .passwords
        .iter()
        .map(|p| SentPassword {
            user_option: p.option == "--password",
            user: p.user.clone(),
            secret: match &p.secret {
                Secret::Given(s) => SentSecret::Given(s.clone()),
                Secret::Random => SentSecret::Random,
                Secret::Disabled => SentSecret::Disabled,
            },
            locked: p.locked,
        })
        .collect();
    for (user, keys) in &st.keys {
        let keys: Vec<String> = keys.iter().map(SshPublicKey::line).collect();
        let len = keys.iter().map(|k| k.len() + 1).sum();
        check_size("--ssh-inject", Path::new(user), len)?;
        g.keys.push(SentKeys {
            user: user.clone(),
            keys,
        });
    }
    for (name, script) in &st.firstboot {
        check_size("--firstboot", Path::new(name), script.len())?;
        g.firstboot.push(SentScript {
            name: name.clone(),
            content: script.clone(),
        });
    }
    g.firstboot_commands = st.firstboot_commands.clone();
    for r in &st.run {
        g.run.push(match &r.script {
            Some(script) => {
                check_size("--run", Path::new(&r.shown), script.len())?;
                SentRun::Script(SentScript {
                    name: r.name.clone(),
                    content: script.clone(),
                })
            }
            None => SentRun::Command(r.command.clone()),
        });
    }
    Ok(g)
}

/// A `--copy-in` file read into the request; a directory refused,
/// naming why.
fn sent_copy(
    local: &Path,
    remote_dir: &Path,
) -> Result<SentFile, ProvisionError> {
    use std::os::unix::fs::PermissionsExt;
    const OPT: &str = "--copy-in";
    let shown = local.to_string_lossy();
    let refused = |why: String| refuse(OPT, &shown, local, why);
    let f = foreign::open(local, Follow::Yes)
        .map_err(|e| refused(e.to_string()))?;
    let md = f.metadata().map_err(|e| refused(format!("stat: {e}")))?;
    if md.is_dir() {
        return Err(refused(
            "a directory: zinstalld is sent the contents of regular files \
             only; copy a tar of it in, or run without --daemon"
                .into(),
        ));
    }
    check_size(OPT, local, usize::try_from(md.len()).unwrap_or(usize::MAX))?;
    let content = foreign::read_file(
        &f,
        local,
        Kind::Other {
            what: "a file to copy in",
            cap: MAX_SENT_FILE as u64,
        },
    )
    .map_err(|e| refused(e.to_string()))?;
    Ok(SentFile {
        name: local
            .file_name()
            .map(|b| b.to_string_lossy().into_owned())
            .unwrap_or_default(),
        remote_dir: remote_dir.to_path_buf(),
        mode: md.permissions().mode() & 0o7777,
        content,
    })
}

/// The plan of a request for `count` guests, every value checked again
/// as the options are: what a daemon runs, having opened no file.
pub(crate) fn plan(
    r: &CustomizeRequest,
    count: usize,
) -> Result<Option<Customization>, ProvisionError> {
    if r.guests.is_empty() {
        return Ok(None);
    }
    if r.guests.len() != 1 && r.guests.len() != count {
        return Err(refuse(
            "--customize",
            "",
            "",
            format!(
                "customisation for {} guests, and {count} are to be made: \
                 send one for all or one for each",
                r.guests.len()
            ),
        ));
    }
    let secs = r.run_timeout.unwrap_or(DEFAULT_RUN_TIMEOUT);
    if !(1..=MAX_RUN_TIMEOUT).contains(&secs) {
        return Err(refuse(
            "--run-timeout",
            &secs.to_string(),
            "",
            format!("a timeout is 1 to {MAX_RUN_TIMEOUT} seconds"),
        ));
    }
    let steps = r.guests.iter().map(steps_of).collect::<Result<_, _>>()?;
    Ok(Some(Customization::new(steps, Duration::from_secs(secs))))
}

/// One guest's request checked and made into its steps.
fn steps_of(g: &GuestRequest) -> Result<Steps, ProvisionError> {
    let mut st = Steps::default();
    for f in &g.copy_in {
        st.copy_in_sent.push(checked_copy(f)?);
    }
    for w in &g.writes {
        let v = format!("{}:{}", w.path.to_string_lossy(), w.content);
        let parsed: WriteFile = v.parse().map_err(spec)?;
        st.writes.push(parsed);
    }
    if let Some(tz) = &g.timezone {
        st.timezone = Some(super::plan::timezone(tz)?);
    }
    for p in &g.passwords {
        st.passwords.push(checked_password(p)?);
    }
    for k in &g.keys {
        st.keys.push(checked_keys(k)?);
    }
    for s in &g.firstboot {
        if super::spec::script_name(&s.name) != s.name {
            return Err(refuse(
                "--firstboot",
                &s.name,
                "",
                "a script's name is letters, digits, '.', '_' and '-'",
            ));
        }
        check_size("--firstboot", Path::new(&s.name), s.content.len())?;
        st.firstboot.push((s.name.clone(), s.content.clone()));
    }
    st.firstboot_commands = g.firstboot_commands.clone();
    for r in &g.run {
        st.run.push(checked_run(r)?);
    }
    Ok(st)
}

/// A sent `--copy-in` file checked: its name one path component, its
/// size and its guest directory as the option's are.
fn checked_copy(f: &SentFile) -> Result<SentCopy, ProvisionError> {
    let plain = !f.name.is_empty()
        && f.name != "."
        && f.name != ".."
        && !f.name.contains(['/', '\0']);
    if !plain {
        return Err(refuse(
            "--copy-in",
            &f.name,
            "",
            "a file's name is one path component",
        ));
    }
    check_size("--copy-in", Path::new(&f.name), f.content.len())?;
    let dir = format!("/:{}", f.remote_dir.to_string_lossy());
    // The guest's directory checked as `--copy-in`'s value is.
    let ci: super::spec::CopyIn = dir.parse().map_err(spec)?;
    Ok(SentCopy {
        name: f.name.clone(),
        remote_dir: ci.remote_dir,
        mode: f.mode & 0o7777,
        content: f.content.clone(),
    })
}

/// A sent password checked: its user's name as `--password USER:`
/// checks it, a given secret one line and not empty.
fn checked_password(p: &SentPassword) -> Result<NewPassword, ProvisionError> {
    let option = if p.user_option {
        "--password"
    } else {
        "--root-password"
    };
    // The user's name checked as `--password USER:` checks it.
    let _: super::spec::UserPassword =
        format!("{}:random", p.user).parse().map_err(spec)?;
    let secret = match &p.secret {
        SentSecret::Given(s) if !s.is_empty() && !s.contains('\n') => {
            Secret::Given(s.clone())
        }
        SentSecret::Given(_) => {
            return Err(refuse(
                option,
                &p.user,
                "",
                "an empty password, or one of more than a line",
            ));
        }
        SentSecret::Random => Secret::Random,
        SentSecret::Disabled => Secret::Disabled,
    };
    Ok(NewPassword {
        option,
        user: p.user.clone(),
        secret,
        locked: p.locked,
    })
}

/// A user's sent keys checked as `--ssh-inject USER:string:KEY` checks
/// each; at least one.
fn checked_keys(
    k: &SentKeys,
) -> Result<(String, Vec<SshPublicKey>), ProvisionError> {
    let mut keys = Vec::with_capacity(k.keys.len().min(64));
    for line in &k.keys {
        // Checked as `--ssh-inject USER:string:KEY` is.
        let v = format!("{}:string:{line}", k.user);
        let s: super::spec::SshInject = v.parse().map_err(spec)?;
        if let super::spec::KeySource::String(key) = s.key {
            keys.push(key);
        }
    }
    if keys.is_empty() {
        return Err(refuse("--ssh-inject", &k.user, "", "no key"));
    }
    Ok((k.user.clone(), keys))
}

/// A sent `--run` script or `--run-command` checked and read as a
/// local one is.
fn checked_run(r: &SentRun) -> Result<run::Run, ProvisionError> {
    Ok(match r {
        SentRun::Script(s) => {
            if super::spec::script_name(&s.name) != s.name {
                return Err(refuse(
                    "--run",
                    &s.name,
                    "",
                    "a script's name is letters, digits, '.', '_' and \
                     '-'",
                ));
            }
            check_size("--run", Path::new(&s.name), s.content.len())?;
            run::sent_script(&s.name, s.content.clone())?
        }
        SentRun::Command(c) => {
            if c.trim().is_empty() || c.contains('\0') {
                return Err(refuse(
                    "--run-command",
                    c,
                    "",
                    "a command is a line of shell, not empty and \
                     without a NUL",
                ));
            }
            run::read(&RunStep::Command(c.clone()))?
        }
    })
}

fn spec(e: super::spec::SpecError) -> ProvisionError {
    ProvisionError::Customize {
        option: e.option,
        value: e.value,
        path: PathBuf::new(),
        why: e.why,
    }
}

#[cfg(test)]
mod test {
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    const ED25519: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGUIIneqcKVwnMcEYpp271QRxxyB/8nvI7/wSLl0eF78 alice@host";

    /// The plan a daemon builds from what a client sent, through JSON,
    /// is the plan a local provision builds from the files, `{n}` per
    /// guest included.
    #[test]
    fn the_sent_plan_is_the_local_plan() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("k.pub");
        fs::write(&key, format!("# keys\n{ED25519}\n")).unwrap();
        let pw = dir.path().join("pw");
        fs::write(&pw, "secret\nignored\n").unwrap();
        fs::set_permissions(&pw, fs::Permissions::from_mode(0o600)).unwrap();
        let script = dir.path().join("first boot.sh");
        fs::write(&script, b"#!/bin/sh\n\xff\n").unwrap();
        let opts = CustomizeOptions {
            ssh_inject: vec![format!("root:file:{}", key.display())],
            root_password: Some(format!("locked:file:{}", pw.display())),
            password: vec!["debian:random".into()],
            firstboot: vec![script.clone()],
            firstboot_command: vec!["echo {name}".into()],
            write: vec!["/etc/motd:guest {n}".into()],
            copy_in: Vec::new(),
            timezone: Some("Europe/Berlin".into()),
            run: vec![RunStep::Command("echo {n} > /n".into())],
            run_timeout: Some(30),
        };
        let local = prepare(&opts, 3, "vm").unwrap().unwrap();
        let sent = resolve(&opts, 3, "vm").unwrap().unwrap();
        let wire = serde_json::to_string(&sent).unwrap();
        assert!(!wire.contains(dir.path().to_str().unwrap()), "{wire}");
        let back: CustomizeRequest = serde_json::from_str(&wire).unwrap();
        let planned = plan(&back, 3).unwrap().unwrap();
        assert_eq!(planned.all(), local.all());
        assert_eq!(planned.run_timeout, local.run_timeout);
        assert_eq!(planned.run_timeout, Duration::from_secs(30));
        assert_eq!(planned.all().len(), 3);
        assert_eq!(plan(&back, 4).unwrap_err().path(), Path::new(""));
    }
}
