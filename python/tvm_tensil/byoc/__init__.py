"""TVM bring-your-own-codegen for the TCU: patterns, partitioning, codegen, build.

Importing this package imports TVM and registers ``relax.ext.tensil``, the ``tensil`` target
tag and the ``tensil`` Relax pipeline.
"""

from . import codegen  # noqa: F401 - registers relax.ext.tensil
from .build import (
    BuildReport,
    PrecisionWarning,
    TensilPipeline,
    ToolchainError,
    build,
    offload,
    tensil_pipeline,
    write_models,
)
from .calibrate import CalibrationError
from .patterns import Rejections, make_patterns, partition_for_tensil

__all__ = [
    "BuildReport",
    "CalibrationError",
    "PrecisionWarning",
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
