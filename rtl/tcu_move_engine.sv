// SPDX-License-Identifier: Apache-2.0
`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * Move engine: runs DataMoves between local memory and the accumulators, one vector per cycle.
 *
 * Local memory is reached through port A when the compute engine does not read it this cycle
 * (`port_a_free`), else through a port-B request that waits for the core's arbiter; either way a
 * read's data is there the next cycle. Local -> accumulators: a local read, then the accumulator
 * write (plain or accumulating). Accumulators -> local: an accumulator read (data the next cycle),
 * then the vector waits in a small queue for a local write slot, so the accumulator side never
 * stalls on local memory; no read is issued unless the queue has room for its vector.
 */
module tcu_move_engine #
(
    // Scalars per vector
    parameter ARRAY_SIZE = 8,
    // Bits of a scalar
    parameter DATA_WIDTH = 16,
    // Address bits of local memory
    parameter LOCAL_ADDR_BITS = 13,
    // Address bits of the accumulators
    parameter ACC_ADDR_BITS = 11
)
(
    input  wire                              clk,
    input  wire                              rst,

    // Instruction: `count` vectors between local_addr (by local_step) and acc_addr (by acc_step)
    input  wire                              s_cmd_valid,
    output wire                              s_cmd_ready,
    input  wire                              s_cmd_to_acc,
    input  wire                              s_cmd_accumulate,
    input  wire [31:0]                       s_cmd_local_addr,
    input  wire [31:0]                       s_cmd_local_step,
    input  wire [31:0]                       s_cmd_acc_addr,
    input  wire [31:0]                       s_cmd_acc_step,
    input  wire [31:0]                       s_cmd_count,

    // Port A is free this cycle (no MatMul read on it)
    input  wire                              port_a_free,

    // Local memory: port A (granted whenever free) or port-B requests through the arbiter. A read's
    // address is m_local_rd_addr on either port, a write's m_local_wr_addr/data.
    output wire                              m_local_a_rd,
    output wire                              m_local_a_wr,
    output wire                              m_local_b_rd_valid,
    input  wire                              local_b_rd_grant,
    output wire                              m_local_b_wr_valid,
    input  wire                              local_b_wr_grant,
    output wire [LOCAL_ADDR_BITS-1:0]        m_local_rd_addr,
    output wire [LOCAL_ADDR_BITS-1:0]        m_local_wr_addr,
    output wire [ARRAY_SIZE*DATA_WIDTH-1:0]  m_local_wr_data,
    input  wire [ARRAY_SIZE*DATA_WIDTH-1:0]  local_a_rd_data,
    input  wire [ARRAY_SIZE*DATA_WIDTH-1:0]  local_b_rd_data,

    // Accumulator reads (data the next cycle) and writes
    output wire                              m_acc_rd_valid,
    output wire [ACC_ADDR_BITS-1:0]          m_acc_rd_addr,
    input  wire [ARRAY_SIZE*DATA_WIDTH-1:0]  acc_rd_data,
    output reg                               m_acc_wr_valid,
    output reg  [ACC_ADDR_BITS-1:0]          m_acc_wr_addr,
    output reg  [ARRAY_SIZE*DATA_WIDTH-1:0]  m_acc_wr_data,
    output reg                               m_acc_wr_accumulate,

    // The accumulators still work on writes this engine sent
    input  wire                              downstream_busy,

    // Status: an instruction in flight; a vector issued this cycle; everything issued has landed;
    // cycles of the instruction so far
    output wire                              busy,
    output wire                              issuing,
    output wire                              quiet,
    output reg  [31:0]                       busy_cycles
);

localparam V = ARRAY_SIZE * DATA_WIDTH;
localparam CB = 32;
localparam LA = LOCAL_ADDR_BITS;
// Vectors read from the accumulators that wait for a local write slot
localparam QUEUE_BITS = 2;
localparam QUEUE = 1 << QUEUE_BITS;

localparam [1:0] S_IDLE = 2'd0, S_ISSUE = 2'd1, S_DRAIN = 2'd2;
reg [1:0]    state;
reg          to_acc, accumulate;
reg [CB-1:0] local_addr, local_step, acc_addr, acc_step, count, issued;
reg          rd1_valid, rd1_to_acc;   // a read returns its data this cycle
reg          rd1_port_a;              // ... from port A (else port B)
reg [CB-1:0] rd1_addr;                // where its vector goes
reg [LA-1:0]         queue_addr [0:QUEUE-1];
reg [V-1:0]          queue_data [0:QUEUE-1];
reg [QUEUE_BITS:0]   queue_count;
reg [QUEUE_BITS-1:0] queue_head, queue_tail;

wire start = s_cmd_valid && s_cmd_ready;
wire left = state == S_ISSUE && issued < count;
wire local_rd = left && to_acc;             // a local read wanted (local -> accumulators)
wire local_wr = queue_count != 0;           // a local write wanted (accumulators -> local)
wire rd_go = local_rd && (port_a_free || local_b_rd_grant);
wire push = rd1_valid && !rd1_to_acc;
wire space = 32'(queue_count) + 32'(push) + 1 < QUEUE;
wire issue_now = left && (to_acc ? rd_go : space);
wire pop = local_wr && (port_a_free || local_b_wr_grant);

assign s_cmd_ready = !rst && state == S_IDLE;
assign m_local_a_rd = rd_go && port_a_free;
assign m_local_a_wr = pop && port_a_free;
assign m_local_b_rd_valid = local_rd && !port_a_free;
assign m_local_b_wr_valid = local_wr && !port_a_free;
assign m_local_rd_addr = LA'(local_addr);
assign m_local_wr_addr = queue_addr[queue_head];
assign m_local_wr_data = queue_data[queue_head];
assign m_acc_rd_valid = issue_now && !to_acc;
assign m_acc_rd_addr = ACC_ADDR_BITS'(acc_addr);
assign busy = state != S_IDLE;
assign issuing = issue_now;
assign quiet = !rd1_valid && queue_count == 0 && !m_acc_wr_valid && !downstream_busy;

always @(posedge clk) begin
    m_acc_wr_valid <= 1'b0;
    if (rst) begin
        state <= S_IDLE;
        rd1_valid <= 1'b0;
        queue_count <= '0;
        queue_head <= '0;
        queue_tail <= '0;
        busy_cycles <= '0;
    end else begin
        if (start) begin
            state <= S_ISSUE;
            to_acc <= s_cmd_to_acc;
            accumulate <= s_cmd_accumulate;
            local_addr <= s_cmd_local_addr;
            local_step <= s_cmd_local_step;
            acc_addr <= s_cmd_acc_addr;
            acc_step <= s_cmd_acc_step;
            count <= s_cmd_count;
            issued <= '0;
            busy_cycles <= '0;
        end else begin
            if (state != S_IDLE) busy_cycles <= busy_cycles + 1;
            if (state == S_ISSUE && issued == count) state <= S_DRAIN;
            if (state == S_DRAIN && quiet) state <= S_IDLE;
        end
        if (issue_now) begin
            issued <= issued + 1;
            local_addr <= local_addr + local_step;
            acc_addr <= acc_addr + acc_step;
        end
        rd1_valid <= issue_now;
        rd1_to_acc <= to_acc;
        rd1_port_a <= port_a_free;
        rd1_addr <= to_acc ? acc_addr : local_addr;
        if (rd1_valid && rd1_to_acc) begin
            m_acc_wr_valid <= 1'b1;
            m_acc_wr_addr <= ACC_ADDR_BITS'(rd1_addr);
            m_acc_wr_data <= rd1_port_a ? local_a_rd_data : local_b_rd_data;
            m_acc_wr_accumulate <= accumulate;
        end
        if (push) begin
            queue_addr[queue_tail] <= LA'(rd1_addr);
            queue_data[queue_tail] <= acc_rd_data;
            queue_tail <= queue_tail + 1;
        end
        if (pop) queue_head <= queue_head + 1;
        queue_count <= queue_count + (QUEUE_BITS+1)'(push) - (QUEUE_BITS+1)'(pop);
    end
end

wire unused_ok = &{1'b0, rd1_addr};

endmodule

`resetall
