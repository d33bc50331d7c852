"""Distributed training algorithms: one file per method, one registry table.

:data:`ALGORITHMS` is the only place that lists them: name -> class. Adding
an algorithm is one new file (a subclass of :class:`Algorithm` with ``name``,
``family``, ``paper``, an ``Options`` dataclass, ``step()`` and
``step_time()``), one row here, and its test. Everything else (``train``,
``compare``, ``bench scaling``, ``bench study``, the projection,
``python -m minips algorithms``) reads this table.

A run names its algorithm with a spec string (:mod:`.spec`):
``NAME[:key=value]...[@LABEL]``, e.g. ``pseudo-sync:predictor=adaptive:staleness=2``
or ``overlap-sync:bucket-mb=4@ddp``.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..costmodel import Interconnect, SharedMemoryModel, check_interference, parse_network
from .adaptive_batch import AdaptiveBatchLocalSGD
from .aperiodic_local_sgd import AperiodicLocalSGD
from .base import Algorithm, StepContext
from .choco_sgd import ChocoSGD
from .d_psgd import DPSGD
from .dng import DNG
from .elastic_gossip import ElasticGossip
from .gossip_aga import GossipAGA
from .gossip_pga import GossipPGA
from .gaussian_avg import GaussianAveraging
from .gossipgrad import GossipGraD
from .gradient_tracking import GradientTracking
from .gs_sgd import GlobalSketchSGD
from .gt_pga import GTPGA
from .hetero_gossip import HeteroGossip
from .local_sgd import LocalSGD
from .overlap_local_sgd import OverlapLocalSGD
from .pd_sgd import PDSGD
from .pqasgd import PQASGD
from .post_local_sgd import PostLocalSGD
from .powersgd import PowerSGD
from .pseudo_sync import PseudoSyncSGD
from .qprsgd import QPRSGD
from .qsgd import QSGDSGD
from .sgp import SGP
from .spec import ParsedSpec, build_options, option_rows, options_dict, parse_spec
from .ssd_sgd import SSDSGD
from .stl_sgd import STLSGD
from .sync import OverlapSyncSGD, SyncSGD
from .topk_sgd import TopKSGD

__all__ = ["ALGORITHMS", "step_time", "BASELINE", "DEFAULT", "DEFAULT_ALGOS", "example_spec", "Algorithm", "AlgoSpec",
           "StepContext", "algorithm_class", "build_algorithm",
           "describe_algorithms", "make_algorithm", "parse_spec", "resolve"]

#: name -> class; the one table of every algorithm minips runs.
ALGORITHMS: dict[str, type[Algorithm]] = {
    "sync": SyncSGD,
    "overlap-sync": OverlapSyncSGD,
    "pseudo-sync": PseudoSyncSGD,
    # model averaging (local updates)
    "local-sgd": LocalSGD,
    "post-local-sgd": PostLocalSGD,
    "aperiodic-local-sgd": AperiodicLocalSGD,
    "stl-sgd": STLSGD,
    "adaptive-batch": AdaptiveBatchLocalSGD,
    "overlap-local-sgd": OverlapLocalSGD,
    # gossip (decentralized)
    "d-psgd": DPSGD,
    "gossip-pga": GossipPGA,
    "gossip-aga": GossipAGA,
    "pd-sgd": PDSGD,
    "gossipgrad": GossipGraD,
    "elastic-gossip": ElasticGossip,
    "sgp": SGP,
    "gradient-tracking": GradientTracking,
    "gt-pga": GTPGA,
    "dng": DNG,
    "hetero-gossip": HeteroGossip,
    # compression
    "topk-sgd": TopKSGD,
    "qsgd": QSGDSGD,
    "powersgd": PowerSGD,
    "gs-sgd": GlobalSketchSGD,
    "gaussian-avg": GaussianAveraging,
    "pqasgd": PQASGD,
    "ssd-sgd": SSDSGD,
    "qprsgd": QPRSGD,
    "choco-sgd": ChocoSGD,
}

#: the algorithm ``train`` runs when none is named (the project's centrepiece)
DEFAULT = "pseudo-sync"
#: the reference the others are compared with (projections, study tables)
BASELINE = "sync"
#: the default side-by-side comparison (bench scaling): the default pseudo-sync (local predictor) and
#: the seed paper's AESP, named explicitly
DEFAULT_ALGOS = ("sync", "overlap-sync", "pseudo-sync:local", "pseudo-sync:adaptive")


def algorithm_class(name: str) -> type[Algorithm]:
    """The Algorithm subclass registered as ``name``.

    Raises:
        ValueError: unknown name (the valid ones listed).
    """
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; choose one of {', '.join(ALGORITHMS)} "
                         "(python -m minips algorithms describes them)")
    return ALGORITHMS[name]


@dataclass(frozen=True)
class AlgoSpec:
    """A spec string resolved against the registry: class, typed options, label.

    Attributes:
        cls: the Algorithm subclass.
        options: its validated ``Options`` instance.
        label: the run's name (``@LABEL``, else the spec as written).
        text: the spec as written.
    """
    cls: type
    options: object
    label: str
    text: str

    @property
    def name(self) -> str:
        return self.cls.name

    @property
    def replicated(self) -> bool:
        """Whether runs of this spec keep every rank's weights identical."""
        return self.cls.keeps_replicas(self.options)

    def options_dict(self) -> dict:
        return options_dict(self.options)

    @property
    def run_label(self) -> str:
        """The label of a single run: ``label``, except that a bare name gets
        the class's default label (e.g. ``pseudo-sync`` -> ``pseudo-sync:local``,
        which says which options ran)."""
        return self.cls.default_label(self.options) if self.label == self.cls.name else self.label

    def step_time(self, profile, P: int, net, phi: float = 0.0) -> float:
        """The class's cost model with these options (seconds per step; see
        :meth:`Algorithm.step_time`)."""
        return self.cls.step_time(self.options, profile, P, net, phi)

    def build(self, params, optimizer, comm) -> Algorithm:
        """The running algorithm for a model's ``params`` and ``optimizer``."""
        return self.cls(params, optimizer, comm, options=self.options)


def resolve(spec, defaults: dict | None = None) -> AlgoSpec:
    """Parse and check a spec string (or pass an :class:`AlgoSpec` through).

    Args:
        spec: ``NAME[:key=value]...[@LABEL]`` (see :mod:`.spec`).
        defaults: option values from legacy flags (``--staleness``,
            ``--predictor``, ``--bucket-mb``, ``[predictor_options]``), used for
            options the class has and the spec does not set; None values ignored.

    Raises:
        ValueError: malformed spec, unknown algorithm or option, a bad value.
    """
    if isinstance(spec, AlgoSpec):
        return spec
    parsed: ParsedSpec = parse_spec(spec)
    cls = algorithm_class(parsed.name)
    options = build_options(cls, parsed, defaults)
    return AlgoSpec(cls, options, parsed.label or parsed.text, parsed.text)


def build_algorithm(spec, params, optimizer, comm, defaults: dict | None = None) -> Algorithm:
    """Build the algorithm a spec string names (see :func:`resolve`)."""
    return resolve(spec, defaults).build(params, optimizer, comm)


def make_algorithm(name: str, params, optimizer, comm, **options) -> Algorithm:
    """Build algorithm ``name`` with keyword options, e.g.
    ``make_algorithm("pseudo-sync", params, opt, comm, staleness=2)``.
    None values are ignored (so callers can pass every flag).

    Raises:
        ValueError: unknown name or option (the valid ones listed), or a bad value.
    """
    cls = algorithm_class(name)
    return cls(params, optimizer, comm, options=build_options(cls, **options))


def example_spec() -> str:
    """A spec with an option, from the table (for help texts): the default
    algorithm with its first option at its default value."""
    from .spec import option_rows
    opts = option_rows(ALGORITHMS[DEFAULT].Options)
    return f"{DEFAULT}:{opts[0]['name']}={opts[0]['default']}" if opts else DEFAULT


def describe_algorithms() -> list[dict]:
    """One dict per registered algorithm: name, family, whether ranks stay
    identical with the default options, its options (name, type, default,
    unit, help), positional short form, the paper, and the summary: the first
    paragraph of the class docstring, joined into one line."""
    rows = []
    for name, cls in ALGORITHMS.items():
        defaults = build_options(cls)
        rows.append({"name": name, "family": cls.family, "replicated": cls.keeps_replicas(defaults),
                     "options": option_rows(cls.Options), "extra_options": cls.extra_options(),
                     "positional": list(cls.POSITIONAL),
                     "paper": cls.paper, "summary": " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split())})
    return rows


def step_time(spec, profile, P: int, net, interference: float = 0.0, algorithm: str = "ring",
              ranks_per_node: int = 1, path: str = "flat", shm: SharedMemoryModel | None = None) -> float:
    """Seconds per step of the algorithm ``spec`` (a spec string such as
    ``local-sgd:period=8``, or an AlgoSpec) at ``P``
    nodes: its own cost model (``step_time`` next to its update rule in
    :mod:`minips.distributed.algorithms`) on ``net`` with the ``algorithm``
    allreduce (``ring`` or ``rabenseifner``) and interference phi (assumption 4);
    with ``ranks_per_node`` R > 1, P ranks on nodes of R and the ``path``
    (``flat`` or ``hierarchical``) allreduce, the node's memory ``shm``.

    Raises:
        ValueError: unknown algorithm or option, interference outside [0, 1], P < 1, or an
            extra in ``profile`` that no registered algorithm reads.
    """
    check_interference(interference)
    if profile.extras:
        known = {n for cls in ALGORITHMS.values() for n in cls.PROFILE_EXTRAS}
        unknown = sorted(set(profile.extras) - known)
        if unknown:
            raise ValueError(f"StepProfile: no registered algorithm reads {', '.join(map(repr, unknown))}; "
                             f"the extras they read: {', '.join(sorted(known)) or 'none'}")
    if P < 1:
        raise ValueError(f"P must be >= 1, got {P}")
    try:
        return resolve(spec).step_time(profile, P, Interconnect(parse_network(net), algorithm, ranks_per_node, path,
                                                                 shm), interference)
    except NotImplementedError as e:
        raise ValueError(f"no step-time model for {spec!r}: {e}") from None
