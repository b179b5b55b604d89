"""Span corruption, T5's pre-training objective (Raffel et al., 2020, sec. 3.1.4 and 3.3.4).

A share ``noise_density`` (15%) of the tokens is dropped in spans of mean length ``mean_noise_span_length`` (3).
Each dropped span is replaced in the input by one sentinel token (<extra_id_0>, <extra_id_1>, ...); the target
lists each sentinel followed by the span it replaced, and one last sentinel:

    original: Thank you for inviting me to your party last week .
    inputs:   Thank you <extra_id_0> me to your party <extra_id_1> week .
    targets:  <extra_id_0> for inviting <extra_id_1> last <extra_id_2>

As in T5's ``random_spans_noise_mask``: round(n * noise_density) noise tokens (at least 1, at most n - 1) in
round(noise / mean_noise_span_length) spans (at least 1); the noise and non-noise token counts are each split into
that many non-empty spans uniformly at random, and the spans alternate, starting with non-noise. The targets close
with one more sentinel, as in the paper's Figure 2.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from seqlab.validation import check_int, check_real

NOISE_DENSITY = 0.15
MEAN_NOISE_SPAN_LENGTH = 3.0


def sentinel_tokens(count: int) -> list[str]:
    """The names of the first ``count`` sentinels: ``<extra_id_0>`` ... (T5's vocabulary names them so)."""
    return [f"<extra_id_{i}>" for i in range(count)]


class SpanCorruption(NamedTuple):
    """inputs: the tokens with every noise span replaced by its sentinel. targets: each sentinel followed by its
    span, then the sentinel after the last span."""

    inputs: list[int]
    targets: list[int]


def _random_segmentation(total: int, num_segments: int, generator: torch.Generator | None) -> Tensor:
    """``total`` items split into ``num_segments`` non-empty consecutive segments, uniformly over all such splits:
    the lengths (num_segments,) long."""
    cuts = torch.randperm(total - 1, generator=generator)[: num_segments - 1] + 1  # distinct, in [1, total)
    bounds = torch.cat([torch.tensor([0]), cuts.sort().values, torch.tensor([total])])
    return bounds.diff()


def random_spans_noise_mask(
    length: int,
    *,
    noise_density: float = NOISE_DENSITY,
    mean_noise_span_length: float = MEAN_NOISE_SPAN_LENGTH,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Which of ``length`` tokens are noise (module docstring): (length,) bool, True at noise tokens.

    Raises: ConfigError if length < 2, noise_density is not in (0, 1) or mean_noise_span_length < 1.
    """
    check_int("length", length, minimum=2)
    check_real("noise_density", noise_density, greater_than=0.0, below=1.0)
    check_real("mean_noise_span_length", mean_noise_span_length, at_least=1.0)
    num_noise = min(max(round(length * noise_density), 1), length - 1)
    num_spans = max(round(num_noise / mean_noise_span_length), 1)
    num_spans = min(num_spans, num_noise, length - num_noise)  # each span of either kind needs one token
    noise = _random_segmentation(num_noise, num_spans, generator)
    keep = _random_segmentation(length - num_noise, num_spans, generator)
    spans = torch.stack([keep, noise], dim=1).flatten()  # (2 * spans,) non-noise, noise, non-noise, ...
    is_noise = torch.tensor([False, True]).repeat(num_spans)
    return is_noise.repeat_interleave(spans)


def span_corruption(
    tokens: Sequence[int],
    sentinel_ids: Sequence[int],
    *,
    noise_density: float = NOISE_DENSITY,
    mean_noise_span_length: float = MEAN_NOISE_SPAN_LENGTH,
    generator: torch.Generator | None = None,
) -> SpanCorruption:
    """Corrupt ``tokens`` by random noise spans (module docstring); a fixed generator reproduces the spans.

    Args:
        tokens: the ids of one sequence, at least 2, without EOS.
        sentinel_ids: the ids of <extra_id_0>, <extra_id_1>, ..., in that order; one more than the spans drawn.
        noise_density, mean_noise_span_length: the share of noise tokens and their mean span length.
        generator: the random source.
    Returns: SpanCorruption(inputs, targets), ids without EOS.
    Raises: ConfigError as ``random_spans_noise_mask``, or when sentinel_ids has fewer ids than the spans + 1.
    """
    mask = random_spans_noise_mask(
        len(tokens), noise_density=noise_density, mean_noise_span_length=mean_noise_span_length, generator=generator
    ).tolist()
    starts = [is_noise and (i == 0 or not mask[i - 1]) for i, is_noise in enumerate(mask)]
    check_int("len(sentinel_ids)", len(sentinel_ids), minimum=sum(starts) + 1)
    inputs: list[int] = []
    targets: list[int] = []
    span = 0
    for token, is_noise, starts_span in zip(tokens, mask, starts, strict=True):
        if starts_span:
            inputs.append(sentinel_ids[span])
            targets.append(sentinel_ids[span])
            span += 1
        (targets if is_noise else inputs).append(token)
    targets.append(sentinel_ids[span])
    return SpanCorruption(inputs, targets)
