// SPDX-License-Identifier: Apache-2.0
`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * TCU core: decoder and execution engines, with the DRAM banks behind vector request ports
 * (tcu_dram_axi adapts them to AXI4).
 *
 * Program order with overlap: four engines each run one instruction at a time, vectors streaming at
 * one per cycle -- the compute engine (MatMul, DataMove local <-> accumulators, with the SIMD
 * pipeline beside it), the weights engine (LoadWeights, into the array's second weight set), and
 * one DRAM engine per bank (DataMove DRAM <-> local). Instructions are dispatched in order; one
 * waits only while another engine's instruction uses an overlapping local memory range and either
 * of them writes it (see "dispatch" below and docs/rtl.md). So the result is exactly that of
 * executing instructions one at a time (docs/isa.md). The program counter counts dispatched
 * instructions.
 *
 * Local memory has two ports: port A is the compute engine's, port B is shared by the weights and
 * DRAM engines through a fixed-priority arbiter (DRAM read responses first, they cannot wait long).
 *
 * Invalid opcodes and DataMove directions raise `error` and are skipped. `timeout` rises when an
 * instruction runs longer than the timeout register (cycles, 0 = never). `tracepoint` rises while
 * the program counter equals the tracepoint register. `idle` is high when no instruction is waiting
 * and nothing is in flight.
 */
module tcu_core
#
(
    // Array size N (vectors hold N scalars)
    parameter ARRAY_SIZE = 8,
    // Bits of a scalar
    parameter DATA_WIDTH = 16,
    // Fractional bits of a scalar
    parameter BINARY_POINT = 8,
    // Vectors of local memory
    parameter LOCAL_DEPTH = 8192,
    // Vectors of accumulators
    parameter ACC_DEPTH = 2048,
    // Address bits of DRAM0 and DRAM1 vectors
    parameter DRAM0_DEPTH_BITS = 20,
    parameter DRAM1_DEPTH_BITS = 20,
    // SIMD registers per lane
    parameter SIMD_REGISTERS = 1,
    // Bus beats per vector on the DRAM side: a bank returns at most one vector per VECTOR_BEATS cycles
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
    parameter SIMD_OPERAND_BITS = 1,
    // Bits of an instruction word
    parameter INSTRUCTION_BITS = 64
)
(
    input  wire                              clk,
    input  wire                              rst,

    // Instruction words (tcu_instruction_input)
    input  wire [INSTRUCTION_BITS-1:0]       s_instr_data,
    input  wire                              s_instr_valid,
    output wire                              s_instr_ready,

    // DRAM0: reads of runs of consecutive vectors (responses in request order) and vector writes
    // (the first of a run carries its length), so that tcu_dram_axi can make long bursts
    output wire                              m_dram0_rd_valid,
    input  wire                              m_dram0_rd_ready,
    output wire [DRAM0_DEPTH_BITS-1:0]       m_dram0_rd_addr,
    output wire [31:0]                       m_dram0_rd_count,
    input  wire                              s_dram0_rd_valid,
    input  wire [ARRAY_SIZE*DATA_WIDTH-1:0]  s_dram0_rd_data,
    output wire                              m_dram0_wr_valid,
    input  wire                              m_dram0_wr_ready,
    output wire [DRAM0_DEPTH_BITS-1:0]       m_dram0_wr_addr,
    output wire [31:0]                       m_dram0_wr_run,
    output wire [ARRAY_SIZE*DATA_WIDTH-1:0]  m_dram0_wr_data,
    input  wire                              dram0_wr_pending,

    // DRAM1: the same
    output wire                              m_dram1_rd_valid,
    input  wire                              m_dram1_rd_ready,
    output wire [DRAM1_DEPTH_BITS-1:0]       m_dram1_rd_addr,
    output wire [31:0]                       m_dram1_rd_count,
    input  wire                              s_dram1_rd_valid,
    input  wire [ARRAY_SIZE*DATA_WIDTH-1:0]  s_dram1_rd_data,
    output wire                              m_dram1_wr_valid,
    input  wire                              m_dram1_wr_ready,
    output wire [DRAM1_DEPTH_BITS-1:0]       m_dram1_wr_addr,
    output wire [31:0]                       m_dram1_wr_run,
    output wire [ARRAY_SIZE*DATA_WIDTH-1:0]  m_dram1_wr_data,
    input  wire                              dram1_wr_pending,

    // Configuration registers the DRAM adapters use
    output reg  [31:0]                       dram0_offset,
    output reg  [3:0]                        dram0_cache,
    output reg  [31:0]                       dram1_offset,
    output reg  [3:0]                        dram1_cache,
    output reg  [31:0]                       sample_interval,

    // Valid/ready pairs per unit (valid in the even bit): array, accumulators, dataflow, DRAM1,
    // DRAM0, local port B, local port A, instruction; the sample stream's bits 32..47 (docs/rtl.md)
    output wire [15:0]                       activity,

    // Status
    output reg  [31:0]                       program_counter,
    output wire                              idle,
    output reg                               error,
    output reg                               timeout,
    output wire                              tracepoint,
    output reg                               saturated
);

localparam N = ARRAY_SIZE;
localparam W = DATA_WIDTH;
localparam V = N * W;
localparam LA = $clog2(LOCAL_DEPTH) > 0 ? $clog2(LOCAL_DEPTH) : 1;
localparam AA = $clog2(ACC_DEPTH) > 0 ? $clog2(ACC_DEPTH) : 1;
localparam HALF = ACC_DEPTH / 2;  // vectors per accumulator bank
localparam BA = $clog2(HALF) > 0 ? $clog2(HALF) : 1;
localparam OPS = OPERAND0_BITS + OPERAND1_BITS + OPERAND2_BITS;
localparam SB = SIMD_OPERAND_BITS;
localparam CB = 32;  // counters and addresses are computed in 32 bits, then truncated

// Illegal configurations stop elaboration.
generate
    if (INSTRUCTION_BITS != OPS + 8) begin : g_illegal_0
        $fatal(1, "tcu_core: INSTRUCTION_BITS must be the operands plus 8");
    end
    if (OPERAND2_ADDRESS_BITS > CB) begin : g_illegal_1
        $fatal(1, "tcu_core: sizes wider than 32 bits");
    end
    if (ACC_DEPTH < 4 || ACC_DEPTH % 2 != 0) begin : g_illegal_2
        $fatal(1, "tcu_core: ACC_DEPTH (%0d) must be even and at least 4 (two banks)", ACC_DEPTH);
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

// DataMove between DRAM and local memory (the DRAM engine's), else local <-> accumulators.
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

// -- dispatch ------------------------------------------------------------------------------------
// An instruction is dispatched when its engine is free and it has no hazard with what the other
// engines are doing: their local memory ranges may not overlap where either one writes (the ranges
// are [address, address + (size - 1) * stride], the whole memory if that wraps), and the compute
// and accumulator engines may not use the same accumulator bank. Each DRAM engine has its own bank.
// Configure waits for every engine, so offsets never change under a move. The result is that of
// program order.
wire f_is_simd = f_opcode == tcu_isa_pkg::OPCODE_SIMD;
wire f_is_dram = f_opcode == tcu_isa_pkg::OPCODE_DATAMOVE && dram_direction(f_flags);
wire f_is_move = f_opcode == tcu_isa_pkg::OPCODE_DATAMOVE && !dram_direction(f_flags);  // local <-> accumulators
wire f_is_lw   = f_opcode == tcu_isa_pkg::OPCODE_LOADWEIGHTS;
wire f_is_mm   = f_opcode == tcu_isa_pkg::OPCODE_MATMUL;
wire f_bank1   = f_flags[tcu_isa_pkg::DIRECTION_DRAM1_BIT];
wire [CB-1:0] f_n = f_is_lw ? f_lw_count : f_count;
wire f_lvalid = f_is_dram || f_is_move || (f_is_mm && !f_flags[tcu_isa_pkg::MATMUL_FLAG_ZEROES_BIT]) ||
                (f_is_lw && !f_flags[tcu_isa_pkg::LOADWEIGHTS_FLAG_ZEROES_BIT]);
wire f_lwrite = f_is_dram ? !f_flags[tcu_isa_pkg::DIRECTION_TO_DRAM_BIT] :
                (f_is_move && f_flags == tcu_isa_pkg::DIRECTION_ACC_TO_LOCAL);
localparam XB = 2 * CB;  // (size - 1) << stride without overflow (strides are at most 2^31)
wire [XB-1:0] f_end = XB'(f_addr0) + (XB'(f_n - 1) << f_op0[OPERAND0_ADDRESS_BITS +: STRIDE0_BITS]);
wire          f_wraps = f_end >= XB'(LOCAL_DEPTH);
wire [CB-1:0] f_lo = f_wraps ? '0 : f_addr0;
wire [CB-1:0] f_hi = f_wraps ? CB'(LOCAL_DEPTH - 1) : CB'(f_end);

// Accumulator banks: the lower and upper halves of the accumulators (bit k: bank k).
function automatic bank_of(input [AA-1:0] address);
    bank_of = 32'(address) >= HALF;
endfunction
function automatic [BA-1:0] in_bank(input [AA-1:0] address);
    in_bank = BA'(32'(address) >= HALF ? 32'(address) - HALF : 32'(address));
endfunction
// The banks a run of accumulator vectors touches (both when it wraps).
wire [XB-1:0] f_acc_end = XB'(f_addr1) + (XB'(f_n - 1) << f_op1[OPERAND1_ADDRESS_BITS +: STRIDE1_BITS]);
wire [1:0]    f_run_banks = f_acc_end >= XB'(ACC_DEPTH) ? 2'b11 :
                            {f_acc_end >= XB'(HALF), XB'(f_addr1) < XB'(HALF)};
wire [1:0]    f_simd_banks = (f_flags[tcu_isa_pkg::SIMD_FLAG_READ_BIT] ? 2'b01 << bank_of(AA'(f_addr1)) : 2'b00) |
                             (f_flags[tcu_isa_pkg::SIMD_FLAG_WRITE_BIT] ? 2'b01 << bank_of(AA'(f_addr0)) : 2'b00);
wire [1:0]    f_acc_banks = f_is_simd ? f_simd_banks : (f_is_mm || f_is_move) ? f_run_banks : 2'b00;

// What each engine's instruction does to local memory while it is in flight: compute (C),
// accumulator moves (O), weights (W), and per DRAM bank a reader (DRAM -> local) and a writer
// (local -> DRAM): D0R, D0W, D1R, D1W.
localparam E_C = 0, E_O = 1, E_W = 2, E_D0R = 3, E_D0W = 4, E_D1R = 5, E_D1W = 6, ENGINES = 7;
reg  [ENGINES-1:0] e_lvalid, e_lwrite;
reg  [CB-1:0]      e_lo [0:ENGINES-1];
reg  [CB-1:0]      e_hi [0:ENGINES-1];
wire [ENGINES-1:0] e_busy;
wire [ENGINES-1:0] hazard;
genvar e;
generate
    for (e = 0; e < ENGINES; e = e + 1) begin : g_hazard
        assign hazard[e] = e_lvalid[e] && f_lvalid && (e_lwrite[e] || f_lwrite) && f_lo <= e_hi[e] && e_lo[e] <= f_hi;
    end
endgenerate
// The engine the instruction would go to, and the others' hazards.
wire [ENGINES-1:0] f_engine;
assign f_engine[E_C] = f_is_mm;
assign f_engine[E_O] = f_is_move;
assign f_engine[E_W] = f_is_lw;
wire f_to_dram = f_flags[tcu_isa_pkg::DIRECTION_TO_DRAM_BIT];
assign f_engine[E_D0R] = f_is_dram && !f_bank1 && !f_to_dram;
assign f_engine[E_D0W] = f_is_dram && !f_bank1 && f_to_dram;
assign f_engine[E_D1R] = f_is_dram && f_bank1 && !f_to_dram;
assign f_engine[E_D1W] = f_is_dram && f_bank1 && f_to_dram;
wire f_hazard = |(hazard & ~f_engine);

// A bank's reader and writer run side by side (AXI reads and writes are independent) unless their
// DRAM ranges overlap: then the later one waits, so DRAM too keeps program order.
reg  [XB-1:0] dram_lo [0:3];   // indexed by engine - E_D0R
reg  [XB-1:0] dram_hi [0:3];
wire [XB-1:0] f_dram_hi = XB'(f_addr1) + (XB'(f_count - 1) << f_op1[OPERAND1_ADDRESS_BITS +: STRIDE1_BITS]);
// The engine of the other direction on the same bank.
wire [2:0] f_partner = f_bank1 ? (f_to_dram ? 3'(E_D1R) : 3'(E_D1W)) : (f_to_dram ? 3'(E_D0R) : 3'(E_D0W));
wire dram_hazard;

// -- compute engine (MatMul) -----------------------------------------------------------------------
// A MatMul may follow a MatMul as soon as the earlier one has issued its last vector: both stream
// through the array in order and carry their own accumulator address, flag and weight set, so
// nothing waits for the array to drain (the accumulators forward writes for accumulate chains).
wire c_ready;         // free, or the MatMul in flight has issued its last vector
wire c_busy;
reg [1:0]  c_banks;   // accumulator banks of the MatMuls in flight
wire c_free = !c_busy;
wire quiet_c;

// -- accumulator engine: moves local <-> accumulators, and the SIMD pipeline beside them ------------
wire o_busy, o_ready;
reg [1:0]  m_banks;   // the move's accumulator banks
reg [1:0]  s_banks;   // accumulator banks of the SIMD instructions in the pipeline
wire o_free = !o_busy;
wire simd_hazard, simd_read_hazard;
wire simd_pipe_empty;
wire mv_quiet;
wire quiet_o;
// The banks each side uses now: a MatMul waits for the accumulator engine's, and the other way round.
wire [1:0] c_live = c_free ? 2'b00 : c_banks;
wire [1:0] o_live = (o_free ? 2'b00 : m_banks) | (simd_pipe_empty ? 2'b00 : s_banks);
wire bank_wait_c = |(f_acc_banks & o_live);
wire bank_wait_o = |(f_acc_banks & c_live);

// -- weights: the array's two sets ---------------------------------------------------------------
// LoadWeights fills the array's loading set while MatMuls stream through the active one; the first
// vector of the next MatMul in program order carries the swap. A MatMul dispatched after a
// LoadWeights (`lw_since_mm`) swaps, and its first vector waits until the weights engine is done. A
// LoadWeights that starts a new load (a MatMul came since the previous one: `mm_since_lw`) may
// fill the loading set only once the previous load's swap has reached the array, and (always) only
// while no vector in flight uses that set.
reg  lw_since_mm, mm_since_lw;
reg  w_continues;          // the weights engine's load continues the previous one (no MatMul between)
wire w_free;
wire arr_loaded;
wire c_swap_in_flight;     // the compute engine carries a swap to the array
wire load_allowed;

// -- DRAM engines -------------------------------------------------------------------------------
wire d0r_free, d0w_free, d1r_free, d1w_free;
// A bank returns at most one vector per VECTOR_BEATS cycles; with a single beat both banks' responses
// could outrun local memory's port, so then DRAM -> local moves take turns.
wire d_turns = VECTOR_BEATS < 2 && f_is_dram && !f_to_dram && (f_bank1 ? !d0r_free : !d1r_free);
wire f_dram_free = f_bank1 ? (f_to_dram ? d1w_free : d1r_free) : (f_to_dram ? d0w_free : d0r_free);

wire quiet_w = w_free;
wire quiet_d = d0r_free && d0w_free && d1r_free && d1w_free;
assign s_instr_ready = !rst && (
    f_is_simd ? o_free && !simd_hazard && !bank_wait_o :
    f_is_mm   ? c_ready && !f_hazard && !bank_wait_c :
    f_is_move ? o_ready && simd_pipe_empty && !f_hazard && !bank_wait_o :
    f_is_lw   ? w_free && !f_hazard :
    f_is_dram ? f_dram_free && !f_hazard && !dram_hazard && !d_turns :
    f_opcode == tcu_isa_pkg::OPCODE_CONFIGURE ? c_free && o_free && quiet_c && quiet_o && quiet_w && quiet_d :
    1'b1);
wire start = s_instr_valid && s_instr_ready;
wire start_c = start && f_known && f_is_mm;
wire start_o = start && f_known && f_is_move;
wire start_s = start && f_known && f_is_simd;
wire start_w = start && f_known && f_is_lw;
wire start_d0r = start && f_known && f_engine[E_D0R];
wire start_d0w = start && f_known && f_engine[E_D0W];
wire start_d1r = start && f_known && f_engine[E_D1R];
wire start_d1w = start && f_known && f_engine[E_D1W];

// -- units ---------------------------------------------------------------------------------------
// Local memory: port A serves the compute engine's MatMul reads, and the accumulator engine's moves
// in cycles without one; port B serves the weights and DRAM engines, and the accumulator engine's
// moves while MatMuls stream, through the arbiter below. The hazard rule keeps engines on different
// addresses where one writes.
reg           lm_a_rd;
reg  [LA-1:0] lm_a_raddr;
reg           lm_a_we;
reg  [LA-1:0] lm_a_waddr;
reg  [V-1:0]  lm_a_wdata;
wire [V-1:0]  lm_a_rdata;
reg           lm_b_rd;
reg  [LA-1:0] lm_b_raddr;
reg           lm_b_we;
reg  [LA-1:0] lm_b_waddr;
reg  [V-1:0]  lm_b_wdata;
wire [V-1:0]  lm_b_rdata;

tcu_ram #(
    .DEPTH(LOCAL_DEPTH),
    .WIDTH(V),
    .ADDR_WIDTH(LA)
)
local_inst (
    .clk(clk),
    .a_en(lm_a_rd || lm_a_we), .a_we(lm_a_we), .a_addr(lm_a_we ? lm_a_waddr : lm_a_raddr),
    .a_wdata(lm_a_wdata), .a_rdata(lm_a_rdata),
    .b_en(lm_b_rd || lm_b_we), .b_we(lm_b_we), .b_addr(lm_b_we ? lm_b_waddr : lm_b_raddr),
    .b_wdata(lm_b_wdata), .b_rdata(lm_b_rdata)
);

// Accumulators: two banks. MatMul results go to theirs; the accumulator engine reads and writes its
// own (the dispatch rule keeps the two sides on different banks).
wire          mm_wr_valid, mm_wr_accumulate;   // a MatMul result
wire [AA-1:0] mm_wr_addr;
wire [V-1:0]  mm_wr_data;
wire          mv_wr_valid, mv_wr_accumulate;   // a move to the accumulators
wire [AA-1:0] mv_wr_addr;
wire [V-1:0]  mv_wr_data;
wire          sp_wr_valid, sp_wr_accumulate;   // a SIMD result
wire [AA-1:0] sp_wr_addr;
wire [V-1:0]  sp_wr_data;
// The move engine and the SIMD pipeline never write at once (each waits for the other to finish).
wire          o_wr_valid = mv_wr_valid || sp_wr_valid;
wire          o_wr_accumulate = mv_wr_valid ? mv_wr_accumulate : sp_wr_accumulate;
wire [AA-1:0] o_wr_addr = mv_wr_valid ? mv_wr_addr : sp_wr_addr;
wire [V-1:0]  o_wr_data = mv_wr_valid ? mv_wr_data : sp_wr_data;
wire          mv_rd_valid, sp_rd_valid;        // the accumulator engine's reads
wire [AA-1:0] mv_rd_addr, sp_rd_addr;
wire          acc_rd_valid = mv_rd_valid || sp_rd_valid;
wire [AA-1:0] acc_rd_addr = sp_rd_valid ? sp_rd_addr : mv_rd_addr;
reg           acc_rd_bank;                     // the bank of the read whose data is out now
wire [V-1:0]  bank_rd_data [0:1];
wire [V-1:0]  acc_rd_data = bank_rd_data[acc_rd_bank];
wire [1:0]    acc_busy, acc_saturated, bank_rd_valid;

genvar b;
generate
    for (b = 0; b < 2; b = b + 1) begin : g_acc_bank
        wire mm_here = mm_wr_valid && bank_of(mm_wr_addr) == b[0];
        wire o_here = o_wr_valid && bank_of(o_wr_addr) == b[0];
        tcu_accumulators #(
            .DEPTH(HALF),
            .ARRAY_SIZE(N),
            .DATA_WIDTH(W),
            .ADDR_WIDTH(BA)
        )
        acc_inst (
            .clk(clk), .rst(rst),
            .s_write_valid(mm_here || o_here),
            .s_write_addr(in_bank(mm_here ? mm_wr_addr : o_wr_addr)),
            .s_write_data(mm_here ? mm_wr_data : o_wr_data),
            .s_write_accumulate(mm_here ? mm_wr_accumulate : o_wr_accumulate),
            .s_read_valid(acc_rd_valid && bank_of(acc_rd_addr) == b[0]), .s_read_addr(in_bank(acc_rd_addr)),
            .m_read_data(bank_rd_data[b]), .m_read_valid(bank_rd_valid[b]),
            .busy(acc_busy[b]), .saturated(acc_saturated[b])
        );
    end
endgenerate

// Array
wire         arr_w_valid;
wire [V-1:0] arr_w_data;
wire         arr_in_valid, arr_in_swap;
wire [V-1:0] arr_in_data;
wire [V-1:0] arr_out_data;
wire         arr_out_valid, arr_busy, arr_saturated, arr_in_ready, arr_w_ready;

tcu_systolic_array #(
    .ARRAY_SIZE(N),
    .DATA_WIDTH(W),
    .BINARY_POINT(BINARY_POINT)
)
array_inst (
    .clk(clk), .rst(rst),
    .s_weights_data(arr_w_data), .s_weights_valid(arr_w_valid), .s_weights_ready(arr_w_ready),
    .s_in_data(arr_in_data), .s_in_valid(arr_in_valid), .s_in_swap(arr_in_swap), .s_in_ready(arr_in_ready),
    .m_out_data(arr_out_data), .m_out_valid(arr_out_valid), .m_out_ready(1'b1),
    .loaded(arr_loaded), .busy(arr_busy), .saturated(arr_saturated)
);

// SIMD pipeline, one instruction per cycle, beside the move engine
wire simd_saturated;

tcu_simd_pipeline #(
    .ARRAY_SIZE(N),
    .DATA_WIDTH(W),
    .BINARY_POINT(BINARY_POINT),
    .REGISTERS(SIMD_REGISTERS),
    .SELECT_BITS(SB),
    .ACC_ADDR_BITS(AA)
)
simd_pipeline_inst (
    .clk(clk), .rst(rst),
    .s_cmd_valid(start_s), .s_cmd_op(f_op2[3*SB +: 4]), .s_cmd_left(f_op2[2*SB +: SB]),
    .s_cmd_right(f_op2[SB +: SB]), .s_cmd_dest(f_op2[SB-1:0]),
    .s_cmd_read(f_flags[tcu_isa_pkg::SIMD_FLAG_READ_BIT]), .s_cmd_read_addr(AA'(f_addr1)),
    .s_cmd_write(f_flags[tcu_isa_pkg::SIMD_FLAG_WRITE_BIT]),
    .s_cmd_accumulate(f_flags[tcu_isa_pkg::SIMD_FLAG_ACCUMULATE_BIT]), .s_cmd_write_addr(AA'(f_addr0)),
    .read_hazard(simd_read_hazard),
    .m_acc_rd_valid(sp_rd_valid), .m_acc_rd_addr(sp_rd_addr), .acc_rd_data(acc_rd_data),
    .m_acc_wr_valid(sp_wr_valid), .m_acc_wr_addr(sp_wr_addr), .m_acc_wr_data(sp_wr_data),
    .m_acc_wr_accumulate(sp_wr_accumulate),
    .empty(simd_pipe_empty), .saturated(simd_saturated)
);

// -- accumulator engine: moves ---------------------------------------------------------------------
// Port A is the move engine's in cycles without a MatMul read; else it asks the port-B arbiter.
wire          mm_reads_a;                          // a MatMul reads port A this cycle
wire          port_a_free = !mm_reads_a;
wire          mv_a_rd, mv_a_wr, o_rd_valid, o_lwr_valid, grant_o_rd, grant_o_wr, o_issue;
wire [LA-1:0] mv_local_rd_addr, mv_local_wr_addr;
wire [V-1:0]  mv_local_wr_data;
wire [31:0]   o_busy_cycles;

tcu_move_engine #(
    .ARRAY_SIZE(N),
    .DATA_WIDTH(W),
    .LOCAL_ADDR_BITS(LA),
    .ACC_ADDR_BITS(AA)
)
move_inst (
    .clk(clk), .rst(rst),
    .s_cmd_valid(start_o), .s_cmd_ready(o_ready),
    .s_cmd_to_acc(f_flags != tcu_isa_pkg::DIRECTION_ACC_TO_LOCAL),
    .s_cmd_accumulate(f_flags == tcu_isa_pkg::DIRECTION_LOCAL_TO_ACC_ACCUMULATE),
    .s_cmd_local_addr(f_addr0), .s_cmd_local_step(f_step0), .s_cmd_acc_addr(f_addr1),
    .s_cmd_acc_step(f_step1), .s_cmd_count(f_count),
    .port_a_free(port_a_free),
    .m_local_a_rd(mv_a_rd), .m_local_a_wr(mv_a_wr),
    .m_local_b_rd_valid(o_rd_valid), .local_b_rd_grant(grant_o_rd),
    .m_local_b_wr_valid(o_lwr_valid), .local_b_wr_grant(grant_o_wr),
    .m_local_rd_addr(mv_local_rd_addr), .m_local_wr_addr(mv_local_wr_addr), .m_local_wr_data(mv_local_wr_data),
    .local_a_rd_data(lm_a_rdata), .local_b_rd_data(lm_b_rdata),
    .m_acc_rd_valid(mv_rd_valid), .m_acc_rd_addr(mv_rd_addr), .acc_rd_data(acc_rd_data),
    .m_acc_wr_valid(mv_wr_valid), .m_acc_wr_addr(mv_wr_addr), .m_acc_wr_data(mv_wr_data),
    .m_acc_wr_accumulate(mv_wr_accumulate),
    .downstream_busy(|(acc_busy & m_banks)),
    .busy(o_busy), .issuing(o_issue), .quiet(mv_quiet), .busy_cycles(o_busy_cycles)
);

// -- local memory port B: the arbiter ---------------------------------------------------------------
// Fixed priority: DRAM read responses whose queue is half full (DRAM0, DRAM1), the weights engine's
// reads (MatMuls may wait for them), the DRAM writers' reads (DRAM bandwidth is the scarce one; a
// writer asks at most once per vector's worth of bus beats), the accumulator engine's move, then
// other responses. Responses come at most one per VECTOR_BEATS cycles per bank (with one beat, one
// bank at a time), so urgent queues drain faster than they fill and never overflow.
wire          w_rd_valid, d0_rd_valid, d1_rd_valid, d0_wr_valid, d1_wr_valid, d0_wr_urgent, d1_wr_urgent;
wire [LA-1:0] w_rd_addr, d0_rd_addr, d1_rd_addr, d0_wr_addr, d1_wr_addr;
wire [V-1:0]  d0_wr_data, d1_wr_data;
wire urgent = (d0_wr_valid && d0_wr_urgent) || (d1_wr_valid && d1_wr_urgent);
wire grant_w_rd = w_rd_valid && !urgent;
wire grant_d0_rd = d0_rd_valid && !urgent && !w_rd_valid;
wire grant_d1_rd = d1_rd_valid && !urgent && !w_rd_valid && !d0_rd_valid;
wire writers = d0_rd_valid || d1_rd_valid;
wire o_wants = o_rd_valid || o_lwr_valid;
wire grant_o = o_wants && !urgent && !w_rd_valid && !writers;
assign grant_o_rd = grant_o && o_rd_valid;
assign grant_o_wr = grant_o && o_lwr_valid;
wire d_writes = urgent || (!w_rd_valid && !writers && !o_wants && (d0_wr_valid || d1_wr_valid));
// Among DRAM responses: an urgent queue first, else DRAM0.
wire write_d0 = d0_wr_valid && (d0_wr_urgent || !(d1_wr_valid && d1_wr_urgent));
wire grant_d0_wr = d_writes && write_d0;
wire grant_d1_wr = d_writes && !write_d0;

always @* begin
    lm_b_we = d_writes || grant_o_wr;
    lm_b_waddr = grant_o_wr ? mv_local_wr_addr : write_d0 ? d0_wr_addr : d1_wr_addr;
    lm_b_wdata = grant_o_wr ? mv_local_wr_data : write_d0 ? d0_wr_data : d1_wr_data;
    lm_b_rd = grant_w_rd || grant_o_rd || grant_d0_rd || grant_d1_rd;
    lm_b_raddr = grant_w_rd ? w_rd_addr : grant_o_rd ? mv_local_rd_addr : grant_d0_rd ? d0_rd_addr : d1_rd_addr;
end

// -- weights engine ----------------------------------------------------------------------------------
wire w_busy, w_issuing;
wire [31:0] w_busy_cycles;
// Beats are in the weights engine's pipeline or the array's loading set is full of a load whose swap
// has not reached the array yet.
assign load_allowed = arr_w_ready && (w_continues || (!arr_loaded && !c_swap_in_flight));

tcu_weights_engine #(
    .ARRAY_SIZE(N),
    .DATA_WIDTH(W),
    .LOCAL_ADDR_BITS(LA)
)
weights_inst (
    .clk(clk), .rst(rst),
    .s_cmd_valid(start_w), .s_cmd_ready(w_free),
    .s_cmd_zeroes(f_flags[tcu_isa_pkg::LOADWEIGHTS_FLAG_ZEROES_BIT]),
    .s_cmd_local_top(CB'(f_end)), .s_cmd_local_step(f_step0), .s_cmd_count(f_lw_count),
    .load_allowed(load_allowed),
    .m_local_rd_valid(w_rd_valid), .m_local_rd_addr(w_rd_addr), .local_rd_grant(grant_w_rd),
    .local_rd_data(lm_b_rdata),
    .m_weights_valid(arr_w_valid), .m_weights_data(arr_w_data),
    .busy(w_busy), .issuing(w_issuing), .busy_cycles(w_busy_cycles)
);

// -- DRAM engines ------------------------------------------------------------------------------------
// Per bank a reader (DRAM -> local: the bank's read requests, responses into local memory) and a
// writer (local -> DRAM: local reads, the bank's writes), as verilog-axi's axi_dma_rd / axi_dma_wr.
wire d0r_busy, d0w_busy, d1r_busy, d1w_busy, d0r_issuing, d0w_issuing, d1r_issuing, d1w_issuing;
wire [31:0] d0r_busy_cycles, d0w_busy_cycles, d1r_busy_cycles, d1w_busy_cycles;

tcu_dram_reader #(
    .ARRAY_SIZE(N),
    .DATA_WIDTH(W),
    .LOCAL_ADDR_BITS(LA),
    .LOCAL_DEPTH(LOCAL_DEPTH),
    .DEPTH_BITS(DRAM0_DEPTH_BITS)
)
dram0_reader_inst (
    .clk(clk), .rst(rst),
    .s_cmd_valid(start_d0r), .s_cmd_ready(d0r_free),
    .s_cmd_local_addr(f_addr0), .s_cmd_local_step(f_step0), .s_cmd_dram_addr(f_addr1),
    .s_cmd_dram_step(f_step1), .s_cmd_count(f_count),
    .m_dram_rd_valid(m_dram0_rd_valid), .m_dram_rd_ready(m_dram0_rd_ready), .m_dram_rd_addr(m_dram0_rd_addr),
    .m_dram_rd_count(m_dram0_rd_count), .s_dram_rd_valid(s_dram0_rd_valid), .s_dram_rd_data(s_dram0_rd_data),
    .m_local_wr_valid(d0_wr_valid), .m_local_wr_addr(d0_wr_addr), .m_local_wr_data(d0_wr_data),
    .m_local_wr_urgent(d0_wr_urgent), .local_wr_grant(grant_d0_wr),
    .busy(d0r_busy), .issuing(d0r_issuing), .busy_cycles(d0r_busy_cycles)
);

tcu_dram_writer #(
    .ARRAY_SIZE(N),
    .DATA_WIDTH(W),
    .LOCAL_ADDR_BITS(LA),
    .DEPTH_BITS(DRAM0_DEPTH_BITS)
)
dram0_writer_inst (
    .clk(clk), .rst(rst),
    .s_cmd_valid(start_d0w), .s_cmd_ready(d0w_free),
    .s_cmd_local_addr(f_addr0), .s_cmd_local_step(f_step0), .s_cmd_dram_addr(f_addr1),
    .s_cmd_dram_step(f_step1), .s_cmd_count(f_count),
    .m_dram_wr_valid(m_dram0_wr_valid), .m_dram_wr_ready(m_dram0_wr_ready), .m_dram_wr_addr(m_dram0_wr_addr),
    .m_dram_wr_run(m_dram0_wr_run), .m_dram_wr_data(m_dram0_wr_data), .dram_wr_pending(dram0_wr_pending),
    .m_local_rd_valid(d0_rd_valid), .m_local_rd_addr(d0_rd_addr), .local_rd_grant(grant_d0_rd),
    .local_rd_data(lm_b_rdata),
    .busy(d0w_busy), .issuing(d0w_issuing), .busy_cycles(d0w_busy_cycles)
);

tcu_dram_reader #(
    .ARRAY_SIZE(N),
    .DATA_WIDTH(W),
    .LOCAL_ADDR_BITS(LA),
    .LOCAL_DEPTH(LOCAL_DEPTH),
    .DEPTH_BITS(DRAM1_DEPTH_BITS)
)
dram1_reader_inst (
    .clk(clk), .rst(rst),
    .s_cmd_valid(start_d1r), .s_cmd_ready(d1r_free),
    .s_cmd_local_addr(f_addr0), .s_cmd_local_step(f_step0), .s_cmd_dram_addr(f_addr1),
    .s_cmd_dram_step(f_step1), .s_cmd_count(f_count),
    .m_dram_rd_valid(m_dram1_rd_valid), .m_dram_rd_ready(m_dram1_rd_ready), .m_dram_rd_addr(m_dram1_rd_addr),
    .m_dram_rd_count(m_dram1_rd_count), .s_dram_rd_valid(s_dram1_rd_valid), .s_dram_rd_data(s_dram1_rd_data),
    .m_local_wr_valid(d1_wr_valid), .m_local_wr_addr(d1_wr_addr), .m_local_wr_data(d1_wr_data),
    .m_local_wr_urgent(d1_wr_urgent), .local_wr_grant(grant_d1_wr),
    .busy(d1r_busy), .issuing(d1r_issuing), .busy_cycles(d1r_busy_cycles)
);

tcu_dram_writer #(
    .ARRAY_SIZE(N),
    .DATA_WIDTH(W),
    .LOCAL_ADDR_BITS(LA),
    .DEPTH_BITS(DRAM1_DEPTH_BITS)
)
dram1_writer_inst (
    .clk(clk), .rst(rst),
    .s_cmd_valid(start_d1w), .s_cmd_ready(d1w_free),
    .s_cmd_local_addr(f_addr0), .s_cmd_local_step(f_step0), .s_cmd_dram_addr(f_addr1),
    .s_cmd_dram_step(f_step1), .s_cmd_count(f_count),
    .m_dram_wr_valid(m_dram1_wr_valid), .m_dram_wr_ready(m_dram1_wr_ready), .m_dram_wr_addr(m_dram1_wr_addr),
    .m_dram_wr_run(m_dram1_wr_run), .m_dram_wr_data(m_dram1_wr_data), .dram_wr_pending(dram1_wr_pending),
    .m_local_rd_valid(d1_rd_valid), .m_local_rd_addr(d1_rd_addr), .local_rd_grant(grant_d1_rd),
    .local_rd_data(lm_b_rdata),
    .busy(d1w_busy), .issuing(d1w_issuing), .busy_cycles(d1w_busy_cycles)
);

assign e_busy[E_C] = c_busy;
assign e_busy[E_O] = o_busy;
assign e_busy[E_W] = w_busy;
assign e_busy[E_D0R] = d0r_busy;
assign e_busy[E_D0W] = d0w_busy;
assign e_busy[E_D1R] = d1r_busy;
assign e_busy[E_D1W] = d1w_busy;
wire [1:0] f_partner_slot = 2'(f_partner - 3'(E_D0R));
assign dram_hazard = e_busy[f_partner] && XB'(f_addr1) <= dram_hi[f_partner_slot] &&
                     dram_lo[f_partner_slot] <= f_dram_hi;

// -- compute engine: MatMul ----------------------------------------------------------------------
wire          c_issue, c_quiet;
wire [LA-1:0] c_local_rd_addr;
wire [31:0]   c_busy_cycles;

tcu_compute_engine #(
    .ARRAY_SIZE(N),
    .DATA_WIDTH(W),
    .LOCAL_ADDR_BITS(LA),
    .ACC_ADDR_BITS(AA)
)
compute_inst (
    .clk(clk), .rst(rst),
    .s_cmd_valid(start_c), .s_cmd_ready(c_ready),
    .s_cmd_zeroes(f_flags[tcu_isa_pkg::MATMUL_FLAG_ZEROES_BIT]),
    .s_cmd_accumulate(f_flags[tcu_isa_pkg::MATMUL_FLAG_ACCUMULATE_BIT]), .s_cmd_swap(lw_since_mm),
    .s_cmd_local_addr(f_addr0), .s_cmd_local_step(f_step0), .s_cmd_acc_addr(f_addr1),
    .s_cmd_acc_step(f_step1), .s_cmd_count(f_n),
    .weights_loaded(w_free),
    .m_local_rd_valid(mm_reads_a), .m_local_rd_addr(c_local_rd_addr), .local_rd_data(lm_a_rdata),
    .m_array_valid(arr_in_valid), .m_array_data(arr_in_data), .m_array_swap(arr_in_swap),
    .s_array_valid(arr_out_valid), .s_array_data(arr_out_data),
    .m_acc_wr_valid(mm_wr_valid), .m_acc_wr_addr(mm_wr_addr), .m_acc_wr_data(mm_wr_data),
    .m_acc_wr_accumulate(mm_wr_accumulate),
    .downstream_busy(arr_busy || |(acc_busy & c_banks)),
    .busy(c_busy), .issuing(c_issue), .swap_in_flight(c_swap_in_flight), .quiet(c_quiet),
    .busy_cycles(c_busy_cycles)
);

// Local memory port A: the compute engine's reads, else the move engine's.
always @* begin
    lm_a_rd = mm_reads_a || mv_a_rd;
    lm_a_raddr = mm_reads_a ? c_local_rd_addr : mv_local_rd_addr;
    lm_a_we = mv_a_wr;
    lm_a_waddr = mv_local_wr_addr;
    lm_a_wdata = mv_local_wr_data;
end

// A SIMD that reads waits for the pipeline's pending writes to its vector, and while an accumulate is
// written in the read's bank (it uses that bank's read port for its old value).
assign simd_hazard = simd_read_hazard || (f_flags[tcu_isa_pkg::SIMD_FLAG_READ_BIT] &&
    o_wr_valid && o_wr_accumulate && bank_of(o_wr_addr) == bank_of(AA'(f_addr1)));

// Everything each engine started has landed.
assign quiet_c = c_quiet;
assign quiet_o = mv_quiet && simd_pipe_empty;

assign idle = !s_instr_valid && c_free && o_free && quiet_c && quiet_o && quiet_w && quiet_d;

reg [31:0] timeout_limit, tracepoint_pc;

wire d0_rd_fire = m_dram0_rd_valid && m_dram0_rd_ready, d0_wr_fire = m_dram0_wr_valid && m_dram0_wr_ready;
wire d1_rd_fire = m_dram1_rd_valid && m_dram1_rd_ready, d1_wr_fire = m_dram1_wr_valid && m_dram1_wr_ready;
assign activity = {
    s_instr_ready, s_instr_valid,                                              // instruction
    1'b1, lm_a_rd || lm_a_we,                                                  // local port A
    1'b1, lm_b_rd || lm_b_we,                                                  // local port B
    d0_rd_fire || d0_wr_fire, m_dram0_rd_valid || m_dram0_wr_valid || s_dram0_rd_valid,  // DRAM0
    d1_rd_fire || d1_wr_fire, m_dram1_rd_valid || m_dram1_wr_valid || s_dram1_rd_valid,  // DRAM1
    c_issue || o_issue || w_issuing || d0r_issuing || d0w_issuing || d1r_issuing || d1w_issuing,
    |e_busy,                                                                   // dataflow
    1'b1, mm_wr_valid || o_wr_valid || acc_rd_valid,                           // accumulators
    arr_in_ready, arr_in_valid || arr_w_valid                                  // array
};
assign tracepoint = program_counter == tracepoint_pc;

always @(posedge clk) begin
    if (rst) begin
        e_lvalid <= '0;
        e_lwrite <= '0;
        c_banks <= '0;
        m_banks <= '0;
        s_banks <= '0;
        lw_since_mm <= 1'b0;
        mm_since_lw <= 1'b0;
        w_continues <= 1'b0;
        program_counter <= '0;
        error <= 1'b0;
        timeout <= 1'b0;
        saturated <= 1'b0;
        dram0_offset <= '0;
        dram0_cache <= '0;
        dram1_offset <= '0;
        dram1_cache <= '0;
        timeout_limit <= tcu_isa_pkg::CONFIG_RESET_TIMEOUT;
        tracepoint_pc <= tcu_isa_pkg::CONFIG_RESET_TRACEPOINT;
        sample_interval <= '0;
    end else begin
        saturated <= saturated | arr_saturated | (|acc_saturated) | simd_saturated;

        // ---- dispatch: the program counter counts dispatched instructions ---------------------
        if (start) begin
            program_counter <= program_counter + 1;
            if (!f_known) begin
                error <= 1'b1;  // skipped; the program counter still advances
            end else if (f_opcode == tcu_isa_pkg::OPCODE_CONFIGURE) begin
                case (f_args[3:0])
                    tcu_isa_pkg::CONFIG_DRAM0_OFFSET:     dram0_offset <= 32'(f_args >> 4);
                    tcu_isa_pkg::CONFIG_DRAM0_CACHE:      dram0_cache <= 4'(f_args >> 4);
                    tcu_isa_pkg::CONFIG_DRAM1_OFFSET:     dram1_offset <= 32'(f_args >> 4);
                    tcu_isa_pkg::CONFIG_DRAM1_CACHE:      dram1_cache <= 4'(f_args >> 4);
                    tcu_isa_pkg::CONFIG_TIMEOUT:          timeout_limit <= 32'(f_args >> 4);
                    tcu_isa_pkg::CONFIG_TRACEPOINT:       tracepoint_pc <= 32'(f_args >> 4);
                    tcu_isa_pkg::CONFIG_PROGRAM_COUNTER:  program_counter <= 32'(f_args >> 4);
                    tcu_isa_pkg::CONFIG_SAMPLE_INTERVAL:  sample_interval <= 32'(f_args >> 4);
                    default: error <= 1'b1;
                endcase
            end
        end
        // Each engine's local memory range, from its dispatch until it is done.
        for (int k = 0; k < ENGINES; k = k + 1) begin
            if (start && f_known && f_engine[k]) begin
                e_lvalid[k] <= f_lvalid;
                e_lwrite[k] <= f_lwrite;
                e_lo[k] <= f_lo;
                e_hi[k] <= f_hi;
            end else if (!e_busy[k]) begin
                e_lvalid[k] <= 1'b0;
            end
        end
        if (start_c) begin
            c_banks <= (c_free ? 2'b00 : c_banks) | f_acc_banks;
            lw_since_mm <= 1'b0;
            mm_since_lw <= 1'b1;
        end
        if (start_w) begin
            lw_since_mm <= 1'b1;
            mm_since_lw <= 1'b0;
            w_continues <= !mm_since_lw;
        end
        if (start_o) m_banks <= f_acc_banks;
        if (start_s) s_banks <= (simd_pipe_empty ? 2'b00 : s_banks) | f_acc_banks;
        for (int k = 0; k < 4; k = k + 1) begin
            if (start && f_known && f_engine[E_D0R + k]) begin
                dram_lo[k] <= XB'(f_addr1);
                dram_hi[k] <= f_dram_hi;
            end
        end

        // ---- timeout: an engine busy with one instruction for longer than the limit --------------
        if (timeout_limit != 0 && ((c_busy && c_busy_cycles >= timeout_limit) ||
                                   (o_busy && o_busy_cycles >= timeout_limit) ||
                                   (w_busy && w_busy_cycles >= timeout_limit) ||
                                   (d0r_busy && d0r_busy_cycles >= timeout_limit) ||
                                   (d0w_busy && d0w_busy_cycles >= timeout_limit) ||
                                   (d1r_busy && d1r_busy_cycles >= timeout_limit) ||
                                   (d1w_busy && d1w_busy_cycles >= timeout_limit))) begin
            timeout <= 1'b1;
        end

        acc_rd_bank <= bank_of(acc_rd_addr);  // which bank's data the accumulator engine reads next cycle
    end
end

wire unused_ok = &{1'b0, arr_in_ready, bank_rd_valid, f_op1[OPERAND1_BITS-1:0], f_op0, f_op2};

endmodule

`resetall
