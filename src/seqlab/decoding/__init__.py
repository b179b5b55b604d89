"""Decoding as pure functions over the step interface (``step`` / ``reorder_state``): greedy and beam search."""

from seqlab.decoding.beam_search import beam_search
from seqlab.decoding.greedy import greedy_search
from seqlab.decoding.interface import SearchOutput, StepModel, StepOutput, select_rows

__all__ = ["SearchOutput", "StepModel", "StepOutput", "beam_search", "greedy_search", "select_rows"]
