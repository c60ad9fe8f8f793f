// SPDX-License-Identifier: Apache-2.0
`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * Weights engine: runs LoadWeights, one instruction at a time, beside the MatMuls.
 *
 * Reads the instruction's vectors from local memory from the highest address down (through the
 * core's arbiter: a request is held until granted, the data is on local_rd_data the next cycle) and
 * shifts each into the array's loading weight set two cycles after its read was granted, the same
 * delay as a MatMul vector from its read to the array. With `zeroes` nothing is read and zero
 * vectors are shifted in. The first vector waits for `load_allowed` (the core's rule for when the
 * array's other weight set may be filled).
 */
module tcu_weights_engine #
(
    // Scalars per vector
    parameter ARRAY_SIZE = 8,
    // Bits of a scalar
    parameter DATA_WIDTH = 16,
    // Address bits of local memory
    parameter LOCAL_ADDR_BITS = 13
)
(
    input  wire                              clk,
    input  wire                              rst,

    // Instruction: `count` vectors from local_top down by local_step, or zero vectors
    input  wire                              s_cmd_valid,
    output wire                              s_cmd_ready,
    input  wire                              s_cmd_zeroes,
    input  wire [31:0]                       s_cmd_local_top,
    input  wire [31:0]                       s_cmd_local_step,
    input  wire [31:0]                       s_cmd_count,

    // Whether the array's loading set may be written now
    input  wire                              load_allowed,

    // Local memory, through the arbiter
    output wire                              m_local_rd_valid,
    output wire [LOCAL_ADDR_BITS-1:0]        m_local_rd_addr,
    input  wire                              local_rd_grant,
    input  wire [ARRAY_SIZE*DATA_WIDTH-1:0]  local_rd_data,

    // Weight rows into the array
    output reg                               m_weights_valid,
    output reg  [ARRAY_SIZE*DATA_WIDTH-1:0]  m_weights_data,

    // Status: an instruction in flight, a vector issued this cycle, cycles of the instruction so far
    output wire                              busy,
    output wire                              issuing,
    output reg  [31:0]                       busy_cycles
);

localparam V = ARRAY_SIZE * DATA_WIDTH;
localparam CB = 32;

localparam [1:0] S_IDLE = 2'd0, S_ISSUE = 2'd1, S_DRAIN = 2'd2;
reg [1:0]    state;
reg          zeroes;
reg [CB-1:0] addr, step, count, issued;
reg          rd1_valid, rd1_zero;   // a beat's data is on local_rd_data (or is zero)

// Once the load has begun the loading set is its own (the array's answer can only turn true).
wire vectors_left = state == S_ISSUE && issued < count && (issued != 0 || load_allowed);
assign m_local_rd_valid = vectors_left && !zeroes;
assign m_local_rd_addr  = LOCAL_ADDR_BITS'(addr);
wire issue_now = vectors_left && (zeroes || local_rd_grant);

assign s_cmd_ready = state == S_IDLE && !rst;
assign busy = state != S_IDLE;
assign issuing = issue_now;

always @(posedge clk) begin
    m_weights_valid <= 1'b0;
    if (rst) begin
        state <= S_IDLE;
        rd1_valid <= 1'b0;
        busy_cycles <= '0;
    end else begin
        if (s_cmd_valid && s_cmd_ready) begin
            state <= S_ISSUE;
            zeroes <= s_cmd_zeroes;
            addr <= s_cmd_local_top;
            step <= s_cmd_local_step;
            count <= s_cmd_count;
            issued <= '0;
            busy_cycles <= '0;
        end else if (state != S_IDLE) begin
            busy_cycles <= busy_cycles + 1;
        end
        if (issue_now) begin
            issued <= issued + 1;
            addr <= addr - step;
        end
        if (state == S_ISSUE && issued == count) state <= S_DRAIN;
        if (state == S_DRAIN && !rd1_valid) state <= S_IDLE;  // the last beat lands this cycle

        rd1_valid <= issue_now;
        rd1_zero <= zeroes;
        if (rd1_valid) begin
            m_weights_valid <= 1'b1;
            m_weights_data <= rd1_zero ? {V{1'b0}} : local_rd_data;
        end
    end
end

endmodule

`resetall
