"""gradcomp's gradient compressors as a PyTorch DDP communication hook.

    import gradcomp_torch
    state = gradcomp_torch.State("dgc", density=0.001, optimizer=opt)
    ddp.register_comm_hook(state, gradcomp_torch.hook)

Each DDP bucket gets its own compressor (created when the hook first sees the bucket, again when
DDP rebuilds its buckets), which reads the bucket's gradients where they are. Methods of one
message per step (``dense``, ``dgc``, ``topk``, ``ef_signsgd``, ``terngrad``, ``onebit_sgd``,
``qsgd``, ``adacomp``) exchange their wire messages with ``all_gather`` (the lengths first, then
the messages padded to the longest, as gloo needs equal sizes) and every rank adds them in rank
order, so every rank holds bitwise the same averaged update; ``terngrad`` first takes the largest
of the ranks' scales of each tensor (``all_reduce`` with max; ``share_scales=False`` leaves each
rank its own). ``powersgd`` averages its two rounds
with ``all_reduce``. Before any payload moves, the ranks agree on a status: a step one rank refuses
(a NaN, an overflow), a rank with another method or options, or a message that fails to decode
raises the same ``GradcompError`` on every rank, naming the rank, and no rank waits for another.

Methods that carry momentum themselves (``dgc``: momentum correction) need an optimizer without
momentum (plain ``torch.optim.SGD``); pass ``optimizer=`` and the State refuses one with momentum.
The others leave momentum to the optimizer, as without compression.

``state.state_dict()`` and ``load_state_dict()`` save and restore every bucket's compressor
(gradcomp snapshots); a resumed job continues bitwise where the buckets hold the same parameters
(one bucket, or DDP's buckets after its rebuild, which the first step of a job may differ from:
give ``model=`` so that a bucket's compressor is keyed by the names of the parameters it holds, in
the model's order).
"""

import time
import zlib

import torch
import torch.distributed as dist

from . import _core

__all__ = ["GradcompError", "State", "hook", "methods"]


def methods():
    """Every method's name, with its description and options."""
    return {name: description for name, (description, _) in _core.methods().items()}


class GradcompError(RuntimeError):
    """A step that failed on some rank; raised on every rank with the same text.

    ``rank`` is the rank at fault (-1 when none is: the sum itself overflowed), ``reason`` the
    gradcomp error's name.
    """

    def __init__(self, rank, reason, detail=""):
        self.rank = rank
        self.reason = reason
        where = f"rank {rank}" if rank >= 0 else "the sum of the ranks' messages"
        super().__init__(f"gradcomp: {where}: {reason}{detail}")


# What a rank tells the others before a payload moves: its status, its message's length and the
# fingerprint of its method, options and bucket.
_STATUS, _LENGTH, _FINGERPRINT = range(3)


class State:
    """The hook's state: the method, its options and every bucket's compressor.

    ``method``: a name of ``methods()``; ``options``: that method's options. ``process_group``:
    the group the hook exchanges over (default: the world). ``optimizer``: checked against a
    method that carries momentum. ``model``: the DDP module (or its ``module``), to key buckets
    by the parameters they hold. ``message_filter``: a function applied to each outgoing message
    (a uint8 tensor), for tests of damaged messages.
    """

    def __init__(self, method, process_group=None, optimizer=None, model=None, message_filter=None, **options):
        catalogue = _core.methods()
        if method not in catalogue:
            raise ValueError(f"gradcomp_torch: no method '{method}' (methods: {', '.join(sorted(catalogue))})")
        self.method = method
        self.options = dict(options)
        self.process_group = process_group
        self.message_filter = message_filter
        if optimizer is not None and catalogue[method][1]:
            for group in optimizer.param_groups:
                if group.get("momentum", 0) or group.get("betas") is not None:
                    raise ValueError(
                        f"gradcomp_torch: {method} applies momentum itself; use an optimizer without momentum "
                        "(torch.optim.SGD with momentum=0)")
        # Probe the options now: a wrong name or type is an error here, not in the first step.
        _core.Bucket(method, self.options, ["probe"], [[1]], 0, 1)
        self._names = None
        if model is not None:
            module = getattr(model, "module", model)
            named = list(module.named_parameters())
            self._names = {p.data_ptr(): name for name, p in named}
            self._order = {p.data_ptr(): i for i, (_, p) in enumerate(named)}
        self._fingerprint = zlib.crc32(repr((method, sorted(self.options.items()))).encode())
        self._buckets = {}
        self._pending = {}
        self.steps = 0
        #: Seconds spent so far: "compress" in gradcomp's C++ code (compressing, encoding, decoding
        #: and adding), "exchange" in torch.distributed's collectives, "hook" in the hook in all
        #: (the rest of it is the hook's own overhead: Python, tensor wrapping, padding).
        self.timings = {"compress": 0.0, "exchange": 0.0, "hook": 0.0}

    def _rank_and_size(self):
        return dist.get_rank(self.process_group), dist.get_world_size(self.process_group)

    def _bucket(self, bucket):
        """The bucket's compressor, its gradients in the compressor's order, and the fingerprint
        of the method, options and tensors."""
        grads = bucket.gradients()
        if self._names is not None:
            ptrs = [p.data_ptr() for p in bucket.parameters()]
            order = sorted(range(len(grads)), key=lambda i: self._order.get(ptrs[i], len(self._order) + i))
            names = [self._names.get(ptrs[i], f"param{i}") for i in order]
            grads = [grads[i] for i in order]
        else:
            names = [f"bucket{bucket.index()}.param{i}" for i in range(len(grads))]
        shapes = [list(g.shape) for g in grads]
        key = (tuple(names), tuple(map(tuple, shapes)))
        compressor = self._buckets.get(key)
        if compressor is None:
            rank, size = self._rank_and_size()
            compressor = _core.Bucket(self.method, self.options, names, shapes, rank, size)
            snapshot = self._pending.pop(key, None)
            if snapshot is not None:
                code = compressor.load_state(*snapshot)
                if code != 0:
                    raise GradcompError(rank, _core.error_name(code), " (restoring a bucket's state)")
            # DDP rebuilt its buckets: the compressors of the tensors regrouped are dropped.
            held = set(names)
            self._buckets = {k: v for k, v in self._buckets.items() if held.isdisjoint(k[0])}
            self._buckets[key] = compressor
        fingerprint = (self._fingerprint ^ zlib.crc32(repr(key).encode())) & 0x7FFFFFFFFFFFFFFF
        return compressor, grads, fingerprint

    def state_dict(self):
        """Every bucket's compressor and receiver state (gradcomp snapshots), with the method and
        options."""
        return {
            "method": self.method,
            "options": dict(self.options),
            "steps": self.steps,
            "buckets": [(key, tuple(bytes(part) for part in b.state())) for key, b in self._buckets.items()],
        }

    def load_state_dict(self, d):
        """Restores what ``state_dict`` saved: each bucket's state is loaded when the hook first sees
        the bucket (before its first step)."""
        if d["method"] != self.method or d["options"] != self.options:
            raise ValueError("gradcomp_torch: a state of another method or other options")
        self.steps = d["steps"]
        self._buckets = {}
        self._pending = {key: snapshot for key, snapshot in d["buckets"]}


def _agree(state, status, length, fingerprint):
    """Every rank's status, length and fingerprint; the same GradcompError on every rank when one
    rank failed or runs another method or options."""
    rank, size = state._rank_and_size()
    mine = torch.tensor([status, length, fingerprint], dtype=torch.int64)
    every = [torch.empty(3, dtype=torch.int64) for _ in range(size)]
    with _timed(state, "exchange"):
        dist.all_gather(every, mine, group=state.process_group)
    table = torch.stack(every)
    for r in range(size):
        if table[r, _FINGERPRINT] != table[0, _FINGERPRINT]:
            raise GradcompError(r, "another method, other options or another bucket than rank 0's")
    for r in range(size):
        code = int(table[r, _STATUS])
        if code != 0:
            raise GradcompError(r, _core.error_name(code))
    return [int(x) for x in table[:, _LENGTH]]


def _shared_scales(state, compressor, grads, fingerprint):
    """The largest of every rank's scale of each tensor (TernGrad's scale sharing): the ranks agree
    on their status first, so that a rank whose gradients hold a NaN fails every rank."""
    with _timed(state, "compress"):
        status, scales = compressor.local_scales(grads)
    _agree(state, status, 0, fingerprint)
    with _timed(state, "exchange"):
        dist.all_reduce(scales, op=dist.ReduceOp.MAX, group=state.process_group)
    return scales


def _messages(state, compressor, grads, fingerprint):
    rank, size = state._rank_and_size()
    shared = _shared_scales(state, compressor, grads, fingerprint) if compressor.shares_scales else None
    with _timed(state, "compress"):
        status = compressor.compress(grads, shared)
    message = compressor.message() if status == 0 else torch.empty(0, dtype=torch.uint8)
    if status == 0 and state.message_filter is not None:
        message = state.message_filter(message)
    lengths = _agree(state, status, message.numel(), fingerprint)
    longest = max(lengths)
    padded = torch.zeros(longest, dtype=torch.uint8)
    padded[: message.numel()] = message
    every = torch.empty(size, longest, dtype=torch.uint8)
    with _timed(state, "exchange"):
        dist.all_gather(list(every.unbind(0)), padded, group=state.process_group)
    with _timed(state, "compress"):
        code, at = compressor.reduce(every, lengths, grads)
    if code != 0:
        raise GradcompError(at, _core.error_name(code))


def _rounds(state, compressor, grads, fingerprint):
    _, size = state._rank_and_size()
    with _timed(state, "compress"):
        status, payload = compressor.begin_step(grads)
    _agree(state, status, 0, fingerprint)
    while payload is not None and payload.numel() > 0:
        with _timed(state, "exchange"):
            dist.all_reduce(payload, group=state.process_group)
        payload.mul_(1.0 / size)
        with _timed(state, "compress"):
            status, payload = compressor.end_round(payload)
        if status != 0:  # the same average on every rank: the same refusal
            raise GradcompError(-1, _core.error_name(status))
    with _timed(state, "compress"):
        compressor.write_update(grads)


def hook(state, bucket):
    """The DDP communication hook: the bucket's gradients averaged over the ranks by the state's
    method; the returned future holds the bucket's buffer with the averaged update."""
    with _timed(state, "hook"):
        return _hook(state, bucket)


def _hook(state, bucket):
    compressor, grads, fingerprint = state._bucket(bucket)
    if compressor.rounds:
        _rounds(state, compressor, grads, fingerprint)
    else:
        _messages(state, compressor, grads, fingerprint)
    if bucket.is_last():
        state.steps += 1
    buffer = bucket.buffer()
    in_order = bucket.gradients()
    for g, start in zip(in_order, _offsets(in_order)):
        if g.data_ptr() != buffer.data_ptr() + start * buffer.element_size():  # not a view of the buffer
            buffer.narrow(0, start, g.numel()).copy_(g.reshape(-1))
    future = torch.futures.Future()
    future.set_result(buffer)
    return future


class _timed:
    """Adds the time a block takes to state.timings[what]."""

    def __init__(self, state, what):
        self.state, self.what = state, what

    def __enter__(self):
        self.start = time.perf_counter()

    def __exit__(self, *exc):
        self.state.timings[self.what] += time.perf_counter() - self.start


def _offsets(grads):
    at = 0
    for g in grads:
        yield at
        at += g.numel()
