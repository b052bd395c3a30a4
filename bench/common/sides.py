"""Side-by-side runs that cannot flatter one side: every turn of every side is a fresh child
process, the sides alternate (A B A B ..., or A B C A B C ...), and each child's own peak memory
comes from the rusage that `os.wait4` returns for that child alone (not RUSAGE_CHILDREN, which is
the largest over every child waited for so far).

A forked child starts with the peak RSS of the process that forked it (Linux copies the parent's
resident pages into the child's count, and exec keeps the high-water mark), so a child forked by
the benchmark, which holds torch and a model, would never report less than the benchmark itself.
Each child is therefore started by a small launcher (WAITER: a bare Python with nothing imported)
that forks and execs it, reaps it with os.wait4 and writes that rusage to a file.

A benchmark gives `alternate` its side names, the number of pairs and a function that runs one
turn (usually through `run_child`) and returns a `Figure`; `report` then prints each pair's ratio
of the first side against each other side, the median ratio, each side's median and the load
average at every turn.
"""
from __future__ import annotations

import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable

# argv: RUSAGE_FILE CMD... Forks CMD, waits for it with wait4, writes its rusage, exits with its status.
WAITER = """import os, sys
pid = os.fork()
if pid == 0:
    try:
        os.execvp(sys.argv[2], sys.argv[2:])
    except OSError as e:
        os.write(2, f"cannot run {sys.argv[2]}: {e}\\n".encode())
    os._exit(127)
_, status, ru = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
    f.write(f"{ru.ru_maxrss} {ru.ru_utime + ru.ru_stime}")
code = os.waitstatus_to_exitcode(status)
sys.exit(code if code >= 0 else 128 - code)
"""
MARK = "BENCH "  # a child's line `BENCH {json}` (or a bare `{json}` line) is one record


@dataclasses.dataclass
class Child:
    """One finished child process."""
    returncode: int
    records: list[tuple[float, dict]]  # (seconds since start when the line arrived, the JSON record)
    stderr: str
    peak_rss_bytes: int  # this child's own ru_maxrss (KiB on Linux) x 1024
    cpu_seconds: float  # user + system time of this child
    wall_seconds: float

    def of_type(self, kind: str) -> list[dict]:
        return [r for _, r in self.records if r.get("type") == kind]


@dataclasses.dataclass
class Figure:
    """What one turn of one side measured."""
    value: float  # the compared figure (tokens/s, s/step, ...)
    child: Child
    detail: dict = dataclasses.field(default_factory=dict)  # anything else the benchmark prints


@dataclasses.dataclass
class Turn:
    side: str
    pair: int  # 1-based
    load: tuple[float, float, float]  # os.getloadavg() as the turn started
    figure: Figure


def run_child(cmd: list, env: dict | None = None) -> Child:
    """Runs cmd to its end, collecting its stdout records as they arrive; stderr goes to a temporary
    file (no pipe to fill). The child is started and reaped by WAITER, whose os.wait4 rusage is
    this child's alone."""
    t0 = time.time()
    with tempfile.TemporaryFile("w+") as err, tempfile.NamedTemporaryFile("r") as usage:
        proc = subprocess.Popen([sys.executable, "-S", "-c", WAITER, usage.name] + [str(c) for c in cmd],
                                stdout=subprocess.PIPE, stderr=err, text=True, env=env)
        records = []
        for line in proc.stdout:
            line = line.strip()
            if line.startswith(MARK):
                line = line[len(MARK):]
            if line.startswith("{"):
                try:
                    records.append((time.time() - t0, json.loads(line)))
                except json.JSONDecodeError:
                    pass  # a library's own output
        proc.stdout.close()
        proc.wait()
        err.seek(0)
        stderr = err.read()
        maxrss_kib, cpu = usage.read().split() or ("0", "0")
    return Child(returncode=proc.returncode, records=records, stderr=stderr, peak_rss_bytes=int(maxrss_kib) * 1024,
                 cpu_seconds=float(cpu), wall_seconds=time.time() - t0)


def checked(child: Child, what: str) -> Child:
    """child, or SystemExit with the tail of its stderr when it failed."""
    if child.returncode != 0:
        raise SystemExit(f"{what} failed (exit {child.returncode}):\n{child.stderr[-4000:]}")
    return child


def add_arguments(ap, names: tuple[str, ...], default: str) -> None:
    """--sides (comma-separated, the first is the reference) and --pairs on an argparse parser."""
    ap.add_argument("--sides", default=default, help=f"comma-separated, the first is the reference; of {names}")
    ap.add_argument("--pairs", type=int, default=3, help="turns of each side, alternating (A B A B ...)")


def chosen(args, names: tuple[str, ...]) -> list[str]:
    """The sides --sides names, or SystemExit naming the unknown or repeated ones (or a --pairs below 1)."""
    if args.pairs < 1:
        raise SystemExit(f"--pairs must be at least 1, not {args.pairs}")
    picked = args.sides.split(",")
    unknown = [s for s in picked if s not in names]
    if unknown or len(set(picked)) != len(picked):
        raise SystemExit(f"--sides: unknown or repeated {unknown or picked}; choose from {', '.join(names)}")
    return picked


def alternate(sides: list[str], pairs: int, turn: Callable[[str, int], Figure], unit: str) -> list[Turn]:
    """Runs turn(side, pair) for pair 1..pairs, the sides in the given order within each pair, and
    prints one line per turn as it ends."""
    if pairs < 1 or not sides:
        raise SystemExit(f"--pairs must be at least 1 and --sides not empty (got {pairs}, {sides})")
    print(f"sides {', '.join(sides)}; {pairs} pairs, alternating; each turn a fresh process", flush=True)
    turns = []
    for pair in range(1, pairs + 1):
        for side in sides:
            load = os.getloadavg()
            figure = turn(side, pair)
            turns.append(Turn(side, pair, load, figure))
            c = figure.child
            print(f"pair {pair} {side:12} {figure.value:10.3f} {unit}   peak RSS {c.peak_rss_bytes / 2**20:7.0f} MiB   "
                  f"cpu {c.cpu_seconds:7.1f} s   wall {c.wall_seconds:7.1f} s   load {_load(load)}", flush=True)
    return turns


def ratio(a: float, b: float, higher_is_better: bool) -> float:
    """How many times better a is than b."""
    return a / b if higher_is_better else b / a


def report(turns: list[Turn], unit: str, higher_is_better: bool = True) -> dict:
    """Prints each pair's ratio of the first side against each other side, the median ratios and
    each side's medians; returns {side: median value} and {other: median ratio}."""
    sides = list(dict.fromkeys(t.side for t in turns))
    ref = sides[0]
    by = {(t.side, t.pair): t for t in turns}
    pairs = sorted({t.pair for t in turns})
    better = "higher" if higher_is_better else "lower"
    print(f"\n{unit} ({better} is better); ratio = how many times {ref} is better than the other side, per pair")
    ratios = {}
    for other in sides[1:]:
        rs = [ratio(by[(ref, p)].figure.value, by[(other, p)].figure.value, higher_is_better)
              for p in pairs if (ref, p) in by and (other, p) in by]
        ratios[other] = statistics.median(rs) if rs else None
        print(f"  {ref} / {other}: " + " ".join(f"{r:.2f}" for r in rs) +
              (f"   median {ratios[other]:.2f}" if rs else ""))
    medians = {}
    print(f"  {'side':14}{'median ' + unit:>22}{'median peak RSS MiB':>22}{'median cpu s':>14}   load at each turn")
    for side in sides:
        own = [t for t in turns if t.side == side]
        medians[side] = statistics.median(t.figure.value for t in own)
        rss = statistics.median(t.figure.child.peak_rss_bytes for t in own) / 2**20
        cpu = statistics.median(t.figure.child.cpu_seconds for t in own)
        print(f"  {side:14}{medians[side]:22.3f}{rss:22.0f}{cpu:14.1f}   " + "; ".join(_load(t.load) for t in own))
    return {"median": medians, "median_ratio": ratios}


def median_detail(turns: list[Turn], side: str, key: str) -> float | None:
    """The median of detail[key] over a side's turns (None where no turn has it)."""
    values = [t.figure.detail[key] for t in turns if t.side == side and t.figure.detail.get(key) is not None]
    return statistics.median(values) if values else None


def _load(load: tuple[float, float, float]) -> str:
    return " ".join(f"{x:.2f}" for x in load)
