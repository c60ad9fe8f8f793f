// SPDX-License-Identifier: Apache-2.0
`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * TCU multiply-accumulate (combinational), docs/isa.md, "Numbers":
 *   m = x*y + (z << BINARY_POINT); r = (m >>> BINARY_POINT) + adj, saturated to DATA_WIDTH bits,
 *   adj = 1 iff bit BINARY_POINT-1 of m is set and (a lower bit is set or bit BINARY_POINT is set):
 *   round half to even.
 * Every number the core computes goes through this module (times, plus, the matrix step).
 */
module tcu_mac #
(
    // Bits of a scalar (two's complement)
    parameter DATA_WIDTH = 16,
    // Fractional bits of a scalar
    parameter BINARY_POINT = 8
)
(
    input  wire [DATA_WIDTH-1:0]  x,
    input  wire [DATA_WIDTH-1:0]  y,
    input  wire [DATA_WIDTH-1:0]  z,
    output wire [DATA_WIDTH-1:0]  r,
    output wire                   saturated
);

// Wide enough for x*y + (z << BINARY_POINT) without overflow.
localparam WIDE = 2*DATA_WIDTH + 2;

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

wire signed [WIDE-1:0] xw = {{(WIDE-DATA_WIDTH){x[DATA_WIDTH-1]}}, x};
wire signed [WIDE-1:0] yw = {{(WIDE-DATA_WIDTH){y[DATA_WIDTH-1]}}, y};
wire signed [WIDE-1:0] zw = {{(WIDE-DATA_WIDTH){z[DATA_WIDTH-1]}}, z};

wire signed [WIDE-1:0] m = xw * yw + (zw <<< BINARY_POINT);
wire signed [WIDE-1:0] q = m >>> BINARY_POINT;

wire half   = m[BINARY_POINT-1];
wire sticky = |m[BINARY_POINT-2:0];
wire odd    = m[BINARY_POINT];

wire signed [WIDE-1:0] rounded = q + {{(WIDE-1){1'b0}}, half & (sticky | odd)};

wire over  = rounded > MAX;
wire under = rounded < MIN;

assign r = over  ? MAX[DATA_WIDTH-1:0] :
           under ? MIN[DATA_WIDTH-1:0] :
           rounded[DATA_WIDTH-1:0];
assign saturated = over | under;

// The low product bits only feed the rounding decision above.
wire unused_ok = &{1'b0, q[WIDE-1:DATA_WIDTH]};

endmodule

`resetall
