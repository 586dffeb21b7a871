//! `cargo test --test sqllogictests [-- [--complete] [FILTER...]]` runs every
//! `.slt` file under `sqllogictest/`, each with a fresh temporary catalog.

#[tokio::main]
async fn main() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("sqllogictest");
    let code = datafusion_matview_slt::main_with_args(std::env::args().skip(1), Some(dir)).await;
    std::process::exit(code);
}
