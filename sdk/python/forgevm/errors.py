"""Typed exceptions: every error is a ForgevmError carrying the server's code and message."""

from __future__ import annotations

import builtins
import json
from typing import Optional


class ForgevmError(Exception):
    """Base class. ``code`` is the server's error code, ``status_code`` the HTTP status."""

    def __init__(self, message: str, code: Optional[str] = None, status_code: Optional[int] = None):
        super().__init__(message)
        self.message = message
        self.code = code or ""
        self.status_code = status_code


class BadRequestError(ForgevmError):
    """400: the request was refused; the message names the field."""


class AuthenticationError(ForgevmError):
    """401: missing or wrong API key."""


class NotFoundError(ForgevmError):
    """404: no such template, snapshot or file."""


class SandboxNotFound(NotFoundError):
    """404 for a sandbox: unknown, destroyed or expired."""

    def __init__(self, sandbox_id: str, message: Optional[str] = None):
        super().__init__(message or f"sandbox {sandbox_id} not found", "NOT_FOUND", 404)
        self.sandbox_id = sandbox_id


SandboxNotFoundError = SandboxNotFound


class ConflictError(ForgevmError):
    """409: conflicts with the current state (duplicate name, still starting)."""


class ProviderError(ForgevmError):
    """5xx: the server or its VM provider failed (503: full pool, shutting down)."""


class ConnectionError(ForgevmError, builtins.ConnectionError):
    """The server could not be reached, or did not answer within the timeout."""

    def __init__(self, message: str):
        super().__init__(message, "CONNECTION_ERROR")


ForgevmConnectionError = ConnectionError


def error_from(status: int, body: bytes, sandbox_id: Optional[str] = None) -> ForgevmError:
    """The exception a failed response stands for."""
    text = body.decode("utf-8", "replace")
    code, message = "", text
    try:
        data = json.loads(text)
        code = data.get("code", "") or ""
        message = data.get("message", text) or text
    except (ValueError, AttributeError):
        pass
    if status == 404 and sandbox_id and "sandbox" in message.lower():
        return SandboxNotFound(sandbox_id, message)
    if status == 404:
        return NotFoundError(message, code or "NOT_FOUND", status)
    if status == 401:
        return AuthenticationError(message, code or "UNAUTHORIZED", status)
    if status in (400, 413):
        return BadRequestError(message, code or "BAD_REQUEST", status)
    if status == 409:
        return ConflictError(message, code or "CONFLICT", status)
    if status >= 500:
        return ProviderError(message, code or "INTERNAL_ERROR", status)
    return ForgevmError(message, code, status)
