"""The layout check the tests run on every figure minips and the tutorials
draw: :func:`layout_problems` lists what a reader would stumble on (texts over
texts, texts off the figure, a legend over bars, a legend naming an entry
twice)."""
from __future__ import annotations


def layout_problems(fig) -> list[str]:
    """What a reader would stumble on in ``fig``, as matplotlib's renderer lays
    it out (one sentence each; empty when none): texts (titles, axis and tick
    labels, annotations, legend entries) that overlap each other, that run
    off the figure, or that lie over another panel's drawing; a legend over
    bars or boxes of its own panel; and a legend naming one entry twice.
    Used by the tests on every figure minips and the tutorials draw."""
    import numpy as np
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Rectangle
    fig.canvas.draw()
    rend = fig.canvas.get_renderer()
    W, H = fig.bbox.width, fig.bbox.height
    problems, texts = [], []  # texts: (what, bbox, owner axes or None)

    def add(t, what, owner):
        if t is None or not t.get_visible() or not t.get_text().strip():
            return
        texts.append((f"{what} {t.get_text()!r}", t.get_window_extent(rend), owner))

    def ticks(ax, axis, name):
        lo, hi = sorted(axis.get_view_interval())
        for tick in axis.get_major_ticks():
            if lo - 1e-9 * (hi - lo) <= tick.get_loc() <= hi + 1e-9 * (hi - lo):
                for lab in (tick.label1, tick.label2):
                    add(lab, f"{name} tick label", ax)

    if fig._suptitle is not None:
        add(fig._suptitle, "suptitle", None)
    legends = [(lg, None) for lg in fig.legends]
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        for t, what in ((ax.title, "title"), (ax._left_title, "title"), (ax._right_title, "title"),
                        (ax.xaxis.label, "x label"), (ax.yaxis.label, "y label")):
            if ax.axison or what == "title":
                add(t, what, ax)
        if ax.axison:
            ticks(ax, ax.xaxis, "x")
            ticks(ax, ax.yaxis, "y")
        for t in ax.texts:
            add(t, "text", ax)
        if ax.get_legend() is not None:
            legends.append((ax.get_legend(), ax))
    for lg, owner in legends:
        names = [t.get_text() for t in lg.get_texts()]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            problems.append(f"legend names {', '.join(map(repr, dup))} more than once")
        for t in lg.get_texts():
            texts.append((f"legend entry {t.get_text()!r}", t.get_window_extent(rend), owner or "figure legend"))
        if owner is not None:  # over the panel's own bars or boxes?
            box = lg.get_window_extent(rend)
            shapes = [p.get_window_extent(rend) for p in owner.patches if isinstance(p, Rectangle)
                      and p.get_width() and p.get_height()]
            for c in owner.collections:
                if isinstance(c, PolyCollection):
                    shapes += [path.get_extents(c.get_transform()) for path in c.get_paths()]
            if any(box.overlaps(s) and s.width > 0 and s.height > 0 for s in shapes):
                problems.append(f"the legend of panel {owner.get_title()!r} covers its bars")
    for what, bb, _ in texts:
        if bb.x0 < -1 or bb.y0 < -1 or bb.x1 > W + 1 or bb.y1 > H + 1:
            problems.append(f"{what} runs off the figure")
    shrink = 1.0  # touching is fine; overlapping by more than a pixel is not

    def hit(a, b):
        return (min(a.x1, b.x1) - max(a.x0, b.x0) > shrink) and (min(a.y1, b.y1) - max(a.y0, b.y0) > shrink)
    for i in range(len(texts)):
        for j in range(i + 1, len(texts)):
            if hit(texts[i][1], texts[j][1]):
                problems.append(f"{texts[i][0]} overlaps {texts[j][0]}")
    drawn = [ax for ax in fig.axes if ax.get_visible() and (ax.images or ax.lines or ax.patches or ax.collections)]
    for what, bb, owner in texts:
        for ax in drawn:
            if ax is not owner and hit(bb, ax.get_window_extent(rend)) and not np.isclose(bb.width, 0):
                problems.append(f"{what} lies over another panel ({ax.get_title()!r})")
    return problems
