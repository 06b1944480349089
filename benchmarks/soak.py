"""Soak: a long run of tiny cases, many of them hostile, through the real CLI.

    python benchmarks/soak.py [--good 80] [--crash 10] [--hang 5] [--exit 5] [--hard-exit 5]
                              [--orphan 3] [--jobs 2]

Writes that many case files (the tiny conv-ReLU-conv model of tests/data with a different
weight seed each, and the hostile models of tests/data/hostile_models.py) into a temporary
folder, runs ``cl-validate run`` on it once, and checks what the isolation issue promises:

- the JUnit report holds every case exactly once, with one verdict per check, and is valid;
- every good case passed and every hostile case is an error of the expected type;
- the parent's memory stays flat (its RSS is sampled from /proc while it runs);
- nothing the run started is left running afterwards (every process it started carries a
  token in its environment).

Exits 1 if any of that does not hold. Not part of the test suite: it takes minutes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
TOKEN_ENV = "CL_VALIDATE_SOAK"
sys.path.insert(0, str(ROOT))
from cl_validate.checks.registry import names  # noqa: E402

CHECKS = len(names())  # one testcase per check for every case

CASE = """model = "{model}"
targets = ["llvm"]
seed = {seed}
{extra}
[[inputs]]
name = "x"
shape = [1, 3, 16, 16]

[layout]
"relax.nn.conv2d" = ["NHWC", "OHWI"]

[budget]
layout_transforms = 2

[tolerance]
rtol = 1e-4
atol = 1e-4
"""

#: kind -> (factory, extra case-file lines, the error type expected, or None: passes)
KINDS = {
    "good": ("tiny_models:conv_relu", "", None),
    "crash": ("hostile_models:segfault", "", "WorkerCrashed"),
    "hang": ("hostile_models:hang", "timeout = 5", "Timeout"),
    "exit": ("hostile_models:exits", "", "ModelExited"),
    "hard_exit": ("hostile_models:hard_exit", "", "WorkerCrashed"),
    "orphan": ("hostile_models:leaves_a_child", "", "StrayProcess"),
}


def _rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def _left_behind(token: str) -> list[str]:
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if f"{TOKEN_ENV}={token}".encode() in env:
            out.append(f"{pid}: {cmd.decode(errors='replace')[:100]}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for kind, default in (("good", 80), ("crash", 10), ("hang", 5), ("exit", 5),
                          ("hard-exit", 5), ("orphan", 3)):
        ap.add_argument(f"--{kind}", type=int, default=default, metavar="N")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    counts = {"good": args.good, "crash": args.crash, "hang": args.hang, "exit": args.exit,
              "hard_exit": args.hard_exit, "orphan": args.orphan}
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="cl_validate-soak-") as tmp:
        cases = Path(tmp) / "cases"
        cases.mkdir()
        for f in ("tiny_models.py", "hostile_models.py"):
            shutil.copy(DATA / f, cases / f)
        expected: dict[str, str | None] = {}
        seed = 0
        for kind, n in counts.items():
            model, extra, error = KINDS[kind]
            for i in range(n):
                seed += 1
                name = f"{kind}_{i:03d}"
                (cases / f"{name}.toml").write_text(CASE.format(model=model, seed=seed,
                                                                extra=extra))
                expected[name] = error
        junit = Path(tmp) / "r.xml"
        token = uuid.uuid4().hex
        cmd = [sys.executable, "-m", "cl_validate", "run", str(cases), "-j", str(args.jobs),
               "--no-cache", "--junit", str(junit)]
        print(f"{len(expected)} cases ({', '.join(f'{n} {k}' for k, n in counts.items())}), "
              f"-j {args.jobs}", flush=True)
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env={**os.environ, TOKEN_ENV: token,
                                                "PYTHONUNBUFFERED": "1"})
        assert proc.stdout is not None
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True)
        reader.start()
        samples: list[tuple[int, float]] = []  # (results so far, parent RSS MB)
        done = 0
        while proc.poll() is None:
            done = sum(1 for ln in list(lines) if ln.startswith("["))
            rss = _rss_mb(proc.pid)
            if rss is not None:
                samples.append((done, rss))
            time.sleep(0.5)
        reader.join(timeout=10)
        done = sum(1 for ln in lines if ln.startswith("["))
        wall = time.perf_counter() - t0
        time.sleep(1.0)
        left = _left_behind(token)

        if proc.returncode != 1:
            problems.append(f"exit {proc.returncode}, expected 1 (some cases error)")
        root = ET.parse(junit).getroot()
        seen: dict[str, list[ET.Element]] = {}
        for tc in root.iter("testcase"):
            seen.setdefault(tc.get("classname", ""), []).append(tc)
        if set(seen) != set(expected):
            problems.append(f"cases missing {sorted(set(expected) - set(seen))[:5]}, "
                            f"unexpected {sorted(set(seen) - set(expected))[:5]}")
        for name, tcs in seen.items():
            if len(tcs) != CHECKS or len({tc.get("name") for tc in tcs}) != CHECKS:
                problems.append(f"{name}: {len(tcs)} testcases, expected {CHECKS} distinct")
            errors = [e.get("type") for tc in tcs for e in tc.findall("error")]
            failures = [tc for tc in tcs if tc.find("failure") is not None]
            want = expected.get(name)
            if want is None and (errors or failures):
                problems.append(f"{name}: should pass, got errors {errors}")
            elif want is not None and errors != [want]:
                problems.append(f"{name}: expected one {want} error, got {errors}")
        if left:
            problems.append(f"{len(left)} process(es) left running: {left[:3]}")

    rss = [r for _, r in samples]
    print(f"wall {wall:.1f} s, {done} case x target results")
    if rss:
        warm = [r for d, r in samples if d >= 5] or rss
        growth = warm[-1] - warm[0]
        print(f"parent RSS: {rss[0]:.0f} MB at start, {min(warm):.0f}-{max(warm):.0f} MB "
              f"(median {statistics.median(warm):.0f}) after the first results, "
              f"{warm[-1]:.0f} MB at the end: {growth:+.1f} MB over "
              f"{len(expected) - 5} cases")
        if growth > 50:
            problems.append(f"parent RSS grew {growth:.0f} MB")
    print(f"left running afterwards: {len(left)}")
    for p in problems:
        print(f"PROBLEM: {p}")
    print("soak: OK" if not problems else f"soak: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
