"""Wire shapes of the ForgeVM REST API: dataclasses for what the SDK wraps and fills in as output
streams (a test compares their fields with the server's OpenAPI document), and the TypedDicts of
the dicts it hands back as they came, generated from the server's schemas into wire.py."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Optional

from .wire import ImageInfo, NetworkInfo, PortMapping, SnapshotInfo, Template

__all__ = ["CodeContext", "CodeError", "Execution", "ExecResult", "FileInfo", "ImageInfo", "NetworkInfo", "PortMapping", "SandboxInfo", "SnapshotInfo", "StreamChunk", "Template"]


def _pick(cls: Any, data: Dict[str, Any]) -> Any:
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})


@dataclass
class ExecResult:
    """Result of a command: a non-zero exit code is a result, not an exception."""

    exit_code: int
    stdout: str
    stderr: str
    duration: str = ""
    timed_out: bool = False
    truncated: bool = False


@dataclass
class StreamChunk:
    stream: str
    data: str


@dataclass
class SandboxInfo:
    id: str
    state: str
    provider: str
    image: str
    memory_mb: int = 512
    vcpus: int = 1
    created_at: str = ""
    # None: it lives until it is destroyed (ttl "0", or a service with a restart policy).
    expires_at: Optional[str] = ""
    owner_id: Optional[str] = None
    vm_id: Optional[str] = None
    metadata: Dict[str, str] = field(default_factory=dict)
    error: Optional[str] = None
    #: When it ended, why ("request", "ttl", "auto-delete", "session end", "server stop", "failed") and who ended it.
    destroyed_at: Optional[str] = None
    end_reason: Optional[str] = None
    ended_by: Optional[str] = None
    network: Optional[Dict[str, Any]] = None
    name: Optional[str] = None
    #: The account commands (and ssh) run as when a call names none, when it is not root.
    user: Optional[str] = None
    main: Optional[Dict[str, Any]] = None
    idle_stop: Optional[str] = None
    #: What it does once idle: {"after": "30s", "action": "pause" | "stop" | "none"}.
    idle: Optional[Dict[str, str]] = None
    #: Why it is paused (state "paused"): "request", "timeout", "idle" or "server" (its server stopped with server.on_stop: pause).
    paused_reason: Optional[str] = None
    #: Its RAM is a file of its own: forks stop it only to copy that file, pauses copy nothing.
    forkable: Optional[bool] = None
    #: "systemd": it boots its image's systemd as init, the agent as its first service.
    init: Optional[str] = None
    volumes: Optional[List[Dict[str, Any]]] = None
    host_dirs: Optional[List[Dict[str, Any]]] = None
    #: Said by sandboxes whose provider is no security boundary (local).
    warning: Optional[str] = None
    #: In a cluster: the node it lives on.
    node: Optional[str] = None


@dataclass
class FileInfo:
    path: str
    name: str
    size: int
    mode: str
    is_dir: bool
    mod_time: str


@dataclass
class CodeError:
    """The exception code raised."""

    name: str
    value: str
    traceback: str = ""


@dataclass
class Execution:
    """What running code produced: its output, results (last expression, charts) and error."""

    results: List[Dict[str, Any]] = field(default_factory=list)
    stdout: str = ""
    stderr: str = ""
    error: Optional[CodeError] = None
    execution_count: int = 0
    context: str = ""
    duration: str = ""

    @property
    def text(self) -> Optional[str]:
        """The text of the main result (the last expression's value), if there is one."""
        for r in self.results:
            if r.get("is_main_result"):
                return r.get("text")
        return None


@dataclass
class CodeContext:
    """A stateful code context: variables, imports and working directory persist between runs."""

    id: str
    language: str
    cwd: str
    user: Optional[str] = None
