"""The client: spawns and finds sandboxes, manages templates and snapshots, reports on the server."""

from __future__ import annotations

import fnmatch
import io
import os
import tarfile
import urllib.parse
from typing import Any, Callable, Dict, Iterator, List, Optional

from ._http import DEFAULT_TIMEOUT, SPAWN_TIMEOUT, Transport
from .environments import Environments
from .errors import error_from_body
from .models import ImageInfo, SandboxInfo, _pick
from .sandbox import Sandbox


def _q(s: str) -> str:
    return urllib.parse.quote(s, safe="")


class Templates:
    """Templates stored on the server: named spawn settings, setup commands, warm pools."""

    def __init__(self, http: Transport):
        self._http = http

    def list(self) -> List[Dict[str, Any]]:
        return self._http.json("GET", "/templates")

    def get(self, name: str) -> Dict[str, Any]:
        return self._http.json("GET", f"/templates/{_q(name)}")

    def create(self, name: str, **fields: Any) -> Dict[str, Any]:
        return self._http.json("POST", "/templates", body={"name": name, **fields})

    def update(self, name: str, **fields: Any) -> Dict[str, Any]:
        return self._http.json("PUT", f"/templates/{_q(name)}", body=fields)

    def delete(self, name: str) -> None:
        self._http.call("DELETE", f"/templates/{_q(name)}")

    def spawn(self, name: str, ttl: Optional[str] = None, owner_id: Optional[str] = None, secrets: Optional[Dict[str, str]] = None) -> Sandbox:
        return Sandbox(self._http, self._http.json("POST", f"/templates/{_q(name)}/spawn", body={"ttl": ttl, "owner_id": owner_id, "secrets": secrets}, timeout=SPAWN_TIMEOUT))


class Client:
    """``Client("http://localhost:7423", api_key=None, user_id=None, timeout=30)``."""

    def __init__(self, base_url: str = "http://localhost:7423", api_key: Optional[str] = None, user_id: Optional[str] = None, timeout: float = DEFAULT_TIMEOUT):
        self._http = Transport(base_url, api_key, user_id, timeout)
        self.templates = Templates(self._http)
        self.environments = Environments(self._http)

    @property
    def base_url(self) -> str:
        return self._http.base_url

    def spawn(
        self,
        image: Optional[str] = None,
        memory_mb: Optional[int] = None,
        vcpus: Optional[int] = None,
        ttl: Optional[str] = None,
        template: Optional[str] = None,
        provider: Optional[str] = None,
        owner_id: Optional[str] = None,
        metadata: Optional[Dict[str, str]] = None,
        env: Optional[Dict[str, str]] = None,
        disk_mb: Optional[int] = None,
        user: Optional[str] = None,
        network: Optional[str] = None,
        allow: Optional[List[str]] = None,
        ports: Optional[List[str]] = None,
        secrets: Optional[Dict[str, str]] = None,
        name: Optional[str] = None,
        main: Optional[Dict[str, Any]] = None,
        idle_stop: Optional[str] = None,
        start: Optional[bool] = None,
        volumes: Optional[List[str]] = None,
        cache: Optional[bool] = None,
        idle: Optional[Dict[str, str]] = None,
        forkable: Optional[bool] = None,
        egress_rules: Optional[Dict[str, Dict[str, Any]]] = None,
        deny: Optional[List[str]] = None,
        forward: Optional[List[str]] = None,
        system: Optional[bool] = None,
        screen: Optional[Dict[str, int]] = None,
    ) -> Sandbox:
        """Starts a sandbox; ``with client.spawn(...) as sb:`` destroys it afterwards.

        ``network`` is "none" (loopback only, the default), "allowlist" or "full" (a network device onto the internet, never the host); ``allow`` lists hosts,
        ``*.domains``, IPs/CIDRs (with ``:port``) and presets such as "@pypi"; ``ports`` publishes
        guest ports ("8080:80"); ``secrets`` reach commands' environment and /run/secrets only.
        ``start=False`` only defines it (state "created", as ``docker create``); ``start(id)`` boots it.
        ``volumes`` mounts named volumes ("data:/data", "cache:/cache:ro"), creating missing ones.
        ``idle={"after": "30s", "action": "pause"}`` pauses it once idle; any later call resumes it first.
        ``egress_rules={"api.openai.com": {"headers": {"Authorization": "Bearer {{OPENAI_KEY}}"}}}`` (network "allowlist")
        has the egress proxy add those headers, the stored secret filled in, to requests for that host only.
        ``deny=[]`` (network "allowlist") opens egress to every public destination, ``deny=["10.0.0.0/8"]`` to all but those.
        ``forkable=True`` keeps its RAM in a file of its own: a fork stops it only to copy that file, a pause copies nothing.
        ``system=True`` boots the image's systemd as init (a system image such as ``forgevm/system:debian-12`` does by itself).
        ``screen={"width": 1280, "height": 800, "dpi": 120}`` sets a desktop sandbox's screen (the image ``forgevm/desktop:bookworm``).
        ``forward=["ssh-agent"]`` gives it an SSH_AUTH_SOCK that reaches the ssh agent where the server runs (signatures, never keys); ``"git"`` gives its git the server user's credentials for the hosts its egress allows.
        """
        body = {
            "image": image, "memory_mb": memory_mb, "vcpus": vcpus, "ttl": ttl, "template": template, "provider": provider,
            "owner_id": owner_id, "metadata": metadata, "env": env, "disk_mb": disk_mb, "user": user,
            "network": network, "allow": allow, "ports": ports, "secrets": secrets, "name": name, "main": main, "idle_stop": idle_stop, "start": start,
            "volumes": volumes, "cache": cache, "idle": idle, "forkable": forkable, "egress_rules": egress_rules, "deny": deny,
            "forward": forward, "system": system, "screen": screen,
        }
        return Sandbox(self._http, self._http.json("POST", "/sandboxes", body=body, timeout=max(self._http.timeout, SPAWN_TIMEOUT)))

    def get(self, sandbox_id: str) -> Sandbox:
        return Sandbox(self._http, self._http.json("GET", f"/sandboxes/{_q(sandbox_id)}", sandbox_id=sandbox_id))

    def list(self, all: bool = False, state: Optional[List[str]] = None) -> List[SandboxInfo]:
        """Live sandboxes; with ``all=True`` stopped, failed and destroyed ones too; ``state`` picks states."""
        query = {"all": "true" if all else None, "state": ",".join(state) if state else None}
        return [_pick(SandboxInfo, s) for s in self._http.json("GET", "/sandboxes", query=query)]

    def stop(self, sandbox_id: str, timeout: Optional[str] = None) -> SandboxInfo:
        """Stops a running sandbox (SIGTERM to its main process, SIGKILL after ``timeout``); its disk is kept."""
        return _pick(SandboxInfo, self._http.json("POST", f"/sandboxes/{_q(sandbox_id)}/stop", body={"timeout": timeout}, sandbox_id=sandbox_id, timeout=None))

    def start(self, sandbox_id: str, ttl: Optional[str] = None) -> SandboxInfo:
        """Starts a stopped sandbox again, files as they were, its main process anew."""
        return _pick(SandboxInfo, self._http.json("POST", f"/sandboxes/{_q(sandbox_id)}/start", body={"ttl": ttl}, sandbox_id=sandbox_id, timeout=None))

    def pause(self, sandbox_id: str, memory: bool = True) -> SandboxInfo:
        """Pauses a running sandbox: memory, processes and streams kept, no VM held; any later call resumes it. ``memory=False`` keeps the disk only."""
        body = None if memory else {"memory": False}
        return _pick(SandboxInfo, self._http.json("POST", f"/sandboxes/{_q(sandbox_id)}/pause", body=body, sandbox_id=sandbox_id, timeout=None))

    def resume(self, sandbox_id: str, ttl: Optional[str] = None) -> SandboxInfo:
        """Resumes a paused sandbox as it was (``ttl``: its life from now; default what it had left)."""
        return _pick(SandboxInfo, self._http.json("POST", f"/sandboxes/{_q(sandbox_id)}/resume", body={"ttl": ttl}, sandbox_id=sandbox_id, timeout=None))

    def restart(self, sandbox_id: str, timeout: Optional[str] = None) -> SandboxInfo:
        """Stops (when running) and starts a sandbox."""
        return _pick(SandboxInfo, self._http.json("POST", f"/sandboxes/{_q(sandbox_id)}/restart", body={"timeout": timeout}, sandbox_id=sandbox_id, timeout=None))

    def kill(self, sandbox_id: str, signal: Any = "SIGKILL") -> int:
        """Sends a signal ("SIGTERM", "HUP", 9) to a sandbox's main process."""
        return int(self._http.json("POST", f"/sandboxes/{_q(sandbox_id)}/kill", body={"signal": signal}, sandbox_id=sandbox_id)["signal"])

    def processes(self, sandbox_id: str) -> List[Dict[str, Any]]:
        """The processes running in a sandbox ({pid, ppid, user, state, rss_bytes, cpu_seconds, command})."""
        return self._http.json("GET", f"/sandboxes/{_q(sandbox_id)}/top", sandbox_id=sandbox_id)

    def main_logs(self, sandbox_id: str, tail: Optional[int] = None, since: Optional[str] = None, follow: bool = False) -> Iterator[Dict[str, Any]]:
        """The main process's output lines ({ts, stream, line}); with ``follow``, as they are written until the sandbox stops."""
        query = {"tail": None if tail is None else str(tail), "since": since, "follow": "true" if follow else None}
        path = f"/sandboxes/{_q(sandbox_id)}/main/logs"
        if follow:
            return self._http.ndjson("GET", path, query=query, sandbox_id=sandbox_id, timeout=None)
        return iter(self._http.json("GET", path, query=query, sandbox_id=sandbox_id)["lines"])

    def prune(self) -> int:
        """Destroys every expired sandbox; returns how many."""
        return int(self._http.json("DELETE", "/sandboxes")["pruned"])

    def health(self) -> Dict[str, Any]:
        return self._http.json("GET", "/health")

    def pool_status(self) -> Dict[str, Any]:
        return self._http.json("GET", "/pool/status")

    def stats(self) -> Dict[str, Any]:
        """The newest sample of the host and of every running sandbox (what `forgevm stats` shows)."""
        return self._http.json("GET", "/stats")

    def metrics(self, sandbox_id: str, since: Optional[str] = None, step: Optional[str] = None) -> Dict[str, Any]:
        """A sandbox's metric history: `since` a duration ("10m", "24h") or a time, in buckets of `step` ("5s", "1m")."""
        query = {k: v for k, v in {"since": since, "step": step}.items() if v is not None}
        return self._http.json("GET", f"/sandboxes/{_q(sandbox_id)}/metrics", query=query, sandbox_id=sandbox_id)

    def host_metrics(self, since: Optional[str] = None, step: Optional[str] = None) -> Dict[str, Any]:
        """The host's metric history (CPU, memory, the data directory's disk, load)."""
        query = {k: v for k, v in {"since": since, "step": step}.items() if v is not None}
        return self._http.json("GET", "/host/metrics", query=query)

    def providers(self) -> List[Dict[str, Any]]:
        return self._http.json("GET", "/providers")

    def snapshots(self) -> List[Dict[str, Any]]:
        return self._http.json("GET", "/snapshots")

    def mcp_audit(self, session: Optional[str] = None, tool: Optional[str] = None, after: Optional[int] = None, limit: int = 100) -> List[Dict[str, Any]]:
        """Tool calls agents made through MCP, oldest first (the newest `limit`; arguments redacted)."""
        query = {"session": session, "tool": tool, "after": None if after is None else str(after), "limit": str(limit)}
        return self._http.json("GET", "/mcp/audit", query=query)["entries"]

    def mount(self, sandbox_id: str, host: str, path: str, read_only: bool = False) -> List[Dict[str, Any]]:
        """Mounts a host directory (inside the server's mounts.host_dirs) into a running sandbox, live."""
        return self._http.json("POST", f"/sandboxes/{_q(sandbox_id)}/mounts", body={"host": host, "path": path, "read_only": read_only}, sandbox_id=sandbox_id)

    def balloon(self, sandbox_id: str, memory_mb: Optional[int] = None) -> Dict[str, Any]:
        """A running sandbox's balloon; with memory_mb, first leaves it that much of the memory it
        was given (the rest goes back to the host), without a restart."""
        if memory_mb is None:
            return self._http.json("GET", f"/sandboxes/{_q(sandbox_id)}/balloon", sandbox_id=sandbox_id)
        return self._http.json("PUT", f"/sandboxes/{_q(sandbox_id)}/balloon", body={"memory_mb": memory_mb}, sandbox_id=sandbox_id, timeout=max(self._http.timeout, 60.0))

    def ssh(self, sandbox_id: str, public_keys: List[str], user: Optional[str] = None) -> Dict[str, Any]:
        """Readies a sandbox's sshd for these public keys (OpenSSH lines) and user (default: the
        sandbox's user): {"user", "host_keys", "port", "server"}. A paused sandbox is resumed."""
        body: Dict[str, Any] = {"public_keys": list(public_keys)}
        if user is not None:
            body["user"] = user
        return self._http.json("POST", f"/sandboxes/{_q(sandbox_id)}/ssh", body=body, sandbox_id=sandbox_id, timeout=max(self._http.timeout, 120.0))

    def unmount(self, sandbox_id: str, path: str) -> List[Dict[str, Any]]:
        """Unmounts a host directory from a running sandbox."""
        return self._http.json("DELETE", f"/sandboxes/{_q(sandbox_id)}/mounts", query={"path": path}, sandbox_id=sandbox_id)

    def volumes(self) -> List[Dict[str, Any]]:
        """Named volumes, with the sandboxes that mount each."""
        return list(self._http.json("GET", "/volumes"))

    def create_volume(self, name: str, size_mb: Optional[int] = None, labels: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
        """Creates an empty volume of ``size_mb`` (default 1024; sparse on the host)."""
        return self._http.json("POST", "/volumes", body={"name": name, "size_mb": size_mb, "labels": labels})

    def volume(self, name: str) -> Dict[str, Any]:
        return self._http.json("GET", f"/volumes/{_q(name)}")

    def delete_volume(self, name: str) -> None:
        """Deletes a volume and its data (refused while a sandbox mounts it)."""
        self._http.call("DELETE", f"/volumes/{_q(name)}")

    def secrets(self) -> List[Dict[str, Any]]:
        """Secrets kept on the server for egress rules (never their values)."""
        return list(self._http.json("GET", "/secrets"))

    def add_secret(self, name: str, value: str, description: Optional[str] = None, metadata: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
        """Stores a secret, sealed at rest; egress rules name it as ``{{NAME}}`` (case does not matter)."""
        return self._http.json("POST", "/secrets", body={"name": name, "value": value, "description": description, "metadata": metadata})

    def secret(self, name: str) -> Dict[str, Any]:
        return self._http.json("GET", f"/secrets/{_q(name)}")

    def update_secret(self, name: str, value: str, description: Optional[str] = None, metadata: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
        """Replaces a secret's value (its version goes up); rules use the new one on their next request."""
        return self._http.json("PUT", f"/secrets/{_q(name)}", body={"value": value, "description": description, "metadata": metadata})

    def delete_secret(self, name: str) -> None:
        self._http.call("DELETE", f"/secrets/{_q(name)}")

    def cluster_nodes(self) -> List[Dict[str, Any]]:
        """Through a cluster's front: the nodes with their state (up, down), heartbeat age and load."""
        return list(self._http.json("GET", "/cluster/nodes"))

    def cluster_keys(self) -> List[Dict[str, Any]]:
        """Through a front, with the operator's key: the cluster's API keys (never the keys themselves)."""
        return list(self._http.json("GET", "/cluster/keys"))

    def create_cluster_key(self, name: str) -> Dict[str, Any]:
        """Makes a cluster API key for ``name``; the answer's ``key`` is the only place it is shown."""
        return self._http.json("POST", "/cluster/keys", body={"name": name})

    def revoke_cluster_key(self, key_id: str) -> None:
        """Revokes a cluster API key: every front refuses it within seconds."""
        self._http.call("DELETE", f"/cluster/keys/{_q(key_id)}")

    def build(
        self,
        context: str,
        tag: str,
        dockerfile: Optional[str] = None,
        build_args: Optional[Dict[str, str]] = None,
        network: Optional[str] = None,
        allow: Optional[List[str]] = None,
        no_cache: bool = False,
        target: Optional[str] = None,
        on_log: Optional[Callable[[str], None]] = None,
    ) -> Dict[str, Any]:
        """Builds image ``tag`` from the Dockerfile in directory ``context`` (.dockerignore applies); returns the finished job.

        ``on_log`` gets each log line as the server writes it. A failed build raises ForgevmError.
        """
        query = {
            "tag": tag, "dockerfile": dockerfile, "network": network, "allow": allow, "target": target,
            "build_arg": [f"{k}={v}" for k, v in (build_args or {}).items()] or None, "no_cache": "true" if no_cache else None,
        }
        job = self._http.json("POST", "/builds", raw=_context_tar(context, dockerfile or "Dockerfile"), query=query, timeout=None, content_type="application/x-tar")
        for msg in self._http.ndjson("GET", f"/builds/{_q(job['id'])}/log", timeout=None):
            if "line" in msg and on_log:
                on_log(msg["line"])
        job = self._http.json("GET", f"/builds/{_q(job['id'])}")
        if job["state"] != "done":
            raise error_from_body({"code": job.get("error_code") or "BAD_REQUEST", "message": job.get("error") or f"the build ended {job['state']}"})
        return job

    def images(self) -> List[ImageInfo]:
        """Local images on the server."""
        return list(self._http.json("GET", "/images"))

    def remove_image(self, name: str) -> None:
        """Removes a local image (refused while a sandbox or a kept snapshot uses it) and the blobs no image needs."""
        self._http.call("DELETE", f"/images/{_q(name)}")

    def commit(self, sandbox_id: str, image: str, changes: Optional[Dict[str, Any]] = None, squash: bool = False, comment: Optional[str] = None, pause: bool = True) -> Dict[str, Any]:
        """Makes image ``image`` (NAME[:TAG]) from a running sandbox's disk: one layer on top of its image (all in one with ``squash``).

        ``changes`` sets the new image's config: cmd, entrypoint, env (a dict), workdir, user, labels, expose.
        """
        body = {"image": image, "changes": changes, "squash": squash or None, "comment": comment, "pause": None if pause else False}
        return self._http.json("POST", f"/sandboxes/{_q(sandbox_id)}/commit", body=body, sandbox_id=sandbox_id, timeout=None)

    def export_image(self, name: str, path: str) -> str:
        """Writes an image as an OCI archive (which ``docker load``, skopeo and Podman read) to ``path``; returns its manifest digest."""
        headers = self._http.download(f"/images/{_q(name)}/export", path)
        return headers.get("docker-content-digest", "")

    def push_image(self, name: str, reference: Optional[str] = None) -> Dict[str, Any]:
        """Pushes a local image to a registry (``reference``, default its own name) with the server's registry credentials."""
        return self._http.json("POST", f"/images/{_q(name)}/push", body={"reference": reference} if reference else {}, timeout=None)

    def restore(self, snapshot: str, count: int = 1, ttl: Optional[str] = None, forkable: Optional[bool] = None) -> List[Sandbox]:
        """Starts sandboxes from a snapshot (id or name), each as the sandbox was when it was taken; ``forkable`` as in spawn."""
        r = self._http.json("POST", f"/snapshots/{_q(snapshot)}/spawn", body={"count": count, "ttl": ttl, "forkable": forkable}, timeout=None)
        return [Sandbox(self._http, s) for s in r["sandboxes"]]

    def export_snapshot(self, snapshot: str, path: str) -> str:
        """Writes a named snapshot as an archive to ``path``, to import on another host (same VMM build, its image there)."""
        self._http.download(f"/snapshots/{_q(snapshot)}/export", path)
        return path

    def import_snapshot(self, path: str, name: Optional[str] = None) -> Dict[str, Any]:
        """Makes a snapshot here from an exported archive; ``name`` replaces the one it carries."""
        with open(path, "rb") as f:
            return self._http.json("POST", "/snapshots/import", raw=f.read(), query={"name": name}, timeout=None, content_type="application/x-tar")

    def delete_snapshot(self, snapshot: str) -> None:
        self._http.call("DELETE", f"/snapshots/{_q(snapshot)}")

    def close(self) -> None:
        """Nothing to release (every request has its own connection); for symmetry with AsyncClient."""

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _context_tar(context: str, dockerfile: str) -> bytes:
    """The build context as tar bytes, without what .dockerignore leaves out (the Dockerfile always goes)."""
    rules: List[Any] = []
    try:
        with open(os.path.join(context, ".dockerignore"), encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith("#"):
                    keep = line.startswith("!")
                    pattern = (line[1:] if keep else line).strip().strip("/")
                    rules.append((pattern, keep))
    except FileNotFoundError:
        pass

    def ignored(rel: str) -> bool:
        parts = rel.split("/")
        out = False
        for n in range(1, len(parts) + 1):
            sub = "/".join(parts[:n])
            for pattern, keep in rules:
                if fnmatch.fnmatchcase(sub, pattern) or (pattern.startswith("**/") and fnmatch.fnmatchcase(sub, pattern[3:])):
                    out = not keep
        return out

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for root, dirs, files in os.walk(context):
            dirs.sort()
            for name in sorted(dirs) + sorted(files):
                full = os.path.join(root, name)
                rel = os.path.relpath(full, context).replace(os.sep, "/")
                if rel not in (dockerfile, ".dockerignore") and ignored(rel):
                    if name in dirs:
                        dirs.remove(name)
                    continue
                tar.add(full, arcname=rel, recursive=False)
    return buf.getvalue()
