// SPDX-License-Identifier: Apache-2.0
`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * DRAM writer: runs DataMoves from local memory to one DRAM bank, one instruction at a time (as
 * verilog-axi's axi_dma_wr; tcu_dram_reader is the other direction).
 *
 * Local reads, when the arbiter grants them (the data is on local_rd_data in the next cycle), feed
 * a small queue the bank drains; the first vector of a run carries its length (with DRAM stride 1
 * the whole move is one run, else every vector is its own). The instruction is done (s_cmd_ready)
 * once every vector is handed to the bank and every write response is in.
 */
module tcu_dram_writer #
(
    // Scalars per vector
    parameter ARRAY_SIZE = 8,
    // Bits of a scalar
    parameter DATA_WIDTH = 16,
    // Address bits of local memory
    parameter LOCAL_ADDR_BITS = 13,
    // Address bits of a DRAM vector
    parameter DEPTH_BITS = 20
)
(
    input  wire                              clk,
    input  wire                              rst,

    // Instruction: `count` vectors from local memory to DRAM (32-bit addresses and steps)
    input  wire                              s_cmd_valid,
    output wire                              s_cmd_ready,
    input  wire [31:0]                       s_cmd_local_addr,
    input  wire [31:0]                       s_cmd_local_step,
    input  wire [31:0]                       s_cmd_dram_addr,
    input  wire [31:0]                       s_cmd_dram_step,
    input  wire [31:0]                       s_cmd_count,

    // The bank: vector writes (the first of a run carries its length)
    output wire                              m_dram_wr_valid,
    input  wire                              m_dram_wr_ready,
    output wire [DEPTH_BITS-1:0]             m_dram_wr_addr,
    output wire [31:0]                       m_dram_wr_run,
    output wire [ARRAY_SIZE*DATA_WIDTH-1:0]  m_dram_wr_data,
    input  wire                              dram_wr_pending,

    // Local memory reads, through the arbiter
    output wire                              m_local_rd_valid,
    output wire [LOCAL_ADDR_BITS-1:0]        m_local_rd_addr,
    input  wire                              local_rd_grant,
    input  wire [ARRAY_SIZE*DATA_WIDTH-1:0]  local_rd_data,

    // Status: an instruction in flight, a vector read this cycle, cycles of the instruction so far
    output wire                              busy,
    output wire                              issuing,
    output reg  [31:0]                       busy_cycles
);

localparam V = ARRAY_SIZE * DATA_WIDTH;
localparam CB = 32;

localparam [1:0] S_IDLE = 2'd0, S_ISSUE = 2'd1, S_DRAIN = 2'd2;
reg [1:0]    state;
reg [CB-1:0] local_addr, local_step, dram_addr, dram_step, count, issued;

// Granted reads feed the write queue.
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

wire one_run = dram_step == 1;
// A read is requested only when the queue has room for it and the one in flight.
wire wq_space = 32'(wq_count) + 32'(wq_push) + 1 < WQ;
assign m_local_rd_valid = state == S_ISSUE && issued < count && wq_space;
assign m_local_rd_addr  = LOCAL_ADDR_BITS'(local_addr);
wire issue_now = m_local_rd_valid && local_rd_grant;

assign m_dram_wr_valid = wq_count != 0;
assign m_dram_wr_addr  = DEPTH_BITS'(wq_addr[wq_head]);
assign m_dram_wr_run   = wq_run[wq_head];
assign m_dram_wr_data  = wq_data[wq_head];

wire quiet = !rd1_valid && wq_count == 0 && !dram_wr_pending;
assign s_cmd_ready = state == S_IDLE && !rst;
assign busy = state != S_IDLE;
assign issuing = issue_now;

always @(posedge clk) begin
    if (rst) begin
        state <= S_IDLE;
        wq_count <= '0;
        wq_head <= '0;
        wq_tail <= '0;
        rd1_valid <= 1'b0;
        busy_cycles <= '0;
    end else begin
        if (s_cmd_valid && s_cmd_ready) begin
            state <= S_ISSUE;
            local_addr <= s_cmd_local_addr;
            local_step <= s_cmd_local_step;
            dram_addr <= s_cmd_dram_addr;
            dram_step <= s_cmd_dram_step;
            count <= s_cmd_count;
            issued <= '0;
            busy_cycles <= '0;
        end else if (state != S_IDLE) begin
            busy_cycles <= busy_cycles + 1;
        end
        if (issue_now) begin
            issued <= issued + 1;
            local_addr <= local_addr + local_step;
            dram_addr <= dram_addr + dram_step;
        end
        if (state == S_ISSUE && issued == count) state <= S_DRAIN;
        if (state == S_DRAIN && quiet) state <= S_IDLE;

        rd1_valid <= issue_now;
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
    end
end

endmodule

`resetall
