"""Module and Parameter: containers of learnable state (as in PyTorch's nn.Module)."""
from __future__ import annotations

from collections import OrderedDict

import numpy as np

from ..autograd import CallbackList
from ..tensor import Tensor

__all__ = ["Parameter", "Module", "Sequential", "forward_callbacks"]

#: Functions called with no arguments after every Module's forward (in the
#: thread that registered them: one list per virtual rank); the distributed
#: layer adds ``comm.progress`` here in "poll" progress mode.
#: (nn knows nothing about MPI: it only calls what was registered.)
forward_callbacks = CallbackList()


class Parameter(Tensor):
    """A leaf Tensor that a Module registers as learnable (requires_grad=True).

    Args:
        data: the initial value (float32 by default).
    """

    def __init__(self, data, dtype=np.float32):
        super().__init__(np.asarray(data, dtype=dtype), requires_grad=True)

    def __repr__(self):
        return f"Parameter(shape={self.shape}, dtype={self.dtype})"


class Module:
    """Base class of layers and models.

    Assigning a :class:`Parameter` or a Module to an attribute registers it;
    :meth:`parameters` and :meth:`named_parameters` walk them in assignment
    order (the order :mod:`minips.distributed.flat` lays them out in the flat buffer).
    Subclasses implement ``forward``; call the module itself (``m(x)``).
    """

    def __init__(self):
        object.__setattr__(self, "_params", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)

    def __setattr__(self, name, value):
        if "_params" not in self.__dict__:
            raise RuntimeError(f"{type(self).__name__}.__init__ must call super().__init__() "
                               "before assigning attributes")
        self._params.pop(name, None)
        self._modules.pop(name, None)
        if isinstance(value, Parameter):
            self._params[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        object.__setattr__(self, name, value)

    def forward(self, *args, **kwargs):  # pragma: no cover - abstract
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *args, **kwargs):
        out = self.forward(*args, **kwargs)
        for cb in forward_callbacks:
            cb()
        return out

    def forward_with_next(self, x, following):
        """``(self(x), 0)``. A layer that can compute itself together with the
        layers after it in a :class:`Sequential` (``following``, a list)
        overrides this and returns ``(output, how many of them it computed)``;
        :class:`~minips.nn.Conv2d` does, for a ReLU and a max pooling."""
        return self(x), 0

    # --- traversal ------------------------------------------------------------
    def named_modules(self, prefix: str = ""):
        """Yield ``(name, module)`` for this module and every submodule (iterative)."""
        stack = [(prefix, self)]
        while stack:
            name, m = stack.pop()
            yield name, m
            children = [(f"{name}.{k}" if name else k, c) for k, c in m._modules.items()]
            stack.extend(reversed(children))

    def named_parameters(self):
        """Yield ``(dotted_name, Parameter)`` in registration order, each once."""
        seen = set()
        for mname, m in self.named_modules():
            for pname, p in m._params.items():
                if id(p) not in seen:
                    seen.add(id(p))
                    yield (f"{mname}.{pname}" if mname else pname), p

    def parameters(self):
        """List of the Parameters (see :meth:`named_parameters`)."""
        return [p for _, p in self.named_parameters()]

    def num_parameters(self) -> int:
        """Total number of learnable scalars."""
        return int(sum(p.size for p in self.parameters()))

    def train(self, mode: bool = True):
        """Training mode (dropout active); returns self."""
        for _, m in self.named_modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self):
        """Evaluation mode (dropout off); returns self."""
        return self.train(False)

    def zero_grad(self):
        """Zero every parameter gradient in place (None stays None)."""
        for p in self.parameters():
            p.zero_grad()

    # --- state ----------------------------------------------------------------
    def state_dict(self) -> dict:
        """``{name: array copy}`` of every parameter."""
        return {n: p.data.copy() for n, p in self.named_parameters()}

    def load_state_dict(self, state: dict, strict: bool = True):
        """Copy arrays into the parameters (in place, so flat-buffer views survive).

        Raises:
            KeyError: with ``strict``, names missing from ``state`` or unexpected
                in it (both listed).
            ValueError: a shape differs (name, expected and found shapes).
        """
        own = dict(self.named_parameters())
        missing = [k for k in own if k not in state]
        unexpected = [k for k in state if k not in own]
        if strict and (missing or unexpected):
            raise KeyError(f"load_state_dict: missing keys {missing}, unexpected keys {unexpected}; "
                           "was the state saved from a different model?")
        for k, p in own.items():
            if k not in state:
                continue
            v = np.asarray(state[k])
            if v.shape != p.shape:
                raise ValueError(f"load_state_dict: parameter {k!r} has shape {p.shape} in the model "
                                 f"but {v.shape} in the state; was it saved from a different model?")
            p.data[...] = v

    def extra_repr(self) -> str:
        return ""

    def __repr__(self):
        lines = [f"{type(self).__name__}({self.extra_repr()}"]
        for k, m in self._modules.items():
            sub = repr(m).replace("\n", "\n  ")
            lines.append(f"  ({k}): {sub}")
        return lines[0] + ")" if len(lines) == 1 else "\n".join(lines) + "\n)"


class Sequential(Module):
    """Apply modules in order: ``Sequential(a, b, c)(x) == c(b(a(x)))``.

    A module may compute the ones after it in the same pass (same values and
    gradients, less memory traffic): :meth:`Module.forward_with_next`, used by
    :class:`~minips.nn.Conv2d` for a following ReLU and max pooling."""

    def __init__(self, *modules):
        super().__init__()
        for i, m in enumerate(modules):
            if not isinstance(m, Module):
                raise TypeError(f"Sequential argument {i} is a {type(m).__name__}, not a Module")
            setattr(self, str(i), m)

    def __iter__(self):
        return iter(self._modules.values())

    def __len__(self):
        return len(self._modules)

    def __getitem__(self, i):
        return list(self._modules.values())[i]

    def forward(self, x):
        mods, i = list(self._modules.values()), 0
        while i < len(mods):
            # a layer may compute the next ones in the same pass (Module.forward_with_next)
            x, used = mods[i].forward_with_next(x, mods[i + 1:])
            if used:
                for cb in forward_callbacks:
                    cb()
            i += 1 + used
        return x
