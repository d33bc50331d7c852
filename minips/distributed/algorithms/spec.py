"""Algorithm spec strings and typed options: the one parser every entry point uses.

Grammar (``train --algo``, ``compare --algos`` entries, study grids, the
projection, ``python -m minips algorithms``)::

    SPEC   := NAME ( ":" OPTION )* ( "@" LABEL )?
    OPTION := KEY "=" VALUE          e.g. local-sgd:period=8
            | VALUE                  positional, in the order the class lists in
                                     ``POSITIONAL`` (today's short forms, e.g.
                                     pseudo-sync:adaptive:2 = predictor=adaptive:staleness=2)
    LABEL  := the run's name in tables, figures and folders (default: the spec as written)

Options are separated by colons so that comma-separated lists of specs
(``--algos a,b,c``) stay unambiguous. KEY may use dashes or underscores.
VALUE is converted to the type of the option's field in the algorithm's
``Options`` dataclass by :func:`minips.options.convert_value` (int, float, str;
bool: true/false, yes/no, on/off in any case, or 1/0); a key the class does not
know, bound for its ``EXTRA`` dict, is read by :func:`minips.options.parse_literal`.

An algorithm's ``Options`` is a dataclass whose fields carry
``metadata={"help": ..., "unit": ..., "choices": (...)}`` (choices: the only
values allowed, checked here) and whose ``validate()`` raises
``ValueError`` naming the option and the fix. An ``Options`` class may name
a dict field in ``EXTRA``: keys it does not know go into that dict (pseudo-sync
passes them to its predictor, e.g. ``pseudo-sync:predictor=adaptive:rho=0.95``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ...options import base_type, convert_value, option_rows, options_dict, parse_literal, type_hints

__all__ = ["ParsedSpec", "parse_spec", "convert_value", "build_options", "option_rows", "options_dict",
           "parse_literal", "base_type"]


@dataclass(frozen=True)
class ParsedSpec:
    """A spec string split into its parts (no types checked yet).

    Attributes:
        name: the algorithm name (before the first ``:``).
        keyed: ``KEY=VALUE`` options, keys with underscores, values as written.
        positional: the positional values, in order.
        label: the ``@LABEL`` part, or None.
        text: the spec as written (whitespace stripped).
    """
    name: str
    keyed: dict
    positional: tuple
    label: str | None
    text: str


def parse_spec(text: str) -> ParsedSpec:
    """Split ``NAME[:key=value]...[@LABEL]`` into a :class:`ParsedSpec`.

    Raises:
        ValueError: empty name, empty option, an option given twice, a
            positional value after a ``key=value`` one, or an empty label.
    """
    text = str(text).strip()
    body, at, label = text.partition("@")
    if at and not label.strip():
        raise ValueError(f"algorithm spec {text!r}: nothing after '@'; write NAME[:key=value]...@LABEL")
    if "@" in label:
        raise ValueError(f"algorithm spec {text!r}: more than one '@'; a spec has at most one @LABEL")
    parts = body.split(":")
    name = parts[0].strip()
    if not name:
        raise ValueError(f"algorithm spec {text!r}: no algorithm name; write NAME[:key=value]..., "
                         "e.g. local-sgd:period=8 (python -m minips algorithms lists the names)")
    keyed: dict = {}
    positional = []
    for part in parts[1:]:
        part = part.strip()
        if not part:
            raise ValueError(f"algorithm spec {text!r}: empty option between colons")
        if "=" in part:
            key, _, value = part.partition("=")
            key = key.strip().replace("-", "_")
            if not key:
                raise ValueError(f"algorithm spec {text!r}: option {part!r} has no name; write key=value")
            if key in keyed:
                raise ValueError(f"algorithm spec {text!r}: option {key!r} given twice")
            keyed[key] = value.strip()
        else:
            if keyed:
                raise ValueError(f"algorithm spec {text!r}: positional value {part!r} after key=value options; "
                                 "write it as key=value too")
            positional.append(part)
    return ParsedSpec(name, keyed, tuple(positional), label.strip() if at else None, text)


def build_options(cls, parsed: ParsedSpec | None = None, defaults: dict | None = None, **given):
    """The ``cls.Options`` instance for a spec, validated.

    Precedence: ``given`` (keyword options, e.g. from Python code) and the
    spec's own options > ``defaults`` (older flags such as ``--staleness``,
    applied only to options the class has and the spec did not set; a flag
    that contradicts the spec is an error) > the dataclass defaults.

    Raises:
        ValueError: too many positional values, an unknown option (the valid
            ones listed), a value of the wrong type, a flag that contradicts
            the spec, or the Options' own ``validate()`` failing.
    """
    Opts = cls.Options
    fields = {f.name: f for f in dataclasses.fields(Opts)}
    extra_field = getattr(Opts, "EXTRA", None)
    values: dict = {}
    extra: dict = {}
    where = f"{cls.name}"
    if parsed is not None:
        positional = getattr(cls, "POSITIONAL", ())
        if len(parsed.positional) > len(positional):
            form = ":".join(f"{p.upper()}" for p in positional) or "no positional values"
            raise ValueError(f"algorithm spec {parsed.text!r}: too many positional values; {cls.name} takes "
                             f"{cls.name}{':' if positional else ''}{form} or key=value options "
                             f"({', '.join(fields) or 'none'})")
        values.update(zip(positional, parsed.positional))
        for k, v in parsed.keyed.items():
            if k in values:
                raise ValueError(f"algorithm spec {parsed.text!r}: option {k!r} given twice")
            values[k] = v
        where = f"algorithm spec {parsed.text!r}:"
    for k, v in given.items():
        if v is not None:
            values[k] = v
    for k in list(values):
        if k not in fields:
            if extra_field:
                raw = values.pop(k)
                extra[k] = parse_literal(raw)
                continue
            valid = ", ".join(f.replace("_", "-") for f in fields) or "none"
            raise ValueError(f"{where} {cls.name} has no option {k.replace('_', '-')!r}; its options: {valid} "
                             "(python -m minips algorithms lists them)")
    hints = type_hints(Opts)

    def typed_value(k, v, what):
        return convert_value(v, hints.get(k, fields[k].type), what)

    typed = {k: typed_value(k, v, f"{where} option {k.replace('_', '-')}") for k, v in values.items()}
    if extra:
        typed[extra_field] = {**typed.get(extra_field, {}), **extra}
    # Older per-option flags fill what the spec left unset; a flag that says
    # something else than the spec is refused rather than silently ignored.
    for k, v in (defaults or {}).items():
        if v is None or k not in fields:
            continue
        flag = f"--{k.replace('_', '-')}" if k != extra_field else f"[{k}]"
        v = typed_value(k, v, f"{flag}")
        if k not in typed:
            typed[k] = v
        elif isinstance(v, dict):
            clash = {n: (x, typed[k][n]) for n, x in v.items() if n in typed[k] and typed[k][n] != x}
            if clash:
                n, (x, y) = next(iter(clash.items()))
                raise ValueError(f"{where} {flag} sets {n} = {x!r} but the spec says {n}={y!r}; give it once")
            typed[k] = {**v, **typed[k]}
        elif typed[k] != v:
            raise ValueError(f"{where} {flag} {v!r} conflicts with {k.replace('_', '-')}={typed[k]!r} in the spec; "
                             "give the option once (in the spec, or as the flag)")
    for k, v in typed.items():  # options with a fixed set of values say which
        choices = fields[k].metadata.get("choices") if k in fields else None
        if choices and v not in choices:
            raise ValueError(f"{where} option {k.replace('_', '-')} must be one of {', '.join(map(str, choices))}, "
                             f"got {v!r}")
    try:
        opts = Opts(**typed)
    except TypeError as e:
        raise ValueError(f"{where} {e}") from None
    validate = getattr(opts, "validate", None)
    if validate is not None:
        try:
            validate()
        except ValueError as e:
            raise ValueError(f"{cls.name}: {e}" if parsed is None else f"{where} {e}") from None
    return opts
