"""An exact model of vLLM HiSparse's buffer sizing and routing (0.31.0 - 0.34.0).

The pipeline: :class:`Knobs` -> :func:`~hisparse_model.versions.rules_for`
(:class:`~hisparse_model.versions.VersionRules`) -> :func:`~hisparse_model.plan.plan`
(B, q, C, W, CUDA graphs) -> batch walks (start-up, serving) -> route each
batch.  Views (report, charts, dashboards) only draw a :class:`Prediction`.
"""

from .knobs import VLLM_VERSIONS, Knobs
from .plan import Plan, plan
from .predict import Prediction, predict
from .recordings import compare_recording
from .simulate import Schedule, simulate
from .workload import Workload

__all__ = ["VLLM_VERSIONS", "Knobs", "Plan", "Prediction", "Schedule", "Workload",
           "compare_recording", "plan", "predict", "simulate"]
