"""llama.cpp's RPC workers (ggml-rpc-server) on loopback for the tests: recorded by `ggml-viz run`
or not, standing in for a second device on a machine without one."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .native import llama_tool

# Python source that defines register_worker(endpoint): a worker's device registered with the ggml of
# llama-cpp-python, as llama.cpp's --rpc registers it (common/arg.cpp, add_rpc_devices), before a model
# loads; ggml then counts it as a GPU device. For scripts a test runs in a process of their own.
REGISTER_WORKER = """
import ctypes
from pathlib import Path

import llama_cpp


def register_worker(endpoint):
    lib = Path(llama_cpp.__file__).parent / "lib"
    rpc = ctypes.CDLL(str(lib / "libggml-rpc.so"))
    rpc.ggml_backend_rpc_add_server.restype = ctypes.c_void_p
    rpc.ggml_backend_rpc_add_server.argtypes = [ctypes.c_char_p]
    ggml = ctypes.CDLL(str(lib / "libggml.so"))
    ggml.ggml_backend_register.argtypes = [ctypes.c_void_p]
    registry = rpc.ggml_backend_rpc_add_server(endpoint.encode())
    assert registry, "ggml_backend_rpc_add_server failed"
    ggml.ggml_backend_register(registry)
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Worker:
    """A ggml-rpc-server on loopback (recorded by `ggml-viz run`, where started so)."""

    port: int
    output: Path
    wrapper: subprocess.Popen
    log: Path

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def server_pid(self) -> int:
        """The server itself: the wrapper's child."""
        children = subprocess.run(["pgrep", "-P", str(self.wrapper.pid)], capture_output=True, text=True).stdout.split()
        assert len(children) == 1, f"ggml-viz run has {len(children)} children"
        return int(children[0])

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Stop the server (SIGTERM to the wrapper, which passes it on) and wait for the run."""
        if self.wrapper.poll() is None:
            self.wrapper.send_signal(sig)
        return self.wrapper.wait(timeout=120)


def start_worker(folder: Path, name: str, recorded: bool = True) -> Worker:
    """A worker on a free port, under `ggml-viz run` (or, not `recorded`, on its own: `wrapper` is
    then the server itself)."""
    port = free_port()
    log = folder / f"{name}.log"
    command = [str(llama_tool("ggml-rpc-server")), "-t", "1", "-H", "127.0.0.1", "-p", str(port)]
    if recorded:
        command = [sys.executable, "-m", "ggml_viz", "run", "-o", str(folder / f"{name}.ggmlviz"), "--", *command]
    with open(log, "w") as out:
        wrapper = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    wait_for_port(port, wrapper)
    return Worker(port, folder / f"{name}.ggmlviz", wrapper, log)


def wait_for_port(port: int, process: subprocess.Popen) -> None:
    """Until the server accepts a connection (which then says nothing)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            pass
        assert process.poll() is None, "the worker ended early"
        time.sleep(0.1)
    raise AssertionError("the worker did not start")
