// SPDX-License-Identifier: Apache-2.0
//
// The Verilator harness of the "verilator" device: the Verilated tcu_top with its two DRAM banks as
// AXI4 slaves backed by host buffers (numpy arrays that Python owns: no copies), the instruction
// stream fed from a buffer, and a C API that runs a whole program (Python never drives single clock
// cycles). Built per architecture by tvm_tensil.rtl.sim, loaded through ctypes.
//
// Memory model (docs/verilator.md): per bank, AXI read bursts are answered in order, the first beat
// `read_latency` cycles after the request was accepted, then one beat per cycle; up to
// `max_reads` bursts are accepted; write data is taken one beat per cycle and each burst's response
// comes `write_latency` cycles after its last beat.

#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "Vtcu_top.h"
#include "verilated.h"
#if VM_TRACE_FST
#include "verilated_fst_c.h"
#endif

namespace {

// The 8 units of the activity bits (valid/ready pairs), as in the sample stream.
constexpr int kUnits = 8;

struct Burst {
    uint64_t addr;
    uint32_t beats;
    uint64_t ready_at;  // cycle of the first beat (reads) or of the response (writes)
};

struct Bank {
    uint8_t* data = nullptr;
    uint64_t bytes = 0;
    uint32_t bus_bytes = 8;
    uint32_t read_latency = 0, write_latency = 0, max_reads = 8;
    std::deque<Burst> reads;   // accepted AR bursts, in order
    uint32_t read_beat = 0;    // beats of reads.front() already sent
    std::deque<Burst> writes;  // accepted AW bursts waiting for their data
    uint32_t write_beat = 0;
    std::deque<uint64_t> responses;  // cycles at which B responses are due
    uint64_t out_of_range = 0;       // first bad byte address + 1 (0: none)
};

}  // namespace

struct TcuSim {
    std::unique_ptr<VerilatedContext> ctx;
    std::unique_ptr<Vtcu_top> top;
    Bank bank[2];
    uint64_t cycle = 0;
    // Cycles per value of the activity word: one increment per cycle; per-unit counts on request.
    std::vector<uint64_t> activity_cycles = std::vector<uint64_t>(1u << (2 * kUnits));
    std::string message;
    // The program being streamed (tcu_sim_start): owned by the caller until the run ends.
    const uint8_t* program = nullptr;
    uint64_t program_bytes = 0, program_pos = 0, last_progress = 0;
    uint32_t stream_bytes = 8;
#if VM_TRACE_FST
    std::unique_ptr<VerilatedFstC> trace;
#endif
};

namespace {

// Wide signals (over 64 bits) are arrays of 32-bit words in Verilator.
template <typename T>
void copy_in(T& sig, const uint8_t* src, uint32_t bytes) {
    if constexpr (sizeof(T) <= 8) {
        uint64_t v = 0;
        std::memcpy(&v, src, bytes);
        sig = static_cast<T>(v);
    } else {
        std::memcpy(&sig[0], src, bytes);
    }
}

template <typename T>
void copy_out(const T& sig, uint8_t* dst, uint32_t bytes) {
    if constexpr (sizeof(T) <= 8) {
        uint64_t v = sig;
        std::memcpy(dst, &v, bytes);
    } else {
        std::memcpy(dst, &sig[0], bytes);
    }
}

bool in_range(Bank& b, uint64_t addr, uint64_t len) {
    if (addr + len <= b.bytes) return true;
    if (!b.out_of_range) b.out_of_range = addr + 1;
    return false;
}

// The falling edge with the inputs of the next cycle, evaluated: the combinational outputs settle.
void settle(TcuSim* s) {
    s->top->clk = 0;
    s->top->eval();
#if VM_TRACE_FST
    if (s->trace) s->trace->dump(2 * s->cycle);
#endif
}

// The rising edge (after settle()).
void tick(TcuSim* s) {
    s->top->clk = 1;
    s->top->eval();
#if VM_TRACE_FST
    if (s->trace) s->trace->dump(2 * s->cycle + 1);
#endif
    ++s->cycle;
}

// Drive the slave side of both banks from their state (before the edge).
#define DRIVE_BANK(B, P)                                                                    \
    do {                                                                                    \
        Bank& b = s->bank[B];                                                               \
        auto* t = s->top.get();                                                             \
        t->m_axi_##P##_arready = b.reads.size() < b.max_reads;                              \
        bool rv = !b.reads.empty() && b.reads.front().ready_at <= s->cycle;                 \
        t->m_axi_##P##_rvalid = rv;                                                         \
        if (rv) {                                                                           \
            const Burst& r = b.reads.front();                                               \
            uint64_t a = r.addr + uint64_t(b.read_beat) * b.bus_bytes;                      \
            static uint8_t zero[64] = {};                                                   \
            copy_in(t->m_axi_##P##_rdata, in_range(b, a, b.bus_bytes) ? b.data + a : zero,  \
                    b.bus_bytes);                                                           \
            t->m_axi_##P##_rlast = b.read_beat + 1 == r.beats;                              \
            t->m_axi_##P##_rresp = 0;                                                       \
            t->m_axi_##P##_rid = 0;                                                         \
        }                                                                                   \
        t->m_axi_##P##_awready = 1;                                                         \
        t->m_axi_##P##_wready = !b.writes.empty();                                          \
        t->m_axi_##P##_bvalid = !b.responses.empty() && b.responses.front() <= s->cycle;    \
        t->m_axi_##P##_bresp = 0;                                                           \
        t->m_axi_##P##_bid = 0;                                                             \
    } while (0)

// Take the handshakes that happen at this edge.
#define SAMPLE_BANK(B, P)                                                                    \
    do {                                                                                     \
        Bank& b = s->bank[B];                                                                \
        auto* t = s->top.get();                                                              \
        if (t->m_axi_##P##_arvalid && t->m_axi_##P##_arready)                                \
            b.reads.push_back({t->m_axi_##P##_araddr, uint32_t(t->m_axi_##P##_arlen) + 1,    \
                               s->cycle + b.read_latency});                                  \
        if (t->m_axi_##P##_rvalid && t->m_axi_##P##_rready) {                                \
            if (++b.read_beat == b.reads.front().beats) {                                    \
                b.reads.pop_front();                                                         \
                b.read_beat = 0;                                                             \
            }                                                                                \
        }                                                                                    \
        if (t->m_axi_##P##_wvalid && t->m_axi_##P##_wready) {                                \
            Burst& w = b.writes.front();                                                     \
            uint64_t a = w.addr + uint64_t(b.write_beat) * b.bus_bytes;                      \
            if (in_range(b, a, b.bus_bytes)) copy_out(t->m_axi_##P##_wdata, b.data + a, b.bus_bytes); \
            if (++b.write_beat == w.beats) {                                                 \
                b.writes.pop_front();                                                        \
                b.write_beat = 0;                                                            \
                b.responses.push_back(s->cycle + 1 + b.write_latency);                       \
            }                                                                                \
        }                                                                                    \
        if (t->m_axi_##P##_awvalid && t->m_axi_##P##_awready)                                \
            b.writes.push_back({t->m_axi_##P##_awaddr, uint32_t(t->m_axi_##P##_awlen) + 1, 0}); \
        if (t->m_axi_##P##_bvalid && t->m_axi_##P##_bready) b.responses.pop_front();         \
    } while (0)

}  // namespace

extern "C" {

// A new core in its power-on state. DRAM buffers stay owned by the caller.
TcuSim* tcu_sim_new(uint8_t* dram0, uint64_t dram0_bytes, uint8_t* dram1, uint64_t dram1_bytes,
                    uint32_t bus_bytes, uint32_t read_latency, uint32_t write_latency,
                    uint32_t max_reads, const char* fst_path) {
    auto* s = new TcuSim();
    s->ctx = std::make_unique<VerilatedContext>();
    s->ctx->randReset(0);  // memories power on as zeros, like the emulator
#if VM_TRACE_FST
    if (fst_path && *fst_path) s->ctx->traceEverOn(true);  // before the model exists
#endif
    s->top = std::make_unique<Vtcu_top>(s->ctx.get(), "tcu_top");
    uint8_t* data[2] = {dram0, dram1};
    uint64_t bytes[2] = {dram0_bytes, dram1_bytes};
    for (int i = 0; i < 2; ++i) {
        s->bank[i].data = data[i];
        s->bank[i].bytes = bytes[i];
        s->bank[i].bus_bytes = bus_bytes;
        s->bank[i].read_latency = read_latency;
        s->bank[i].write_latency = write_latency;
        s->bank[i].max_reads = max_reads ? max_reads : 1;
    }
#if VM_TRACE_FST
    if (fst_path && *fst_path) {
        s->trace = std::make_unique<VerilatedFstC>();
        s->top->trace(s->trace.get(), 99);
        s->trace->open(fst_path);
    }
#else
    (void)fst_path;
#endif
    auto* t = s->top.get();
    t->m_axis_sample_tready = 1;
    t->s_axis_instr_tvalid = 0;
    t->s_axis_instr_tlast = 0;
    t->rst_n = 0;
    for (int i = 0; i < 4; ++i) {
        settle(s);
        tick(s);
    }
    t->rst_n = 1;
    settle(s);
    tick(s);
    s->cycle = 0;
    return s;
}

void tcu_sim_free(TcuSim* s) {
    if (!s) return;
#if VM_TRACE_FST
    if (s->trace) s->trace->close();
#endif
    s->top->final();
    delete s;
}

// Start streaming a program (`bytes` of whole stream beats; the buffer must live until the run ends).
void tcu_sim_start(TcuSim* s, const uint8_t* program, uint64_t bytes, uint32_t stream_bytes) {
    s->program = program;
    s->program_bytes = bytes;
    s->program_pos = 0;
    s->stream_bytes = stream_bytes;
    s->last_progress = s->cycle;
}

// Clock until the program has streamed and the core is idle. Returns 0 when done, 1 when nothing
// progressed for `stall_limit` cycles (hang), 2 on a DRAM access outside a buffer, 3 when `max_cycles`
// passed in this call (0: no limit): call again to go on. tcu_sim_message() says more.
int tcu_sim_continue(TcuSim* s, uint64_t stall_limit, uint64_t max_cycles) {
    auto* t = s->top.get();
    const uint8_t* program = s->program;
    const uint64_t bytes = s->program_bytes;
    const uint32_t stream_bytes = s->stream_bytes;
    uint64_t& pos = s->program_pos;
    uint64_t start = s->cycle;
    uint64_t& last_progress = s->last_progress;  // a hang may span several calls
    uint32_t last_pc = t->program_counter;
    s->message.clear();
    for (;;) {
        t->s_axis_instr_tvalid = pos < bytes;
        if (pos < bytes) {
            copy_in(t->s_axis_instr_tdata, program + pos, stream_bytes);
            t->s_axis_instr_tlast = pos + stream_bytes >= bytes;
        }
        DRIVE_BANK(0, dram0);
        DRIVE_BANK(1, dram1);
        settle(s);  // the core's combinational outputs for these inputs
        uint32_t act = t->activity;
        ++s->activity_cycles[act];
        // Progress: a handshake of any unit (valid in the even bits, ready in the odd ones), a DRAM
        // beat, or the program counter.
        bool progress = t->program_counter != last_pc || (act & (act >> 1) & 0x5555u) != 0;
        bool instr_fire = t->s_axis_instr_tvalid && t->s_axis_instr_tready;
        progress = progress || instr_fire || (t->m_axi_dram0_rvalid && t->m_axi_dram0_rready) ||
                   (t->m_axi_dram1_rvalid && t->m_axi_dram1_rready) ||
                   (t->m_axi_dram0_wvalid && t->m_axi_dram0_wready) ||
                   (t->m_axi_dram1_wvalid && t->m_axi_dram1_wready);
        if (instr_fire) pos += stream_bytes;
        SAMPLE_BANK(0, dram0);
        SAMPLE_BANK(1, dram1);
        last_pc = t->program_counter;
        tick(s);
        if (progress) last_progress = s->cycle;
        for (int i = 0; i < 2; ++i) {
            if (s->bank[i].out_of_range) {
                s->message = "DRAM" + std::to_string(i) + " access at byte " +
                             std::to_string(s->bank[i].out_of_range - 1) + " is outside its buffer of " +
                             std::to_string(s->bank[i].bytes) + " bytes";
                s->bank[i].out_of_range = 0;
                return 2;
            }
        }
        if (pos >= bytes && t->idle) return 0;  // outputs as of this rising edge
        if (s->cycle - last_progress >= stall_limit) {
            s->message = "no progress for " + std::to_string(stall_limit) + " cycles";
            return 1;
        }
        if (max_cycles && s->cycle - start >= max_cycles) {
            s->message = "did not finish within " + std::to_string(max_cycles) + " cycles";
            return 3;
        }
    }
}

// Start and run to the end in one call (see tcu_sim_continue for the return codes).
int tcu_sim_run(TcuSim* s, const uint8_t* program, uint64_t bytes, uint32_t stream_bytes,
                uint64_t stall_limit, uint64_t max_cycles) {
    tcu_sim_start(s, program, bytes, stream_bytes);
    return tcu_sim_continue(s, stall_limit, max_cycles);
}

const char* tcu_sim_message(TcuSim* s) { return s->message.c_str(); }
uint64_t tcu_sim_cycles(TcuSim* s) { return s->cycle; }
uint32_t tcu_sim_program_counter(TcuSim* s) { return s->top->program_counter; }
uint32_t tcu_sim_activity(TcuSim* s) { return s->top->activity; }
// Flags: bit 0 idle, 1 error, 2 timeout, 3 tracepoint, 4 saturated.
uint32_t tcu_sim_flags(TcuSim* s) {
    auto* t = s->top.get();
    return (t->idle ? 1u : 0u) | (t->error ? 2u : 0u) | (t->timeout ? 4u : 0u) | (t->tracepoint ? 8u : 0u) |
           (t->saturated ? 16u : 0u);
}
// Per unit (array, accumulators, dataflow, DRAM1, DRAM0, port B, port A, instruction): cycles with
// valid, and cycles with valid and ready, since the core was created.
void tcu_sim_counters(TcuSim* s, uint64_t* valid, uint64_t* fire) {
    for (int u = 0; u < kUnits; ++u) valid[u] = fire[u] = 0;
    for (uint32_t act = 0; act < s->activity_cycles.size(); ++act) {
        uint64_t n = s->activity_cycles[act];
        if (!n) continue;
        for (int u = 0; u < kUnits; ++u) {
            bool v = (act >> (2 * u)) & 1, r = (act >> (2 * u + 1)) & 1;
            valid[u] += v ? n : 0;
            fire[u] += v && r ? n : 0;
        }
    }
}
// Pending work of the memory model (for hang reports): read bursts, write bursts, responses.
void tcu_sim_memory_state(TcuSim* s, uint64_t* out) {
    for (int i = 0; i < 2; ++i) {
        out[3 * i] = s->bank[i].reads.size();
        out[3 * i + 1] = s->bank[i].writes.size();
        out[3 * i + 2] = s->bank[i].responses.size();
    }
}

}  // extern "C"
