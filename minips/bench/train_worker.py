"""One rank of ``python -m minips bench train`` (launched by it under mpiexec).

Every rank builds, for each workload and per-rank batch size, the network
twice: in minips (trained with the registry's baseline algorithm: one
blocking allreduce of the flat gradient, then SGD with momentum) and, when
PyTorch is importable and asked for, the same layers in PyTorch (wrapped in
``DistributedDataParallel`` over gloo when there are several ranks). Both
start from the same weights and see the same random batches. The two are
timed in turn, ``--chunk`` steps at a time (A B A B ..., the first of each
pair alternating), so a machine whose load drifts slows both alike.

The workloads:

- ``convnet``: :class:`minips.models.ConvNet` on 1x28x28 images, 10 classes
  (conv 1->32, conv 32->64, two 2x2 max-pools, Linear 3136->128, dropout,
  Linear 128->10);
- ``lstm``: the captioner's LSTM step: an LSTM (F 128 -> H 256) over T = 10
  steps, a Linear (256 -> 32 tokens) on every step's output, cross-entropy.
  PyTorch's LSTM has two bias vectors (b_ih + b_hh); its b_hh is frozen at
  zero so both networks train the same parameters (equal counts).

Rank 0 writes ``--out`` (JSON). Not meant to be run by hand.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

#: workload -> description
WORKLOADS = {
    "convnet": "ConvNet, 1x28x28 images, 10 classes",
    "lstm": "captioner LSTM step: T10 F128 H256, Linear 256->32 per step",
}
LSTM_T, LSTM_F, LSTM_H, LSTM_V = 10, 128, 256, 32


def flops_per_sample(workload: str) -> float:
    """Floating-point operations of one training sample (forward + backward,
    the matrix products and convolutions only; 2 per multiply-add). Backward
    costs 2x forward (data and weight gradients) except the first
    convolution, whose input needs no gradient (1x)."""
    if workload == "convnet":
        c1 = 2.0 * 32 * 1 * 9 * 28 * 28
        c2 = 2.0 * 64 * 32 * 9 * 14 * 14
        fc = 2.0 * (3136 * 128 + 128 * 10)
        return (c1 + c2 + fc) + (c1 + 2 * c2 + 2 * fc)
    return 3 * 2.0 * LSTM_T * 4 * LSTM_H * (LSTM_F + LSTM_H) + 3 * 2.0 * LSTM_T * LSTM_H * LSTM_V


# --- the networks ------------------------------------------------------------------
def minips_net(workload: str):
    """(model, loss(batch) -> Tensor) in minips."""
    from .. import nn, ops
    from ..models import ConvNet
    from ..tensor import Tensor
    if workload == "convnet":
        model = ConvNet(1, (28, 28), 10)
        return model, model.loss

    class SeqModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(LSTM_F, LSTM_H)
            self.out = nn.Linear(LSTM_H, LSTM_V)

        def loss(self, batch):
            x, y = batch
            h, _ = self.lstm(Tensor(x))
            logits = self.out(ops.reshape(h, (x.shape[0] * x.shape[1], LSTM_H)))
            return nn.cross_entropy(logits, y)
    model = SeqModel()
    return model, model.loss


def torch_net(workload: str, torch, model):
    """The same layers in PyTorch, with ``model``'s (minips) weights copied in."""
    tnn = torch.nn
    if workload == "convnet":
        net = tnn.Sequential(tnn.Conv2d(1, 32, 3, padding=1), tnn.ReLU(), tnn.MaxPool2d(2),
                             tnn.Conv2d(32, 64, 3, padding=1), tnn.ReLU(), tnn.MaxPool2d(2), tnn.Flatten(),
                             tnn.Linear(3136, 128), tnn.ReLU(), tnn.Dropout(0.25), tnn.Linear(128, 10))
        src = [model.features[0], model.features[3], model.classifier[0], model.classifier[3]]
        dst = [net[0], net[3], net[7], net[10]]
        with torch.no_grad():
            for s, d in zip(src, dst):
                d.weight.copy_(torch.from_numpy(np.ascontiguousarray(s.weight.data)))
                d.bias.copy_(torch.from_numpy(np.ascontiguousarray(s.bias.data)))
        return net, lambda batch: tnn.functional.cross_entropy(net(batch[0]), batch[1])

    class Seq(tnn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = tnn.LSTM(LSTM_F, LSTM_H)
            self.out = tnn.Linear(LSTM_H, LSTM_V)

        def forward(self, x):
            h, _ = self.lstm(x)
            return self.out(h.reshape(-1, LSTM_H))
    net = Seq()
    with torch.no_grad():
        net.lstm.weight_ih_l0.copy_(torch.from_numpy(model.lstm.weight_ih.data))
        net.lstm.weight_hh_l0.copy_(torch.from_numpy(model.lstm.weight_hh.data))
        net.lstm.bias_ih_l0.copy_(torch.from_numpy(model.lstm.bias.data))
        net.lstm.bias_hh_l0.zero_()
        net.out.weight.copy_(torch.from_numpy(model.out.weight.data))
        net.out.bias.copy_(torch.from_numpy(model.out.bias.data))
    net.lstm.bias_hh_l0.requires_grad_(False)   # one bias vector, as in minips
    return net, lambda batch: tnn.functional.cross_entropy(net(batch[0]), batch[1])


def count_params(model) -> int:
    """Trainable parameters of a minips or PyTorch model."""
    return int(sum(p.data.size if hasattr(p.data, "size") and not callable(p.data.size) else p.numel()
                   for p in model.parameters() if getattr(p, "requires_grad", True)))


def make_batches(workload: str, batch: int, rank: int, n: int = 4) -> list:
    """``n`` random (x, y) batches (float32 inputs, int64 labels), different per rank."""
    rng = np.random.default_rng(1000 + rank)
    out = []
    for _ in range(n):
        if workload == "convnet":
            x = rng.standard_normal((batch, 1, 28, 28)).astype(np.float32)
            y = rng.integers(0, 10, batch).astype(np.int64)
        else:
            x = rng.standard_normal((LSTM_T, batch, LSTM_F)).astype(np.float32)
            y = rng.integers(0, LSTM_V, LSTM_T * batch).astype(np.int64)
        out.append((x, y))
    return out


# --- one step of each ----------------------------------------------------------------
class MinipsRunner:
    def __init__(self, workload, batch, comm, lr=0.01):
        from ..distributed.algorithms import BASELINE, build_algorithm
        from ..optim import SGD
        from .. import random as mrandom
        mrandom.seed(0)
        self.model, self.loss = minips_net(workload)
        self.model.train()
        self.params = count_params(self.model)
        self.algo = build_algorithm(BASELINE, self.model.parameters(), SGD(self.model.parameters(), lr=lr,
                                                                            momentum=0.9), comm)
        self.algo.start()
        self.batches = make_batches(workload, batch, comm.rank)
        self.i = 0

    def step(self) -> float:
        batch = self.batches[self.i % len(self.batches)]
        self.i += 1
        self.algo.before_backward()
        loss = self.loss(batch)
        loss.backward()
        self.algo.step()
        return float(loss.data)


class TorchRunner:
    def __init__(self, workload, batch, torch, minips_model, rank, world, lr=0.01):
        net, loss = torch_net(workload, torch, minips_model)
        self.params = count_params(net)
        net.train()
        self.net = net
        if world > 1:
            net = torch.nn.parallel.DistributedDataParallel(net)
            self.loss_fn = lambda b: torch.nn.functional.cross_entropy(net(b[0]), b[1])
        else:
            self.loss_fn = loss
        self.opt = torch.optim.SGD([p for p in self.net.parameters() if p.requires_grad], lr=lr, momentum=0.9)
        self.batches = [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in make_batches(workload, batch, rank)]
        self.i = 0

    def step(self) -> float:
        batch = self.batches[self.i % len(self.batches)]
        self.i += 1
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss_fn(batch)
        loss.backward()
        self.opt.step()
        return float(loss.detach())


def interleaved(runners: dict, comm, steps: int, chunk: int, warmup: int) -> dict:
    """Seconds per step of each runner, chunk by chunk, A B / B A alternating:
    ``(wall, cpu)``, each ``{name: [per chunk]}``. Each chunk's time is the
    slowest rank's (the step is collective anyway); cpu is the process's CPU
    time (all its threads; communication that polls counts too)."""
    for r in runners.values():
        for _ in range(warmup):
            r.step()
    names = list(runners)
    per = {k: [] for k in names}
    cpu = {k: [] for k in names}
    done = 0
    rnd = 0
    while done < steps:
        k = min(chunk, steps - done)
        order = names if rnd % 2 == 0 else names[::-1]
        for name in order:
            comm.barrier()
            t, c = time.perf_counter(), time.process_time()
            for _ in range(k):
                runners[name].step()
            dt, dc = (time.perf_counter() - t) / k, (time.process_time() - c) / k
            per[name].append(comm.allreduce_scalar(dt, "max"))
            cpu[name].append(comm.allreduce_scalar(dc, "max"))
        done += k
        rnd += 1
    return per, cpu


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m minips.bench.train_worker")
    p.add_argument("--workloads", default="convnet,lstm")
    p.add_argument("--batch-sizes", default="32")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--chunk", type=int, default=5)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--torch", action="store_true")
    p.add_argument("--port", type=int, default=29511)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)

    from ..distributed.comm import get_comm
    from .kernels.timing import set_threads
    comm = get_comm()
    torch = None
    if a.torch:
        try:
            import torch
        except ImportError:
            torch = None
    n = set_threads(a.threads, torch)
    if torch is not None:
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:   # already set (only possible before any parallel work)
            pass
        if comm.size > 1:
            import torch.distributed as dist
            dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}",
                                    rank=comm.rank, world_size=comm.size)
    import numba
    affinity = sorted(os.sched_getaffinity(0))
    affinities = comm.gather_obj(affinity)
    rows = []
    for wl in a.workloads.split(","):
        for b in (int(s) for s in a.batch_sizes.split(",")):
            runners = {"minips": MinipsRunner(wl, b, comm)}
            if torch is not None:
                runners["torch"] = TorchRunner(wl, b, torch, runners["minips"].model, comm.rank, comm.size)
            per, cpu = interleaved(runners, comm, a.steps, a.chunk, a.warmup)
            row = {"workload": wl, "ranks": comm.size, "batch_per_rank": b,
                   "flops_per_sample": flops_per_sample(wl),
                   "params": {k: r.params for k, r in runners.items()}}
            for k, ts in per.items():
                med = float(np.median(ts))
                row[k] = {"step_ms_median": 1e3 * med, "step_ms_min": 1e3 * float(np.min(ts)),
                          "step_ms_chunks": [1e3 * t for t in ts],
                          "cpu_ms_median": 1e3 * float(np.median(cpu[k])),
                          "samples_per_s": b * comm.size / med}
            if "torch" in row:
                row["ratio_minips_over_torch_time"] = row["minips"]["step_ms_median"] / row["torch"]["step_ms_median"]
            rows.append(row)
    if comm.rank == 0:
        with open(a.out, "w") as f:
            json.dump({"rows": rows, "threads": n, "threading_layer": numba.threading_layer(),
                       "affinity_per_rank": affinities,
                       "torch_threads": torch.get_num_threads() if torch is not None else None}, f, indent=1)
    if torch is not None and comm.size > 1:
        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    from ..distributed.comm import run_or_abort
    sys.exit(run_or_abort(main))
