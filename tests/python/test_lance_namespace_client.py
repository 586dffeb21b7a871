"""`dfmv serve` driven by the Lance Namespace spec's own generated client.

``lance-namespace-urllib3-client`` 0.13.0 (from PyPI) is used unchanged:
its models, its statuses, its error classes. Starts the ``dfmv`` binary
(``DFMV_BIN``) over a temporary catalog with a remembered ``orders`` table.
Run with ``python3 -m pytest tests/python``.
"""

import base64
import os
import subprocess
import time

import lance_namespace_urllib3_client as lnc
import pyarrow as pa
import pytest
from lance_namespace_urllib3_client.exceptions import (
    ApiException,
    BadRequestException,
    ConflictException,
    ForbiddenException,
    NotFoundException,
    ServiceException,
    UnauthorizedException,
)

from conftest import TOKEN, dfmv_bin, post, serve, stop


def start(tmp_path, *flags):
    """`dfmv serve` with a token over a catalog remembering `orders`."""
    (tmp_path / "src").mkdir(exist_ok=True)
    (tmp_path / "src" / "jan.csv").write_text("region,amount\nnorth,10\nsouth,5\nnorth,2\n")
    (tmp_path / "private.csv").write_text("k,v\npassword,hunter2\n")
    env = dict(os.environ, HOME=str(tmp_path), DFMV_TOKEN=TOKEN)
    catalog = str(tmp_path / "catalog")
    subprocess.run(
        [dfmv_bin(), "--catalog", catalog, "-q", "-c",
         f"CREATE EXTERNAL TABLE IF NOT EXISTS orders STORED AS CSV LOCATION '{tmp_path / 'src'}/'"],
        cwd=tmp_path, env=env, check=True, capture_output=True,
    )
    proc, addresses = serve(tmp_path, "--flight-sql", "none", *flags)
    url = addresses.get("REST")
    assert url, f"no REST address: {proc.stderr.read()}"
    return proc, url


@pytest.fixture
def server(tmp_path):
    proc, url = start(tmp_path)
    try:
        yield url, tmp_path
    finally:
        stop(proc)


def api(url: str, **auth) -> lnc.MaterializedViewApi:
    config = lnc.Configuration(host=url, **auth)
    return lnc.MaterializedViewApi(lnc.ApiClient(config))


def schema_b64(schema: pa.Schema) -> str:
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


TOTALS = pa.schema([pa.field("region", pa.utf8()), pa.field("total", pa.int64())])
QUERY = "SELECT region, sum(amount) AS total FROM orders GROUP BY region"


def request(kind="query", query=QUERY, schema=TOTALS, **fields):
    return lnc.CreateMaterializedViewRequest(
        kind=kind, source_query=query, output_schema=schema_b64(schema), **fields)


def job(url: str, job_id: str) -> dict:
    """The job (this server's jobs route, LanceDB's shape) once finished."""
    for _ in range(500):
        status, described = post(url, "/v1/jobs/describe", {"job_id": job_id})
        assert status == 200, described
        if described["state"] != "IN_PROGRESS":
            return described
        time.sleep(0.02)
    raise AssertionError(f"job {job_id} did not finish")


def rows(url: str, sql: str) -> list:
    status, answer = post(url, "/v1/sql", {"sql": sql})
    assert status == 200, answer
    return answer


def test_create_and_refresh_with_the_generated_client(server):
    url, folder = server
    views = api(url, access_token=TOKEN)

    # The spec's default: created without data, no job.
    empty = views.create_materialized_view("empty", request())
    assert (empty.version, empty.job_id) == (1, None)

    # with_no_data=False: created (version 1), populated by a job.
    created = views.create_materialized_view("totals", request(with_no_data=False))
    assert created.version == 1 and isinstance(created.job_id, str)
    done = job(url, created.job_id)
    assert done["state"] == "DONE", done
    assert (done["table"], done["job_type"]) == ("totals", "CREATE_MATERIALIZED_VIEW")
    assert isinstance(done["created_at_millis"], int)
    assert rows(url, "SELECT * FROM totals ORDER BY region") == [
        {"region": "north", "total": 12}, {"region": "south", "total": 5}]

    # Refresh with no body, with an empty one, and by another delimiter.
    (folder / "src" / "feb.csv").write_text("region,amount\neast,7\n")
    refreshed = views.refresh_materialized_view("totals")
    assert job(url, refreshed.job_id)["result"]["mode"] == "incremental"
    again = views.refresh_materialized_view(
        "datafusion.public.totals", delimiter=".",
        refresh_materialized_view_request=lnc.RefreshMaterializedViewRequest())
    assert job(url, again.job_id)["result"]["mode"] == "no_op"
    assert rows(url, "SELECT count(*) AS n FROM totals") == [{"n": 3}]

    # The spec's API key header carries the token too.
    keyed = api(url, api_key={"ApiKeyAuth": TOKEN})
    assert isinstance(keyed.refresh_materialized_view("empty").job_id, str)


def error_of(call) -> tuple:
    with pytest.raises(ApiException) as raised:
        call()
    e = raised.value
    assert e.data is not None, f"{e.status}: {e.body}"
    return type(e), e.data.code, e.data


def test_every_error_class_answers_the_spec_error_response(server):
    url, folder = server
    views = api(url, access_token=TOKEN)
    views.create_materialized_view("v", request())

    kind, code, data = error_of(lambda: views.create_materialized_view("v", request()))
    assert (kind, code) == (ConflictException, 5), data            # TableAlreadyExists
    assert data.error == 'relation "v" already exists'
    assert data.instance == "/v1/materialized_view/v/create"

    kind, code, _ = error_of(lambda: views.refresh_materialized_view("nope"))
    assert (kind, code) == (NotFoundException, 4)                   # TableNotFound

    wrong = pa.schema([pa.field("region", pa.utf8()), pa.field("total", pa.float64())])
    kind, code, data = error_of(lambda: views.create_materialized_view("w", request(schema=wrong)))
    assert (kind, code) == (BadRequestException, 20), data          # TableSchemaValidationError
    assert "total Float64" in data.error and "total Int64" in data.error

    spec = lnc.MaterializedViewUdtfEntry(
        kind="udtf", udtf="e30=", udtf_sha="0" * 64, udtf_name="f", udtf_version="1")
    kind, code, data = error_of(lambda: views.create_materialized_view(
        "u", request(kind="udtf", udtf_spec=spec)))
    assert (kind, code) == (BadRequestException, 0), data            # Unsupported

    kind, code, data = error_of(lambda: views.create_materialized_view("s", request(query="SELEC 1")))
    assert (kind, code) == (BadRequestException, 13), data           # InvalidInput

    kind, code, data = error_of(lambda: views.refresh_materialized_view(
        "v", refresh_materialized_view_request=lnc.RefreshMaterializedViewRequest(src_version=7)))
    assert (kind, code) == (BadRequestException, 13), data
    assert "source_version" in data.error
    kind, code, _ = error_of(lambda: views.refresh_materialized_view(
        "v", refresh_materialized_view_request=lnc.RefreshMaterializedViewRequest(concurrency=4)))
    assert (kind, code) == (BadRequestException, 13)

    secret = lnc.CreateMaterializedViewRequest(
        kind="query", source_query=f"SELECT * FROM '{folder / 'private.csv'}'",
        output_schema=schema_b64(pa.schema([pa.field("k", pa.utf8()), pa.field("v", pa.utf8())])))
    kind, code, data = error_of(lambda: views.create_materialized_view("leak", secret))
    assert (kind, code) == (ForbiddenException, 15), data           # PermissionDenied

    kind, code, _ = error_of(lambda: api(url, access_token="wrong").refresh_materialized_view("v"))
    assert (kind, code) == (UnauthorizedException, 16)              # Unauthenticated
    kind, code, _ = error_of(lambda: api(url).refresh_materialized_view("v"))
    assert (kind, code) == (UnauthorizedException, 16)


def test_a_full_job_queue_is_service_unavailable(tmp_path):
    proc, url = start(tmp_path, "--max-jobs", "1", "--max-running-jobs", "1")
    try:
        views = api(url, access_token=TOKEN)
        views.create_materialized_view("v", request())
        slow = pa.schema([pa.field("n", pa.int64())])
        views.create_materialized_view("slow", request(
            query="SELECT sum(value) AS n FROM generate_series(1, 1000000000000)", schema=slow))
        # The one job the queue holds.
        busy = views.refresh_materialized_view("slow").job_id
        kind, code, data = error_of(lambda: views.refresh_materialized_view("v"))
        assert (kind, code) == (ServiceException, 17), data         # ServiceUnavailable
        # Nothing was created by a refused population.
        kind, code, _ = error_of(lambda: views.create_materialized_view("w", request(with_no_data=False)))
        assert (kind, code) == (ServiceException, 17)
        assert rows(url, "SELECT count(*) AS n FROM materialized_views() WHERE table_name = 'w'") == [{"n": 0}]
        status, cancelled = post(url, "/v1/jobs/cancel", {"job_id": busy})
        assert (status, cancelled["state"]) == (200, "CANCELLED"), cancelled
    finally:
        stop(proc)
