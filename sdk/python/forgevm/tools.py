"""Ready-made LLM tools, named as in the product document: execute_code (a shell command),
write_file and read_file, as OpenAI function-calling and Anthropic tool_use definitions, and one
dispatcher that runs a tool call of either format in a sandbox and returns the text for the model."""

from __future__ import annotations

import json
from typing import Any, Dict, List, Mapping, Tuple

from .sandbox import Sandbox

_TOOLS: List[Dict[str, Any]] = [
    {
        "name": "execute_code",
        "description": "Execute a shell command in a sandboxed VM (e.g. `python3 script.py`); returns the exit code, stdout and stderr. Files and installed packages persist between calls.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string", "description": "The shell command to run."}}, "required": ["command"]},
    },
    {
        "name": "write_file",
        "description": "Write a file in the sandbox, creating parent directories.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string", "description": "Absolute path."}, "content": {"type": "string", "description": "File content."}},
            "required": ["path", "content"],
        },
    },
    {
        "name": "read_file",
        "description": "Read a text file from the sandbox.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string", "description": "Absolute path."}}, "required": ["path"]},
    },
]

#: How long one tool command may run.
TOOL_TIMEOUT = "120s"


def openai_tools() -> List[Dict[str, Any]]:
    """Definitions for OpenAI's chat completions ``tools`` parameter."""
    return [{"type": "function", "function": {"name": t["name"], "description": t["description"], "parameters": t["parameters"]}} for t in _TOOLS]


def anthropic_tools() -> List[Dict[str, Any]]:
    """Definitions for Anthropic's messages ``tools`` parameter."""
    return [{"name": t["name"], "description": t["description"], "input_schema": t["parameters"]} for t in _TOOLS]


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, Mapping) else getattr(obj, key, None)


def _parse(call: Any) -> Tuple[str, Dict[str, Any]]:
    fn = _get(call, "function")
    if fn is not None:  # OpenAI: {"function": {"name", "arguments": "<json>"}}
        raw = _get(fn, "arguments") or "{}"
        return str(_get(fn, "name")), (json.loads(raw) if isinstance(raw, str) else dict(raw))
    return str(_get(call, "name")), dict(_get(call, "input") or {})  # Anthropic tool_use


def handle_tool_call(sandbox: Sandbox, call: Any) -> str:
    """Runs one tool call (dict or SDK object, OpenAI or Anthropic) and returns the result text.
    Failures come back as text the model can read; nothing is raised."""
    try:
        name, args = _parse(call)
    except (ValueError, TypeError):
        return "error: the tool arguments are not valid JSON"
    try:
        if name == "execute_code":
            command = args.get("command")
            if not isinstance(command, str):
                return "error: execute_code needs a string `command`"
            r = sandbox.exec(command, timeout=TOOL_TIMEOUT)
            text = f"exit_code: {r.exit_code}{' (timed out)' if r.timed_out else ''}\nstdout:\n{r.stdout}"
            return text + (f"\nstderr:\n{r.stderr}" if r.stderr else "")
        if name == "write_file":
            path, content = args.get("path"), args.get("content")
            if not isinstance(path, str) or not isinstance(content, str):
                return "error: write_file needs string `path` and `content`"
            sandbox.write_file(path, content)
            return f"wrote {len(content)} characters to {path}"
        if name == "read_file":
            path = args.get("path")
            if not isinstance(path, str):
                return "error: read_file needs a string `path`"
            return sandbox.read_file(path)  # type: ignore[return-value]
        return f"error: unknown tool {name}"
    except Exception as e:  # noqa: BLE001 - the model gets every failure as text
        return f"error: {e}"
