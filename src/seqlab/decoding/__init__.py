"""Decoding as pure functions over the step interface (``step`` / ``reorder_state``): greedy and beam search,
logits processors, the coverage penalty, sampling, and the ``generate`` engine for language models."""

from seqlab.decoding.beam_search import beam_search
from seqlab.decoding.coverage import CoverageStepModel, coverage_penalty
from seqlab.decoding.ensemble import EnsembleStepModel
from seqlab.decoding.generate import GenerateOutput, generate
from seqlab.decoding.greedy import greedy_search
from seqlab.decoding.interface import (
    InPlaceReorderModel,
    SearchOutput,
    StepModel,
    StepOutput,
    reorders_in_place,
    select_rows,
)
from seqlab.decoding.processors import (
    LogitsProcessor,
    logits_processor,
    min_p,
    no_repeat_ngram,
    repetition_penalty,
    temperature,
    top_k,
    top_p,
)
from seqlab.decoding.sampling import sample

__all__ = [
    "CoverageStepModel",
    "EnsembleStepModel",
    "GenerateOutput",
    "InPlaceReorderModel",
    "LogitsProcessor",
    "SearchOutput",
    "StepModel",
    "StepOutput",
    "beam_search",
    "coverage_penalty",
    "generate",
    "greedy_search",
    "logits_processor",
    "min_p",
    "no_repeat_ngram",
    "reorders_in_place",
    "repetition_penalty",
    "sample",
    "select_rows",
    "temperature",
    "top_k",
    "top_p",
]
