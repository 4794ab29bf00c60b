"""asyncio flavour: the same calls as Client and Sandbox, awaited (blocking I/O runs in threads)."""

from __future__ import annotations

import asyncio
import functools
from typing import Any, AsyncIterator, Callable, Dict, List, Optional, TypeVar, Union

from ._http import DEFAULT_TIMEOUT
from .client import Client
from .models import CodeContext, ExecResult, Execution, FileInfo, SandboxInfo, StreamChunk
from .desktop import Desktop
from .sandbox import Sandbox
from .streaming import ExecStream

T = TypeVar("T")


async def _run(fn: Callable[..., T], *args: Any, **kw: Any) -> T:
    return await asyncio.get_running_loop().run_in_executor(None, functools.partial(fn, *args, **kw))


class AsyncExecStream:
    """``async for chunk in stream``; ``exit_code`` is set once it has ended."""

    def __init__(self, stream: ExecStream):
        self._stream = stream
        self._it: Any = None

    @property
    def exit_code(self) -> Optional[int]:
        return self._stream.exit_code

    @property
    def pid(self) -> Optional[int]:
        return self._stream.pid

    def __aiter__(self) -> AsyncIterator[StreamChunk]:
        return self

    async def __anext__(self) -> StreamChunk:
        if self._it is None:
            self._it = iter(self._stream)
        chunk = await _run(next, self._it, None)
        if chunk is None:
            raise StopAsyncIteration
        return chunk


class AsyncDesktop:
    """``sandbox.desktop`` with its calls awaited: the same names and arguments as Desktop's."""

    def __init__(self, desktop: Desktop):
        self._d = desktop

    def __getattr__(self, name: str) -> Callable[..., Any]:
        fn = getattr(self._d, name)
        if name.startswith("_") or not callable(fn):
            raise AttributeError(name)
        return functools.partial(_run, fn)


class AsyncSandbox:
    """A sandbox whose calls are awaited; ``async with`` destroys it afterwards."""

    def __init__(self, sandbox: Sandbox):
        self._sb = sandbox
        self.desktop = AsyncDesktop(sandbox.desktop)

    @property
    def id(self) -> str:
        return self._sb.id

    @property
    def state(self) -> str:
        return self._sb.state

    @property
    def info(self) -> SandboxInfo:
        return self._sb.info

    async def exec(self, command: str, **kw: Any) -> ExecResult:
        return await _run(self._sb.exec, command, **kw)

    def exec_stream(self, command: str, **kw: Any) -> AsyncExecStream:
        return AsyncExecStream(self._sb.exec_stream(command, **kw))

    async def tracked_processes(self) -> List[Dict[str, Any]]:
        return await _run(self._sb.tracked_processes)

    def follow_process(self, pid: int) -> AsyncExecStream:
        return AsyncExecStream(self._sb.follow_process(pid))

    async def kill_process(self, pid: int, signal: Union[str, int] = "SIGKILL") -> int:
        return await _run(self._sb.kill_process, pid, signal)

    async def network(self) -> Dict[str, Any]:
        return await _run(self._sb.network)

    async def set_allowlist(self, allow: List[str]) -> Dict[str, Any]:
        return await _run(self._sb.set_allowlist, allow)

    async def update_network(self, **change: Any) -> Dict[str, Any]:
        return await _run(lambda: self._sb.update_network(**change))

    async def set_egress_rules(self, rules: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
        return await _run(self._sb.set_egress_rules, rules)

    async def egress(self, lines: int = 100) -> List[Dict[str, Any]]:
        return await _run(self._sb.egress, lines)

    async def publish_port(self, spec: str) -> Dict[str, Any]:
        return await _run(self._sb.publish_port, spec)

    async def unpublish_port(self, host_port: int) -> None:
        await _run(self._sb.unpublish_port, host_port)

    async def run_code(self, code: str, **kw: Any) -> Execution:
        """Sandbox.run_code, awaited (callbacks run in the worker thread)."""
        return await _run(self._sb.run_code, code, **kw)

    async def create_code_context(self, **kw: Any) -> CodeContext:
        return await _run(self._sb.create_code_context, **kw)

    async def list_code_contexts(self) -> List[CodeContext]:
        return await _run(self._sb.list_code_contexts)

    async def restart_code_context(self, context: Union[str, CodeContext]) -> CodeContext:
        return await _run(self._sb.restart_code_context, context)

    async def delete_code_context(self, context: Union[str, CodeContext]) -> None:
        await _run(self._sb.delete_code_context, context)

    async def write_file(self, path: str, content: Union[str, bytes], mode: Optional[str] = None) -> None:
        await _run(self._sb.write_file, path, content, mode)

    async def read_file(self, path: str, binary: bool = False) -> Union[str, bytes]:
        return await _run(self._sb.read_file, path, binary)

    async def commit(self, image: str, **kw: Any) -> Dict[str, Any]:
        """Makes image ``image`` from this sandbox's disk (see Sandbox.commit)."""
        return await _run(self._sb.commit, image, **kw)

    async def download_archive(self, path: str) -> bytes:
        return await _run(self._sb.download_archive, path)

    async def upload_archive(self, path: str, tar: bytes) -> Dict[str, int]:
        return await _run(self._sb.upload_archive, path, tar)

    async def list_files(self, path: str = "/") -> List[FileInfo]:
        return await _run(self._sb.list_files, path)

    async def stat_file(self, path: str) -> FileInfo:
        return await _run(self._sb.stat_file, path)

    async def glob_files(self, pattern: str) -> List[str]:
        return await _run(self._sb.glob_files, pattern)

    async def move_file(self, old_path: str, new_path: str) -> None:
        await _run(self._sb.move_file, old_path, new_path)

    async def chmod_file(self, path: str, mode: Union[str, int]) -> None:
        await _run(self._sb.chmod_file, path, mode)

    async def delete_file(self, path: str, recursive: bool = False) -> None:
        await _run(self._sb.delete_file, path, recursive)

    async def extend_ttl(self, ttl: str = "30m") -> "AsyncSandbox":
        await _run(self._sb.extend_ttl, ttl)
        return self

    async def fork(self, count: int = 1, ttl: Optional[str] = None, forkable: Optional[bool] = None) -> List["AsyncSandbox"]:
        return [AsyncSandbox(s) for s in await _run(self._sb.fork, count, ttl, forkable)]

    async def snapshot(self, name: Optional[str] = None) -> Dict[str, Any]:
        return await _run(self._sb.snapshot, name)

    async def pause(self, memory: bool = True) -> "AsyncSandbox":
        """Pauses it; any later call resumes it first."""
        await _run(self._sb.pause, memory)
        return self

    async def resume(self, ttl: Optional[str] = None) -> "AsyncSandbox":
        """Resumes it as it was."""
        await _run(self._sb.resume, ttl)
        return self

    async def refresh(self) -> "AsyncSandbox":
        await _run(self._sb.refresh)
        return self

    async def destroy(self) -> None:
        await _run(self._sb.destroy)

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.destroy()


class _Spawning:
    """``await client.spawn()`` or ``async with client.spawn() as sb``."""

    def __init__(self, coro: Any):
        self._coro = coro
        self._sb: Optional[AsyncSandbox] = None

    def __await__(self):
        return self._coro.__await__()

    async def __aenter__(self) -> AsyncSandbox:
        self._sb = await self._coro
        return self._sb

    async def __aexit__(self, *exc: Any) -> None:
        if self._sb is not None:
            await self._sb.destroy()


class AsyncTemplates:
    """Client.templates, awaited."""

    def __init__(self, client: Client):
        self._t = client.templates

    async def list(self) -> List[Dict[str, Any]]:
        return await _run(self._t.list)

    async def get(self, name: str) -> Dict[str, Any]:
        return await _run(self._t.get, name)

    async def create(self, name: str, **fields: Any) -> Dict[str, Any]:
        return await _run(self._t.create, name, **fields)

    async def update(self, name: str, **fields: Any) -> Dict[str, Any]:
        return await _run(self._t.update, name, **fields)

    async def delete(self, name: str) -> None:
        await _run(self._t.delete, name)

    async def spawn(self, name: str, ttl: Optional[str] = None, owner_id: Optional[str] = None) -> AsyncSandbox:
        return AsyncSandbox(await _run(self._t.spawn, name, ttl, owner_id))


class AsyncEnvironments:
    """Client.environments, awaited: every method of Environments, run off the event loop."""

    def __init__(self, client: Client):
        self._e = client.environments

    def __getattr__(self, name: str) -> Callable[..., Any]:
        fn = getattr(self._e, name)

        async def call(*args: Any, **kw: Any) -> Any:
            return await _run(fn, *args, **kw)

        return call


class AsyncClient:
    """``async with AsyncClient("http://localhost:7423") as client:``."""

    def __init__(self, base_url: str = "http://localhost:7423", api_key: Optional[str] = None, user_id: Optional[str] = None, timeout: float = DEFAULT_TIMEOUT):
        self._c = Client(base_url, api_key, user_id, timeout)
        self.templates = AsyncTemplates(self._c)
        self.environments = AsyncEnvironments(self._c)

    def spawn(self, **kw: Any) -> _Spawning:
        async def go() -> AsyncSandbox:
            return AsyncSandbox(await _run(self._c.spawn, **kw))

        return _Spawning(go())

    async def get(self, sandbox_id: str) -> AsyncSandbox:
        return AsyncSandbox(await _run(self._c.get, sandbox_id))

    async def list(self) -> List[SandboxInfo]:
        return await _run(self._c.list)

    async def prune(self) -> int:
        return await _run(self._c.prune)

    async def health(self) -> Dict[str, Any]:
        return await _run(self._c.health)

    async def pool_status(self) -> Dict[str, Any]:
        return await _run(self._c.pool_status)

    async def stats(self) -> Dict[str, Any]:
        return await _run(self._c.stats)

    async def metrics(self, sandbox_id: str, since: Optional[str] = None, step: Optional[str] = None) -> Dict[str, Any]:
        return await _run(self._c.metrics, sandbox_id, since, step)

    async def host_metrics(self, since: Optional[str] = None, step: Optional[str] = None) -> Dict[str, Any]:
        return await _run(self._c.host_metrics, since, step)

    async def providers(self) -> List[Dict[str, Any]]:
        return await _run(self._c.providers)

    async def snapshots(self) -> List[Dict[str, Any]]:
        return await _run(self._c.snapshots)

    async def stop(self, sandbox_id: str, timeout: Optional[str] = None) -> SandboxInfo:
        """Stops a running sandbox (SIGTERM to its main process, SIGKILL after ``timeout``); its disk is kept."""
        return await _run(self._c.stop, sandbox_id, timeout)

    async def start(self, sandbox_id: str, ttl: Optional[str] = None) -> SandboxInfo:
        """Starts a stopped sandbox again, files as they were, its main process anew."""
        return await _run(self._c.start, sandbox_id, ttl)

    async def pause(self, sandbox_id: str, memory: bool = True) -> SandboxInfo:
        """Pauses a running sandbox: memory, processes and streams kept; any later call resumes it."""
        return await _run(self._c.pause, sandbox_id, memory)

    async def resume(self, sandbox_id: str, ttl: Optional[str] = None) -> SandboxInfo:
        """Resumes a paused sandbox as it was."""
        return await _run(self._c.resume, sandbox_id, ttl)

    async def restart(self, sandbox_id: str, timeout: Optional[str] = None) -> SandboxInfo:
        """Stops (when running) and starts a sandbox."""
        return await _run(self._c.restart, sandbox_id, timeout)

    async def kill(self, sandbox_id: str, signal: Any = "SIGKILL") -> int:
        """Sends a signal to a sandbox's main process."""
        return await _run(self._c.kill, sandbox_id, signal)

    async def processes(self, sandbox_id: str) -> List[Dict[str, Any]]:
        """The processes running in a sandbox."""
        return await _run(self._c.processes, sandbox_id)

    async def main_logs(self, sandbox_id: str, tail: Optional[int] = None, since: Optional[str] = None) -> List[Dict[str, Any]]:
        """The main process's output lines ({ts, stream, line})."""
        return await _run(lambda: list(self._c.main_logs(sandbox_id, tail, since)))

    async def mcp_audit(self, session: Optional[str] = None, tool: Optional[str] = None, after: Optional[int] = None, limit: int = 100) -> List[Dict[str, Any]]:
        """Tool calls agents made through MCP, oldest first (the newest `limit`; arguments redacted)."""
        return await _run(self._c.mcp_audit, session, tool, after, limit)

    async def mount(self, sandbox_id: str, host: str, path: str, read_only: bool = False) -> List[Dict[str, Any]]:
        return await _run(self._c.mount, sandbox_id, host, path, read_only)

    async def balloon(self, sandbox_id: str, memory_mb: Optional[int] = None) -> Dict[str, Any]:
        return await _run(self._c.balloon, sandbox_id, memory_mb)

    async def ssh(self, sandbox_id: str, public_keys: List[str], user: Optional[str] = None) -> Dict[str, Any]:
        return await _run(self._c.ssh, sandbox_id, public_keys, user)

    async def unmount(self, sandbox_id: str, path: str) -> List[Dict[str, Any]]:
        return await _run(self._c.unmount, sandbox_id, path)

    async def volumes(self) -> List[Dict[str, Any]]:
        """Named volumes, with the sandboxes that mount each."""
        return await _run(self._c.volumes)

    async def create_volume(self, name: str, size_mb: Optional[int] = None, labels: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
        return await _run(self._c.create_volume, name, size_mb, labels)

    async def volume(self, name: str) -> Dict[str, Any]:
        return await _run(self._c.volume, name)

    async def delete_volume(self, name: str) -> None:
        await _run(self._c.delete_volume, name)

    async def secrets(self) -> List[Dict[str, Any]]:
        return await _run(self._c.secrets)

    async def add_secret(self, name: str, value: str, description: Optional[str] = None, metadata: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
        return await _run(self._c.add_secret, name, value, description, metadata)

    async def secret(self, name: str) -> Dict[str, Any]:
        return await _run(self._c.secret, name)

    async def update_secret(self, name: str, value: str, description: Optional[str] = None, metadata: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
        return await _run(self._c.update_secret, name, value, description, metadata)

    async def delete_secret(self, name: str) -> None:
        await _run(self._c.delete_secret, name)

    async def cluster_nodes(self) -> List[Dict[str, Any]]:
        return await _run(self._c.cluster_nodes)

    async def cluster_keys(self) -> List[Dict[str, Any]]:
        return await _run(self._c.cluster_keys)

    async def create_cluster_key(self, name: str) -> Dict[str, Any]:
        return await _run(self._c.create_cluster_key, name)

    async def revoke_cluster_key(self, key_id: str) -> None:
        await _run(self._c.revoke_cluster_key, key_id)

    async def build(self, context: str, tag: str, **kw: Any) -> Dict[str, Any]:
        """Builds image ``tag`` from the Dockerfile in directory ``context`` (see Client.build)."""
        return await _run(self._c.build, context, tag, **kw)

    async def images(self) -> List[Dict[str, Any]]:
        """Local images on the server."""
        return await _run(self._c.images)

    async def remove_image(self, name: str) -> None:
        await _run(self._c.remove_image, name)

    async def commit(self, sandbox_id: str, image: str, **kw: Any) -> Dict[str, Any]:
        """Makes image ``image`` from a running sandbox's disk (see Client.commit)."""
        return await _run(self._c.commit, sandbox_id, image, **kw)

    async def export_image(self, name: str, path: str) -> str:
        """Writes an image as an OCI archive to ``path``; returns its manifest digest."""
        return await _run(self._c.export_image, name, path)

    async def push_image(self, name: str, reference: Optional[str] = None) -> Dict[str, Any]:
        """Pushes a local image to a registry."""
        return await _run(self._c.push_image, name, reference)

    async def restore(self, snapshot: str, count: int = 1, ttl: Optional[str] = None, forkable: Optional[bool] = None) -> List[AsyncSandbox]:
        return [AsyncSandbox(s) for s in await _run(self._c.restore, snapshot, count, ttl, forkable)]

    async def export_snapshot(self, snapshot: str, path: str) -> str:
        return await _run(self._c.export_snapshot, snapshot, path)

    async def import_snapshot(self, path: str, name: Optional[str] = None) -> Dict[str, Any]:
        return await _run(self._c.import_snapshot, path, name)

    async def delete_snapshot(self, snapshot: str) -> None:
        await _run(self._c.delete_snapshot, snapshot)

    async def close(self) -> None:
        self._c.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
