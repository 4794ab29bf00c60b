"""ForgeVM Python SDK (standard library only): disposable, isolated microVMs for AI agents."""

from .async_client import AsyncClient, AsyncDesktop, AsyncExecStream, AsyncSandbox
from .client import Client, Templates
from .desktop import Desktop
from .environments import Environments
from .errors import (
    AuthenticationError,
    BadRequestError,
    ConflictError,
    ConnectionError,
    ERROR_CLASSES,
    ForbiddenError,
    ForgevmConnectionError,
    ForgevmError,
    NotFoundError,
    ProviderError,
    SandboxNotFound,
    SandboxNotFoundError,
    StorageFullError,
)
from .models import CodeContext, CodeError, Execution, ExecResult, FileInfo, ImageInfo, NetworkInfo, SandboxInfo, SnapshotInfo, StreamChunk, Template
from .sandbox import Sandbox
from .streaming import ExecStream
from .tools import anthropic_tools, handle_tool_call, openai_tools

__version__ = "0.1.0"

__all__ = [
    "AsyncClient",
    "AsyncDesktop",
    "AsyncExecStream",
    "AsyncSandbox",
    "Environments",
    "AuthenticationError",
    "BadRequestError",
    "Client",
    "CodeContext",
    "CodeError",
    "Desktop",
    "ConflictError",
    "ConnectionError",
    "ERROR_CLASSES",
    "ExecResult",
    "ExecStream",
    "Execution",
    "FileInfo",
    "ForbiddenError",
    "ForgevmConnectionError",
    "ForgevmError",
    "NotFoundError",
    "ProviderError",
    "Sandbox",
    "SandboxInfo",
    "SnapshotInfo",
    "SandboxNotFound",
    "SandboxNotFoundError",
    "StorageFullError",
    "StreamChunk",
    "Template",
    "ImageInfo",
    "NetworkInfo",
    "Templates",
    "anthropic_tools",
    "handle_tool_call",
    "openai_tools",
]
