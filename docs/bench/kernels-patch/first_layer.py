"""The first convolution layers' training pass, timed the way ``bench kernels`` times
them: channels-last input, one work-buffer arena, 1 thread, CPU time per call.

    python docs/bench/kernels-patch/first_layer.py [PASSES [NxCxKxH,...]]

For each first-layer shape of the kernel table (N64/N128, 1->32 28x28 and 3->64
32x32, 3x3, padding 1; or the shapes given, e.g. 64x32x64x14) it prints the median and best CPU ms of
  fwd+bwd   conv2d_forward + conv2d_backward(need_x=C > 3), as the table's row;
  +ReLU+pool the same with bias, ReLU and 2x2 max pooling fused, as --breakdown;
  patch     that pass's "patch build" stage (Stages), and GB/s for its bytes;
  im2col    the patch build of the whole batch in one call.
It runs with whichever minips is imported (PYTHONPATH selects the checkout).
"""
import os
import sys
import time

os.environ.setdefault("NUMBA_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402

from minips.kernels import conv  # noqa: E402
from minips.kernels.arena import Arena  # noqa: E402

now = time.process_time
passes = int(sys.argv[1]) if len(sys.argv) > 1 else 40
rng = np.random.default_rng(0)


def stats(ts):
    return f"median {np.median(ts) * 1e3:7.3f} best {np.min(ts) * 1e3:7.3f} ms"


print(f"minips from {os.path.dirname(conv.__file__)}; {passes} passes; load {os.getloadavg()}")
SHAPES = [(64, 1, 32, 28), (128, 1, 32, 28), (64, 3, 64, 32), (128, 3, 64, 32)]
if len(sys.argv) > 2:
    SHAPES = [tuple(int(v) for v in s.split("x")) for s in sys.argv[2].split(",")]
for N, C, K, H in SHAPES:
    x = np.ascontiguousarray(rng.standard_normal((N, H, H, C)).astype(np.float32)).transpose(0, 3, 1, 2)
    w, b = rng.standard_normal((K, C, 3, 3)).astype(np.float32), rng.standard_normal(K).astype(np.float32)
    gy = np.ascontiguousarray(rng.standard_normal((N, H, H, K)).astype(np.float32)).transpose(0, 3, 1, 2)
    gz = np.ascontiguousarray(rng.standard_normal((N, H // 2, H // 2, K)).astype(np.float32)).transpose(0, 3, 1, 2)
    g = conv.geometry(x.shape, w.shape, 1, 1)
    a1, a2 = Arena(), Arena()
    plain, fused, patch, one = [], [], [], []
    cols = np.empty((N * g.P * g.Q, 9 * C), np.float32)
    for i in range(passes + 3):                     # 3 warm-up passes
        t = now()
        _, saved = conv.conv2d_forward(x, w, b, 1, 1, arena=a1)
        conv.conv2d_backward(gy, w, saved, need_x=C > 3, arena=a1)
        t1 = now()
        st = conv.Stages(clock=now)
        _, saved = conv.conv2d_forward(x, w, b, 1, 1, relu=True, pool=2, arena=a2, stages=st)
        conv.conv2d_backward(gz, w, saved, need_x=C > 3, arena=a2, stages=st)
        t2 = now()
        conv._im2col_nhwc(x.transpose(0, 2, 3, 1), 3, 3, 1, 1, 1, 1, g.P, g.Q, cols)
        t3 = now()
        if i >= 3:
            plain.append(t1 - t)
            fused.append(t2 - t1)
            patch.append(st.seconds["patch build"])
            one.append(t3 - t2)
    mb = (x.nbytes + cols.nbytes) / 1e6
    print(f"N{N} {C}->{K} {H}x{H}: fwd+bwd {stats(plain)} | +ReLU+pool {stats(fused)} | "
          f"patch {stats(patch)} ({mb / np.median(patch) / 1e3:.1f} GB/s) | "
          f"im2col {stats(one)} ({mb / np.median(one) / 1e3:.1f} GB/s)", flush=True)
