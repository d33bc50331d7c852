# One-process step timer: ConvNet forward+backward+SGD, 1 thread, best of 5 x 5 steps of CPU time
# per step, batch 32 and 64. Run alternately on this tree and the baseline, with and without
# glibc's mmap threshold raised (the loop that made step_ab.txt is in its header).
import sys, time, numpy as np
from minips.kernels.threads import set_threads
set_threads(1)
from minips import nn
from minips.models.convnet import ConvNet
from minips.optim import SGD
from minips.tensor import Tensor
rng = np.random.default_rng(0)
out = []
for B in (32, 64):
    m = ConvNet(); opt = SGD(m.parameters(), lr=0.01, momentum=0.9)
    x = rng.standard_normal((B,1,28,28)).astype(np.float32); y = rng.integers(0,10,B)
    def step():
        opt.zero_grad(); loss = nn.cross_entropy(m(Tensor(x)), y); loss.backward(); opt.step()
    for _ in range(5): step()
    best = 1e9
    for _ in range(5):
        c=time.process_time()
        for _ in range(5): step()
        best = min(best, (time.process_time()-c)/5*1e3)
    out.append(f"b{B} {best:.1f}")
print(sys.argv[1], " ".join(out), flush=True)
