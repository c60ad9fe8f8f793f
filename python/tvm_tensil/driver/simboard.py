"""The simulated board: a Verilated core in its own process, memory shared with the host.

``tvm-tensil serve --arch pynqz1 --socket /tmp/tcu.sock`` runs ``SimBoardServer``: one shared-memory
region (a file in /dev/shm, mapped by both processes) is the board's DRAM, addressed by the core's
AXI ports from 0 (the "physical" address is the offset in the region); instruction streams and
completion travel over a Unix socket. ``SimBoardTransport`` is the driver's side.

Protocol: the server greets each client with a JSON line (architecture, region size, stream width)
that carries the region's file descriptor (SCM_RIGHTS; the file itself is already unlinked); a client
sends ``{"op": "run", "bytes": n}`` and n bytes of instructions, or
``{"op": "reset"}``; the server answers each with a JSON line (``{"ok": true, "cycles": ...}`` or
``{"ok": false, "error": ...}``).

One client at a time: a second client is queued by the listening socket and greeted when the first
disconnects (its own timeout applies while it waits). Every client starts on a fresh core. A client
that dies mid-run is noticed between slices of simulation; its run is abandoned and the core reset.
"""

from __future__ import annotations

import json
import mmap
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Callable

import numpy as np

from ..arch import MEMORY_TIMING, Architecture
from ..rtl.sim import CoreFlag, RunStatus
from . import WINDOW_ALIGN, Buffer, DriverError, Transport

SLICE_CYCLES = 200_000  # simulated between checks that the client is still there
MAX_PROGRAM_BYTES = 1 << 30


def _align(n: int) -> int:
    return (n + WINDOW_ALIGN - 1) // WINDOW_ALIGN * WINDOW_ALIGN


def default_memory_bytes(arch: Architecture) -> int:
    """Room for both DRAM windows, aligned, after a reserved first 64 KiB (no buffer at address 0)."""
    return WINDOW_ALIGN + _align(arch.dram0_depth * arch.vector_bytes) + _align(arch.dram1_depth * arch.vector_bytes)


def _send(conn: socket.socket, obj: dict) -> None:
    conn.sendall((json.dumps(obj) + "\n").encode())


def _recv_line(conn: socket.socket, buf: bytearray, limit: int = 1 << 16) -> bytes | None:
    while b"\n" not in buf:
        chunk = conn.recv(4096)
        if not chunk:
            return None
        buf += chunk
        if len(buf) > limit:
            raise ValueError("request line too long")
    line, _, rest = bytes(buf).partition(b"\n")
    buf[:] = rest
    return line


def _recv_exact(conn: socket.socket, buf: bytearray, n: int) -> bytes | None:
    while len(buf) < n:
        chunk = conn.recv(max(65536, n - len(buf)))
        if not chunk:
            return None
        buf += chunk
    data = bytes(buf[:n])
    del buf[:n]
    return data


class SimBoardServer:
    """A Verilated core serving one client at a time over a Unix socket."""

    def __init__(
        self,
        arch: Architecture,
        socket_path: str,
        memory_bytes: int | None = None,
        read_latency: int = MEMORY_TIMING["read_latency"],
        write_latency: int = MEMORY_TIMING["write_latency"],
        max_reads: int = MEMORY_TIMING["max_reads"],
        stall_limit: int = 1_000_000,
        log=None,
    ):
        from ..rtl import sim

        self.arch = arch
        self.socket_path = socket_path
        self.lib = sim.load(arch)
        self.size = memory_bytes or default_memory_bytes(arch)
        self.stream_bytes = (arch.axi_data_width or 64) // 8
        self.timing = (read_latency, write_latency, max_reads)
        self.stall_limit = stall_limit
        self.log = log or (lambda msg: print(f"tvm-tensil serve: {msg}", file=sys.stderr, flush=True))
        # The region is a file on tmpfs, unlinked at once: clients get its descriptor over the socket,
        # so nothing is left behind however the processes end.
        shm_dir = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
        path = os.path.join(shm_dir, f"tvm_tensil_board_{os.getpid()}_{uuid.uuid4().hex[:8]}")
        self._file = open(path, "w+b")
        os.unlink(path)
        self._file.truncate(self.size)
        self._map = mmap.mmap(self._file.fileno(), self.size)
        self.memory = np.frombuffer(self._map, dtype=np.uint8)
        self.core = None
        self.sock = None

    def new_core(self) -> None:
        if self.core:
            self.lib.tcu_sim_free(self.core)
        ptr = self.memory.ctypes.data
        self.core = self.lib.tcu_sim_new(ptr, self.size, ptr, self.size, self.stream_bytes, *self.timing, b"")

    def hello(self) -> dict:
        return {"arch": self.arch.to_dict(), "size": self.size, "stream_bytes": self.stream_bytes}

    def serve_forever(self, ready: Callable[[], None] | None = None, max_clients: int | None = None) -> None:
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.socket_path)
        self.sock.listen(8)  # waiting clients queue here
        self.log(f"serving {self.arch.name or 'custom'} on {self.socket_path} ({self.size >> 20} MiB shared memory)")
        if ready:
            ready()
        served = 0
        try:
            while max_clients is None or served < max_clients:
                conn, _ = self.sock.accept()
                served += 1
                try:
                    self.handle(conn)
                except (ConnectionError, OSError) as e:
                    self.log(f"client lost: {e}")
                finally:
                    conn.close()
        finally:
            self.close()

    def handle(self, conn: socket.socket) -> None:
        self.new_core()  # every client starts on a fresh core
        socket.send_fds(conn, [(json.dumps(self.hello()) + "\n").encode()], [self._file.fileno()])
        buf = bytearray()
        while True:
            line = _recv_line(conn, buf)
            if line is None:
                return
            try:
                req = json.loads(line)
                op = req.get("op")
            except (ValueError, AttributeError):
                _send(conn, {"ok": False, "error": "request is not a JSON object"})
                continue
            if op == "reset":
                self.new_core()
                _send(conn, {"ok": True})
            elif op == "run":
                n = req.get("bytes")
                if not isinstance(n, int) or n <= 0 or n > MAX_PROGRAM_BYTES or n % self.stream_bytes:
                    _send(
                        conn,
                        {
                            "ok": False,
                            "error": f"'bytes' must be a positive multiple of the stream width "
                            f"({self.stream_bytes}) up to {MAX_PROGRAM_BYTES}, got {n!r}",
                        },
                    )
                    return  # the byte stream is out of step: drop the client
                data = _recv_exact(conn, buf, n)
                if data is None:
                    return
                reply = self.run(conn, data)
                if reply is None:
                    self.log("client left during a run; core reset")
                    return
                _send(conn, reply)
            else:
                _send(conn, {"ok": False, "error": f"unknown op {op!r}; expected 'run' or 'reset'"})

    def run(self, conn: socket.socket, data: bytes) -> dict | None:
        program = np.frombuffer(data, dtype=np.uint8)
        c0 = self.lib.tcu_sim_cycles(self.core)
        self.lib.tcu_sim_start(self.core, program.ctypes.data, len(data), self.stream_bytes)
        while True:
            rc = self.lib.tcu_sim_continue(self.core, self.stall_limit, SLICE_CYCLES)
            if rc != RunStatus.CYCLE_LIMIT:  # else the slice is over: check the client, go on
                break
            readable, _, _ = select.select([conn], [], [], 0)
            if readable and not conn.recv(1, socket.MSG_PEEK):
                self.new_core()
                return None
        cycles = int(self.lib.tcu_sim_cycles(self.core) - c0)
        flags = CoreFlag(self.lib.tcu_sim_flags(self.core))
        if rc == RunStatus.DONE and CoreFlag.ERROR in flags:
            pc = int(self.lib.tcu_sim_program_counter(self.core))
            self.new_core()
            return {
                "ok": False,
                "cycles": cycles,
                "error": f"the core raised its error flag (an invalid opcode or DataMove direction) by "
                f"program counter {pc}; it was reset",
            }
        if rc == RunStatus.DONE:
            return {"ok": True, "cycles": cycles, "saturated": CoreFlag.SATURATED in flags}
        msg = self.lib.tcu_sim_message(self.core).decode()
        pc = int(self.lib.tcu_sim_program_counter(self.core))
        self.new_core()
        return {
            "ok": False,
            "error": f"the core stopped at program counter {pc}: {msg}; it was reset",
            "cycles": cycles,
        }

    def close(self) -> None:
        if self.core:
            self.lib.tcu_sim_free(self.core)
            self.core = None
        if self.sock:
            self.sock.close()
            self.sock = None
            if os.path.exists(self.socket_path):
                os.unlink(self.socket_path)
        self.memory = None
        try:
            self._map.close()
        except BufferError:  # a view still alive; the mapping goes with the process
            pass
        self._file.close()


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
        self.conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.conn.settimeout(connect_timeout)
        try:
            self.conn.connect(socket_path)
            msg, fds, _, _ = socket.recv_fds(self.conn, 1 << 16, 1)  # the greeting and the memory's descriptor
            self._buf = bytearray(msg)
            line = _recv_line(self.conn, self._buf) if msg else None
        except (OSError, socket.timeout) as e:
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
        end = start + _align(nbytes)
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
        try:
            _send(self.conn, {"op": "run", "bytes": len(data)})
            self.conn.sendall(data)
        except OSError as e:
            raise DriverError(f"lost the simulated board at {self.socket_path}: {e}") from None
        self._pending = True

    def wait(self, done: Callable[[], bool], timeout: float) -> dict:
        self.conn.settimeout(timeout)
        try:
            line = _recv_line(self.conn, self._buf)
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
        _send(self.conn, {"op": "reset"})
        line = _recv_line(self.conn, self._buf)
        if line is None or not json.loads(line).get("ok"):
            raise DriverError("the simulated board did not reset")

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
