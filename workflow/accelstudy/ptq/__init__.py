"""Sensitivity-aware mixed-precision post-training quantization (the study's Part 1)."""

from accelstudy.errors import StudyError

# what a sensitivity scan was measured with: kept in its table and in each assignment
SCAN_KEYS = ("granularity", "family", "sparsity", "calibration_limit")


class SensitivityTableError(StudyError, ValueError):
    """A sensitivity table or assignment that does not describe the model's layers."""


class RecipeDeviceError(StudyError, ValueError):
    """A real-quantization recipe asked of a device that cannot run it."""
