"""The exceptions, one class per meaning, all under :class:`MatviewError`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


class MatviewError(Exception):
    """An error the server answered (or a job ended with).

    ``message`` is the server's first line (PostgreSQL's wording where it
    has one), ``detail`` its ``DETAIL``/``HINT`` lines, ``code`` the
    PostgreSQL condition name (the answer's ``condition``, e.g.
    ``undefined_table``), ``lance_code`` the Lance Namespace error code
    (the answer's integer ``code``: 4 TableNotFound, 5 TableAlreadyExists,
    13 InvalidInput, 14 ConcurrentModification, ...), ``instance`` the
    route that answered, ``status`` the HTTP status.
    """

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        detail: str | None = None,
        status: int | None = None,
        retryable: bool = False,
        lance_code: int | None = None,
        instance: str | None = None,
    ) -> None:
        super().__init__(message if not detail else f"{message}\n{detail}")
        self.message = message
        self.code = code
        self.lance_code = lance_code
        self.detail = detail
        self.status = status
        self.retryable = retryable
        self.instance = instance


class ViewNotFound(MatviewError):
    """The view (or its namespace) does not exist."""


class ViewExists(MatviewError):
    """A view (or table) of that name already exists."""


class CommitConflict(MatviewError):
    """Another writer committed first; ``retryable`` says a retry may succeed."""


class InvalidQuery(MatviewError):
    """The request or its query is not valid: it does not parse or plan."""


class NotSupported(MatviewError):
    """The server does not support what was asked."""


class Unauthorized(MatviewError):
    """The bearer token is missing or wrong."""


@dataclass(frozen=True)
class JobFailure:
    """Why a job failed: where (``phase``), the message, whether a retry may help."""

    phase: str
    message: str
    retryable: bool


class JobFailed(MatviewError):
    """A job ended FAILED (``failure`` says why) or CANCELLED (``failure`` is None)."""

    def __init__(self, job_id: str, state: str, failure: JobFailure | None) -> None:
        message = failure.message if failure else f"job {job_id} was cancelled"
        super().__init__(message, retryable=bool(failure and failure.retryable))
        self.job_id = job_id
        self.state = state
        self.failure = failure


#: The condition a Lance Namespace error code stands for, for an answer
#: that has a code but no ``condition``.
_CONDITION_OF_LANCE_CODE: dict[int, str] = {
    0: "feature_not_supported",
    5: "duplicate_table",
    14: "serialization_failure",
}


def error_from_response(status: int, body: bytes) -> MatviewError:
    """The exception for an HTTP error answer ``{error, code, condition,
    detail, instance, retryable}`` (``code`` the Lance error code,
    ``condition`` PostgreSQL's condition name)."""
    try:
        answer: Any = json.loads(body)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        text = body.decode("utf-8", "replace").strip() or f"HTTP {status}"
        return MatviewError(text, status=status)
    message = str(answer.get("error") or f"HTTP {status}")
    raw_code = answer.get("code")
    condition = answer.get("condition")
    if condition is None and isinstance(raw_code, str):
        condition = raw_code  # a server from before the Lance Namespace error codes
    lance_code = raw_code if isinstance(raw_code, int) and not isinstance(raw_code, bool) else None
    instance = answer.get("instance")
    kwargs: dict[str, Any] = {
        "code": None if condition is None else str(condition),
        "lance_code": lance_code,
        "detail": answer.get("detail"),
        "status": status,
        "retryable": bool(answer.get("retryable")),
        "instance": None if instance is None else str(instance),
    }
    # By PostgreSQL's condition name, as before; by the Lance code when
    # the answer has no condition.
    if condition is None:
        condition = _CONDITION_OF_LANCE_CODE.get(lance_code) if lance_code is not None else None
    if status == 401:
        return Unauthorized(message, **kwargs)
    if status == 404:
        return ViewNotFound(message, **kwargs)
    if status == 409 and condition == "duplicate_table":
        return ViewExists(message, **kwargs)
    if status == 409 and condition == "serialization_failure":
        return CommitConflict(message, **kwargs)
    if status == 400 and condition == "feature_not_supported":
        return NotSupported(message, **kwargs)
    if status == 400:
        return InvalidQuery(message, **kwargs)
    return MatviewError(message, **kwargs)
