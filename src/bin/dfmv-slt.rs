//! `dfmv-slt [--complete] PATH...`: runs sqllogictest files with
//! materialized views, a fresh temporary catalog per file.

#[tokio::main]
async fn main() {
    let code = datafusion_matview_slt::main_with_args(std::env::args().skip(1), None).await;
    std::process::exit(code);
}
