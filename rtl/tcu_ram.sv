// SPDX-License-Identifier: Apache-2.0
`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * True dual-port RAM, one read latency cycle per port (infers block RAM on FPGAs).
 * Local memory and the accumulators' storage are instances of this module.
 * A port that reads and writes the same address in one cycle returns the old data.
 */
module tcu_ram #
(
    // Words in the RAM
    parameter DEPTH = 1024,
    // Bits per word
    parameter WIDTH = 128,
    // Address bits: ceil(log2(DEPTH)), at least 1
    parameter ADDR_WIDTH = 10
)
(
    input  wire                  clk,

    input  wire                  a_en,
    input  wire                  a_we,
    input  wire [ADDR_WIDTH-1:0] a_addr,
    input  wire [WIDTH-1:0]      a_wdata,
    output reg  [WIDTH-1:0]      a_rdata,

    input  wire                  b_en,
    input  wire                  b_we,
    input  wire [ADDR_WIDTH-1:0] b_addr,
    input  wire [WIDTH-1:0]      b_wdata,
    output reg  [WIDTH-1:0]      b_rdata
);

// Illegal configurations stop elaboration.
generate
    if ((1 << ADDR_WIDTH) < DEPTH) begin : g_illegal_0
        $fatal(1, "tcu_ram: ADDR_WIDTH (%0d) too small for DEPTH (%0d)", ADDR_WIDTH, DEPTH);
    end
endgenerate

(* ram_style = "block" *)
reg [WIDTH-1:0] mem [0:DEPTH-1];

always @(posedge clk) begin
    if (a_en) begin
        a_rdata <= mem[a_addr];
        if (a_we) mem[a_addr] <= a_wdata;
    end
end

always @(posedge clk) begin
    if (b_en) begin
        b_rdata <= mem[b_addr];
        if (b_we) mem[b_addr] <= b_wdata;
    end
end

endmodule

`resetall
