"""An exact model of vLLM HiSparse's buffer sizing and routing (0.31.0 - 0.34.0).

The pipeline: :class:`Knobs` -> :func:`~hisparse_model.model.versions.rules_for`
(:class:`~hisparse_model.model.versions.VersionRules`) -> :func:`~hisparse_model.model.plan.plan`
(B, q, C, W, CUDA graphs) -> batch walks (start-up, serving) -> route each
batch.  Views (report, charts, dashboards) only draw a :class:`Prediction`.
"""

from .model.knobs import VLLM_VERSIONS, Knobs
from .model.plan import Plan, plan
from .answers.predict import Prediction, predict
from .recorded.recordings import compare_recording
from .answers.simulate import Schedule, simulate
from .schedule.workload import Workload

__all__ = ["VLLM_VERSIONS", "Knobs", "Plan", "Prediction", "Schedule", "Workload",
           "compare_recording", "plan", "predict", "simulate"]
