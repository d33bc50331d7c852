"""A toy algorithm written as a user would add one: this file and one table row.

``toy-drift``: every rank steps with its own local gradient (no communication),
and every ``period`` steps the ranks average their weights (one blocking
allreduce). Between averages the ranks hold different weights, so it is not
replicated: the Trainer must log the consensus distance, evaluate the averaged
model and checkpoint every rank. (This is periodic model averaging, i.e.
local SGD; here it only serves the plug-in tests.) It also exercises the
other hooks: ``lr-scale`` (adjust_lr), ``micro`` (micro_batches) and
``rank0-batch`` (batch_size on rank 0); and what the generic layers ask of
an algorithm: a pre-run check (refuses a ``period`` longer than the run,
warns when ``--max-steps`` stops the run before the first average), its
summary entries (``report``), a trace column with its figure titles
(``toy_weight_norm``) and profile extras that its cost model reads
(``toy_extra_s``, the seconds of its ``average`` phase, and
``toy_tensors``, the model's number of parameter tensors).

The tests register it with ``monkeypatch.setitem(ALGORITHMS, "toy-drift", ToyDrift)``
in-process, or through ``tests/toy_launch.py`` in an ``mpiexec`` job.
"""
from dataclasses import dataclass, field

import numpy as np

from minips.distributed.algorithms.base import Algorithm


class ToyDrift(Algorithm):
    """Local steps; average the weights every ``period`` steps."""

    name = "toy-drift"
    family = "model averaging"
    paper = "a test fixture (periodic model averaging)"

    @dataclass
    class Options:
        period: int = field(default=3, metadata={"help": "steps between weight averages", "unit": "steps"})
        lr_scale: float = field(default=1.0, metadata={"help": "multiplies the schedule's learning rate"})
        micro: int = field(default=1, metadata={"help": "micro-batches per step"})
        rank0_batch: int = field(default=0, metadata={"help": "rank 0's batch size (0 = as configured)"})

        def validate(self):
            if self.period < 1:
                raise ValueError(f"period must be >= 1, got {self.period}")

    @classmethod
    def keeps_replicas(cls, options) -> bool:
        return False  # between averages the ranks hold different weights

    TRACE_COLUMNS = {"toy_weight_norm": ("toy weights", "||w|| after the step")}
    PROFILE_EXTRAS = {"toy_extra_s": "seconds per step of its 'average' phase",
                      "toy_tensors": "the model's number of parameter tensors"}

    @classmethod
    def preflight(cls, options, plan):
        if options.period > plan.planned_steps:
            raise ValueError(f"toy-drift: period {options.period} is longer than the run's {plan.planned_steps} "
                             "steps, so the ranks would never average; give period <= the steps")
        if options.period > plan.total_steps:
            return [f"toy-drift: --max-steps {plan.max_steps} stops the run before its first average"]
        return []

    @classmethod
    def profile_extras(cls, options, shapes, phases):
        return {"toy_extra_s": float(phases.get("average", 0.0)), "toy_tensors": len(shapes)}

    @classmethod
    def step_time(cls, options, profile, P, net, phi=0.0):
        """Compute every step, one weight allreduce every ``period`` steps (and
        the measured averaging compute, when the profile has it)."""
        return (profile.compute + profile.extras.get("toy_extra_s", 0.0)
                + net.allreduce_time(profile.grad_bytes, P) / options.period)

    def report(self):
        return {"toy_averages": self.step_count // self.options.period}  # the weight averages so far

    def adjust_lr(self, lr):
        return lr * self.options.lr_scale

    def micro_batches(self):
        return self.options.micro

    def batch_size(self, base):
        return self.options.rank0_batch if (self.comm.rank == 0 and self.options.rank0_batch) else base

    def step(self):
        self.apply_update(self.flat.grads[0])          # a local step with the local gradient
        if (self.step_count + 1) % self.options.period == 0:
            with self.timer.phase("average"):          # a phase name of its own
                self.comm.allreduce(self.flat.weights)
                self.average(self.flat.weights)
        self.log = {"toy_weight_norm": float(np.linalg.norm(self.flat.weights))}
        self.end_step()
