"""crest: library checkpoints of PyTorch state through libcrest (ctypes, no build step).

    ck = crest.Checkpointer("/path/to/store", staging_bytes=1 << 30)
    h = ck.save({"model": model.state_dict(), "optim": opt.state_dict()},
                state={"step": step, "rng": crest.rng_state()}, tag="step-100")
    ...                                   # training goes on while crest stores
    ck.wait(h)                            # -> dict: snapshot id, bytes, stall ...
    state = ck.restore({"model": model.state_dict(), "optim": opt.state_dict()})
    crest.set_rng_state(state["rng"])

Tensors are saved as regions named by their path in the dict ("model/fc.weight",
"optim/state/0/exp_avg"): CUDA tensors as device regions, CPU tensors as host
regions. restore() writes into the very tensors given (in place), so build the
model and optimizer first; materialize_optimizer() creates optimizer state that
PyTorch would otherwise create lazily on the first step. Everything that is not
a tensor in the dicts, and `state`, travels pickled in one blob.

A DTensor (FSDP2's fully_shard makes every parameter and its optimizer state one) is
saved as this rank's local shard (to_local()), which shares storage with the live
shard: restore() writes into it in place, and each rank of an FSDP job stores only
its own shards.

A rank of a job of many processes (DDP under torchrun) gives the job a name; its
checkpoints of one step, one per rank, become one job snapshot, committed by the store
once the last rank's is (no barrier between the ranks), and a relaunch restores the
newest whole one (python/examples/ddp_train.py):

    ck = crest.Checkpointer(store, job="llm-7b")      # rank, world: torch.distributed's
    h = ck.save(tree, state={"step": step, "rng": crest.rng_state()}, step=step)
    ck.wait(h)                            # -> ... "committed", "job_snapshot"
    state = ck.restore(tree)              # this rank's part of the newest job snapshot

libcrest.so is found through $CREST_LIB, next to this package, or in build/.
"""
import atexit
import ctypes
import os
import pickle
import random
import re
import sys
import weakref

__all__ = ["CrestError", "Checkpointer", "rng_state", "set_rng_state", "materialize_optimizer"]

_STATE_BLOB = "__crest_state__"


class CrestError(OSError):
    """A libcrest call failed; str() holds crest's message."""


class _Options(ctypes.Structure):
    _fields_ = [("staging_bytes", ctypes.c_size_t), ("workers", ctypes.c_uint),
                ("copy_streams", ctypes.c_uint), ("restore_threads", ctypes.c_uint),
                ("device", ctypes.c_int), ("flags", ctypes.c_uint), ("host_cache", ctypes.c_char_p),
                ("push_to", ctypes.c_char_p)]


class _Blob(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("data", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class _CkptOpts(ctypes.Structure):
    _fields_ = [("tag", ctypes.c_char_p), ("labels", ctypes.POINTER(ctypes.c_char_p)),
                ("nlabels", ctypes.c_size_t), ("blobs", ctypes.POINTER(_Blob)), ("nblobs", ctypes.c_size_t),
                ("sync_streams", ctypes.POINTER(ctypes.c_void_p)), ("nsync_streams", ctypes.c_size_t)]


class _Result(ctypes.Structure):
    _fields_ = [("snapshot", ctypes.c_char * 65), ("bytes", ctypes.c_uint64), ("new_bytes", ctypes.c_uint64),
                ("stored_bytes", ctypes.c_uint64), ("zero_bytes", ctypes.c_uint64),
                ("stall_ns", ctypes.c_uint64), ("staging_wait_ns", ctypes.c_uint64),
                ("ingest_ns", ctypes.c_uint64), ("rounds", ctypes.c_uint)]


class _RestoreResult(ctypes.Structure):
    _fields_ = [("snapshot", ctypes.c_char * 65), ("bytes", ctypes.c_uint64), ("ns", ctypes.c_uint64),
                ("cache_bytes", ctypes.c_uint64)]


class _Job(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("attempt", ctypes.c_char_p), ("rank", ctypes.c_uint32),
                ("world", ctypes.c_uint32), ("gpu", ctypes.c_char_p)]


class _JobResult(ctypes.Structure):
    _fields_ = [("rank", _Result), ("committed", ctypes.c_int), ("job_snapshot", ctypes.c_char * 65)]


# Every struct of crest.h this binding lays out, by its C name. _check_abi compares each with
# the library's own layout (crest_abi_* of crest.h) when libcrest is loaded: a struct that
# differs in any way refuses the library, never passes it bytes it reads otherwise.
_STRUCTS = (("crest_options", _Options), ("crest_blob", _Blob), ("crest_checkpoint_opts", _CkptOpts),
            ("crest_result", _Result), ("crest_restore_result", _RestoreResult), ("crest_job", _Job),
            ("crest_job_result", _JobResult))

# crest.h's constants this binding passes; their values come from the library (_load).
_CONSTS = ("CREST_MEM_HOST", "CREST_MEM_DEVICE", "CREST_OPEN_NO_GPU")
_const = {}


def _find_lib():
    env = os.environ.get("CREST_LIB")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    for cand in (os.path.join(here, "libcrest.so"), os.path.join(root, "build", "lib", "libcrest.so"),
                 os.path.join(root, "build", "libcrest.so")):
        if os.path.exists(cand):
            return cand
    raise CrestError("libcrest.so not found: set CREST_LIB, or build crest (cmake -S . -B build && make -C build)")


_lib = None


def _preload_deps(folder):
    """libcrest.so's own libraries from its folder (a gpu-bundle lib/), for those the
    system lacks; the system's are kept, so the Python process keeps one of each."""
    left = [f for f in sorted(os.listdir(folder)) if ".so" in f and not f.startswith("libcrest.")]
    while left:
        nxt = []
        for f in left:
            try:
                ctypes.CDLL(f, mode=ctypes.RTLD_GLOBAL)          # the system's, by soname
            except OSError:
                try:
                    ctypes.CDLL(os.path.join(folder, f), mode=ctypes.RTLD_GLOBAL)
                except OSError:
                    nxt.append(f)                                # needs another one first
        if len(nxt) == len(left):
            return
        left = nxt


def _abi_signatures(lib):
    for name, res, args in (("crest_abi_sizeof", ctypes.c_size_t, [ctypes.c_char_p]),
                            ("crest_abi_offsetof", ctypes.c_size_t, [ctypes.c_char_p, ctypes.c_char_p]),
                            ("crest_abi_field", ctypes.c_char_p, [ctypes.c_char_p, ctypes.c_size_t]),
                            ("crest_abi_const", ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(ctypes.c_longlong)])):
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args


def _check_abi(lib, where, structs=_STRUCTS, consts=_CONSTS):
    """Raises ImportError, one line naming the struct, member and both values, unless every
    struct of structs has the library's members in its order, size and offsets; returns
    the constants' values from the library."""
    def fail(what, here, there):
        raise ImportError("libcrest ABI mismatch: %s: %s in python/crest, %s in %s: this binding "
                          "does not match that library" % (what, here, there, where))
    try:
        _abi_signatures(lib)
    except AttributeError as e:
        raise ImportError("libcrest ABI unknown: %s has no crest_abi_* functions (%s): it is older "
                          "than this binding" % (where, e))
    for cname, cls in structs:
        c = cname.encode()
        theirs, n = [], lib.crest_abi_field(c, 0)
        while n is not None:
            theirs.append(n.decode())
            n = lib.crest_abi_field(c, len(theirs))
        mine = [f[0] for f in cls._fields_]
        if mine != theirs:
            fail("struct %s members" % cname, ",".join(mine) or "none", ",".join(theirs) or "none")
        # Member by member first, so that the message names the first one that differs.
        for name in mine:
            f = getattr(cls, name)
            off = lib.crest_abi_offsetof(c, name.encode())
            size = lib.crest_abi_sizeof(("%s.%s" % (cname, name)).encode())
            if f.offset != off:
                fail("struct %s member %s offset" % (cname, name), f.offset, off)
            if f.size != size:
                fail("struct %s member %s size" % (cname, name), f.size, size)
        if ctypes.sizeof(cls) != lib.crest_abi_sizeof(c):
            fail("sizeof(struct %s)" % cname, ctypes.sizeof(cls), lib.crest_abi_sizeof(c))
    out = {}
    for name in consts:
        v = ctypes.c_longlong()
        if lib.crest_abi_const(name.encode(), ctypes.byref(v)) != 0:
            raise ImportError("libcrest ABI mismatch: constant %s is unknown to %s" % (name, where))
        out[name] = v.value
    return out


def _load():
    global _lib
    if _lib is not None:
        return _lib
    path = _find_lib()
    try:
        lib = ctypes.CDLL(path)
    except OSError:
        _preload_deps(os.path.dirname(os.path.abspath(path)))
        lib = ctypes.CDLL(path)
    P, U64, I = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int
    sig = {
        "crest_options_init": (None, [ctypes.POINTER(_Options)]),
        "crest_open": (I, [ctypes.c_char_p, ctypes.POINTER(_Options), ctypes.POINTER(P)]),
        "crest_close": (I, [P]),
        "crest_register": (I, [P, ctypes.c_char_p, P, ctypes.c_size_t, I, ctypes.POINTER(U64)]),
        "crest_unregister": (I, [P, U64]),
        "crest_checkpoint": (I, [P, ctypes.POINTER(_CkptOpts), ctypes.POINTER(U64)]),
        "crest_poll": (I, [P, U64]),
        "crest_wait": (I, [P, U64, ctypes.POINTER(_Result)]),
        "crest_restore": (I, [P, ctypes.c_char_p, ctypes.POINTER(_RestoreResult)]),
        "crest_set_branch": (I, [P, ctypes.c_char_p]),
        "crest_read_blob": (I, [P, ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(P),
                                ctypes.POINTER(ctypes.c_size_t)]),
        "crest_free": (None, [P]),
        "crest_job_checkpoint": (I, [P, ctypes.POINTER(_Job), U64, ctypes.POINTER(_CkptOpts), ctypes.POINTER(U64)]),
        "crest_job_wait": (I, [P, ctypes.POINTER(_Job), U64, U64, ctypes.POINTER(_JobResult)]),
        "crest_job_restore": (I, [P, ctypes.POINTER(_Job), ctypes.c_char_p, ctypes.POINTER(_RestoreResult)]),
        "crest_errmsg": (ctypes.c_char_p, []),
    }
    # The layouts first: a library older or newer than this binding is refused naming the
    # struct that differs, before a function it lacks is looked up.
    _const.update(_check_abi(lib, path, _STRUCTS, _CONSTS))
    for name, (res, args) in sig.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    _lib = lib
    return lib


def _check(rc, what):
    if rc < 0:
        msg = _lib.crest_errmsg().decode(errors="replace")
        raise CrestError(-rc, "%s: %s" % (what, msg or os.strerror(-rc)))
    return rc


def _dtensor_types():
    """The DTensor classes of the torch in this process (torch.distributed.tensor's, and
    torch.distributed._tensor's before torch 2.5), from the modules already imported: a
    DTensor exists only once its module is, so none is imported here, and a torch
    without DTensor (1.13) gives ()."""
    out = []
    for mod in ("torch.distributed.tensor", "torch.distributed._tensor"):
        cls = getattr(sys.modules.get(mod), "DTensor", None)
        if isinstance(cls, type) and cls not in out:
            out.append(cls)
    return tuple(out)


def _local_shard(name, dt):
    """This rank's part of DTensor dt (FSDP2's fully_shard makes parameters and optimizer
    state DTensors): its local tensor, which shares storage with the live shard, so that
    save() copies it and restore() writes into it in place."""
    import torch
    with torch.no_grad():   # to_local() is then the local tensor itself, outside autograd
        local = dt.to_local()
    if not local.is_contiguous():
        raise CrestError(22, "tensor %s is a DTensor (placements %s) whose local shard, of shape %s and strides "
                         "%s, is not contiguous: crest copies its storage as is"
                         % (name, tuple(dt.placements), tuple(local.shape), local.stride()))
    return local


def _flatten(obj, prefix, tensors, leaves, dtensor=None):
    """Tensors by path (a DTensor's local shard in its place); everything else (numbers,
    strings, param_groups) into leaves."""
    import torch
    if dtensor is None:
        dtensor = _dtensor_types()
    if dtensor and isinstance(obj, dtensor):
        tensors[prefix] = _local_shard(prefix, obj)
    elif isinstance(obj, torch.Tensor):
        tensors[prefix] = obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _flatten(v, "%s/%s" % (prefix, k) if prefix else str(k), tensors, leaves, dtensor)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _flatten(v, "%s/%d" % (prefix, i) if prefix else str(i), tensors, leaves, dtensor)
    else:
        leaves[prefix] = obj


# Checkpointers still open, closed at exit: a process that ends with a libcrest handle
# open ends with its threads still in RocksDB while the C library's and RocksDB's own
# exit handlers run, which crashed such a process now and then (seen: SIGSEGV and
# RocksDB's "pthread lock: Invalid argument" abort, 1 to 2 in 16 exits beside another
# writer of the store). Python's atexit runs first, while all of it still stands.
_open = weakref.WeakSet()


@atexit.register
def _close_all():
    for cp in list(_open):
        try:
            cp.close()
        except Exception as e:   # the process is ending: say it, do not raise
            print("crest: closing a Checkpointer at exit: %s" % e, file=sys.stderr)


class Checkpointer:
    """One open store; regions follow the tensors given to save() and restore().

    With job=NAME the checkpointer is one rank of a job of many processes (a DDP job
    under torchrun; crest.h's crest_job_* calls): each rank opens its own Checkpointer on
    the same store and checkpoints its own tensors, and once every rank's checkpoint of a
    step is committed, one job snapshot names them all (the step, the world size, each
    rank's GPU), committed all or nothing. save() then needs step=, wait() reports whether
    this rank completed the set, and restore() takes this rank's part of a job snapshot.
    The ranks never wait for each other: there is no torch.distributed barrier in save()
    or wait(); each rank leaves its snapshot's id in the store once it is committed, and
    the rank whose arrival completes the set commits the job snapshot. A rank killed
    before its checkpoint of a step arrives leaves no job snapshot of that step. Replicas
    (the same parameters and optimizer state in every DDP rank) are stored once: the
    store keeps each distinct chunk once, whichever rank wrote it.
    """

    def __init__(self, store, staging_bytes=1 << 30, workers=0, copy_streams=0, restore_threads=0,
                 device=0, no_gpu=False, branch=None, host_cache=None, job=None, rank=None, world=None,
                 attempt=None, gpu=None, push_to=None):
        """branch: the branch the checkpoints go on (None: "main", continued from its
        newest snapshot); see set_branch(). host_cache: a directory in shared memory
        (/dev/shm) for a checked host copy of the CUDA tensors (crest_options in crest.h).
        push_to: another store (it must exist): each snapshot saved, and each job snapshot
        this rank commits, is pushed there in the background, only what it lacks (crest
        push); close() waits for the pushes and raises on the first that failed.

        job: the job's name, the same in every rank (1 to 96 of letters, digits, '.', '_',
        '-', not beginning with '.'); None: a checkpointer of one process, as ever, and
        rank, world, attempt and gpu must be None too. With job:
          rank, world: this process's rank and the job's size; None: torch.distributed's
            (when it is initialized), else $RANK and $WORLD_SIZE (torchrun sets both).
          attempt: the same in every rank of one launch and new in the next, so that the
            ranks of a relaunch never meet what the ranks of the launch that crashed left
            in the store. None: $CREST_JOB_ATTEMPT, else torchrun's
            $TORCHELASTIC_RUN_ID.$TORCHELASTIC_RESTART_COUNT (crest.h) when the run id
            is a real one; torchrun without --standalone or --rdzv_id names every launch
            "none", so then, with torch.distributed initialized, rank 0 draws a random
            attempt and broadcasts it to the others (the one collective call of a job
            Checkpointer: every rank must construct it, as it must construct its DDP
            model); without torch.distributed, crest.h's default as it is ("none.0"
            there, "0" outside torchrun: then pass one yourself).
          gpu: this rank's GPU as the job snapshot records it (a UUID such as
            nvidia-smi -L prints); None: none recorded.
        """
        if job is None and (rank, world, attempt, gpu) != (None, None, None, None):
            raise ValueError("Checkpointer: rank, world, attempt and gpu are for a job's ranks: give job= too")
        job_args = _job_args(job, rank, world, attempt, gpu) if job is not None else None
        lib = _load()
        o = _Options()
        lib.crest_options_init(ctypes.byref(o))
        o.staging_bytes, o.workers, o.copy_streams = staging_bytes, workers, copy_streams
        o.restore_threads, o.device = restore_threads, device
        o.flags = _const["CREST_OPEN_NO_GPU"] if no_gpu else 0
        self._host_cache = host_cache.encode() if host_cache else None   # alive while o is read
        o.host_cache = self._host_cache
        self._push_to = push_to.encode() if push_to else None
        o.push_to = self._push_to
        h = ctypes.c_void_p()
        _check(lib.crest_open(store.encode() if store else None, ctypes.byref(o), ctypes.byref(h)),
               "opening store %s" % store)
        self._h = h
        _open.add(self)
        self._regions = {}   # name -> (ptr, nbytes, is_cuda, handle)
        # A job's rank: the crest_job every job call is given (its strings kept alive in
        # _job_strs), and the step of each checkpoint not yet waited for, by handle.
        self._job, self._job_strs, self._pending = None, None, {}
        if job_args is not None:
            self._job_strs = job_args
            name, att, rk, wd, g = job_args
            self._job = _Job(name, att, rk, wd, g)
        if branch is not None:
            try:
                self.set_branch(branch)
            except CrestError:
                self.close()
                raise

    @property
    def job(self):
        """None, or {"name", "rank", "world", "attempt", "gpu"} of this job checkpointer
        (attempt None: crest.h's default, from the environment)."""
        if self._job is None:
            return None
        name, att, rk, wd, g = self._job_strs
        return {"name": name.decode(), "rank": rk, "world": wd, "attempt": att.decode() if att else None,
                "gpu": g.decode() if g else None}

    def set_branch(self, name):
        """Later checkpoints go on branch name: an existing branch goes on from its newest
        snapshot, a new one starts from the last checkpoint waited for or the snapshot
        restored (crest_set_branch). restore() also moves to the restored snapshot's branch."""
        _check(_lib.crest_set_branch(self._h, name.encode()), "switching to branch %s" % name)

    def close(self):
        """Waits for the checkpoints not yet waited for, then closes the store. A job's rank
        waits for them as wait() does, so that they arrive and their job snapshots can be
        committed; the first failure is raised once all are done."""
        if self._h:
            err = None
            for handle in sorted(self._pending):
                try:
                    self.wait(handle)
                except CrestError as e:
                    err = err or e
            h, self._h = self._h, None
            _open.discard(self)
            _check(_lib.crest_close(h), "closing the store")
            if err is not None:
                raise err

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _sync_regions(self, tensors):
        """Registers the tensors as regions: new ones added, changed or gone ones dropped."""
        want = {}
        for name, t in tensors.items():
            if t.numel() == 0:
                continue   # nothing to store; the same on both sides
            if not t.is_contiguous():
                raise CrestError(22, "tensor %s is not contiguous: crest copies its storage as is" % name)
            want[name] = (t.data_ptr(), t.numel() * t.element_size(), t.is_cuda)
        for name in list(self._regions):
            if self._regions[name][:3] != want.get(name):
                _check(_lib.crest_unregister(self._h, self._regions.pop(name)[3]), "unregistering %s" % name)
        for name, (ptr, nbytes, cuda) in want.items():
            if name in self._regions:
                continue
            r = ctypes.c_uint64()
            mem = _const["CREST_MEM_DEVICE" if cuda else "CREST_MEM_HOST"]
            _check(_lib.crest_register(self._h, name.encode(), ctypes.c_void_p(ptr), nbytes, mem,
                                       ctypes.byref(r)), "registering tensor %s" % name)
            self._regions[name] = (ptr, nbytes, cuda, r.value)

    def save(self, tree, state=None, tag=None, labels=None, *, step=None):
        """Snapshots every tensor in tree plus the pickled state; returns a handle for wait().
        Returns once the copies are done: tensors may change again right away.

        A job's rank must give step (an int >= 0, the same in every rank for the same
        checkpoint; crest_job_checkpoint): its snapshot is labelled crest.job,
        crest.job.step, crest.job.rank and crest.job.world besides labels. Wait for it with
        wait() (or close()): only then does it count towards the step's job snapshot. tag
        names this rank's snapshot, and a tag names one snapshot in a store: give each rank
        its own ("step-100-rank-%d" % rank) or none. A checkpointer without job takes no
        step."""
        if self._job is None and step is not None:
            raise ValueError("save: step is for a job's ranks (Checkpointer(job=...))")
        if self._job is not None:
            if isinstance(step, bool) or not isinstance(step, int) or step < 0:
                raise ValueError("save: job %s needs step=, an int >= 0, not %r" % (self.job["name"], step))
        tensors, leaves = {}, {}
        _flatten(tree, "", tensors, leaves)
        self._sync_regions(tensors)
        payload = pickle.dumps({"state": state, "leaves": leaves}, protocol=4)
        buf = ctypes.create_string_buffer(payload, len(payload))
        blob = _Blob(_STATE_BLOB.encode(), ctypes.cast(buf, ctypes.c_void_p), len(payload))
        lab = [("%s=%s" % kv).encode() for kv in (labels or {}).items()]
        labarr = (ctypes.c_char_p * max(1, len(lab)))(*lab)
        o = _CkptOpts(tag.encode() if tag else None, labarr, len(lab), ctypes.pointer(blob), 1, None, 0)
        h = ctypes.c_uint64()
        if self._job is None:
            _check(_lib.crest_checkpoint(self._h, ctypes.byref(o), ctypes.byref(h)), "checkpoint")
            return h.value
        _check(_lib.crest_job_checkpoint(self._h, ctypes.byref(self._job), step, ctypes.byref(o), ctypes.byref(h)),
               "checkpoint of job %s step %d" % (self.job["name"], step))
        self._pending[h.value] = step
        return h.value

    def done(self, handle):
        return _check(_lib.crest_poll(self._h, handle), "polling checkpoint %d" % handle) == 1

    def wait(self, handle):
        """Blocks until the checkpoint is committed; returns {"snapshot", "bytes", "new_bytes",
        "stored_bytes", "stall_s", "staging_wait_s", "ingest_s", "rounds"}.

        A job's rank then arrives (crest_job_wait): it leaves its snapshot's id in the store
        and, when every rank of the step has, commits the job snapshot. It never waits for
        another rank. The dict gains "step", "committed" (True when this rank's arrival
        completed the set and it committed the job snapshot; in each step one rank, rarely
        two, sees True) and "job_snapshot" (that job snapshot's id when committed, else
        None)."""
        r = _Result()
        if self._job is None:
            _check(_lib.crest_wait(self._h, handle, ctypes.byref(r)), "waiting for checkpoint %d" % handle)
            return _result_dict(r)
        if handle not in self._pending:
            raise CrestError(9, "waiting for checkpoint %d: not a checkpoint of this rank of job %s that is "
                             "still to be waited for" % (handle, self.job["name"]))
        step = self._pending.pop(handle)   # the handle is spent either way (crest.h)
        jr = _JobResult()
        _check(_lib.crest_job_wait(self._h, ctypes.byref(self._job), step, handle, ctypes.byref(jr)),
               "waiting for checkpoint %d of job %s step %d" % (handle, self.job["name"], step))
        out = _result_dict(jr.rank)
        out["step"], out["committed"] = step, bool(jr.committed)
        out["job_snapshot"] = jr.job_snapshot.decode() if jr.committed else None
        return out

    def restore(self, tree, snapshot=None):
        """Writes the snapshot (None: the newest) into the tensors of tree, in place, and
        returns the state given to save().

        A job's rank restores its own part of a job snapshot (crest_job_restore): snapshot
        None is the newest job snapshot of this job; else "job:NAME" (the newest of job
        NAME), a tag or an id of a job snapshot. It must have this job's world size; rank r
        gets what rank r saved. Every rank calls it on its own, with no barrier; each
        gets the same step when each asks for the same job snapshot, so restore before
        the ranks can commit a newer one (before the first save())."""
        return self.restore_full(tree, snapshot)["state"]

    def restore_full(self, tree, snapshot=None):
        """As restore(), returning {"state", "leaves" (the non-tensor values of the saved
        tree, by path), "snapshot" (for a job's rank: its own member snapshot), "bytes",
        "cache_bytes", "seconds"}."""
        tensors, _ = {}, {}
        _flatten(tree, "", tensors, _)
        self._sync_regions(tensors)
        name = snapshot.encode() if snapshot else None
        r = _RestoreResult()
        if self._job is None:
            _check(_lib.crest_restore(self._h, name, ctypes.byref(r)), "restoring %s" % (snapshot or "newest"))
        else:
            _check(_lib.crest_job_restore(self._h, ctypes.byref(self._job), name, ctypes.byref(r)),
                   "restoring rank %d of %s" % (self.job["rank"], snapshot or "job:%s" % self.job["name"]))
        p, n = ctypes.c_void_p(), ctypes.c_size_t()
        _check(_lib.crest_read_blob(self._h, r.snapshot, _STATE_BLOB.encode(), ctypes.byref(p), ctypes.byref(n)),
               "reading the saved state")
        try:
            out = pickle.loads(ctypes.string_at(p, n.value))
        finally:
            _lib.crest_free(p)
        out["snapshot"], out["bytes"], out["seconds"] = r.snapshot.decode(), r.bytes, r.ns / 1e9
        out["cache_bytes"] = r.cache_bytes
        return out


def _result_dict(r):
    return {"snapshot": r.snapshot.decode(), "bytes": r.bytes, "new_bytes": r.new_bytes,
            "stored_bytes": r.stored_bytes, "stall_s": r.stall_ns / 1e9,
            "staging_wait_s": r.staging_wait_ns / 1e9, "ingest_s": r.ingest_ns / 1e9, "rounds": r.rounds}


def _dist():
    """torch.distributed when it is here and initialized, else None (torch not needed)."""
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    return dist if dist.is_available() and dist.is_initialized() else None


def _job_args(job, rank, world, attempt, gpu):
    """(name, attempt, rank, world, gpu) for a _Job, strings as bytes (attempt None: crest.h's
    default); rank, world and attempt as Checkpointer's docstring says."""
    # crest.h's rule for struct crest_job's name and attempt, checked here too so that a
    # bad one fails when the job is opened, not at its first checkpoint.
    name_ok = lambda v: isinstance(v, str) and re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,95}", v)  # noqa: E731
    if not name_ok(job):
        raise ValueError("Checkpointer: job %r is not 1 to 96 of letters, digits, '.', '_', '-' (not "
                         "beginning with '.')" % (job,))
    if attempt is not None and not name_ok(attempt):
        raise ValueError("Checkpointer(job=%r): attempt %r is not 1 to 96 of letters, digits, '.', '_', '-' "
                         "(not beginning with '.')" % (job, attempt))
    dist = _dist()
    if rank is None or world is None:
        if dist is not None:
            rank = dist.get_rank() if rank is None else rank
            world = dist.get_world_size() if world is None else world
        else:
            try:
                rank = int(os.environ["RANK"]) if rank is None else rank
                world = int(os.environ["WORLD_SIZE"]) if world is None else world
            except (KeyError, ValueError) as e:
                raise ValueError("Checkpointer(job=%r): no rank or world given, torch.distributed is not "
                                 "initialized and $RANK/$WORLD_SIZE do not say (%s: %r)"
                                 % (job, type(e).__name__, str(e)))
    for what, v in (("rank", rank), ("world", world)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0 or v >= 1 << 32:
            raise ValueError("Checkpointer(job=%r): %s %r is not an int in [0, 2^32)" % (job, what, v))
    if not 0 <= rank < world:
        raise ValueError("Checkpointer(job=%r): rank %d is not in [0, %d)" % (job, rank, world))
    if attempt is None and not os.environ.get("CREST_JOB_ATTEMPT") and \
            os.environ.get("TORCHELASTIC_RUN_ID", "none") == "none" and dist is not None:
        # Every launch of torchrun without --standalone or --rdzv_id is run "none": crest.h's
        # default would be the same attempt in the relaunch as in the launch that crashed.
        # os.urandom, not random: the job's RNGs are left as they are.
        a = ["%s.%d" % (os.urandom(8).hex(), os.getpid()) if dist.get_rank() == 0 else None]
        dist.broadcast_object_list(a, src=0)
        attempt = a[0]
    enc = lambda v: v.encode() if v is not None else None   # noqa: E731
    return (enc(job), enc(attempt), rank, world, enc(gpu))


def rng_state():
    """Every RNG a training loop usually draws from: torch (CPU, CUDA), python, numpy."""
    import torch
    s = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        s["cuda"] = torch.cuda.get_rng_state_all()
    try:
        import numpy
        s["numpy"] = numpy.random.get_state()
    except ImportError:
        pass
    return s


def set_rng_state(s):
    import torch
    torch.set_rng_state(s["torch"])
    random.setstate(s["python"])
    if "cuda" in s:
        torch.cuda.set_rng_state_all(s["cuda"])
    if "numpy" in s:
        import numpy
        numpy.random.set_state(s["numpy"])


def materialize_optimizer(opt):
    """Creates the optimizer's lazily made state (momentum, Adam moments) without changing
    any parameter: one step with zero gradients and a learning rate of 0. restore() then
    overwrites that state in place. The zero gradients are zeros_like(p): a DTensor for a
    DTensor parameter (FSDP2), sharded as it is, so the state made is sharded the same."""
    import torch
    saved = [g.get("lr") for g in opt.param_groups]
    grads = {}
    with torch.no_grad():
        for g in opt.param_groups:
            g["lr"] = 0.0
            for p in g["params"]:
                grads[p] = p.grad
                p.grad = torch.zeros_like(p)
        opt.step()
        for g, lr in zip(opt.param_groups, saved):
            g["lr"] = lr
            for p in g["params"]:
                p.grad = grads[p]
