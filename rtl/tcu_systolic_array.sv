// SPDX-License-Identifier: Apache-2.0
`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * The TCU's array: N x N weight-stationary multiply-accumulate cells.
 *
 * Rows are pipeline stages. Stage j holds weight row j+1 (row 0 is the bias) and computes,
 * for every column o at once, acc[o] = mac(in[j], W[j+1][o], acc[o]) with acc entering stage 0
 * as the bias. So each output is the spec's sequential sum (rounded and saturated after every
 * step, input channel 0 first), one vector per cycle after N cycles of latency.
 *
 * Weights: each s_weights beat shifts the rows down (row k+1 <= row k, row 0 <= data), so
 * shifting in vectors from the highest address down leaves row 0 = the lowest address
 * (LoadWeights). The caller must not shift weights while vectors are in flight (busy).
 *
 * Timing: one vector per cycle in and out while m_out_ready; latency N cycles.
 */
module tcu_systolic_array #
(
    // Array size N: rows and columns; a vector holds N scalars
    parameter ARRAY_SIZE = 8,
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

    // Input vectors
    input  wire [ARRAY_SIZE*DATA_WIDTH-1:0]  s_in_data,
    input  wire                              s_in_valid,
    output wire                              s_in_ready,

    // Output vectors: bias + in x W
    output wire [ARRAY_SIZE*DATA_WIDTH-1:0]  m_out_data,
    output wire                              m_out_valid,
    input  wire                              m_out_ready,

    // Vectors in flight, and saturation events (one pulse per saturated output vector)
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
endgenerate

// weights[k] holds row k; row 0 is the bias.
reg [N*W-1:0] weights [0:N];

integer k;
always @(posedge clk) begin
    if (s_weights_valid) begin
        for (k = N; k > 0; k = k - 1) begin
            weights[k] <= weights[k-1];
        end
        weights[0] <= s_weights_data;
    end
end

// Pipeline stage j: registered inputs, partial sums and valid.
reg [N*W-1:0] in_reg  [0:N-1];
reg [N*W-1:0] acc_reg [0:N-1];
reg           sat_reg [0:N-1];
reg [N-1:0]   valid_reg;

wire advance = m_out_ready || !valid_reg[N-1];

assign s_in_ready  = advance;
assign m_out_data  = acc_reg[N-1];
assign m_out_valid = valid_reg[N-1];
assign busy        = |valid_reg;
assign saturated   = valid_reg[N-1] && sat_reg[N-1] && m_out_ready;

genvar j, o;
generate
    for (j = 0; j < N; j = j + 1) begin : row
        // Stage j's inputs: the bias and the fresh vector for stage 0, else the previous stage.
        wire [N*W-1:0] in_now  = (j == 0) ? s_in_data : in_reg[j == 0 ? 0 : j-1];
        wire [N*W-1:0] acc_now = (j == 0) ? weights[0] : acc_reg[j == 0 ? 0 : j-1];
        wire           sat_now = (j == 0) ? 1'b0 : sat_reg[j == 0 ? 0 : j-1];
        wire           vld_now = (j == 0) ? s_in_valid : valid_reg[j == 0 ? 0 : j-1];
        wire [N*W-1:0] acc_next;
        wire [N-1:0]   sat_next;

        for (o = 0; o < N; o = o + 1) begin : col
            tcu_mac #(
                .DATA_WIDTH(W),
                .BINARY_POINT(BINARY_POINT)
            )
            mac_inst (
                .x(in_now[j*W +: W]),
                .y(weights[j+1][o*W +: W]),
                .z(acc_now[o*W +: W]),
                .r(acc_next[o*W +: W]),
                .saturated(sat_next[o])
            );
        end

        always @(posedge clk) begin
            if (rst) begin
                valid_reg[j] <= 1'b0;
            end else if (advance) begin
                valid_reg[j] <= vld_now;
                in_reg[j]    <= in_now;
                acc_reg[j]   <= acc_next;
                sat_reg[j]   <= sat_now | (|sat_next);
            end
        end
    end
endgenerate

endmodule

`resetall
