//! First-boot scripts, as virt-customize(1) installs them: each script
//! in `/usr/lib/zinstall-firstboot/scripts/NNNN-name`, run in order by
//! a one-shot service at the guest's first boot, then moved aside; the
//! service leaves a marker and disables itself so that it never runs
//! again. A systemd unit on Linux guests, an SMF manifest on illumos
//! zones (a root with `/lib/svc`).

use std::ffi::CString;
use std::os::fd::AsFd;
use std::path::Path;

use zinstall_engine::beneath::{Dir, Root};
use zinstall_engine::{Error as FsError, Op};

use crate::error::ProvisionError;

/// Where the runner and the scripts are, in the guest.
const LIB: &str = "usr/lib/zinstall-firstboot";
/// The unit's name.
const UNIT: &str = "zinstall-firstboot.service";
/// Where an SMF site manifest is imported from at boot.
const SMF_DIR: &str = "var/svc/manifest/site";

/// The runner: each script once, in order, its exit status logged; then
/// the marker, and the service disabled.
const RUNNER: &str = r#"#!/bin/sh
# zinstall's first-boot runner (see zinstall(8), provision --firstboot):
# each script once, in order, then a marker and the service disabled,
# so that it never runs again.
lib=/usr/lib/zinstall-firstboot
state=/var/lib/zinstall-firstboot
mkdir -p "$state/done"
for f in "$lib"/scripts/*; do
    [ -f "$f" ] || continue
    n=${f##*/}
    echo "zinstall-firstboot: running $n"
    if "$f"; then s=0; else s=$?; fi
    echo "zinstall-firstboot: $n exited $s"
    mv -f "$f" "$state/done/$n"
done
: > "$state/ran"
if [ -d /run/systemd/system ]; then
    rm -f /etc/systemd/system/multi-user.target.wants/zinstall-firstboot.service
elif command -v svcadm >/dev/null 2>&1; then
    svcadm disable site/zinstall-firstboot
fi
exit 0
"#;

/// The systemd unit: once, while the marker is missing.
const SYSTEMD_UNIT: &str = "\
[Unit]
Description=zinstall first-boot scripts
Documentation=man:zinstall(8)
Wants=network-online.target
After=network-online.target
ConditionPathExists=!/var/lib/zinstall-firstboot/ran

[Service]
Type=oneshot
ExecStart=/usr/lib/zinstall-firstboot/firstboot.sh
RemainAfterExit=yes
StandardOutput=journal+console
StandardError=journal+console

[Install]
WantedBy=multi-user.target
";

/// The SMF manifest: a transient service after multi-user, enabled.
const SMF_MANIFEST: &str = r#"<?xml version="1.0"?>
<!DOCTYPE service_bundle SYSTEM "/usr/share/lib/xml/dtd/service_bundle.dtd.1">
<!-- zinstall's first-boot scripts (see zinstall(8), provision -firstboot) -->
<service_bundle type="manifest" name="zinstall-firstboot">
  <service name="site/zinstall-firstboot" type="service" version="1">
    <create_default_instance enabled="true"/>
    <single_instance/>
    <dependency name="multi-user" grouping="require_all" restart_on="none" type="service">
      <service_fmri value="svc:/milestone/multi-user:default"/>
    </dependency>
    <exec_method type="method" name="start" exec="/usr/lib/zinstall-firstboot/firstboot.sh" timeout_seconds="0"/>
    <exec_method type="method" name="stop" exec=":true" timeout_seconds="60"/>
    <property_group name="startd" type="framework">
      <propval name="duration" type="astring" value="transient"/>
    </property_group>
    <stability value="Unstable"/>
    <template>
      <common_name>
        <loctext xml:lang="C">zinstall first-boot scripts</loctext>
      </common_name>
    </template>
  </service>
</service_bundle>
"#;

/// Installs `scripts` (name, content) and the service that runs them in
/// the guest at `r`, after any the image already has.
pub(crate) fn install(
    r: &Root,
    scripts: &[(String, Vec<u8>)],
) -> Result<(), ProvisionError> {
    if scripts.is_empty() {
        return Ok(());
    }
    let dir = r.dir(&Path::new(LIB).join("scripts"), Some(0o755))?;
    let mut next = dir.names()?.len() + 1;
    for (name, body) in scripts {
        let mut file = format!("{next:04}-{name}");
        while dir.stat(&file)?.is_some() {
            next += 1;
            file = format!("{next:04}-{name}");
        }
        dir.replace_file(&file, body, 0o755, None)?;
        next += 1;
    }
    let lib = r.dir(Path::new(LIB), None)?;
    lib.replace_file("firstboot.sh", RUNNER.as_bytes(), 0o755, None)?;
    // The image's own marker (it booted once before it was captured)
    // would keep the new scripts from running.
    if let Ok(state) = r.dir(Path::new("var/lib/zinstall-firstboot"), None) {
        state.remove_file("ran")?;
    }
    let illumos = r
        .top()
        .stat("lib")?
        .filter(|f| f.format == libc::S_IFDIR)
        .map(|_| r.dir(Path::new("lib"), None)?.stat("svc"))
        .transpose()?
        .flatten()
        .is_some();
    if illumos {
        let smf = r.dir(Path::new(SMF_DIR), Some(0o755))?;
        smf.replace_file(
            "zinstall-firstboot.xml",
            SMF_MANIFEST.as_bytes(),
            0o444,
            None,
        )?;
    } else {
        let units = r.dir(Path::new("etc/systemd/system"), Some(0o755))?;
        units.replace_file(UNIT, SYSTEMD_UNIT.as_bytes(), 0o644, None)?;
        let wants = r.dir(
            Path::new("etc/systemd/system/multi-user.target.wants"),
            Some(0o755),
        )?;
        link(&wants, UNIT, &format!("/etc/systemd/system/{UNIT}"))?;
    }
    Ok(())
}

/// Makes `name` in `dir` a symlink to `target`, replacing whatever was
/// there (a new link renamed over it, never written through).
pub(crate) fn link(
    dir: &Dir,
    name: &str,
    target: &str,
) -> Result<(), ProvisionError> {
    let shown = dir.path().join(name);
    let c = |s: String| {
        CString::new(s).map_err(|_| {
            FsError::io(
                Op::Symlink,
                &shown,
                std::io::Error::other("a NUL byte in the name"),
            )
        })
    };
    let tmp = c(format!(".{name}.zinstall-{}", std::process::id()))?;
    let (n, t) = (c(name.to_string())?, c(target.to_string())?);
    let _stale = dir.remove_file(&tmp.to_string_lossy());
    crate::sys::symlink_at(dir.as_fd(), &tmp, &t)
        .map_err(|e| FsError::io(Op::Symlink, &shown, e))?;
    crate::sys::rename_at(dir.as_fd(), &tmp, &n)
        .map_err(|e| FsError::io(Op::Rename, &shown, e))?;
    Ok(())
}
