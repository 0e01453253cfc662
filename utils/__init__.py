"""Helpers shared by the chapters of the PyTorch building-blocks course.

``from utils import try_gpu, try_all_gpus`` works from any folder once the project is installed
(``pip install -r requirements.txt`` installs it in editable mode). Importing this package is cheap
and never initializes CUDA: heavier helpers live in sub-modules that load on first use.
"""

from utils.checks import ExerciseFailed, exercise, expect, learner_code, outcome, rejection
from utils.devices import check_torch_version, gpu_type, num_gpus, requires, try_all_gpus, try_gpu
from utils.i18n import set_language

__all__ = [
    "ExerciseFailed",
    "check_torch_version",
    "exercise",
    "expect",
    "gpu_type",
    "learner_code",
    "num_gpus",
    "outcome",
    "rejection",
    "requires",
    "set_language",
    "try_all_gpus",
    "try_gpu",
]
