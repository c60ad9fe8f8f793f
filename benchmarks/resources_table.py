"""Print benchmarks/results/rtl_resources.json as the Markdown table of docs/results.md.

python benchmarks/resources_table.py
"""

import json
from pathlib import Path

rows = json.loads((Path(__file__).parent / "results" / "rtl_resources.json").read_text())
print("| preset | array | local x acc vectors | part | LUT (of which LUT RAM) | FF | DSP | BRAM36 | fits |")
print("|---|---|---|---|---|---|---|---|---|")
for name, r in rows.items():
    u = r.get("utilisation", {})
    pct = {k: f" ({v:.0%})" for k, v in u.items()}
    print(
        f"| {name} | {r['array']} {r['data_type']} | {r['local_depth']} x {r['accumulator_depth']} | {r['part']} | "
        f"{r['lut'] + r['lut_ram']:,} ({r['lut_ram']:,}){pct.get('lut', '')} | {r['ff']:,}{pct.get('ff', '')} | "
        f"{r['dsp']}{pct.get('dsp', '')} | {r['bram36']:g}{pct.get('bram36', '')} | "
        f"{'yes' if r.get('fits') else 'no'} |"
    )
