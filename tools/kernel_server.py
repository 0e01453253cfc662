"""Notebook kernels and pytest-xdist workers for the test run, forked from one process that has already
imported torch.

Why. The regression run starts a fresh Jupyter kernel for every chapter, and a fresh kernel spends about
3 s of CPU before its first lesson line: Python, ipykernel and ``import torch``. On a two-core machine a
dozen of those are a fifth of the whole test command. Here one *kernel server* pays for those imports
once; every kernel nbval asks for is then a fork of it that runs ipykernel exactly as
``python -m ipykernel_launcher -f FILE`` would.

What a notebook sees. A new process with its own PID, random state, environment, working folder and
standard streams (the launcher's, i.e. what jupyter_client gave the kernel). ``torch`` is already in
``sys.modules`` (with what torch imports on first use, see ``PRELOAD``) but bound to no name until the
chapter's setup cell imports it, as in any fresh kernel. Nothing here is used outside the tests: Jupyter,
Colab and Binder start kernels the usual way, and ``FRESH_KERNELS=1`` makes the test run do so too.
Two differences remain. What torch, ipykernel and matplotlib read from the environment *at import* comes
from the test run's environment, since the server imported them. ipykernel's parent PID and matplotlib's
backend are set again for each kernel; torch reads the variables that matter here
(``CUDA_VISIBLE_DEVICES``, the allocator's settings) when CUDA starts, which happens in the kernel.
And Python picks the seed of ``hash()`` for strings and bytes at start-up: every kernel of a run hashes with
the server's seed, so, for instance, a set of strings iterates in the same order in each of them, and
``PYTHONHASHSEED`` in a kernel's own environment is ignored (the test run's applies, through the server).

How. ``conftest.py`` starts the server (``python tools/kernel_server.py --serve SOCKET``) and points the
kernel spec of nbval (and of the browser test's JupyterLab) at the launcher,
``python -S tools/kernel_server.py -f CONNECTION_FILE``. The launcher

1. connects to the socket named by ``$KERNEL_SERVER``, sends its standard streams (``SCM_RIGHTS``),
   argv, environment and folder; the server forks, and the child becomes the kernel;
2. forwards the signals jupyter_client sends it (interrupt, terminate) to the kernel's process group, and
   exits with the kernel's exit status once the server reports it;
3. falls back to ``exec python -m ipykernel_launcher ...`` when there is no server, or the server declined
   (a GPU build of torch: see :func:`fork_safe`).

Workers. The test run's pytest-xdist workers start the same way: their interpreter is ``python -S
tools/kernel_server.py --python`` (:func:`python_argv`), which sends ``-u -c CODE`` (how execnet starts a
worker) to the server; the fork runs CODE as ``python -u -c CODE`` would, in a new ``__main__`` with fresh
standard streams, ``sys.argv`` and ``sys.path[0]``. A worker sees the server's imports in ``sys.modules``
(torch, ``torch._dynamo``, ipykernel, pyplot), matplotlib's backend as its own environment and
configuration set it (not the kernels' inline one), and the server's hash seed. A few tests start Python
programs the same way (``python -m MODULE`` runs as it would too), where a fresh interpreter is not what
they test. Any other command line, or no server, execs the interpreter with the same arguments. Unlike a new
interpreter, a fork does not read ``PYTHONPATH`` and the other ``PYTHON*`` variables again: the server's apply.

Each kernel has its own session and process group, as jupyter_client gives a fresh kernel, and is killed
with its group, i.e. with the processes it started. If the launcher is killed (``shutdown_kernel(now=True)``
sends SIGKILL), its socket closes and the server kills the kernel; if the server's parent (the test run)
goes away, however it ends, the server kills every kernel, removes its socket (and, told to, the socket's
folder) and exits. Linux only (``fork`` after importing torch is not safe on macOS).

Only the standard library at module level: the launcher runs with ``-S`` to start in milliseconds.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import struct
import sys

ENV = "KERNEL_SERVER"  # the socket's path, for the launchers
HEADER = struct.Struct("!Q")
#: Seconds a request may fall silent before the server drops its connection. A launcher sends all of its
#: request as soon as it connects, and the server reads one request at a time: this is how long a stalled
#: connection holds up the launchers behind it.
REQUEST_TIMEOUT = 2
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
#: What the chapters' kernels import: torch; torch._dynamo and sympy, which the first ``optimizer.step()``
#: imports (about 2 s); ipykernel, with the debugger module every kernel imports as it starts (debugpy,
#: about 0.1 s; importing it starts no thread); matplotlib's pyplot (about 0.7 s; the explorers and the
#: figures of four chapters). matplotlib reads its backend from ``MPLBACKEND`` at import, so each kernel
#: sets it again from its own environment (:func:`_follow_environment`), as a fresh import would.
PRELOAD = ("torch", "torch._dynamo", "ipykernel.kernelapp", "ipykernel.ipkernel", "ipykernel.debugger",
           "matplotlib.pyplot")
#: The backend ipykernel gives matplotlib where the kernel's environment names none.
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"


def launcher_argv() -> list[str]:
    """A kernel spec's argv that starts the kernel through the server (or the usual way without one)."""
    return [sys.executable, "-S", os.path.abspath(__file__), "-f", "{connection_file}"]


def python_argv() -> list[str]:
    """An interpreter, for a program that starts ``python -u -c CODE`` (pytest-xdist's workers) or ``python -m
    MODULE``: given those arguments, it runs them in a fork of the server, or execs that very command without
    one."""
    return [sys.executable, "-S", os.path.abspath(__file__), "--python"]


def _python_command(argv: list[str]) -> tuple[list[str], str, str, list[str]] | None:
    """``(OPTIONS, "-c", CODE, ARGS)`` or ``(OPTIONS, "-m", MODULE, ARGS)`` for ``[-u] [-B] -c CODE [ARG ...]`` or
    ``[-u] [-B] -m MODULE [ARG ...]``, the only command lines a fork runs; else None."""
    at = next((i for i, arg in enumerate(argv) if arg in ("-c", "-m")), len(argv))
    if at + 1 >= len(argv) or any(option not in ("-u", "-B") for option in argv[:at]):
        return None
    return argv[:at], argv[at], argv[at + 1], argv[at + 2:]


def start_server(path, preload: tuple[str, ...] | None = None, remove_folder: bool = False,
                 request_timeout: float = REQUEST_TIMEOUT):
    """Start a server listening on ``path``; its ``subprocess.Popen``, or None if it did not come up.
    Closing its standard input stops it. With ``remove_folder`` it removes the (then empty) folder of
    ``path`` as it exits: a folder made for the socket alone. ``request_timeout``: see ``REQUEST_TIMEOUT``."""
    import subprocess

    args = [sys.executable, os.path.abspath(__file__), "--serve", str(path)]
    if preload is not None:
        args += ["--preload", ",".join(preload)]
    if remove_folder:
        args.append("--remove-folder")
    if request_timeout != REQUEST_TIMEOUT:
        args += ["--request-timeout", repr(float(request_timeout))]
    process = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    if process.stdout.readline() != b"listening\n":
        process.kill()
        process.wait()
        return None
    return process


# ---- the launcher (the process jupyter_client starts and manages as "the kernel") ----


def launch(argv: list[str], python: bool = False) -> None:
    """Become a kernel forked by the server, or exec a normal one if there is none. With ``python``,
    ``argv`` are the interpreter's arguments (``-u -c CODE``: see :func:`python_argv`), not ipykernel's."""
    own_argv = list(argv) if python else ["-m", "ipykernel_launcher", *argv]
    path = os.environ.get(ENV, "")
    request = {"argv": own_argv if python else ["ipykernel_launcher", *argv], "env": dict(os.environ),
               "cwd": os.getcwd(), "python": python}
    payload = json.dumps(request).encode()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    reader = conn.makefile("r")
    line = ""
    if not python or _python_command(argv) is not None:
        try:
            conn.connect(path)
            socket.send_fds(conn, [HEADER.pack(len(payload))], [0, 1, 2])
            conn.sendall(payload)
            line = reader.readline()
        except (OSError, ValueError):  # no server at that path, or it closed the connection
            line = ""
    if not line.strip().isdigit():  # no server, or it declined (a GPU build of torch): start as usual
        reader.close()
        conn.close()
        os.execv(sys.executable, [sys.executable, *own_argv])
    pid = int(line)

    def forward(signum, frame):
        signal_kernel(pid, signum)

    for signum in FORWARDED:
        signal.signal(signum, forward)
    line = reader.readline()  # "exit STATUS" when the kernel has exited; "" if the server went away
    status = int(line.split()[1]) if line.startswith("exit ") else 1
    if status < 0:  # the kernel died of a signal: so does its launcher, as jupyter_client expects
        if -status not in (signal.SIGKILL, signal.SIGSTOP):  # those two have no handler to reset
            signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    sys.exit(status)


# ---- the server ----


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    header, fds, _flags, _addr = socket.recv_fds(conn, HEADER.size, 3)
    try:
        if len(header) != HEADER.size or len(fds) != 3:  # a launcher killed before (or while) it asked
            raise ConnectionError("launcher went away before its request")
        (size,) = HEADER.unpack(header)
        data = b""
        while len(data) < size:
            chunk = conn.recv(size - len(data))
            if not chunk:
                raise ConnectionError("launcher went away mid-request")
            data += chunk
        return json.loads(data), fds
    except (OSError, ValueError):
        for fd in fds:  # the launcher's streams, which no kernel will take
            os.close(fd)
        raise


def _become_kernel(request: dict, fds: list[int], keep_none_of: list[int]) -> None:
    """In the forked child: take the launcher's streams, environment and folder, then run ipykernel (or,
    for a ``python`` request, what ``python -u -c CODE`` or ``python -m MODULE`` runs).

    Never returns: whatever happens, the child exits here (returning would run the server's loop, and its
    clean-up, in the child)."""
    status = 0
    try:
        os.setsid()  # a session and process group of its own, to be signalled as one (signal_kernel)
        for fd in keep_none_of:
            os.close(fd)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        python = bool(request.get("python"))
        _follow_environment(os.environ, kernel=not python)
        os.chdir(request["cwd"])
        import random

        random.seed()
        if "numpy.random" in sys.modules:
            sys.modules["numpy.random"].seed()
        if python:
            _run_python(request["argv"])
            return
        sys.argv = list(request["argv"])
        sys.path[0] = request["cwd"]  # as `python -m` sets it
        from ipykernel import kernelapp

        # ipykernel read its parent's PID from the environment when the server imported it: say it again
        if os.environ.get("JPY_PARENT_PID", "").isdigit():
            sys.argv.append(f"--IPKernelApp.parent_handle={os.environ['JPY_PARENT_PID']}")
        kernelapp.launch_new_instance()
    except SystemExit as stop:
        status = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
        status = 1
    finally:
        import atexit

        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


def _run_python(argv: list[str]) -> None:
    """What ``python [-u] [-B] -c CODE [ARG ...]`` (or ``-m MODULE``) does once started: fresh standard streams,
    ``sys.argv`` and ``sys.path[0]`` as ``-c`` (or ``-m``) sets them, and CODE run in a new ``__main__`` module
    (or MODULE run as ``__main__``, as ``python -m`` runs it)."""
    import io
    import types

    command = _python_command(argv)
    if command is None:
        raise SystemExit(f"kernel_server: cannot run {argv!r} (only [-u] [-B] -c CODE or -m MODULE)")
    options, kind, target, args = command
    unbuffered = "-u" in options
    sys.dont_write_bytecode = sys.dont_write_bytecode or "-B" in options
    encoding, errors = sys.stdout.encoding, sys.stdout.errors

    def stream(fd, mode):
        raw = io.FileIO(fd, mode, closefd=False)
        if mode == "r":
            return io.TextIOWrapper(io.BufferedReader(raw), encoding=encoding, errors=errors)
        if unbuffered:
            return io.TextIOWrapper(raw, encoding=encoding, errors=errors, write_through=True)
        return io.TextIOWrapper(io.BufferedWriter(raw), encoding=encoding, errors=errors, line_buffering=True)

    sys.stdin = sys.__stdin__ = stream(0, "r")
    sys.stdout = sys.__stdout__ = stream(1, "w")
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding=encoding,
                                                   errors="backslashreplace", line_buffering=True)
    if kind == "-m":
        import runpy

        sys.argv = [target, *args]  # runpy puts the module's file in sys.argv[0], as `python -m` does
        sys.path[0] = os.getcwd()  # as `python -m` sets it: the current folder, in full
        runpy.run_module(target, run_name="__main__", alter_sys=True)
        return
    sys.argv = ["-c", *args]
    sys.path[0] = ""  # as `python -c` sets it: the current folder
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    exec(compile(target, "<string>", "exec"), main.__dict__)


def _follow_environment(environ, kernel: bool = True) -> None:
    """What the server's imports read from *its* environment, read again from the child's: matplotlib's
    backend (``MPLBACKEND``; else, in a kernel, the inline backend that ipykernel sets for every kernel, and
    in plain Python what matplotlib's configuration files say, as a fresh import would read it)."""
    matplotlib = sys.modules.get("matplotlib")
    if matplotlib is None:
        return
    try:
        if kernel:
            backend = environ.get("MPLBACKEND") or INLINE_BACKEND
            # stored, not switched to: the backend module is imported on first use, once the kernel runs
            matplotlib.rcParams["backend"] = matplotlib.rcParamsOrig["backend"] = backend
        elif environ.get("MPLBACKEND"):
            matplotlib.rcParams["backend"] = environ["MPLBACKEND"]
        else:
            matplotlib.rcParams._set("backend", matplotlib.rcParamsOrig._get("backend"))
    except ValueError:
        # a backend matplotlib refuses: forget the import, so that the kernel's own `import matplotlib`
        # fails with matplotlib's message, as in a fresh kernel
        for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
            del sys.modules[name]


def serve(path: str, preload: tuple[str, ...] = PRELOAD, remove_folder: bool = False,
          request_timeout: float = REQUEST_TIMEOUT) -> None:
    """Listen on ``path``; fork a kernel per launcher until standard input closes (the test run ended, or
    was killed). ``remove_folder``: then remove the folder of ``path`` too, if empty."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    print("listening", flush=True)  # launchers may connect now; they wait until the imports are done
    kernels: dict[int, socket.socket] = {}  # pid -> its launcher's connection
    # Ctrl+C in a terminal reaches the whole foreground group, this server included: the test run and the
    # launchers (which pass it on to their forks) act on it; the server stops when the run does.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        if _preload(preload):
            _loop(listener, kernels, request_timeout)
    finally:
        for pid in kernels:
            signal_kernel(pid, signal.SIGKILL)
        listener.close()
        os.unlink(path)
        if remove_folder:
            try:
                os.rmdir(os.path.dirname(path))
            except OSError:  # not empty (or gone): not the server's to remove
                pass


def _preload(names) -> bool:
    """Import ``names``; False (serve nothing) where forking would not be safe."""
    import gc
    import importlib

    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"  # should anything ask, ask without starting CUDA
    gc.disable()  # what is imported stays: no automatic collection walking it over and over meanwhile
    try:
        for name in names:
            module = importlib.import_module(name)
            if name == "torch" and not fork_safe(module):
                return False
        # What was imported lives as long as each kernel: freezing it keeps every garbage collection in
        # every kernel from walking it again (and the forks from copying the pages such a walk would touch).
        gc.collect()
        gc.freeze()
    finally:
        gc.enable()
    return True


def fork_safe(torch) -> bool:
    """Whether kernels may be forked from a process that has imported this torch.

    A process that has started CUDA (even just to count GPUs) cannot hand it to a fork, and it is hard to
    be sure that no import does. So only CPU builds of torch are forked from: a GPU runner, or a laptop
    with the default CUDA wheel, starts every kernel the usual way.
    """
    return not (torch.backends.cuda.is_built() or getattr(torch.version, "hip", None))


def _loop(listener, kernels, request_timeout: float) -> None:
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    while True:
        conns = {conn.fileno(): pid for pid, conn in kernels.items()}
        ready, _, _ = select.select([listener, sys.stdin, wake_r, *conns], [], [])
        if sys.stdin in ready and not os.read(sys.stdin.fileno(), 4096):
            return  # the test run is over (or was killed)
        if wake_r in ready:
            os.read(wake_r, 4096)
            _reap(kernels)
        if listener in ready:
            _accept(listener, kernels, [listener.fileno(), wake_r, wake_w, sys.stdin.fileno()], request_timeout)
        for fd, pid in conns.items():
            if fd in ready and pid in kernels and _closed(kernels[pid]):
                signal_kernel(pid, signal.SIGKILL)  # the launcher was killed: so is its kernel (reaped on SIGCHLD)


def _closed(conn: socket.socket) -> bool:
    """Whether a launcher's connection, found readable, has closed. A launcher sends nothing after its
    request, so this is its end: end of file, or an error (ECONNRESET where it died with an answer unread)."""
    try:
        return not conn.recv(1)
    except OSError:
        return True


def _accept(listener, kernels, server_fds, request_timeout: float):
    conn, _ = listener.accept()
    conn.settimeout(request_timeout)  # a launcher whose request is cut short starts an ordinary kernel
    try:
        request, fds = _receive(conn)
    except (OSError, ValueError):
        conn.close()
        return
    conn.settimeout(None)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        others = [c.fileno() for c in kernels.values()]
        _become_kernel(request, fds, [*server_fds, conn.fileno(), *others])
    for fd in fds:
        os.close(fd)
    kernels[pid] = conn
    try:
        conn.sendall(f"{pid}\n".encode())
    except OSError:
        signal_kernel(pid, signal.SIGKILL)


def _reap(kernels):
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = kernels.pop(pid, None)
        if conn is not None:
            try:
                conn.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
            except OSError:
                pass
            conn.close()


def signal_kernel(pid: int, signum: int) -> None:
    """Send ``signum`` to a forked kernel's process group, as jupyter_client does to a fresh kernel's: the
    kernel and the processes it started. Right after the fork, before the kernel has made its group, to the
    kernel alone."""
    try:
        os.killpg(pid, signum)
    except ProcessLookupError:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--serve"]:  # --serve SOCKET [--preload MODULE,MODULE] [--remove-folder] [--request-timeout S]
        preload = tuple(filter(None, args[args.index("--preload") + 1].split(","))) if "--preload" in args else PRELOAD
        timeout = float(args[args.index("--request-timeout") + 1]) if "--request-timeout" in args else REQUEST_TIMEOUT
        serve(args[1], preload, remove_folder="--remove-folder" in args, request_timeout=timeout)
    elif args[:1] == ["--python"]:  # --python [-u] [-B] -c CODE (or -m MODULE): see python_argv()
        launch(args[1:], python=True)
    else:
        launch(sys.argv[1:])
