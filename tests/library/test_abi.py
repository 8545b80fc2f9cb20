#!/usr/bin/python3
"""The Python binding's layouts against libcrest's (crest_abi_* of crest.h), without torch:

 - the library's member lists are crest.h's (read from the header's text), and the
   binding declares the same members, so lib/abi.c and python/crest cannot fall behind;
 - the binding loads libcrest, and takes crest.h's constants from it;
 - the check refuses a wrong layout: a member of the wrong size, a wrong offset, a
   missing or extra member, an unknown constant, a library without crest_abi_*; the
   binding then stays unloaded, and loads again once the layout is right.

   test_abi.py STORE_DIR     (CREST_LIB names libcrest.so)
"""
import ctypes
import os
import re
import shutil
import sys

import crest

HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "include", "crest.h")
store = sys.argv[1]
shutil.rmtree(store, ignore_errors=True)
fails = 0


def check(ok, msg):
    global fails
    if not ok:
        print("FAIL:", msg)
        fails += 1


# crest.h's structs and their members, in order, from the header's text.
text = re.sub(r"/\*.*?\*/", "", open(HEADER).read(), flags=re.S)
header = {}
for name, body in re.findall(r"struct (crest_\w+) \{(.*?)\};", text, flags=re.S):
    # One declaration may name several members ("uint32_t rank, world;"): each
    # comma-separated declarator ends in its name (an array's after its bounds).
    header[name] = [re.search(r"(\w+)\s*(\[[^]]*\])?\s*$", part.strip()).group(1)
                    for d in body.split(";") if d.strip() for part in d.split(",")]
mine = {c: [f[0] for f in cls._fields_] for c, cls in crest._STRUCTS}
check(sorted(header) == sorted(mine), "crest.h has structs %s, the binding lays out %s" % (sorted(header), sorted(mine)))

lib = ctypes.CDLL(os.environ["CREST_LIB"])
crest._abi_signatures(lib)
for c, members in header.items():
    theirs, n = [], lib.crest_abi_field(c.encode(), 0)
    while n is not None:
        theirs.append(n.decode())
        n = lib.crest_abi_field(c.encode(), len(theirs))
    check(theirs == members, "struct %s: crest.h declares %s, lib/abi.c lists %s" % (c, members, theirs))
    check(mine.get(c) == members, "struct %s: crest.h declares %s, the binding %s" % (c, members, mine.get(c)))

# Unknown names: the documented answers.
check(lib.crest_abi_sizeof(b"crest_nothing") == 0, "sizeof of an unknown struct is not 0")
check(lib.crest_abi_sizeof(b"crest_result.nothing") == 0, "sizeof of an unknown member is not 0")
check(lib.crest_abi_offsetof(b"crest_result", b"nothing") == 2 ** 64 - 1, "offset of an unknown member is not SIZE_MAX")
check(lib.crest_abi_field(b"crest_nothing", 0) is None, "an unknown struct has members")
v = ctypes.c_longlong(-7)
check(lib.crest_abi_const(b"CREST_NOTHING", ctypes.byref(v)) == -2 and v.value == -7, "an unknown constant is not -ENOENT")

# The real layouts pass; the constants are crest.h's.
seen = set()
for name, val in re.findall(r"(CREST_[A-Z_]+)\s*=\s*(\d+)", text) + re.findall(r"#define (CREST_[A-Z_]+) (0x[0-9a-f]+|\d+)u?", text):
    if name in crest._CONSTS:
        got = crest._check_abi(lib, "libcrest")[name]
        check(got == int(val, 0), "%s: %s in crest.h, %s from the library" % (name, val, got))
        seen.add(name)
check(seen == set(crest._CONSTS), "constants not found in crest.h: %s" % (set(crest._CONSTS) - seen))


def wrong(name, fields, pack=None):
    attrs = {"_fields_": fields}
    if pack:
        attrs["_pack_"] = pack
    return type(name, (ctypes.Structure,), attrs)


R = crest._Result._fields_
U64 = ctypes.c_uint64
cases = [
    ("a member of the wrong size", ("crest_result", wrong("R", R[:-1] + [("rounds", U64)])),
     "struct crest_result member rounds size: 8 in python/crest, 4 in"),
    ("a member at the wrong offset", ("crest_result", wrong("R", R, pack=1)),
     "struct crest_result member bytes offset: 65 in python/crest, 72 in"),
    ("a short array", ("crest_restore_result", wrong("RR", [("snapshot", ctypes.c_char * 64), ("bytes", U64), ("ns", U64),
                                                             ("cache_bytes", U64)])),
     "struct crest_restore_result member snapshot size: 64 in python/crest, 65 in"),
    ("a missing member", ("crest_result", wrong("R", R[:-1])),
     "struct crest_result members: snapshot,bytes,new_bytes,stored_bytes,zero_bytes,stall_ns,staging_wait_ns,ingest_ns in python/crest"),
    ("an extra member", ("crest_blob", wrong("B", crest._Blob._fields_ + [("more", U64)])),
     "struct crest_blob members: name,data,len,more in python/crest, name,data,len in"),
    # A nested struct: crest_job_result holds a crest_result whole; one of the wrong size
    # (here crest_restore_result's) is refused as a member of the wrong size.
    ("a nested struct of the wrong size", ("crest_job_result", wrong("JR", [("rank", crest._RestoreResult)] +
                                                                     crest._JobResult._fields_[1:])),
     "struct crest_job_result member rank size: 96 in python/crest, 136 in"),
    ("job ranks of the wrong width", ("crest_job", wrong("J", [(n, U64 if n in ("rank", "world") else t)
                                                               for n, t in crest._Job._fields_])),
     "struct crest_job member rank size: 8 in python/crest, 4 in"),
]
for what, struct, want in cases:
    try:
        crest._check_abi(lib, "libcrest", (struct,))
        check(False, "%s passed the check" % what)
    except ImportError as e:
        print("refused, %s: %s" % (what, e))
        check(want in str(e) and "\n" not in str(e), "%s: the message lacks '%s': %s" % (what, want, e))
try:
    crest._check_abi(lib, "libcrest", (), ("CREST_NOTHING",))
    check(False, "an unknown constant passed the check")
except ImportError as e:
    print("refused, an unknown constant:", e)
try:
    crest._check_abi(ctypes.CDLL(None), "this process", ())
    check(False, "a library without crest_abi_* passed the check")
except ImportError as e:
    print("refused, no crest_abi_*:", e)
    check("crest_abi_" in str(e), "the message does not name crest_abi_*: %s" % e)

# At load: a binding whose layout is wrong refuses the library and stays unloaded.
good = crest._STRUCTS
crest._STRUCTS = tuple((c, cases[2][1][1] if c == "crest_restore_result" else cls) for c, cls in good)
try:
    crest.Checkpointer(store, staging_bytes=16 << 20, no_gpu=True)
    check(False, "the binding loaded libcrest with a wrong layout")
except ImportError as e:
    print("refused at load:", e)
    check(os.environ["CREST_LIB"] in str(e), "the message does not name the library: %s" % e)
check(crest._lib is None, "the binding kept the library it refused")
crest._STRUCTS = good
with crest.Checkpointer(store, staging_bytes=16 << 20, no_gpu=True):
    pass
check(crest._lib is not None and crest._const["CREST_OPEN_NO_GPU"] == 1, "the binding did not load with its own layout")

# Branches (crest_set_branch): a valid name is taken, an invalid one raises EINVAL with
# crest's message, at open as later.
with crest.Checkpointer(store, staging_bytes=16 << 20, no_gpu=True, branch="py/exp-1") as ck:
    ck.set_branch("main")
    try:
        ck.set_branch("no spaces")
        check(False, "set_branch took an invalid name")
    except crest.CrestError as e:
        print("refused, an invalid branch:", e)
        check(e.errno == 22 and "no spaces" in str(e), "set_branch's error: %s" % e)
try:
    crest.Checkpointer(store, staging_bytes=16 << 20, no_gpu=True, branch="")
    check(False, "Checkpointer took an empty branch name")
except crest.CrestError as e:
    print("refused at open, an empty branch:", e)
    check(e.errno == 22, "Checkpointer's error: %s" % e)

# A job's rank (Checkpointer(job=...)): what is refused before the store is opened, and
# rank and world from $RANK and $WORLD_SIZE (torch.distributed is not initialized here).
for what, kw in (("rank without job", {"rank": 1}),
                 ("a job name beginning with '.'", {"job": ".j", "rank": 0, "world": 1}),
                 ("a job name with a space", {"job": "a b", "rank": 0, "world": 1}),
                 ("a rank outside the world", {"job": "j", "rank": 2, "world": 2}),
                 ("a bad attempt", {"job": "j", "rank": 0, "world": 2, "attempt": "a/b"}),
                 ("no rank anywhere", {"job": "j"})):
    env = {k: os.environ.pop(k) for k in ("RANK", "WORLD_SIZE") if k in os.environ}
    try:
        crest.Checkpointer(store, staging_bytes=16 << 20, no_gpu=True, **kw)
        check(False, "Checkpointer took %s" % what)
    except ValueError as e:
        print("refused, %s: %s" % (what, e))
    os.environ.update(env)
os.environ.update(RANK="1", WORLD_SIZE="3")
with crest.Checkpointer(store, staging_bytes=16 << 20, no_gpu=True, job="j.1", attempt="a-1") as ck:
    check(ck.job == {"name": "j.1", "rank": 1, "world": 3, "attempt": "a-1", "gpu": None},
          "the job from $RANK and $WORLD_SIZE: %s" % ck.job)
with crest.Checkpointer(store, staging_bytes=16 << 20, no_gpu=True) as ck:
    check(ck.job is None, "a checkpointer without job says it has one: %s" % ck.job)

if fails:
    sys.exit("%d checks failed" % fails)
print("ok: the binding's %d structs match libcrest; wrong layouts are refused" % len(good))
