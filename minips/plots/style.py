"""The look every minips figure shares: one colour per algorithm and per
timing phase, one line style and marker per run or method; and the Agg
backend with the one function that writes a figure (:func:`save`: the tests
replace it to inspect a figure before it is closed)."""
from __future__ import annotations

#: one colour per timing phase, in every breakdown figure ("other": the step's time outside every phase)
PHASE_COLORS = {"forward": "#4C72B0", "backward": "#55A868", "post": "#8172B2", "wait": "#C44E52",
                "predict": "#CCB974", "update": "#64B5CD", "other": "#BBBBBB"}

_LINESTYLES = ("-", "--", ":", "-.")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
#: lightness and saturation levels an algorithm's colour may take (HLS; dark
#: enough to read on white)
_LIGHTNESS, _SATURATION = (0.30, 0.42, 0.54), (0.65, 0.85)


def algo_color(algo: str) -> str:
    """The colour of algorithm ``algo`` (its registry name, e.g. ``pseudo-sync``)
    in every figure, derived from the name alone: the hue from a SHA-256 of the
    name, the lightness and saturation from two more of its bytes (HLS). Adding
    or reordering rows of the algorithms' table recolours nothing; two names
    may still get close colours, so figures also vary line style and marker
    (:func:`run_styles`). Returns ``"#rrggbb"``."""
    import colorsys
    import hashlib
    d = hashlib.sha256(algo.encode()).digest()
    hue = int.from_bytes(d[:4], "big") / 2**32
    r, g, b = colorsys.hls_to_rgb(hue, _LIGHTNESS[d[4] % len(_LIGHTNESS)], _SATURATION[d[5] % len(_SATURATION)])
    return "#" + "".join(f"{round(255 * c):02x}" for c in (r, g, b))


def run_styles(n: int) -> list[dict]:
    """Line style and marker of the i-th of ``n`` runs: all different, so two runs
    with the same curve still show as two (the markers are also staggered
    with ``markevery`` where curves are long)."""
    return [{"linestyle": _LINESTYLES[i % len(_LINESTYLES)], "marker": _MARKERS[i % len(_MARKERS)]}
            for i in range(n)]


def method_styles(methods) -> list[dict]:
    """Colour (the algorithm's), line style and marker of each method: the
    marker by its place, the line style by how many methods before it share
    its colour (the palette repeats after 20 algorithms, and one algorithm may
    appear with several option sets), so no two methods look alike."""
    out, seen = [], {}
    for i, m in enumerate(methods):
        color = algo_color(m["algo"])
        k = seen[color] = seen.get(color, -1) + 1
        out.append({"color": color, "linestyle": _LINESTYLES[k % len(_LINESTYLES)],
                    "marker": _MARKERS[(i + k // len(_LINESTYLES)) % len(_MARKERS)]})
    return out


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (files only: no display needed)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save(fig, path) -> None:
    """Write ``fig`` to ``path`` atomically and close it (tests replace this to
    inspect the figure).

    Raises:
        minips.rundir.WriteError: the disk is full or the folder read-only (one
            line naming the folder and the fix; no partial figure is left).
    """
    from ..rundir import atomic_savefig
    try:
        atomic_savefig(fig, path, dpi=120, bbox_inches="tight")
    finally:
        pyplot().close(fig)
