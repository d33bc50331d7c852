"""Run configuration: :class:`TrainConfig` (every option of ``train``; the CLI
flags and TOML keys are its field names), TOML config files with typed checks,
and the output-directory check. Errors a user can cause raise
:class:`ConfigError` with a message that names the fix.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["TrainConfig", "ConfigError", "load_config", "config_fields", "check_out_dir", "read_toml"]


def read_toml(path, error: type[Exception], missing: str) -> dict:
    """Parse the TOML file ``path`` (tomllib). Raises ``error(missing)`` when
    the file does not exist and ``error`` naming the file and the parse error
    when it is not valid TOML."""
    import tomllib

    p = Path(path)
    if not p.exists():
        raise error(missing)
    if p.is_dir():
        raise error(f"{p} is a directory, not a TOML file; give the file itself, e.g. {p / 'run.toml'}")
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise error(f"{p}: not valid TOML: {e}") from None
    except UnicodeDecodeError as e:
        raise error(f"{p}: not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start}); TOML files "
                    "must be UTF-8: save it as UTF-8") from None
    except OSError as e:
        raise error(f"{p}: cannot be read ({e.strerror}); check the path and its permissions") from None


class ConfigError(ValueError):
    """A bad option value or config file; the message says how to fix it."""


def option_flags() -> dict:
    """The older per-option flags the algorithms package declares
    (:data:`minips.distributed.algorithms.option_flags.OPTION_FLAGS`: name ->
    OptionFlag). Imported when first needed, so that importing this module
    does not import every algorithm."""
    from .distributed.algorithms.option_flags import OPTION_FLAGS
    return OPTION_FLAGS


@dataclass
class _RunOptions:
    """The fields of :class:`TrainConfig` (see there)."""

    model: str = "convnet"
    data: str = "fashion-mnist-mini"
    epochs: int = 3
    batch_size: int = 32
    lr: float = 0.05
    momentum: float = 0.9
    nesterov: bool = True
    weight_decay: float = 0.0
    clip_norm: float = 0.0
    schedule: str = "cosine"
    warmup_epochs: float = 0.0
    scale_lr: bool = False
    seed: int = 0
    out: str = "runs/latest"
    algo: str | None = None
    partition: str = "iid"
    network: str | None = None
    progress: str = "poll"
    allreduce: str = "auto"
    ranks_per_node: int = 0
    check_replicas: int = 0
    checkpoint_every: int = 0
    resume: str | None = None
    max_steps: int = 0
    eval_batch_size: int = 500
    quiet: bool = False
    trace: bool = True
    label: str | None = None
    consensus_every: int = 50
    eval_rank0: bool = False
    overwrite: bool = False
    val_fraction: float = 0.0
    eval_every: int = 0
    virtual_ranks: int = 0
    algo_options: dict = field(default_factory=dict)


class TrainConfig(_RunOptions):
    """Every option of a training run (defaults are the README's main job).

    Sizes: ``batch_size`` is per rank (weak scaling: the global batch is
    ``batch_size * P``). ``lr`` is the base learning rate; with ``scale_lr``
    it is multiplied by P (linear scaling rule, Goyal et al. 2017) and warmed
    up linearly over ``warmup_epochs``.

    ``virtual_ranks`` = P > 0 runs the P ranks as threads of this process
    (:mod:`minips.distributed.comm.virtual`) instead of one per ``mpiexec``
    process; it is an option of the launcher (:func:`minips.train.train`,
    the CLI), not of one rank's :class:`~minips.train.Trainer`.

    ``algo`` is an algorithm spec, ``NAME[:key=value]...[@LABEL]`` (see
    ``python -m minips algorithms``); None = the algorithms package's
    ``DEFAULT``. The older per-option flags that the algorithms package
    declares (:func:`option_flags`) are accepted as keywords and attributes
    too, e.g. ``TrainConfig(staleness=2)``: None = the algorithm's default;
    they apply to algorithms that have the option and are ignored by the
    others (so ``compare`` can pass them to every run); an option in the spec
    wins over the flag. They are kept in ``algo_options``.
    """

    def __init__(self, *args, **kw):
        flags = option_flags()
        given = {k: kw.pop(k) for k in list(kw) if k in flags}
        super().__init__(*args, **kw)
        for k, v in given.items():
            setattr(self, k, v)

    def __getattr__(self, name):  # only for names that are not fields: the older flags
        if name in option_flags():
            return self.__dict__.get("algo_options", {}).get(name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name, value):
        if name in option_flags():
            opts = dict(self.algo_options)
            if value is None or (isinstance(value, dict) and not value):
                opts.pop(name, None)
            else:
                opts[name] = value
            name, value = "algo_options", opts
        object.__setattr__(self, name, value)

    def algo_defaults(self) -> dict:
        """The older per-option flags given, as algorithm option defaults (see the class doc)."""
        return {k: v for k, v in self.algo_options.items() if v not in (None, {})}

    def resolve_algo(self):
        """The :class:`~minips.distributed.algorithms.AlgoSpec` of ``algo`` with the
        older flags applied.

        Raises:
            ConfigError: a bad spec (unknown algorithm or option, bad value).
        """
        from .distributed.algorithms import DEFAULT, resolve
        try:
            return resolve(self.algo or DEFAULT, self.algo_defaults())
        except ValueError as e:
            raise ConfigError(str(e)) from None

    def validate(self) -> None:
        """Raise :class:`ConfigError` on an impossible value (naming the flag)."""
        def need(cond, msg):
            if not cond:
                raise ConfigError(msg)
        # NaN and infinities pass float() (and TOML has inf and nan), but no option
        # means them: --lr inf would diverge at the first step, and a NaN fails
        # every comparison below with the wrong advice
        numbers = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "algo_options"}
        for name, v in {**numbers, **self.algo_options}.items():
            need(not isinstance(v, float) or math.isfinite(v),
                 f"--{name.replace('_', '-')} must be a finite number, got {v}")
        need(self.epochs >= 1, f"--epochs must be >= 1, got {self.epochs}")
        need(self.seed >= 0, f"--seed must be >= 0 (the generators take non-negative seeds), got {self.seed}")
        need(self.batch_size >= 1, f"--batch-size must be >= 1, got {self.batch_size}")
        need(self.lr > 0, f"--lr must be > 0, got {self.lr}")
        need(0 <= self.momentum < 1, f"--momentum must be in [0, 1), got {self.momentum}")
        need(self.weight_decay >= 0, f"--weight-decay must be >= 0, got {self.weight_decay}")
        need(self.warmup_epochs >= 0, f"--warmup-epochs must be >= 0, got {self.warmup_epochs}")
        need(self.clip_norm >= 0 and self.clip_norm != float("inf"),
             f"--clip-norm must be a finite number >= 0 (the largest global L2 norm of an update direction; "
             f"0 = no clipping), got {self.clip_norm}")
        need(self.check_replicas >= 0, "--check-replicas must be >= 0 (0 = off)")
        need(self.checkpoint_every >= 0, "--checkpoint-every must be >= 0 (0 = off)")
        need(self.max_steps >= 0, "--max-steps must be >= 0 (0 = no limit)")
        for name, flag in option_flags().items():  # the older per-option flags' own bounds
            v = self.algo_options.get(name)
            if flag.minimum is not None and v is not None:
                need(not isinstance(v, (int, float)) or v >= flag.minimum,
                     f"--{name.replace('_', '-')} must be >= {flag.minimum:g}"
                     + (f" ({flag.why})" if flag.why else "") + f", got {v}")
        need(0 <= self.val_fraction < 1, f"--val-fraction must be in [0, 1) (0 = no validation split; e.g. "
                                         f"0.1 holds out 10% of the training set), got {self.val_fraction}")
        need(self.eval_every >= 0, f"--eval-every must be >= 0 (evaluate on the validation split every N steps; "
                                   f"0 = only at each epoch's end), got {self.eval_every}")
        need(not self.eval_every or self.val_fraction,
             f"--eval-every {self.eval_every} evaluates on the validation split, and there is none: add "
             "--val-fraction (e.g. 0.1), or drop --eval-every")
        need(self.eval_batch_size >= 1, f"--eval-batch-size must be >= 1 (samples per forward pass when "
                                        f"evaluating; it only bounds memory, e.g. 500), got {self.eval_batch_size}")
        need(self.consensus_every >= 0, "--consensus-every must be >= 0 (0 = only at evaluations)")
        from .distributed.comm.virtual import MAX_RANKS
        need(0 <= self.virtual_ranks <= MAX_RANKS, f"--virtual-ranks must be in 1..{MAX_RANKS} (0 = off: one rank "
                                                   f"per process), got {self.virtual_ranks}")
        need(self.allreduce in ("flat", "hierarchical", "auto"),
             f"--allreduce must be flat, hierarchical or auto, got {self.allreduce!r}")
        need(self.ranks_per_node >= 0, f"--ranks-per-node must be >= 1 (0 = the machine's nodes), "
                                       f"got {self.ranks_per_node}")
        need(not self.virtual_ranks or self.ranks_per_node <= self.virtual_ranks,
             f"--ranks-per-node {self.ranks_per_node} is more than the {self.virtual_ranks} virtual ranks; "
             "give 1..P")
        need(self.progress in ("none", "poll", "thread"),
             f"--progress must be none, poll or thread, got {self.progress!r}")


def config_fields() -> list[str]:
    """Names of the TrainConfig options: the valid TOML keys and ``--flag``
    names (its fields, then the older per-option flags; not ``algo_options``,
    where those are kept)."""
    return [f.name for f in dataclasses.fields(TrainConfig) if f.name != "algo_options"] + list(option_flags())


def _field_types() -> dict:
    """TOML key -> the type text of its value ("int", "str | None", "dict", ...)."""
    types = {f.name: f.type for f in dataclasses.fields(TrainConfig) if f.name != "algo_options"}
    return {**types, **{k: flag.type for k, flag in option_flags().items()}}


def load_config(path) -> dict:
    """Read a TOML run configuration into a dict of TrainConfig fields.

    Keys may use dashes or underscores; an option that is a table (e.g. the
    predictor's options) is written as one (``[NAME]``, then ``key = value`` lines).

    Raises:
        ConfigError: missing file, TOML syntax error, or an unknown key (the
            valid keys are listed).
    """
    p = Path(path)
    raw = read_toml(p, ConfigError, f"config file {p} does not exist")
    types = _field_types()
    out = {}
    for k, v in raw.items():
        key = k.replace("-", "_")
        if key not in types:
            shown = sorted(f"[{n}]" if types[n] == "dict" else n.replace("_", "-") for n in types)
            raise ConfigError(f"{p}: unknown key {k!r}; valid keys (dashes or underscores): {', '.join(shown)}")
        _check_config_type(p, k, v, types[key])
        out[key] = v
    return out


# TrainConfig field type (its annotation text) -> (accepts(value), what to write)
_CONFIG_TYPES = {
    "int": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    "float": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "a number"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "str": (lambda v: isinstance(v, str), "a string"),
    "dict": (lambda v: isinstance(v, dict), "a table"),
}


def _toml_kind(v) -> str:
    """How TOML calls the type of a parsed value ("a string", "a boolean", ...)."""
    if isinstance(v, bool):
        return "a boolean"
    for t, name in ((int, "an integer"), (float, "a float"), (str, "a string"), (dict, "a table"),
                    (list, "an array")):
        if isinstance(v, t):
            return name
    return "a date/time"


def _toml_repr(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v)


def _parses_as(text: str, base: str) -> bool:
    """Whether ``text`` (a quoted TOML value) is a valid unquoted value of type ``base``."""
    if base == "bool":
        return text in ("true", "false")
    if base in ("int", "float"):
        try:
            (int if base == "int" else float)(text)
            return True
        except ValueError:
            return False
    return False


def _check_config_type(path: Path, key: str, value, ftype: str) -> None:
    """Raise ConfigError unless the TOML ``value`` fits the TrainConfig field
    type ``ftype`` (int: integers only, not booleans; float: integers or
    floats; bool: true/false only; str: strings; ``X | None``: as X)."""
    base = ftype.replace(" | None", "").strip()
    if base not in _CONFIG_TYPES:
        return
    accepts, want = _CONFIG_TYPES[base]
    if accepts(value):
        return
    hint = ""
    if base == "dict":
        hint = f"; write it as a table: [{key}] on its own line, then one option = value per line"
    elif isinstance(value, str):  # a quoted number or boolean: say how to write it unquoted
        text = value.strip()
        if _parses_as(text, base):
            hint = f"; write {key} = {text} without quotes"
    elif base == "str":
        hint = f'; put it in quotes: {key} = "{_toml_repr(value)}"'
    if not hint and base == "bool":
        hint = f"; write {key} = true or {key} = false (no quotes)"
    raise ConfigError(f"{path}: {key!r} must be {want}, got {_toml_repr(value)} ({_toml_kind(value)}){hint}")


def check_out_dir(out) -> Path:
    """``Path(out)``, after checking that it can be a run directory: neither it
    nor any existing folder above it may be a file.

    Raises:
        ConfigError: naming the file in the way.
    """
    out = Path(out)
    for p in (out, *out.parents):
        if p.exists():
            if not p.is_dir():
                what = "is" if p == out else f"is inside {p}, which is"
                raise ConfigError(f"--out {out} {what} a file, not a directory; give --out a directory "
                                  "(it is created if missing), e.g. --out runs/NAME")
            break
    return out
