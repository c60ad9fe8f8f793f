"""``python -m tvm_tensil``: the ``tvm-tensil`` command."""

import sys

from .cli import main

if __name__ == "__main__":  # not again in a sweep's spawned workers
    sys.exit(main())
