"""The "verilator" device: programs run on the RTL core (``rtl/``) simulated by Verilator.

Bit-exact with the emulator and cycle-accurate under the memory model of ``src/sim/tcu_sim.cc``
(docs/verilator.md): per bank, read bursts answered in order ``read_latency`` cycles after the
request and then one beat per cycle, ``max_reads`` bursts in flight, write responses
``write_latency`` cycles after a burst's last beat. DRAM0/DRAM1 are numpy arrays the C++ harness
reads and writes in place. The model is built per architecture on first use and cached.
"""

from __future__ import annotations

import ctypes
import time

import numpy as np

from ..arch import MEMORY_TIMING, Architecture
from ..isa.instructions import ConfigRegister, Configure
from ..isa.layout import layout_of
from ..isa.program import Program, pad_to_beats
from ..rtl import sim
from .device import DeviceError, HostDramDevice, RunStats

# Defaults of the memory model: assumptions, not measurements of a board (docs/verilator.md).
DEFAULT_READ_LATENCY = MEMORY_TIMING["read_latency"]
DEFAULT_WRITE_LATENCY = MEMORY_TIMING["write_latency"]
DEFAULT_MAX_READS = MEMORY_TIMING["max_reads"]


class Verilator(HostDramDevice):
    """The Verilated RTL core behind the device interface."""

    name = "verilator"

    def __init__(
        self,
        arch: Architecture,
        read_latency: int = DEFAULT_READ_LATENCY,
        write_latency: int = DEFAULT_WRITE_LATENCY,
        max_reads: int = DEFAULT_MAX_READS,
        stall_limit: int = 100_000,
        max_cycles: int = 0,
        fst: str | None = None,
        library: str | None = None,
    ):
        super().__init__(arch)
        for key, value in (("read_latency", read_latency), ("write_latency", write_latency)):
            if not isinstance(value, int) or value < 0:
                raise DeviceError(f"verilator device: {key} must be a whole number of cycles >= 0, got {value!r}")
        if not isinstance(max_reads, int) or max_reads < 1:
            raise DeviceError(f"verilator device: max_reads must be at least 1, got {max_reads!r}")
        if not isinstance(stall_limit, int) or stall_limit < 1:
            raise DeviceError(f"verilator device: stall_limit must be at least 1 cycle, got {stall_limit!r}")
        self.read_latency, self.write_latency, self.max_reads = read_latency, write_latency, max_reads
        self.stall_limit, self.max_cycles, self.fst = stall_limit, max_cycles, fst
        self.bus_bytes = (arch.axi_data_width or 64) // 8
        self.lib = sim.load(arch, trace=bool(fst), library=library)
        self._make_banks()  # the harness reads and writes these in place
        self._handle = None
        self.reset()

    # -- life cycle ----------------------------------------------------------------------------
    def reset(self) -> None:
        """A new core in its power-on state (local memory, accumulators, weights, registers zero)."""
        self.close()
        self._handle = self.lib.tcu_sim_new(
            self.dram0.ctypes.data,
            self.dram0.nbytes,
            self.dram1.ctypes.data,
            self.dram1.nbytes,
            self.bus_bytes,
            self.read_latency,
            self.write_latency,
            self.max_reads,
            (self.fst or "").encode(),
        )

    def close(self) -> None:
        if self._handle:
            self.lib.tcu_sim_free(self._handle)
            self._handle = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    # -- execution -----------------------------------------------------------------------------
    def counters(self) -> tuple[dict[str, int], dict[str, int]]:
        """Per unit, cycles with work offered (valid) and cycles it was taken (valid and ready)."""
        valid = (ctypes.c_uint64 * len(sim.UNITS))()
        fire = (ctypes.c_uint64 * len(sim.UNITS))()
        self.lib.tcu_sim_counters(self._handle, valid, fire)
        return dict(zip(sim.UNITS, map(int, valid))), dict(zip(sim.UNITS, map(int, fire)))

    def execute(self, program: Program) -> RunStats:
        start = time.perf_counter()
        summary = self.check(program)
        lay = layout_of(self.arch)
        # The banks sit at address 0 of their own AXI ports; no timeout flag (hangs are caught here).
        head = Program.from_instructions(
            [
                Configure(ConfigRegister.DRAM0_OFFSET, 0),
                Configure(ConfigRegister.DRAM1_OFFSET, 0),
                Configure(ConfigRegister.TIMEOUT, 0),
            ],
            lay,
        )
        stream = pad_to_beats(head.data + program.data, self.bus_bytes, lay.instruction_bytes)
        buf = np.frombuffer(stream, dtype=np.uint8)
        cycles0 = self.lib.tcu_sim_cycles(self._handle)
        valid0, _ = self.counters()
        rc = self._run_in_slices(buf, cycles0)
        if rc != sim.RunStatus.DONE:
            self._fail(program, rc, len(head))
        flags = self.lib.tcu_sim_flags(self._handle)
        if flags & sim.CoreFlag.ERROR:
            raise DeviceError(
                f"{program.name}: the RTL core raised its error flag (an invalid opcode or "
                "DataMove direction) on a program the validator accepted: a bug, please report it"
            )
        stats = RunStats.for_program(summary, self.arch)
        stats.cycles = int(self.lib.tcu_sim_cycles(self._handle) - cycles0)
        valid, _ = self.counters()
        stats.busy = {u: valid[u] - valid0[u] for u in sim.UNITS}
        stats.saturation_flag = bool(flags & sim.CoreFlag.SATURATED)  # sticky since the last reset (run_model resets)
        stats.seconds = time.perf_counter() - start
        self.last_stats = stats
        return stats

    def _run_in_slices(self, stream: np.ndarray, cycles0: int) -> int:
        """Stream the program and clock the core until it is done, fails, or passes ``max_cycles``."""
        self.lib.tcu_sim_start(self._handle, stream.ctypes.data, len(stream), self.bus_bytes)
        try:
            while True:
                budget = sim.SLICE_CYCLES
                if self.max_cycles:
                    budget = min(budget, self.max_cycles - (self.lib.tcu_sim_cycles(self._handle) - cycles0))
                rc = self.lib.tcu_sim_continue(self._handle, self.stall_limit, budget)
                if rc != sim.RunStatus.CYCLE_LIMIT:
                    return rc
                if self.max_cycles and self.lib.tcu_sim_cycles(self._handle) - cycles0 >= self.max_cycles:
                    return rc
        except BaseException:  # Ctrl-C or a time limit between two slices: the core is mid-program
            self.reset()
            raise

    def _fail(self, program: Program, rc: int, head: int) -> None:
        msg = self.lib.tcu_sim_message(self._handle).decode()
        if rc == sim.RunStatus.CYCLE_LIMIT:  # the message names the last slice's budget
            msg = f"did not finish within max_cycles={self.max_cycles}"
        pc = min(int(self.lib.tcu_sim_program_counter(self._handle)) - head, len(program))  # not the padding
        act = int(self.lib.tcu_sim_activity(self._handle))
        waiting = [u for i, u in enumerate(sim.UNITS) if (act >> (2 * i)) & 1 and not (act >> (2 * i + 1)) & 1]
        busy = [u for i, u in enumerate(sim.UNITS) if (act >> (2 * i)) & 1]
        mem = (ctypes.c_uint64 * 6)()
        self.lib.tcu_sim_memory_state(self._handle, mem)
        memory = (
            "; ".join(
                f"DRAM{b}: {mem[3 * b]} read bursts, {mem[3 * b + 1]} write bursts, {mem[3 * b + 2]} responses pending"
                for b in (0, 1)
                if mem[3 * b] or mem[3 * b + 1] or mem[3 * b + 2]
            )
            or "no DRAM traffic pending"
        )
        state = (
            f"program counter {pc} of {len(program)} (instructions dispatched); "
            f"units with work: {', '.join(busy) or 'none'}; waiting on a handshake: "
            f"{', '.join(waiting) or 'none'}; {memory}"
        )
        self.reset()  # the next run starts from a clean core
        if rc == sim.RunStatus.HUNG:
            raise DeviceError(
                f"{program.name}: the RTL core hung ({msg}): {state}. Raise stall_limit if the "
                "memory latency is that long; otherwise this is a core bug"
            )
        if rc == sim.RunStatus.OUT_OF_RANGE:
            raise DeviceError(
                f"{program.name}: {msg}: {state}. The program's Configure instructions moved a "
                "DRAM offset, or its addresses pass the bank's depth"
            )
        raise DeviceError(f"{program.name}: the RTL core {msg}: {state}")
