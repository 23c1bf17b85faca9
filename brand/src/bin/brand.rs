//! The zinstall brand hook, run by zoneadm as
//! `/usr/lib/brand/zinstall/brand -z ZONE -R ZONEPATH VERB ...`.

fn main() {
    if let Err(e) = copier::probes::register() {
        eprintln!("zinstall brand: USDT probes not registered: {e}");
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    std::process::exit(i32::from(brand::hook::main(&args)));
}
