// SPDX-License-Identifier: Apache-2.0
`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * Instruction input: an AXI4-Stream of bytes (instructions packed little-endian across beats,
 * docs/rtl.md) re-cut into instruction words of INSTRUCTION_BYTES bytes.
 *
 * A byte buffer holds up to INSTRUCTION_BYTES + BUS_BYTES bytes; a beat is accepted whenever it
 * fits after this cycle's instruction leaves, so the stream runs at full rate when the decoder
 * takes one instruction per beat (or faster). tlast carries no meaning here.
 */
module tcu_instruction_input #
(
    // Width of the AXI4-Stream data bus in bits (a multiple of 8)
    parameter S_AXIS_DATA_WIDTH = 64,
    // Bytes per instruction (from the instruction layout)
    parameter INSTRUCTION_BYTES = 8
)
(
    input  wire                          clk,
    input  wire                          rst,

    // Instruction stream
    input  wire [S_AXIS_DATA_WIDTH-1:0]  s_axis_tdata,
    input  wire                          s_axis_tvalid,
    output wire                          s_axis_tready,
    input  wire                          s_axis_tlast,

    // Instruction words
    output wire [INSTRUCTION_BYTES*8-1:0] m_instr_data,
    output wire                           m_instr_valid,
    input  wire                           m_instr_ready
);

localparam BUS_BYTES = S_AXIS_DATA_WIDTH / 8;
localparam CAPACITY = INSTRUCTION_BYTES + BUS_BYTES;
localparam COUNT_BITS = $clog2(CAPACITY + 1);

// Illegal configurations stop elaboration.
generate
    if (S_AXIS_DATA_WIDTH % 8 != 0) begin : g_illegal_0
        $fatal(1, "tcu_instruction_input: S_AXIS_DATA_WIDTH must be a multiple of 8");
    end
    if (INSTRUCTION_BYTES < 2) begin : g_illegal_1
        $fatal(1, "tcu_instruction_input: INSTRUCTION_BYTES must be at least 2");
    end
endgenerate

reg [CAPACITY*8-1:0]  buffer;
reg [COUNT_BITS-1:0]  count;

wire emit = m_instr_valid && m_instr_ready;
wire [COUNT_BITS-1:0] after_emit = emit ? count - COUNT_BITS'(INSTRUCTION_BYTES) : count;
wire accept = s_axis_tvalid && s_axis_tready;

assign m_instr_valid = count >= COUNT_BITS'(INSTRUCTION_BYTES);
assign m_instr_data  = buffer[INSTRUCTION_BYTES*8-1:0];
assign s_axis_tready = !rst && (32'(after_emit) + BUS_BYTES <= CAPACITY);

wire [CAPACITY*8-1:0] shifted = emit ? buffer >> (INSTRUCTION_BYTES*8) : buffer;
wire [CAPACITY*8-1:0] beat = {{(CAPACITY*8-S_AXIS_DATA_WIDTH){1'b0}}, s_axis_tdata};

always @(posedge clk) begin
    if (rst) begin
        count <= '0;
        buffer <= '0;
    end else begin
        if (accept) begin
            buffer <= shifted | (beat << (32'(after_emit) * 8));
            count <= after_emit + COUNT_BITS'(BUS_BYTES);
        end else if (emit) begin
            buffer <= shifted;
            count <= after_emit;
        end
    end
end

wire unused_ok = &{1'b0, s_axis_tlast};

endmodule

`resetall
