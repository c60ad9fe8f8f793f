"""The "sim-board" device: the board driver over a simulated board (``tvm-tensil serve``).

The Verilated core runs in another process (``serve.py``); DRAM is a shared-memory region both map,
instructions and completion go over a Unix socket. Without a socket path, a private server is
started for the device and stopped with it.
"""

from __future__ import annotations

import json
import mmap
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np

from ...arch import Architecture
from .device import BoardDevice
from .driver import WINDOW_ALIGN, Buffer, DriverError, Transport
from .serve import align_window, recv_line, send_message


class SimBoardTransport(Transport):
    """The driver's side of a ``tvm-tensil serve`` process (started here if no socket is given)."""

    needs_probe = False  # the server answers when the core is idle; the driver may still use the probe

    def __init__(
        self, arch: Architecture, socket_path: str | None = None, connect_timeout: float = 120.0, **server_options
    ):
        self.arch = arch
        self.process = None  # the server this transport started, stopped again by close()
        self._folder = None  # its socket and .tarch, removed by close()
        if socket_path is None:
            self._folder = tempfile.mkdtemp(prefix="tvm_tensil_board_")
            socket_path, self.process = self._spawn(arch, self._folder, connect_timeout, server_options)
        self.socket_path = socket_path
        self.control_timeout = connect_timeout  # every exchange but a run's wait is bounded by this
        self.conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.conn.settimeout(connect_timeout)
        try:
            self.conn.connect(socket_path)
            msg, fds, _, _ = socket.recv_fds(self.conn, 1 << 16, 1)  # the greeting and the memory's descriptor
            self._buf = bytearray(msg)
            line = recv_line(self.conn, self._buf) if msg else None
        except socket.timeout:
            self.close()
            raise DriverError(
                f"the simulated board at {socket_path} did not greet within {connect_timeout:g} s "
                "(is its server stopped or busy with another client?)"
            ) from None
        except OSError as e:
            self.close()
            raise DriverError(
                f"cannot reach the simulated board at {socket_path}: {e}. Start one with "
                f"`tvm-tensil serve --arch <arch> --socket {socket_path}`"
            ) from None
        if line is None or len(fds) != 1:
            self.close()
            raise DriverError(f"the simulated board at {socket_path} closed the connection before greeting")
        hello = json.loads(line)
        server_arch = Architecture.from_dict(hello["arch"])
        if server_arch != arch:
            self.close()
            raise DriverError(
                f"the simulated board at {socket_path} runs architecture "
                f"'{server_arch.name}', not '{arch.name}': start a server with --arch for this model"
            )
        self.stream_bytes = hello["stream_bytes"]
        self.size = hello["size"]
        self._file = os.fdopen(fds[0], "r+b")
        self._map = mmap.mmap(self._file.fileno(), self.size)
        self.memory = np.frombuffer(self._map, dtype=np.uint8)
        self._next = WINDOW_ALIGN  # nothing at address 0: a zero address is never mistaken for a buffer
        self._pending = False

    @staticmethod
    def _spawn(arch: Architecture, folder: str, timeout: float, options: dict):
        sock = os.path.join(folder, "board.sock")
        tarch = os.path.join(folder, "arch.tarch")
        Path(tarch).write_text(arch.to_json())
        # --once: the server ends with its one client, even if this process dies without closing it.
        cmd = [sys.executable, "-m", "tvm_tensil.cli", "serve", "--arch", tarch, "--socket", sock, "--once"]
        for key, value in options.items():
            cmd += [f"--{key.replace('_', '-')}", str(value)]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while not os.path.exists(sock):
            if proc.poll() is not None:
                raise DriverError(f"the simulated board server exited with code {proc.returncode} (see its stderr)")
            if time.monotonic() > deadline:
                proc.kill()
                raise DriverError(f"the simulated board server did not start within {timeout:g} s")
            time.sleep(0.05)
        return sock, proc

    def allocate(self, nbytes: int) -> Buffer:
        start = self._next
        end = start + align_window(nbytes)
        if end > self.size:
            raise DriverError(
                f"the simulated board's memory ({self.size} bytes) has no room for {nbytes} more "
                f"bytes; start the server with a larger --memory"
            )
        self._next = end
        return Buffer(self.memory[start : start + nbytes], start)

    def stream(self, data: bytes) -> None:
        if self._pending:
            raise DriverError("a program is still running on the simulated board")
        self.conn.settimeout(self.control_timeout)
        try:
            send_message(self.conn, {"op": "run", "bytes": len(data)})
            self.conn.sendall(data)
        except socket.timeout:
            self.close()
            raise DriverError(self._silent("take the program")) from None
        except OSError as e:
            raise DriverError(f"lost the simulated board at {self.socket_path}: {e}") from None
        self._pending = True

    def wait(self, done: Callable[[], bool], timeout: float) -> dict:
        self.conn.settimeout(timeout)
        try:
            line = recv_line(self.conn, self._buf)
        except socket.timeout:
            self.close()  # the server notices, abandons the run and resets the core
            raise DriverError(
                f"the core did not complete within {timeout:g} s (the connection to the "
                "simulated board was closed; the next connection gets a fresh core)"
            ) from None
        except OSError as e:
            raise DriverError(f"lost the simulated board at {self.socket_path}: {e}") from None
        finally:
            self._pending = False
        if line is None:
            raise DriverError(f"the simulated board at {self.socket_path} closed the connection during a run")
        reply = json.loads(line)
        if not reply.get("ok"):
            raise DriverError(f"simulated board: {reply.get('error')}")
        if not done():
            raise DriverError(
                "the simulated board reported completion but the completion probe did not land "
                "in DRAM0: a core or driver bug"
            )
        return {"cycles": reply.get("cycles")}

    def reset(self) -> None:
        self.conn.settimeout(self.control_timeout)
        try:
            send_message(self.conn, {"op": "reset"})
            line = recv_line(self.conn, self._buf)
        except socket.timeout:
            self.close()
            raise DriverError(self._silent("reset")) from None
        except OSError as e:
            raise DriverError(f"lost the simulated board at {self.socket_path}: {e}") from None
        if line is None or not json.loads(line).get("ok"):
            raise DriverError(f"the simulated board at {self.socket_path} did not reset")

    def _silent(self, what: str) -> str:
        return (
            f"the simulated board at {self.socket_path} did not {what} within {self.control_timeout:g} s "
            "(is its server stopped?); the connection was closed"
        )

    def close(self) -> None:
        conn, self.conn = getattr(self, "conn", None), None
        if conn:
            conn.close()
        m = getattr(self, "_map", None)
        if m is not None:
            self.memory = None
            try:
                m.close()
            except BufferError:
                pass
            self._file.close()
            self._map = None
        proc, self.process = self.process, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        folder, self._folder = getattr(self, "_folder", None), None
        if folder:
            shutil.rmtree(folder, ignore_errors=True)


class SimBoard(BoardDevice):
    name = "sim-board"

    def __init__(self, arch: Architecture, socket_path: str | None = None, timeout: float = 300.0, **server_options):
        super().__init__(arch, SimBoardTransport(arch, socket_path, **server_options), timeout=timeout)

    def reset(self) -> None:
        """A fresh core on the server (local memory, accumulators, registers zero)."""
        if self.transport.conn is not None:
            self.transport.reset()
