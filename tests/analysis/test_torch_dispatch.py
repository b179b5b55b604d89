"""The private torch APIs that ``seqlab.analysis.torch_dispatch`` re-exports, pinned to the behaviour seqlab relies
on, so a torch release that moves or changes them fails here by name; and no other module imports private torch."""

import re
from pathlib import Path

import torch
from torch.testing import assert_close

import seqlab
from seqlab.analysis.torch_dispatch import TorchDispatchMode, tree_leaves


class Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.calls.append((func, out))
        return out


def test_a_dispatch_mode_sees_every_operator_forward_and_backward_with_its_result():
    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(4, 2)
    with Recorder() as recorder:
        y = x @ w
        y.sum().backward()
    funcs = [func for func, _ in recorder.calls]
    assert funcs[0] is torch.ops.aten.mm.default
    mm_outputs = [out for func, out in recorder.calls if func is torch.ops.aten.mm.default]
    assert len(mm_outputs) == 2  # x @ w forward; dL/dx = ones @ w.T backward (w needs no gradient)
    assert_close(mm_outputs[0], x.detach() @ w)
    assert_close(mm_outputs[1], torch.ones(3, 2) @ w.T)
    assert_close(x.grad, mm_outputs[1])
    calls = len(recorder.calls)
    x.detach() @ w  # outside the block: not seen
    assert len(recorder.calls) == calls


def test_tree_leaves_flattens_an_operator_result_in_order():
    a, b = torch.zeros(1), torch.ones(2)
    leaves = tree_leaves(((a, [b, None]), 3))
    assert len(leaves) == 4 and leaves[0] is a and leaves[1] is b and leaves[2:] == [None, 3]
    assert tree_leaves(a) == [a]


def test_no_other_module_touches_private_torch():
    # nn/direct_calls.py reads torch's global forward-hook registries (pinned in tests/nn/test_direct_calls.py);
    # training/device.py asks torch.cpu whether the CPU multiplies bf16 natively, which torch has no public API for
    # (pinned in tests/training/test_device.py).
    allowed = {"analysis/torch_dispatch.py", "nn/functional/fused_rnn.py", "nn/direct_calls.py", "training/device.py"}
    # torch.x._y (not a dunder such as torch.__version__), or a torch module imported under a private alias (from
    # torch.nn.modules import module as _module); quoted text (a docstring's ``torch._int_mm``, a logger's name) is
    # not a use.
    private = re.compile(r"\btorch(\.\w+)*\._(?!_)\w|^from torch[\w.]* import .* as _\w")
    quoted = re.compile(r"``[^`]*``|\"[^\"]*\"")
    root = Path(seqlab.__file__).parent
    offenders = [
        f"{path.relative_to(root)}:{number}"
        for path in sorted(root.rglob("*.py"))
        if path.relative_to(root).as_posix() not in allowed
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if private.search(quoted.sub("", line))
    ]
    assert offenders == []
