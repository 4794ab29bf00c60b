#!/usr/bin/env python3
# ForgeVM's MCP gateway, run in the guest as E2B's SDK runs its own: `mcp-gateway --config JSON`
# with GATEWAY_ACCESS_TOKEN in the environment. It starts each configured stdio MCP server, and
# once all have answered `initialize` it writes the token to /etc/mcp-gateway/.token, serves
# Streamable HTTP MCP on :50005/mcp behind that token, and detaches; the command returns 0 then,
# or 1 with the reason on stderr (which the SDK raises as "Failed to start MCP gateway: …").
# Servers are `github/<owner>/<repo>` entries: the repository is taken from the image at
# /opt/mcp/github/<owner>/<repo>, or cloned there with git when the image has git and the sandbox
# may reach GitHub. The gateway answers with JSON (never SSE) and merges the servers' tools,
# prompts and resources into one server. Past 400 lines because it is one program, copied into
# the guest whole and run there with nothing but Python's standard library.
import argparse
import hmac
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import uuid

PORT = 50005
TOKEN_FILE = "/etc/mcp-gateway/.token"
SERVERS_ROOT = "/opt/mcp"
LOG_DIR = "/var/log/mcp-gateway"
START_TIMEOUT_S = 60
CALL_TIMEOUT_S = 300
MAX_BODY = 16 << 20
PROTOCOL_VERSIONS = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"]
CHILD_PROTOCOL = "2025-06-18"
SERVER_NAME = re.compile(r"github/[A-Za-z0-9_-][A-Za-z0-9_.-]*/[A-Za-z0-9_-][A-Za-z0-9_.-]*")


class GatewayError(Exception):
    pass


class RpcError(Exception):
    def __init__(self, code, message, data=None):
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


class Server:
    """One stdio MCP server: requests go out as JSON lines, answers are matched by id."""

    def __init__(self, name, cwd, cmd, env):
        self.name = name
        os.makedirs(LOG_DIR, exist_ok=True)
        self.log_path = os.path.join(LOG_DIR, name.replace("/", "_") + ".log")
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(["/bin/bash", "-c", cmd], cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log)
        log.close()
        self.lock = threading.Lock()
        self.pending = {}
        self.next_id = 0
        self.capabilities = {}
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if not isinstance(msg, dict):
                continue
            if "method" in msg and "id" in msg:
                # The server asks its client something (sampling, roots): the gateway offers none of it.
                self._send({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "the MCP gateway does not serve this to its servers"}})
            elif "id" in msg and ("result" in msg or "error" in msg):
                waiter = self.pending.pop(msg["id"], None)
                if waiter:
                    waiter[1] = msg
                    waiter[0].set()
        for waiter in list(self.pending.values()):
            waiter[0].set()
        self.pending.clear()

    def _send(self, msg):
        with self.lock:
            self.proc.stdin.write((json.dumps(msg) + "\n").encode())
            self.proc.stdin.flush()

    def tail(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-2000:].decode(errors="replace").strip()
        except OSError:
            return ""

    def request(self, method, params=None, timeout=CALL_TIMEOUT_S):
        if self.proc.poll() is not None:
            raise RpcError(-32603, f"MCP server {self.name} has exited ({self.proc.returncode}): {self.tail()}")
        with self.lock:
            self.next_id += 1
            rid = self.next_id
        waiter = [threading.Event(), None]
        self.pending[rid] = waiter
        msg = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        try:
            self._send(msg)
        except OSError:
            self.pending.pop(rid, None)
            raise RpcError(-32603, f"MCP server {self.name} has exited: {self.tail()}")
        if not waiter[0].wait(timeout):
            self.pending.pop(rid, None)
            raise RpcError(-32603, f"MCP server {self.name} did not answer {method} within {timeout} s")
        answer = waiter[1]
        if answer is None:
            raise RpcError(-32603, f"MCP server {self.name} exited during {method}: {self.tail()}")
        if "error" in answer:
            e = answer["error"] if isinstance(answer["error"], dict) else {}
            raise RpcError(e.get("code", -32603), str(e.get("message", "error")), e.get("data"))
        return answer.get("result") or {}

    def start(self):
        try:
            init = self.request("initialize", {"protocolVersion": CHILD_PROTOCOL, "capabilities": {}, "clientInfo": {"name": "forgevm-mcp-gateway", "version": "1"}}, START_TIMEOUT_S)
        except RpcError as e:
            raise GatewayError(f"{self.name}: {e.message}")
        self.capabilities = init.get("capabilities") or {}
        self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def all_pages(self, method, key):
        items, cursor = [], None
        for _ in range(100):
            page = self.request(method, {"cursor": cursor} if cursor else {})
            items.extend(page.get(key) or [])
            cursor = page.get("nextCursor")
            if not cursor:
                break
        return items


def repository(name, env):
    """The server's directory: the image's copy, else a clone (when git is there to make one)."""
    path = os.path.join(SERVERS_ROOT, name)
    if os.path.isdir(path):
        return path
    if not shutil.which("git"):
        raise GatewayError(f"{name}: not in this image (looked for {path}), and the image has no git to clone https://github.com/{name[len('github/'):]}")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    r = subprocess.run(["git", "clone", "--depth", "1", f"https://github.com/{name[len('github/'):]}.git", path], env=env, capture_output=True)
    if r.returncode != 0:
        raise GatewayError(f"{name}: git clone failed (does the sandbox's network allow github.com?): {r.stderr.decode(errors='replace').strip()[-1000:]}")
    return path


def parse_config(text):
    try:
        config = json.loads(text)
    except ValueError as e:
        raise GatewayError(f"--config is not JSON: {e}")
    if not isinstance(config, dict):
        raise GatewayError("--config must be a JSON object of servers")
    servers = []
    for name, spec in config.items():
        if not SERVER_NAME.fullmatch(name):
            raise GatewayError(f"{name}: this gateway serves github/<owner>/<repo> servers only; catalogue servers need the Docker MCP catalogue and the internet")
        if not isinstance(spec, dict) or not isinstance(spec.get("runCmd"), str) or not spec["runCmd"].strip():
            raise GatewayError(f"{name}.runCmd is required (a command that starts a stdio MCP server)")
        install = spec.get("installCmd")
        if install is not None and not isinstance(install, str):
            raise GatewayError(f"{name}.installCmd must be a string")
        envs = spec.get("envs") or {}
        if not isinstance(envs, dict) or not all(isinstance(v, str) for v in envs.values()):
            raise GatewayError(f"{name}.envs must be an object of strings")
        servers.append((name, spec["runCmd"], install, envs))
    return servers


def start_servers(config):
    servers = []
    for name, run_cmd, install, envs in config:
        env = dict(os.environ, **envs)
        env.pop("GATEWAY_ACCESS_TOKEN", None)
        cwd = repository(name, env)
        if install:
            r = subprocess.run(["/bin/bash", "-c", install], cwd=cwd, env=env, capture_output=True)
            if r.returncode != 0:
                out = (r.stdout + r.stderr).decode(errors="replace").strip()[-1000:]
                raise GatewayError(f"{name}: installCmd exited with {r.returncode}: {out}")
        server = Server(name, cwd, run_cmd, env)
        servers.append(server)
        server.start()
    return servers


class Gateway:
    """The servers as one: each tool, prompt and resource is routed to the server that offered it."""

    def __init__(self, servers):
        self.servers = servers
        self.sessions = set()
        self.routes = {"tools": {}, "prompts": {}, "resources": {}}

    def _merged(self, kind, method, key, field):
        out, routes = [], {}
        for s in self.servers:
            if kind not in s.capabilities:
                continue
            for item in s.all_pages(method, key):
                name = item.get(field)
                if not isinstance(name, str) or name in routes:
                    continue
                routes[name] = s
                out.append(item)
        self.routes[kind] = routes
        return out

    def _route(self, kind, name, method, key, field):
        if not isinstance(name, str):
            raise RpcError(-32602, f"{field} is required")
        if name not in self.routes[kind]:
            self._merged(kind, method, key, field)
        server = self.routes[kind].get(name)
        if server is None:
            raise RpcError(-32602, f"no server of this gateway offers {field} {name!r}")
        return server

    def handle(self, method, params):
        p = params if isinstance(params, dict) else {}
        if method == "ping":
            return {}
        if method == "tools/list":
            return {"tools": self._merged("tools", "tools/list", "tools", "name")}
        if method == "tools/call":
            return self._route("tools", p.get("name"), "tools/list", "tools", "name").request("tools/call", p)
        if method == "prompts/list":
            return {"prompts": self._merged("prompts", "prompts/list", "prompts", "name")}
        if method == "prompts/get":
            return self._route("prompts", p.get("name"), "prompts/list", "prompts", "name").request("prompts/get", p)
        if method == "resources/list":
            return {"resources": self._merged("resources", "resources/list", "resources", "uri")}
        if method == "resources/templates/list":
            out = []
            for s in self.servers:
                if "resources" in s.capabilities:
                    out.extend(s.all_pages("resources/templates/list", "resourceTemplates"))
            return {"resourceTemplates": out}
        if method == "resources/read":
            return self._route("resources", p.get("uri"), "resources/list", "resources", "uri").request("resources/read", p)
        raise RpcError(-32601, f"method not found: {method}")

    def initialize(self, params):
        asked = params.get("protocolVersion") if isinstance(params, dict) else None
        caps = {}
        for kind in ("tools", "prompts", "resources"):
            if any(kind in s.capabilities for s in self.servers):
                caps[kind] = {}
        return {
            "protocolVersion": asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0],
            "capabilities": caps,
            "serverInfo": {"name": "forgevm-mcp-gateway", "version": "1"},
            "instructions": "Servers: " + ", ".join(s.name for s in self.servers),
        }


def handler_for(gateway, token):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _answer(self, status, body=None, headers=None):
            data = b"" if body is None else json.dumps(body).encode()
            self.send_response(status)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            if body is not None:
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _allowed(self):
            if self.path.split("?")[0] != "/mcp":
                self._answer(404, {"error": "not found: the MCP endpoint is /mcp"})
                return False
            got = self.headers.get("Authorization", "")
            if not (got.startswith("Bearer ") and hmac.compare_digest(got[7:].encode(), token.encode())):
                self._answer(401, {"error": "missing or wrong token: send Authorization: Bearer <the gateway's token>"}, {"WWW-Authenticate": "Bearer"})
                return False
            return True

        def do_GET(self):
            # No server-initiated stream: the spec lets a server answer 405 here.
            if self._allowed():
                self._answer(405, {"error": "this gateway answers POSTs with JSON and offers no event stream"}, {"Allow": "POST, DELETE"})

        def do_DELETE(self):
            if self._allowed():
                gateway.sessions.discard(self.headers.get("Mcp-Session-Id"))
                self._answer(200)

        def do_POST(self):
            if not self._allowed():
                return
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self._answer(413, {"error": f"the body is over {MAX_BODY} bytes"})
                self.close_connection = True
                return
            try:
                body = json.loads(self.rfile.read(length))
            except ValueError:
                return self._answer(400, {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "the body is not JSON"}})
            session = self.headers.get("Mcp-Session-Id")
            msgs = body if isinstance(body, list) else [body]
            opening = any(isinstance(m, dict) and m.get("method") == "initialize" for m in msgs)
            if session and session not in gateway.sessions and not opening:
                return self._answer(404, {"jsonrpc": "2.0", "id": None, "error": {"code": -32001, "message": "session not found: initialize again"}})
            headers = {}
            if opening:
                session = str(uuid.uuid4())
                gateway.sessions.add(session)
                headers["Mcp-Session-Id"] = session
            answers = [a for a in (self._one(m) for m in msgs) if a is not None]
            if not answers:
                return self._answer(202, None, headers)
            self._answer(200, answers if isinstance(body, list) else answers[0], headers)

        def _one(self, m):
            if not isinstance(m, dict) or m.get("jsonrpc") != "2.0" or not isinstance(m.get("method"), str):
                if isinstance(m, dict) and "method" not in m and ("result" in m or "error" in m):
                    return None
                return {"jsonrpc": "2.0", "id": m.get("id") if isinstance(m, dict) else None, "error": {"code": -32600, "message": "not a JSON-RPC 2.0 request"}}
            if "id" not in m:
                return None
            try:
                if m["method"] == "initialize":
                    result = gateway.initialize(m.get("params"))
                else:
                    result = gateway.handle(m["method"], m.get("params"))
                return {"jsonrpc": "2.0", "id": m["id"], "result": result}
            except RpcError as e:
                err = {"code": e.code, "message": e.message}
                if e.data is not None:
                    err["data"] = e.data
                return {"jsonrpc": "2.0", "id": m["id"], "error": err}

    return Handler


def serve(config, token, ready):
    """The detached gateway: reports on `ready` (a pipe) whether it serves, then serves."""
    try:
        servers = start_servers(config)
        httpd = http.server.ThreadingHTTPServer(("0.0.0.0", PORT), handler_for(Gateway(servers), token))
        httpd.daemon_threads = True
    except Exception as e:  # noqa: BLE001 -- whatever stops it is the caller's answer
        os.write(ready, str(e).encode() or b"failed")
        os._exit(1)
    os.makedirs(os.path.dirname(TOKEN_FILE), mode=0o700, exist_ok=True)
    fd = os.open(TOKEN_FILE + ".new", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, token.encode())
    os.close(fd)
    os.replace(TOKEN_FILE + ".new", TOKEN_FILE)
    os.write(ready, b"ok")
    os.close(ready)
    httpd.serve_forever()


def main():
    ap = argparse.ArgumentParser(prog="mcp-gateway", description="Serves stdio MCP servers as one Streamable HTTP MCP server on :50005/mcp.")
    ap.add_argument("--config", required=True, help='JSON: {"github/<owner>/<repo>": {"runCmd": …, "installCmd": …, "envs": {…}}}')
    args = ap.parse_args()
    token = os.environ.get("GATEWAY_ACCESS_TOKEN") or str(uuid.uuid4())
    try:
        config = parse_config(args.config)
    except GatewayError as e:
        print(f"mcp-gateway: {e}", file=sys.stderr)
        return 1
    os.makedirs(LOG_DIR, exist_ok=True)
    r, w = os.pipe()
    if os.fork() == 0:
        # The gateway outlives this command: its own session, its output in a log, not the caller's pipes.
        os.close(r)
        os.setsid()
        log = os.open(os.path.join(LOG_DIR, "gateway.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        serve(config, token, w)
        os._exit(0)
    os.close(w)
    chunks = []
    while True:
        b = os.read(r, 65536)
        if not b:
            break
        chunks.append(b)
    answer = b"".join(chunks).decode(errors="replace")
    if answer == "ok":
        print(f"MCP gateway serving {len(config)} server(s) on http://localhost:{PORT}/mcp")
        return 0
    print(f"mcp-gateway: {answer}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
