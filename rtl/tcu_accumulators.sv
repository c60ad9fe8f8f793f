// SPDX-License-Identifier: Apache-2.0
`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * Accumulator memory: vectors that can be written or saturating-added (spec: plus).
 *
 * Write path: a beat (addr, data, accumulate) is accepted every cycle. A plain write lands one
 * cycle later; an accumulate reads the old vector (port A), adds lane by lane with saturation,
 * and writes (port B) two cycles after acceptance. Writes keep their order. A read of an address
 * written by a beat still in the pipeline sees the new value (forwarded), so back-to-back
 * instructions on the same vectors need no gap.
 * Read path: port A, one cycle latency, shared with accumulates (accumulate beats win; the
 * decoder never issues both in one cycle).
 */
module tcu_accumulators #
(
    // Vectors
    parameter DEPTH = 2048,
    // Scalars per vector
    parameter ARRAY_SIZE = 8,
    // Bits of a scalar
    parameter DATA_WIDTH = 16,
    // Address bits
    parameter ADDR_WIDTH = 11
)
(
    input  wire                              clk,
    input  wire                              rst,

    input  wire                              s_write_valid,
    input  wire [ADDR_WIDTH-1:0]             s_write_addr,
    input  wire [ARRAY_SIZE*DATA_WIDTH-1:0]  s_write_data,
    input  wire                              s_write_accumulate,

    input  wire                              s_read_valid,
    input  wire [ADDR_WIDTH-1:0]             s_read_addr,
    output wire [ARRAY_SIZE*DATA_WIDTH-1:0]  m_read_data,
    output reg                               m_read_valid,

    output wire                              busy,
    output wire                              saturated
);

localparam N = ARRAY_SIZE;
localparam W = DATA_WIDTH;

wire [N*W-1:0] a_rdata;
wire [N*W-1:0] b_rdata_unused;

// Stage 1: the beat waits for its old value (accumulate) or goes straight to the write.
reg                  s1_valid, s1_acc;
reg [ADDR_WIDTH-1:0] s1_addr;
reg [N*W-1:0]        s1_data;
// Stage 2: the write itself.
reg                  s2_valid;
reg [ADDR_WIDTH-1:0] s2_addr;
reg [N*W-1:0]        s2_data;

// The write that port B performed on the edge that read stage 1's old value (same edge: the
// RAM returns the value from before it).
reg                  p_valid;
reg [ADDR_WIDTH-1:0] p_addr;
reg [N*W-1:0]        p_data;

// The old value for stage 1, newest first: the beat now in stage 2, the write that collided with
// the read, else the RAM.
// The vector an accumulate adds to: the newest write of its address still in the pipeline, else
// the memory's.
function automatic [N*W-1:0] old_of(input [ADDR_WIDTH-1:0] addr);
    old_of = (s2_valid && s2_addr == addr) ? s2_data :
             (p_valid && p_addr == addr)   ? p_data  : a_rdata;
endfunction

// {per-lane saturation, sum}: lane-wise saturating add. Called inside the clocked block, so a
// simulator adds only on cycles that accumulate.
function automatic [N*W+N-1:0] add(input [N*W-1:0] x, input [N*W-1:0] y);
    logic signed [W:0] t;
    for (int lane = 0; lane < N; lane = lane + 1) begin
        t = {x[lane*W+W-1], x[lane*W +: W]} + {y[lane*W+W-1], y[lane*W +: W]};
        add[N*W+lane] = t[W] != t[W-1];
        add[lane*W +: W] = t[W] != t[W-1] ? {t[W], {(W-1){~t[W]}}} : t[W-1:0];
    end
endfunction

// The sum alone (a read forwarded from an accumulate in stage 1).
function automatic [N*W-1:0] sum_of(input [N*W-1:0] x, input [N*W-1:0] y);
    /* verilator lint_off UNUSEDSIGNAL */
    logic [N*W+N-1:0] t;  // the saturation bits are not needed here
    /* verilator lint_on UNUSEDSIGNAL */
    t = add(x, y);
    sum_of = t[N*W-1:0];
endfunction

reg [N-1:0] sat_lanes;  // lanes of the last accumulate that saturated
assign saturated = |sat_lanes;

wire a_for_acc = s_write_valid && s_write_accumulate;

tcu_ram #(
    .DEPTH(DEPTH),
    .WIDTH(N*W),
    .ADDR_WIDTH(ADDR_WIDTH)
)
ram_inst (
    .clk(clk),
    .a_en(a_for_acc || s_read_valid),
    .a_we(1'b0),
    .a_addr(a_for_acc ? s_write_addr : s_read_addr),
    .a_wdata({N*W{1'b0}}),
    .a_rdata(a_rdata),
    .b_en(s2_valid),
    .b_we(s2_valid),
    .b_addr(s2_addr),
    .b_wdata(s2_data),
    .b_rdata(b_rdata_unused)
);

// Reads: forward from the write pipeline (newest first) so program order holds.
reg                  r_from_s2, r_from_s1;
reg [N*W-1:0]        r_fwd;
assign m_read_data = (r_from_s1 || r_from_s2) ? r_fwd : a_rdata;

always @(posedge clk) begin
    if (rst) begin
        s1_valid <= 1'b0;
        s2_valid <= 1'b0;
        p_valid <= 1'b0;
        m_read_valid <= 1'b0;
    end else begin
        s1_valid <= s_write_valid;
        s2_valid <= s1_valid;
        p_valid <= s2_valid;
        m_read_valid <= s_read_valid && !a_for_acc;
    end
    // Data registers load only with a beat (a simulator skips the copies otherwise).
    if (s_write_valid) begin
        s1_addr <= s_write_addr;
        s1_data <= s_write_data;
        s1_acc  <= s_write_accumulate;
    end
    if (s1_valid && s1_acc) begin
        {sat_lanes, s2_data} <= add(old_of(s1_addr), s1_data);
    end else begin
        sat_lanes <= '0;
        if (s1_valid) s2_data <= s1_data;
    end
    if (s1_valid) s2_addr <= s1_addr;
    if (rst) sat_lanes <= '0;
    if (s2_valid) begin
        p_addr <= s2_addr;
        p_data <= s2_data;
    end
    if (s_read_valid) begin
        r_from_s1 <= s1_valid && s1_addr == s_read_addr;
        r_from_s2 <= s2_valid && s2_addr == s_read_addr && !(s1_valid && s1_addr == s_read_addr);
        r_fwd <= (s1_valid && s1_addr == s_read_addr) ? (s1_acc ? sum_of(old_of(s1_addr), s1_data) : s1_data) : s2_data;
    end
end

assign busy = s1_valid || s2_valid;

wire unused_ok = &{1'b0, b_rdata_unused};

endmodule

`resetall
