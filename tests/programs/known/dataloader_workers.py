"""(DataLoader) A PyTorch ``DataLoader`` with two forked worker processes: each item is read (a 14 ms
wait, as from a slow disk) and decoded (2 ms of compute) in a 'load' range inside the worker; the
main process 'consume's each batch of 2 (4 ms of compute). The workers limit: 2 x 16 ms a batch on
each of 2 workers is 16 ms a batch against the consumer's 4. ``--fix``: 8 workers.

Known answer: lever ``parallel_input`` on ``load``; 8 workers bring a batch every 4 ms, so the
consumer (4 ms) then limits: 16/4 = 4x at most, less the hand-over through the workers' pipes. The
workers fork without exec, so only a profile that follows forks (nsys's
``--trace-fork-before-exec=true``) holds their ranges.
"""
import torch
from torch.utils.data import DataLoader, Dataset

from _known import Steady, args, cpu, wait

from labkit import annotate

BATCH = 2


class Items(Dataset):
    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        with annotate.range("load", batch=i, items=1):
            wait(14)
            cpu(2)
        return i


def as_list(items: list) -> list:
    """The batch as the worker made it (no tensor: a tensor's hand-over through shared memory is not
    what this program is about)."""
    return items


if __name__ == "__main__":
    torch.set_num_threads(1)
    a = args(__doc__, items=120)
    loader = DataLoader(Items(a.items + 2 * BATCH), batch_size=BATCH, collate_fn=as_list, num_workers=8 if a.fix else 2)
    it = iter(loader)
    next(it)  # the workers started: their start-up is not the steady loop
    next(it)
    with Steady(a.items):
        for b, batch in enumerate(it):
            with annotate.range("consume", batch=b, items=len(batch)):
                cpu(4)
