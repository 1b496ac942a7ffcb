"""Datasets and the DataLoader: host-side data preparation that feeds tensors to any device."""

from .dataset import (
    ConcatDataset,
    Dataset,
    InMemoryDataset,
    MappedDataset,
    Subset,
    WindowDataset,
    random_split,
)
from .files import CsvDataset, ParquetDataset
from .loader import DataLoader, default_collate

__all__ = [
    "Dataset",
    "InMemoryDataset",
    "MappedDataset",
    "Subset",
    "ConcatDataset",
    "WindowDataset",
    "random_split",
    "CsvDataset",
    "ParquetDataset",
    "DataLoader",
    "default_collate",
]
