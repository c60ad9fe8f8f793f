// SPDX-License-Identifier: Apache-2.0
`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * Compute engine: runs MatMul, one vector per cycle.
 *
 * Reads the instruction's vectors from local memory through port A (the data is on local_rd_data
 * the next cycle) and hands each to the array the cycle after (zero vectors with `zeroes`). The
 * accumulator address and accumulate flag of every vector issued wait in a FIFO until the array's
 * output for that vector appears, which is then written to the accumulators: the array keeps order,
 * so nothing else pairs them. The next MatMul may start in the cycle the current one issues its
 * last vector (s_cmd_ready), so vectors of consecutive MatMuls issue back to back: both stream
 * through the array in order, each with its own addresses.
 *
 * A MatMul that swaps the array's weight sets (`s_cmd_swap`: a LoadWeights came since the previous
 * MatMul) holds its first vector until the weights engine has landed that load (`weights_loaded`);
 * the first vector then carries the swap into the array.
 */
module tcu_compute_engine #
(
    // Scalars per vector
    parameter ARRAY_SIZE = 8,
    // Bits of a scalar
    parameter DATA_WIDTH = 16,
    // Address bits of local memory
    parameter LOCAL_ADDR_BITS = 13,
    // Address bits of the accumulators
    parameter ACC_ADDR_BITS = 11
)
(
    input  wire                              clk,
    input  wire                              rst,

    // Instruction: `count` vectors from local_addr (by local_step) into acc_addr (by acc_step)
    input  wire                              s_cmd_valid,
    output wire                              s_cmd_ready,
    input  wire                              s_cmd_zeroes,
    input  wire                              s_cmd_accumulate,
    input  wire                              s_cmd_swap,
    input  wire [31:0]                       s_cmd_local_addr,
    input  wire [31:0]                       s_cmd_local_step,
    input  wire [31:0]                       s_cmd_acc_addr,
    input  wire [31:0]                       s_cmd_acc_step,
    input  wire [31:0]                       s_cmd_count,

    // The weights engine has no load in flight (a swapping MatMul's first vector waits for it)
    input  wire                              weights_loaded,

    // Local memory port A reads (always granted; data the next cycle)
    output wire                              m_local_rd_valid,
    output wire [LOCAL_ADDR_BITS-1:0]        m_local_rd_addr,
    input  wire [ARRAY_SIZE*DATA_WIDTH-1:0]  local_rd_data,

    // Vectors into the array (the first of a swapping MatMul carries the swap)
    output reg                               m_array_valid,
    output reg  [ARRAY_SIZE*DATA_WIDTH-1:0]  m_array_data,
    output reg                               m_array_swap,

    // The array's results, in the order the vectors went in
    input  wire                              s_array_valid,
    input  wire [ARRAY_SIZE*DATA_WIDTH-1:0]  s_array_data,

    // Accumulator writes
    output reg                               m_acc_wr_valid,
    output reg  [ACC_ADDR_BITS-1:0]          m_acc_wr_addr,
    output reg  [ARRAY_SIZE*DATA_WIDTH-1:0]  m_acc_wr_data,
    output reg                               m_acc_wr_accumulate,

    // The array or the accumulators still work on vectors this engine sent
    input  wire                              downstream_busy,

    // Status: an instruction in flight; a vector issued this cycle; a swap on its way to the array;
    // everything issued has landed; cycles of the instruction so far
    output wire                              busy,
    output wire                              issuing,
    output wire                              swap_in_flight,
    output wire                              quiet,
    output reg  [31:0]                       busy_cycles
);

localparam V = ARRAY_SIZE * DATA_WIDTH;
localparam CB = 32;
localparam AA = ACC_ADDR_BITS;
// Vectors in flight between issue and result: the read, the array's stages and its registers.
localparam FIFO_BITS = $clog2(ARRAY_SIZE + 4);

localparam [1:0] S_IDLE = 2'd0, S_ISSUE = 2'd1, S_DRAIN = 2'd2;
reg [1:0]    state;
reg          zeroes, accumulate, swap;
reg [CB-1:0] local_addr, local_step, acc_addr, acc_step, count, issued;
reg          rd1_valid, rd1_zero, rd1_swap;   // a vector's data is on local_rd_data (or is zero)
reg [AA:0]   fifo [0:(1 << FIFO_BITS)-1];     // {accumulate, accumulator address} per vector in flight
reg [FIFO_BITS:0] wr_ptr, rd_ptr;

wire swap_wait = swap && !weights_loaded;   // only the first vector of a swapping MatMul has `swap`
wire issue_now = state == S_ISSUE && issued < count && !swap_wait;
wire last_now = issue_now && issued + 1 == count;
wire start = s_cmd_valid && s_cmd_ready;

assign s_cmd_ready = !rst && (state == S_IDLE || issued == count || last_now);
assign m_local_rd_valid = issue_now && !zeroes;
assign m_local_rd_addr = LOCAL_ADDR_BITS'(local_addr);
assign busy = state != S_IDLE;
assign issuing = issue_now;
assign swap_in_flight = rd1_swap || m_array_swap;
assign quiet = wr_ptr == rd_ptr && !rd1_valid && !m_array_valid && !m_acc_wr_valid && !downstream_busy;

always @(posedge clk) begin
    m_array_valid <= 1'b0;
    m_array_swap <= 1'b0;
    m_acc_wr_valid <= 1'b0;
    if (rst) begin
        state <= S_IDLE;
        swap <= 1'b0;
        rd1_valid <= 1'b0;
        rd1_swap <= 1'b0;
        wr_ptr <= '0;
        rd_ptr <= '0;
        busy_cycles <= '0;
    end else begin
        if (issue_now) begin
            issued <= issued + 1;
            local_addr <= local_addr + local_step;
            acc_addr <= acc_addr + acc_step;
            swap <= 1'b0;
            fifo[wr_ptr[FIFO_BITS-1:0]] <= {accumulate, AA'(acc_addr)};
            wr_ptr <= wr_ptr + 1;
        end
        // A new instruction (possibly in the cycle its predecessor issues its last vector) takes over.
        if (start) begin
            state <= S_ISSUE;
            zeroes <= s_cmd_zeroes;
            accumulate <= s_cmd_accumulate;
            swap <= s_cmd_swap;
            local_addr <= s_cmd_local_addr;
            local_step <= s_cmd_local_step;
            acc_addr <= s_cmd_acc_addr;
            acc_step <= s_cmd_acc_step;
            count <= s_cmd_count;
            issued <= '0;
            busy_cycles <= '0;
        end else begin
            if (state != S_IDLE) busy_cycles <= busy_cycles + 1;
            if (state == S_ISSUE && issued == count) state <= S_DRAIN;
            if (state == S_DRAIN && quiet) state <= S_IDLE;
        end

        // Local data -> array -> accumulators
        rd1_valid <= issue_now;
        rd1_zero <= zeroes;
        rd1_swap <= issue_now && swap;
        if (rd1_valid) begin
            m_array_valid <= 1'b1;
            m_array_swap <= rd1_swap;
            m_array_data <= rd1_zero ? {V{1'b0}} : local_rd_data;
        end
        if (s_array_valid) begin
            m_acc_wr_valid <= 1'b1;
            m_acc_wr_addr <= fifo[rd_ptr[FIFO_BITS-1:0]][AA-1:0];
            m_acc_wr_data <= s_array_data;
            m_acc_wr_accumulate <= fifo[rd_ptr[FIFO_BITS-1:0]][AA];
            rd_ptr <= rd_ptr + 1;
        end
    end
end

endmodule

`resetall
