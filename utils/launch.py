"""Run a ``torchrun`` job from a notebook and wait for it (chapter 10).

:func:`torchrun` prints the command, runs it in a folder of your choice and returns what each agent
printed. ``torchrun`` is the module ``torch.distributed.run``: it runs as ``python -m
torch.distributed.run`` with this interpreter, so that the job uses the kernel's torch and packages. With
``machines=2`` it starts two agents on this computer, which meet at a ``c10d`` rendezvous on the loopback
address as two machines would; on real machines every machine runs the same command, with the first
machine's address instead of ``127.0.0.1``.

The agents get this process's environment (``CUDA_VISIBLE_DEVICES`` included), plus:

* ``OMP_NUM_THREADS=1``: one intra-op thread per process (torchrun sets it too, with a warning);
* ``GLOO_SOCKET_IFNAME``: the loopback interface (``lo``, or ``lo0`` on macOS), the one that reaches the
  other "machines" here;
* ``TMPDIR``: the job's folder, where torchrun then puts its log folders unless ``--log-dir`` says otherwise;
* whatever ``env`` adds, which the printed command shows.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from utils.i18n import L_, _

__all__ = ["command_line", "free_port", "rendezvous_flags", "torchrun"]

#: The placeholder the printed command shows for the rendezvous port, which changes from run to run.
PORT = "$PORT"
#: How this interpreter runs torchrun (tests put a stand-in here).
LAUNCHER = ["-m", "torch.distributed.run"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (the system picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rendezvous_flags(machines: int, port: int | str, job: str = "ch10") -> list[str]:
    """torchrun's flags for ``machines`` machines meeting at 127.0.0.1:``port`` (none for one machine)."""
    if not isinstance(machines, int) or isinstance(machines, bool) or machines < 1:
        raise ValueError(_("machines must be a positive int, got {machines}").format(machines=repr(machines)))
    if machines == 1:
        return []
    return [f"--nnodes={machines}", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id={job}",
            "--rdzv-conf=join_timeout=120", "--local-addr=127.0.0.1"]


def command_line(args: list[str], env: Mapping[str, str] | None = None, width: int = 100) -> str:
    """``args`` as a shell command line: ``env``'s assignments, ``torchrun``, the arguments, cut into lines of
    at most ``width`` characters that continue with ``\\``."""
    words = [f"{name}={shlex.quote(value) if value else ''}" for name, value in (env or {}).items()]
    words += ["torchrun", *(arg if arg.startswith(f"--rdzv-endpoint=127.0.0.1:{PORT}") else shlex.quote(arg)
                            for arg in args)]
    lines, line = [], ""
    for word in words:
        if line and len(line) + 1 + len(word) > width - 2:
            lines.append(line + " \\")
            line = "    " + word
        else:
            line = f"{line} {word}" if line else word
    return "\n".join([*lines, line])


def _agent_env(cwd: Path, env: Mapping[str, str]) -> dict[str, str]:
    found = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(cwd)}
    loopback = [name for _index, name in socket.if_nameindex() if name in ("lo", "lo0")]
    if loopback:
        found["GLOO_SOCKET_IFNAME"] = loopback[0]
    return {**found, **env}


def _wait(agents: list[subprocess.Popen], timeout: float) -> list[tuple[str, str]]:
    """Wait for every agent; on a failure or a timeout, stop them all (torchrun stops its workers) and raise."""
    deadline = time.monotonic() + timeout
    outputs: list[tuple[str, str]] = []
    late = False
    try:
        for agent in agents:
            outputs.append(agent.communicate(timeout=max(1.0, deadline - time.monotonic())))
    except subprocess.TimeoutExpired:
        late = True
    finally:
        for agent in agents:
            if agent.poll() is None:
                agent.terminate()
                try:
                    agent.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    agent.kill()
                    agent.wait()
    if late:
        outputs = [agent.communicate() for agent in agents[len(outputs):]]
        raise RuntimeError(_("the torchrun job was still running after {seconds} s; it was stopped:").format(
            seconds=timeout) + "\n" + "\n".join(out + err for out, err in outputs))
    if any(agent.returncode for agent in agents):
        raise RuntimeError(_("the torchrun job failed:") + "\n" + "\n".join(out + err for out, err in outputs))
    return outputs


def torchrun(*args: str, cwd: str | os.PathLike, machines: int = 1, env: Mapping[str, str] | None = None,
             job: str = "ch10", timeout: float = 240.0) -> list[tuple[str, str]]:
    """Print and run ``torchrun ARGS`` in ``cwd`` on ``machines`` agents; return each agent's (stdout, stderr).

    With ``machines`` > 1 the rendezvous flags come first (:func:`rendezvous_flags`, run ``job``), on a port
    free now, which the printed command shows as ``$PORT``. ``env`` adds to the agents' environment. Raises
    ``RuntimeError`` with everything the agents printed when one of them fails, or all are still running
    after ``timeout`` seconds (they are stopped first).
    """
    cwd = Path(cwd)
    env = dict(env or {})
    port = free_port()
    if machines > 1:
        print(L_("Each of the {machines} machines runs (here: {machines} torchrun agents on this computer, "
                 "$PORT a free port):").format(machines=machines))
    print(command_line([*rendezvous_flags(machines, PORT, job), *args], env))
    command = [sys.executable, *LAUNCHER, *rendezvous_flags(machines, port, job), *args]
    agents = [subprocess.Popen(command, cwd=cwd, env=_agent_env(cwd, env), text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _agent in range(machines)]
    return _wait(agents, timeout)
