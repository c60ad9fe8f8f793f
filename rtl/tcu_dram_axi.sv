// SPDX-License-Identifier: Apache-2.0
`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * One DRAM bank as an AXI4 master: the core's vector requests become bursts.
 *
 * A vector is ARRAY_SIZE scalars of STORAGE_BYTES bytes (little-endian; an 18-bit scalar is
 * sign-extended to 4 bytes) at byte address offset * 64 KiB + vector * VECTOR_BYTES, one burst of
 * VECTOR_BYTES / bus bytes beats (INCR), split in two where it would cross a 4 KiB boundary
 * (AXI forbids that; it happens for vectors like 24 bytes). Reads: up to MAX_OUTSTANDING bursts in
 * flight, data returned in request order. Writes: address and data channels run independently;
 * `wr_pending` stays high until every write response has arrived.
 */
module tcu_dram_axi #
(
    // Scalars per vector
    parameter ARRAY_SIZE = 8,
    // Bits of a scalar
    parameter DATA_WIDTH = 16,
    // Bytes a scalar occupies in DRAM
    parameter STORAGE_BYTES = 2,
    // Address bits of a vector index
    parameter DEPTH_BITS = 20,
    // AXI data bus width in bits
    parameter AXI_DATA_WIDTH = 64,
    // AXI address width in bits
    parameter AXI_ADDR_WIDTH = 32,
    // AXI ID width
    parameter AXI_ID_WIDTH = 1,
    // Read bursts in flight at most (a power of two)
    parameter MAX_OUTSTANDING = 8
)
(
    input  wire                             clk,
    input  wire                             rst,

    // Configuration (Configure registers 0/1 or 4/5)
    input  wire [31:0]                      offset,
    input  wire [3:0]                       cache,

    // Vector reads: requests, then responses in order
    input  wire                             s_rd_valid,
    output wire                             s_rd_ready,
    input  wire [DEPTH_BITS-1:0]            s_rd_addr,
    output reg                              m_rd_valid,
    output reg  [ARRAY_SIZE*DATA_WIDTH-1:0] m_rd_data,

    // Vector writes
    input  wire                             s_wr_valid,
    output wire                             s_wr_ready,
    input  wire [DEPTH_BITS-1:0]            s_wr_addr,
    input  wire [ARRAY_SIZE*DATA_WIDTH-1:0] s_wr_data,
    output wire                             wr_pending,

    // AXI4 master
    output wire [AXI_ID_WIDTH-1:0]          m_axi_awid,
    output wire [AXI_ADDR_WIDTH-1:0]        m_axi_awaddr,
    output wire [7:0]                       m_axi_awlen,
    output wire [2:0]                       m_axi_awsize,
    output wire [1:0]                       m_axi_awburst,
    output wire                             m_axi_awlock,
    output wire [3:0]                       m_axi_awcache,
    output wire [2:0]                       m_axi_awprot,
    output wire                             m_axi_awvalid,
    input  wire                             m_axi_awready,
    output wire [AXI_DATA_WIDTH-1:0]        m_axi_wdata,
    output wire [AXI_DATA_WIDTH/8-1:0]      m_axi_wstrb,
    output wire                             m_axi_wlast,
    output wire                             m_axi_wvalid,
    input  wire                             m_axi_wready,
    input  wire [AXI_ID_WIDTH-1:0]          m_axi_bid,
    input  wire [1:0]                       m_axi_bresp,
    input  wire                             m_axi_bvalid,
    output wire                             m_axi_bready,
    output wire [AXI_ID_WIDTH-1:0]          m_axi_arid,
    output wire [AXI_ADDR_WIDTH-1:0]        m_axi_araddr,
    output wire [7:0]                       m_axi_arlen,
    output wire [2:0]                       m_axi_arsize,
    output wire [1:0]                       m_axi_arburst,
    output wire                             m_axi_arlock,
    output wire [3:0]                       m_axi_arcache,
    output wire [2:0]                       m_axi_arprot,
    output wire                             m_axi_arvalid,
    input  wire                             m_axi_arready,
    input  wire [AXI_ID_WIDTH-1:0]          m_axi_rid,
    input  wire [AXI_DATA_WIDTH-1:0]        m_axi_rdata,
    input  wire [1:0]                       m_axi_rresp,
    input  wire                             m_axi_rlast,
    input  wire                             m_axi_rvalid,
    output wire                             m_axi_rready
);

localparam N = ARRAY_SIZE;
localparam W = DATA_WIDTH;
localparam SW = STORAGE_BYTES * 8;
localparam VECTOR_BYTES = N * STORAGE_BYTES;
localparam BUS_BYTES = AXI_DATA_WIDTH / 8;
localparam BEATS = VECTOR_BYTES / BUS_BYTES;
localparam OUT_BITS = $clog2(MAX_OUTSTANDING);
localparam SIZE = $clog2(BUS_BYTES);

// Illegal configurations stop elaboration.
generate
    if (VECTOR_BYTES % BUS_BYTES != 0) begin : g_illegal_0
        $fatal(1, "tcu_dram_axi: a vector (%0d bytes) must be a whole number of AXI beats (%0d bytes)", VECTOR_BYTES, BUS_BYTES);
    end
    if (BEATS > 256) begin : g_illegal_1
        $fatal(1, "tcu_dram_axi: a vector needs more than 256 beats");
    end
    if (VECTOR_BYTES > 4096) begin : g_illegal_2
        $fatal(1, "tcu_dram_axi: vectors over 4 KiB");
    end
    if (W > SW) begin : g_illegal_3
        $fatal(1, "tcu_dram_axi: DATA_WIDTH wider than its storage");
    end
    if ((1 << OUT_BITS) != MAX_OUTSTANDING) begin : g_illegal_4
        $fatal(1, "tcu_dram_axi: MAX_OUTSTANDING must be a power of two");
    end
endgenerate

function automatic [AXI_ADDR_WIDTH-1:0] byte_address(input [DEPTH_BITS-1:0] vector);
    byte_address = (AXI_ADDR_WIDTH'(offset) << 16) + AXI_ADDR_WIDTH'(vector) * AXI_ADDR_WIDTH'(VECTOR_BYTES);
endfunction

// A vector at byte address a: the beats of its first burst (up to the 4 KiB boundary).
function automatic [8:0] first_beats(input [11:0] a);
    logic [12:0] room;
    room = 13'd4096 - 13'(a[11:0]);
    first_beats = 32'(room) >= VECTOR_BYTES ? 9'(BEATS) : 9'(32'(room) / BUS_BYTES);
endfunction

// -- reads ------------------------------------------------------------------------------------------
reg [OUT_BITS:0]         rd_outstanding;
reg                      ar_valid, ar_split;
reg [AXI_ADDR_WIDTH-1:0] ar_addr, ar_split_addr;
reg [7:0]                ar_len, ar_split_len;

assign m_axi_arid    = '0;
assign m_axi_araddr  = ar_addr;
assign m_axi_arlen   = ar_len;
assign m_axi_arsize  = 3'(SIZE);
assign m_axi_arburst = 2'b01;
assign m_axi_arlock  = 1'b0;
assign m_axi_arcache = cache;
assign m_axi_arprot  = 3'b000;
assign m_axi_arvalid = ar_valid && rd_outstanding < (OUT_BITS+1)'(MAX_OUTSTANDING);
assign s_rd_ready    = !ar_valid && !rst;
assign m_axi_rready  = 1'b1;

wire [AXI_ADDR_WIDTH-1:0] rd_byte = byte_address(s_rd_addr);
wire [8:0]                rd_first = first_beats(rd_byte[11:0]);

reg [VECTOR_BYTES*8-1:0] rd_shift;
reg [8:0]                rd_beat;
wire [VECTOR_BYTES*8-1:0] rd_full = BEATS > 1 ?
    {m_axi_rdata, rd_shift[VECTOR_BYTES*8-1:AXI_DATA_WIDTH]} : (VECTOR_BYTES*8)'(m_axi_rdata);

always @(posedge clk) begin
    m_rd_valid <= 1'b0;
    if (rst) begin
        rd_outstanding <= '0;
        rd_beat <= '0;
        ar_valid <= 1'b0;
        ar_split <= 1'b0;
    end else begin
        rd_outstanding <= rd_outstanding + (OUT_BITS+1)'(m_axi_arvalid && m_axi_arready)
                                         - (OUT_BITS+1)'(m_axi_rvalid && m_axi_rlast);
        if (s_rd_valid && s_rd_ready) begin
            ar_valid <= 1'b1;
            ar_addr <= rd_byte;
            ar_len <= 8'(rd_first - 1);
            ar_split <= rd_first != 9'(BEATS);
            ar_split_addr <= rd_byte + AXI_ADDR_WIDTH'(rd_first) * AXI_ADDR_WIDTH'(BUS_BYTES);
            ar_split_len <= 8'(9'(BEATS) - rd_first - 9'd1);
        end else if (m_axi_arvalid && m_axi_arready) begin
            if (ar_split) begin
                ar_addr <= ar_split_addr;
                ar_len <= ar_split_len;
                ar_split <= 1'b0;
            end else begin
                ar_valid <= 1'b0;
            end
        end
        // A vector is BEATS beats, whichever bursts they came in.
        if (m_axi_rvalid) begin
            rd_shift <= rd_full;
            if (32'(rd_beat) == BEATS - 1) begin
                rd_beat <= '0;
                m_rd_valid <= 1'b1;
                for (int lane = 0; lane < N; lane = lane + 1) begin
                    m_rd_data[lane*W +: W] <= rd_full[lane*SW +: W];
                end
            end else begin
                rd_beat <= rd_beat + 1;
            end
        end
    end
end

// -- writes -----------------------------------------------------------------------------------------
// Vectors wait in a data queue (W beats stream from its head) and their bursts in an address queue,
// so AW and W run independently and a new vector is taken while earlier beats are still going out.
localparam Q_BITS = 2;
localparam Q = 1 << Q_BITS;
reg [VECTOR_BYTES*8-1:0] wq_data [0:Q-1];
reg [8:0]                wq_first [0:Q-1];    // beats of the vector's first burst
reg [Q_BITS:0]           wq_count;
reg [Q_BITS-1:0]         wq_head, wq_tail;
reg [AXI_ADDR_WIDTH-1:0] awq_addr [0:2*Q-1];
reg [7:0]                awq_len [0:2*Q-1];
reg [Q_BITS+1:0]         awq_count;
reg [Q_BITS:0]           awq_head, awq_tail;
reg [8:0]                w_beat;
reg [15:0]               b_outstanding;

wire [AXI_ADDR_WIDTH-1:0] wr_byte = byte_address(s_wr_addr);
wire [8:0]                wr_first = first_beats(wr_byte[11:0]);
wire                      wr_split = wr_first != 9'(BEATS);

assign s_wr_ready    = !rst && 32'(wq_count) < Q && 32'(awq_count) + 2 <= 2 * Q;
assign m_axi_awid    = '0;
assign m_axi_awaddr  = awq_addr[awq_head];
assign m_axi_awlen   = awq_len[awq_head];
assign m_axi_awsize  = 3'(SIZE);
assign m_axi_awburst = 2'b01;
assign m_axi_awlock  = 1'b0;
assign m_axi_awcache = cache;
assign m_axi_awprot  = 3'b000;
assign m_axi_awvalid = awq_count != 0;
wire [VECTOR_BYTES*8-1:0] w_vector = wq_data[wq_head] >> (32'(w_beat) * AXI_DATA_WIDTH);
assign m_axi_wdata   = w_vector[AXI_DATA_WIDTH-1:0];
assign m_axi_wstrb   = '1;
assign m_axi_wlast   = w_beat == wq_first[wq_head] - 1 || 32'(w_beat) == BEATS - 1;
assign m_axi_wvalid  = wq_count != 0;
assign m_axi_bready  = 1'b1;
assign wr_pending    = wq_count != 0 || awq_count != 0 || b_outstanding != 0;

reg [VECTOR_BYTES*8-1:0] packed_wr;
always @* begin
    for (int lane = 0; lane < N; lane = lane + 1) begin
        packed_wr[lane*SW +: SW] = SW'(signed'(s_wr_data[lane*W +: W]));
    end
end

wire wr_take = s_wr_valid && s_wr_ready;
wire aw_go = m_axi_awvalid && m_axi_awready;
wire w_go = m_axi_wvalid && m_axi_wready;
wire w_vector_done = w_go && 32'(w_beat) == BEATS - 1;

always @(posedge clk) begin
    if (rst) begin
        wq_count <= '0;
        wq_head <= '0;
        wq_tail <= '0;
        awq_count <= '0;
        awq_head <= '0;
        awq_tail <= '0;
        w_beat <= '0;
        b_outstanding <= '0;
    end else begin
        b_outstanding <= b_outstanding + 16'(aw_go) - 16'(m_axi_bvalid);
        if (wr_take) begin
            wq_data[wq_tail] <= packed_wr;
            wq_first[wq_tail] <= wr_first;
            wq_tail <= wq_tail + 1;
            awq_addr[awq_tail[Q_BITS:0]] <= wr_byte;
            awq_len[awq_tail[Q_BITS:0]] <= 8'(wr_first - 9'd1);
            if (wr_split) begin
                awq_addr[awq_tail + 1] <= wr_byte + AXI_ADDR_WIDTH'(wr_first) * AXI_ADDR_WIDTH'(BUS_BYTES);
                awq_len[awq_tail + 1] <= 8'(9'(BEATS) - wr_first - 9'd1);
            end
            awq_tail <= awq_tail + (wr_split ? 2 : 1);
        end
        if (aw_go) awq_head <= awq_head + 1;
        awq_count <= awq_count + (wr_take ? (wr_split ? 2 : 1) : 0) - (Q_BITS+2)'(aw_go);
        if (w_go) w_beat <= w_vector_done ? '0 : w_beat + 1;
        if (w_vector_done) wq_head <= wq_head + 1;
        wq_count <= wq_count + (Q_BITS+1)'(wr_take) - (Q_BITS+1)'(w_vector_done);
    end
end

wire unused_ok = &{1'b0, m_axi_bid, m_axi_bresp, m_axi_rid, m_axi_rresp, m_axi_rlast, rd_shift, w_vector};

endmodule

`resetall
