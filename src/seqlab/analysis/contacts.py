"""Residue contacts predicted from a protein language model's attention, scored against a structure's contacts.

Rao et al. (2021), "Transformer protein language models are unsupervised structure learners" (ICLR): each head's
self-attention map A (L x L, over the residues) is symmetrized, F = A + A^T, and corrected by the average product
correction of Dunn et al. (2008), APC(F)_ij = F_ij - F_i F_j / F (F_i the row sum, F the total), which removes the
background that every row and column shares. Here the corrected maps are averaged over every head of every layer
or weighted by a logistic regression over the heads fitted on labelled structures (the paper's predictor, which
uses an L1 penalty; here unpenalized, fitted by L-BFGS). True contacts:
residues whose Cβ atoms (Cα for glycine) lie closer than 8 Å, |i - j| >= 6 (the paper's medium and long range).
Precision at L/k: the share of true contacts among the L/k highest-scored pairs with |i - j| >= 6.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from seqlab.analysis.figures import new_figure, save_figure

CONTACT_DISTANCE = 8.0  # Å between Cβ atoms
MIN_SEPARATION = 6  # |i - j| of the pairs scored (medium and long range)


def symmetrize(maps: Tensor) -> Tensor:
    """A + A^T of each map.

    Args: maps: (..., L, L). Outputs: (..., L, L), symmetric.
    """
    return maps + maps.transpose(-1, -2)


def apc(maps: Tensor) -> Tensor:
    """The average product correction F_ij - F_i F_j / F of each map (Dunn et al., 2008, eq. 4, as sums).

    Args: maps: (..., L, L), symmetric. Outputs: (..., L, L).
    """
    rows = maps.sum(dim=-1, keepdim=True)  # (..., L, 1)
    columns = maps.sum(dim=-2, keepdim=True)  # (..., 1, L)
    total = maps.sum(dim=(-1, -2), keepdim=True)  # (..., 1, 1)
    return maps - rows * columns / total


def head_features(maps: Tensor) -> Tensor:
    """apc(symmetrize(A)) of every head: the features of each residue pair.

    Args: maps: (H, L, L), every layer's heads stacked, each row a distribution over the residues.
    Outputs: (H, L, L) float64, each symmetric.
    """
    return apc(symmetrize(maps.double()))


def attention_contacts(maps: Tensor) -> Tensor:
    """Contact scores of one sequence: the mean over heads and layers of apc(symmetrize(A)).

    Args: maps: (H, L, L), as ``head_features`` reads them.
    Outputs: (L, L) symmetric scores, higher meaning a likelier contact.
    """
    return head_features(maps).mean(dim=0)


def pair_features(features: Tensor, *, min_separation: int = MIN_SEPARATION) -> Tensor:
    """The features of the scored pairs (``scored_pairs`` order). Args: features: (H, L, L). Outputs: (P, H)."""
    rows, columns = scored_pairs(features.shape[-1], min_separation=min_separation)
    return features[:, rows, columns].T


def fit_head_weights(features: Tensor, labels: Tensor, *, steps: int = 100) -> Tensor:
    """The weights of a logistic regression P(contact) = sigmoid(features w + b), fitted by L-BFGS on the mean
    binary cross-entropy, each feature standardized first (the weights returned apply to the raw features).

    Args: features: (N, H) pairs of every training chain. labels: (N,) bool, the true contacts.
    Outputs: (H,) float64 weights (the bias, which does not change a ranking, left out).
    Raises: ValueError if ``labels`` are all true or all false.
    """
    if bool(labels.all()) or not bool(labels.any()):
        raise ValueError("fitting the head weights needs both contacts and non-contacts")
    x = features.double()
    mean, std = x.mean(dim=0), x.std(dim=0).clamp_min(1e-12)
    x = (x - mean) / std
    y = labels.double()
    weights = torch.zeros(x.shape[1] + 1, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS([weights], max_iter=steps, line_search_fn="strong_wolfe")

    def closure() -> Tensor:
        optimizer.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(x @ weights[1:] + weights[0], y)
        loss.backward()
        return loss

    optimizer.step(closure)
    return weights.detach()[1:] / std


def true_contacts(coordinates: Tensor, *, distance: float = CONTACT_DISTANCE) -> Tensor:
    """Which residue pairs are in contact: Euclidean distance below ``distance``.

    Args: coordinates: (L, 3), Å. Outputs: (L, L) bool, symmetric, the diagonal true.
    """
    return torch.cdist(coordinates.double(), coordinates.double()) < distance


def scored_pairs(length: int, *, min_separation: int = MIN_SEPARATION) -> tuple[Tensor, Tensor]:
    """The pairs i < j with j - i >= ``min_separation``, as two (P,) long tensors of row and column indices."""
    rows, columns = torch.triu_indices(length, length, offset=min_separation)
    return rows, columns


def precision_at_l(
    scores: Tensor, contacts: Tensor, *, divisor: int = 5, min_separation: int = MIN_SEPARATION
) -> float:
    """The share of true contacts among the top L // ``divisor`` pairs (at least one) by score, over the pairs with
    |i - j| >= ``min_separation``; ties go to the pair listed first (row-major).

    Args: scores: (L, L), only the upper triangle read. contacts: (L, L) bool.
    Raises: ValueError if L is too short to have a pair at that separation.
    """
    length = scores.shape[-1]
    rows, columns = scored_pairs(length, min_separation=min_separation)
    if len(rows) == 0:
        raise ValueError(f"a chain of {length} residues has no pair with |i - j| >= {min_separation}")
    top = max(1, length // divisor)
    order = torch.sort(scores[rows, columns], descending=True, stable=True).indices[:top]
    return contacts[rows[order], columns[order]].double().mean().item()


def contact_density(contacts: Tensor, *, min_separation: int = MIN_SEPARATION) -> float:
    """The share of true contacts among the pairs with |i - j| >= ``min_separation``: the expected precision of
    pairs drawn at random."""
    rows, columns = scored_pairs(contacts.shape[-1], min_separation=min_separation)
    return contacts[rows, columns].double().mean().item()


def separation_scores(length: int) -> Tensor:
    """The sequence-separation baseline: score -|i - j| (the nearest scored pairs first). Outputs: (L, L)."""
    positions = torch.arange(length, dtype=torch.float64)
    return -(positions[:, None] - positions[None, :]).abs()


def plot_contacts(scores: Tensor, contacts: Tensor, path: Path, *, title: str) -> None:
    """The top L/5 predicted pairs (upper triangle) over the true contacts (both triangles, grey), with
    |i - j| >= 6; predictions that are true contacts in blue, the others in red; written as a PNG."""
    length = scores.shape[-1]
    rows, columns = scored_pairs(length)
    order = torch.sort(scores[rows, columns], descending=True, stable=True).indices[: max(1, length // 5)]
    top_rows, top_columns = rows[order], columns[order]
    hit = contacts[top_rows, top_columns]
    fig = new_figure(figsize=(5.5, 5.5), layout="constrained")
    axis = fig.subplots()
    far = (torch.arange(length)[:, None] - torch.arange(length)[None, :]).abs() >= MIN_SEPARATION
    axis.imshow((contacts & far).numpy(), cmap="Greys", vmin=0, vmax=2.5, origin="upper")
    axis.scatter(top_columns[hit].numpy(), top_rows[hit].numpy(), s=14, c="tab:blue", label="predicted, true")
    axis.scatter(top_columns[~hit].numpy(), top_rows[~hit].numpy(), s=14, c="tab:red", label="predicted, false")
    axis.set_xlabel(f"residue j (grey: true contacts, Cβ < {CONTACT_DISTANCE:g} Å, |i-j| >= {MIN_SEPARATION})")
    axis.set_ylabel("residue i")
    axis.set_title(title, fontsize=9)
    axis.legend(loc="lower left", fontsize=8)
    save_figure(fig, path, dpi=120)
