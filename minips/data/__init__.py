"""Data sets, samplers, partitions and batch loaders."""
from .datasets import DATASETS, ImageDataset, UnknownDataError, load_image_dataset, resolve_h5  # noqa: F401
from .loader import BatchLoader, normalize_images  # noqa: F401
from .partition import Partition, parse_partition, partition_indices  # noqa: F401
from .sampler import DistributedSampler  # noqa: F401
from .holdout import VAL_SEED, holdout_indices  # noqa: F401
