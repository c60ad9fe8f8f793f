// SPDX-License-Identifier: Apache-2.0
`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * SIMD pipeline: runs SIMD instructions on the accumulators, one per cycle.
 *
 * Stage 1 reads the accumulator vector (the read is issued with the instruction; the data arrives the
 * next cycle), stage 2 is the lanes (tcu_simd), whose output becomes the accumulator write (plain or
 * accumulating). The accumulators forward only writes they have accepted, so an instruction that
 * reads a vector an earlier one in the pipeline will write, or is writing this cycle, must wait:
 * `read_hazard` says so for the instruction offered now.
 */
module tcu_simd_pipeline #
(
    // Lanes
    parameter ARRAY_SIZE = 8,
    // Bits of a scalar
    parameter DATA_WIDTH = 16,
    // Fractional bits of a scalar
    parameter BINARY_POINT = 8,
    // Registers per lane
    parameter REGISTERS = 1,
    // Bits of a register selector (0 = the input or output, k = register k)
    parameter SELECT_BITS = 1,
    // Address bits of the accumulators
    parameter ACC_ADDR_BITS = 11,
    // The SIMD ReLU flag (ours): 1 to have it, 0 for plain Tensil
    parameter SIMD_RELU = 0
)
(
    input  wire                              clk,
    input  wire                              rst,

    // Instruction: the operation and its selectors; read the vector at read_addr (else zeros);
    // write (or accumulate) the result at write_addr
    input  wire                              s_cmd_valid,
    input  wire [3:0]                        s_cmd_op,
    input  wire                              s_cmd_relu,
    input  wire [SELECT_BITS-1:0]            s_cmd_left,
    input  wire [SELECT_BITS-1:0]            s_cmd_right,
    input  wire [SELECT_BITS-1:0]            s_cmd_dest,
    input  wire                              s_cmd_read,
    input  wire [ACC_ADDR_BITS-1:0]          s_cmd_read_addr,
    input  wire                              s_cmd_write,
    input  wire                              s_cmd_accumulate,
    input  wire [ACC_ADDR_BITS-1:0]          s_cmd_write_addr,

    // The instruction offered now reads a vector the pipeline has yet to hand to the accumulators
    output wire                              read_hazard,

    // Accumulator reads (data the next cycle) and writes
    output wire                              m_acc_rd_valid,
    output wire [ACC_ADDR_BITS-1:0]          m_acc_rd_addr,
    input  wire [ARRAY_SIZE*DATA_WIDTH-1:0]  acc_rd_data,
    output reg                               m_acc_wr_valid,
    output reg  [ACC_ADDR_BITS-1:0]          m_acc_wr_addr,
    output reg  [ARRAY_SIZE*DATA_WIDTH-1:0]  m_acc_wr_data,
    output reg                               m_acc_wr_accumulate,

    // Status: nothing in the pipeline; a lane saturated this cycle
    output wire                              empty,
    output wire                              saturated
);

localparam V = ARRAY_SIZE * DATA_WIDTH;
localparam AA = ACC_ADDR_BITS;
localparam SB = SELECT_BITS;

reg          p1_valid, p1_read, p1_write, p1_acc;
reg [AA-1:0] p1_waddr;
reg [3:0]    p1_op;
reg          p1_relu, p2_relu;
reg [SB-1:0] p1_left, p1_right, p1_dest;
reg          p2_write, p2_acc;
reg [AA-1:0] p2_waddr;
reg [3:0]    p2_op;
reg [SB-1:0] p2_left, p2_right, p2_dest;
reg          p3_write, p3_acc;
reg [AA-1:0] p3_waddr;
reg          lanes_valid;
reg [V-1:0]  lanes_data;
wire [V-1:0] lanes_out;
wire         lanes_out_valid;

tcu_simd #(
    .ARRAY_SIZE(ARRAY_SIZE),
    .DATA_WIDTH(DATA_WIDTH),
    .BINARY_POINT(BINARY_POINT),
    .REGISTERS(REGISTERS),
    .SELECT_BITS(SB),
    .SIMD_RELU(SIMD_RELU)
)
simd_inst (
    .clk(clk), .rst(rst),
    .s_in_valid(lanes_valid), .s_in_op(p2_op), .s_in_relu(p2_relu), .s_in_left(p2_left), .s_in_right(p2_right),
    .s_in_dest(p2_dest), .s_in_data(lanes_data),
    .m_out_valid(lanes_out_valid), .m_out_data(lanes_out), .m_out_saturated(saturated)
);

function automatic pending_write(input valid, input write, input [AA-1:0] waddr);
    pending_write = valid && write && waddr == s_cmd_read_addr;
endfunction
assign read_hazard = s_cmd_read && (
    pending_write(p1_valid, p1_write, p1_waddr) ||
    pending_write(lanes_valid, p2_write, p2_waddr) ||
    pending_write(lanes_out_valid, p3_write, p3_waddr) ||
    pending_write(m_acc_wr_valid, 1'b1, m_acc_wr_addr));
assign empty = !p1_valid && !lanes_valid && !lanes_out_valid && !m_acc_wr_valid;
assign m_acc_rd_valid = s_cmd_valid && s_cmd_read;
assign m_acc_rd_addr = s_cmd_read_addr;

always @(posedge clk) begin
    lanes_valid <= 1'b0;
    m_acc_wr_valid <= 1'b0;
    if (rst) begin
        p1_valid <= 1'b0;
    end else begin
        p1_valid <= s_cmd_valid;
        p1_read <= s_cmd_read;
        p1_write <= s_cmd_write;
        p1_acc <= s_cmd_accumulate;
        p1_waddr <= s_cmd_write_addr;
        p1_op <= s_cmd_op;
        p1_relu <= s_cmd_relu;
        p1_left <= s_cmd_left;
        p1_right <= s_cmd_right;
        p1_dest <= s_cmd_dest;
        if (p1_valid) begin
            lanes_valid <= 1'b1;
            lanes_data <= p1_read ? acc_rd_data : {V{1'b0}};
        end
        p2_write <= p1_write;
        p2_acc <= p1_acc;
        p2_waddr <= p1_waddr;
        p2_op <= p1_op;
        p2_relu <= p1_relu;
        p2_left <= p1_left;
        p2_right <= p1_right;
        p2_dest <= p1_dest;
        p3_write <= p2_write;
        p3_acc <= p2_acc;
        p3_waddr <= p2_waddr;
        if (lanes_out_valid && p3_write) begin
            m_acc_wr_valid <= 1'b1;
            m_acc_wr_addr <= p3_waddr;
            m_acc_wr_data <= lanes_out;
            m_acc_wr_accumulate <= p3_acc;
        end
    end
end

endmodule

`resetall
