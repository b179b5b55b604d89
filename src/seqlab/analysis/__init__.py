"""Measuring what the textbooks claim, on fresh layers or trained models; each module also draws its picture.

gradients: ||d h_T / d h_k|| against T - k beside the bound gamma^(T-k) and the gated paths' gate products.
regimes: W_hh scaled to a spectral norm or radius S (vanishing, edge, exploding), the bound both ways, the LSTM's
direct path, and training with and without gradient clipping.
attention: every attention map of an RNN encoder-decoder, Transformer encoder-decoder, GPT or BERT on one input.
contacts: residue contacts from a protein model's attention (symmetrized, APC) scored by precision at L/5.
positional: the sinusoidal encoding's shift-by-rotation and distance-only dot products.
complexity: one layer's time and peak memory against T, with fitted exponents beside the asymptotic cost table
(memory: the CPU and CUDA counters it uses). curves: training curves from a run's ``metrics.jsonl``.
exposure: a seq2seq model's teacher-forced against free-running loss and accuracy (exposure bias).
compare: RNN, GRU, LSTM and Transformer models of matched parameter counts for the long-range tasks of
``seqlab.data.synthetic``; compare_report: the report of ``seqlab compare`` (markdown, self-contained HTML, PNGs).
"""

from seqlab.analysis.attention import AttentionMap, attention_maps, plot_attention
from seqlab.analysis.compare import (
    MatchedModel,
    RunSummary,
    SequenceModel,
    matched_model,
    matched_width,
    parameter_count,
    training_step_peak,
)
from seqlab.analysis.compare_report import plot_learning_curves, plot_metric_vs_lag, write_report
from seqlab.analysis.complexity import COST_TABLE, Measurement, fit_exponent, measure_costs, plot_costs
from seqlab.analysis.curves import TrainingCurves, plot_training_curves, read_metrics
from seqlab.analysis.exposure import ExposureBias, exposure_bias, plot_exposure
from seqlab.analysis.gradients import GradientFlow, decay_rate, gradient_flow, plot_gradient_flow, recurrent_cell
from seqlab.analysis.memory import CallCost, PeakTensorMemory, measure_call
from seqlab.analysis.positional import PositionalAnalysis, plot_positional, positional_analysis
from seqlab.analysis.regimes import (
    ClippingRun,
    DirectPath,
    EigenRate,
    clipping_runs,
    eigen_rate,
    lstm_direct_path,
    scale_recurrent,
)

__all__ = [
    "COST_TABLE",
    "AttentionMap",
    "CallCost",
    "ClippingRun",
    "DirectPath",
    "EigenRate",
    "ExposureBias",
    "GradientFlow",
    "MatchedModel",
    "Measurement",
    "PeakTensorMemory",
    "PositionalAnalysis",
    "RunSummary",
    "SequenceModel",
    "TrainingCurves",
    "attention_maps",
    "clipping_runs",
    "decay_rate",
    "eigen_rate",
    "exposure_bias",
    "fit_exponent",
    "gradient_flow",
    "lstm_direct_path",
    "matched_model",
    "matched_width",
    "measure_call",
    "measure_costs",
    "parameter_count",
    "plot_attention",
    "plot_costs",
    "plot_exposure",
    "plot_gradient_flow",
    "plot_learning_curves",
    "plot_metric_vs_lag",
    "plot_positional",
    "plot_training_curves",
    "positional_analysis",
    "read_metrics",
    "recurrent_cell",
    "scale_recurrent",
    "training_step_peak",
    "write_report",
]
