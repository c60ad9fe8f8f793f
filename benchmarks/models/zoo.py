"""The model zoo lives in the package (``tvm_tensil.zoo``: the board self-test needs it too);
tests and benchmarks import it as ``zoo`` from here."""

from tvm_tensil.zoo import *  # noqa: F401,F403
from tvm_tensil.zoo import OnnxBuilder, count_macs, mlp, resnet20v2, small_cnn  # noqa: F401
