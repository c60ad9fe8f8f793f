// SPDX-License-Identifier: Apache-2.0
`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * One DRAM bank as an AXI4 master: the core's runs of consecutive vectors become bursts.
 *
 * A vector is ARRAY_SIZE scalars of STORAGE_BYTES bytes (little-endian; an 18-bit scalar is
 * sign-extended to 4 bytes) at byte address offset * 64 KiB + vector * VECTOR_BYTES. A run of
 * consecutive vectors becomes INCR bursts of up to 256 beats that never cross a 4 KiB boundary (AXI
 * forbids that), so a DataMove with DRAM stride 1 streams at the bus width with a handful of
 * requests. Reads: a request names the first vector and the run length; up to MAX_OUTSTANDING bursts
 * in flight, data returned in order, one vector per BEATS beats. Writes: vectors come one by one, the
 * first of a run carrying the run length; address and data channels run independently; `wr_pending`
 * stays high until every write response has arrived.
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
    input  wire [31:0]                      s_rd_count,     // vectors in the run, at least 1
    output reg                              m_rd_valid,
    output reg  [ARRAY_SIZE*DATA_WIDTH-1:0] m_rd_data,

    // Vector writes
    input  wire                             s_wr_valid,
    output wire                             s_wr_ready,
    input  wire [DEPTH_BITS-1:0]            s_wr_addr,
    input  wire [31:0]                      s_wr_run,       // first vector of a run: its length; else 0
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
// AXI4: a burst is at most 256 beats and never crosses a 4 KiB boundary; bursts increment; data
// accesses are unprivileged, secure, data (AxPROT = 0).
localparam MAX_BURST_BEATS = 256;
localparam BOUNDARY_BYTES = 4096;
localparam [1:0] AXI_BURST_INCR = 2'b01;
localparam [2:0] AXI_PROT_DATA = 3'b000;

// Illegal configurations stop elaboration.
generate
    if (VECTOR_BYTES % BUS_BYTES != 0) begin : g_illegal_0
        $fatal(1, "tcu_dram_axi: a vector (%0d bytes) must be a whole number of AXI beats (%0d bytes)", VECTOR_BYTES, BUS_BYTES);
    end
    if (BEATS > MAX_BURST_BEATS) begin : g_illegal_1
        $fatal(1, "tcu_dram_axi: a vector needs more than 256 beats");
    end
    if (VECTOR_BYTES > BOUNDARY_BYTES) begin : g_illegal_2
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

localparam BB = 40;  // beats of a run: up to 2^32 vectors of up to 256 beats

// The next burst of a run at byte address a with `left` beats to go: up to 256 beats, up to the 4 KiB boundary.
function automatic [8:0] burst_beats(input [11:0] a, input [BB-1:0] left);
    logic [12:0] room;
    room = (13'(BOUNDARY_BYTES) - 13'(a)) >> SIZE;
    burst_beats = left < BB'(room) ? (left < BB'(MAX_BURST_BEATS) ? 9'(left) : 9'(MAX_BURST_BEATS)) :
                  (room < 13'(MAX_BURST_BEATS) ? 9'(room) : 9'(MAX_BURST_BEATS));
endfunction

// -- reads ------------------------------------------------------------------------------------------
reg [OUT_BITS:0]         rd_outstanding;
reg                      ar_active;
reg [AXI_ADDR_WIDTH-1:0] ar_addr;
reg [BB-1:0]             ar_left;
wire [8:0]               ar_beats = burst_beats(ar_addr[11:0], ar_left);

assign m_axi_arid    = '0;
assign m_axi_araddr  = ar_addr;
assign m_axi_arlen   = 8'(ar_beats - 9'd1);
assign m_axi_arsize  = 3'(SIZE);
assign m_axi_arburst = AXI_BURST_INCR;
assign m_axi_arlock  = 1'b0;
assign m_axi_arcache = cache;
assign m_axi_arprot  = AXI_PROT_DATA;
assign m_axi_arvalid = ar_active && rd_outstanding < (OUT_BITS+1)'(MAX_OUTSTANDING);
assign s_rd_ready    = !ar_active && !rst;
assign m_axi_rready  = 1'b1;

reg [VECTOR_BYTES*8-1:0] rd_shift;
reg [8:0]                rd_beat;
wire [VECTOR_BYTES*8-1:0] rd_full;  // the vector once this beat is in
generate
    if (BEATS > 1) begin : g_rd_beats
        assign rd_full = {m_axi_rdata, rd_shift[VECTOR_BYTES*8-1:AXI_DATA_WIDTH]};
    end else begin : g_rd_beat
        assign rd_full = m_axi_rdata;
    end
endgenerate

always @(posedge clk) begin
    m_rd_valid <= 1'b0;
    if (rst) begin
        rd_outstanding <= '0;
        rd_beat <= '0;
        ar_active <= 1'b0;
    end else begin
        rd_outstanding <= rd_outstanding + (OUT_BITS+1)'(m_axi_arvalid && m_axi_arready)
                                         - (OUT_BITS+1)'(m_axi_rvalid && m_axi_rlast);
        if (s_rd_valid && s_rd_ready) begin
            ar_active <= s_rd_count != 0;
            ar_addr <= byte_address(s_rd_addr);
            ar_left <= BB'(s_rd_count) * BB'(BEATS);
        end else if (m_axi_arvalid && m_axi_arready) begin
            ar_addr <= ar_addr + (AXI_ADDR_WIDTH'(ar_beats) << SIZE);
            ar_left <= ar_left - BB'(ar_beats);
            if (ar_left == BB'(ar_beats)) ar_active <= 1'b0;
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
// Vectors wait in a data queue and beats stream from its head. The first vector of a run starts the
// address generator, which issues the run's bursts and queues each burst's length for the data side
// (it needs them for WLAST); so AW and W run independently.
localparam Q_BITS = 2;
localparam Q = 1 << Q_BITS;
localparam L_BITS = 3;
localparam L = 1 << L_BITS;
reg [VECTOR_BYTES*8-1:0] wq_data [0:Q-1];
reg [Q_BITS:0]           wq_count;
reg [Q_BITS-1:0]         wq_head, wq_tail;
reg                      aw_active;
reg [AXI_ADDR_WIDTH-1:0] aw_addr;
reg [BB-1:0]             aw_left;
wire [8:0]               aw_beats = burst_beats(aw_addr[11:0], aw_left);
reg [8:0]                wl_len [0:L-1];       // beats of the bursts issued, for WLAST
reg [L_BITS:0]           wl_count;
reg [L_BITS-1:0]         wl_head, wl_tail;
reg [8:0]                w_beat;               // beat within the vector
reg [8:0]                w_burst_beat;         // beat within the burst
reg [15:0]               b_outstanding;

assign s_wr_ready    = !rst && 32'(wq_count) < Q && (s_wr_run == 0 || !aw_active);
assign m_axi_awid    = '0;
assign m_axi_awaddr  = aw_addr;
assign m_axi_awlen   = 8'(aw_beats - 9'd1);
assign m_axi_awsize  = 3'(SIZE);
assign m_axi_awburst = AXI_BURST_INCR;
assign m_axi_awlock  = 1'b0;
assign m_axi_awcache = cache;
assign m_axi_awprot  = AXI_PROT_DATA;
assign m_axi_awvalid = aw_active && 32'(wl_count) < L;
wire [VECTOR_BYTES*8-1:0] w_vector = wq_data[wq_head];
assign m_axi_wdata   = w_vector[32'(w_beat) * AXI_DATA_WIDTH +: AXI_DATA_WIDTH];
assign m_axi_wstrb   = '1;
assign m_axi_wlast   = w_burst_beat == wl_len[wl_head] - 9'd1;
assign m_axi_wvalid  = wq_count != 0 && wl_count != 0;
assign m_axi_bready  = 1'b1;
assign wr_pending    = wq_count != 0 || aw_active || wl_count != 0 || b_outstanding != 0;

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
wire w_burst_done = w_go && m_axi_wlast;

always @(posedge clk) begin
    if (rst) begin
        wq_count <= '0;
        wq_head <= '0;
        wq_tail <= '0;
        aw_active <= 1'b0;
        wl_count <= '0;
        wl_head <= '0;
        wl_tail <= '0;
        w_beat <= '0;
        w_burst_beat <= '0;
        b_outstanding <= '0;
    end else begin
        b_outstanding <= b_outstanding + 16'(aw_go) - 16'(m_axi_bvalid);
        if (wr_take) begin
            wq_data[wq_tail] <= packed_wr;
            wq_tail <= wq_tail + 1;
        end
        if (wr_take && s_wr_run != 0) begin
            aw_active <= 1'b1;
            aw_addr <= byte_address(s_wr_addr);
            aw_left <= BB'(s_wr_run) * BB'(BEATS);
        end else if (aw_go) begin
            aw_addr <= aw_addr + (AXI_ADDR_WIDTH'(aw_beats) << SIZE);
            aw_left <= aw_left - BB'(aw_beats);
            if (aw_left == BB'(aw_beats)) aw_active <= 1'b0;
        end
        if (aw_go) begin
            wl_len[wl_tail] <= aw_beats;
            wl_tail <= wl_tail + 1;
        end
        wl_count <= wl_count + (L_BITS+1)'(aw_go) - (L_BITS+1)'(w_burst_done);
        if (w_burst_done) wl_head <= wl_head + 1;
        if (w_go) begin
            w_beat <= w_vector_done ? '0 : w_beat + 1;
            w_burst_beat <= w_burst_done ? '0 : w_burst_beat + 1;
        end
        if (w_vector_done) wq_head <= wq_head + 1;
        wq_count <= wq_count + (Q_BITS+1)'(wr_take) - (Q_BITS+1)'(w_vector_done);
    end
end

wire unused_ok = &{1'b0, m_axi_bid, m_axi_bresp, m_axi_rid, m_axi_rresp, m_axi_rlast, rd_shift, w_vector};

endmodule

`resetall
