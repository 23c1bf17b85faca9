//! A small driver for the qcow2 module, used to measure it against
//! qemu-img: `qcow2_tool convert IMG OUT [THREADS]` and
//! `qcow2_tool overlay OVERLAY BASE SIZE`.

use std::path::Path;
use std::time::Instant;

use zinstall_qcow2::{self as qcow2, ConvertOptions, Image};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("convert") if args.len() >= 4 => {
            let t0 = Instant::now();
            let img = Image::open_chain(Path::new(&args[2]), &Default::default())?;
            let out = std::fs::File::create_new(&args[3])?;
            let threads = args.get(4).and_then(|t| t.parse().ok()).unwrap_or(4);
            let st = qcow2::convert_to_raw(&img, &out, &ConvertOptions { threads }, &|_| {})?;
            println!("{st:?} in {:?}", t0.elapsed());
        }
        Some("overlay") if args.len() == 5 => {
            let size = qcow2::create_overlay(Path::new(&args[2]), Path::new(&args[3]), "raw", args[4].parse()?)?;
            println!("overlay of {size} bytes");
        }
        _ => return Err("usage: qcow2_tool convert IMG OUT [THREADS] | overlay OVERLAY BASE SIZE".into()),
    }
    Ok(())
}
