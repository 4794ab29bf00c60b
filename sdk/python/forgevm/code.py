"""Running code in a sandbox's stateful code contexts: buffered, or streamed as NDJSON events when
the caller wants output as it comes (callbacks)."""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Union

from ._http import Transport
from .errors import ProviderError, error_from_body
from .models import CodeContext, CodeError, Execution

#: How long a run may take over HTTP beyond the code's own timeout.
CODE_SLACK = 15.0


def execution_from(data: Dict[str, Any]) -> Execution:
    err = data.get("error")
    return Execution(
        results=list(data.get("results") or []),
        stdout=data.get("stdout", ""),
        stderr=data.get("stderr", ""),
        error=CodeError(err["name"], err["value"], err.get("traceback", "")) if err else None,
        execution_count=int(data.get("execution_count", 0)),
        context=data.get("context", ""),
        duration=data.get("duration", ""),
    )


def context_id(c: Union[str, CodeContext, None]) -> Optional[str]:
    return c.id if isinstance(c, CodeContext) else c


def run_code(
    http: Transport,
    sandbox_id: str,
    path: str,
    code: str,
    *,
    language: Optional[str] = None,
    context: Union[str, CodeContext, None] = None,
    env: Optional[Dict[str, str]] = None,
    timeout: Optional[str] = None,
    timeout_s: Optional[float] = None,
    on_stdout: Optional[Callable[[str], Any]] = None,
    on_stderr: Optional[Callable[[str], Any]] = None,
    on_result: Optional[Callable[[Dict[str, Any]], Any]] = None,
    on_error: Optional[Callable[[CodeError], Any]] = None,
) -> Execution:
    stream = bool(on_stdout or on_stderr or on_result or on_error)
    body = {"code": code, "language": language, "context": context_id(context), "env": env, "timeout": timeout, "stream": stream or None}
    http_timeout = None if (stream or timeout_s is None) else max(http.timeout, timeout_s + CODE_SLACK)
    if not stream:
        return execution_from(http.json("POST", f"{path}/code", body=body, timeout=http_timeout, sandbox_id=sandbox_id))
    ex = Execution(context=context_id(context) or "")
    ended = False
    for e in http.ndjson("POST", f"{path}/code", body=body, timeout=None, sandbox_id=sandbox_id):
        kind = e.get("type")
        if kind == "stdout":
            ex.stdout += e["text"]
            if on_stdout:
                on_stdout(e["text"])
        elif kind == "stderr":
            ex.stderr += e["text"]
            if on_stderr:
                on_stderr(e["text"])
        elif kind == "result":
            r = {k: v for k, v in e.items() if k != "type"}
            ex.results.append(r)
            if on_result:
                on_result(r)
        elif kind == "error":
            ex.error = CodeError(e["name"], e["value"], e.get("traceback", ""))
            if on_error:
                on_error(ex.error)
        elif kind == "end":
            ex.execution_count = int(e.get("execution_count", 0))
            ex.context = e.get("context", ex.context)
            ex.duration = e.get("duration", "")
            ended = True
        elif kind == "api_error":
            raise error_from_body(e)
    if not ended:
        raise ProviderError("the code stream ended before the run did", "INTERNAL_ERROR")
    return ex
