"""Progress for the long steps (compiling a model, building the Verilated core, synthesis).

A tqdm bar on a terminal, nothing in logs and pipes. ``TVM_TENSIL_PROGRESS=1`` shows the bars
anyway, ``=0`` never. ``Stages`` is a bar over named steps whose elapsed time keeps counting while
a step runs (a compiler or Yosys gives no finer progress).
"""

from __future__ import annotations

import os
import threading

from tqdm import tqdm

ENV_VAR = "TVM_TENSIL_PROGRESS"


def disabled() -> bool | None:
    """tqdm's ``disable``: None (a terminal only) unless ``$TVM_TENSIL_PROGRESS`` says otherwise."""
    value = os.environ.get(ENV_VAR, "").strip().lower()
    if value in ("1", "true", "yes", "on"):
        return False
    if value in ("0", "false", "no", "off"):
        return True
    return None


def bar(iterable=None, **kwargs) -> tqdm:
    """``tqdm`` with this package's rule for when to show it."""
    kwargs.setdefault("disable", disabled())
    kwargs.setdefault("leave", False)
    return tqdm(iterable, **kwargs)


class Stages:
    """``with Stages("building the core", ["verilate", "compile"]) as s: s.start("verilate") ...``"""

    def __init__(self, desc: str, names: list[str], tick: float = 1.0):
        self.names = list(names)
        self._bar = bar(
            total=len(self.names), desc=desc, unit="step", bar_format="{desc}: {n}/{total} {postfix} [{elapsed}]"
        )
        self._done = threading.Event()
        self._ticker = threading.Thread(target=self._tick, args=(tick,), daemon=True)
        self._ticker.start()

    def _tick(self, every: float) -> None:
        while not self._done.wait(every):
            self._bar.refresh()

    def start(self, name: str) -> None:
        """Step ``name`` begins (the ones before it are done)."""
        index = self.names.index(name)
        self._bar.update(index - self._bar.n)
        self._bar.set_postfix_str(name)

    def close(self) -> None:
        self._done.set()
        self._ticker.join()
        self._bar.update(len(self.names) - self._bar.n)
        self._bar.close()

    def __enter__(self) -> "Stages":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
