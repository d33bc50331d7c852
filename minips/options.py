"""Options of plug-ins, one style for every kind: an ``Options`` dataclass.

An algorithm, a gradient predictor, a compressor and an averaging method each
declare their options as a nested ``@dataclass class Options`` whose fields
carry ``metadata={"help": ..., "unit": ..., "choices": (...)}``; an optional
``validate()`` raises ``ValueError`` naming the option and the fix. This module
holds what all kinds share, and imports nothing of minips (every layer may use it):

- :func:`parse_literal`, the one parser of a value written in text whose type
  is not known yet (a spec's ``key=value`` that the class passes on, a
  compressor spec): ``true``/``yes``/``on`` and ``false``/``no``/``off`` (any
  case) are booleans, then an integer, then a float, else the string itself;
- :func:`convert_value`, which types a value (text, TOML or Python) to a field's
  type: a bool field takes a bool, those words, ``1``/``0`` (text or int); an int
  field an integer; a float field any finite number; a str field the text;
- :func:`option_rows` and :func:`options_dict`, for listings and summary.json;
- :func:`fields_of`, the option names and defaults of an ``Options`` class;
- :func:`type_hints`, an ``Options`` class's field types, read once per class
  (``typing.get_type_hints`` evaluates every annotation anew on each call:
  ``compare`` of 50 algorithms spent a third of its time there).
"""
from __future__ import annotations

import dataclasses
import functools
import math
import typing

__all__ = ["TRUE_WORDS", "FALSE_WORDS", "parse_literal", "convert_value", "base_type", "option_rows",
           "options_dict", "fields_of", "type_hints", "finite_float"]

#: the words a boolean option accepts (any case); 1 and 0 are accepted too, as numbers
TRUE_WORDS, FALSE_WORDS = ("true", "yes", "on"), ("false", "no", "off")


def parse_literal(value):
    """A value written in text whose type is not known: bool, int, float or str.

    ``"yes"`` -> True, ``"off"`` -> False, ``"8"`` -> 8, ``"0.5"`` -> 0.5,
    ``"1e-3"`` -> 0.001, ``"ring"`` -> ``"ring"``; ``"1"`` is the integer 1 (a
    bool field later takes it as True). A value that is not a string is returned
    as it is. Never raises.
    """
    if not isinstance(value, str):
        return value
    low = value.strip().lower()
    if low in TRUE_WORDS or low in FALSE_WORDS:
        return low in TRUE_WORDS
    for conv in (int, float):
        try:
            return conv(value)
        except ValueError:
            pass
    return value


def base_type(tp) -> type:
    """``int | None`` -> int; ``"float"`` (string annotations) -> float."""
    if isinstance(tp, str):
        tp = {"int": int, "float": float, "bool": bool, "str": str, "dict": dict}.get(
            tp.replace(" | None", "").replace("Optional[", "").rstrip("]").strip(), str)
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if args:
        return base_type(args[0])
    origin = typing.get_origin(tp)
    return origin or tp


def convert_value(value, tp, where: str):
    """Convert a spec/flag/TOML ``value`` to the field type ``tp``.

    Strings are parsed (``"8"`` -> 8 for int, ``"yes"`` -> True for bool); values
    of the right type pass; an int is accepted for a float, and 1/0 for a bool.
    ``where`` names the option in errors.

    Raises:
        ValueError: the value does not convert, naming the option and the type wanted.
    """
    base = base_type(tp)
    if base is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in TRUE_WORDS + FALSE_WORDS + ("1", "0"):
            return value.strip().lower() in TRUE_WORDS + ("1",)
        raise ValueError(f"{where} must be true or false, got {value!r}")
    if base is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                pass
        raise ValueError(f"{where} must be an integer, got {value!r}")
    if base is float:
        out = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out = float(value)
        elif isinstance(value, str):
            try:
                out = float(value)
            except ValueError:
                pass
        if out is None:
            raise ValueError(f"{where} must be a number, got {value!r}")
        if not math.isfinite(out):  # nan/inf pass float() but no option means them (and JSON cannot hold them)
            raise ValueError(f"{where} must be a finite number, got {value!r}")
        return out
    if base is dict:
        if isinstance(value, dict):
            return dict(value)
        raise ValueError(f"{where} must be a table of options, got {value!r}")
    return value if isinstance(value, str) else str(value)


def finite_float(text: str) -> float:
    """An argparse ``type`` for a number option: ``float(text)``, refusing NaN
    and infinities, which ``float`` accepts but no option means (``--timeout
    inf``, ``--within nan``).

    Raises:
        argparse.ArgumentTypeError: not a number, or not finite (argparse
            reports it with the flag's name).
    """
    import argparse
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def _default(f):
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else None


def fields_of(Opts) -> dict:
    """``{option: default}`` of an ``Options`` dataclass, in declaration order."""
    return {f.name: _default(f) for f in dataclasses.fields(Opts)}


@functools.cache
def type_hints(cls) -> dict:
    """``typing.get_type_hints(cls)``, computed once per class (the result is
    shared: do not modify it)."""
    return typing.get_type_hints(cls)


def options_dict(opts) -> dict:
    """The options as a plain dict (for summary.json and the listing)."""
    return dataclasses.asdict(opts)


def option_rows(Opts) -> list[dict]:
    """One dict per option of an ``Options`` class: name, type, default, unit, help, choices."""
    hints = type_hints(Opts)
    return [{"name": f.name.replace("_", "-"), "type": base_type(hints.get(f.name, f.type)).__name__,
             "default": _default(f), "unit": f.metadata.get("unit", ""), "help": f.metadata.get("help", ""),
             "choices": list(f.metadata.get("choices", ()))} for f in dataclasses.fields(Opts)]
