"""torch's dispatch mode and pytree flattening: the one module of ``seqlab.analysis`` that imports private torch
modules (``seqlab.nn.functional.fused_rnn`` is the other place in seqlab that touches private torch APIs).

``TorchDispatchMode`` (``torch.utils._python_dispatch``) is how torch lets Python code see every ATen operator
that runs, forward and backward; ``tree_leaves`` (``torch.utils._pytree``) flattens an operator's result (a tensor,
or nested tuples and lists of them) into its leaves. As of torch 2.13 neither has a public home (no
``torch.overrides.TorchDispatchMode``, no ``torch.utils.pytree``), though torch's own public tools build on them
(``torch.utils.flop_counter``, ``torch.utils.checkpoint``). Everything in seqlab that needs them imports them from
here, and ``tests/analysis/test_torch_dispatch.py`` pins the behaviour seqlab relies on, so a torch release that
moves or changes them fails that test by name rather than some analysis deep inside:

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None): ...   # func: an ATen OpOverload
    with Mode(): ...                                                           # every operator in the block
    tree_leaves(((a, [b, None]), 3)) == [a, b, None, 3]
"""

from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

__all__ = ["TorchDispatchMode", "tree_leaves"]
