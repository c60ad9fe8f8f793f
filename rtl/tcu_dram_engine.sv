// SPDX-License-Identifier: Apache-2.0
`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * DRAM engine: runs DataMoves between one DRAM bank and local memory, one instruction at a time.
 * The core has one per bank, so weight loads (DRAM1) and feature-map moves (DRAM0) overlap.
 *
 * DRAM -> local: read requests go out as the bank takes them (with DRAM stride 1 the whole move is
 * one run, a single request); responses arrive in order, at most one per VECTOR_BEATS cycles, and
 * wait in a queue for a local memory write slot (`m_local_wr_urgent` once it is half full: the
 * arbiter then serves it first, so it never overflows). Local -> DRAM: local reads, when granted,
 * feed a small queue the bank drains (the first vector of a run carries its length). Local memory
 * is shared with the other engines through the core's arbiter: a request is held until granted, a
 * granted read's data is on local_rd_data in the next cycle.
 *
 * The instruction is done (s_cmd_ready) once every response is written, every local read's vector
 * handed to the bank and every write response is in.
 */
module tcu_dram_engine #
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

    // Instruction: a DataMove between this bank and local memory (32-bit addresses and steps)
    input  wire                              s_cmd_valid,
    output wire                              s_cmd_ready,
    input  wire                              s_cmd_to_dram,
    input  wire [31:0]                       s_cmd_local_addr,
    input  wire [31:0]                       s_cmd_local_step,
    input  wire [31:0]                       s_cmd_dram_addr,
    input  wire [31:0]                       s_cmd_dram_step,
    input  wire [31:0]                       s_cmd_count,

    // The bank: runs of vector reads (responses in order) and vector writes
    output wire                              m_dram_rd_valid,
    input  wire                              m_dram_rd_ready,
    output wire [DEPTH_BITS-1:0]             m_dram_rd_addr,
    output wire [31:0]                       m_dram_rd_count,
    input  wire                              s_dram_rd_valid,
    input  wire [ARRAY_SIZE*DATA_WIDTH-1:0]  s_dram_rd_data,
    output wire                              m_dram_wr_valid,
    input  wire                              m_dram_wr_ready,
    output wire [DEPTH_BITS-1:0]             m_dram_wr_addr,
    output wire [31:0]                       m_dram_wr_run,
    output wire [ARRAY_SIZE*DATA_WIDTH-1:0]  m_dram_wr_data,
    input  wire                              dram_wr_pending,

    // Local memory, through the arbiter
    output wire                              m_local_rd_valid,
    output wire [LOCAL_ADDR_BITS-1:0]        m_local_rd_addr,
    input  wire                              local_rd_grant,
    input  wire [ARRAY_SIZE*DATA_WIDTH-1:0]  local_rd_data,
    output wire                              m_local_wr_valid,
    output wire [LOCAL_ADDR_BITS-1:0]        m_local_wr_addr,
    output wire [ARRAY_SIZE*DATA_WIDTH-1:0]  m_local_wr_data,
    output wire                              m_local_wr_urgent,
    input  wire                              local_wr_grant,

    // Status: an instruction in flight, a vector issued this cycle, cycles of the instruction so far
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
        $fatal(1, "tcu_dram_engine: LOCAL_ADDR_BITS (%0d) too small for LOCAL_DEPTH (%0d)", LA, LOCAL_DEPTH);
    end
endgenerate

localparam [1:0] S_IDLE = 2'd0, S_ISSUE = 2'd1, S_DRAIN = 2'd2;
reg [1:0]    state;
reg          to_dram;
reg [CB-1:0] local_addr, local_step, dram_addr, dram_step, count, issued;
reg [CB-1:0] rd_issued, rd_received, resp_addr, resp_step;

// -- DRAM -> local: responses wait for a write slot --------------------------------------------
localparam RQ_BITS = 3;
localparam RQ = 1 << RQ_BITS;
reg [LA-1:0]       rq_addr [0:RQ-1];
reg [V-1:0]        rq_data [0:RQ-1];
reg [RQ_BITS:0]    rq_count;
reg [RQ_BITS-1:0]  rq_head, rq_tail;
wire               resp = s_dram_rd_valid && state != S_IDLE && rd_received != rd_issued;
wire               rq_pop = rq_count != 0 && local_wr_grant;

assign m_local_wr_valid = rq_count != 0;
assign m_local_wr_urgent = 32'(rq_count) >= RQ / 2;
assign m_local_wr_addr  = rq_addr[rq_head];
assign m_local_wr_data  = rq_data[rq_head];

// -- local -> DRAM: granted reads feed the write queue ----------------------------------------
localparam WQ_BITS = 2;
localparam WQ = 1 << WQ_BITS;
reg [CB-1:0]       wq_addr [0:WQ-1];
reg [CB-1:0]       wq_run [0:WQ-1];
reg [V-1:0]        wq_data [0:WQ-1];
reg [WQ_BITS:0]    wq_count;
reg [WQ_BITS-1:0]  wq_head, wq_tail;
reg                rd1_valid;     // a granted local read's data is on local_rd_data
reg [CB-1:0]       rd1_addr, rd1_run;
wire               wq_push = rd1_valid;
wire               wq_pop = wq_count != 0 && m_dram_wr_ready;

wire vectors_left = state == S_ISSUE && issued < count;
// With DRAM stride 1 the whole move is one run: a single read request, or a write run announced
// with its first vector; with a larger stride every vector is a run of its own.
wire one_run = dram_step == 1;
// A local read for DRAM is requested only when the queue has room for it and the one in flight.
wire wq_space = 32'(wq_count) + 32'(wq_push) + 1 < WQ;
assign m_local_rd_valid = vectors_left && to_dram && wq_space;
assign m_local_rd_addr  = LA'(local_addr);
wire issue_now = vectors_left && (to_dram ? local_rd_grant && wq_space : m_dram_rd_ready);

assign m_dram_rd_valid = vectors_left && !to_dram;
assign m_dram_rd_addr  = DEPTH_BITS'(dram_addr);
assign m_dram_rd_count = one_run ? count : 32'd1;
assign m_dram_wr_valid = wq_count != 0;
assign m_dram_wr_addr  = DEPTH_BITS'(wq_addr[wq_head]);
assign m_dram_wr_run   = wq_run[wq_head];
assign m_dram_wr_data  = wq_data[wq_head];

wire quiet = rd_issued == rd_received && rq_count == 0 && !rd1_valid && wq_count == 0 && !dram_wr_pending;
assign s_cmd_ready = state == S_IDLE && !rst;
assign busy = state != S_IDLE;
assign issuing = issue_now;

always @(posedge clk) begin
    if (rst) begin
        state <= S_IDLE;
        rq_count <= '0;
        rq_head <= '0;
        rq_tail <= '0;
        wq_count <= '0;
        wq_head <= '0;
        wq_tail <= '0;
        rd1_valid <= 1'b0;
        rd_issued <= '0;
        rd_received <= '0;
        busy_cycles <= '0;
    end else begin
        if (s_cmd_valid && s_cmd_ready) begin
            state <= S_ISSUE;
            to_dram <= s_cmd_to_dram;
            local_addr <= s_cmd_local_addr;
            local_step <= s_cmd_local_step;
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
            if (!to_dram && one_run) begin
                issued <= count;
                rd_issued <= count;
            end else begin
                issued <= issued + 1;
                local_addr <= local_addr + local_step;
                dram_addr <= dram_addr + dram_step;
                if (!to_dram) rd_issued <= rd_issued + 1;
            end
        end
        if (state == S_ISSUE && issued == count) state <= S_DRAIN;
        if (state == S_DRAIN && quiet) state <= S_IDLE;

        // Local -> DRAM: the granted read's data, one cycle later, into the queue.
        rd1_valid <= issue_now && to_dram;
        rd1_addr <= dram_addr;
        rd1_run <= !one_run ? 32'd1 : (issued == 0 ? count : 32'd0);
        if (rd1_valid) begin
            wq_addr[wq_tail] <= rd1_addr;
            wq_run[wq_tail] <= rd1_run;
            wq_data[wq_tail] <= local_rd_data;
            wq_tail <= wq_tail + 1;
        end
        if (wq_pop) wq_head <= wq_head + 1;
        wq_count <= wq_count + (WQ_BITS+1)'(wq_push) - (WQ_BITS+1)'(wq_pop);

        // DRAM -> local: responses in order, queued for their write slot.
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
