//! `zinstall image composefs DIR --store STORE`: a tree's regular files
//! into a composefs object store and its metadata into an EROFS image,
//! stored there too; prints the image's ID (issue 52's first step: no
//! install or provision writes this form yet).

use std::path::PathBuf;

use clap::Args;

use crate::exit::Exit;

/// Arguments of `zinstall image composefs`.
#[derive(Args, Debug)]
pub struct ComposefsArgs {
    /// The tree.
    pub dir: PathBuf,
    /// The object store: a directory, made if it is not there, whose
    /// `objects/XX/...` files are named by their fs-verity digests.
    #[arg(long)]
    pub store: PathBuf,
    /// Print the outcome as one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs `zinstall image composefs`.
#[cfg(not(target_os = "linux"))]
pub fn run(args: &ComposefsArgs) -> Exit {
    crate::json::fail(
        args.json,
        "composefs is Linux's (EROFS, overlayfs and fs-verity): there is \
         no composefs on this system",
        serde_json::Value::Null,
    );
    Exit::Usage
}

/// Runs `zinstall image composefs`.
#[cfg(target_os = "linux")]
pub fn run(args: &ComposefsArgs) -> Exit {
    use crate::output;
    use zinstall_composefs::{Store, hex, write_image};

    let done = Store::open(&args.store).and_then(|store| {
        let image = write_image(&args.dir, &store)?;
        let verity = store.verity()?;
        Ok((image, store, verity))
    });
    let (image, store, verity) = match done {
        Ok(v) => v,
        Err(e) => {
            crate::json::fail(args.json, &e, serde_json::Value::Null);
            return Exit::Failed;
        }
    };
    let id = hex(&image.id);
    let path = store.object_path(&image.id);
    let c = image.counts;
    if args.json {
        crate::json::result(serde_json::json!({
            "image": id,
            "image_path": crate::json::path(&path),
            "store": crate::json::path(&args.store),
            "image_bytes": image.size,
            "entries": c.entries,
            "inline": c.inline,
            "objects": c.objects,
            "objects_written": c.written,
            "bytes_written": c.bytes_written,
            "objects_replaced": c.replaced,
            "verity": verity.to_string(),
        }));
        return Exit::Ok;
    }
    output::out(&id);
    output::note(format_args!(
        "{} entries: {} files inline, {} in objects ({} written, {}); \
         image {} at {}; fs-verity {}",
        c.entries,
        c.inline,
        c.objects,
        c.written,
        output::human_bytes(c.bytes_written),
        output::human_bytes(image.size),
        output::show(&path),
        verity
    ));
    Exit::Ok
}
