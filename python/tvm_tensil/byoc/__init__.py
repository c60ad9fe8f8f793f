"""TVM bring-your-own-codegen for the TCU: patterns, partitioning, codegen, build.

Importing this package imports TVM and registers ``relax.ext.tensil``, the ``tensil`` target
tag and the ``tensil`` Relax pipeline.
"""

from . import codegen  # noqa: F401 - registers relax.ext.tensil
from .build import (
    BuildReport,
    OffloadWarning,
    PrecisionWarning,
    ReloadWarning,
    TensilPipeline,
    ToolchainError,
    build,
    offload,
    tensil_pipeline,
    write_models,
)
from .calibrate import CalibrationError
from .onnx_import import fold_shape_computations, import_onnx
from .patterns import Rejections, make_patterns, partition_for_tensil
from .shapes import InputShapeError, InputShapeWarning, bind_input_shapes

__all__ = [
    "BuildReport",
    "CalibrationError",
    "InputShapeError",
    "InputShapeWarning",
    "OffloadWarning",
    "bind_input_shapes",
    "fold_shape_computations",
    "import_onnx",
    "PrecisionWarning",
    "ReloadWarning",
    "ToolchainError",
    "build",
    "offload",
    "tensil_pipeline",
    "TensilPipeline",
    "write_models",
    "Rejections",
    "make_patterns",
    "partition_for_tensil",
]
