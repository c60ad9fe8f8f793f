"""The simulated board's server: a Verilated core in its own process, memory shared with the host.

``tvm-tensil serve --arch pynqz1 --socket /tmp/tcu.sock`` runs ``SimBoardServer``: one shared-memory
region (a file in /dev/shm, mapped by both processes) is the board's DRAM, addressed by the core's
AXI ports from 0 (the "physical" address is the offset in the region); instruction streams and
completion travel over a Unix socket. ``sim_board.SimBoardTransport`` is the driver's side.

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
import signal
import socket
import struct
import sys
import tempfile
import threading
import uuid
from typing import Callable

import numpy as np

from ...arch import MEMORY_TIMING, Architecture
from ...rtl.sim import SLICE_CYCLES, CoreFlag, RunStatus
from .driver import WINDOW_ALIGN

MAX_PROGRAM_BYTES = 1 << 30


def align_window(n: int) -> int:
    return (n + WINDOW_ALIGN - 1) // WINDOW_ALIGN * WINDOW_ALIGN


def default_memory_bytes(arch: Architecture) -> int:
    """Room for both DRAM windows, aligned, after a reserved first 64 KiB (no buffer at address 0)."""
    return (
        WINDOW_ALIGN
        + align_window(arch.dram0_depth * arch.vector_bytes)
        + align_window(arch.dram1_depth * arch.vector_bytes)
    )


def _peer(conn: socket.socket) -> str:
    """Who connected: the client's process id, where the platform tells (Linux: SO_PEERCRED)."""
    try:
        pid, _, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
        return f"pid {pid}"
    except (AttributeError, OSError):
        return "pid unknown"


def send_message(conn: socket.socket, obj: dict) -> None:
    conn.sendall((json.dumps(obj) + "\n").encode())


def recv_line(
    conn: socket.socket, buf: bytearray, limit: int = 1 << 16, wait: Callable[[socket.socket], None] | None = None
) -> bytes | None:
    while b"\n" not in buf:
        if wait:
            wait(conn)
        chunk = conn.recv(4096)
        if not chunk:
            return None
        buf += chunk
        if len(buf) > limit:
            raise ValueError("request line too long")
    line, _, rest = bytes(buf).partition(b"\n")
    buf[:] = rest
    return line


def recv_exact(
    conn: socket.socket, buf: bytearray, n: int, wait: Callable[[socket.socket], None] | None = None
) -> bytes | None:
    while len(buf) < n:
        if wait:
            wait(conn)
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
        from ...rtl import sim

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
        self._wakeup = None  # (read end, write end) of the signal wake-up pair, while serving
        self.runs, self.cycles = 0, 0  # the current client's

    def new_core(self) -> None:
        self._free_core()
        ptr = self.memory.ctypes.data
        self.core = self.lib.tcu_sim_new(ptr, self.size, ptr, self.size, self.stream_bytes, *self.timing, b"")

    def hello(self) -> dict:
        return {"arch": self.arch.to_dict(), "size": self.size, "stream_bytes": self.stream_bytes}

    def serve_forever(self, ready: Callable[[], None] | None = None, max_clients: int | None = None) -> None:
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # Bound under another name and renamed once listening: a client that sees the socket file
        # can connect (between bind and listen it would be refused).
        staging = f"{self.socket_path}.{os.getpid()}"
        try:
            self.sock.bind(staging)
        except OSError:  # (a path near the length limit): bound in place
            staging = self.socket_path
            self.sock.bind(staging)
        self.sock.listen(8)  # waiting clients queue here
        os.replace(staging, self.socket_path)
        self.log(f"serving {self.arch.name or 'custom'} on {self.socket_path} ({self.size >> 20} MiB shared memory)")
        if ready:
            ready()
        served = 0
        previous_wakeup = self._watch_signals()
        try:
            while max_clients is None or served < max_clients:
                self.wait_readable(self.sock)
                conn, _ = self.sock.accept()
                served += 1
                self.runs, self.cycles = 0, 0
                self.log(f"client {served} connected ({_peer(conn)})")
                try:
                    self.handle(conn)
                except (ConnectionError, OSError) as e:
                    self.log(f"client {served} lost: {e}")
                finally:
                    conn.close()
                self.log(f"client {served} left after {self.runs} run(s), {self.cycles} cycles")
        finally:
            self._unwatch_signals(previous_wakeup)
            self.close()

    def _watch_signals(self) -> int | None:
        """Wake the blocking waits on any signal. A process-directed signal may be delivered to
        another thread (numpy's BLAS pool): the main thread, blocked in accept() or recv(), would
        not run the Python handler (SIGTERM's: clean up and exit) until a client came."""
        if threading.current_thread() is not threading.main_thread():
            return None  # (only the main thread runs signal handlers)
        self._wakeup = socket.socketpair()
        for end in self._wakeup:
            end.setblocking(False)
        return signal.set_wakeup_fd(self._wakeup[1].fileno(), warn_on_full_buffer=False)

    def _unwatch_signals(self, previous: int | None) -> None:
        pair, self._wakeup = self._wakeup, None
        if pair:
            signal.set_wakeup_fd(previous if previous is not None else -1)
            for end in pair:
                end.close()

    def wait_readable(self, sock: socket.socket) -> None:
        """Block until `sock` has data (or a connection); a signal ends the wait, so its handler runs."""
        wakeup = self._wakeup
        if wakeup is None:
            return
        while True:
            readable, _, _ = select.select([sock, wakeup[0]], [], [])
            if wakeup[0] in readable:
                try:
                    wakeup[0].recv(64)  # (the handler runs on the way back to Python)
                except BlockingIOError:
                    pass
            if sock in readable:
                return

    def handle(self, conn: socket.socket) -> None:
        self.new_core()  # every client starts on a fresh core
        socket.send_fds(conn, [(json.dumps(self.hello()) + "\n").encode()], [self._file.fileno()])
        buf = bytearray()
        while True:
            line = recv_line(conn, buf, wait=self.wait_readable)
            if line is None:
                return
            try:
                req = json.loads(line)
                op = req.get("op")
            except (ValueError, AttributeError):
                send_message(conn, {"ok": False, "error": "request is not a JSON object"})
                continue
            if op == "reset":
                self.new_core()
                send_message(conn, {"ok": True})
            elif op == "run":
                n = req.get("bytes")
                if not isinstance(n, int) or n <= 0 or n > MAX_PROGRAM_BYTES or n % self.stream_bytes:
                    send_message(
                        conn,
                        {
                            "ok": False,
                            "error": f"'bytes' must be a positive multiple of the stream width "
                            f"({self.stream_bytes}) up to {MAX_PROGRAM_BYTES}, got {n!r}",
                        },
                    )
                    return  # the byte stream is out of step: drop the client
                data = recv_exact(conn, buf, n, wait=self.wait_readable)
                if data is None:
                    return
                reply = self.run(conn, data)
                if reply is None:
                    self.log("client left during a run; core reset")
                    return
                self.runs += 1
                self.cycles += int(reply.get("cycles") or 0)
                send_message(conn, reply)
            else:
                send_message(conn, {"ok": False, "error": f"unknown op {op!r}; expected 'run' or 'reset'"})

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

    def _free_core(self) -> None:
        # Taken before it is freed: a SIGTERM handler calling close() meanwhile finds nothing to free.
        core, self.core = self.core, None
        if core:
            self.lib.tcu_sim_free(core)

    def close(self) -> None:
        """Free the core and remove the socket, once, even when re-entered from a signal handler."""
        self._free_core()
        sock, self.sock = self.sock, None
        if sock:
            sock.close()
            if os.path.exists(self.socket_path):
                os.unlink(self.socket_path)
        self.memory = None
        try:
            self._map.close()
        except BufferError:  # a view still alive; the mapping goes with the process
            pass
        self._file.close()
