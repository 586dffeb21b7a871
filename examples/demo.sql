-- dfmv demo: a materialized view is created, queried, its source changes,
-- it is refreshed and listed. From the repository root:
--
--   cargo run --bin dfmv -- -f examples/demo.sql
--
-- The view is kept in the catalog (./.dfmv, or --catalog DIR); the demo's
-- working copy of the source data is written to target/dfmv-demo/, so the
-- bundled files in examples/data/ stay as they are and every run starts over.

-- 1. The source: January's orders, as a CSV file behind an external table.
--    The catalog remembers the table, so later dfmv sessions have it too.
COPY (SELECT * FROM 'examples/data/orders-january.csv')
  TO 'target/dfmv-demo/orders.csv' STORED AS CSV;
CREATE EXTERNAL TABLE IF NOT EXISTS demo_orders
  STORED AS CSV LOCATION 'target/dfmv-demo/orders.csv';

-- 2. The view: computed once, stored as Parquet in the catalog.
CREATE OR REPLACE MATERIALIZED VIEW demo_sales_by_region AS
  SELECT region, count(*) AS orders, sum(amount) AS total
  FROM demo_orders GROUP BY region;
SELECT * FROM demo_sales_by_region ORDER BY region;

-- 3. The source changes: February's orders arrive. The view still shows
--    what it stored...
COPY (SELECT * FROM 'examples/data/orders-january.csv'
      UNION ALL SELECT * FROM 'examples/data/orders-february.csv')
  TO 'target/dfmv-demo/orders.csv' STORED AS CSV;
SELECT * FROM demo_sales_by_region ORDER BY region;

-- 4. ...until it is refreshed.
REFRESH MATERIALIZED VIEW demo_sales_by_region;
SELECT * FROM demo_sales_by_region ORDER BY region;

-- 5. What the catalog holds.
\dm
SHOW MATERIALIZED VIEWS LIKE 'demo%';
