// SPDX-License-Identifier: Apache-2.0
`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * The TCU's array: N x N weight-stationary multiply-accumulate cells, with two weight sets.
 *
 * Rows are pipeline stages. Stage j holds weight row j+1 (row 0 is the bias) and computes,
 * for every column o at once, acc[o] = mac(in[j], W[j+1][o], acc[o]) with acc entering stage 0
 * as the bias. So each output is the spec's sequential sum (rounded and saturated after every
 * step, input channel 0 first), one vector per cycle after N cycles of latency.
 *
 * Shadow weights: the weights in program order live in one of two sets (`active`); each
 * s_weights beat shifts rows into the other set (row k+1 <= row k, row 0 <= data), the first
 * beat after a swap shifting from the active set, so loading from the highest address down leaves
 * row 0 = the lowest address and a partial load shifts the previous rows down (LoadWeights).
 * `loaded` says beats went in since the last swap. An input vector with s_in_swap (the first of
 * the MatMul after a load) swaps the sets; others use the active set, so vectors of the MatMul
 * before a load may still stream in while it loads. Every vector carries its set through the
 * stages: a load never waits for the array to drain, only (s_weights_ready low) while a vector in
 * flight still uses the set it would overwrite. The caller keeps program order: a load starts after
 * the previous load's swapping vector went in, and a swapping vector comes after its load's beats.
 *
 * Window MatMul (ours, WINDOW_MATMUL = 1): a vector with s_in_start starts an output (a plain MatMul's
 * vectors all do; a window MatMul's stream has vectors that only feed outputs already in flight).
 * An output started with s_in_window sums taps of the stream instead of its own vector's lanes:
 * stage j multiplies lane o of the vector entering stage 0 in the same cycle by W[j+1][o], for
 * j <= its s_in_taps (taps - 1), and adds nothing in the stages after. The caller streams a window
 * MatMul's vectors back to back, so stage j sees the vector j after the output's first one.
 *
 * Timing: one vector per cycle in and out while m_out_ready; latency N cycles. Cells compute only
 * on cycles that carry a vector.
 */
module tcu_systolic_array #
(
    // Array size N: rows and columns; a vector holds N scalars
    parameter ARRAY_SIZE = 8,
    // 1: the window MatMul (an instruction set extension of ours)
    parameter WINDOW_MATMUL = 0,
    // Bits of a scalar
    parameter DATA_WIDTH = 16,
    // Fractional bits of a scalar
    parameter BINARY_POINT = 8
)
(
    input  wire                              clk,
    input  wire                              rst,

    // Weight rows, shifted in (row 0 = bias)
    input  wire [ARRAY_SIZE*DATA_WIDTH-1:0]  s_weights_data,
    input  wire                              s_weights_valid,
    output wire                              s_weights_ready,

    // Input vectors
    input  wire [ARRAY_SIZE*DATA_WIDTH-1:0]  s_in_data,
    input  wire                              s_in_valid,
    input  wire                              s_in_swap,
    output wire                              s_in_ready,
    // (WINDOW_MATMUL) the vector starts an output; that output is a window's; its taps - 1
    input  wire                              s_in_start,
    input  wire                              s_in_window,
    input  wire [7:0]                        s_in_taps,

    // Output vectors: bias + in x W
    output wire [ARRAY_SIZE*DATA_WIDTH-1:0]  m_out_data,
    output wire                              m_out_valid,
    input  wire                              m_out_ready,

    // Beats went into the loading set since the last swap; vectors in flight; saturation events
    // (one pulse per saturated output vector)
    output reg                               loaded,
    output wire                              busy,
    output wire                              saturated
);

localparam N = ARRAY_SIZE;
localparam W = DATA_WIDTH;

// Illegal configurations stop elaboration.
generate
    if (N < 2 || N > 256) begin : g_illegal_0
        $fatal(1, "tcu_systolic_array: ARRAY_SIZE (%0d) must be 2..256", N);
    end
    if (WINDOW_MATMUL != 0 && WINDOW_MATMUL != 1) begin : g_illegal_1
        $fatal(1, "tcu_systolic_array: WINDOW_MATMUL (%0d) must be 0 or 1", WINDOW_MATMUL);
    end
endgenerate

// The two weight sets; row 0 is the bias.
reg [N*W-1:0] weights0 [0:N];
reg [N*W-1:0] weights1 [0:N];
reg           active;   // the set in program order (a swapping vector uses the other one)

// Pipeline stage j: registered inputs, partial sums (the cells' outputs), valid and weight set.
reg [N*W-1:0] in_reg  [0:N-1];
wire [N*W-1:0] acc_reg [0:N-1];
reg           sat_in_reg [0:N-1];   // saturation in the stages before j
wire [N-1:0]  sat_cells [0:N-1];
reg [N-1:0]   valid_reg;
reg [N-1:0]   set_reg;
reg [N-1:0]   window_reg;            // (WINDOW_MATMUL) the output in stage j is a window's ...
reg [7:0]     taps_reg [0:N-1];      // ... with these taps - 1
wire          unused_ok = &{1'b0, window_reg[N-1], taps_reg[N-1]};  // (the last stage's: nobody after)

wire advance = m_out_ready || !valid_reg[N-1];
wire swap = s_in_valid && s_in_swap && loaded;
wire in_set = swap ? !active : active;

// A load overwrites the inactive set: it waits while a vector in flight still uses that set.
wire [N-1:0] uses_inactive = valid_reg & (active ? ~set_reg : set_reg);
assign s_weights_ready = loaded || !(|uses_inactive);

assign s_in_ready  = advance;
assign m_out_data  = acc_reg[N-1];
assign m_out_valid = valid_reg[N-1];
assign busy        = |valid_reg;
assign saturated   = valid_reg[N-1] && (sat_in_reg[N-1] || (|sat_cells[N-1])) && m_out_ready;

integer k;
always @(posedge clk) begin
    if (s_weights_valid) begin
        // The first beat after a swap shifts the active set's rows; later beats the loading set's.
        for (k = N; k > 0; k = k - 1) begin
            if (active) begin
                weights0[k] <= loaded ? weights0[k-1] : weights1[k-1];
            end else begin
                weights1[k] <= loaded ? weights1[k-1] : weights0[k-1];
            end
        end
        if (active) begin
            weights0[0] <= s_weights_data;
        end else begin
            weights1[0] <= s_weights_data;
        end
    end
    if (rst) begin
        active <= 1'b0;
        loaded <= 1'b0;
    end else if (s_weights_valid) begin
        loaded <= 1'b1;
    end else if (swap && advance) begin
        active <= !active;
        loaded <= 1'b0;
    end
end

genvar j, o;
generate
    for (j = 0; j < N; j = j + 1) begin : row
        // Stage j's inputs: the bias and the fresh vector for stage 0, else the previous stage.
        wire           set_now = (j == 0) ? in_set : set_reg[j == 0 ? 0 : j-1];
        wire [N*W-1:0] in_now  = (j == 0) ? s_in_data : in_reg[j == 0 ? 0 : j-1];
        wire [N*W-1:0] acc_now = (j == 0) ? (set_now ? weights1[0] : weights0[0]) : acc_reg[j == 0 ? 0 : j-1];
        wire           sat_now = (j == 0) ? 1'b0 : sat_in_reg[j == 0 ? 0 : j-1] || (|sat_cells[j == 0 ? 0 : j-1]);
        wire           vld_now = (j == 0) ? s_in_valid && (s_in_start || WINDOW_MATMUL == 0) : valid_reg[j == 0 ? 0 : j-1];
        wire [N*W-1:0] w_row   = set_now ? weights1[j+1] : weights0[j+1];
        wire           load    = advance && vld_now;
        // A window's output takes lane o of the vector entering now, while its taps last.
        wire           win_now  = WINDOW_MATMUL != 0 && ((j == 0) ? s_in_window : window_reg[j == 0 ? 0 : j-1]);
        wire [7:0]     taps_now = (j == 0) ? s_in_taps : taps_reg[j == 0 ? 0 : j-1];
        wire           tapping  = (j == 0) || taps_now >= 8'(j);  // (tap 0 always)

        for (o = 0; o < N; o = o + 1) begin : col
            tcu_mac #(
                .DATA_WIDTH(W),
                .BINARY_POINT(BINARY_POINT),
                .REGISTERED(1)
            )
            mac_inst (
                .clk(clk),
                .en(load),
                .x(!win_now ? in_now[j*W +: W] : tapping ? s_in_data[o*W +: W] : {W{1'b0}}),
                .y(w_row[o*W +: W]),
                .z(acc_now[o*W +: W]),
                .r(acc_reg[j][o*W +: W]),
                .saturated(sat_cells[j][o])
            );
        end

        always @(posedge clk) begin
            if (rst) begin
                valid_reg[j] <= 1'b0;
            end else if (advance) begin
                valid_reg[j] <= vld_now;
            end
            if (load) begin
                in_reg[j]     <= in_now;
                set_reg[j]    <= set_now;
                sat_in_reg[j] <= sat_now;
                window_reg[j] <= win_now;
                taps_reg[j]   <= taps_now;
            end
        end
    end
endgenerate

endmodule

`resetall
