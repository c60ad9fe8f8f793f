// SPDX-License-Identifier: Apache-2.0
`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * Compute engine: runs MatMul, one vector per cycle.
 *
 * Reads the instruction's vectors from local memory through port A (the data is on local_rd_data
 * the next cycle) and hands each to the array the cycle after (zero vectors with `zeroes`). The
 * accumulator address and accumulate flag of every vector issued wait in a FIFO until the array's
 * output for that vector appears, which is then written to the accumulators: the array keeps order,
 * so nothing else pairs them. The next MatMul may start in the cycle the current one issues its
 * last vector (s_cmd_ready), so vectors of consecutive MatMuls issue back to back: both stream
 * through the array in order, each with its own addresses.
 *
 * A MatMul that swaps the array's weight sets (`s_cmd_swap`: a LoadWeights came since the previous
 * MatMul) holds its first vector until the weights engine has landed that load (`weights_loaded`);
 * the first vector then carries the swap into the array.
 *
 * Window MatMul (ours, WINDOW_MATMUL = 1; docs/isa.md): `count` outputs of the window `s_cmd_window_value`
 * (taps - 1, lead, trail, log2 stride). The engine streams (count - 1) * stride + taps vectors back
 * to back: `lead` zero vectors, the vectors it reads, `trail` zero vectors; every stride-th of the
 * first (count - 1) * stride + 1 starts an output (and takes an accumulator address).
 */
module tcu_compute_engine #
(
    // Scalars per vector
    parameter ARRAY_SIZE = 8,
    // Bits of a scalar
    parameter DATA_WIDTH = 16,
    // Address bits of local memory
    parameter LOCAL_ADDR_BITS = 13,
    // Address bits of the accumulators
    parameter ACC_ADDR_BITS = 11,
    // 1: the window MatMul (an instruction set extension of ours)
    parameter WINDOW_MATMUL = 0
)
(
    input  wire                              clk,
    input  wire                              rst,

    // Instruction: `count` vectors from local_addr (by local_step) into acc_addr (by acc_step)
    input  wire                              s_cmd_valid,
    output wire                              s_cmd_ready,
    input  wire                              s_cmd_zeroes,
    input  wire                              s_cmd_accumulate,
    input  wire                              s_cmd_swap,
    input  wire [31:0]                       s_cmd_local_addr,
    input  wire [31:0]                       s_cmd_local_step,
    input  wire [31:0]                       s_cmd_acc_addr,
    input  wire [31:0]                       s_cmd_acc_step,
    input  wire [31:0]                       s_cmd_count,
    // (WINDOW_MATMUL) a window MatMul, and the window register's value
    input  wire                              s_cmd_window,
    input  wire [25:0]                       s_cmd_window_value,

    // The weights engine has no load in flight (a swapping MatMul's first vector waits for it)
    input  wire                              weights_loaded,

    // Local memory port A reads (always granted; data the next cycle)
    output wire                              m_local_rd_valid,
    output wire [LOCAL_ADDR_BITS-1:0]        m_local_rd_addr,
    input  wire [ARRAY_SIZE*DATA_WIDTH-1:0]  local_rd_data,

    // Vectors into the array (the first of a swapping MatMul carries the swap)
    output reg                               m_array_valid,
    output reg  [ARRAY_SIZE*DATA_WIDTH-1:0]  m_array_data,
    output reg                               m_array_swap,
    // (WINDOW_MATMUL) the vector starts an output; the output is a window's; its taps - 1
    output reg                               m_array_start,
    output reg                               m_array_window,
    output reg  [7:0]                        m_array_taps,

    // The array's results, in the order the vectors went in
    input  wire                              s_array_valid,
    input  wire [ARRAY_SIZE*DATA_WIDTH-1:0]  s_array_data,

    // Accumulator writes
    output reg                               m_acc_wr_valid,
    output reg  [ACC_ADDR_BITS-1:0]          m_acc_wr_addr,
    output reg  [ARRAY_SIZE*DATA_WIDTH-1:0]  m_acc_wr_data,
    output reg                               m_acc_wr_accumulate,

    // The array or the accumulators still work on vectors this engine sent
    input  wire                              downstream_busy,

    // Status: an instruction in flight; a vector issued this cycle; a swap on its way to the array;
    // everything issued has landed; cycles of the instruction so far
    output wire                              busy,
    output wire                              issuing,
    output wire                              swap_in_flight,
    output wire                              quiet,
    output reg  [31:0]                       busy_cycles
);

localparam V = ARRAY_SIZE * DATA_WIDTH;
localparam CB = 32;
localparam AA = ACC_ADDR_BITS;
// Vectors in flight between issue and result: the read, the array's stages and its registers.
localparam FIFO_BITS = $clog2(ARRAY_SIZE + 4);

localparam [1:0] S_IDLE = 2'd0, S_ISSUE = 2'd1, S_DRAIN = 2'd2;
reg [1:0]    state;
reg          zeroes, accumulate, swap;
// `count`: vectors streamed (a window MatMul: its reads and padding); `issued`: streamed so far.
reg [CB-1:0] local_addr, local_step, acc_addr, acc_step, count, issued;
// A window MatMul: the stream positions read from local memory [first_read, end_read), the last
// that starts an output, the stride's mask (outputs start where the position's low bits are zero).
reg          window;
reg [7:0]    taps;
reg [CB-1:0] first_read, end_read, last_start, stride_mask;
reg          rd1_valid, rd1_zero, rd1_swap;   // a vector's data is on local_rd_data (or is zero)
reg          rd1_start, rd1_window;
reg [7:0]    rd1_taps;
reg [AA:0]   fifo [0:(1 << FIFO_BITS)-1];     // {accumulate, accumulator address} per output in flight
reg [FIFO_BITS:0] wr_ptr, rd_ptr;

wire swap_wait = swap && !weights_loaded;   // only the first vector of a swapping MatMul has `swap`
wire issue_now = state == S_ISSUE && issued < count && !swap_wait;
wire last_now = issue_now && issued + 1 == count;
wire start = s_cmd_valid && s_cmd_ready;
wire read_now = issue_now && !zeroes && (!window || (issued >= first_read && issued < end_read));
wire starts_output = !window || (issued <= last_start && (issued & stride_mask) == '0);

// The window's fields (register 12): taps - 1, lead, trail, log2 stride.
wire [7:0]    w_taps = s_cmd_window_value[7:0];
wire [CB-1:0] w_lead = CB'(s_cmd_window_value[15:8]);
wire [CB-1:0] w_trail = CB'(s_cmd_window_value[23:16]);
wire [1:0]    w_shift = s_cmd_window_value[25:24];
wire [CB-1:0] w_last_start = (s_cmd_count - 1) << w_shift;
wire [CB-1:0] w_stream = w_last_start + CB'(w_taps) + 1;
wire          w_on = WINDOW_MATMUL != 0 && s_cmd_window;

assign s_cmd_ready = !rst && (state == S_IDLE || issued == count || last_now);
assign m_local_rd_valid = read_now;
assign m_local_rd_addr = LOCAL_ADDR_BITS'(local_addr);
assign busy = state != S_IDLE;
assign issuing = issue_now;
assign swap_in_flight = rd1_swap || m_array_swap;
assign quiet = wr_ptr == rd_ptr && !rd1_valid && !m_array_valid && !m_acc_wr_valid && !downstream_busy;

always @(posedge clk) begin
    m_array_valid <= 1'b0;
    m_array_swap <= 1'b0;
    m_acc_wr_valid <= 1'b0;
    if (rst) begin
        state <= S_IDLE;
        swap <= 1'b0;
        rd1_valid <= 1'b0;
        rd1_swap <= 1'b0;
        wr_ptr <= '0;
        rd_ptr <= '0;
        busy_cycles <= '0;
    end else begin
        if (issue_now) begin
            issued <= issued + 1;
            swap <= 1'b0;
            if (read_now || !window) local_addr <= local_addr + local_step;
            if (starts_output) begin
                acc_addr <= acc_addr + acc_step;
                fifo[wr_ptr[FIFO_BITS-1:0]] <= {accumulate, AA'(acc_addr)};
                wr_ptr <= wr_ptr + 1;
            end
        end
        // A new instruction (possibly in the cycle its predecessor issues its last vector) takes over.
        if (start) begin
            state <= S_ISSUE;
            zeroes <= s_cmd_zeroes;
            accumulate <= s_cmd_accumulate;
            swap <= s_cmd_swap;
            local_addr <= s_cmd_local_addr;
            local_step <= s_cmd_local_step;
            acc_addr <= s_cmd_acc_addr;
            acc_step <= s_cmd_acc_step;
            count <= w_on ? w_stream : s_cmd_count;
            window <= w_on;
            taps <= w_taps;
            first_read <= w_lead;
            end_read <= w_stream - w_trail;
            last_start <= w_last_start;
            stride_mask <= (CB'(1) << w_shift) - 1;
            issued <= '0;
            busy_cycles <= '0;
        end else begin
            if (state != S_IDLE) busy_cycles <= busy_cycles + 1;
            if (state == S_ISSUE && issued == count) state <= S_DRAIN;
            if (state == S_DRAIN && quiet) state <= S_IDLE;
        end

        // Local data -> array -> accumulators
        rd1_valid <= issue_now;
        rd1_zero <= !read_now;
        rd1_swap <= issue_now && swap;
        rd1_start <= starts_output;
        rd1_window <= window;
        rd1_taps <= taps;
        if (rd1_valid) begin
            m_array_valid <= 1'b1;
            m_array_swap <= rd1_swap;
            m_array_data <= rd1_zero ? {V{1'b0}} : local_rd_data;
            m_array_start <= rd1_start;
            m_array_window <= rd1_window;
            m_array_taps <= rd1_taps;
        end
        if (s_array_valid) begin
            m_acc_wr_valid <= 1'b1;
            m_acc_wr_addr <= fifo[rd_ptr[FIFO_BITS-1:0]][AA-1:0];
            m_acc_wr_data <= s_array_data;
            m_acc_wr_accumulate <= fifo[rd_ptr[FIFO_BITS-1:0]][AA];
            rd_ptr <= rd_ptr + 1;
        end
    end
end

endmodule

`resetall
