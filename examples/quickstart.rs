//! A two-minute tour: a source table, a materialized view over it, a change
//! at the source, a refresh, and the list of views.
//!
//! Run it with `cargo run --example quickstart`. The catalog is written to a
//! temporary folder; pass a path to keep it: `cargo run --example quickstart -- ./catalog`.

use datafusion::prelude::SessionContext;
use datafusion_matview::MatviewSession;

#[tokio::main]
async fn main() -> datafusion_matview::Result<()> {
    let temp = tempfile::tempdir().expect("a temporary folder");
    let location = std::env::args()
        .nth(1)
        .unwrap_or_else(|| temp.path().join("catalog").display().to_string());

    // Any SessionContext works: its tables, functions and object stores stay.
    let mv = MatviewSession::open(SessionContext::new(), &location).await?;

    mv.sql(
        "CREATE TABLE orders (id INT, region VARCHAR, amount DOUBLE) AS VALUES
            (1, 'north', 10.0), (2, 'south', 20.5), (3, 'north', 7.25)",
    )
    .await?;

    // The query runs once; its result is stored as Parquet in the catalog.
    mv.sql(
        "CREATE MATERIALIZED VIEW sales_by_region AS
         SELECT region, count(*) AS orders, sum(amount) AS total
         FROM orders GROUP BY region",
    )
    .await?;
    println!("The view, read from its Parquet snapshot:");
    mv.sql("SELECT * FROM sales_by_region ORDER BY region")
        .await?
        .show()
        .await?;

    // Changes at the source are not visible until REFRESH.
    mv.sql("INSERT INTO orders VALUES (4, 'south', 100.0), (5, 'east', 1.0)")
        .await?
        .collect()
        .await?;
    println!("After REFRESH (mode, rows written, catalog version):");
    mv.sql("REFRESH MATERIALIZED VIEW sales_by_region")
        .await?
        .show()
        .await?;
    mv.sql("SELECT * FROM sales_by_region ORDER BY region")
        .await?
        .show()
        .await?;

    println!("Every materialized view of the catalog at {location}:");
    mv.sql("SELECT table_name, populated, row_count, size_bytes FROM materialized_views()")
        .await?
        .show()
        .await?;
    Ok(())
}
