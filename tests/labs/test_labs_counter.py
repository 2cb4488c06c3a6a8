"""The labs' collective counter counts each buffer's real size: numel x element size, so a
bf16 or fp16 buffer counts 2 bytes an element, not the 4 of fp32. (The FSDP lab keeps its
parameters in fp32, so its own runs cannot tell the two apart.)"""
from __future__ import annotations

import socket

import pytest
import torch
import torch.distributed as dist

from labs.training import CollectiveCounter


@pytest.fixture
def one_rank_group():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize("dtype, element_bytes", [(torch.float32, 4), (torch.bfloat16, 2), (torch.float16, 2)])
def test_counter_counts_each_dtype_at_its_own_size(one_rank_group, dtype, element_bytes):
    buffer = torch.ones(1000, dtype=dtype)
    gathered = torch.empty(1000, dtype=dtype)
    with CollectiveCounter() as counter:
        dist.all_reduce(buffer)
        dist.all_gather_single(gathered, buffer)
    assert counter.calls == {"all_reduce": 1, "all_gather": 1}
    assert counter.bytes == {"all_reduce": 1000 * element_bytes, "all_gather": 1000 * element_bytes}
