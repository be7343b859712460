"""torch.distributed over the nodes of a gang, from the env:// variables
spotline sets (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK): one all_reduce."""

import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")  # env:// rendezvous at MASTER_ADDR:MASTER_PORT
total = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(total)
print(
    f"torch rank {dist.get_rank()} of {dist.get_world_size()} all_reduce sum={total.item():g} "
    f"NODES={os.environ['NODES']!r}",
    flush=True,
)
dist.barrier()  # node 0 (whose exit ends the job) leaves after every node printed
dist.destroy_process_group()
