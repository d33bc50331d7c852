"""Older per-option flags: ``train --predictor``, ``--staleness``, ``--bucket-mb``,
``TrainConfig(predictor=...)`` and the ``[predictor_options]`` TOML table.

Before the spec grammar (``NAME[:key=value]...``) these options were flags of
``train``; tutorials and configs still use them. Each is an alias of the
algorithm option of the same name: it fills that option when the spec does
not set it, must agree with the spec when it does, and is ignored by
algorithms that have no such option (so ``compare`` can pass it to every run).

:data:`OPTION_FLAGS` is the only place that names them: the CLI adds one flag
per row, :class:`~minips.config.TrainConfig` accepts each as a keyword (and a
TOML key), validates it, and hands the values given to
:func:`~minips.distributed.algorithms.resolve` as ``defaults``. A new alias is
one row here.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["OptionFlag", "OPTION_FLAGS"]


@dataclass(frozen=True)
class OptionFlag:
    """One older flag.

    Attributes:
        type: ``"str"``, ``"int"``, ``"float"`` or ``"dict"`` (a dict is a TOML
            table only, ``[name]``, with no command-line flag).
        help: the ``--flag`` help text.
        minimum: the smallest value allowed (None: any), checked with the
            run's other options before any work; ``why`` completes the message.
        why: what the minimum means, e.g. "1 = use the previous step's gradient".
    """
    type: str
    help: str
    minimum: float | None = None
    why: str = ""

    @property
    def python_type(self) -> type:
        return {"str": str, "int": int, "float": float, "dict": dict}[self.type]


#: flag name (underscores; ``--dashes`` on the command line) -> :class:`OptionFlag`
OPTION_FLAGS: dict[str, OptionFlag] = {
    "predictor": OptionFlag("str", "the algorithm's 'predictor' option, for algorithms that have it "
                                   "(same as NAME:predictor=...)"),
    "staleness": OptionFlag("int", "the algorithm's 'staleness' option (k >= 1), for algorithms that have it",
                            minimum=1, why="1 = use the previous step's gradient"),
    "bucket_mb": OptionFlag("float", "the algorithm's 'bucket-mb' option (MiB), for algorithms that have it",
                            minimum=0),
    "predictor_options": OptionFlag("dict", "the predictor's options, for algorithms that have a predictor "
                                            "(same as NAME:key=value...)"),
}
