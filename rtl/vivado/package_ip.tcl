# Package rtl/ as a Vivado IP (tensil:tcu_top) with the parameters of one architecture.
#
#   tvm-tensil ip --arch pynqz1 -o build/vivado/pynqz1          # writes params.tcl
#   vivado -mode batch -source rtl/vivado/package_ip.tcl -tclargs build/vivado/pynqz1/params.tcl build/vivado/pynqz1
#
# Interfaces are inferred from the port prefixes: m_axi_dram0 and m_axi_dram1 (AXI4 masters),
# s_axis_instr (AXI4-Stream slave), m_axis_sample (AXI4-Stream master), all on clk, reset rst_n
# (active low). Not run in CI: this repository has no Vivado (docs/boards.md).

lassign $argv params_tcl out_dir
set rtl_dir [file normalize [file join [file dirname [info script]] ..]]
source $params_tcl

create_project -in_memory -part $TCU_PART
add_files [glob [file join $rtl_dir *.sv]]
set_property top tcu_top [current_fileset]
set generics {}
dict for {name value} $TCU_PARAMS { lappend generics "$name=$value" }
set_property generic $generics [current_fileset]
update_compile_order -fileset sources_1

set ip_dir [file join $out_dir ip]
ipx::package_project -root_dir $ip_dir -vendor tvm-tensil -library tensil -taxonomy /UserIP -import_files -set_current true
set core [ipx::current_core]
set_property display_name "Tensil compute unit ($TCU_ARCH)" $core
set_property description "TCU from tvm-tensil: ${TCU_ARCH}, AXI ${TCU_AXI_DATA_WIDTH} bits" $core

# The architecture's values become the IP's parameter values (never edited by hand in Vivado).
dict for {name value} $TCU_PARAMS {
    set_property value $value [ipx::get_user_parameters $name -of_objects $core]
    set_property value $value [ipx::get_hdl_parameters $name -of_objects $core]
}

ipx::infer_bus_interfaces xilinx.com:interface:aximm_rtl:1.0 $core
ipx::infer_bus_interfaces xilinx.com:interface:axis_rtl:1.0 $core
ipx::infer_bus_interfaces xilinx.com:signal:clock_rtl:1.0 $core
ipx::infer_bus_interfaces xilinx.com:signal:reset_rtl:1.0 $core
set_property value ACTIVE_LOW [ipx::get_bus_parameters POLARITY -of_objects [ipx::get_bus_interfaces rst_n -of_objects $core]]
foreach busif {m_axi_dram0 m_axi_dram1 s_axis_instr m_axis_sample} {
    ipx::associate_bus_interfaces -busif $busif -clock clk $core
}
ipx::associate_bus_interfaces -clock clk -reset rst_n $core

ipx::create_xgui_files $core
ipx::update_checksums $core
ipx::check_integrity $core
ipx::save_core $core
puts "tvm-tensil: packaged tcu_top for $TCU_ARCH in $ip_dir"
