-- dfmv demo: a materialized view is created, queried, its source changes,
-- it is refreshed and listed. From the repository root:
--
--   cargo run --bin dfmv -- -f examples/demo.sql
--
-- The view is kept in the catalog (./.dfmv, or --catalog DIR); the demo's
-- working copy of the source data is written to target/dfmv-demo/, so the
-- bundled files in examples/data/ stay as they are and every run starts over.

-- 1. The source: a folder of monthly CSV files behind an external table.
--    January's orders are there; February's file is created empty (an
--    empty file holds no rows, and SQL cannot delete the one a previous
--    run filled). The catalog remembers the table, so later dfmv sessions
--    have it too.
COPY (SELECT * FROM 'examples/data/orders-january.csv')
  TO 'target/dfmv-demo/orders/2026-01.csv' STORED AS CSV;
COPY (SELECT * FROM 'examples/data/orders-february.csv' WHERE false)
  TO 'target/dfmv-demo/orders/2026-02.csv' STORED AS CSV
  OPTIONS ('format.has_header' 'false');
CREATE OR REPLACE EXTERNAL TABLE demo_orders
  STORED AS CSV LOCATION 'target/dfmv-demo/orders/';

-- 2. The view: computed once, stored as Parquet in the catalog.
CREATE OR REPLACE MATERIALIZED VIEW demo_sales_by_region AS
  SELECT region, count(*) AS orders, sum(amount) AS total
  FROM demo_orders GROUP BY region;
SELECT * FROM demo_sales_by_region ORDER BY region;

-- 3. The source changes: February's orders arrive in their file. The view
--    still shows what it stored...
COPY (SELECT * FROM 'examples/data/orders-february.csv')
  TO 'target/dfmv-demo/orders/2026-02.csv' STORED AS CSV;
SELECT * FROM demo_sales_by_region ORDER BY region;

-- 4. ...until it is refreshed: incrementally, reading only the new file
--    and merging it into the stored groups.
REFRESH MATERIALIZED VIEW demo_sales_by_region;
SELECT * FROM demo_sales_by_region ORDER BY region;

-- 5. What the catalog holds.
\dm
SHOW MATERIALIZED VIEWS LIKE 'demo%';
