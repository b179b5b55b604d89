"""Measuring what the textbooks claim, on fresh layers or trained models; each module also draws its picture.

gradients: ||d h_T / d h_k|| against T - k beside the bound gamma^(T-k) and the gated paths' gate products.
attention: every attention map of an RNN encoder-decoder, Transformer encoder-decoder or GPT on one input.
positional: the sinusoidal encoding's shift-by-rotation and distance-only dot products.
complexity: one layer's time and peak memory against T, with fitted exponents beside the asymptotic cost table
(memory: the CPU and CUDA counters it uses). curves: training curves from a run's ``metrics.jsonl``.
exposure: a seq2seq model's teacher-forced against free-running loss and accuracy (exposure bias).
"""

from seqlab.analysis.attention import AttentionMap, attention_maps, plot_attention
from seqlab.analysis.complexity import COST_TABLE, Measurement, fit_exponent, measure_costs, plot_costs
from seqlab.analysis.curves import TrainingCurves, plot_training_curves, read_metrics
from seqlab.analysis.exposure import ExposureBias, exposure_bias, plot_exposure
from seqlab.analysis.gradients import GradientFlow, decay_rate, gradient_flow, plot_gradient_flow, recurrent_cell
from seqlab.analysis.memory import CallCost, PeakTensorMemory, measure_call
from seqlab.analysis.positional import PositionalAnalysis, plot_positional, positional_analysis

__all__ = [
    "COST_TABLE",
    "AttentionMap",
    "CallCost",
    "ExposureBias",
    "GradientFlow",
    "Measurement",
    "PeakTensorMemory",
    "PositionalAnalysis",
    "TrainingCurves",
    "attention_maps",
    "decay_rate",
    "exposure_bias",
    "fit_exponent",
    "gradient_flow",
    "measure_call",
    "measure_costs",
    "plot_attention",
    "plot_costs",
    "plot_exposure",
    "plot_gradient_flow",
    "plot_positional",
    "plot_training_curves",
    "positional_analysis",
    "read_metrics",
    "recurrent_cell",
]
