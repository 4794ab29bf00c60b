"""Streamed exec: NDJSON lines as the server flushes them; the last line is the exit code."""

from __future__ import annotations

from typing import Any, Callable, Iterator, Optional

from .errors import ProviderError, error_from_body
from .models import StreamChunk


class ExecStream:
    """Iterate for chunks as they are produced; ``exit_code`` is set once the stream has ended."""

    def __init__(self, open_lines: Callable[[], Iterator[Any]]):
        self._open = open_lines
        self._started = False
        self.exit_code: Optional[int] = None
        #: The process's pid in the guest once the stream has started: a stream a server stop ended
        #: with UNAVAILABLE is followed again with ``sandbox.follow_process(pid)``.
        self.pid: Optional[int] = None

    def _headers(self, headers: Any) -> None:
        pid = headers.get("x-forgevm-pid")
        if pid and pid.isdigit():
            self.pid = int(pid)

    def __iter__(self) -> Iterator[StreamChunk]:
        if self._started:
            raise RuntimeError("an exec stream can be iterated only once")
        self._started = True
        for msg in self._open():
            kind = msg.get("stream")
            if kind == "exit":
                self.exit_code = int(msg.get("exit_code", -1))
            elif kind == "error":
                raise error_from_body({**msg, "message": msg.get("message") or str(msg.get("data"))})
            else:
                yield StreamChunk(stream=kind, data=msg.get("data", ""))
        if self.exit_code is None:
            raise ProviderError("the exec stream ended without an exit code", "INTERNAL_ERROR")

    def collect(self) -> "tuple[str, str, int]":
        """Reads the whole stream: (stdout, stderr, exit_code)."""
        out, err = [], []
        for c in self:
            (out if c.stream == "stdout" else err).append(c.data)
        return "".join(out), "".join(err), self.exit_code  # type: ignore[return-value]
