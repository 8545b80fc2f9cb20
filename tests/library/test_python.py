#!/usr/bin/python3
"""The Python binding on CPU tensors: save/restore in place, then the example's
kill-and-resume check (losses equal bit for bit). Skips (77) without torch."""
import os
import shutil
import subprocess
import sys

try:
    import torch
except ImportError as e:
    print("SKIP: no torch here (%s in %s): install python3-torch" % (e, sys.executable))
    sys.exit(77)

import crest

store = sys.argv[1]
shutil.rmtree(store, ignore_errors=True)

torch.manual_seed(0)
m = torch.nn.Linear(300, 200)
opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
crest.materialize_optimizer(opt)
tree = {"model": m.state_dict(), "optim": opt.state_dict()}
ref = {k: v.clone() for k, v in m.state_dict().items()}
with crest.Checkpointer(store, staging_bytes=16 << 20, no_gpu=True) as ck:
    h = ck.save(tree, state={"step": 5, "rng": crest.rng_state()}, tag="py-1")
    r = ck.wait(h)
    print("saved", r)
    rand_before = torch.rand(3)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(1.0)
    st = ck.restore(tree, "py-1")
    assert st["step"] == 5, st
    for k, v in m.state_dict().items():
        assert torch.equal(v, ref[k]), "tensor %s differs after restore" % k
    crest.set_rng_state(st["rng"])
    assert torch.equal(torch.rand(3), rand_before), "RNG state not restored"
    # A differently shaped model cannot take the snapshot: a clear error.
    m2 = torch.nn.Linear(300, 100)
    try:
        ck.restore({"model": m2.state_dict(), "optim": opt.state_dict()}, "py-1")
        sys.exit("restore into a differently sized tensor did not fail")
    except crest.CrestError as e:
        print("expected error:", e)
        assert "bytes" in str(e)
print("binding: in-place restore ok")

# push_to: the snapshot goes on to another store in the background; it
# restores there, the same bytes.
shared = store + "-shared"
shutil.rmtree(shared, ignore_errors=True)
crest.Checkpointer(shared, no_gpu=True, staging_bytes=16 << 20).close()   # the store must exist
with crest.Checkpointer(store, staging_bytes=16 << 20, no_gpu=True, push_to=shared) as ck:
    ck.wait(ck.save(tree, state={"step": 6}, tag="py-pushed"))
with torch.no_grad():
    for p in m.parameters():
        p.add_(1.0)
with crest.Checkpointer(shared, staging_bytes=16 << 20, no_gpu=True) as ck:
    st = ck.restore(tree, "py-pushed")
assert st["step"] == 6, st
for k, v in m.state_dict().items():
    assert torch.equal(v, ref[k]), "tensor %s differs after the restore from the store pushed to" % k
try:
    crest.Checkpointer(store, no_gpu=True, staging_bytes=16 << 20, push_to=store + "-none")
    sys.exit("push_to a store that is not there did not fail")
except crest.CrestError as e:
    print("expected error:", e)
print("binding: push_to ok")


def dtensor_check():
    """DTensors (FSDP2's parameters and optimizer state) are saved and restored as their
    local shards, in place. Where this torch has no DTensor (1.13), a stand-in of the
    same interface (to_local, placements) is registered as torch.distributed.tensor's;
    a real one runs on the GPU machine (gpu-check lib_fsdp)."""
    if "torch.distributed.tensor" in sys.modules or "torch.distributed._tensor" in sys.modules:
        print("binding: DTensor: this torch has its own, checked by gpu-check lib_fsdp")
        return
    import types

    class DTensor:
        def __init__(self, local):
            self._local, self.placements = local, ("Shard(dim=0)",)

        def to_local(self):
            return self._local

    sys.modules["torch.distributed.tensor"] = types.SimpleNamespace(DTensor=DTensor)
    try:
        full = torch.arange(40, dtype=torch.float32).reshape(8, 5)
        shard = full[2:4]                      # rows 2 and 3: contiguous, full's storage
        tree = {"w": DTensor(shard), "plain": torch.ones(3)}
        shutil.rmtree(store + "-dtensor", ignore_errors=True)
        with crest.Checkpointer(store + "-dtensor", staging_bytes=16 << 20, no_gpu=True) as ck:
            ck.wait(ck.save(tree, state={"step": 1}, tag="dt-1"))
            before = full.clone()
            full.add_(100.0)
            st = ck.restore_full(tree, "dt-1")
            assert torch.equal(full[2:4], before[2:4]), "the local shard was not restored in place: %s" % full[2:4]
            assert torch.equal(full[:2], before[:2] + 100) and torch.equal(full[4:], before[4:] + 100), \
                "the restore wrote outside the local shard"
            want = shard.numel() * shard.element_size() + 3 * 4
            assert st["bytes"] >= want, \
                "restored %d bytes, less than the shard and the plain tensor (%d)" % (st["bytes"], want)
            try:
                ck.save({"w": DTensor(full[:, 1:3])}, state={"step": 2})
                sys.exit("a DTensor whose local shard is not contiguous was saved")
            except crest.CrestError as e:
                print("expected error:", e)
                assert e.errno == 22 and "tensor w is a DTensor" in str(e), e
    finally:
        del sys.modules["torch.distributed.tensor"]
    print("binding: DTensor local shards saved and restored in place")


dtensor_check()

ex = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python", "examples", "train.py")
r = subprocess.run([sys.executable, ex, "--mode", "check", "--store", store + "-train", "--steps", "40",
                    "--every", "10", "--kill-at", "27", "--hidden", "128"])
sys.exit(r.returncode)
