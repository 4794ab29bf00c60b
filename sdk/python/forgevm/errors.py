"""Typed exceptions: every error is a ForgevmError carrying the server's code and message. The
class comes from the code (one table, the server's: docs/errors.md), never from a message."""

from __future__ import annotations

import builtins
import json
from typing import Dict, Optional, Type


class ForgevmError(Exception):
    """Base class. ``code`` is the server's error code, ``status_code`` the HTTP status,
    ``retryable`` whether the same request may succeed later."""

    def __init__(self, message: str, code: Optional[str] = None, status_code: Optional[int] = None, retryable: bool = False):
        super().__init__(message)
        self.message = message
        self.code = code or ""
        self.status_code = status_code
        self.retryable = retryable


class BadRequestError(ForgevmError):
    """BAD_REQUEST, PAYLOAD_TOO_LARGE, HEADERS_TOO_LARGE: the request was refused; the message names the field."""


class AuthenticationError(ForgevmError):
    """UNAUTHORIZED: missing or wrong API key."""


class ForbiddenError(ForgevmError):
    """FORBIDDEN: the server does not take requests from this origin or host name, or its policy for agents refuses the call."""


class NotFoundError(ForgevmError):
    """NOT_FOUND: no such template, snapshot or file."""


class SandboxNotFound(NotFoundError):
    """NOT_FOUND for the sandbox itself: unknown, destroyed or expired."""

    def __init__(self, sandbox_id: str, message: Optional[str] = None):
        super().__init__(message or f"sandbox {sandbox_id} not found", "NOT_FOUND", 404)
        self.sandbox_id = sandbox_id


SandboxNotFoundError = SandboxNotFound


class ConflictError(ForgevmError):
    """CONFLICT, METHOD_NOT_ALLOWED: conflicts with the current state (duplicate name, still starting)."""


class ProviderError(ForgevmError):
    """UNAVAILABLE, INTERNAL_ERROR: the server or its VM provider failed (503: full pool, shutting down)."""


class StorageFullError(ForgevmError):
    """INSUFFICIENT_STORAGE: a disk is full (the server's, whose sandboxes wait for space, or the sandbox's own); retry once there is room."""


class ConnectionError(ForgevmError, builtins.ConnectionError):
    """The server could not be reached, or did not answer within the timeout."""

    def __init__(self, message: str):
        super().__init__(message, "CONNECTION_ERROR", None, True)


ForgevmConnectionError = ConnectionError

#: Every code the server sends, and the class it becomes (the server's table: src/http/errors.ts).
ERROR_CLASSES: Dict[str, Type[ForgevmError]] = {
    "BAD_REQUEST": BadRequestError,
    "UNAUTHORIZED": AuthenticationError,
    "FORBIDDEN": ForbiddenError,
    "NOT_FOUND": NotFoundError,
    "METHOD_NOT_ALLOWED": ConflictError,
    "CONFLICT": ConflictError,
    "PAYLOAD_TOO_LARGE": BadRequestError,
    "HEADERS_TOO_LARGE": BadRequestError,
    "UNAVAILABLE": ProviderError,
    "INSUFFICIENT_STORAGE": StorageFullError,
    "INTERNAL_ERROR": ProviderError,
}


def error_from_body(data: dict, status: Optional[int] = None) -> ForgevmError:
    """The exception a server error body (or stream error message) stands for."""
    code = data.get("code", "") or ""
    message = data.get("message") or f"HTTP {status}"
    if code == "NOT_FOUND" and data.get("sandbox_id"):
        return SandboxNotFound(data["sandbox_id"], message)
    cls = ERROR_CLASSES.get(code) or (ProviderError if status and status >= 500 else ForgevmError)
    return cls(message, code, status, bool(data.get("retryable", False)))


def error_from(status: int, body: bytes, sandbox_id: Optional[str] = None) -> ForgevmError:
    """The exception a failed response stands for."""
    text = body.decode("utf-8", "replace")
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError
    except ValueError:
        data = {"message": text}
    return error_from_body(data, status)
