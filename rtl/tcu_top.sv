// SPDX-License-Identifier: Apache-2.0
`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * The Tensil compute unit (docs/rtl.md): an AXI4-Stream instruction input, two AXI4 masters for
 * DRAM0 (activations) and DRAM1 (weights), status outputs, the sample stream. Active-low synchronous
 * reset `rst_n` (the spec's, and what AXI infrastructure and Vivado block designs use), registered
 * once (it takes effect one cycle later); the modules inside take an active-high `rst`.
 *
 * Parameters come from a .tarch through tvm_tensil.rtl.params.core_parameters(arch).
 */
module tcu_top #
(
    // Array size N (vectors hold N scalars)
    parameter ARRAY_SIZE = 8,
    // Bits of a scalar
    parameter DATA_WIDTH = 16,
    // Fractional bits of a scalar
    parameter BINARY_POINT = 8,
    // Bytes a scalar occupies in DRAM
    parameter STORAGE_BYTES = 2,
    // Vectors of local memory
    parameter LOCAL_DEPTH = 8192,
    // Vectors of accumulators
    parameter ACC_DEPTH = 2048,
    // Address bits of DRAM0 and DRAM1 vectors
    parameter DRAM0_DEPTH_BITS = 20,
    parameter DRAM1_DEPTH_BITS = 20,
    // SIMD registers per lane
    parameter SIMD_REGISTERS = 1,
    // Instruction layout (tvm_tensil.isa.layout)
    parameter OPERAND0_BITS = 16,
    parameter OPERAND1_BITS = 24,
    parameter OPERAND2_BITS = 16,
    parameter OPERAND0_ADDRESS_BITS = 13,
    parameter OPERAND1_ADDRESS_BITS = 20,
    parameter OPERAND2_ADDRESS_BITS = 13,
    parameter STRIDE0_BITS = 3,
    parameter STRIDE1_BITS = 3,
    parameter SIMD_OPERAND_BITS = 1,
    // 1: the window MatMul (an instruction set extension of ours, docs/isa.md)
    parameter WINDOW_MATMUL = 0,
    // 1: the SIMD ReLU flag (an instruction set extension of ours, docs/isa.md)
    parameter SIMD_RELU = 0,
    // Instruction stream width in bits
    parameter S_AXIS_DATA_WIDTH = 64,
    // DRAM AXI data width, address width, ID width
    parameter AXI_DATA_WIDTH = 64,
    parameter AXI_ADDR_WIDTH = 32,
    parameter AXI_ID_WIDTH = 1
)
(
    input  wire                          clk,
    input  wire                          rst_n,

    // Instructions
    input  wire [S_AXIS_DATA_WIDTH-1:0]  s_axis_instr_tdata,
    input  wire                          s_axis_instr_tvalid,
    output wire                          s_axis_instr_tready,
    input  wire                          s_axis_instr_tlast,

    // DRAM0
    output wire [AXI_ID_WIDTH-1:0]       m_axi_dram0_awid,
    output wire [AXI_ADDR_WIDTH-1:0]     m_axi_dram0_awaddr,
    output wire [8-1:0]                  m_axi_dram0_awlen,
    output wire [3-1:0]                  m_axi_dram0_awsize,
    output wire [2-1:0]                  m_axi_dram0_awburst,
    output wire                          m_axi_dram0_awlock,
    output wire [4-1:0]                  m_axi_dram0_awcache,
    output wire [3-1:0]                  m_axi_dram0_awprot,
    output wire                          m_axi_dram0_awvalid,
    input  wire                          m_axi_dram0_awready,
    output wire [AXI_DATA_WIDTH-1:0]     m_axi_dram0_wdata,
    output wire [AXI_DATA_WIDTH/8-1:0]   m_axi_dram0_wstrb,
    output wire                          m_axi_dram0_wlast,
    output wire                          m_axi_dram0_wvalid,
    input  wire                          m_axi_dram0_wready,
    input  wire [AXI_ID_WIDTH-1:0]       m_axi_dram0_bid,
    input  wire [2-1:0]                  m_axi_dram0_bresp,
    input  wire                          m_axi_dram0_bvalid,
    output wire                          m_axi_dram0_bready,
    output wire [AXI_ID_WIDTH-1:0]       m_axi_dram0_arid,
    output wire [AXI_ADDR_WIDTH-1:0]     m_axi_dram0_araddr,
    output wire [8-1:0]                  m_axi_dram0_arlen,
    output wire [3-1:0]                  m_axi_dram0_arsize,
    output wire [2-1:0]                  m_axi_dram0_arburst,
    output wire                          m_axi_dram0_arlock,
    output wire [4-1:0]                  m_axi_dram0_arcache,
    output wire [3-1:0]                  m_axi_dram0_arprot,
    output wire                          m_axi_dram0_arvalid,
    input  wire                          m_axi_dram0_arready,
    input  wire [AXI_ID_WIDTH-1:0]       m_axi_dram0_rid,
    input  wire [AXI_DATA_WIDTH-1:0]     m_axi_dram0_rdata,
    input  wire [2-1:0]                  m_axi_dram0_rresp,
    input  wire                          m_axi_dram0_rlast,
    input  wire                          m_axi_dram0_rvalid,
    output wire                          m_axi_dram0_rready,

    // DRAM1
    output wire [AXI_ID_WIDTH-1:0]       m_axi_dram1_awid,
    output wire [AXI_ADDR_WIDTH-1:0]     m_axi_dram1_awaddr,
    output wire [8-1:0]                  m_axi_dram1_awlen,
    output wire [3-1:0]                  m_axi_dram1_awsize,
    output wire [2-1:0]                  m_axi_dram1_awburst,
    output wire                          m_axi_dram1_awlock,
    output wire [4-1:0]                  m_axi_dram1_awcache,
    output wire [3-1:0]                  m_axi_dram1_awprot,
    output wire                          m_axi_dram1_awvalid,
    input  wire                          m_axi_dram1_awready,
    output wire [AXI_DATA_WIDTH-1:0]     m_axi_dram1_wdata,
    output wire [AXI_DATA_WIDTH/8-1:0]   m_axi_dram1_wstrb,
    output wire                          m_axi_dram1_wlast,
    output wire                          m_axi_dram1_wvalid,
    input  wire                          m_axi_dram1_wready,
    input  wire [AXI_ID_WIDTH-1:0]       m_axi_dram1_bid,
    input  wire [2-1:0]                  m_axi_dram1_bresp,
    input  wire                          m_axi_dram1_bvalid,
    output wire                          m_axi_dram1_bready,
    output wire [AXI_ID_WIDTH-1:0]       m_axi_dram1_arid,
    output wire [AXI_ADDR_WIDTH-1:0]     m_axi_dram1_araddr,
    output wire [8-1:0]                  m_axi_dram1_arlen,
    output wire [3-1:0]                  m_axi_dram1_arsize,
    output wire [2-1:0]                  m_axi_dram1_arburst,
    output wire                          m_axi_dram1_arlock,
    output wire [4-1:0]                  m_axi_dram1_arcache,
    output wire [3-1:0]                  m_axi_dram1_arprot,
    output wire                          m_axi_dram1_arvalid,
    input  wire                          m_axi_dram1_arready,
    input  wire [AXI_ID_WIDTH-1:0]       m_axi_dram1_rid,
    input  wire [AXI_DATA_WIDTH-1:0]     m_axi_dram1_rdata,
    input  wire [2-1:0]                  m_axi_dram1_rresp,
    input  wire                          m_axi_dram1_rlast,
    input  wire                          m_axi_dram1_rvalid,
    output wire                          m_axi_dram1_rready,

    // Samples (docs/rtl.md): a 64-bit word every `sample interval` cycles (Configure register
    // 11; 0 = off): program counter (all ones when idle), then the units' valid/ready pairs
    output wire [63:0]                   m_axis_sample_tdata,
    output wire                          m_axis_sample_tvalid,
    input  wire                          m_axis_sample_tready,
    output wire                          m_axis_sample_tlast,

    // Status
    output wire [31:0]                   program_counter,
    output wire [15:0]                   activity,
    output wire                          idle,
    output wire                          error,
    output wire                          timeout,
    output wire                          tracepoint,
    output wire                          saturated
);

// The reset, registered: one flop drives every module's reset, so no logic inside depends on the
// rst_n pin combinationally (one cycle of latency; the pin is synchronous to clk anyway).
reg rst;
always @(posedge clk) begin
    rst <= !rst_n;
end

localparam INSTRUCTION_BITS = OPERAND0_BITS + OPERAND1_BITS + OPERAND2_BITS + 8;
localparam V = ARRAY_SIZE * DATA_WIDTH;
// A sample's program counter field while the core is idle
localparam [31:0] SAMPLE_PC_IDLE = '1;

wire [INSTRUCTION_BITS-1:0] instr_data;
wire instr_valid, instr_ready;

tcu_instruction_input #(
    .S_AXIS_DATA_WIDTH(S_AXIS_DATA_WIDTH),
    .INSTRUCTION_BYTES(INSTRUCTION_BITS / 8)
)
input_inst (
    .clk(clk), .rst(rst),
    .s_axis_tdata(s_axis_instr_tdata), .s_axis_tvalid(s_axis_instr_tvalid),
    .s_axis_tready(s_axis_instr_tready), .s_axis_tlast(s_axis_instr_tlast),
    .m_instr_data(instr_data), .m_instr_valid(instr_valid), .m_instr_ready(instr_ready)
);

wire d0_rd_valid, d0_rd_ready, d0_rd_resp, d0_wr_valid, d0_wr_ready, d0_wr_pending;
wire d1_rd_valid, d1_rd_ready, d1_rd_resp, d1_wr_valid, d1_wr_ready, d1_wr_pending;
wire [DRAM0_DEPTH_BITS-1:0] d0_rd_addr, d0_wr_addr;
wire [DRAM1_DEPTH_BITS-1:0] d1_rd_addr, d1_wr_addr;
wire [V-1:0] d0_rd_data, d0_wr_data, d1_rd_data, d1_wr_data;
wire [31:0] d0_rd_count, d0_wr_run, d1_rd_count, d1_wr_run;
wire [31:0] dram0_offset, dram1_offset;
wire [3:0] dram0_cache, dram1_cache;
wire [31:0] sample_interval;

tcu_core #(
    .ARRAY_SIZE(ARRAY_SIZE), .DATA_WIDTH(DATA_WIDTH), .BINARY_POINT(BINARY_POINT),
    .LOCAL_DEPTH(LOCAL_DEPTH), .ACC_DEPTH(ACC_DEPTH),
    .DRAM0_DEPTH_BITS(DRAM0_DEPTH_BITS), .DRAM1_DEPTH_BITS(DRAM1_DEPTH_BITS),
    .SIMD_REGISTERS(SIMD_REGISTERS), .VECTOR_BEATS(ARRAY_SIZE * STORAGE_BYTES * 8 / AXI_DATA_WIDTH),
    .OPERAND0_BITS(OPERAND0_BITS), .OPERAND1_BITS(OPERAND1_BITS), .OPERAND2_BITS(OPERAND2_BITS),
    .OPERAND0_ADDRESS_BITS(OPERAND0_ADDRESS_BITS), .OPERAND1_ADDRESS_BITS(OPERAND1_ADDRESS_BITS),
    .OPERAND2_ADDRESS_BITS(OPERAND2_ADDRESS_BITS), .STRIDE0_BITS(STRIDE0_BITS), .STRIDE1_BITS(STRIDE1_BITS),
    .SIMD_OPERAND_BITS(SIMD_OPERAND_BITS), .INSTRUCTION_BITS(INSTRUCTION_BITS), .WINDOW_MATMUL(WINDOW_MATMUL),
    .SIMD_RELU(SIMD_RELU)
)
core_inst (
    .clk(clk), .rst(rst),
    .s_instr_data(instr_data), .s_instr_valid(instr_valid), .s_instr_ready(instr_ready),
    .m_dram0_rd_valid(d0_rd_valid), .m_dram0_rd_ready(d0_rd_ready), .m_dram0_rd_addr(d0_rd_addr), .m_dram0_rd_count(d0_rd_count),
    .s_dram0_rd_valid(d0_rd_resp), .s_dram0_rd_data(d0_rd_data),
    .m_dram0_wr_valid(d0_wr_valid), .m_dram0_wr_ready(d0_wr_ready), .m_dram0_wr_addr(d0_wr_addr), .m_dram0_wr_run(d0_wr_run),
    .m_dram0_wr_data(d0_wr_data), .dram0_wr_pending(d0_wr_pending),
    .m_dram1_rd_valid(d1_rd_valid), .m_dram1_rd_ready(d1_rd_ready), .m_dram1_rd_addr(d1_rd_addr), .m_dram1_rd_count(d1_rd_count),
    .s_dram1_rd_valid(d1_rd_resp), .s_dram1_rd_data(d1_rd_data),
    .m_dram1_wr_valid(d1_wr_valid), .m_dram1_wr_ready(d1_wr_ready), .m_dram1_wr_addr(d1_wr_addr), .m_dram1_wr_run(d1_wr_run),
    .m_dram1_wr_data(d1_wr_data), .dram1_wr_pending(d1_wr_pending),
    .dram0_offset(dram0_offset), .dram0_cache(dram0_cache), .dram1_offset(dram1_offset), .dram1_cache(dram1_cache),
    .sample_interval(sample_interval), .activity(activity),
    .program_counter(program_counter), .idle(idle), .error(error), .timeout(timeout),
    .tracepoint(tracepoint), .saturated(saturated)
);

tcu_dram_axi #(
    .ARRAY_SIZE(ARRAY_SIZE), .DATA_WIDTH(DATA_WIDTH), .STORAGE_BYTES(STORAGE_BYTES),
    .DEPTH_BITS(DRAM0_DEPTH_BITS), .AXI_DATA_WIDTH(AXI_DATA_WIDTH), .AXI_ADDR_WIDTH(AXI_ADDR_WIDTH),
    .AXI_ID_WIDTH(AXI_ID_WIDTH)
)
dram0_inst (
    .clk(clk), .rst(rst), .offset(dram0_offset), .cache(dram0_cache),
    .s_rd_valid(d0_rd_valid), .s_rd_ready(d0_rd_ready), .s_rd_addr(d0_rd_addr), .s_rd_count(d0_rd_count),
    .m_rd_valid(d0_rd_resp), .m_rd_data(d0_rd_data),
    .s_wr_valid(d0_wr_valid), .s_wr_ready(d0_wr_ready), .s_wr_addr(d0_wr_addr), .s_wr_run(d0_wr_run),
    .s_wr_data(d0_wr_data), .wr_pending(d0_wr_pending),
    .m_axi_awid(m_axi_dram0_awid),
    .m_axi_awaddr(m_axi_dram0_awaddr),
    .m_axi_awlen(m_axi_dram0_awlen),
    .m_axi_awsize(m_axi_dram0_awsize),
    .m_axi_awburst(m_axi_dram0_awburst),
    .m_axi_awlock(m_axi_dram0_awlock),
    .m_axi_awcache(m_axi_dram0_awcache),
    .m_axi_awprot(m_axi_dram0_awprot),
    .m_axi_awvalid(m_axi_dram0_awvalid),
    .m_axi_awready(m_axi_dram0_awready),
    .m_axi_wdata(m_axi_dram0_wdata),
    .m_axi_wstrb(m_axi_dram0_wstrb),
    .m_axi_wlast(m_axi_dram0_wlast),
    .m_axi_wvalid(m_axi_dram0_wvalid),
    .m_axi_wready(m_axi_dram0_wready),
    .m_axi_bid(m_axi_dram0_bid),
    .m_axi_bresp(m_axi_dram0_bresp),
    .m_axi_bvalid(m_axi_dram0_bvalid),
    .m_axi_bready(m_axi_dram0_bready),
    .m_axi_arid(m_axi_dram0_arid),
    .m_axi_araddr(m_axi_dram0_araddr),
    .m_axi_arlen(m_axi_dram0_arlen),
    .m_axi_arsize(m_axi_dram0_arsize),
    .m_axi_arburst(m_axi_dram0_arburst),
    .m_axi_arlock(m_axi_dram0_arlock),
    .m_axi_arcache(m_axi_dram0_arcache),
    .m_axi_arprot(m_axi_dram0_arprot),
    .m_axi_arvalid(m_axi_dram0_arvalid),
    .m_axi_arready(m_axi_dram0_arready),
    .m_axi_rid(m_axi_dram0_rid),
    .m_axi_rdata(m_axi_dram0_rdata),
    .m_axi_rresp(m_axi_dram0_rresp),
    .m_axi_rlast(m_axi_dram0_rlast),
    .m_axi_rvalid(m_axi_dram0_rvalid),
    .m_axi_rready(m_axi_dram0_rready)
);

tcu_dram_axi #(
    .ARRAY_SIZE(ARRAY_SIZE), .DATA_WIDTH(DATA_WIDTH), .STORAGE_BYTES(STORAGE_BYTES),
    .DEPTH_BITS(DRAM1_DEPTH_BITS), .AXI_DATA_WIDTH(AXI_DATA_WIDTH), .AXI_ADDR_WIDTH(AXI_ADDR_WIDTH),
    .AXI_ID_WIDTH(AXI_ID_WIDTH)
)
dram1_inst (
    .clk(clk), .rst(rst), .offset(dram1_offset), .cache(dram1_cache),
    .s_rd_valid(d1_rd_valid), .s_rd_ready(d1_rd_ready), .s_rd_addr(d1_rd_addr), .s_rd_count(d1_rd_count),
    .m_rd_valid(d1_rd_resp), .m_rd_data(d1_rd_data),
    .s_wr_valid(d1_wr_valid), .s_wr_ready(d1_wr_ready), .s_wr_addr(d1_wr_addr), .s_wr_run(d1_wr_run),
    .s_wr_data(d1_wr_data), .wr_pending(d1_wr_pending),
    .m_axi_awid(m_axi_dram1_awid),
    .m_axi_awaddr(m_axi_dram1_awaddr),
    .m_axi_awlen(m_axi_dram1_awlen),
    .m_axi_awsize(m_axi_dram1_awsize),
    .m_axi_awburst(m_axi_dram1_awburst),
    .m_axi_awlock(m_axi_dram1_awlock),
    .m_axi_awcache(m_axi_dram1_awcache),
    .m_axi_awprot(m_axi_dram1_awprot),
    .m_axi_awvalid(m_axi_dram1_awvalid),
    .m_axi_awready(m_axi_dram1_awready),
    .m_axi_wdata(m_axi_dram1_wdata),
    .m_axi_wstrb(m_axi_dram1_wstrb),
    .m_axi_wlast(m_axi_dram1_wlast),
    .m_axi_wvalid(m_axi_dram1_wvalid),
    .m_axi_wready(m_axi_dram1_wready),
    .m_axi_bid(m_axi_dram1_bid),
    .m_axi_bresp(m_axi_dram1_bresp),
    .m_axi_bvalid(m_axi_dram1_bvalid),
    .m_axi_bready(m_axi_dram1_bready),
    .m_axi_arid(m_axi_dram1_arid),
    .m_axi_araddr(m_axi_dram1_araddr),
    .m_axi_arlen(m_axi_dram1_arlen),
    .m_axi_arsize(m_axi_dram1_arsize),
    .m_axi_arburst(m_axi_dram1_arburst),
    .m_axi_arlock(m_axi_dram1_arlock),
    .m_axi_arcache(m_axi_dram1_arcache),
    .m_axi_arprot(m_axi_dram1_arprot),
    .m_axi_arvalid(m_axi_dram1_arvalid),
    .m_axi_arready(m_axi_dram1_arready),
    .m_axi_rid(m_axi_dram1_rid),
    .m_axi_rdata(m_axi_dram1_rdata),
    .m_axi_rresp(m_axi_dram1_rresp),
    .m_axi_rlast(m_axi_dram1_rlast),
    .m_axi_rvalid(m_axi_dram1_rvalid),
    .m_axi_rready(m_axi_dram1_rready)
);

// -- sample stream ---------------------------------------------------------------------------------
// A sample is taken every `sample_interval` cycles; one the receiver has not taken yet is kept (AXI-
// Stream data may not change while valid) and the samples due meanwhile are dropped, counted in
// `samples_dropped` so that a host can tell a gap from an idle core.
reg  [31:0] sample_count;
reg  [63:0] sample_data;
reg         sample_valid;
reg  [31:0] samples_dropped;
wire        sample_due = sample_interval != 0 && sample_count + 1 >= sample_interval;

always @(posedge clk) begin
    if (rst) begin
        sample_count <= '0;
        sample_valid <= 1'b0;
        samples_dropped <= '0;
    end else begin
        if (m_axis_sample_tready) sample_valid <= 1'b0;
        sample_count <= sample_due || sample_interval == 0 ? '0 : sample_count + 1;
        if (sample_due) begin
            if (sample_valid && !m_axis_sample_tready) begin
                samples_dropped <= samples_dropped + 1;
            end else begin
                sample_valid <= 1'b1;
                sample_data <= {16'd0, activity, idle ? SAMPLE_PC_IDLE : program_counter};
            end
        end
    end
end

assign m_axis_sample_tdata = sample_data;
assign m_axis_sample_tvalid = sample_valid;
assign m_axis_sample_tlast = 1'b1;

wire unused_samples_dropped = &{1'b0, samples_dropped};

endmodule

`resetall
