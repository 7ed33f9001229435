"""Who the other workers are, and how to exchange small Python objects with them."""

from __future__ import annotations

import os
import pickle
from typing import Any, Protocol


class _Collectives(Protocol):
    """The object collectives a :class:`DistributedContext` runs over one group of ranks."""

    def allgather(self, obj: Any) -> list[Any]: ...

    def gather(self, obj: Any) -> list[Any] | None: ...

    def broadcast(self, obj: Any) -> Any: ...


def _torch_group_ready(size: int) -> bool:
    """Whether an initialised default ``torch.distributed`` group of ``size`` ranks exists.

    torch is looked up only when it is already imported: a job without it cannot have a group.
    """
    import sys

    if "torch.distributed" not in sys.modules:
        return False
    import torch.distributed as dist

    return bool(dist.is_available() and dist.is_initialized() and dist.get_world_size() == size)


class _Alone:
    """Collectives for a group of one: everything is local."""

    def allgather(self, obj: Any) -> list[Any]:
        return [obj]

    def gather(self, obj: Any) -> list[Any] | None:
        return [obj]

    def broadcast(self, obj: Any) -> Any:
        return obj


class _TorchGroup:
    """Object collectives over a ``torch.distributed`` process group.

    torch's own ``*_object`` collectives need numpy, which torch itself does not require;
    objects are therefore pickled into uint8 tensors here. ``root`` is the global rank that
    gathers and broadcasts for this group.
    """

    def __init__(self, group: Any, size: int, rank_in_group: int, root: int) -> None:
        self._group = group
        self._size = size
        self._is_root = rank_in_group == 0
        self._root = root

    def _device(self) -> Any:
        import torch
        import torch.distributed as dist

        if dist.get_backend(self._group) == "nccl":
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")

    def _encode(self, obj: Any) -> Any:
        import torch

        data = bytearray(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))
        return torch.frombuffer(data, dtype=torch.uint8).to(self._device())

    @staticmethod
    def _decode(tensor: Any, length: int) -> Any:
        return pickle.loads(bytes(tensor[:length].cpu().tolist()))

    def allgather(self, obj: Any) -> list[Any]:
        import torch
        import torch.distributed as dist

        payload = self._encode(obj)
        device = payload.device
        size = torch.tensor([payload.numel()], dtype=torch.long, device=device)
        sizes = [torch.zeros_like(size) for _ in range(self._size)]
        dist.all_gather(sizes, size, group=self._group)
        lengths = [int(s.item()) for s in sizes]
        longest = max(lengths)
        padded = torch.zeros(longest, dtype=torch.uint8, device=device)
        padded[: payload.numel()] = payload
        parts = [torch.empty(longest, dtype=torch.uint8, device=device) for _ in range(self._size)]
        dist.all_gather(parts, padded, group=self._group)
        return [self._decode(p, n) for p, n in zip(parts, lengths, strict=True)]

    def gather(self, obj: Any) -> list[Any] | None:
        # An allgather keeps this to one code path for gloo and nccl; the objects are small.
        everything = self.allgather(obj)
        return everything if self._is_root else None

    def broadcast(self, obj: Any) -> Any:
        import torch
        import torch.distributed as dist

        device = self._device()
        payload = self._encode(obj) if self._is_root else None
        size = torch.tensor(
            [payload.numel() if payload is not None else 0], dtype=torch.long, device=device
        )
        dist.broadcast(size, src=self._root, group=self._group)
        length = int(size.item())
        if payload is None:
            payload = torch.empty(length, dtype=torch.uint8, device=device)
        dist.broadcast(payload, src=self._root, group=self._group)
        return self._decode(payload, length)


class _HorovodGroup:
    """Object collectives over Horovod's global communicator (``hvd.*_object``)."""

    def __init__(self, hvd: Any, is_root: bool) -> None:
        self._hvd = hvd
        self._is_root = is_root

    def allgather(self, obj: Any) -> list[Any]:
        return list(self._hvd.allgather_object(obj))

    def gather(self, obj: Any) -> list[Any] | None:
        everything = self.allgather(obj)
        return everything if self._is_root else None

    def broadcast(self, obj: Any) -> Any:
        return self._hvd.broadcast_object(obj, root_rank=0)


class _NodeOverGlobal:
    """One node's collectives built from the global ones: every rank of the job takes part.

    Used where the framework gives no per-node group (Horovod, a context built from an already
    initialised default group); the objects are small, so sending them to every rank is cheap.
    """

    def __init__(self, global_coll: _Collectives, cross_rank: int, local_rank: int) -> None:
        self._global = global_coll
        self._node = cross_rank
        self._local_rank = local_rank

    def allgather(self, obj: Any) -> list[Any]:
        everything = self._global.allgather((self._node, obj))
        return [o for node, o in everything if node == self._node]

    def gather(self, obj: Any) -> list[Any] | None:
        mine = self.allgather(obj)
        return mine if self._local_rank == 0 else None

    def broadcast(self, obj: Any) -> Any:
        everything = self._global.allgather((self._node, self._local_rank, obj))
        return next(o for node, lr, o in everything if node == self._node and lr == 0)


class DistributedContext:
    """The ranks of a (possibly) distributed training job and collectives over them.

    Ranks are laid out node-major, as torchrun does: ``rank = cross_rank * local_size +
    local_rank``. The chief is rank 0. A context made with no arguments describes a job of one.

    Args:
        rank: This worker's global rank.
        size: The number of workers.
        local_rank: This worker's rank on its node.
        local_size: The number of workers on this node.
        cross_rank: The index of this node.
        cross_size: The number of nodes.
        chief_ip: The address of the chief's node (``DET_CHIEF_IP`` by default in the
            ``from_*`` constructors); kept for code that reads it, since the collectives here
            run over the framework's own process group.
        pub_port: Accepted for Determined compatibility; the collectives open no ports of
            their own.
        pull_port: As ``pub_port``.
        port_offset: As ``pub_port``.
        force_tcp: As ``pub_port``.

    With ``size > 1`` the collectives need a framework group: use
    :meth:`from_torch_distributed`, :meth:`from_horovod` or :meth:`from_deepspeed`, or build
    the context after ``torch.distributed.init_process_group()``, whose default group is then
    used.
    """

    def __init__(
        self,
        *,
        rank: int = 0,
        size: int = 1,
        local_rank: int = 0,
        local_size: int = 1,
        cross_rank: int = 0,
        cross_size: int = 1,
        chief_ip: str | None = None,
        pub_port: int = 12360,
        pull_port: int = 12376,
        port_offset: int = 0,
        force_tcp: bool = False,
        _global: _Collectives | None = None,
        _local: _Collectives | None = None,
    ) -> None:
        if (
            not 0 <= rank < size
            or not 0 <= local_rank < local_size
            or not 0 <= cross_rank < cross_size
        ):
            raise ValueError(
                f"inconsistent ranks: rank={rank} size={size} local_rank={local_rank} "
                f"local_size={local_size} cross_rank={cross_rank} cross_size={cross_size}"
            )
        del pub_port, pull_port, port_offset, force_tcp
        if size > 1 and _global is None and _torch_group_ready(size):
            _global = _TorchGroup(None, size, rank, root=0)
            if _local is None and local_size not in (1, size):
                _local = _NodeOverGlobal(_global, cross_rank, local_rank)
        if size > 1 and _global is None:
            raise ValueError(
                "a DistributedContext with size > 1 needs collectives; "
                "use DistributedContext.from_torch_distributed()"
            )
        self.rank = rank
        self.size = size
        self.local_rank = local_rank
        self.local_size = local_size
        self.cross_rank = cross_rank
        self.cross_size = cross_size
        self.chief_ip = chief_ip if cross_size > 1 else (chief_ip or "127.0.0.1")
        self._owns_torch_group = False
        self._global: _Collectives = _global or _Alone()
        self._local: _Collectives = _local or (self._global if local_size == size else _Alone())

    @classmethod
    def from_horovod(cls, hvd: Any, chief_ip: str | None = None) -> DistributedContext:
        """Build a context from an initialised Horovod module (``hvd.init()`` called first).

        Example::

            import horovod.torch as hvd
            hvd.init()
            distributed = DistributedContext.from_horovod(hvd)

        Args:
            hvd: The Horovod framework module (``horovod.torch``); its ``*_object``
                collectives carry the objects.
            chief_ip: The chief's address; ``DET_CHIEF_IP`` when None.
        """
        rank, size = int(hvd.rank()), int(hvd.size())
        local_rank, local_size = int(hvd.local_rank()), int(hvd.local_size())
        cross_rank, cross_size = int(hvd.cross_rank()), int(hvd.cross_size())
        global_coll: _Collectives | None = None
        local_coll: _Collectives | None = None
        if size > 1:
            global_coll = _HorovodGroup(hvd, rank == 0)
            local_coll = (
                global_coll if local_size == size
                else _NodeOverGlobal(global_coll, cross_rank, local_rank)
            )
        return cls(
            rank=rank, size=size, local_rank=local_rank, local_size=local_size,
            cross_rank=cross_rank, cross_size=cross_size,
            chief_ip=chief_ip or os.environ.get("DET_CHIEF_IP"),
            _global=global_coll, _local=local_coll,
        )

    @classmethod
    def from_deepspeed(cls, chief_ip: str | None = None) -> DistributedContext:
        """Build a context for a DeepSpeed job from its environment variables.

        ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_SIZE`` (or ``LOCAL_WORLD_SIZE``),
        ``CROSS_RANK`` and ``CROSS_SIZE`` give the ranks. DeepSpeed communicates through
        ``torch.distributed``; when it is not initialised yet it is initialised here as
        :meth:`from_torch_distributed` does.

        Args:
            chief_ip: The chief's address; ``DET_CHIEF_IP`` when None.
        """
        env = os.environ
        local = env.get("LOCAL_SIZE") or env.get("LOCAL_WORLD_SIZE")
        return cls._from_torch(None, chief_ip, local_size=int(local) if local else None)

    @classmethod
    def from_torch_distributed(
        cls, chief_ip: str | None = None, *, group: Any = None
    ) -> DistributedContext:
        """Build a context over an initialised ``torch.distributed`` process group.

        ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``CROSS_RANK`` and
        ``CROSS_SIZE`` are read from the environment (torchrun sets the first four). When
        ``torch.distributed`` is not yet initialised it is initialised here with gloo on CPU
        or nccl when CUDA is available, and :meth:`close` takes it down again. Every rank must
        call this together: it creates the per-node groups used by the ``*_local``
        collectives.

        ``GROUP_RANK`` and ``GROUP_WORLD_SIZE`` (torchrun's names) stand in for the last two.

        Args:
            chief_ip: The chief's address; ``DET_CHIEF_IP`` when None.
            group: The process group to use; the default group when None.
        """
        return cls._from_torch(group, chief_ip)

    @classmethod
    def _from_torch(
        cls, group: Any, chief_ip: str | None, local_size: int | None = None
    ) -> DistributedContext:
        import torch
        import torch.distributed as dist

        owns_group = not dist.is_initialized()
        if owns_group:
            dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        env = os.environ
        rank = int(env.get("RANK", dist.get_rank(group)))
        size = int(env.get("WORLD_SIZE", dist.get_world_size(group)))
        local_rank = int(env.get("LOCAL_RANK", rank))
        if local_size is None:
            local_size = int(env.get("LOCAL_WORLD_SIZE", size))
        cross_size = int(
            env.get("CROSS_SIZE")
            or env.get("GROUP_WORLD_SIZE")
            or max(size // max(local_size, 1), 1)
        )
        cross_rank = int(env.get("CROSS_RANK") or env.get("GROUP_RANK") or rank // max(local_size, 1))
        global_coll = _TorchGroup(group, size, rank, root=0)
        if local_size == size:
            local_coll: _Collectives = global_coll
        else:
            # new_group is collective: every rank creates every node's group, keeps its own.
            local_coll = _Alone()
            for node in range(cross_size):
                members = list(range(node * local_size, (node + 1) * local_size))
                node_group = dist.new_group(members)
                if node == cross_rank:
                    local_coll = _TorchGroup(node_group, local_size, local_rank, root=members[0])
        context = cls(
            rank=rank,
            size=size,
            local_rank=local_rank,
            local_size=local_size,
            cross_rank=cross_rank,
            cross_size=cross_size,
            chief_ip=chief_ip or env.get("DET_CHIEF_IP"),
            _global=global_coll,
            _local=local_coll,
        )
        context._owns_torch_group = owns_group
        return context

    def close(self) -> None:
        """Take down the ``torch.distributed`` group if :meth:`from_torch_distributed` made it.

        Leaving a gloo group to be torn down by interpreter exit can abort the process.
        """
        if self._owns_torch_group:
            import torch.distributed as dist

            self._owns_torch_group = False
            if dist.is_initialized():
                dist.destroy_process_group()

    def __enter__(self) -> DistributedContext:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def is_chief(self) -> bool:
        """True on rank 0, the worker that talks to the master."""
        return self.rank == 0

    @property
    def is_local_chief(self) -> bool:
        """True on local rank 0 of each node."""
        return self.local_rank == 0

    def get_rank(self) -> int:
        """This worker's global rank."""
        return self.rank

    def get_size(self) -> int:
        """The number of workers."""
        return self.size

    def get_local_rank(self) -> int:
        """This worker's rank on its node."""
        return self.local_rank

    def get_local_size(self) -> int:
        """The number of workers on this node."""
        return self.local_size

    def get_cross_rank(self) -> int:
        """The index of this node."""
        return self.cross_rank

    def get_cross_size(self) -> int:
        """The number of nodes."""
        return self.cross_size

    def get_num_agents(self) -> int:
        """The number of agents (nodes) the job runs on; the same as :attr:`cross_size`."""
        return self.cross_size

    def allgather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order, on every rank."""
        return self._global.allgather(obj)

    def gather(self, obj: Any) -> list[Any] | None:
        """Every rank's ``obj`` in rank order on the chief; None on the other ranks."""
        return self._global.gather(obj)

    def broadcast(self, obj: Any) -> Any:
        """The chief's ``obj``, on every rank (the others' ``obj`` is ignored)."""
        return self._global.broadcast(obj)

    def allgather_local(self, obj: Any) -> list[Any]:
        """Every local rank's ``obj``, in local-rank order, on every rank of this node."""
        return self._local.allgather(obj)

    def gather_local(self, obj: Any) -> list[Any] | None:
        """This node's objects on its local chief; None on the other local ranks."""
        return self._local.gather(obj)

    def broadcast_local(self, obj: Any = None) -> Any:
        """The local chief's ``obj``, on every rank of this node."""
        return self._local.broadcast(obj)

    def __repr__(self) -> str:
        return (
            f"DistributedContext(rank={self.rank}, size={self.size}, local_rank={self.local_rank}, "
            f"local_size={self.local_size}, cross_rank={self.cross_rank}, "
            f"cross_size={self.cross_size})"
        )
