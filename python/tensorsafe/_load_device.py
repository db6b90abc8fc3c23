"""CUDA staging for tensorsafe.load(device="cuda..."): host tensors copied to
the device through two pinned staging buffers, so the copy of one chunk into
pinned memory overlaps the non-blocking transfer of the previous one. Only
imported when a CUDA device is asked for; the CPU path never needs it."""

from __future__ import annotations

from typing import Any, Dict

_STAGE = 64 << 20  # bytes per staging buffer


def to_device(tensors: Dict[str, Any], device: Any) -> Dict[str, Any]:
    import torch

    dev = torch.device(device)
    if dev.type == "cpu":
        return tensors
    if dev.type != "cuda" or not torch.cuda.is_available():
        raise RuntimeError(f"device {device!r}: torch has no CUDA device here")
    stages = [torch.empty(_STAGE, dtype=torch.uint8, pin_memory=True) for _ in range(2)]
    events = [None, None]
    stream = torch.cuda.Stream(dev)
    out: Dict[str, Any] = {}
    k = 0
    with torch.cuda.stream(stream):
        for name, t in tensors.items():
            dst = torch.empty(t.shape, dtype=t.dtype, device=dev)
            src = t.reshape(-1).view(torch.uint8)
            dflat = dst.reshape(-1).view(torch.uint8)
            for at in range(0, src.numel(), _STAGE):
                n = min(_STAGE, src.numel() - at)
                if events[k] is not None:
                    events[k].synchronize()  # the transfer that used this buffer is done
                stages[k][:n].copy_(src[at:at + n])
                dflat[at:at + n].copy_(stages[k][:n], non_blocking=True)
                events[k] = torch.cuda.Event()
                events[k].record(stream)
                k ^= 1
            out[name] = dst
    stream.synchronize()
    return out
