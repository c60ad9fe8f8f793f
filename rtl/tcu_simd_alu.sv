// SPDX-License-Identifier: Apache-2.0
`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * One SIMD lane: the 16 ops of docs/isa.md on fixed-point scalars, with REGISTERS registers.
 *
 * Sources: 0 = the input, k = register k. Destination: 0 = output only, k = output and
 * register k (NoOp outputs the input and writes no register). Comparisons and logical ops give
 * 1.0 or 0; Add/Subtract/Increment/Decrement/Abs saturate; Multiply rounds as times().
 * Combinational result; registers update on the clock edge when valid.
 */
module tcu_simd_alu
#
(
    // Bits of a scalar
    parameter DATA_WIDTH = 16,
    // Fractional bits of a scalar
    parameter BINARY_POINT = 8,
    // Registers in the lane (0..16)
    parameter REGISTERS = 1,
    // Bits of a source/destination select: ceil(log2(REGISTERS + 1)), at least 1
    parameter SELECT_BITS = 1
)
(
    input  wire                   clk,
    input  wire                   rst,

    input  wire                   valid,
    input  wire [3:0]             op,
    input  wire [SELECT_BITS-1:0] left_select,
    input  wire [SELECT_BITS-1:0] right_select,
    input  wire [SELECT_BITS-1:0] dest_select,
    input  wire [DATA_WIDTH-1:0]  in_data,

    output reg  [DATA_WIDTH-1:0]  result,
    output reg                    saturated
);

localparam W = DATA_WIDTH;
localparam REGS = REGISTERS > 0 ? REGISTERS : 1;

// Illegal configurations stop elaboration.
generate
    if (REGISTERS < 0 || REGISTERS > 16) begin : g_illegal_0
        $fatal(1, "tcu_simd_alu: REGISTERS (%0d) must be 0..16", REGISTERS);
    end
    if ((1 << SELECT_BITS) < REGISTERS + 1) begin : g_illegal_1
        $fatal(1, "tcu_simd_alu: SELECT_BITS too small for REGISTERS");
    end
endgenerate


localparam signed [W+1:0] WMAX = (W+2)'(signed'((W+2)'(1) <<< (W-1))) - 1;
localparam signed [W+1:0] WMIN = -(W+2)'(signed'((W+2)'(1) <<< (W-1)));
localparam [W-1:0] ONE = W'(1) << BINARY_POINT;

reg [W-1:0] regs [0:REGS-1];

function automatic [W-1:0] pick(input [SELECT_BITS-1:0] sel, input [W-1:0] in_value);
    if (sel == 0 || REGISTERS == 0) begin
        pick = in_value;
    end else begin
        pick = regs[32'(sel) - 1];
    end
endfunction

wire [W-1:0] left  = pick(left_select, in_data);
wire [W-1:0] right = pick(right_select, in_data);

wire signed [W+1:0] left_w  = {{2{left[W-1]}}, left};
wire signed [W+1:0] right_w = {{2{right[W-1]}}, right};
wire signed [W+1:0] one_w   = {2'b00, ONE};

// Wide results, saturated below.
reg signed [W+1:0] wide;
wire [W-1:0] product;
wire product_saturated;

tcu_mac #(
    .DATA_WIDTH(W),
    .BINARY_POINT(BINARY_POINT)
)
multiply_inst (
    .clk(clk),
    .en(1'b0),
    .x(left),
    .y(right),
    .z({W{1'b0}}),
    .r(product),
    .saturated(product_saturated)
);

wire left_true  = |left;
wire right_true = |right;
wire greater    = $signed(left) > $signed(right);
wire equal      = left == right;

always @* begin
    wide = {{2{in_data[W-1]}}, in_data};
    case (op)
        tcu_isa_pkg::SIMD_OP_NOOP:               wide = {{2{in_data[W-1]}}, in_data};
        tcu_isa_pkg::SIMD_OP_ZERO:               wide = '0;
        tcu_isa_pkg::SIMD_OP_MOVE:               wide = left_w;
        tcu_isa_pkg::SIMD_OP_NOT:                wide = left_true ? '0 : one_w;
        tcu_isa_pkg::SIMD_OP_AND:                wide = (left_true && right_true) ? one_w : '0;
        tcu_isa_pkg::SIMD_OP_OR:                 wide = (left_true || right_true) ? one_w : '0;
        tcu_isa_pkg::SIMD_OP_INCREMENT:          wide = left_w + one_w;
        tcu_isa_pkg::SIMD_OP_DECREMENT:          wide = left_w - one_w;
        tcu_isa_pkg::SIMD_OP_ADD:                wide = left_w + right_w;
        tcu_isa_pkg::SIMD_OP_SUBTRACT:           wide = left_w - right_w;
        tcu_isa_pkg::SIMD_OP_MULTIPLY:           wide = {{2{product[W-1]}}, product};
        tcu_isa_pkg::SIMD_OP_ABS:                wide = left[W-1] ? -left_w : left_w;
        tcu_isa_pkg::SIMD_OP_GREATER_THAN:       wide = greater ? one_w : '0;
        tcu_isa_pkg::SIMD_OP_GREATER_THAN_EQUAL: wide = (greater || equal) ? one_w : '0;
        tcu_isa_pkg::SIMD_OP_MIN:                wide = greater ? right_w : left_w;
        tcu_isa_pkg::SIMD_OP_MAX:                wide = greater ? left_w : right_w;
        default:                                 wide = left_w;
    endcase
    if (wide > WMAX) begin
        result = WMAX[W-1:0];
        saturated = 1'b1;
    end else if (wide < WMIN) begin
        result = WMIN[W-1:0];
        saturated = 1'b1;
    end else begin
        result = wide[W-1:0];
        saturated = (op == tcu_isa_pkg::SIMD_OP_MULTIPLY) && product_saturated;
    end
end

integer k;
always @(posedge clk) begin
    if (rst) begin
        for (k = 0; k < REGS; k = k + 1) begin
            regs[k] <= '0;
        end
    end else if (valid && REGISTERS > 0 && dest_select != 0 && op != tcu_isa_pkg::SIMD_OP_NOOP) begin
        regs[32'(dest_select) - 1] <= result;
    end
end

endmodule

`resetall
