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
 *
 * With the ReLU flag (ours, SIMD_RELU = 1) the result is max(result, 0): what the register and the
 * accumulators take.
 *
 * Registered: result and saturated are those of the last valid op, computed on its clock edge only
 * (a simulator evaluates the lane on cycles that carry an op, like the array's cells). Its register
 * write lands one edge later; a read of that register meanwhile takes the result (bypass).
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
    parameter SELECT_BITS = 1,
    // The SIMD ReLU flag (ours): 1 to have it, 0 for plain Tensil
    parameter SIMD_RELU = 0
)
(
    input  wire                   clk,
    input  wire                   rst,

    // One op (valid), its ReLU flag and its input scalar
    input  wire                   valid,
    input  wire [3:0]             op,
    input  wire                   relu,
    input  wire [SELECT_BITS-1:0] left_select,
    input  wire [SELECT_BITS-1:0] right_select,
    input  wire [SELECT_BITS-1:0] dest_select,
    input  wire [DATA_WIDTH-1:0]  in_data,

    // The last valid op's result, from the clock edge that took it
    output wire [DATA_WIDTH-1:0]  result,
    output wire                   saturated
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
    if (SIMD_RELU != 0 && SIMD_RELU != 1) begin : g_illegal_2
        $fatal(1, "tcu_simd_alu: SIMD_RELU (%0d) must be 0 or 1", SIMD_RELU);
    end
endgenerate


localparam signed [W+1:0] WMAX = (W+2)'(signed'((W+2)'(1) <<< (W-1))) - 1;
localparam signed [W+1:0] WMIN = -(W+2)'(signed'((W+2)'(1) <<< (W-1)));
localparam [W-1:0] ONE = W'(1) << BINARY_POINT;

reg [W-1:0] regs [0:REGS-1];

// The last op's register write, landing on the next edge.
reg                   wr_pending;
reg [SELECT_BITS-1:0] wr_dest;

// The last op's result: the multiplier's for a Multiply, else value_q; zero where negative with
// the ReLU flag.
reg                   mul_q;
reg                   relu_q;
reg [W-1:0]           value_q;
reg                   value_saturated_q;
wire [W-1:0]          product;
wire                  product_saturated;

wire [W-1:0]          raw = mul_q ? product : value_q;
assign result    = (SIMD_RELU != 0 && relu_q && raw[W-1]) ? '0 : raw;
assign saturated = mul_q ? product_saturated : value_saturated_q;

function automatic [W-1:0] pick(input [SELECT_BITS-1:0] sel, input [W-1:0] in_value);
    if (sel == 0 || REGISTERS == 0) begin
        pick = in_value;
    end else if (wr_pending && sel == wr_dest) begin
        pick = result;
    end else begin
        pick = regs[32'(sel) - 1];
    end
endfunction

wire [W-1:0] left  = pick(left_select, in_data);
wire [W-1:0] right = pick(right_select, in_data);

tcu_mac #(
    .DATA_WIDTH(W),
    .BINARY_POINT(BINARY_POINT),
    .REGISTERED(1)
)
multiply_inst (
    .clk(clk),
    .en(valid && op == tcu_isa_pkg::SIMD_OP_MULTIPLY),
    .x(left),
    .y(right),
    .z({W{1'b0}}),
    .r(product),
    .saturated(product_saturated)
);

// {saturated, value} of every op but Multiply.
function automatic [W:0] compute(input [3:0] op_code, input [W-1:0] l, input [W-1:0] r, input [W-1:0] in_value);
    logic signed [W+1:0] l_w, r_w, one_w, wide;
    logic                l_true, r_true, greater, equal;
    l_w = {{2{l[W-1]}}, l};
    r_w = {{2{r[W-1]}}, r};
    one_w = {2'b00, ONE};
    l_true = |l;
    r_true = |r;
    greater = $signed(l) > $signed(r);
    equal = l == r;
    case (op_code)
        tcu_isa_pkg::SIMD_OP_NOOP:               wide = {{2{in_value[W-1]}}, in_value};
        tcu_isa_pkg::SIMD_OP_ZERO:               wide = '0;
        tcu_isa_pkg::SIMD_OP_MOVE:               wide = l_w;
        tcu_isa_pkg::SIMD_OP_NOT:                wide = l_true ? '0 : one_w;
        tcu_isa_pkg::SIMD_OP_AND:                wide = (l_true && r_true) ? one_w : '0;
        tcu_isa_pkg::SIMD_OP_OR:                 wide = (l_true || r_true) ? one_w : '0;
        tcu_isa_pkg::SIMD_OP_INCREMENT:          wide = l_w + one_w;
        tcu_isa_pkg::SIMD_OP_DECREMENT:          wide = l_w - one_w;
        tcu_isa_pkg::SIMD_OP_ADD:                wide = l_w + r_w;
        tcu_isa_pkg::SIMD_OP_SUBTRACT:           wide = l_w - r_w;
        tcu_isa_pkg::SIMD_OP_ABS:                wide = l[W-1] ? -l_w : l_w;
        tcu_isa_pkg::SIMD_OP_GREATER_THAN:       wide = greater ? one_w : '0;
        tcu_isa_pkg::SIMD_OP_GREATER_THAN_EQUAL: wide = (greater || equal) ? one_w : '0;
        tcu_isa_pkg::SIMD_OP_MIN:                wide = greater ? r_w : l_w;
        tcu_isa_pkg::SIMD_OP_MAX:                wide = greater ? l_w : r_w;
        default:                                 wide = l_w;  // Multiply: not used
    endcase
    if (wide > WMAX) begin
        compute = {1'b1, WMAX[W-1:0]};
    end else if (wide < WMIN) begin
        compute = {1'b1, WMIN[W-1:0]};
    end else begin
        compute = {1'b0, wide[W-1:0]};
    end
endfunction

integer k;
always @(posedge clk) begin
    if (valid) begin
        mul_q <= op == tcu_isa_pkg::SIMD_OP_MULTIPLY;
        relu_q <= SIMD_RELU != 0 && relu;
        {value_saturated_q, value_q} <= compute(op, left, right, in_data);
        wr_dest <= dest_select;
    end
    if (rst) begin
        for (k = 0; k < REGS; k = k + 1) begin
            regs[k] <= '0;
        end
        wr_pending <= 1'b0;
        mul_q <= 1'b0;
        relu_q <= 1'b0;
    end else begin
        if (wr_pending) begin
            regs[32'(wr_dest) - 1] <= result;
        end
        wr_pending <= valid && REGISTERS > 0 && dest_select != 0 && op != tcu_isa_pkg::SIMD_OP_NOOP;
    end
end

endmodule

`resetall
