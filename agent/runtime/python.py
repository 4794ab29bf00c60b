# ForgeVM's code runtime for Python: one process per code context, so variables, imports and the
# working directory persist between executions. The host writes one JSON request per line on
# stdin ({"code", "env"}) and reads the answer on stdout: whatever the code prints (subprocesses
# included) as it is, and the runtime's own messages as lines that begin with a marker the host
# chose (FVM_RUNTIME_MARK), so output can never be mistaken for them. Messages: ready; result
# (text and rich formats of the last expression, PNGs of matplotlib figures); error (name, value,
# traceback); end. Before each end, a sync line on stderr tells the host that stderr is complete.
# SIGINT interrupts the code running (KeyboardInterrupt); the context survives.
import ast
import io
import json
import os
import signal
import sys

# base64 and traceback are imported where they are needed: a context starts faster without them.

MARK = os.environ.pop("FVM_RUNTIME_MARK", "")
os.environ.setdefault("MPLBACKEND", "Agg")
# The code-interpreter image builds matplotlib's font cache here, sparing each context seconds.
if os.path.isdir("/var/cache/matplotlib"):
    os.environ.setdefault("MPLCONFIGDIR", "/var/cache/matplotlib")

# Requests come on a private copy of stdin; the code and its subprocesses read /dev/null.
requests = os.fdopen(os.dup(0), "rb")
_null = os.open(os.devnull, os.O_RDONLY)
os.dup2(_null, 0)
os.close(_null)
sys.stdin = open(os.devnull)

# Line-buffered text on fds 1 and 2, so output streams line by line as it is produced and stays
# in order with the messages; whatever is left is flushed before each execution's end.
sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="replace", line_buffering=True)
sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="replace", line_buffering=True)


OUT, ERR = sys.stdout, sys.stderr


def send(msg):
    OUT.write(MARK + " " + json.dumps(msg) + "\n")
    OUT.flush()


executing = False


def on_sigint(signum, frame):
    if executing:
        raise KeyboardInterrupt()


signal.signal(signal.SIGINT, on_sigint)

FORMATS = [
    ("_repr_html_", "html"),
    ("_repr_markdown_", "markdown"),
    ("_repr_svg_", "svg"),
    ("_repr_png_", "png"),
    ("_repr_jpeg_", "jpeg"),
    ("_repr_latex_", "latex"),
    ("_repr_json_", "json"),
    ("_repr_javascript_", "javascript"),
]


def formats(value):
    out = {"text": repr(value)}
    for attr, key in FORMATS:
        fn = getattr(value, attr, None)
        if not callable(fn):
            continue
        try:
            r = fn()
        except Exception:
            continue
        if r is None:
            continue
        if isinstance(r, tuple):
            r = r[0]
        if isinstance(r, (bytes, bytearray)):
            import base64

            r = base64.b64encode(r).decode()
        out[key] = r
    return out


def figures():
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    import base64

    for num in plt.get_fignums():
        fig = plt.figure(num)
        buf = io.BytesIO()
        try:
            fig.savefig(buf, format="png", bbox_inches="tight")
        except Exception:
            continue
        send({"type": "result", "is_main_result": False, "text": repr(fig), "png": base64.b64encode(buf.getvalue()).decode()})
    plt.close("all")


namespace = {"__name__": "__main__", "__builtins__": __builtins__}
count = 0


def user_traceback(e):
    # Frames of this file are ours, not the caller's.
    import traceback

    te = traceback.TracebackException.from_exception(e)
    te.stack = traceback.StackSummary.from_list([f for f in te.stack if f.filename != __file__])
    return "".join(te.format())


def execute(code):
    global executing, count
    count += 1
    executing = True
    try:
        tree = ast.parse(code, "<cell>", "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, "<cell>", "exec"), namespace)
        if last is not None:
            value = eval(compile(last, "<cell>", "eval"), namespace)
            if value is not None:
                namespace["_"] = value
                send(dict(formats(value), type="result", is_main_result=True))
    except BaseException as e:  # noqa: BLE001 - the caller's code may raise anything, SystemExit included
        send({"type": "error", "name": type(e).__name__, "value": str(e), "traceback": user_traceback(e)})
    finally:
        executing = False
    try:
        figures()
    except BaseException as e:  # noqa: BLE001
        send({"type": "error", "name": type(e).__name__, "value": str(e), "traceback": user_traceback(e)})
    send({"type": "number_of_executions", "execution_count": count})


send({"type": "ready", "language": "python", "pid": os.getpid()})
for line in requests:
    try:
        req = json.loads(line)
    except ValueError:
        continue
    env = req.get("env") or {}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update({str(k): str(v) for k, v in env.items()})
    try:
        execute(str(req.get("code", "")))
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    # Code that swapped sys.stdout or sys.stderr and left them so does not take the protocol along.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            pass
    sys.stdout, sys.stderr = OUT, ERR
    ERR.write(MARK + " sync\n")
    ERR.flush()
    send({"type": "end"})
