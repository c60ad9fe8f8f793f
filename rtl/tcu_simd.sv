// SPDX-License-Identifier: Apache-2.0
`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * The SIMD unit: ARRAY_SIZE lanes of tcu_simd_alu sharing one sub-instruction.
 * One vector per cycle: m_out_* is the registered result of the s_in_* beat (latency 1).
 */
module tcu_simd #
(
    // Lanes: the array size N
    parameter ARRAY_SIZE = 8,
    // Bits of a scalar
    parameter DATA_WIDTH = 16,
    // Fractional bits of a scalar
    parameter BINARY_POINT = 8,
    // Registers per lane (0..16)
    parameter REGISTERS = 1,
    // Bits of a source/destination select: ceil(log2(REGISTERS + 1)), at least 1
    parameter SELECT_BITS = 1,
    // The SIMD ReLU flag (ours): 1 to have it, 0 for plain Tensil
    parameter SIMD_RELU = 0
)
(
    input  wire                              clk,
    input  wire                              rst,

    // One sub-instruction and its input vector (zeros when the instruction does not read)
    input  wire                              s_in_valid,
    input  wire [3:0]                        s_in_op,
    input  wire                              s_in_relu,
    input  wire [SELECT_BITS-1:0]            s_in_left,
    input  wire [SELECT_BITS-1:0]            s_in_right,
    input  wire [SELECT_BITS-1:0]            s_in_dest,
    input  wire [ARRAY_SIZE*DATA_WIDTH-1:0]  s_in_data,

    // The output vector, one cycle later
    output reg                               m_out_valid,
    output wire [ARRAY_SIZE*DATA_WIDTH-1:0]  m_out_data,
    output wire                              m_out_saturated
);

localparam N = ARRAY_SIZE;
localparam W = DATA_WIDTH;

wire [N*W-1:0] result;
wire [N-1:0]   saturated;

genvar i;
generate
    for (i = 0; i < N; i = i + 1) begin : lane
        tcu_simd_alu #(
            .DATA_WIDTH(W),
            .BINARY_POINT(BINARY_POINT),
            .REGISTERS(REGISTERS),
            .SELECT_BITS(SELECT_BITS),
            .SIMD_RELU(SIMD_RELU)
        )
        alu_inst (
            .clk(clk),
            .rst(rst),
            .valid(s_in_valid),
            .op(s_in_op),
            .relu(s_in_relu),
            .left_select(s_in_left),
            .right_select(s_in_right),
            .dest_select(s_in_dest),
            .in_data(s_in_data[i*W +: W]),
            .result(result[i*W +: W]),
            .saturated(saturated[i])
        );
    end
endgenerate

// The lanes register their results; valid follows one cycle behind.
always @(posedge clk) begin
    if (rst) begin
        m_out_valid <= 1'b0;
    end else begin
        m_out_valid <= s_in_valid;
    end
end

assign m_out_data = result;
assign m_out_saturated = m_out_valid && (|saturated);

endmodule

`resetall
