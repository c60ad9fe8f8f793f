# A Zynq block design around the packaged TCU, as in Tensil's PYNQ designs, and its bitstream.
#
#   vivado -mode batch -source rtl/vivado/block_design.tcl -tclargs build/vivado/pynqz1/params.tcl build/vivado/pynqz1
#
# Zynq-7000 (xc7z*): processing_system7 with S_AXI_HP0 (DRAM0 and the DMA) and S_AXI_HP2 (DRAM1),
# M_AXI_GP0 for the DMA's registers, FCLK_CLK0 at the architecture's clock. Zynq UltraScale+ (xczu*):
# zynq_ultra_ps_e with S_AXI_HP0_FPD / S_AXI_HP2_FPD and M_AXI_HPM0_LPD. An AXI DMA (axi_dma_0,
# simple mode, MM2S only) streams instructions into s_axis_instr. Outputs tensil_<arch>.bit and .hwh
# for pynq.Overlay. Not run in CI: this repository has no Vivado (docs/boards.md).

lassign $argv params_tcl out_dir
source $params_tcl
set proj [file join $out_dir project]
create_project tensil_$TCU_ARCH $proj -part $TCU_PART -force
set_property ip_repo_paths [file join $out_dir ip] [current_project]
update_ip_catalog
create_bd_design tensil

set zynqmp [string match xczu* $TCU_PART]
if {$zynqmp} {
    set ps [create_bd_cell -type ip -vlnv xilinx.com:ip:zynq_ultra_ps_e zynq_ps]
    apply_bd_automation -rule xilinx.com:bd_rule:zynq_ultra_ps_e -config {apply_board_preset 1} $ps
    set_property -dict [list CONFIG.PSU__USE__S_AXI_GP2 1 CONFIG.PSU__USE__S_AXI_GP4 1 \
        CONFIG.PSU__SAXIGP2__DATA_WIDTH $TCU_AXI_DATA_WIDTH CONFIG.PSU__SAXIGP4__DATA_WIDTH $TCU_AXI_DATA_WIDTH \
        CONFIG.PSU__USE__M_AXI_GP0 0 CONFIG.PSU__USE__M_AXI_GP1 0 CONFIG.PSU__USE__M_AXI_GP2 1 \
        CONFIG.PSU__CRL_APB__PL0_REF_CTRL__FREQMHZ $TCU_CLOCK_MHZ] $ps
    set hp_dram0 S_AXI_HP0_FPD
    set hp_dram1 S_AXI_HP2_FPD
    set gp M_AXI_HPM0_LPD
    set fclk pl_clk0
} else {
    set ps [create_bd_cell -type ip -vlnv xilinx.com:ip:processing_system7 zynq_ps]
    apply_bd_automation -rule xilinx.com:bd_rule:processing_system7 -config {make_external "FIXED_IO, DDR" apply_board_preset 1} $ps
    set_property -dict [list CONFIG.PCW_USE_S_AXI_HP0 1 CONFIG.PCW_USE_S_AXI_HP2 1 \
        CONFIG.PCW_S_AXI_HP0_DATA_WIDTH $TCU_AXI_DATA_WIDTH CONFIG.PCW_S_AXI_HP2_DATA_WIDTH $TCU_AXI_DATA_WIDTH \
        CONFIG.PCW_FPGA0_PERIPHERAL_FREQMHZ $TCU_CLOCK_MHZ] $ps
    set hp_dram0 S_AXI_HP0
    set hp_dram1 S_AXI_HP2
    set gp M_AXI_GP0
    set fclk FCLK_CLK0
}

set tcu [create_bd_cell -type ip -vlnv tvm-tensil:tensil:tcu_top:1.0 tcu]
set dma [create_bd_cell -type ip -vlnv xilinx.com:ip:axi_dma axi_dma_0]
set_property -dict [list CONFIG.c_include_sg 0 CONFIG.c_include_s2mm 0 CONFIG.c_sg_length_width 26 \
    CONFIG.c_m_axis_mm2s_tdata_width [dict get $TCU_PARAMS S_AXIS_DATA_WIDTH] \
    CONFIG.c_m_axi_mm2s_data_width $TCU_AXI_DATA_WIDTH CONFIG.c_mm2s_burst_size 64] $dma
connect_bd_intf_net [get_bd_intf_pins axi_dma_0/M_AXIS_MM2S] [get_bd_intf_pins tcu/s_axis_instr]

# DRAM0 and the DMA's reads share HP0; DRAM1 has HP2 to itself (weights stream while activations move).
apply_bd_automation -rule xilinx.com:bd_rule:axi4 -config [list Clk_master /zynq_ps/$fclk Clk_slave /zynq_ps/$fclk \
    Clk_xbar /zynq_ps/$fclk Master /tcu/m_axi_dram0 Slave /zynq_ps/$hp_dram0 intc_ip {New AXI SmartConnect}] \
    [get_bd_intf_pins zynq_ps/$hp_dram0]
apply_bd_automation -rule xilinx.com:bd_rule:axi4 -config [list Clk_master /zynq_ps/$fclk Clk_slave /zynq_ps/$fclk \
    Clk_xbar /zynq_ps/$fclk Master /axi_dma_0/M_AXI_MM2S Slave /zynq_ps/$hp_dram0 intc_ip {Auto}] \
    [get_bd_intf_pins axi_dma_0/M_AXI_MM2S]
apply_bd_automation -rule xilinx.com:bd_rule:axi4 -config [list Clk_master /zynq_ps/$fclk Clk_slave /zynq_ps/$fclk \
    Clk_xbar /zynq_ps/$fclk Master /tcu/m_axi_dram1 Slave /zynq_ps/$hp_dram1 intc_ip {New AXI SmartConnect}] \
    [get_bd_intf_pins zynq_ps/$hp_dram1]
apply_bd_automation -rule xilinx.com:bd_rule:axi4 -config [list Clk_master /zynq_ps/$fclk Clk_slave /zynq_ps/$fclk \
    Clk_xbar /zynq_ps/$fclk Master /zynq_ps/$gp Slave /axi_dma_0/S_AXI_LITE intc_ip {New AXI Interconnect}] \
    [get_bd_intf_pins axi_dma_0/S_AXI_LITE]
# The sample stream is left unconnected: its tready reads low, so samples are dropped (the core runs
# on regardless); connect it to a second DMA's S2MM to record them.
set_property -dict [list CONFIG.POLARITY ACTIVE_LOW] [get_bd_pins tcu/rst_n]
connect_bd_net [get_bd_pins zynq_ps/$fclk] [get_bd_pins tcu/clk]
connect_bd_net [get_bd_pins [lindex [get_bd_cells -filter {VLNV =~ *proc_sys_reset*}] 0]/peripheral_aresetn] [get_bd_pins tcu/rst_n]
assign_bd_address
validate_bd_design
save_bd_design

make_wrapper -files [get_files tensil.bd] -top
add_files -norecurse [file join $proj tensil_$TCU_ARCH.gen sources_1 bd tensil hdl tensil_wrapper.v]
set_property top tensil_wrapper [current_fileset]
launch_runs impl_1 -to_step write_bitstream -jobs 4
wait_on_run impl_1
set bit [lindex [glob [file join $proj tensil_$TCU_ARCH.runs impl_1 *.bit]] 0]
file copy -force $bit [file join $out_dir tensil_$TCU_ARCH.bit]
file copy -force [lindex [glob [file join $proj tensil_$TCU_ARCH.gen sources_1 bd tensil hw_handoff *.hwh]] 0] \
    [file join $out_dir tensil_$TCU_ARCH.hwh]
puts "tvm-tensil: wrote [file join $out_dir tensil_$TCU_ARCH.bit] and .hwh"
