#!/usr/bin/env python3
"""A strict reader of the Prometheus text format 0.0.4, for the metrics tests.

  prom.py file PATH [--labels k=v,...]      parse a textfile
  prom.py scrape URL [--labels k=v,...]     GET it, check the headers, parse
  prom.py wait URL N [--labels k=v,...]     scrape until crest_checkpoints_total >= N
  prom.py status URL...                     print the HTTP status of each GET ("refused")
  prom.py abuse URL                         hostile clients must not stop a scrape
  prom.py loris URL N SECONDS               N slow clients (a byte a second) for
                                            SECONDS, scraping all along: each
                                            scrape answered within 1 s
  prom.py selftest                          the reader refuses what is not the format

file, scrape and wait print one "name value" line per sample, and fail (exit 1,
"FAIL: ..." on stderr) on any line that is not HELP, TYPE or
`name{labels} value`, on a sample whose metric has no TYPE before it, on a
TYPE given twice, on a name without the crest_ prefix, and, with --labels,
on a sample whose labels are not exactly those.
"""
import re
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"'
LABEL_NC = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
SAMPLE = re.compile(r"^(%s)(?:\{((?:%s)(?:,%s)*)?,?\})? (\S+)(?: (-?\d+))?$" % (NAME, LABEL_NC, LABEL_NC))
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}


class Bad(Exception):
    pass


def fail(msg):
    raise Bad(msg)


def parse(text, want_labels=None):
    if not text.endswith("\n"):
        fail("the text does not end with a newline")
    types, helps, out = {}, set(), []
    seen = set()
    for n, line in enumerate(text.split("\n")[:-1], 1):
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            parts = line.split(" ", 3)
            if len(parts) < 4 or not re.fullmatch(NAME, parts[2]):
                fail("line %d: malformed: %r" % (n, line))
            name = parts[2]
            if parts[1] == "HELP":
                if name in helps:
                    fail("line %d: a second HELP for %s" % (n, name))
                helps.add(name)
                continue
            if name in types:
                fail("line %d: a second TYPE for %s" % (n, name))
            if name in seen:
                fail("line %d: TYPE of %s after its samples" % (n, name))
            if parts[3] not in TYPES:
                fail("line %d: unknown type %r" % (n, parts[3]))
            types[name] = parts[3]
            continue
        if line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if not m:
            fail("line %d: not `name{labels} value`: %r" % (n, line))
        name, value = m.group(1), m.group(3)
        try:
            v = float(value)
        except ValueError:
            fail("line %d: value %r is not a number" % (n, value))
        if name not in types:
            fail("line %d: sample of %s without a TYPE before it" % (n, name))
        if not name.startswith("crest_"):
            fail("line %d: %s lacks the crest_ prefix" % (n, name))
        if types[name] == "counter" and (v < 0 or not name.endswith("_total")):
            fail("line %d: counter %s = %s" % (n, name, value))
        labels = dict(re.findall(LABEL, m.group(2) or ""))
        if want_labels is not None and labels != want_labels:
            fail("line %d: labels %r, want %r" % (n, labels, want_labels))
        seen.add(name)
        out.append((name, v))
    if not out:
        fail("no samples")
    for name, t in types.items():
        if name not in helps:
            fail("%s has a TYPE and no HELP" % name)
    return out


def get(url, timeout=5):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read().decode()


def loris(url, n, secs):
    """n connections on 127.0.0.1 that send a request a byte a second,
    reopened when crest drops them, while a scrape runs every 0.5 s: every
    scrape must answer 200 within 1 s. Bounded: n connections at a time
    and secs seconds."""
    u = urllib.parse.urlsplit(url)
    addr = (u.hostname, u.port)
    req = b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"a" * 200
    conns = []   # [socket, bytes sent]
    def fill():
        while len(conns) < n:
            try:
                conns.append([socket.create_connection(addr, timeout=1), 0])
            except OSError:
                break
    fill()
    opened = len(conns)
    t_end = time.monotonic() + secs
    next_drip = 0.0
    worst, scrapes, dropped = 0.0, 0, 0
    while time.monotonic() < t_end:
        if time.monotonic() >= next_drip:
            for c in conns[:]:
                try:
                    c[0].send(req[c[1] % len(req):c[1] % len(req) + 1])
                    c[1] += 1
                except OSError:
                    c[0].close()
                    conns.remove(c)
                    dropped += 1
            before = len(conns)
            fill()
            opened += len(conns) - before
            next_drip = time.monotonic() + 1
        t0 = time.monotonic()
        try:
            status, _, _ = get(url, timeout=5)
        except (OSError, urllib.error.URLError) as e:
            fail("a scrape beside %d slow clients failed after %.1f s: %s" % (len(conns), time.monotonic() - t0, e))
        took = time.monotonic() - t0
        scrapes += 1
        worst = max(worst, took)
        if status != 200 or took > 1.0:
            fail("scrape %d beside %d slow clients: HTTP %d after %.2f s" % (scrapes, len(conns), status, took))
        time.sleep(0.5)
    for c in conns:
        c[0].close()
    if opened < n:
        fail("only %d slow clients could connect" % opened)
    print("ok: %d scrapes beside %d slow clients (%d opened, %d dropped by crest), the slowest %.3f s"
          % (scrapes, n, opened, dropped, worst))


def scrape(url, want):
    status, ctype, text = get(url)
    if status != 200:
        fail("GET %s: HTTP %d" % (url, status))
    if not ctype.startswith("text/plain; version=0.0.4"):
        fail("GET %s: Content-Type %r" % (url, ctype))
    return parse(text, want)


def selftest():
    good = '# HELP crest_x x\n# TYPE crest_x gauge\ncrest_x{a="b\\"c",d="e"} 1e3 17\n'
    parse(good)
    bad = [
        'crest_x{a="b"} 1\n',                                        # no TYPE
        '# HELP crest_x x\n# TYPE crest_x gauge\ncrest_x{a=b} 1\n',  # unquoted label
        '# HELP crest_x x\n# TYPE crest_x gauge\ncrest_x{a="b"}\n',  # no value
        '# HELP crest_x x\n# TYPE crest_x gauge\ncrest_x{a="b"} one\n',
        '# HELP crest_x x\n# TYPE crest_x gauge\ncrest_x 1',           # no newline at the end
        '# HELP crest_x x\n# TYPE crest_x gauge\n# TYPE crest_x gauge\ncrest_x 1\n',
        '# HELP x x\n# TYPE x gauge\nx 1\n',                           # no crest_ prefix
        '# HELP crest_x x\n# TYPE crest_x counter\ncrest_x 1\n',      # a counter without _total
        '# HELP crest_x x\n# TYPE crest_x gauge\ncrest_x{a="b"} 1\ncrest_y 1\n',
    ]
    for b in bad:
        try:
            parse(b)
        except Bad:
            continue
        fail("the reader accepted %r" % b)
    print("ok: the reader refuses %d malformed texts" % len(bad))


def main():
    if len(sys.argv) < 2:
        fail(__doc__)
    cmd, arg = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None
    want = None
    if "--labels" in sys.argv:
        want = dict(kv.split("=", 1) for kv in sys.argv[sys.argv.index("--labels") + 1].split(","))
    if cmd == "selftest":
        selftest()
        return
    if cmd == "wait":
        need = int(sys.argv[3])
        deadline = time.monotonic() + 30
        while True:
            out = scrape(arg, want)
            c = dict(out).get("crest_checkpoints_total", 0)
            if c >= need:
                break
            if time.monotonic() > deadline:
                fail("crest_checkpoints_total %d after 30 s, want %d" % (c, need))
            time.sleep(0.05)
        for name, v in out:
            print(name, int(v) if v.is_integer() else v)
        return
    if cmd == "file":
        with open(arg) as f:
            text = f.read()
    elif cmd == "scrape":
        text = None
    elif cmd == "status":
        for u in sys.argv[2:]:
            try:
                print(get(u)[0])
            except urllib.error.URLError:
                print("refused")
        return
    elif cmd == "abuse":
        u = urllib.parse.urlsplit(arg)
        addr = (u.hostname, u.port)
        # One client that says nothing, one that sends more than a request
        # may hold, one that goes away mid-request: a scrape still answers.
        idle = socket.create_connection(addr)
        gone = socket.create_connection(addr)
        gone.sendall(b"GET /metr")
        gone.close()
        big = socket.create_connection(addr)
        big.settimeout(5)
        try:
            big.sendall(b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 65536)
        except OSError:
            pass  # refused midway: also fine
        reply = b""
        try:
            while True:
                b = big.recv(4096)
                if not b:
                    break
                reply += b
        except OSError:
            pass
        if reply and not reply.startswith(b"HTTP/1.1 431"):
            fail("an oversized request got %r" % reply[:40])
        t0 = time.monotonic()
        status, _, text = get(arg, timeout=3)
        if status != 200 or time.monotonic() - t0 > 2:
            fail("a scrape beside hostile clients: HTTP %d after %.1f s" % (status, time.monotonic() - t0))
        idle.close()
        big.close()
        print("ok: an idle, a vanished and an oversized client; the scrape took %.3f s" % (time.monotonic() - t0))
        return
    elif cmd == "loris":
        loris(arg, int(sys.argv[3]), float(sys.argv[4]))
        return
    else:
        fail(__doc__)
    for name, v in scrape(arg, want) if text is None else parse(text, want):
        print(name, int(v) if v.is_integer() else v)


try:
    main()
except Bad as e:
    print("FAIL: %s" % e, file=sys.stderr)
    sys.exit(1)
