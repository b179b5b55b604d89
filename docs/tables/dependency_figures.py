"""Two course figures of what each output position reads, measured on freshly initialised seqlab models.

``bidirectional``: the Jacobian norm ||d h_t / d x_s|| of a bidirectional LSTM (``seqlab.nn.LSTM``), its forward
and backward halves for one layer, and the forward half of the second layer of a two-layer stack (which already
reads the future, through the first layer's backward states). ``pretrained``: which input tokens each output of
ELMo's two language models, BERT, GPT and T5's decoder depends on, found by changing one input token at a time
and seeing which outputs move. Re-run with:

    python docs/tables/dependency_figures.py --out docs/figures

It trains nothing and runs in seconds; the weights are random (seed 0): these figures show the wiring, not what a
trained model chooses to read.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from matplotlib.figure import Figure

from seqlab.models import GPT, Bert, BertConfig, GPTConfig
from seqlab.models.elmo.bilm import ELMo, ELMoConfig
from seqlab.models.t5 import T5, T5Config
from seqlab.nn import LSTM

T, E, H, V = 16, 4, 8, 40  # steps, input size, hidden size per direction, vocabulary


def jacobian_norms(layer: LSTM, x: torch.Tensor) -> torch.Tensor:
    """||d outputs[t, half] / d x[s]|| (Frobenius) for each half (forward, backward): (2, T, T)."""
    jacobian = torch.autograd.functional.jacobian(lambda inputs: layer(inputs).outputs[0], x)  # (T, 2H, 1, T, E)
    halves = jacobian[:, :, 0].reshape(T, 2, H, T, E)
    return halves.pow(2).sum(dim=(2, 4)).sqrt().permute(1, 0, 2)  # (2, T, T)


def bidirectional_figure(path: Path) -> None:
    torch.manual_seed(0)
    x = torch.randn(1, T, E, dtype=torch.float64)
    one = LSTM(input_size=E, hidden_size=H, bidirectional=True).double()
    two = LSTM(input_size=E, hidden_size=H, num_layers=2, bidirectional=True).double()
    forward, backward = jacobian_norms(one, x)
    top_forward = jacobian_norms(two, x)[0]
    panels = [
        ("layer 1, forward half", forward),
        ("layer 1, backward half", backward),
        ("layer 2 of 2, forward half", top_forward),
    ]
    figure = Figure(figsize=(11, 3.9), layout="constrained")
    axes = figure.subplots(1, 3)
    floor = 1e-8
    for ax, (title, norms) in zip(axes, panels, strict=True):
        image = ax.imshow(np.log10(norms.clamp(min=floor).numpy()), vmin=-8, vmax=0, cmap="viridis", origin="upper")
        ax.set_title(title)
        ax.set_xlabel("input step s")
        ax.set_ylabel("output step t")
    figure.colorbar(image, ax=axes, label=r"$\log_{10} \|\partial h_t / \partial x_s\|$ (floored at -8)")
    figure.suptitle(f"Bidirectional LSTM (H = {H} per direction, random weights): which inputs each state reads")
    figure.savefig(path, dpi=110)


def changed_outputs(outputs: Callable[[torch.Tensor], torch.Tensor], ids: torch.Tensor) -> np.ndarray:
    """M[t, s] = 1 where changing input token s changes output t; ``outputs`` maps ids (1, S) to (1, T', ...)."""
    before = outputs(ids)
    rows = []
    for s in range(ids.shape[1]):
        changed = ids.clone()
        changed[0, s] = (changed[0, s] + 1) % V
        rows.append((outputs(changed) - before).abs().flatten(2).amax(dim=2)[0] > 1e-9)  # (T',)
    return torch.stack(rows, dim=1).numpy().astype(float)  # (T', S)


@torch.no_grad()
def pretrained_figure(path: Path) -> None:
    torch.manual_seed(0)
    ids = torch.randint(1, V, (1, T))
    elmo = ELMo(ELMoConfig(vocab_size=V, hidden_size=8, num_layers=2, dropout=0.0)).double().eval()
    bert = Bert(BertConfig(vocab_size=V, d_model=16, num_heads=2, num_layers=2, d_ff=32, dropout=0.0)).eval()
    gpt = GPT(GPTConfig(vocab_size=V, context_length=T, d_model=16, num_heads=2, num_layers=2)).double().eval()
    t5_config = T5Config(vocab_size=V, d_model=16, d_kv=8, d_ff=32, num_layers=2, num_decoder_layers=2, num_heads=2)
    t5 = T5(t5_config).double().eval()
    S = T // 2  # T5: the first half of ids is the source, the second half the decoder's input

    def t5_logits(tokens: torch.Tensor) -> torch.Tensor:
        return t5(tokens[:, :S], torch.tensor([S]), tokens[:, S:]).logits  # (1, T - S, V)

    panels = [
        ("ELMo forward LM", changed_outputs(lambda t: elmo(t).forward_logits, ids)),
        ("ELMo backward LM", changed_outputs(lambda t: elmo(t).backward_logits, ids)),
        ("BERT (masked LM)", changed_outputs(lambda t: bert(t).last_hidden_state, ids)),
        ("GPT (causal LM)", changed_outputs(lambda t: gpt(t).logits, ids)),
        ("T5 decoder", changed_outputs(t5_logits, ids)),
    ]
    figure = Figure(figsize=(14, 3.6), layout="constrained")
    axes = figure.subplots(1, 5)
    for ax, (title, matrix) in zip(axes, panels, strict=True):
        ax.imshow(matrix, cmap="Greys", vmin=0, vmax=1.4, origin="upper", aspect="auto")
        ax.set_title(title)
        ax.set_ylabel("output position t")
        ax.set_xlabel("input token s changed")
    axes[-1].axvline(S - 0.5, color="C3", linewidth=1.5)
    axes[-1].set_xlabel("source s | decoder input s")
    figure.suptitle("Which inputs each output depends on (dark: changing token s changes output t)")
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("docs/figures"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    bidirectional_figure(args.out / "bidirectional_dependence.png")
    pretrained_figure(args.out / "pretrained_visibility.png")
    print(f"wrote {args.out / 'bidirectional_dependence.png'} and {args.out / 'pretrained_visibility.png'}")


if __name__ == "__main__":
    main()
