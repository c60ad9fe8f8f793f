"""``python -m tvm_tensil``: the ``tvm-tensil`` command."""

import sys

from .cli import main

sys.exit(main())
