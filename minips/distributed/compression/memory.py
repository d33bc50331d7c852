"""Error-feedback memory (Stich, Cordonnier & Jaggi, "Sparsified SGD with
Memory", NeurIPS 2018; Karimireddy et al., ICML 2019)::

    v = m + g            # add back what earlier compressions dropped
    c = C(v)
    m = v - decompress(c)

so that, summed over steps, ``sum_t decompress(c_t) + m_T = sum_t g_t``
exactly in real arithmetic (the tests check it to float32 rounding): nothing
is lost, only delayed. :class:`NoMemory` is the same interface without the
memory (``c = C(g)``), so error feedback is on or off for any compressor.
"""
from __future__ import annotations

import numpy as np

from .base import Compressor, Payload, check_vector

__all__ = ["ErrorFeedback", "NoMemory", "make_memory"]


class ErrorFeedback:
    """Memory ``m`` (float32 (size,)) of one rank, zero at start.

    Args:
        size: d, the length of the vectors compressed.

    Attributes:
        m: the memory (float32 (size,)).
    """

    enabled = True

    def __init__(self, size: int):
        self.m = np.zeros(int(size), np.float32)

    def compress(self, compressor: Compressor, g: np.ndarray, step: int) -> Payload:
        """``v = m + g; c = C(v); m = v - decompress(c)``; returns c.

        Raises:
            ValueError: ``g`` has another length than the memory.
        """
        v = self.add(g)
        c = compressor.compress(v, step)
        self.keep(v, compressor.decompress(c))
        return c

    def add(self, g: np.ndarray) -> np.ndarray:
        """``v = m + g`` (a new float32 (size,) array): the vector to compress.

        Raises:
            ValueError: ``g`` has another length than the memory.
        """
        g = check_vector(g)
        if g.size != self.m.size:
            raise ValueError(f"error feedback: vector of {g.size} entries, memory of {self.m.size}")
        return self.m + g

    def keep(self, v: np.ndarray, sent: np.ndarray) -> None:
        """``m = v - sent``: what ``sent`` (the decompressed message, float32
        (size,)) missed of ``v``. :meth:`compress` is ``add``, compress, ``keep``;
        a compressor whose message is known only after communication (the
        low-rank one: the mean ``P^ Q^T``) calls the two around it."""
        np.subtract(v, sent, out=self.m)

    def reset(self, idx=None) -> None:
        """Zero the memory (at ``idx`` only, if given): gs-SGD's error reset."""
        if idx is None:
            self.m[...] = 0
        else:
            self.m[idx] = 0

    def state_dict(self) -> dict:
        return {"memory": self.m.copy()}

    def load_state_dict(self, state: dict) -> None:
        m = np.asarray(state["memory"], np.float32)
        if m.shape != self.m.shape:
            raise ValueError(f"error-feedback memory of shape {m.shape} in the checkpoint, the model needs "
                             f"{self.m.shape}: resume with the same model")
        self.m[...] = m


class NoMemory:
    """No error feedback: ``c = C(g)`` (same interface as :class:`ErrorFeedback`)."""

    enabled = False

    def __init__(self, size: int = 0):
        self.size = int(size)

    def compress(self, compressor: Compressor, g: np.ndarray, step: int) -> Payload:
        return compressor.compress(check_vector(g), step)

    def add(self, g: np.ndarray) -> np.ndarray:
        return check_vector(g)

    def keep(self, v: np.ndarray, sent: np.ndarray) -> None:
        pass

    def reset(self, idx=None) -> None:
        pass

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


def make_memory(enabled: bool, size: int):
    """:class:`ErrorFeedback` (``enabled``) or :class:`NoMemory` of d = ``size``."""
    return ErrorFeedback(size) if enabled else NoMemory(size)
