"""Names beside the points of a scatter, where they overlap no other name, no
point, no error bar and no leader line: :func:`label_points`, used by the
accuracy-against-traffic figure (:mod:`minips.plots.methods`).

Why not a library (adjustText 1.4, tried for this): on the two panels of 30
methods each of the families study (docs/bench/families), adjustText left 6-7
names over other names with its defaults and 4 with its forces, spacing and
iterations raised (25 s), where this search leaves none; on the tests'
crowded case (tests/test_study_families.py) :func:`minips.plots.layout_problems`
finds overlapping names in its figure, none in this one."""
from __future__ import annotations


def label_points(ax, xy, names, colors, fontsize: float = 7.0, bars=None) -> None:
    """Put ``names[i]`` next to data point ``xy[i]`` where it overlaps no label
    placed before it, no point, no leader line and stays inside the axes:
    candidates on rings of growing radius around the point and in rows beside
    it (in pixels, after the layout is fixed), the nearest free one taken, the
    most crowded points first; a label away from its point gets a thin leader
    line in the point's colour, which may cross no label or point either.
    When no candidate is free the one with the least overlap is taken.
    ``bars``: the half-height of each point's error bar in data units (the
    bar is kept clear like the point)."""
    import numpy as np
    fig = ax.figure
    fig.canvas.draw()
    rend = fig.canvas.get_renderer()
    to_pt = 72.0 / fig.dpi
    box = ax.get_window_extent(rend)
    disp = ax.transData.transform(np.asarray(xy, dtype=float))
    sizes = []
    for n in names:
        t = ax.text(0.5, 0.5, n, fontsize=fontsize, transform=ax.transAxes)  # (data 0 is off a log axis)
        bb = t.get_window_extent(rend)
        sizes.append((bb.width, bb.height))
        t.remove()
    marker_r = 6.0
    points = np.column_stack([disp - marker_r, disp + marker_r])  # (n, 4): x0, y0, x1, y1
    if bars is not None:  # the error bars: as tall as they are drawn
        xy_arr = np.asarray(xy, dtype=float)
        lo = ax.transData.transform(xy_arr - np.column_stack([np.zeros(len(xy)), bars]))[:, 1]
        hi = ax.transData.transform(xy_arr + np.column_stack([np.zeros(len(xy)), bars]))[:, 1]
        points[:, 1] = np.minimum(points[:, 1], lo)
        points[:, 3] = np.maximum(points[:, 3], hi)
    labels = np.zeros((0, 4))  # placed label boxes
    leaders = np.zeros((0, 4))  # placed leader segments: x0, y0, x1, y1

    def area(b, r):  # (C, 4) boxes x (K, 4) boxes -> (C,) summed overlap areas
        w = np.minimum(b[:, None, 2], r[None, :, 2]) - np.maximum(b[:, None, 0], r[None, :, 0])
        h = np.minimum(b[:, None, 3], r[None, :, 3]) - np.maximum(b[:, None, 1], r[None, :, 1])
        return (np.clip(w, 0, None) * np.clip(h, 0, None)).sum(axis=1)

    rings = [(r * np.cos(a), r * np.sin(a)) for r in (9, 14, 20, 28, 38, 50, 64, 80, 100, 125, 155, 190, 230)
             for a in np.deg2rad(np.arange(0, 360, 15.0))]
    crowd = [int(np.sum(np.hypot(*(disp - disp[i]).T) < 60)) for i in range(len(disp))]
    for i in sorted(range(len(disp)), key=lambda i: -crowd[i]):
        (x, y), (w, h) = disp[i], sizes[i]
        # on rings around the point, and stacked in rows beside it (labels are wide and short)
        rows = [(sx * d, k * (h + 1.5)) for k in range(-16, 17) for d in (10, 22, 40, 65, 95, 130, 170)
                for sx in (1, -1)]
        c = np.asarray(rings + rows)
        dx, dy = c[:, 0], c[:, 1]
        # the label's near side faces the point
        x0 = x + dx - np.where(dx < -1, w, np.where(np.abs(dx) <= 1, w / 2, 0.0))
        y0 = y + dy - np.where(dy < -1, h, np.where(np.abs(dy) <= 1, h / 2, 0.0))
        bb = np.column_stack([x0 - 1, y0 - 1, x0 + w + 1, y0 + h + 1])
        r = np.hypot(dx, dy)
        seg = np.column_stack([np.full_like(dx, x), np.full_like(dy, y), x + dx, y + dy])
        others = np.delete(points, i, axis=0)
        # worst: over another label; then a leader line through a label or a point; then over a point
        cost = 1e4 * area(bb, labels) + 30.0 * area(bb, points) + r
        cost += 3e3 * _segments_through_boxes(leaders, bb).sum(axis=0)
        far = r > 12
        cost += far * 3e3 * (_segments_through_boxes(seg, labels).sum(axis=1)
                             + _segments_through_boxes(seg, others).sum(axis=1))
        cost += far * 300.0 * _segments_cross(seg, leaders).sum(axis=1)
        outside = (bb[:, 0] < box.x0) | (bb[:, 1] < box.y0) | (bb[:, 2] > box.x1) | (bb[:, 3] > box.y1)
        cost[outside] = np.inf  # off the axes: over the tick labels
        k = int(np.argmin(cost))
        if not np.isfinite(cost[k]):  # no room inside the axes at all: beside the point
            k = int(np.argmin(r + 1e3 * (np.abs(dy) > 1) + 1e3 * (dx < 0)))
        dx, dy = float(dx[k]), float(dy[k])
        labels = np.vstack([labels, bb[k]])
        far = float(r[k]) > 12
        if far:
            leaders = np.vstack([leaders, seg[k]])
        ha = "right" if dx < -1 else ("center" if abs(dx) <= 1 else "left")
        va = "top" if dy < -1 else ("center" if abs(dy) <= 1 else "bottom")
        ax.annotate(names[i], xy=xy[i], xytext=(dx * to_pt, dy * to_pt), textcoords="offset points", ha=ha,
                    va=va, fontsize=fontsize, color="black")
        if far:  # the leader line: an annotation of its own, so the label's extent is the text's alone
            ax.annotate("", xy=xy[i], xytext=(dx * to_pt, dy * to_pt), textcoords="offset points",
                        arrowprops={"arrowstyle": "-", "color": colors[i], "lw": 0.7, "shrinkA": 1, "shrinkB": 4})


def _segments_through_boxes(seg, boxes):
    """``(S, K)``: does segment s (x0, y0, x1, y1) pass through the inside of box
    k (x0, y0, x1, y1)? Liang-Barsky clipping, vectorized."""
    import numpy as np
    sx0, sy0 = seg[:, None, 0], seg[:, None, 1]
    dx, dy = seg[:, None, 2] - sx0, seg[:, None, 3] - sy0
    t0 = np.zeros((len(seg), len(boxes)))
    t1 = np.ones((len(seg), len(boxes)))
    ok = np.ones((len(seg), len(boxes)), dtype=bool)
    for p, q in ((-dx, sx0 - boxes[None, :, 0]), (dx, boxes[None, :, 2] - sx0),
                 (-dy, sy0 - boxes[None, :, 1]), (dy, boxes[None, :, 3] - sy0)):
        p, q = np.broadcast_to(p, t0.shape), np.broadcast_to(q, t0.shape)
        zero = p == 0
        ok &= ~(zero & (q < 0))
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(zero, 0.0, q / np.where(zero, 1.0, p))
        t0 = np.where(~zero & (p < 0), np.maximum(t0, t), t0)
        t1 = np.where(~zero & (p > 0), np.minimum(t1, t), t1)
    return ok & (t0 < t1)


def _segments_cross(a, b):
    """``(A, B)``: do segments ``a[i]`` and ``b[j]`` (x0, y0, x1, y1) cross (a
    shared end point does not count)?"""

    def side(p, q, r):
        return (q[..., 0] - p[..., 0]) * (r[..., 1] - p[..., 1]) - (q[..., 1] - p[..., 1]) * (r[..., 0] - p[..., 0])
    a1, a2 = a[:, None, :2], a[:, None, 2:]
    b1, b2 = b[None, :, :2], b[None, :, 2:]
    return (side(b1, b2, a1) * side(b1, b2, a2) < 0) & (side(a1, a2, b1) * side(a1, a2, b2) < 0)
