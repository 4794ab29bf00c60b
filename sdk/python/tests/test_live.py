"""The Python SDK against a live ForgeVM server with real VMs.

Run by test/sdk-python.test.ts, which starts the server and sets FORGEVM_URL, FORGEVM_API_KEY
(the server requires it) and FORGEVM_FIXTURES (the product document's snippets)."""

import ast
import asyncio
import contextlib
import hashlib
import io
import os
import time
import unittest

import forgevm
from forgevm import (
    AsyncClient,
    AuthenticationError,
    BadRequestError,
    Client,
    ConflictError,
    ConnectionError,
    ForgevmError,
    NotFoundError,
    SandboxNotFound,
    anthropic_tools,
    handle_tool_call,
    openai_tools,
)

URL = os.environ.get("FORGEVM_URL", "http://localhost:7423")
KEY = os.environ["FORGEVM_API_KEY"]
FIXTURES = os.environ.get("FORGEVM_FIXTURES", "")


class Live(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.client = Client(URL, api_key=KEY)
        cls.sb = cls.client.spawn(ttl="10m", metadata={"test": "python"})

    @classmethod
    def tearDownClass(cls):
        with contextlib.suppress(ForgevmError):
            cls.sb.destroy()

    def test_client_methods(self):
        c, sb = self.client, self.sb
        self.assertRegex(sb.id, r"^sb-[0-9a-f]{8}$")
        self.assertEqual(sb.state, "running")
        self.assertEqual(sb.memory_mb, 512)
        self.assertEqual(c.get(sb.id).id, sb.id)
        self.assertIn(sb.id, [s.id for s in c.list()])
        before = sb.expires_at
        self.assertIs(sb.extend_ttl("2h"), sb, "extend_ttl returns the sandbox")
        self.assertGreater(sb.expires_at, before)
        self.assertEqual(sb.refresh().state, "running")
        self.assertEqual(c.health()["status"], "ok")
        self.assertFalse(c.pool_status()["enabled"])
        self.assertEqual([p["name"] for p in c.providers()], ["qemu"])
        self.assertIsInstance(c.prune(), int)
        self.assertIsInstance(c.snapshots(), list)
        self.assertEqual(c.mcp_audit(session="no-such-session"), [])
        history = c.metrics(sb.id, since="10m", step="5s")
        self.assertEqual(history["sandbox"], sb.id)
        self.assertEqual(history["step_ms"], 5000)
        self.assertIsInstance(history["samples"], list)
        self.assertIn("host", c.stats())
        self.assertIn("samples", c.host_metrics(since="1h"))
        with self.assertRaises(BadRequestError):
            c.metrics(sb.id, since="whenever")

        async def audit_async():
            async with AsyncClient(URL, api_key=KEY) as ac:
                return await ac.mcp_audit(limit=5)

        self.assertEqual(asyncio.run(audit_async()), c.mcp_audit(limit=5))
        with Client(URL + "/", api_key=KEY) as c2:
            self.assertEqual(c2.base_url, URL)

    def test_templates(self):
        t = self.client.templates
        t.create("py-sdk-tpl", env={"GREETING": "hi"}, memory_mb=384)
        self.assertEqual(t.get("py-sdk-tpl")["memory_mb"], 384)
        self.assertIn("py-sdk-tpl", [x["name"] for x in t.list()])
        t.update("py-sdk-tpl", env={"GREETING": "hello"}, memory_mb=384)
        with t.spawn("py-sdk-tpl") as sb:
            self.assertEqual(sb.exec("echo $GREETING").stdout, "hello\n")
        t.delete("py-sdk-tpl")
        with self.assertRaises(NotFoundError):
            t.get("py-sdk-tpl")

    def test_errors(self):
        with self.assertRaises(SandboxNotFound) as e:
            self.client.get("sb-00000000")
        self.assertEqual(e.exception.sandbox_id, "sb-00000000")
        self.assertEqual(e.exception.status_code, 404)
        self.assertIsInstance(e.exception, ForgevmError)
        with self.assertRaises(AuthenticationError) as e:
            Client(URL, api_key="wrong").list()
        self.assertEqual(e.exception.code, "UNAUTHORIZED")
        with self.assertRaises(BadRequestError) as e:
            self.client.spawn(memory_mb=1)
        self.assertIn("memory_mb", str(e.exception))
        with self.assertRaises(ConnectionError) as e:
            Client("http://127.0.0.1:9", timeout=3).list()
        self.assertIn("cannot reach the ForgeVM server at http://127.0.0.1:9", str(e.exception))
        gone = self.client.spawn()
        gone.destroy()
        gone.destroy()  # idempotent
        with self.assertRaises(SandboxNotFound):
            gone.exec("true")

    def test_desktop_of_a_sandbox_without_one(self):
        # sandbox.desktop's calls reach the server's desktop routes (test/vm/desktop.test.ts drives a
        # real desktop through the same routes); a sandbox of another image has no desktop.
        with self.assertRaises(ConflictError) as e:
            self.sb.desktop.screenshot(format="jpeg", region=(0, 0, 10, 10))
        self.assertIn("has no desktop", str(e.exception))
        self.assertIn("forgevm/desktop:bookworm", str(e.exception))
        with self.assertRaises(ConflictError):
            self.sb.desktop.click(10, 10, count=2, modifiers=["shift"])
        with self.assertRaises(BadRequestError) as e:
            self.sb.desktop.scroll("sideways")
        self.assertIn("direction", str(e.exception))

        async def body():
            async with AsyncClient(URL, api_key=KEY) as client:
                sb = await client.get(self.sb.id)
                with self.assertRaises(ConflictError):
                    await sb.desktop.press("ctrl+c")

        asyncio.run(body())

    def test_context_managers_destroy_even_when_the_body_raises(self):
        ids = []
        with self.assertRaises(RuntimeError):
            with self.client.spawn() as sb:
                ids.append(sb.id)
                raise RuntimeError("boom")

        async def body():
            async with AsyncClient(URL, api_key=KEY) as client:
                self.assertIsInstance(await client.templates.list(), list)
                self.assertTrue((await client.health())["status"] == "ok")
                async with client.spawn() as sb:
                    ids.append(sb.id)
                    self.assertEqual((await sb.exec("echo async")).stdout, "async\n")
                    await sb.write_file("/tmp/a.bin", b"\x00\xff")
                    self.assertEqual(await sb.read_file("/tmp/a.bin", binary=True), b"\x00\xff")
                    raise RuntimeError("boom2")

        with self.assertRaises(RuntimeError):
            asyncio.run(body())
        for sid in ids:
            with self.assertRaises(SandboxNotFound):
                self.client.get(sid)

    def test_exec(self):
        sb = self.sb
        self.assertEqual(sb.exec("printf '%s|'", args=["a b", "c'd", "$HOME"]).stdout, "a b|c'd|$HOME|")
        r = sb.exec("echo $X; pwd; id -un", env={"X": "y"}, workdir="/tmp", user="nobody")
        self.assertEqual((r.exit_code, r.stdout), (0, "y\n/tmp\nnobody\n"))
        self.assertEqual(sb.exec("cat", stdin="in put").stdout, "in put")
        t = sb.exec("sleep 5", timeout=1)
        self.assertEqual((t.exit_code, t.timed_out), (124, True))
        self.assertEqual(sb.exec("exit 3").exit_code, 3)
        self.assertRegex(sb.exec("true").duration, r"^[0-9.]+(ms|s)$")

    def test_exec_stream_yields_before_the_command_ends(self):
        t0 = time.monotonic()
        stream = self.sb.exec_stream("echo first; sleep 1.5; echo second >&2; exit 4")
        got = [(c.stream, c.data, time.monotonic() - t0) for c in stream]
        end = time.monotonic() - t0
        self.assertEqual([(s, d) for s, d, _ in got], [("stdout", "first\n"), ("stderr", "second\n")])
        self.assertGreaterEqual(end - got[0][2], 1.2, "the first chunk came before the command ended")
        self.assertEqual(stream.exit_code, 4)
        self.assertEqual(self.sb.exec_stream("echo a; echo b >&2").collect(), ("a\n", "b\n", 0))

        async def astream():
            async with AsyncClient(URL, api_key=KEY) as client:
                sb = await client.get(self.sb.id)
                s = sb.exec_stream("echo x; sleep 0.3; echo y")
                out = [c.data async for c in s]
                return out, s.exit_code

        self.assertEqual(asyncio.run(astream()), (["x\n", "y\n"], 0))
        self.assertTrue(stream.pid and stream.pid > 1, "the stream names its process")

    def test_tracked_processes_followed_again_and_signalled(self):
        svc = self.client.spawn(main={"command": ["sh", "-c", "i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.3; done"]})
        try:
            main = None
            for _ in range(100):
                main = next((p for p in svc.tracked_processes() if p.get("tag") == "main"), None)
                if main:
                    break
                time.sleep(0.2)
            self.assertIsNotNone(main, "the main process is listed")
            seen = []
            stream = svc.follow_process(main["pid"])
            for c in stream:
                seen.append(c.data)
                if len(seen) == 1:
                    self.assertEqual(svc.kill_process(main["pid"]), 9)
            self.assertEqual(stream.exit_code, 137)
            self.assertRegex("".join(seen), r"tick \d+")
            with self.assertRaises(NotFoundError):
                svc.follow_process(999999).collect()
        finally:
            svc.destroy()

    def test_run_code(self):
        sb = self.sb
        self.assertEqual(sb.run_code("x = 20\nx + 1").text, "21")
        ex = sb.run_code("print('hi')\nx * 2")
        self.assertEqual((ex.stdout, ex.text, ex.error), ("hi\n", "40", None))
        err = sb.run_code("raise ValueError('no')")
        self.assertEqual((err.error.name, err.error.value), ("ValueError", "no"))
        self.assertIn("ValueError", err.error.traceback)
        seen = []
        t = sb.run_code("import time\nprint('a', flush=True)\ntime.sleep(30)", timeout="1s", on_stdout=seen.append)
        self.assertEqual((seen, t.error.name), (["a\n"], "TimeoutError"))
        self.assertEqual(sb.run_code("x").text, "20", "the context keeps its state after a timeout")
        ctx = sb.create_code_context(language="bash", cwd="/tmp")
        self.assertEqual(sb.run_code("cd /etc; pwd", context=ctx).stdout, "/etc\n")
        self.assertEqual(sb.run_code("pwd", context=ctx.id).stdout, "/etc\n")
        self.assertIn(ctx.id, [c.id for c in sb.list_code_contexts()])
        self.assertEqual(sb.restart_code_context(ctx).id, ctx.id)
        self.assertEqual(sb.run_code("pwd", context=ctx).stdout, "/tmp\n")
        sb.delete_code_context(ctx)
        with self.assertRaises(NotFoundError):
            sb.run_code("pwd", context=ctx)
        with self.assertRaises(BadRequestError):
            sb.run_code("1", language="cobol")

        async def arun():
            async with AsyncClient(URL, api_key=KEY) as client:
                a = await client.get(self.sb.id)
                return (await a.run_code("x + 2")).text

        self.assertEqual(asyncio.run(arun()), "22")

    def test_files(self):
        sb = self.sb
        sb.write_file("/tmp/py/t.txt", "héllo ✓\n", mode="0600")
        self.assertEqual(sb.read_file("/tmp/py/t.txt"), "héllo ✓\n")
        self.assertEqual(sb.stat_file("/tmp/py/t.txt").mode, "600")
        every = bytes(range(256)) * 4
        sb.write_file("/tmp/py/bytes.bin", every)
        self.assertEqual(sb.read_file("/tmp/py/bytes.bin", binary=True), every)
        big = os.urandom(20 * 1024 * 1024)
        sb.write_file("/tmp/py/big.bin", big)
        back = sb.read_file_bytes("/tmp/py/big.bin")
        self.assertEqual(hashlib.sha256(back).hexdigest(), hashlib.sha256(big).hexdigest())
        self.assertEqual(sb.exec("sha256sum /tmp/py/big.bin | cut -c1-64").stdout.strip(), hashlib.sha256(big).hexdigest())
        sb.write_file("/tmp/fs/a.py", "print(1)")
        sb.write_file("/tmp/fs/b.py", "print(2)")
        self.assertEqual(sorted(f.name for f in sb.list_files("/tmp/fs")), ["a.py", "b.py"])
        self.assertEqual(sorted(sb.glob_files("/tmp/fs/*.py")), ["/tmp/fs/a.py", "/tmp/fs/b.py"])
        sb.move_file("/tmp/fs/a.py", "/tmp/fs/c.py")
        sb.chmod_file("/tmp/fs/c.py", 0o700)
        self.assertEqual(sb.stat_file("/tmp/fs/c.py").mode, "700", "a numeric mode")
        sb.chmod_file("/tmp/fs/c.py", "755")
        st = sb.stat_file("/tmp/fs/c.py")
        self.assertEqual((st.mode, st.is_dir), ("755", False))
        sb.delete_file("/tmp/fs/c.py")
        with self.assertRaises(NotFoundError):
            sb.stat_file("/tmp/fs/c.py")
        sb.delete_file("/tmp/fs", recursive=True)
        self.assertEqual(sb.glob_files("/tmp/fs/*"), [])

    def test_stop_start_and_a_main_process(self):
        c = self.client
        with c.spawn(ttl="10m", name="py-main", main={"command": ["sh", "-c", "echo main says hi; exec sleep 300"], "restart": "unless-stopped"}) as sb:
            sb.write_file("/root/kept.txt", "kept")
            deadline = time.time() + 20
            while not list(c.main_logs("py-main")) and time.time() < deadline:
                time.sleep(0.2)
            self.assertEqual([l["line"] for l in c.main_logs("py-main")], ["main says hi"])
            self.assertEqual(c.stop("py-main", timeout="2s").state, "stopped")
            self.assertIn(sb.id, [s.id for s in c.list(state=["stopped"])])
            with self.assertRaises(ConflictError):
                sb.exec("true")
            self.assertEqual(c.start("py-main").state, "running")
            self.assertEqual(sb.read_file("/root/kept.txt"), "kept")
            self.assertEqual(c.kill("py-main", "TERM"), 15)

    def test_volumes_commit_build_and_export(self):
        c = self.client
        vol = c.create_volume("py-vol", size_mb=32)
        self.assertEqual(vol["size_mb"], 32)
        with c.spawn(volumes=["py-vol:/data"]) as a:
            self.assertEqual(a.info.volumes, [{"name": "py-vol", "path": "/data", "read_only": False}])
            a.exec("echo kept > /data/f")
        with c.spawn(volumes=["py-vol:/data:ro"]) as b:
            self.assertEqual(b.exec("cat /data/f").stdout, "kept\n")
            made = b.commit("local/py-commit:v1", changes={"env": {"FROM_PY": "yes"}}, comment="from python")
        self.assertEqual(made["image"]["layers"], 2)
        self.assertIn("local/py-commit:v1", [i["name"] for i in c.images()])
        c.delete_volume("py-vol")
        with self.assertRaises(NotFoundError):
            c.volume("py-vol")

        import tempfile

        ctx = tempfile.mkdtemp()
        with open(os.path.join(ctx, "Dockerfile"), "w") as f:
            f.write("FROM local/py-commit:v1\nCOPY note.txt /note.txt\nRUN echo built-$FROM_PY > /built\n")
        with open(os.path.join(ctx, "note.txt"), "w") as f:
            f.write("a note\n")
        lines = []
        job = c.build(ctx, "local/py-built:v1", on_log=lines.append)
        self.assertEqual(job["state"], "done")
        self.assertTrue(any("RUN echo built" in line for line in lines), lines)
        with c.spawn(image="local/py-built:v1") as s:
            self.assertEqual(s.exec("cat /note.txt /built").stdout, "a note\nbuilt-yes\n")
        with open(os.path.join(ctx, "Dockerfile"), "w") as f:
            f.write("FROM local/py-commit:v1\nFROBNICATE x\n")
        with self.assertRaises(BadRequestError) as e:
            c.build(ctx, "local/py-bad:v1")
        self.assertIn("line 2", str(e.exception))

        out = os.path.join(ctx, "image.tar")
        digest = c.export_image("local/py-built:v1", out)
        self.assertEqual(digest, job["digest"])
        import tarfile

        with tarfile.open(out) as t:
            self.assertIn("index.json", t.getnames())
        for name in ("local/py-built:v1", "local/py-commit:v1"):
            c.remove_image(name)

    def test_fork_and_snapshot(self):
        self.sb.write_file("/root/state.txt", "forked")
        (child,) = self.sb.fork(count=1)
        with child:
            self.assertEqual(child.read_file("/root/state.txt"), "forked")
            self.assertEqual(child.exec("hostname").stdout.strip(), child.id)
        snap = self.sb.snapshot("py-snap")
        self.assertEqual(snap["name"], "py-snap")
        (r,) = self.client.restore("py-snap")
        with r:
            self.assertEqual(r.read_file("/root/state.txt"), "forked")
        self.client.delete_snapshot("py-snap")

    def test_network_and_secrets(self):
        with self.client.spawn(allow=["@pypi"], ports=["0:8000"], secrets={"PY_SECRET": "py-value"}) as n:
            net = n.network()
            self.assertEqual(net["mode"], "allowlist")
            self.assertEqual(net["allow"], ["@pypi"])
            self.assertEqual(net["ports"][0]["guest_port"], 8000)
            self.assertEqual(n.exec('printf %s "$PY_SECRET"').stdout, "py-value")
            self.assertEqual(n.set_allowlist(["@npm"])["allow"], ["@npm"])
            n.exec("curl -s -m 5 -o /dev/null http://example.invalid/")
            self.assertTrue(any(e["host"] == "example.invalid" and e["decision"] == "deny" for e in n.egress(10)))
            p = n.publish_port("0:9000")
            n.unpublish_port(p["host_port"])
            self.assertEqual([x["guest_port"] for x in n.network()["ports"]], [8000])
            with self.assertRaises(BadRequestError):
                n.publish_port("nope")
        # Secrets kept on the server for egress rules: never a value in any answer.
        c = self.client
        made = c.add_secret("PY_RULE_KEY", "py-rule-value", description="for a rule")
        self.assertEqual((made["name"], made["version"]), ("py_rule_key", 1))
        self.assertIn("py_rule_key", [s["name"] for s in c.secrets()])
        self.assertEqual(c.update_secret("py_rule_key", "py-rule-value-2")["version"], 2)
        self.assertNotIn("py-rule-value", repr(c.secrets()) + repr(c.secret("py_rule_key")))
        with c.spawn(allow=["api.example.com"], egress_rules={"api.example.com": {"headers": {"Authorization": "Bearer {{py_rule_key}}"}}}) as r:
            self.assertEqual(r.network()["egress_rules"], {"api.example.com": {"headers": {"Authorization": "Bearer {{py_rule_key}}"}}})
            self.assertEqual(r.set_egress_rules({})["mode"], "allowlist")
            self.assertNotIn("egress_rules", r.network())
            net = r.update_network(deny=["10.0.0.0/8"])
            self.assertEqual(net["deny"], ["10.0.0.0/8"])
            self.assertEqual(r.update_network(mode="none")["mode"], "none")
            with self.assertRaises(BadRequestError):
                r.update_network(mode="allowlist", deny=["example.com"])
        # A rule may name a secret that does not exist yet; one off the allowlist is a 400.
        with self.assertRaises(BadRequestError):
            c.spawn(allow=["api.example.com"], egress_rules={"other.example.com": {"headers": {"A": "x"}}})
        later = c.spawn(allow=["api.example.com"], egress_rules={"api.example.com": {"headers": {"A": "{{no_such_secret}}"}}})
        later.destroy()
        c.delete_secret("py_rule_key")
        with self.assertRaises(NotFoundError):
            c.secret("py_rule_key")

    def test_llm_tools(self):
        self.assertEqual([t["function"]["name"] for t in openai_tools()], ["execute_code", "write_file", "read_file"])
        self.assertEqual(anthropic_tools()[1]["input_schema"]["required"], ["path", "content"])
        # Recorded payloads: an OpenAI tool call and Anthropic tool_use blocks.
        call = {"id": "call_1", "type": "function", "function": {"name": "execute_code", "arguments": '{"command": "python3 -c \\"print(sum(range(10)))\\""}'}}
        self.assertEqual(handle_tool_call(self.sb, call), "exit_code: 0\nstdout:\n45\n")
        write = {"type": "tool_use", "id": "toolu_1", "name": "write_file", "input": {"path": "/tmp/llm/p.py", "content": "print('hi')"}}
        self.assertEqual(handle_tool_call(self.sb, write), "wrote 11 characters to /tmp/llm/p.py")
        run = {"type": "tool_use", "id": "toolu_2", "name": "execute_code", "input": {"command": "python3 /tmp/llm/p.py; exit 2"}}
        self.assertEqual(handle_tool_call(self.sb, run), "exit_code: 2\nstdout:\nhi\n")
        self.assertEqual(handle_tool_call(self.sb, {"name": "read_file", "input": {"path": "/tmp/llm/p.py"}}), "print('hi')")
        self.assertRegex(handle_tool_call(self.sb, {"function": {"name": "execute_code", "arguments": "{nope"}}), r"^error: .*JSON")
        self.assertRegex(handle_tool_call(self.sb, {"name": "rm_rf", "input": {}}), r"^error: unknown tool rm_rf")
        self.assertRegex(handle_tool_call(self.sb, {"name": "read_file", "input": {"path": "/nope"}}), r"^error: ")

    @unittest.skipUnless(FIXTURES, "FORGEVM_FIXTURES not set")
    def test_product_document_snippets_run_as_written(self):
        # The only changes: the image (alpine:latest is not available offline) and the test
        # server's address for localhost:7423; the key comes from FORGEVM_API_KEY as in the CLI.
        for name in ("seed-python.py", "seed-python-async.py"):
            with open(os.path.join(FIXTURES, name), encoding="utf-8") as f:
                src = f.read().replace('spawn(image="alpine:latest")', "spawn()").replace('"http://localhost:7423"', repr(URL))
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                code = compile(src, name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
                result = eval(code, {"__name__": "__main__"})  # noqa: S307 - our own fixture
                if asyncio.iscoroutine(result):
                    asyncio.run(result)
            if name == "seed-python.py":
                text = out.getvalue()
                self.assertTrue(text.startswith("hello world\n\nbuilt with ForgeVM\n\n"), text)
                self.assertIn("3 packets transmitted, 3 received", text)

    def test_version(self):
        self.assertEqual(forgevm.__version__, "0.1.0")


if __name__ == "__main__":
    unittest.main(verbosity=2)
