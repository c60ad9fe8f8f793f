// SPDX-License-Identifier: Apache-2.0
`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * DRAM reader: runs DataMoves from one DRAM bank to local memory, one instruction at a time (as
 * verilog-axi's axi_dma_rd; tcu_dram_writer is the other direction, so a bank reads and writes at
 * once).
 *
 * Read requests go out as the bank takes them (with DRAM stride 1 the whole move is one run, a
 * single request); responses arrive in order, at most one per VECTOR_BEATS cycles, and wait in a
 * queue for a local memory write slot (`m_local_wr_urgent` once it is half full: the core's arbiter
 * then serves it first, so it never overflows). The instruction is done (s_cmd_ready) once every
 * response is written.
 */
module tcu_dram_reader #
(
    // Scalars per vector
    parameter ARRAY_SIZE = 8,
    // Bits of a scalar
    parameter DATA_WIDTH = 16,
    // Address bits of local memory
    parameter LOCAL_ADDR_BITS = 13,
    // Vectors of local memory
    parameter LOCAL_DEPTH = 8192,
    // Address bits of a DRAM vector
    parameter DEPTH_BITS = 20
)
(
    input  wire                              clk,
    input  wire                              rst,

    // Instruction: `count` vectors from DRAM (32-bit addresses and steps) to local memory
    input  wire                              s_cmd_valid,
    output wire                              s_cmd_ready,
    input  wire [31:0]                       s_cmd_local_addr,
    input  wire [31:0]                       s_cmd_local_step,
    input  wire [31:0]                       s_cmd_dram_addr,
    input  wire [31:0]                       s_cmd_dram_step,
    input  wire [31:0]                       s_cmd_count,

    // The bank: runs of vector reads, responses in order
    output wire                              m_dram_rd_valid,
    input  wire                              m_dram_rd_ready,
    output wire [DEPTH_BITS-1:0]             m_dram_rd_addr,
    output wire [31:0]                       m_dram_rd_count,
    input  wire                              s_dram_rd_valid,
    input  wire [ARRAY_SIZE*DATA_WIDTH-1:0]  s_dram_rd_data,

    // Local memory writes, through the arbiter
    output wire                              m_local_wr_valid,
    output wire [LOCAL_ADDR_BITS-1:0]        m_local_wr_addr,
    output wire [ARRAY_SIZE*DATA_WIDTH-1:0]  m_local_wr_data,
    output wire                              m_local_wr_urgent,
    input  wire                              local_wr_grant,

    // Status: an instruction in flight, a request issued this cycle, cycles of the instruction so far
    output wire                              busy,
    output wire                              issuing,
    output reg  [31:0]                       busy_cycles
);

localparam V = ARRAY_SIZE * DATA_WIDTH;
localparam LA = LOCAL_ADDR_BITS;
localparam CB = 32;

// Illegal configurations stop elaboration.
generate
    if ((1 << LA) < LOCAL_DEPTH) begin : g_illegal_0
        $fatal(1, "tcu_dram_reader: LOCAL_ADDR_BITS (%0d) too small for LOCAL_DEPTH (%0d)", LA, LOCAL_DEPTH);
    end
    // The queue's head and tail wrap at its depth; half of it is the urgent level.
    if (tcu_isa_pkg::RESPONSE_QUEUE_DEPTH < 4 || (tcu_isa_pkg::RESPONSE_QUEUE_DEPTH
            & (tcu_isa_pkg::RESPONSE_QUEUE_DEPTH - 1)) != 0) begin : g_illegal_1
        $fatal(1, "tcu_dram_reader: RESPONSE_QUEUE_DEPTH (%0d) must be a power of two, at least 4",
            tcu_isa_pkg::RESPONSE_QUEUE_DEPTH);
    end
endgenerate

localparam [1:0] S_IDLE = 2'd0, S_ISSUE = 2'd1, S_DRAIN = 2'd2;
reg [1:0]    state;
reg [CB-1:0] dram_addr, dram_step, count, issued;
reg [CB-1:0] rd_issued, rd_received, resp_addr, resp_step;

// Responses wait for a write slot.
localparam RQ = tcu_isa_pkg::RESPONSE_QUEUE_DEPTH;
localparam RQ_BITS = $clog2(RQ);
reg [LA-1:0]       rq_addr [0:RQ-1];
reg [V-1:0]        rq_data [0:RQ-1];
reg [RQ_BITS:0]    rq_count;
reg [RQ_BITS-1:0]  rq_head, rq_tail;
wire               resp = s_dram_rd_valid && state != S_IDLE && rd_received != rd_issued;
wire               rq_pop = rq_count != 0 && local_wr_grant;

assign m_local_wr_valid = rq_count != 0;
assign m_local_wr_addr  = rq_addr[rq_head];
assign m_local_wr_data  = rq_data[rq_head];
assign m_local_wr_urgent = 32'(rq_count) >= RQ / 2;

// With DRAM stride 1 the whole move is one run (a single request); else a request per vector.
wire one_run = dram_step == 1;
wire issue_now = state == S_ISSUE && issued < count && m_dram_rd_ready;
assign m_dram_rd_valid = state == S_ISSUE && issued < count;
assign m_dram_rd_addr  = DEPTH_BITS'(dram_addr);
assign m_dram_rd_count = one_run ? count : 32'd1;

wire quiet = rd_issued == rd_received && rq_count == 0;
assign s_cmd_ready = state == S_IDLE && !rst;
assign busy = state != S_IDLE;
assign issuing = issue_now;

always @(posedge clk) begin
    if (rst) begin
        state <= S_IDLE;
        rq_count <= '0;
        rq_head <= '0;
        rq_tail <= '0;
        rd_issued <= '0;
        rd_received <= '0;
        busy_cycles <= '0;
    end else begin
        if (s_cmd_valid && s_cmd_ready) begin
            state <= S_ISSUE;
            dram_addr <= s_cmd_dram_addr;
            dram_step <= s_cmd_dram_step;
            count <= s_cmd_count;
            issued <= '0;
            rd_issued <= '0;
            rd_received <= '0;
            resp_addr <= s_cmd_local_addr;
            resp_step <= s_cmd_local_step;
            busy_cycles <= '0;
        end else if (state != S_IDLE) begin
            busy_cycles <= busy_cycles + 1;
        end
        if (issue_now) begin
            if (one_run) begin
                issued <= count;
                rd_issued <= count;
            end else begin
                issued <= issued + 1;
                dram_addr <= dram_addr + dram_step;
                rd_issued <= rd_issued + 1;
            end
        end
        if (state == S_ISSUE && issued == count) state <= S_DRAIN;
        if (state == S_DRAIN && quiet) state <= S_IDLE;

        // Responses in order, queued for their write slot.
        if (resp) begin
            rq_addr[rq_tail] <= LA'(resp_addr);
            rq_data[rq_tail] <= s_dram_rd_data;
            rq_tail <= rq_tail + 1;
            rd_received <= rd_received + 1;
            resp_addr <= resp_addr + resp_step;
        end
        if (rq_pop) rq_head <= rq_head + 1;
        rq_count <= rq_count + (RQ_BITS+1)'(resp) - (RQ_BITS+1)'(rq_pop);
    end
end

endmodule

`resetall
