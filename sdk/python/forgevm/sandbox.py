"""A sandbox on a ForgeVM server: commands, files, lifetime. Obtained from Client.spawn or get."""

from __future__ import annotations

import re
import urllib.parse
from typing import Any, Dict, List, Optional, Union

from ._http import Transport
from .code import context_id, run_code
from .desktop import Desktop
from .models import CodeContext, ExecResult, Execution, FileInfo, SandboxInfo, _pick
from .streaming import ExecStream

#: A field left out of an update (None there means "clear it").
_KEEP: Any = object()

#: How long an exec may take over HTTP beyond the command's own timeout.
EXEC_SLACK = 15.0


def _duration(t: Union[str, float, int, None]) -> Optional[str]:
    """Seconds (number) or a duration string ("30s") as the server's duration string."""
    if t is None or isinstance(t, str):
        return t
    return f"{max(1, round(t * 1000))}ms"


def _seconds(t: Union[str, float, int, None]) -> Optional[float]:
    if t is None:
        return None
    if not isinstance(t, str):
        return float(t)
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    total = sum(float(n) * units[u] for n, u in re.findall(r"([0-9.]+)(ms|h|m|s)", t))
    return total or None


class Sandbox:
    """A running sandbox. ``with client.spawn() as sb:`` destroys it when the block ends."""

    def __init__(self, http: Transport, info: Dict[str, Any]):
        self._http = http
        self._info = _pick(SandboxInfo, info)
        #: Its desktop, for a sandbox of the desktop image: screenshots, mouse, keyboard, windows, the live view.
        self.desktop = Desktop(http, self._info.id)

    # -- what it is
    @property
    def id(self) -> str:
        return self._info.id

    @property
    def state(self) -> str:
        return self._info.state

    @property
    def image(self) -> str:
        return self._info.image

    @property
    def provider(self) -> str:
        return self._info.provider

    @property
    def memory_mb(self) -> int:
        return self._info.memory_mb

    @property
    def vcpus(self) -> int:
        return self._info.vcpus

    @property
    def expires_at(self) -> Optional[str]:
        """When it expires (RFC 3339); None when it lives until it is destroyed."""
        return self._info.expires_at

    @property
    def info(self) -> SandboxInfo:
        return self._info

    def _path(self, suffix: str = "") -> str:
        return f"/sandboxes/{urllib.parse.quote(self.id, safe='')}{suffix}"

    @staticmethod
    def _exec_body(command: str, args, env, workdir, timeout, user, stdin, stream: bool) -> Dict[str, Any]:
        return {"command": command, "args": args, "env": env, "workdir": workdir, "timeout": _duration(timeout), "user": user, "stdin": stdin, "stream": True if stream else None}

    # -- commands
    def exec(
        self,
        command: str,
        args: Optional[List[str]] = None,
        env: Optional[Dict[str, str]] = None,
        workdir: Optional[str] = None,
        timeout: Union[str, float, None] = None,
        user: Optional[str] = None,
        stdin: Optional[str] = None,
    ) -> ExecResult:
        """Runs a command under /bin/sh -c and waits; ``timeout`` in seconds or as "30s"."""
        limit = _seconds(timeout)
        http_timeout = None if limit is None else max(self._http.timeout, limit + EXEC_SLACK)
        data = self._http.json("POST", self._path("/exec"), body=self._exec_body(command, args, env, workdir, timeout, user, stdin, False), timeout=http_timeout, sandbox_id=self.id)
        return _pick(ExecResult, data)

    def exec_stream(
        self,
        command: str,
        args: Optional[List[str]] = None,
        env: Optional[Dict[str, str]] = None,
        workdir: Optional[str] = None,
        timeout: Union[str, float, None] = None,
        user: Optional[str] = None,
        stdin: Optional[str] = None,
    ) -> ExecStream:
        """Runs a command and yields its output as produced; ``exit_code`` is set afterwards."""
        body = self._exec_body(command, args, env, workdir, timeout, user, stdin, True)
        stream = ExecStream(lambda: self._http.ndjson("POST", self._path("/exec"), on_headers=stream._headers, body=body, timeout=None, sandbox_id=self.id))
        return stream

    def tracked_processes(self) -> List[Dict[str, Any]]:
        """The processes the sandbox tracks ({pid, command, tag, running, adopted}): its main process,
        E2B's commands and terminals, and those a server that went away left running."""
        return self._http.json("GET", self._path("/processes"), sandbox_id=self.id)

    def follow_process(self, pid: int) -> ExecStream:
        """Follows a tracked process again by pid: what it wrote unheard first, then its output;
        ``exit_code`` once it ends. Leaving the loop leaves the process running."""
        return ExecStream(lambda: self._http.ndjson("GET", self._path(f"/processes/{int(pid)}/output"), timeout=None, sandbox_id=self.id))

    def kill_process(self, pid: int, signal: Union[str, int] = "SIGKILL") -> int:
        """Sends a signal ("SIGTERM", "HUP", 9; default SIGKILL) to a tracked process; returns its number."""
        return int(self._http.json("POST", self._path(f"/processes/{int(pid)}/kill"), body={"signal": signal}, sandbox_id=self.id)["signal"])

    # -- files
    # -- code
    def run_code(
        self,
        code: str,
        language: Optional[str] = None,
        context: "Union[str, CodeContext, None]" = None,
        env: Optional[Dict[str, str]] = None,
        timeout: Union[str, float, int, None] = None,
        on_stdout=None,
        on_stderr=None,
        on_result=None,
        on_error=None,
    ) -> Execution:
        """Runs code in a stateful context (Python by default): state persists between runs; the
        last expression's value and charts are results, an exception is ``error`` (not raised).
        Callbacks get output as it comes."""
        return run_code(
            self._http,
            self.id,
            self._path(),
            code,
            language=language,
            context=context,
            env=env,
            timeout=_duration(timeout),
            timeout_s=_seconds(timeout),
            on_stdout=on_stdout,
            on_stderr=on_stderr,
            on_result=on_result,
            on_error=on_error,
        )

    def create_code_context(self, language: Optional[str] = None, cwd: Optional[str] = None, user: Optional[str] = None) -> CodeContext:
        """Starts a new code context (python by default)."""
        data = self._http.json("POST", self._path("/code/contexts"), body={"language": language, "cwd": cwd, "user": user}, timeout=max(self._http.timeout, 60.0), sandbox_id=self.id)
        return _pick(CodeContext, data)

    def list_code_contexts(self) -> List[CodeContext]:
        return [_pick(CodeContext, c) for c in self._http.json("GET", self._path("/code/contexts"), sandbox_id=self.id)]

    def restart_code_context(self, context: "Union[str, CodeContext]") -> CodeContext:
        """Restarts a context: same id, fresh state."""
        cid = urllib.parse.quote(context_id(context) or "", safe="")
        return _pick(CodeContext, self._http.json("POST", self._path(f"/code/contexts/{cid}/restart"), timeout=max(self._http.timeout, 60.0), sandbox_id=self.id))

    def delete_code_context(self, context: "Union[str, CodeContext]") -> None:
        cid = urllib.parse.quote(context_id(context) or "", safe="")
        self._http.call("DELETE", self._path(f"/code/contexts/{cid}"), sandbox_id=self.id)

    # -- files
    def write_file(self, path: str, content: Union[str, bytes], mode: Optional[str] = None) -> None:
        """Writes text or bytes, creating parent directories; ``mode`` like "0644"."""
        if isinstance(content, str):
            self._http.call("POST", self._path("/files"), body={"path": path, "content": content, "mode": mode}, timeout=None, sandbox_id=self.id)
        else:
            self._http.call("POST", self._path("/files"), raw=bytes(content), query={"path": path, "mode": mode}, timeout=None, sandbox_id=self.id)

    def read_file(self, path: str, binary: bool = False) -> Union[str, bytes]:
        """Reads a file as UTF-8 text, or as bytes with ``binary=True``."""
        with self._http.open("GET", self._path("/files"), query={"path": path}, timeout=None, sandbox_id=self.id) as res:
            data = res.read()
        return data if binary else data.decode("utf-8")

    def read_file_bytes(self, path: str) -> bytes:
        return self.read_file(path, binary=True)  # type: ignore[return-value]

    def commit(self, image: str, changes: Optional[Dict[str, Any]] = None, squash: bool = False, comment: Optional[str] = None, pause: bool = True) -> Dict[str, Any]:
        """Makes image ``image`` (NAME[:TAG]) from this sandbox's disk: one layer on top of its image."""
        body = {"image": image, "changes": changes, "squash": squash or None, "comment": comment, "pause": None if pause else False}
        return self._http.json("POST", self._path("/commit"), body=body, timeout=None, sandbox_id=self.id)

    def download_archive(self, path: str) -> bytes:
        """A file or directory tree as tar bytes (entries named from the path's last component; modes and links kept)."""
        with self._http.open("GET", self._path("/archive"), query={"path": path}, timeout=None, sandbox_id=self.id) as res:
            return res.read()

    def upload_archive(self, path: str, tar: bytes) -> Dict[str, int]:
        """Extracts tar bytes into a directory (created if missing); returns ``{"entries", "bytes"}`` written."""
        r = self._http.json("PUT", self._path("/archive"), raw=bytes(tar), query={"path": path}, timeout=None, sandbox_id=self.id)
        return {"entries": r["entries"], "bytes": r["bytes"]}

    def list_files(self, path: str = "/") -> List[FileInfo]:
        return [_pick(FileInfo, f) for f in self._http.json("GET", self._path("/files/list"), query={"path": path}, sandbox_id=self.id)]

    def stat_file(self, path: str) -> FileInfo:
        return _pick(FileInfo, self._http.json("GET", self._path("/files/stat"), query={"path": path}, sandbox_id=self.id))

    def glob_files(self, pattern: str) -> List[str]:
        return self._http.json("GET", self._path("/files/glob"), query={"pattern": pattern}, sandbox_id=self.id)

    def move_file(self, old_path: str, new_path: str) -> None:
        self._http.call("POST", self._path("/files/move"), body={"old_path": old_path, "new_path": new_path}, sandbox_id=self.id)

    def chmod_file(self, path: str, mode: "Union[str, int]") -> None:
        """Sets permission bits: an octal string like "755", or a number like 0o755."""
        octal = format(mode, "o") if isinstance(mode, int) else mode
        self._http.call("POST", self._path("/files/chmod"), body={"path": path, "mode": octal}, sandbox_id=self.id)

    def delete_file(self, path: str, recursive: bool = False) -> None:
        self._http.call("DELETE", self._path("/files"), query={"path": path, "recursive": "true" if recursive else None}, sandbox_id=self.id)

    # -- lifetime
    def extend_ttl(self, ttl: str = "30m") -> "Sandbox":
        """Sets the expiry to ``ttl`` from now; returns the sandbox, its new expiry in ``info.expires_at``."""
        self._info = _pick(SandboxInfo, self._http.json("POST", self._path("/extend"), body={"ttl": ttl}, sandbox_id=self.id))
        return self

    def network(self) -> Dict[str, Any]:
        """The sandbox's network: ``{"mode", "allow", "ports", "proxy"?}``."""
        return self._http.json("GET", self._path("/network"), sandbox_id=self.id)

    def set_allowlist(self, allow: List[str]) -> Dict[str, Any]:
        """Replaces the egress allowlist; the sandbox's next request is decided by the new one."""
        return self._http.json("PUT", self._path("/network/allow"), body={"allow": allow}, sandbox_id=self.id)

    def update_network(self, mode: Optional[str] = None, allow: Optional[List[str]] = None, deny: Any = _KEEP, egress_rules: Any = _KEEP) -> Dict[str, Any]:
        """Changes the running sandbox's egress; what is left out is kept. ``mode`` "none" or "allowlist" for any sandbox
        ("full" only for one made with it); ``deny=[]`` opens egress but for the listed ranges, ``deny=None`` allows only the allowlist."""
        body: Dict[str, Any] = {}
        if mode is not None:
            body["mode"] = mode
        if allow is not None:
            body["allow"] = allow
        if deny is not _KEEP:
            body["deny"] = deny
        if egress_rules is not _KEEP:
            body["egress_rules"] = egress_rules
        return self._http.json("PUT", self._path("/network"), body=body, sandbox_id=self.id)

    def set_egress_rules(self, rules: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
        """Replaces the egress rules (headers the proxy adds per destination, secrets by placeholder); ``{}`` clears them."""
        return self._http.json("PUT", self._path("/network/rules"), body={"egress_rules": rules}, sandbox_id=self.id)

    def egress(self, lines: int = 100) -> List[Dict[str, Any]]:
        """The latest egress decisions (allowed and refused requests), oldest first."""
        return self._http.json("GET", self._path(f"/egress?lines={int(lines)}"), sandbox_id=self.id)

    def publish_port(self, spec: str) -> Dict[str, Any]:
        """Publishes a guest port on the host ("8080:80"; host port 0 picks a free one)."""
        return self._http.json("POST", self._path("/ports"), body={"port": spec}, sandbox_id=self.id)

    def unpublish_port(self, host_port: int) -> None:
        self._http.json("DELETE", self._path(f"/ports/{int(host_port)}"), sandbox_id=self.id)

    def fork(self, count: int = 1, ttl: Optional[str] = None, forkable: Optional[bool] = None) -> List["Sandbox"]:
        """Running copies of this sandbox as it is now, each with its own identity; ``forkable`` copies keep RAM files of their own."""
        r = self._http.json("POST", self._path("/fork"), body={"count": count, "ttl": ttl, "forkable": forkable}, timeout=None, sandbox_id=self.id)
        return [Sandbox(self._http, s) for s in r["sandboxes"]]

    def snapshot(self, name: Optional[str] = None) -> Dict[str, Any]:
        """Snapshots this sandbox (it keeps running); restore it with Client.restore."""
        return self._http.json("POST", self._path("/snapshot"), body={"name": name}, timeout=None, sandbox_id=self.id)

    def pause(self, memory: bool = True) -> "Sandbox":
        """Pauses it: memory, processes and streams kept, no VM held; any later call resumes it first. ``memory=False`` keeps the disk only."""
        body = None if memory else {"memory": False}
        self._info = _pick(SandboxInfo, self._http.json("POST", self._path("/pause"), body=body, timeout=None, sandbox_id=self.id))
        return self

    def resume(self, ttl: Optional[str] = None) -> "Sandbox":
        """Resumes it as it was (``ttl``: its life from now; default what it had left)."""
        self._info = _pick(SandboxInfo, self._http.json("POST", self._path("/resume"), body={"ttl": ttl}, timeout=None, sandbox_id=self.id))
        return self

    def refresh(self) -> "Sandbox":
        self._info = _pick(SandboxInfo, self._http.json("GET", self._path(), sandbox_id=self.id))
        return self

    def destroy(self) -> None:
        """Destroys the sandbox; calling it again is harmless."""
        self._http.call("DELETE", self._path(), sandbox_id=self.id)
        self._info.state = "destroyed"

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.destroy()

    def __repr__(self) -> str:
        return f"Sandbox(id={self.id!r}, state={self.state!r})"
