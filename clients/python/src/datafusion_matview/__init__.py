"""Materialized views for Apache DataFusion, over ``dfmv serve``.

>>> import datafusion_matview as dfmv
>>> db = dfmv.connect("http://127.0.0.1:2333")          # doctest: +SKIP
>>> view = db.create_materialized_view("totals", "SELECT ...")  # doctest: +SKIP
>>> view.refresh().mode                                   # doctest: +SKIP
'incremental'
"""

from ._async import AsyncConnection, AsyncJob, AsyncMaterializedView, connect_async
from ._core import Column, RefreshAttempt, RefreshResult, RetainedVersion
from ._errors import (
    CommitConflict,
    InvalidQuery,
    JobFailed,
    JobFailure,
    MatviewError,
    NotSupported,
    Unauthorized,
    ViewExists,
    ViewNotFound,
)
from ._sync import Connection, Job, MaterializedView, connect

__all__ = [
    "AsyncConnection",
    "AsyncJob",
    "AsyncMaterializedView",
    "Column",
    "CommitConflict",
    "Connection",
    "InvalidQuery",
    "Job",
    "JobFailed",
    "JobFailure",
    "MatviewError",
    "MaterializedView",
    "NotSupported",
    "RefreshAttempt",
    "RefreshResult",
    "RetainedVersion",
    "Unauthorized",
    "ViewExists",
    "ViewNotFound",
    "connect",
    "connect_async",
]
