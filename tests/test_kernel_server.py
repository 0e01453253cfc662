"""Kernels and workers forked from the test run's kernel server behave like fresh ones (tools/kernel_server.py).

The server here preloads a light module instead of torch, so these tests start fast; the mechanism is
the same one the notebook run uses.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import queue
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager

import conftest
from tools import kernel_server

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the server forks: Linux only")

PRELOADED = "mailbox"  # stands in for torch: imported by the server, by no fresh interpreter


def start_server(path: Path, remove_folder: bool = False) -> subprocess.Popen:
    process = kernel_server.start_server(path, ("ipykernel.kernelapp", PRELOADED, "matplotlib"), remove_folder)
    assert process is not None, "the server did not start"
    return process


def stop_server(process: subprocess.Popen) -> int:
    process.stdin.close()
    return process.wait(timeout=10)


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory):
    path = tmp_path_factory.mktemp("server") / "socket"
    process = start_server(path)
    yield path
    stop_server(process)


@pytest.fixture
def server(shared_server, monkeypatch):
    monkeypatch.setenv(kernel_server.ENV, str(shared_server))


@pytest.fixture
def start(tmp_path):
    """Start a kernel the way nbval does, through the launcher; shut them all down afterwards."""
    specs = tmp_path / "kernels" / "forked"
    specs.mkdir(parents=True)
    argv = kernel_server.launcher_argv()
    (specs / "kernel.json").write_text(json.dumps({"argv": argv, "language": "python", "display_name": "forked"}))
    started = []
    sockets = tempfile.mkdtemp(prefix="kernels-")  # a short path: a Unix socket's may not exceed ~100 bytes

    def start_kernel(**kwargs):
        # Unix sockets, as the run's other kernels (conftest.py): no TCP port another process could take first
        km = KernelManager(kernel_name="forked", kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(specs.parent)]),
                           transport="ipc", ip=os.path.join(sockets, str(time.monotonic_ns())))
        km.start_kernel(**kwargs)
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=30)
        started.append((km, kc))
        return km, kc

    yield start_kernel
    for km, kc in started:
        kc.stop_channels()
        if km.has_kernel:
            km.shutdown_kernel(now=True)
    shutil.rmtree(sockets, ignore_errors=True)


def request_kernel(path: Path, argv: list[str], cwd: Path) -> socket.socket:
    """Ask the server for a kernel as the launcher does, with /dev/null for its streams; the connection."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(str(path))
    payload = json.dumps({"argv": argv, "env": dict(os.environ), "cwd": str(cwd)}).encode()
    with open(os.devnull, "r+b") as null:
        socket.send_fds(conn, [kernel_server.HEADER.pack(len(payload))], [null.fileno()] * 3)
    conn.sendall(payload)
    return conn


def reply_to(kc, msg_id: str, timeout: float) -> dict:
    """The shell channel's reply to request ``msg_id``, passing over replies to other requests (on a loaded
    machine ``wait_for_ready`` may send a second kernel-info request, whose reply comes late). Raises
    ``queue.Empty`` when it has not come within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        reply = kc.get_shell_msg(timeout=max(0.01, deadline - time.monotonic()))
        if reply["parent_header"].get("msg_id") == msg_id:
            return reply


def run(kc, code: str, timeout: float = 20) -> tuple[object, dict]:
    """Execute ``code``, which leaves its answer in ``result``; return the answer and the execute reply.

    The answer travels in the reply (a user expression), not as printed output: on a loaded machine
    ipykernel may publish a cell's output after the kernel has gone idle."""
    msg_id = kc.execute(code, user_expressions={"result": "__import__('json').dumps(result)"})
    content = reply_to(kc, msg_id, timeout)["content"]
    answer = content.get("user_expressions", {}).get("result", {})
    if answer.get("status") != "ok":
        return None, content
    return json.loads(ast.literal_eval(answer["data"]["text/plain"])), content


PROBE = f"""
import os, random, sys
from ipykernel.kernelapp import IPKernelApp
result = {{"pid": os.getpid(), "cwd": os.getcwd(), "mark": os.environ.get("MARK"), "random": random.random(),
          "preloaded": {PRELOADED!r} in sys.modules, "bound": {PRELOADED!r} in dir(),
          "parent": IPKernelApp.instance().parent_handle, "jpy_parent": int(os.environ["JPY_PARENT_PID"]),
          "frozen": __import__("gc").get_freeze_count(),
          "backend": sys.modules["matplotlib"].rcParams._get("backend") if "matplotlib" in sys.modules else None}}
"""


def test_each_kernel_is_a_new_process_with_its_launchers_folder_and_environment(server, start, tmp_path):
    seen = []
    plain = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    for mark, backend in (("a", "agg"), ("b", None)):
        folder = tmp_path / mark
        folder.mkdir()
        km, kc = start(cwd=str(folder), env={**plain, "MARK": mark, **({"MPLBACKEND": backend} if backend else {})})
        facts, reply = run(kc, PROBE)
        assert reply["status"] == "ok", reply
        assert facts["cwd"] == str(folder) and facts["mark"] == mark
        assert facts["preloaded"] and not facts["bound"]  # imported by the server, no name given
        assert facts["frozen"] > 1000  # what the server imported is out of the kernel's garbage collections
        # matplotlib, imported by the server, takes its backend from the kernel's environment, as if imported
        # there: the one named, else ipykernel's inline backend
        assert facts["backend"] == (backend or kernel_server.INLINE_BACKEND)
        assert facts["parent"] == facts["jpy_parent"] == os.getpid()  # read again from the kernel's environment
        assert facts["pid"] != km.provisioner.process.pid  # the launcher is not the kernel...
        seen.append(facts)
    assert seen[0]["pid"] != seen[1]["pid"]
    assert seen[0]["random"] != seen[1]["random"]  # ...and forks do not share random state


def test_a_backend_matplotlib_refuses_fails_its_import_in_the_kernel_as_in_a_fresh_one(server, start):
    _, kc = start(env={**os.environ, "MPLBACKEND": "no-such-backend"})
    message, reply = run(kc, "try:\n    import matplotlib\n    result = 'imported'\n"
                             "except ValueError as error:\n    result = str(error)")
    assert reply["status"] == "ok", reply
    assert "'no-such-backend' is not a valid value for backend" in message
    _, kc = start()  # the server, and the kernels it forks after, are unharmed
    facts, reply = run(kc, PROBE)
    assert reply["status"] == "ok"
    assert facts["backend"] == (os.environ.get("MPLBACKEND") or kernel_server.INLINE_BACKEND)


def serves(path: Path, cwd: Path) -> bool:
    """Whether the server at ``path`` still forks kernels: it answers the next request with a PID (the kernel,
    asked only for ipykernel's version, is gone a moment later)."""
    with request_kernel(path, ["ipykernel_launcher", "--version"], cwd) as conn:
        conn.settimeout(20)  # a server that has stopped answering fails here, not at the run's time limit
        return conn.makefile().readline().strip().isdigit()


def test_a_launcher_that_dies_before_asking_does_not_stop_the_server(shared_server, tmp_path):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as gone_at_once:
        gone_at_once.connect(str(shared_server))  # and closes without sending a request
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as half_a_header:
        half_a_header.connect(str(shared_server))
        half_a_header.sendall(b"\0\0\0")
    assert serves(shared_server, tmp_path)


def test_a_launcher_that_dies_with_its_answer_unread_does_not_stop_the_server(shared_server, tmp_path):
    conn = request_kernel(shared_server, ["ipykernel_launcher", "-f", str(tmp_path / "kernel.json")], tmp_path)
    select.select([conn], [], [], 10)
    kernel = int(conn.recv(64, socket.MSG_PEEK))  # the server has answered; the answer stays unread...
    conn.close()  # ...as the launcher dies: the server's next read gets ECONNRESET, not an end of file
    assert gone(kernel)
    assert serves(shared_server, tmp_path)


def test_a_connection_that_sends_nothing_holds_up_the_next_launcher_only_for_the_request_timeout(tmp_path):
    # A server of its own, with a short timeout (the run's waits REQUEST_TIMEOUT) and nothing preloaded.
    timeout = 0.3
    process = kernel_server.start_server(tmp_path / "socket", (), request_timeout=timeout)
    assert process is not None, "the server did not start"
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as silent:
            silent.connect(str(tmp_path / "socket"))  # accepted first, then waited for
            started = time.monotonic()
            assert serves(tmp_path / "socket", tmp_path)
            waited = time.monotonic() - started
    finally:
        assert stop_server(process) == 0
    assert waited >= timeout  # the next launcher waited for the silent connection to time out...
    # ...and no longer: the bound leaves a loaded machine room, and fails a server that waits 30 s, as one did
    assert waited < timeout + 10
    assert kernel_server.REQUEST_TIMEOUT <= 2


def test_interrupt_reaches_the_kernel(server, start):
    km, kc = start()
    msg_id = kc.execute("import time\nprint('sleeping', flush=True)\ntime.sleep(60)")
    while kc.get_iopub_msg(timeout=10)["msg_type"] != "stream":
        pass  # the cell is running
    reply = None
    # Press again only when the reply is long overdue: a second interrupt that lands while the kernel is still
    # answering the first can make it drop the reply altogether (seen with two presses 0.01-0.2 s apart).
    for _ in range(4):
        km.interrupt_kernel()
        with contextlib.suppress(queue.Empty):
            reply = reply_to(kc, msg_id, timeout=12)
            break
    assert reply is not None, "four interrupts, and the cell still runs"
    assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KeyboardInterrupt", "\n".join(
        reply["content"].get("traceback", [reply["content"]]))
    for _ in range(20):  # after an error ipykernel aborts the requests that reached it meanwhile: ask again
        answer, reply = run(kc, "result = 'still here'")
        if reply["status"] != "aborted":
            break
        time.sleep(0.1)
    assert answer == "still here" and km.is_alive(), reply


def test_a_killed_launcher_takes_its_kernel_with_it(server, start):
    km, kc = start()
    kernel, _ = run(kc, "import os; result = os.getpid()")
    km.shutdown_kernel(now=True)  # SIGKILL to the launcher, as nbval's stop() does
    assert gone(kernel)


def test_a_kernel_is_killed_with_the_processes_it_started(server, start):
    km, kc = start()
    child, _ = run(kc, "import subprocess; result = subprocess.Popen(['sleep', '300']).pid")
    km.shutdown_kernel(now=True)  # as jupyter_client kills a fresh kernel's process group
    assert gone(child), "the kernel's child outlived it"


def test_the_server_stops_its_kernels_when_the_run_ends(start, tmp_path, monkeypatch):
    folder = tmp_path / "server"
    folder.mkdir()
    monkeypatch.setenv(kernel_server.ENV, str(folder / "socket"))
    server = start_server(folder / "socket", remove_folder=True)
    _, kc = start()
    # ipykernel ends a kernel whose parent (the server) has gone by itself, within a second: keep this one
    # from noticing, so that only the server's own clean-up can stop it
    kernel, _ = run(kc, "import os; os.getppid = lambda: 2; result = os.getpid()")
    assert stop_server(server) == 0  # what happens, too, when the test run is killed: standard input closes
    assert gone(kernel), "the kernel outlived the server"
    assert not folder.exists()  # nor the socket in it


def test_without_a_server_the_launcher_starts_an_ordinary_kernel(start, monkeypatch, tmp_path):
    monkeypatch.setenv(kernel_server.ENV, str(tmp_path / "no-server"))
    km, kc = start()
    facts, reply = run(kc, PROBE)
    assert reply["status"] == "ok", reply
    assert facts["pid"] == km.provisioner.process.pid  # exec'd in place: the launcher is the kernel
    assert not facts["preloaded"]


#: A stand-in for ipykernel's launcher module: says which process runs it, with what arguments, and whether
#: the server's preloaded module is there (it is not, in a fresh interpreter).
STAND_IN = f"""import json, os, sys
print(json.dumps({{"pid": os.getpid(), "argv": sys.argv[1:], "preloaded": {PRELOADED!r} in sys.modules}}))
"""


@pytest.mark.parametrize("reads", [True, False], ids=["after reading the request", "at once"])
def test_when_the_server_declines_the_launcher_starts_an_ordinary_kernel(tmp_path, reads):
    path = tmp_path / "declining"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)

    def decline():  # what the server does on a GPU build of torch: close the connection, answer nothing
        conn, _ = listener.accept()
        with conn:
            if reads:
                for fd in kernel_server._receive(conn)[1]:  # the launcher's streams: not kept open here
                    os.close(fd)

    declining = threading.Thread(target=decline)
    declining.start()
    # The launcher as jupyter_client starts it, with the stand-in first on the path of the interpreter it
    # execs (test_without_a_server_the_launcher_starts_an_ordinary_kernel runs the real ipykernel this way).
    (tmp_path / "ipykernel_launcher.py").write_text(STAND_IN, encoding="utf-8")
    argv = [arg.replace("{connection_file}", "kernel.json") for arg in kernel_server.launcher_argv()]
    env = {**os.environ, kernel_server.ENV: str(path), "PYTHONPATH": str(tmp_path)}
    with subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True) as launcher:
        out, _ = launcher.communicate(timeout=60)
    declining.join(timeout=10)
    listener.close()
    assert launcher.returncode == 0 and out, out
    # exec'd in place (the launcher is the kernel), with the kernel spec's arguments, in a fresh interpreter
    assert json.loads(out) == {"pid": launcher.pid, "argv": ["-f", "kernel.json"], "preloaded": False}


#: Run as ``python -u -c PYTHON_PROBE A B`` (as pytest-xdist starts its workers): what the process sees.
PYTHON_PROBE = f"""import json, os, sys
line = sys.stdin.readline()
mpl = sys.modules.get("matplotlib")
_name = lambda backend: "auto" if backend is mpl.rcsetup._auto_backend_sentinel else backend
print(json.dumps({{"pid": os.getpid(), "argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd(),
                  "mark": os.environ.get("MARK"), "preloaded": {PRELOADED!r} in sys.modules, "line": line,
                  "main": sorted(k for k in vars(sys.modules["__main__"]) if not k.startswith("__")),
                  "backend": None if mpl is None else _name(mpl.rcParams._get("backend"))}}))
sys.exit(int(os.environ.get("STATUS", "0")))
"""


def run_python(argv, tmp_path, env=None):
    """``python -u -c PYTHON_PROBE a b`` through :func:`kernel_server.python_argv`; its facts and exit status."""
    command = [*kernel_server.python_argv(), *argv]
    with subprocess.Popen(command, cwd=tmp_path, env={**os.environ, **(env or {})}, text=True,
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE) as launcher:
        out, _ = launcher.communicate("first line\nsecond line\n", timeout=60)
    return json.loads(out), launcher.returncode, launcher.pid


def test_a_forked_python_runs_its_code_as_python_dash_c_would(server, tmp_path):
    plain = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    env = {**plain, "MARK": "m", "STATUS": "3"}
    facts, status, launcher = run_python(["-u", "-c", PYTHON_PROBE, "a", "b"], tmp_path, env)
    assert status == 3 and facts["pid"] != launcher  # a fork of the server, whose exit status the launcher takes
    assert facts["preloaded"] and facts["mark"] == "m" and facts["cwd"] == str(tmp_path)
    assert facts["argv"] == ["-c", "a", "b"] and facts["path0"] == ""  # as `python -c` sets them
    assert facts["line"] == "first line\n"  # its standard input is the launcher's
    assert facts["main"] == ["_name", "json", "line", "mpl", "os", "sys"]  # a new __main__: none of the server's names
    # matplotlib, imported by the server, reads its backend from this process's environment, as if imported
    # here: the one named, else what matplotlib's own configuration says (not ipykernel's inline backend)
    facts, status, _ = run_python(["-u", "-c", PYTHON_PROBE], tmp_path, {"MPLBACKEND": "agg"})
    assert status == 0 and facts["backend"] == "agg"
    import matplotlib

    configured = matplotlib.rcParamsOrig._get("backend")  # rcParamsOrig: before MPLBACKEND is applied
    facts, _, _ = run_python(["-u", "-c", PYTHON_PROBE], tmp_path, {"MPLBACKEND": ""})
    assert facts["backend"] == ("auto" if configured is matplotlib.rcsetup._auto_backend_sentinel else configured)


def test_a_forked_python_runs_a_module_as_python_dash_m_would(server, tmp_path):
    (tmp_path / "probe.py").write_text(PYTHON_PROBE, encoding="utf-8")
    facts, status, launcher = run_python(["-m", "probe", "a", "b"], tmp_path, {"STATUS": "4"})
    assert status == 4 and facts["pid"] != launcher and facts["preloaded"]  # a fork of the server
    assert facts["argv"] == [str(tmp_path / "probe.py"), "a", "b"] and facts["path0"] == str(tmp_path)
    assert facts["main"] == ["_name", "json", "line", "mpl", "os", "sys"] and facts["line"] == "first line\n"
    plain = subprocess.run([sys.executable, "-m", "probe", "a", "b"], cwd=tmp_path, input="first line\n",
                           capture_output=True, text=True, timeout=60)
    fresh = json.loads(plain.stdout)
    assert (fresh["argv"], fresh["path0"], fresh["main"]) == (facts["argv"], facts["path0"], facts["main"])


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_a_fork_killed_by_a_signal_takes_its_launcher_with_it_by_the_same_signal(server, tmp_path, signum):
    code = f"import os, signal; print(os.getpid(), flush=True); os.kill(os.getpid(), {int(signum)})"
    done = subprocess.run([*kernel_server.python_argv(), "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == -signum, done.stderr[-2000:]
    assert done.stderr == "" and int(done.stdout) != 0


@pytest.mark.parametrize("where", ["no server", "other arguments"])
def test_a_python_the_server_does_not_fork_is_an_ordinary_one(server, tmp_path, monkeypatch, where):
    if where == "no server":
        monkeypatch.setenv(kernel_server.ENV, str(tmp_path / "no-server"))
        argv = ["-u", "-c", PYTHON_PROBE, "a"]
    else:  # only [-u] [-B] -c CODE or -m MODULE is forked; anything else is the interpreter's to run
        (tmp_path / "probe.py").write_text(PYTHON_PROBE, encoding="utf-8")
        argv = ["-u", "probe.py", "a"]
    facts, status, launcher = run_python(argv, tmp_path)
    assert status == 0 and facts["pid"] == launcher and not facts["preloaded"]  # exec'd in place
    assert facts["argv"][1:] == ["a"] and facts["line"] == "first line\n"


def test_the_runs_workers_start_through_the_server_only_where_it_runs(monkeypatch):
    config = SimpleNamespace(option=SimpleNamespace(tx=["popen", "popen", "ssh=elsewhere"]))
    monkeypatch.delenv(kernel_server.ENV, raising=False)
    conftest._fork_workers_from_the_server(config)
    assert config.option.tx == ["popen", "popen", "ssh=elsewhere"]
    monkeypatch.setenv(kernel_server.ENV, "/some/socket")
    conftest._fork_workers_from_the_server(config)
    assert config.option.tx == [config.option.tx[0]] * 2 + ["ssh=elsewhere"]
    import execnet
    from execnet.gateway_io import popen_args

    assert popen_args(execnet.XSpec(config.option.tx[0]))[:4] == kernel_server.python_argv()


def test_this_runs_workers_are_forks_of_its_server_where_torch_allows():
    """The speed this buys is easy to lose without a failure: a worker that falls back starts as usual."""
    import torch

    if not (os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get(kernel_server.ENV)):
        pytest.skip("this run has no workers or no kernel server")
    parent = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().split(b"\0")
    assert (b"--serve" in parent) == kernel_server.fork_safe(torch), parent


@pytest.mark.parametrize(
    "cuda, hip, safe",
    [(False, None, True), (True, None, False), (False, "6.2", False)],
    ids=["cpu build", "cuda build", "rocm build"],
)
def test_kernels_are_forked_only_from_a_cpu_build_of_torch(cuda, hip, safe):
    fake = SimpleNamespace(backends=SimpleNamespace(cuda=SimpleNamespace(is_built=lambda: cuda)),
                           version=SimpleNamespace(hip=hip))
    assert kernel_server.fork_safe(fake) == safe


def test_this_torch_is_judged_by_the_same_rule():
    import torch

    assert kernel_server.fork_safe(torch) == (torch.version.cuda is None and torch.version.hip is None)


def test_nbvals_kernel_starts_through_the_launcher_while_there_is_a_server(monkeypatch):
    import nbval.kernel

    conftest._launch_kernels_from_the_server()  # what the run does when it forks kernels (idempotent)
    manager = nbval.kernel.NbvalKernelspecManager()
    monkeypatch.setenv(kernel_server.ENV, "/some/socket")
    spec = manager.get_kernel_spec(nbval.kernel.CURRENT_ENV_KERNEL_NAME)
    assert spec.argv == [sys.executable, "-S", os.path.abspath(kernel_server.__file__), "-f", "{connection_file}"]
    monkeypatch.delenv(kernel_server.ENV)
    spec = manager.get_kernel_spec(nbval.kernel.CURRENT_ENV_KERNEL_NAME)
    assert spec.argv[1:] == ["-m", "ipykernel_launcher", "-f", "{connection_file}"]


@pytest.mark.parametrize(
    "args, environ, platform, collect_only, forks",
    [
        ([], {}, "linux", False, True),  # the whole suite
        (["notebooks"], {}, "linux", False, True),
        (["notebooks/01_layers_and_blocks.ipynb::Cell 3"], {}, "linux", False, True),
        (["tests/test_timing.py", "tests/test_checks.py::test_x"], {}, "linux", False, False),  # no notebook
        ([], {"FRESH_KERNELS": "1"}, "linux", False, False),
        ([], {}, "darwin", False, False),  # fork after importing torch is not safe on macOS
        ([], {}, "linux", True, False),  # --collect-only starts no kernel
    ],
)
def test_when_the_run_forks_kernels(args, environ, platform, collect_only, forks):
    assert conftest.forks_kernels(args, collect_only, environ, platform) == forks


def gone(pid: int, within: float = 10) -> bool:
    """Whether process ``pid`` ends within ``within`` seconds. One still running then is killed, so that a
    failing test leaves nothing behind."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state == "Z":  # dead, waiting to be reaped by a parent that is going away too
            return True
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    return False
