//! `zinstall image composefs DIR --store STORE`: a tree's regular files
//! into a composefs object store and its metadata into an EROFS image,
//! stored there too, named by a ref if asked; prints the image's ID.

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
    /// Name the image by this ref (`images/refs/NAME`), which keeps it
    /// and its objects from `cache gc`; without one, the next sweep of
    /// the store removes them.
    #[arg(long = "ref", value_name = "NAME")]
    pub ref_name: Option<String>,
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

    if let Some(name) = &args.ref_name
        && !zinstall_composefs::valid_ref_name(name)
    {
        crate::json::fail(
            args.json,
            format_args!(
                "--ref {name:?}: a ref is 1 to {} ASCII letters, digits and \
                 . _ - + @ : not starting with .",
                zinstall_composefs::REF_NAME_MAX
            ),
            serde_json::Value::Null,
        );
        return Exit::Usage;
    }
    let done = Store::open(&args.store).and_then(|store| {
        // Held until the ref names the image: a sweep of the store
        // waits rather than taking objects this image needs.
        let hold = store.lock_shared()?;
        let image = write_image(&args.dir, &store)?;
        if let Some(name) = &args.ref_name {
            store.add_ref(name, &image.id)?;
        }
        drop(hold);
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
            "ref": args.ref_name,
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
    match &args.ref_name {
        Some(name) => output::note(format_args!("named by ref {name}")),
        None => output::note(
            "no ref names it: the next `zinstall cache gc` of this store \
             removes it (name it with --ref)",
        ),
    }
    Exit::Ok
}
