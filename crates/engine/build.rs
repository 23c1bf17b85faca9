//! Compiles the USDT provider `dtrace/zinstall.d` into probe macros.

fn main() {
    let provider = "../../dtrace/zinstall.d";
    println!("cargo:rerun-if-changed={provider}");
    if std::env::var_os("CARGO_FEATURE_USDT_PROBES").is_none() {
        return;
    }
    if let Err(e) = usdt::Builder::new(provider).build() {
        eprintln!("error: compiling USDT provider {provider}: {e}");
        std::process::exit(1);
    }
}
