// SPDX-License-Identifier: Apache-2.0
`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * TCU core: the dispatcher (tcu_dispatch) and the engines it feeds, around local memory, the two
 * accumulator banks and the array, with the DRAM banks behind vector request ports (tcu_dram_axi
 * adapts them to AXI4).
 *
 * Engines, each running one instruction at a time with vectors streaming at one per cycle: compute
 * (tcu_compute_engine: MatMul), move (tcu_move_engine: local <-> accumulators) with the SIMD pipeline
 * beside it (tcu_simd_pipeline), weights (tcu_weights_engine: LoadWeights, into the array's second
 * weight set), and per DRAM bank a reader and a writer (tcu_dram_reader / tcu_dram_writer). The
 * dispatcher issues instructions in program order, each only when the result equals running them one
 * at a time (docs/rtl.md, docs/isa.md).
 *
 * Local memory has two ports: port A is the compute engine's, and the move engine's in cycles without
 * a MatMul read; port B is shared by the weights, DRAM and move engines through a fixed-priority
 * arbiter (DRAM read responses that cannot wait long first).
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
    parameter INSTRUCTION_BITS = 64,
    // 1: the window MatMul (an instruction set extension of ours, docs/isa.md)
    parameter WINDOW_MATMUL = 0,
    // 1: the SIMD ReLU flag (an instruction set extension of ours, docs/isa.md)
    parameter SIMD_RELU = 0
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
    output wire [31:0]                       dram0_offset,
    output wire [3:0]                        dram0_cache,
    output wire [31:0]                       dram1_offset,
    output wire [3:0]                        dram1_cache,
    output wire [31:0]                       sample_interval,

    // Valid/ready pairs per unit (valid in the even bit): array, accumulators, dataflow, DRAM1,
    // DRAM0, local port B, local port A, instruction; the sample stream's bits 32..47 (docs/rtl.md)
    output wire [15:0]                       activity,

    // Status
    output wire [31:0]                       program_counter,
    output wire                              idle,
    output wire                              error,
    output wire                              timeout,
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

// -- dispatch --------------------------------------------------------------------------------------
// tcu_dispatch decodes and dispatches in program order (the rule in docs/rtl.md); the engines report
// whether they take a command, whether they are busy and whether what they issued has landed.
// The engines' bit positions in the dispatcher's vectors (tcu_isa_pkg, generated from the Python enum).
localparam int E_C = tcu_isa_pkg::ENGINE_COMPUTE, E_O = tcu_isa_pkg::ENGINE_MOVE, E_W = tcu_isa_pkg::ENGINE_WEIGHTS;
localparam int E_D0R = tcu_isa_pkg::ENGINE_DRAM0_READER, E_D0W = tcu_isa_pkg::ENGINE_DRAM0_WRITER;
localparam int E_D1R = tcu_isa_pkg::ENGINE_DRAM1_READER, E_D1W = tcu_isa_pkg::ENGINE_DRAM1_WRITER;
localparam int ENGINES = tcu_isa_pkg::ENGINES;
wire [ENGINES-1:0]    m_start, engine_ready, engine_busy;
wire [ENGINES*32-1:0] engine_busy_cycles;
wire          start_s;
wire [3:0]    cmd_flags;
wire [31:0]   cmd_addr0, cmd_step0, cmd_addr1, cmd_step1, cmd_count, cmd_lw_count, cmd_lw_top;
wire [25:0]   cmd_window;   // the window register (the window MatMul)
wire [OPERAND2_BITS-1:0] cmd_operand2;
wire          cmd_swap, load_continues;
wire [1:0]    compute_banks, move_banks;
wire          c_ready, c_busy, c_quiet, o_ready, o_busy, mv_quiet, w_free, w_busy;
wire          d0r_free, d0w_free, d1r_free, d1w_free, d0r_busy, d0w_busy, d1r_busy, d1w_busy;
wire [31:0]   c_busy_cycles, o_busy_cycles, w_busy_cycles, d0r_busy_cycles, d0w_busy_cycles, d1r_busy_cycles,
              d1w_busy_cycles;
wire          simd_read_hazard, simd_pipe_empty;
wire          o_wr_valid, o_wr_accumulate;
wire [AA-1:0] o_wr_addr;
assign engine_ready[E_C] = c_ready;
assign engine_ready[E_O] = o_ready;
assign engine_ready[E_W] = w_free;
assign engine_ready[E_D0R] = d0r_free;
assign engine_ready[E_D0W] = d0w_free;
assign engine_ready[E_D1R] = d1r_free;
assign engine_ready[E_D1W] = d1w_free;
assign engine_busy[E_C] = c_busy;
assign engine_busy[E_O] = o_busy;
assign engine_busy[E_W] = w_busy;
assign engine_busy[E_D0R] = d0r_busy;
assign engine_busy[E_D0W] = d0w_busy;
assign engine_busy[E_D1R] = d1r_busy;
assign engine_busy[E_D1W] = d1w_busy;
assign engine_busy_cycles[E_C*32 +: 32] = c_busy_cycles;
assign engine_busy_cycles[E_O*32 +: 32] = o_busy_cycles;
assign engine_busy_cycles[E_W*32 +: 32] = w_busy_cycles;
assign engine_busy_cycles[E_D0R*32 +: 32] = d0r_busy_cycles;
assign engine_busy_cycles[E_D0W*32 +: 32] = d0w_busy_cycles;
assign engine_busy_cycles[E_D1R*32 +: 32] = d1r_busy_cycles;
assign engine_busy_cycles[E_D1W*32 +: 32] = d1w_busy_cycles;
wire start_c = m_start[E_C], start_o = m_start[E_O], start_w = m_start[E_W];
wire start_d0r = m_start[E_D0R], start_d0w = m_start[E_D0W], start_d1r = m_start[E_D1R], start_d1w = m_start[E_D1W];

tcu_dispatch #(
    .LOCAL_DEPTH(LOCAL_DEPTH),
    .ACC_DEPTH(ACC_DEPTH),
    .VECTOR_BEATS(VECTOR_BEATS),
    .OPERAND0_BITS(OPERAND0_BITS),
    .OPERAND1_BITS(OPERAND1_BITS),
    .OPERAND2_BITS(OPERAND2_BITS),
    .OPERAND0_ADDRESS_BITS(OPERAND0_ADDRESS_BITS),
    .OPERAND1_ADDRESS_BITS(OPERAND1_ADDRESS_BITS),
    .OPERAND2_ADDRESS_BITS(OPERAND2_ADDRESS_BITS),
    .STRIDE0_BITS(STRIDE0_BITS),
    .STRIDE1_BITS(STRIDE1_BITS),
    .INSTRUCTION_BITS(INSTRUCTION_BITS),
    .WINDOW_MATMUL(WINDOW_MATMUL)
)
dispatch_inst (
    .clk(clk), .rst(rst),
    .s_instr_data(s_instr_data), .s_instr_valid(s_instr_valid), .s_instr_ready(s_instr_ready),
    .m_start(m_start), .engine_ready(engine_ready), .engine_busy(engine_busy),
    .engine_busy_cycles(engine_busy_cycles),
    .m_simd_start(start_s), .simd_read_hazard(simd_read_hazard), .simd_empty(simd_pipe_empty),
    .compute_quiet(c_quiet), .move_quiet(mv_quiet),
    .acc_wr_valid(o_wr_valid), .acc_wr_accumulate(o_wr_accumulate), .acc_wr_addr(o_wr_addr),
    .cmd_flags(cmd_flags), .cmd_addr0(cmd_addr0), .cmd_step0(cmd_step0), .cmd_addr1(cmd_addr1),
    .cmd_step1(cmd_step1), .cmd_count(cmd_count), .cmd_lw_count(cmd_lw_count), .cmd_lw_top(cmd_lw_top),
    .cmd_operand2(cmd_operand2), .cmd_swap(cmd_swap), .cmd_window(cmd_window), .load_continues(load_continues),
    .compute_banks(compute_banks), .move_banks(move_banks),
    .dram0_offset(dram0_offset), .dram0_cache(dram0_cache), .dram1_offset(dram1_offset),
    .dram1_cache(dram1_cache), .sample_interval(sample_interval),
    .program_counter(program_counter), .idle(idle), .error(error), .timeout(timeout), .tracepoint(tracepoint)
);

// Accumulator banks: the lower and upper halves of the accumulators.
function automatic bank_of(input [AA-1:0] address);
    bank_of = 32'(address) >= HALF;
endfunction
function automatic [BA-1:0] in_bank(input [AA-1:0] address);
    in_bank = BA'(32'(address) >= HALF ? 32'(address) - HALF : 32'(address));
endfunction

// -- weights: the array's two sets ---------------------------------------------------------------
// LoadWeights fills the array's loading set while MatMuls stream through the active one; the first
// vector of the next MatMul in program order carries the swap (`cmd_swap`) and waits until the
// weights engine is done. A LoadWeights that starts a new load (not `load_continues`) may fill the
// loading set only once the previous load's swap has reached the array, and (always) only while no
// vector in flight uses that set.
wire arr_loaded;
wire c_swap_in_flight;     // the compute engine carries a swap to the array
wire load_allowed;

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
assign        o_wr_valid = mv_wr_valid || sp_wr_valid;
assign        o_wr_accumulate = mv_wr_valid ? mv_wr_accumulate : sp_wr_accumulate;
assign        o_wr_addr = mv_wr_valid ? mv_wr_addr : sp_wr_addr;
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
wire         arr_in_start, arr_in_window;  // (the window MatMul)
wire [7:0]   arr_in_taps;
wire [V-1:0] arr_in_data;
wire [V-1:0] arr_out_data;
wire         arr_out_valid, arr_busy, arr_saturated, arr_in_ready, arr_w_ready;

tcu_systolic_array #(
    .ARRAY_SIZE(N),
    .WINDOW_MATMUL(WINDOW_MATMUL),
    .DATA_WIDTH(W),
    .BINARY_POINT(BINARY_POINT)
)
array_inst (
    .clk(clk), .rst(rst),
    .s_weights_data(arr_w_data), .s_weights_valid(arr_w_valid), .s_weights_ready(arr_w_ready),
    .s_in_data(arr_in_data), .s_in_valid(arr_in_valid), .s_in_swap(arr_in_swap), .s_in_ready(arr_in_ready),
    .s_in_start(arr_in_start), .s_in_window(arr_in_window), .s_in_taps(arr_in_taps),
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
    .ACC_ADDR_BITS(AA),
    .SIMD_RELU(SIMD_RELU)
)
simd_pipeline_inst (
    .clk(clk), .rst(rst),
    .s_cmd_valid(start_s), .s_cmd_op(cmd_operand2[3*SB +: 4]),
    .s_cmd_relu(cmd_flags[tcu_isa_pkg::SIMD_FLAG_RELU_BIT]), .s_cmd_left(cmd_operand2[2*SB +: SB]),
    .s_cmd_right(cmd_operand2[SB +: SB]), .s_cmd_dest(cmd_operand2[SB-1:0]),
    .s_cmd_read(cmd_flags[tcu_isa_pkg::SIMD_FLAG_READ_BIT]), .s_cmd_read_addr(AA'(cmd_addr1)),
    .s_cmd_write(cmd_flags[tcu_isa_pkg::SIMD_FLAG_WRITE_BIT]),
    .s_cmd_accumulate(cmd_flags[tcu_isa_pkg::SIMD_FLAG_ACCUMULATE_BIT]), .s_cmd_write_addr(AA'(cmd_addr0)),
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

tcu_move_engine #(
    .ARRAY_SIZE(N),
    .DATA_WIDTH(W),
    .LOCAL_ADDR_BITS(LA),
    .ACC_ADDR_BITS(AA)
)
move_inst (
    .clk(clk), .rst(rst),
    .s_cmd_valid(start_o), .s_cmd_ready(o_ready),
    .s_cmd_to_acc(cmd_flags != tcu_isa_pkg::DIRECTION_ACC_TO_LOCAL),
    .s_cmd_accumulate(cmd_flags == tcu_isa_pkg::DIRECTION_LOCAL_TO_ACC_ACCUMULATE),
    .s_cmd_local_addr(cmd_addr0), .s_cmd_local_step(cmd_step0), .s_cmd_acc_addr(cmd_addr1),
    .s_cmd_acc_step(cmd_step1), .s_cmd_count(cmd_count),
    .port_a_free(port_a_free),
    .m_local_a_rd(mv_a_rd), .m_local_a_wr(mv_a_wr),
    .m_local_b_rd_valid(o_rd_valid), .local_b_rd_grant(grant_o_rd),
    .m_local_b_wr_valid(o_lwr_valid), .local_b_wr_grant(grant_o_wr),
    .m_local_rd_addr(mv_local_rd_addr), .m_local_wr_addr(mv_local_wr_addr), .m_local_wr_data(mv_local_wr_data),
    .local_a_rd_data(lm_a_rdata), .local_b_rd_data(lm_b_rdata),
    .m_acc_rd_valid(mv_rd_valid), .m_acc_rd_addr(mv_rd_addr), .acc_rd_data(acc_rd_data),
    .m_acc_wr_valid(mv_wr_valid), .m_acc_wr_addr(mv_wr_addr), .m_acc_wr_data(mv_wr_data),
    .m_acc_wr_accumulate(mv_wr_accumulate),
    .downstream_busy(|(acc_busy & move_banks)),
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
wire w_issuing;
// Beats are in the weights engine's pipeline or the array's loading set is full of a load whose swap
// has not reached the array yet.
assign load_allowed = arr_w_ready && (load_continues || (!arr_loaded && !c_swap_in_flight));

tcu_weights_engine #(
    .ARRAY_SIZE(N),
    .DATA_WIDTH(W),
    .LOCAL_ADDR_BITS(LA)
)
weights_inst (
    .clk(clk), .rst(rst),
    .s_cmd_valid(start_w), .s_cmd_ready(w_free),
    .s_cmd_zeroes(cmd_flags[tcu_isa_pkg::LOADWEIGHTS_FLAG_ZEROES_BIT]),
    .s_cmd_local_top(cmd_lw_top), .s_cmd_local_step(cmd_step0), .s_cmd_count(cmd_lw_count),
    .load_allowed(load_allowed),
    .m_local_rd_valid(w_rd_valid), .m_local_rd_addr(w_rd_addr), .local_rd_grant(grant_w_rd),
    .local_rd_data(lm_b_rdata),
    .m_weights_valid(arr_w_valid), .m_weights_data(arr_w_data),
    .busy(w_busy), .issuing(w_issuing), .busy_cycles(w_busy_cycles)
);

// -- DRAM engines ------------------------------------------------------------------------------------
// Per bank a reader (DRAM -> local: the bank's read requests, responses into local memory) and a
// writer (local -> DRAM: local reads, the bank's writes), as verilog-axi's axi_dma_rd / axi_dma_wr.
wire d0r_issuing, d0w_issuing, d1r_issuing, d1w_issuing;

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
    .s_cmd_local_addr(cmd_addr0), .s_cmd_local_step(cmd_step0), .s_cmd_dram_addr(cmd_addr1),
    .s_cmd_dram_step(cmd_step1), .s_cmd_count(cmd_count),
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
    .s_cmd_local_addr(cmd_addr0), .s_cmd_local_step(cmd_step0), .s_cmd_dram_addr(cmd_addr1),
    .s_cmd_dram_step(cmd_step1), .s_cmd_count(cmd_count),
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
    .s_cmd_local_addr(cmd_addr0), .s_cmd_local_step(cmd_step0), .s_cmd_dram_addr(cmd_addr1),
    .s_cmd_dram_step(cmd_step1), .s_cmd_count(cmd_count),
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
    .s_cmd_local_addr(cmd_addr0), .s_cmd_local_step(cmd_step0), .s_cmd_dram_addr(cmd_addr1),
    .s_cmd_dram_step(cmd_step1), .s_cmd_count(cmd_count),
    .m_dram_wr_valid(m_dram1_wr_valid), .m_dram_wr_ready(m_dram1_wr_ready), .m_dram_wr_addr(m_dram1_wr_addr),
    .m_dram_wr_run(m_dram1_wr_run), .m_dram_wr_data(m_dram1_wr_data), .dram_wr_pending(dram1_wr_pending),
    .m_local_rd_valid(d1_rd_valid), .m_local_rd_addr(d1_rd_addr), .local_rd_grant(grant_d1_rd),
    .local_rd_data(lm_b_rdata),
    .busy(d1w_busy), .issuing(d1w_issuing), .busy_cycles(d1w_busy_cycles)
);

// -- compute engine: MatMul ----------------------------------------------------------------------
wire          c_issue;
wire [LA-1:0] c_local_rd_addr;

tcu_compute_engine #(
    .ARRAY_SIZE(N),
    .DATA_WIDTH(W),
    .LOCAL_ADDR_BITS(LA),
    .ACC_ADDR_BITS(AA),
    .WINDOW_MATMUL(WINDOW_MATMUL)
)
compute_inst (
    .clk(clk), .rst(rst),
    .s_cmd_valid(start_c), .s_cmd_ready(c_ready),
    .s_cmd_zeroes(cmd_flags[tcu_isa_pkg::MATMUL_FLAG_ZEROES_BIT]),
    .s_cmd_accumulate(cmd_flags[tcu_isa_pkg::MATMUL_FLAG_ACCUMULATE_BIT]), .s_cmd_swap(cmd_swap),
    .s_cmd_local_addr(cmd_addr0), .s_cmd_local_step(cmd_step0), .s_cmd_acc_addr(cmd_addr1),
    .s_cmd_acc_step(cmd_step1), .s_cmd_count(cmd_count),
    .s_cmd_window(cmd_flags[tcu_isa_pkg::MATMUL_FLAG_WINDOW_BIT]), .s_cmd_window_value(cmd_window),
    .weights_loaded(w_free),
    .m_local_rd_valid(mm_reads_a), .m_local_rd_addr(c_local_rd_addr), .local_rd_data(lm_a_rdata),
    .m_array_valid(arr_in_valid), .m_array_data(arr_in_data), .m_array_swap(arr_in_swap),
    .m_array_start(arr_in_start), .m_array_window(arr_in_window), .m_array_taps(arr_in_taps),
    .s_array_valid(arr_out_valid), .s_array_data(arr_out_data),
    .m_acc_wr_valid(mm_wr_valid), .m_acc_wr_addr(mm_wr_addr), .m_acc_wr_data(mm_wr_data),
    .m_acc_wr_accumulate(mm_wr_accumulate),
    .downstream_busy(arr_busy || |(acc_busy & compute_banks)),
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


wire d0_rd_fire = m_dram0_rd_valid && m_dram0_rd_ready, d0_wr_fire = m_dram0_wr_valid && m_dram0_wr_ready;
wire d1_rd_fire = m_dram1_rd_valid && m_dram1_rd_ready, d1_wr_fire = m_dram1_wr_valid && m_dram1_wr_ready;
assign activity = {
    s_instr_ready, s_instr_valid,                                              // instruction
    1'b1, lm_a_rd || lm_a_we,                                                  // local port A
    1'b1, lm_b_rd || lm_b_we,                                                  // local port B
    d0_rd_fire || d0_wr_fire, m_dram0_rd_valid || m_dram0_wr_valid || s_dram0_rd_valid,  // DRAM0
    d1_rd_fire || d1_wr_fire, m_dram1_rd_valid || m_dram1_wr_valid || s_dram1_rd_valid,  // DRAM1
    c_issue || o_issue || w_issuing || d0r_issuing || d0w_issuing || d1r_issuing || d1w_issuing,
    |engine_busy,                                                                   // dataflow
    1'b1, mm_wr_valid || o_wr_valid || acc_rd_valid,                           // accumulators
    arr_in_ready, arr_in_valid || arr_w_valid                                  // array
};

always @(posedge clk) begin
    if (rst) begin
        saturated <= 1'b0;
    end else begin
        saturated <= saturated | arr_saturated | (|acc_saturated) | simd_saturated;
    end
    acc_rd_bank <= bank_of(acc_rd_addr);  // which bank's data the accumulator engine reads next cycle
end

wire unused_ok = &{1'b0, arr_in_ready, bank_rd_valid, cmd_operand2};

endmodule

`resetall
