"""The docs' Python examples run as written: every ```python block of README.md and docs/*.md, the
blocks of one file in order in one namespace, from an empty folder. (Excerpts of the package's own
code are fenced without a language.)"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
WITH_CODE = [p for p in PAGES if "```python" in p.read_text()]


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


@pytest.mark.parametrize("page", WITH_CODE, ids=[p.name for p in WITH_CODE])
def test_the_examples_run(page, tmp_path, monkeypatch):
    from tvm_tensil.runtime import DEVICES

    monkeypatch.chdir(tmp_path)
    devices = dict(DEVICES)  # a page may register its example device: not for the tests after it
    namespace = {"__name__": f"docs_{page.stem}"}
    try:
        for i, block in enumerate(python_blocks(page.read_text())):
            exec(compile(block, f"{page.name} block {i + 1}", "exec"), namespace)
    finally:
        DEVICES.clear()
        DEVICES.update(devices)


def test_the_pages_with_examples_are_found():
    assert {p.name for p in WITH_CODE} >= {"README.md", "adding-a-device.md", "compiler.md", "verilator.md"}


def test_ci_runs_exactly_the_readmes_two_commands():
    readme = (ROOT / "README.md").read_text()
    block = readme.split("```bash\n", 1)[1].split("```", 1)[0].strip().splitlines()
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    assert len(block) == 2 and ci[-2:] == block
    assert readme.index("```bash") < readme.index("## ")  # what it is, then the commands, first of all
