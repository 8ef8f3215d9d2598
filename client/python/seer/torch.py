"""seer.torch: the Loader as an iterable of torch tensors (Debian's python3-torch).

    from seer.torch import TorchLoader
    with TorchLoader() as loader:
        for epoch in range(loader.epochs):
            for x, y in loader:            # x: list of tensors (zero-copy) or one stacked tensor
                ...

Zero-copy (stack=False, the default): each sample is a torch tensor sharing
the daemon's read-only memory, valid until the iterator moves on (the batch
is then released). Writing to it faults; ``.clone()`` or ``.to(device)``
makes a private copy. stack=True returns one contiguous tensor per batch
(one copy, as DataLoader's collate does; samples must share a shape).
"""

import warnings

import numpy as np
import torch

from . import Loader

__all__ = ["TorchLoader"]


def _as_tensor(a):
    with warnings.catch_warnings():
        # the views are deliberately read-only; torch warns about that
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(a)


class TorchLoader(Loader):
    def __init__(self, *args, stack=False, **kwargs):
        super().__init__(*args, **kwargs)
        self.stack = stack

    def __iter__(self):
        for batch in super().__iter__():
            labels = torch.from_numpy(batch.labels)
            if self.stack:
                yield torch.from_numpy(np.stack(batch.samples)), labels
            else:
                yield [_as_tensor(s) for s in batch.samples], labels
