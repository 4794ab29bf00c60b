"""One HTTP transport (urllib) for the client and its sandboxes: URLs, headers, timeouts, errors."""

from __future__ import annotations

import json
import os
import socket
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, Iterator, Mapping, Optional

from .errors import ConnectionError, error_from

DEFAULT_TIMEOUT = 30.0
SPAWN_TIMEOUT = 300.0


class Transport:
    def __init__(self, base_url: str = "http://localhost:7423", api_key: Optional[str] = None, user_id: Optional[str] = None, timeout: float = DEFAULT_TIMEOUT):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.headers: Dict[str, str] = {}
        # As the CLI does: a key in the environment serves every client that names none.
        api_key = api_key or os.environ.get("FORGEVM_API_KEY") or None
        if api_key:
            self.headers["X-API-Key"] = api_key
        if user_id:
            self.headers["X-User-ID"] = user_id

    def open(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        raw: Optional[bytes] = None,
        query: Optional[Mapping[str, Any]] = None,
        timeout: Optional[float] = -1,
        sandbox_id: Optional[str] = None,
        content_type: str = "application/octet-stream",
    ):
        """Sends a request; returns the open response, raises a ForgevmError otherwise."""
        url = f"{self.base_url}/api/v1{path}"
        q = {k: v for k, v in (query or {}).items() if v is not None}
        if q:
            url += "?" + urllib.parse.urlencode(q, doseq=True)
        headers = dict(self.headers)
        data = None
        if raw is not None:
            headers["Content-Type"] = content_type
            data = raw
        elif body is not None:
            headers["Content-Type"] = "application/json"
            data = json.dumps({k: v for k, v in body.items() if v is not None}).encode()
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        t = self.timeout if timeout == -1 else timeout
        try:
            return urllib.request.urlopen(req, timeout=t)
        except urllib.error.HTTPError as e:
            raise error_from(e.code, e.read(), sandbox_id) from None
        except (socket.timeout, TimeoutError):
            raise ConnectionError(f"{method} {path} got no answer from the ForgeVM server at {self.base_url} within {t} s") from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise ConnectionError(f"cannot reach the ForgeVM server at {self.base_url}: {reason} (is `forgevm serve` running?)") from None

    def ndjson(self, method: str, path: str, on_headers: Any = None, **kw: Any) -> Iterator[Any]:
        """The JSON values of a streamed (NDJSON) answer, one per line, as the server flushes them."""
        with self.open(method, path, **kw) as res:
            if on_headers is not None:
                on_headers(res.headers)
            for raw in res:
                line = raw.strip()
                if line:
                    yield json.loads(line)

    def download(self, path: str, dest: str) -> Any:
        """Streams a GET's body into the file ``dest`` (MiB at a time); returns the response headers."""
        with self.open("GET", path, timeout=None) as res, open(dest, "wb") as out:
            while True:
                chunk = res.read(1 << 20)
                if not chunk:
                    break
                out.write(chunk)
            return res.headers

    def json(self, method: str, path: str, **kw: Any) -> Any:
        with self.open(method, path, **kw) as res:
            return json.loads(res.read() or b"null")

    def call(self, method: str, path: str, **kw: Any) -> None:
        with self.open(method, path, **kw) as res:
            res.read()
