// SPDX-License-Identifier: Apache-2.0
`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * Dispatcher: decodes instruction words and dispatches them in program order to the core's engines,
 * each instruction only when the result equals running the instructions one at a time.
 *
 * An instruction is dispatched when its engine takes a command and it has no hazard with what the
 * other engines still do: their local memory ranges may not overlap where either one writes (a range
 * is [address, address + (size - 1) * stride], the whole memory if that passes its end; a MatMul or
 * LoadWeights of zeroes has none); the compute engine and the accumulator engine (moves and the SIMD
 * pipeline) may not use the same accumulator bank (lower or upper half) at once; a DRAM bank's
 * reader and writer wait for each other where their DRAM ranges overlap; with one bus beat per
 * vector the two banks' readers take turns. A SIMD also waits for the pipeline's pending writes to
 * the vector it reads, and a move for the pipeline to empty. Configure waits until every engine is
 * idle and everything has landed, then sets its register; NoOp retires at once; an invalid opcode or
 * DataMove direction raises `error` and is skipped. The program counter counts dispatched
 * instructions.
 *
 * With the window MatMul (ours, WINDOW_MATMUL = 1) it keeps the window register (Configure 12, set at
 * dispatch without waiting: every window MatMul takes its value as it dispatches), and a window
 * MatMul's local range is the vectors its window reads, (count - 1) * stride + taps - lead - trail.
 *
 * It also keeps the weight-set bookkeeping: a MatMul dispatched after a LoadWeights swaps the array's
 * weight sets (`cmd_swap`), and a LoadWeights with no MatMul since the previous one continues filling
 * the same set (`load_continues`).
 */
module tcu_dispatch #
(
    // Vectors of local memory
    parameter LOCAL_DEPTH = 8192,
    // Vectors of accumulators (two banks: the lower and upper half)
    parameter ACC_DEPTH = 2048,
    // Bus beats per vector on the DRAM side (with one, the banks' readers take turns)
    parameter VECTOR_BEATS = 2,
    // Instruction layout (tvm_tensil.isa.layout): operand widths, address and stride bits
    parameter OPERAND0_BITS = 16,
    parameter OPERAND1_BITS = 24,
    parameter OPERAND2_BITS = 16,
    parameter OPERAND0_ADDRESS_BITS = 13,
    parameter OPERAND1_ADDRESS_BITS = 20,
    parameter OPERAND2_ADDRESS_BITS = 13,
    parameter STRIDE0_BITS = 3,
    parameter STRIDE1_BITS = 3,
    // Bits of an instruction word
    parameter INSTRUCTION_BITS = 64,
    // 1: the window MatMul (an instruction set extension of ours)
    parameter WINDOW_MATMUL = 0
)
(
    input  wire                              clk,
    input  wire                              rst,

    // Instruction words
    input  wire [INSTRUCTION_BITS-1:0]       s_instr_data,
    input  wire                              s_instr_valid,
    output wire                              s_instr_ready,

    // Engines, one bit each: compute, move, weights, DRAM0 reader, DRAM0 writer, DRAM1 reader, DRAM1
    // writer (ENGINE_* below). Dispatch strobes, whether each takes a command, whether each is busy,
    // and the cycles of each one's instruction so far (for the timeout).
    output wire [tcu_isa_pkg::ENGINES-1:0]   m_start,
    input  wire [tcu_isa_pkg::ENGINES-1:0]   engine_ready,
    input  wire [tcu_isa_pkg::ENGINES-1:0]   engine_busy,
    input  wire [tcu_isa_pkg::ENGINES*32-1:0] engine_busy_cycles,
    // The SIMD pipeline: dispatch strobe, a read of a vector it has yet to write, nothing in it
    output wire                              m_simd_start,
    input  wire                              simd_read_hazard,
    input  wire                              simd_empty,
    // Everything the compute engine and the move engine issued has landed
    input  wire                              compute_quiet,
    input  wire                              move_quiet,
    // The accumulator write the move engine or the SIMD pipeline presents now (an accumulate in a
    // bank uses that bank's read port: a SIMD reading the bank waits)
    input  wire                              acc_wr_valid,
    input  wire                              acc_wr_accumulate,
    input  wire [$clog2(ACC_DEPTH)-1:0]      acc_wr_addr,

    // The instruction's fields, decoded, for the engine that is dispatched
    output wire [3:0]                        cmd_flags,
    output wire [31:0]                       cmd_addr0,      // local memory (SIMD: accumulator written)
    output wire [31:0]                       cmd_step0,
    output wire [31:0]                       cmd_addr1,      // accumulators or DRAM (SIMD: accumulator read)
    output wire [31:0]                       cmd_step1,
    output wire [31:0]                       cmd_count,      // vectors (MatMul, DataMove)
    output wire [31:0]                       cmd_lw_count,   // vectors (LoadWeights)
    output wire [31:0]                       cmd_lw_top,     // the highest address a LoadWeights reads
    output wire [OPERAND2_BITS-1:0]          cmd_operand2,   // SIMD: op and register selectors
    output reg                               cmd_swap,       // a MatMul: swap weight sets first
    output reg  [25:0]                       cmd_window,     // the window register (WINDOW_MATMUL)
    output reg                               load_continues, // a LoadWeights: no MatMul since the last one
    // Accumulator banks of the MatMuls in flight and of the move (bit k: bank k)
    output reg  [1:0]                        compute_banks,
    output reg  [1:0]                        move_banks,

    // Configuration registers
    output reg  [31:0]                       dram0_offset,
    output reg  [3:0]                        dram0_cache,
    output reg  [31:0]                       dram1_offset,
    output reg  [3:0]                        dram1_cache,
    output reg  [31:0]                       sample_interval,

    // Status
    output reg  [31:0]                       program_counter,
    output wire                              idle,
    output reg                               error,
    output reg                               timeout,
    output wire                              tracepoint
);

localparam OPS = OPERAND0_BITS + OPERAND1_BITS + OPERAND2_BITS;
localparam CB = 32;      // counters and addresses are computed in 32 bits, then truncated
localparam XB = 2 * CB;  // (size - 1) << stride without overflow (strides are at most 2^31)
localparam AA = $clog2(ACC_DEPTH);
localparam HALF = ACC_DEPTH / 2;
// Engines, as bit positions of m_start / engine_ready / engine_busy (from tcu_isa_pkg, generated from
// the Python enum the latency model uses too)
localparam int ENGINE_COMPUTE = tcu_isa_pkg::ENGINE_COMPUTE, ENGINE_MOVE = tcu_isa_pkg::ENGINE_MOVE,
               ENGINE_WEIGHTS = tcu_isa_pkg::ENGINE_WEIGHTS, ENGINE_DRAM0_READER = tcu_isa_pkg::ENGINE_DRAM0_READER,
               ENGINE_DRAM0_WRITER = tcu_isa_pkg::ENGINE_DRAM0_WRITER,
               ENGINE_DRAM1_READER = tcu_isa_pkg::ENGINE_DRAM1_READER,
               ENGINE_DRAM1_WRITER = tcu_isa_pkg::ENGINE_DRAM1_WRITER, ENGINES = tcu_isa_pkg::ENGINES;

// Illegal configurations stop elaboration.
generate
    if (INSTRUCTION_BITS != OPS + 8) begin : g_illegal_0
        $fatal(1, "tcu_dispatch: INSTRUCTION_BITS must be the operands plus 8");
    end
    if (OPERAND2_ADDRESS_BITS > CB) begin : g_illegal_1
        $fatal(1, "tcu_dispatch: sizes wider than 32 bits");
    end
    if (ACC_DEPTH < 4 || ACC_DEPTH % 2 != 0) begin : g_illegal_2
        $fatal(1, "tcu_dispatch: ACC_DEPTH (%0d) must be even and at least 4 (two banks)", ACC_DEPTH);
    end
endgenerate

// -- decode ------------------------------------------------------------------------------------
wire [OPERAND0_BITS-1:0] f_op0 = s_instr_data[OPERAND0_BITS-1:0];
wire [OPERAND1_BITS-1:0] f_op1 = s_instr_data[OPERAND0_BITS +: OPERAND1_BITS];
wire [OPERAND2_BITS-1:0] f_op2 = s_instr_data[OPERAND0_BITS+OPERAND1_BITS +: OPERAND2_BITS];
wire [3:0] f_flags  = s_instr_data[OPS +: 4];
wire [3:0] f_opcode = s_instr_data[OPS+4 +: 4];
wire [OPS-1:0] f_args = s_instr_data[OPS-1:0];

wire [CB-1:0] f_addr0  = CB'(f_op0[OPERAND0_ADDRESS_BITS-1:0]);
wire [CB-1:0] f_step0  = CB'(1) << f_op0[OPERAND0_ADDRESS_BITS +: STRIDE0_BITS];
wire [CB-1:0] f_addr1  = CB'(f_op1[OPERAND1_ADDRESS_BITS-1:0]);
wire [CB-1:0] f_step1  = CB'(1) << f_op1[OPERAND1_ADDRESS_BITS +: STRIDE1_BITS];
wire [CB-1:0] f_count  = CB'(f_op2[OPERAND2_ADDRESS_BITS-1:0]) + 1;
wire [CB-1:0] f_lw_count = CB'(f_op1) + 1;

// DataMove between DRAM and local memory (a DRAM engine's), else local <-> accumulators.
function automatic dram_direction(input [3:0] direction);
    dram_direction = direction == tcu_isa_pkg::DIRECTION_DRAM0_TO_LOCAL ||
                     direction == tcu_isa_pkg::DIRECTION_LOCAL_TO_DRAM0 ||
                     direction == tcu_isa_pkg::DIRECTION_DRAM1_TO_LOCAL ||
                     direction == tcu_isa_pkg::DIRECTION_LOCAL_TO_DRAM1;
endfunction
wire f_valid_dm = dram_direction(f_flags) || f_flags == tcu_isa_pkg::DIRECTION_ACC_TO_LOCAL ||
                  f_flags == tcu_isa_pkg::DIRECTION_LOCAL_TO_ACC ||
                  f_flags == tcu_isa_pkg::DIRECTION_LOCAL_TO_ACC_ACCUMULATE;
wire f_known = f_opcode == tcu_isa_pkg::OPCODE_NOOP || f_opcode == tcu_isa_pkg::OPCODE_MATMUL ||
               f_opcode == tcu_isa_pkg::OPCODE_LOADWEIGHTS || f_opcode == tcu_isa_pkg::OPCODE_SIMD ||
               f_opcode == tcu_isa_pkg::OPCODE_CONFIGURE || (f_opcode == tcu_isa_pkg::OPCODE_DATAMOVE && f_valid_dm);

wire f_is_simd = f_opcode == tcu_isa_pkg::OPCODE_SIMD;
wire f_is_dram = f_opcode == tcu_isa_pkg::OPCODE_DATAMOVE && dram_direction(f_flags);
wire f_is_move = f_opcode == tcu_isa_pkg::OPCODE_DATAMOVE && f_valid_dm && !dram_direction(f_flags);  // local <-> accumulators
wire f_is_lw   = f_opcode == tcu_isa_pkg::OPCODE_LOADWEIGHTS;
wire f_is_mm   = f_opcode == tcu_isa_pkg::OPCODE_MATMUL;
wire f_is_config = f_opcode == tcu_isa_pkg::OPCODE_CONFIGURE;
wire f_bank1   = f_flags[tcu_isa_pkg::DIRECTION_DRAM1_BIT];
wire f_to_dram = f_flags[tcu_isa_pkg::DIRECTION_TO_DRAM_BIT];
wire [CB-1:0] f_n = f_is_lw ? f_lw_count : f_count;
// A window MatMul reads (count - 1) * stride + taps - lead - trail vectors (a valid program has >= 1).
wire f_window = WINDOW_MATMUL != 0 && f_is_mm && f_flags[tcu_isa_pkg::MATMUL_FLAG_WINDOW_BIT];
wire [CB-1:0] f_window_reads = ((f_count - 1) << cmd_window[25:24]) + CB'(cmd_window[7:0]) + 1 -
                               CB'(cmd_window[15:8]) - CB'(cmd_window[23:16]);
wire [CB-1:0] f_ln = f_window ? f_window_reads : f_n;  // local vectors
wire f_sets_window = WINDOW_MATMUL != 0 && f_is_config && f_args[3:0] == tcu_isa_pkg::CONFIG_WINDOW;

// -- local memory ranges ---------------------------------------------------------------------------
wire f_lvalid = f_is_dram || f_is_move || (f_is_mm && !f_flags[tcu_isa_pkg::MATMUL_FLAG_ZEROES_BIT]) ||
                (f_is_lw && !f_flags[tcu_isa_pkg::LOADWEIGHTS_FLAG_ZEROES_BIT]);
wire f_lwrite = f_is_dram ? !f_to_dram : (f_is_move && f_flags == tcu_isa_pkg::DIRECTION_ACC_TO_LOCAL);
wire [XB-1:0] f_end = XB'(f_addr0) + (XB'(f_ln - 1) << f_op0[OPERAND0_ADDRESS_BITS +: STRIDE0_BITS]);
wire          f_wraps = f_end >= XB'(LOCAL_DEPTH);
wire [CB-1:0] f_lo = f_wraps ? '0 : f_addr0;
wire [CB-1:0] f_hi = f_wraps ? CB'(LOCAL_DEPTH - 1) : CB'(f_end);

// The engine the instruction goes to.
wire [ENGINES-1:0] f_engine;
assign f_engine[ENGINE_COMPUTE] = f_is_mm;
assign f_engine[ENGINE_MOVE] = f_is_move;
assign f_engine[ENGINE_WEIGHTS] = f_is_lw;
assign f_engine[ENGINE_DRAM0_READER] = f_is_dram && !f_bank1 && !f_to_dram;
assign f_engine[ENGINE_DRAM0_WRITER] = f_is_dram && !f_bank1 && f_to_dram;
assign f_engine[ENGINE_DRAM1_READER] = f_is_dram && f_bank1 && !f_to_dram;
assign f_engine[ENGINE_DRAM1_WRITER] = f_is_dram && f_bank1 && f_to_dram;

// Each engine's local memory range, from its dispatch until it is no longer busy.
reg  [ENGINES-1:0] e_lvalid, e_lwrite;
reg  [CB-1:0]      e_lo [0:ENGINES-1];
reg  [CB-1:0]      e_hi [0:ENGINES-1];
wire [ENGINES-1:0] local_hazard;
genvar e;
generate
    for (e = 0; e < ENGINES; e = e + 1) begin : g_hazard
        assign local_hazard[e] = e_lvalid[e] && f_lvalid && (e_lwrite[e] || f_lwrite) &&
                                 f_lo <= e_hi[e] && e_lo[e] <= f_hi;
    end
endgenerate
wire f_hazard = |(local_hazard & ~f_engine);

// -- accumulator banks -----------------------------------------------------------------------------
function automatic bank_of(input [AA-1:0] address);
    bank_of = 32'(address) >= HALF;
endfunction
// The banks a run of accumulator vectors touches (both when it wraps).
wire [XB-1:0] f_acc_end = XB'(f_addr1) + (XB'(f_n - 1) << f_op1[OPERAND1_ADDRESS_BITS +: STRIDE1_BITS]);
wire [1:0]    f_run_banks = f_acc_end >= XB'(ACC_DEPTH) ? 2'b11 :
                            {f_acc_end >= XB'(HALF), XB'(f_addr1) < XB'(HALF)};
wire [1:0]    f_simd_banks = (f_flags[tcu_isa_pkg::SIMD_FLAG_READ_BIT] ? 2'b01 << bank_of(AA'(f_addr1)) : 2'b00) |
                             (f_flags[tcu_isa_pkg::SIMD_FLAG_WRITE_BIT] ? 2'b01 << bank_of(AA'(f_addr0)) : 2'b00);
wire [1:0]    f_acc_banks = f_is_simd ? f_simd_banks : (f_is_mm || f_is_move) ? f_run_banks : 2'b00;
reg  [1:0]    simd_banks;   // of the SIMD instructions in the pipeline
reg           mm_since_lw;  // a MatMul came since the last LoadWeights
// The banks each side uses now: a MatMul waits for the accumulator engine's, and the other way round.
wire compute_busy = engine_busy[ENGINE_COMPUTE];
wire move_busy = engine_busy[ENGINE_MOVE];
wire [1:0] compute_live = compute_busy ? compute_banks : 2'b00;
wire [1:0] accumulator_live = (move_busy ? move_banks : 2'b00) | (simd_empty ? 2'b00 : simd_banks);
wire bank_wait_compute = |(f_acc_banks & accumulator_live);
wire bank_wait_accumulator = |(f_acc_banks & compute_live);
// A SIMD read also waits while an accumulate is written in its bank (that write uses the bank's read port).
wire simd_hazard = simd_read_hazard || (f_flags[tcu_isa_pkg::SIMD_FLAG_READ_BIT] && acc_wr_valid &&
                                        acc_wr_accumulate && bank_of(acc_wr_addr) == bank_of(AA'(f_addr1)));

// -- DRAM ranges -----------------------------------------------------------------------------------
// A bank's reader and writer run side by side (AXI reads and writes are independent) unless their
// DRAM ranges overlap: then the later one waits, so DRAM too keeps program order.
reg  [XB-1:0] dram_lo [0:3];   // indexed by engine - ENGINE_DRAM0_READER
reg  [XB-1:0] dram_hi [0:3];
wire [XB-1:0] f_dram_hi = XB'(f_addr1) + (XB'(f_count - 1) << f_op1[OPERAND1_ADDRESS_BITS +: STRIDE1_BITS]);
// The engine of the other direction on the same bank.
wire [2:0] f_partner = f_bank1 ? (f_to_dram ? 3'(ENGINE_DRAM1_READER) : 3'(ENGINE_DRAM1_WRITER)) :
                                 (f_to_dram ? 3'(ENGINE_DRAM0_READER) : 3'(ENGINE_DRAM0_WRITER));
wire [1:0] f_partner_slot = 2'(f_partner - 3'(ENGINE_DRAM0_READER));
wire dram_hazard = engine_busy[f_partner] && XB'(f_addr1) <= dram_hi[f_partner_slot] &&
                   dram_lo[f_partner_slot] <= f_dram_hi;
// A bank returns at most one vector per VECTOR_BEATS cycles; with a single beat both banks' responses
// could outrun local memory's port, so then DRAM -> local moves take turns.
wire dram_turns = VECTOR_BEATS < 2 && f_is_dram && !f_to_dram &&
                  engine_busy[f_bank1 ? ENGINE_DRAM0_READER : ENGINE_DRAM1_READER];

// -- dispatch --------------------------------------------------------------------------------------
wire all_idle = engine_busy == '0 && compute_quiet && move_quiet && simd_empty;
assign s_instr_ready = !rst && (
    f_is_simd ? !move_busy && !simd_hazard && !bank_wait_accumulator :
    f_is_mm   ? engine_ready[ENGINE_COMPUTE] && !f_hazard && !bank_wait_compute :
    f_is_move ? engine_ready[ENGINE_MOVE] && simd_empty && !f_hazard && !bank_wait_accumulator :
    f_is_lw   ? engine_ready[ENGINE_WEIGHTS] && !f_hazard :
    f_is_dram ? |(engine_ready & f_engine) && !f_hazard && !dram_hazard && !dram_turns :
    f_sets_window ? 1'b1 :
    f_is_config ? all_idle :
    1'b1);
wire start = s_instr_valid && s_instr_ready;
assign m_start = start && f_known ? f_engine : '0;
assign m_simd_start = start && f_is_simd;

assign cmd_flags = f_flags;
assign cmd_addr0 = f_addr0;
assign cmd_step0 = f_step0;
assign cmd_addr1 = f_addr1;
assign cmd_step1 = f_step1;
assign cmd_count = f_count;
assign cmd_lw_count = f_lw_count;
assign cmd_lw_top = CB'(f_end);
assign cmd_operand2 = f_op2;

assign idle = !rst && !s_instr_valid && all_idle;
reg [31:0] timeout_limit, tracepoint_pc;
assign tracepoint = program_counter == tracepoint_pc;

// An engine busy with one instruction for longer than the limit.
wire [ENGINES-1:0] overdue;
generate
    for (e = 0; e < ENGINES; e = e + 1) begin : g_overdue
        assign overdue[e] = engine_busy[e] && engine_busy_cycles[32*e +: 32] >= timeout_limit;
    end
endgenerate

always @(posedge clk) begin
    if (rst) begin
        e_lvalid <= '0;
        e_lwrite <= '0;
        compute_banks <= '0;
        move_banks <= '0;
        simd_banks <= '0;
        cmd_swap <= 1'b0;
        cmd_window <= '0;
        mm_since_lw <= 1'b0;
        load_continues <= 1'b0;
        program_counter <= '0;
        error <= 1'b0;
        timeout <= 1'b0;
        dram0_offset <= '0;
        dram0_cache <= '0;
        dram1_offset <= '0;
        dram1_cache <= '0;
        timeout_limit <= tcu_isa_pkg::CONFIG_RESET_TIMEOUT;
        tracepoint_pc <= tcu_isa_pkg::CONFIG_RESET_TRACEPOINT;
        sample_interval <= '0;
    end else begin
        if (start) begin
            program_counter <= program_counter + 1;
            if (!f_known) begin
                error <= 1'b1;  // skipped; the program counter still advances
            end else if (f_is_config) begin
                case (f_args[3:0])
                    tcu_isa_pkg::CONFIG_DRAM0_OFFSET:     dram0_offset <= 32'(f_args >> 4);
                    tcu_isa_pkg::CONFIG_DRAM0_CACHE:      dram0_cache <= 4'(f_args >> 4);
                    tcu_isa_pkg::CONFIG_DRAM1_OFFSET:     dram1_offset <= 32'(f_args >> 4);
                    tcu_isa_pkg::CONFIG_DRAM1_CACHE:      dram1_cache <= 4'(f_args >> 4);
                    tcu_isa_pkg::CONFIG_TIMEOUT:          timeout_limit <= 32'(f_args >> 4);
                    tcu_isa_pkg::CONFIG_TRACEPOINT:       tracepoint_pc <= 32'(f_args >> 4);
                    tcu_isa_pkg::CONFIG_PROGRAM_COUNTER:  program_counter <= 32'(f_args >> 4);
                    tcu_isa_pkg::CONFIG_SAMPLE_INTERVAL:  sample_interval <= 32'(f_args >> 4);
                    tcu_isa_pkg::CONFIG_WINDOW: begin
                        if (WINDOW_MATMUL != 0) cmd_window <= 26'(f_args >> 4);
                        else error <= 1'b1;
                    end
                    default: error <= 1'b1;
                endcase
            end
        end
        for (int k = 0; k < ENGINES; k = k + 1) begin
            if (m_start[k]) begin
                e_lvalid[k] <= f_lvalid;
                e_lwrite[k] <= f_lwrite;
                e_lo[k] <= f_lo;
                e_hi[k] <= f_hi;
            end else if (!engine_busy[k]) begin
                e_lvalid[k] <= 1'b0;
            end
        end
        for (int k = 0; k < 4; k = k + 1) begin
            if (m_start[ENGINE_DRAM0_READER + k]) begin
                dram_lo[k] <= XB'(f_addr1);
                dram_hi[k] <= f_dram_hi;
            end
        end
        if (m_start[ENGINE_COMPUTE]) begin
            compute_banks <= (compute_busy ? compute_banks : 2'b00) | f_acc_banks;
            cmd_swap <= 1'b0;
            mm_since_lw <= 1'b1;
        end
        if (m_start[ENGINE_WEIGHTS]) begin
            cmd_swap <= 1'b1;
            mm_since_lw <= 1'b0;
            load_continues <= !mm_since_lw;
        end
        if (m_start[ENGINE_MOVE]) move_banks <= f_acc_banks;
        if (m_simd_start) simd_banks <= (simd_empty ? 2'b00 : simd_banks) | f_acc_banks;
        if (timeout_limit != 0 && |overdue) timeout <= 1'b1;
    end
end

wire unused_ok = &{1'b0, f_op0, f_op1, f_op2};

endmodule

`resetall
