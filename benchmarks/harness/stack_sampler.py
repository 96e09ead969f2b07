"""Where a Python program's threads spend their time: samples every thread's stack at a fixed interval and
writes the counts as collapsed stacks ("thread;outer;...;inner COUNT" per line, the flame-graph format).

    python benchmarks/harness/stack_sampler.py OUT.txt [--interval-ms 10] -- -m studio.engine --model ...

The program runs in this process (runpy), so the sampler sees its threads; the file is rewritten every few
seconds and at exit, so a program that is stopped by a signal still leaves its samples. A thread that waits
(a lock, a queue, a sleep, a socket) is sampled too: read the leaf frames to tell work from waiting.
"""

from __future__ import annotations

import argparse
import atexit
import collections
import os
import runpy
import signal
import sys
import threading
import time
from pathlib import Path

WRITE_EVERY_S = 5.0


class StackSampler:
    def __init__(self, out: Path, interval_s: float):
        self.out, self.interval_s = out, interval_s
        self.counts: collections.Counter[str] = collections.Counter()
        self.samples = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="stack-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        me = threading.get_ident()
        last_write = time.monotonic()
        while not self._stop.wait(self.interval_s):
            names = {thread.ident: thread.name for thread in threading.enumerate()}
            with self._lock:
                self.samples += 1
                for ident, frame in sys._current_frames().items():
                    if ident == me:
                        continue
                    stack = []
                    while frame is not None:
                        code = frame.f_code
                        stack.append(f"{Path(code.co_filename).name}:{code.co_name}")
                        frame = frame.f_back
                    self.counts[";".join([names.get(ident, str(ident)), *reversed(stack)])] += 1
            if time.monotonic() - last_write > WRITE_EVERY_S:
                self.write()
                last_write = time.monotonic()

    def write(self) -> None:
        with self._lock:
            lines = [f"{stack} {count}" for stack, count in self.counts.most_common()]
            header = f"# samples {self.samples} interval_s {self.interval_s} pid {os.getpid()}\n"
        temporary = self.out.with_name(self.out.name + ".tmp")
        temporary.write_text(header + "\n".join(lines) + "\n")
        os.replace(temporary, self.out)


def main() -> None:
    argv = sys.argv[1:]
    if "--" not in argv:
        raise SystemExit("usage: stack_sampler.py OUT [--interval-ms N] -- -m MODULE ARGS... | SCRIPT ARGS...")
    split = argv.index("--")
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--interval-ms", type=float, default=10.0)
    args = parser.parse_args(argv[:split])
    program = argv[split + 1 :]
    sampler = StackSampler(args.out, args.interval_ms / 1000)
    atexit.register(sampler.write)
    # SIGTERM ends the program through its own handler where it has one (uvicorn's); the samples are written
    # by atexit then. Where it has none, this one writes them and exits.
    signal.signal(signal.SIGTERM, lambda *_: (sampler.write(), sys.exit(143)))
    sampler.start()
    # The program's path starts as Python would start it, not with this file's folder (the harness).
    if program[0] == "-m":
        sys.path[0] = os.getcwd()  # as `python -m` does
        sys.argv = [program[1], *program[2:]]
        runpy.run_module(program[1], run_name="__main__", alter_sys=True)
    else:
        sys.path[0] = str(Path(program[0]).resolve().parent)
        sys.argv = program
        runpy.run_path(program[0], run_name="__main__")


if __name__ == "__main__":
    main()
