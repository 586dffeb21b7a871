"""`dfmv serve` from Python's ADBC Flight SQL driver, as a notebook uses it.

Starts the `dfmv` binary (``DFMV_BIN``, default ``target/debug/dfmv``) on
ephemeral loopback ports over a temporary catalog, then creates, queries,
refreshes, lists and drops views through ``adbc-driver-flightsql`` and
``pyarrow``. Run with ``python3 -m pytest tests/python``.
"""

import time

import adbc_driver_flightsql
import adbc_driver_flightsql.dbapi as flight_sql
import adbc_driver_manager
import pyarrow as pa
import pytest

from conftest import ROOT, TOKEN, post, serve, stop


@pytest.fixture
def server(tmp_path):
    """A running `dfmv serve` with a token; yields (grpc uri, folder)."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "jan.csv").write_text("region,amount\nnorth,10\nsouth,5\nnorth,2\n")
    proc, addresses = serve(tmp_path, "--flight-sql", "127.0.0.1:0", "--data-dir", str(tmp_path / "src"))
    uri = addresses.get("Flight SQL")
    assert uri and uri.startswith("grpc://127.0.0.1:"), f"no Flight SQL address: {proc.stderr.read()}"
    try:
        yield uri, tmp_path
    finally:
        stop(proc)


def connect(uri: str, token: str = TOKEN):
    return flight_sql.connect(
        uri,
        db_kwargs={adbc_driver_flightsql.DatabaseOptions.AUTHORIZATION_HEADER.value: f"Bearer {token}"},
        autocommit=True,
    )


def rows(cur, sql: str) -> list[dict]:
    cur.execute(sql)
    return cur.fetch_arrow_table().to_pylist()


def test_create_query_refresh_list_and_drop(server):
    uri, folder = server
    with connect(uri) as conn, conn.cursor() as cur:
        rows(cur, f"CREATE EXTERNAL TABLE orders STORED AS CSV LOCATION '{folder / 'src'}/'")
        created = rows(cur, "CREATE MATERIALIZED VIEW totals AS "
                            "SELECT region, sum(amount) AS total FROM orders GROUP BY region")
        assert len(created) == 1 and "totals" in str(created[0]), created
        assert rows(cur, "SELECT * FROM totals ORDER BY region") == [
            {"region": "north", "total": 12},
            {"region": "south", "total": 5},
        ]

        # A source change, then REFRESH: incremental, and the new rows.
        (folder / "src" / "feb.csv").write_text("region,amount\neast,7\nnorth,1\n")
        refreshed = rows(cur, "REFRESH MATERIALIZED VIEW totals")
        assert "incremental" in str(refreshed), refreshed
        table = (cur.execute("SELECT * FROM totals ORDER BY region"), cur.fetch_arrow_table())[1]
        assert table.schema.field("total").type == pa.int64()
        assert table.to_pydict() == {"region": ["east", "north", "south"], "total": [7, 13, 5]}

        # A prepared query with a parameter.
        cur.execute("SELECT total FROM totals WHERE region = $1", parameters=("north",))
        assert cur.fetch_arrow_table().to_pylist() == [{"total": 13}]

        # Views are listed as tables, with their kind.
        objects = conn.adbc_get_objects(depth="tables", table_name_filter="totals").read_all().to_pylist()
        tables = [
            (schema["db_schema_name"], table["table_name"], table["table_type"])
            for catalog in objects
            for schema in catalog["catalog_db_schemas"] or []
            for table in schema["db_schema_tables"] or []
        ]
        assert tables == [("public", "totals", "MATERIALIZED VIEW")], tables
        info = conn.adbc_get_info()
        version = next(
            line.split('"')[1]
            for line in (ROOT / "Cargo.toml").read_text().splitlines()
            if line.startswith("version = ")
        )
        assert (info["vendor_name"], info["vendor_version"]) == ("dfmv", version), info

        shown = rows(cur, "SHOW MATERIALIZED VIEWS")
        assert [(v["table_name"], v["row_count"], v["freshness"]) for v in shown] == [("totals", 3, "fresh")]
        rows(cur, "DROP MATERIALIZED VIEW totals")
        with pytest.raises(adbc_driver_manager.Error, match='materialized view "totals" does not exist'):
            rows(cur, "REFRESH MATERIALIZED VIEW totals")


def test_wrong_token_is_refused(server):
    uri, _ = server
    with pytest.raises(adbc_driver_manager.Error, match="(?i)unauthenticated|token"):
        with connect(uri, token="wrong") as conn, conn.cursor() as cur:
            rows(cur, "SELECT 1")


def test_a_prepared_statement_reads_what_the_names_mean_now(server):
    """A statement prepared before another client redefines the view it
    reads: executed again, it reads the new definition, or says to prepare
    it again when its columns changed; it never brings the old definition
    back for anyone."""
    uri, folder = server
    with connect(uri) as a, a.cursor() as cur_a, connect(uri) as b, b.cursor() as cur_b:
        rows(cur_a, f"CREATE EXTERNAL TABLE orders STORED AS CSV LOCATION '{folder / 'src'}/'")
        rows(cur_a, "CREATE MATERIALIZED VIEW v AS "
                    "SELECT region, sum(amount) AS total FROM orders GROUP BY region")
        # The driver prepares a parameterised statement once and keeps it.
        query = "SELECT region, total FROM v WHERE region <> $1 ORDER BY region"
        cur_a.adbc_prepare(query)
        cur_a.execute(query, parameters=("none",))
        assert cur_a.fetch_arrow_table().to_pylist() == [
            {"region": "north", "total": 12}, {"region": "south", "total": 5}]
        star = a.cursor()
        star.adbc_prepare("SELECT * FROM v")

        rows(cur_b, "CREATE OR REPLACE MATERIALIZED VIEW v AS "
                    "SELECT region, count(*) AS total, max(amount) AS most FROM orders GROUP BY region")
        # Same columns: the new definition's rows.
        cur_a.execute(query, parameters=("none",))
        assert cur_a.fetch_arrow_table().to_pylist() == [
            {"region": "north", "total": 2}, {"region": "south", "total": 1}]
        # Other columns: a clear error.
        with pytest.raises(adbc_driver_manager.Error, match="prepare it again"):
            star.execute("SELECT * FROM v")
            star.fetch_arrow_table()
        star.close()
        # Everyone sees the new definition.
        for cur in (cur_a, cur_b):
            assert rows(cur, "SELECT * FROM v ORDER BY region") == [
                {"region": "north", "total": 2, "most": 10},
                {"region": "south", "total": 1, "most": 5}]


def test_a_prepared_query_with_a_parameter_is_answered_from_a_view(server):
    """The driver binds `$1` to a statement it prepared over the table; the
    server answers it from the view once the value is bound. Seen under
    `stale_ok`: after the table's file is rewritten, the stale view gives
    its own total, not the table's."""
    uri, folder = server
    query = "SELECT region, sum(amount) AS total FROM orders WHERE region = $1 GROUP BY region"
    with connect(uri) as conn, conn.cursor() as cur:
        rows(cur, f"CREATE EXTERNAL TABLE orders STORED AS CSV LOCATION '{folder / 'src'}/'")
        rows(cur, "CREATE MATERIALIZED VIEW totals AS SELECT region, sum(amount) AS total FROM orders GROUP BY region")

        def total() -> int:
            cur.execute(query, parameters=("north",))
            return cur.fetch_arrow_table().to_pylist()[0]["total"]

        assert total() == 12
        (folder / "src" / "jan.csv").write_text("region,amount\nnorth,10\nsouth,5\nnorth,20\n")
        assert total() == 30, "the table's total: the view is stale and not used"
        rows(cur, "SET matview.rewrite = 'stale_ok'")
        assert total() == 12, "the view's total"
        rows(cur, "REFRESH MATERIALIZED VIEW totals")
        assert total() == 30


def test_each_connection_has_its_own_settings(server):
    uri, folder = server
    with connect(uri) as a, a.cursor() as cur_a, connect(uri) as b, b.cursor() as cur_b:
        rows(cur_a, f"CREATE EXTERNAL TABLE orders STORED AS CSV LOCATION '{folder / 'src'}/'")
        rows(cur_a, "CREATE SCHEMA other")
        rows(cur_a, "SET datafusion.catalog.default_schema = 'other'")
        with pytest.raises(adbc_driver_manager.Error, match="orders"):
            rows(cur_a, "SELECT count(*) AS n FROM orders")
        assert rows(cur_b, "SELECT count(*) AS n FROM orders") == [{"n": 3}]
        with pytest.raises(adbc_driver_manager.Error, match="permission denied"):
            rows(cur_b, "SET datafusion.sql_parser.dialect = 'PostgreSQL'")


def test_files_outside_the_allowed_folders_are_refused(server):
    uri, folder = server
    (folder / "private.csv").write_text("k,v\npassword,hunter2\n")
    with connect(uri) as conn, conn.cursor() as cur:
        with pytest.raises(adbc_driver_manager.Error, match="permission denied"):
            rows(cur, f"SELECT * FROM '{folder / 'private.csv'}'")
        with pytest.raises(adbc_driver_manager.Error, match="permission denied"):
            rows(cur, f"COPY (SELECT 1) TO '{folder / 'out.csv'}'")
        assert not (folder / "out.csv").exists()


def post_sql(url: str, sql: str) -> tuple[int, object]:
    """`/v1/sql`: the status and the JSON answer, error or not."""
    return post(url, "/v1/sql", {"sql": sql})


def test_limits_are_enforced_and_recovered_from(tmp_path):
    """A server started with small limits: a long statement is stopped, a
    large REST answer refused (Flight SQL streams it), prepared statements
    capped per connection and in all; the server answers normally after
    each."""
    proc, addresses = serve(
        tmp_path, "--flight-sql", "127.0.0.1:0", "--statement-timeout", "2",
        "--max-result-bytes", "65536", "--max-handles-per-client", "2", "--max-handles", "3")
    try:
        url, uri = addresses["REST"], addresses["Flight SQL"]
        slow = "SELECT sum(value) AS n FROM generate_series(1, 1000000000000)"
        started = time.monotonic()
        status, error = post_sql(url, slow)
        assert (status, error["condition"]) == (408, "query_canceled"), error
        assert time.monotonic() - started < 15
        assert post_sql(url, "SELECT 1 AS n") == (200, [{"n": 1}])

        big = "SELECT value FROM generate_series(1, 100000)"
        status, error = post_sql(url, big)
        assert status == 413 and "Flight SQL" in error["detail"], error

        with connect(uri) as a, connect(uri) as b:
            with a.cursor() as cur:
                started = time.monotonic()
                with pytest.raises(adbc_driver_manager.Error, match="statement timeout"):
                    rows(cur, slow)
                assert time.monotonic() - started < 15
                assert len(rows(cur, big)) == 100_000

            held = [a.cursor(), a.cursor()]
            for i, cur in enumerate(held):
                cur.adbc_prepare(f"SELECT {i} AS n")
            third = a.cursor()
            with pytest.raises(adbc_driver_manager.Error, match="this connection holds 2"):
                third.adbc_prepare("SELECT 2 AS n")
            third.close()
            # Closing a statement frees its place.
            held.pop().close()
            again = a.cursor()
            again.adbc_prepare("SELECT 2 AS n")
            held.append(again)
            mine = b.cursor()
            mine.adbc_prepare("SELECT 3 AS n")
            other = b.cursor()
            with pytest.raises(adbc_driver_manager.Error, match="the server holds 3"):
                other.adbc_prepare("SELECT 4 AS n")
            for cur in held + [mine, other]:
                cur.close()
            with b.cursor() as cur:
                cur.adbc_prepare("SELECT 4 AS n")
                cur.execute("SELECT 4 AS n")
                assert cur.fetch_arrow_table().to_pylist() == [{"n": 4}]
    finally:
        stop(proc)
