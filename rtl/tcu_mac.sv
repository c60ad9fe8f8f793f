// SPDX-License-Identifier: Apache-2.0
`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * TCU multiply-accumulate, docs/isa.md, "Numbers":
 *   m = x*y + (z << BINARY_POINT); r = (m >>> BINARY_POINT) + adj, saturated to DATA_WIDTH bits,
 *   adj = 1 iff bit BINARY_POINT-1 of m is set and (a lower bit is set or bit BINARY_POINT is set):
 *   round half to even.
 * Every number the core computes goes through this module (times, plus, the matrix step).
 *
 * Combinational (REGISTERED = 0: clk and en unused), or registered: r and saturated load on the
 * clock edge when en is high, and hold otherwise. The registered form computes inside the clocked
 * block, so a simulator evaluates the product only for cycles that carry data (the array's cells).
 */
module tcu_mac #
(
    // Bits of a scalar (two's complement)
    parameter DATA_WIDTH = 16,
    // Fractional bits of a scalar
    parameter BINARY_POINT = 8,
    // 1: the result is registered, loaded when en is high
    parameter REGISTERED = 0
)
(
    input  wire                   clk,
    input  wire                   en,

    input  wire [DATA_WIDTH-1:0]  x,
    input  wire [DATA_WIDTH-1:0]  y,
    input  wire [DATA_WIDTH-1:0]  z,
    output logic [DATA_WIDTH-1:0] r,
    output logic                  saturated
);

// Wide enough for x*y + (z << BINARY_POINT) without overflow: |x*y| <= 2^(2*DATA_WIDTH-2) and
// |z << BINARY_POINT| < 2^(2*DATA_WIDTH-2) since BINARY_POINT < DATA_WIDTH. Twice the data width is
// also a native word for a simulator (32 or 64 bits), which keeps the array's cells cheap to evaluate.
localparam WIDE = 2*DATA_WIDTH;

// Illegal configurations stop elaboration.
generate
    if (BINARY_POINT < 2 || BINARY_POINT >= DATA_WIDTH) begin : g_illegal_0
        $fatal(1, "tcu_mac: BINARY_POINT (%0d) must be in 2..DATA_WIDTH-1", BINARY_POINT);
    end
endgenerate

// The saturation bounds, computed in WIDE bits (1 << 31 would overflow a 32-bit integer).
localparam signed [WIDE-1:0] ONE = 1;
localparam signed [WIDE-1:0] MAX = (ONE <<< (DATA_WIDTH-1)) - ONE;
localparam signed [WIDE-1:0] MIN = -(ONE <<< (DATA_WIDTH-1));

// {saturated, r} of x*y + z.
function automatic [DATA_WIDTH:0] mac(input [DATA_WIDTH-1:0] xa, input [DATA_WIDTH-1:0] ya,
                                      input [DATA_WIDTH-1:0] za);
    logic signed [WIDE-1:0] xw, yw, zw, m, q, rounded;
    logic                   round_up;
    xw = {{(WIDE-DATA_WIDTH){xa[DATA_WIDTH-1]}}, xa};
    yw = {{(WIDE-DATA_WIDTH){ya[DATA_WIDTH-1]}}, ya};
    zw = {{(WIDE-DATA_WIDTH){za[DATA_WIDTH-1]}}, za};
    m = xw * yw + (zw <<< BINARY_POINT);
    // Round half to even: add 1 when the dropped bits are over a half, or exactly a half on an odd result.
    round_up = m[BINARY_POINT-1] & ((|m[BINARY_POINT-2:0]) | m[BINARY_POINT]);
    q = m >>> BINARY_POINT;
    rounded = q + signed'(WIDE'(round_up));
    if (rounded > MAX) begin
        mac = {1'b1, MAX[DATA_WIDTH-1:0]};
    end else if (rounded < MIN) begin
        mac = {1'b1, MIN[DATA_WIDTH-1:0]};
    end else begin
        mac = {1'b0, rounded[DATA_WIDTH-1:0]};
    end
endfunction

generate
    if (REGISTERED) begin : g_registered
        always @(posedge clk) begin
            if (en) begin
                {saturated, r} <= mac(x, y, z);
            end
        end
    end else begin : g_combinational
        assign {saturated, r} = mac(x, y, z);
        wire unused_ok = &{1'b0, clk, en};
    end
endgenerate

endmodule

`resetall
