"""Wire shapes of the ForgeVM REST API as dataclasses."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Dict, Optional


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
    expires_at: str = ""
    owner_id: Optional[str] = None
    vm_id: Optional[str] = None
    metadata: Dict[str, str] = field(default_factory=dict)
    error: Optional[str] = None


@dataclass
class FileInfo:
    path: str
    name: str
    size: int
    mode: str
    is_dir: bool
    mod_time: str
