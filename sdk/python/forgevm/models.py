"""Wire shapes of the ForgeVM REST API: dataclasses for what the SDK wraps, TypedDicts for the
dicts it hands back as they came. A test compares each with the server's OpenAPI document."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Optional, TypedDict


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
    network: Optional[Dict[str, Any]] = None
    name: Optional[str] = None
    main: Optional[Dict[str, Any]] = None
    idle_stop: Optional[str] = None
    #: What it does once idle: {"after": "30s", "action": "pause" | "stop" | "none"}.
    idle: Optional[Dict[str, str]] = None
    #: Why it is paused (state "paused"): "request", "timeout" or "idle".
    paused_reason: Optional[str] = None
    #: Its RAM is a file of its own: forks stop it only to copy that file, pauses copy nothing.
    forkable: Optional[bool] = None
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


class PortMapping(TypedDict):
    host_ip: str
    host_port: int
    guest_port: int


class NetworkInfo(TypedDict, total=False):
    """A sandbox's network: mode ("none", "allowlist", "full"), egress allowlist, published ports."""

    mode: str
    allow: List[str]
    ports: List[PortMapping]
    proxy: str
    cache: bool


class SecretDecl(TypedDict, total=False):
    name: str
    inject_at: str


class Template(TypedDict, total=False):
    """A template as the server returns it (``vcpus``/``ttl`` are other names of ``cpu_cores``/``ttl_seconds``)."""

    name: str
    version: str
    image: str
    description: str
    setup: List[str]
    allowed_hosts: List[str]
    memory_mb: int
    cpu_cores: int
    vcpus: int
    ttl_seconds: int
    ttl: str
    env: Dict[str, str]
    secrets: List[SecretDecl]
    pool_size: int
    #: What its sandboxes do once idle: {"after": "30s", "action": "pause" | "stop" | "none"}.
    idle: Dict[str, str]
    #: Its sandboxes keep their RAM in a file of their own (fast forks and pauses).
    forkable: bool
    provider: str
    metadata: Dict[str, str]
    created_at: str
    updated_at: str


class SnapshotInfo(TypedDict, total=False):
    id: str
    name: str
    kind: str
    state: str
    source_id: str
    image: str
    template: str
    memory_mb: int
    vcpus: int
    disk_mb: int
    format: str
    size_bytes: int
    created_at: str


class ImageInfo(TypedDict, total=False):
    name: str
    digest: str
    size: int
    created_at: str
    source: str
    in_use: bool
    layers: int
    parent: str


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
