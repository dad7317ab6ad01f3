"""Memory of a benchmarked process: RSS of a process tree, its peak, and background samplers.

May import psutil; nothing from zsnli.
"""

from __future__ import annotations

import threading


def tree_rss_bytes(pid: int) -> int:
    """Resident set size (bytes) of process ``pid`` plus all its descendants (psutil); 0 if gone."""
    import psutil

    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def hwm_bytes(pid: int) -> int | None:
    """Peak RSS since the process started (Linux ``VmHWM``), bytes; None where unavailable."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


class BackgroundSampler:
    """Calls ``sample()`` now, every ``interval_s`` in a daemon thread, and once more on exit.

    Subclasses implement ``sample`` (and keep their own peak); use as a
    context manager around the measured window.
    """

    thread_name = "sampler"

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> object:  # pragma: no cover - abstract
        """Take one sample (and keep the peak); each subclass says what it samples."""
        raise NotImplementedError

    def _run(self) -> None:
        """The thread's loop: `sample` every ``interval_s`` until the window ends."""
        while not self._stop.wait(self.interval_s):
            self.sample()

    def __enter__(self):
        self.sample()
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()


class RssSampler(BackgroundSampler):
    """Sample a process tree's RSS in a background thread; ``peak_bytes`` is the maximum seen.

    Use as a context manager around the measured window::

        with RssSampler(pid) as rss:
            run()
        rss.peak_bytes

    interval_s: sampling period (default 50 ms). A spike shorter than the
    period can be missed; ``hwm_bytes`` gives the exact all-time peak.
    """

    thread_name = "rss-sampler"

    def __init__(self, pid: int, interval_s: float = 0.05) -> None:
        super().__init__(interval_s)
        self.pid = pid
        self.peak_bytes = 0

    def sample(self) -> int:
        """Take one sample now; returns it (bytes) and updates ``peak_bytes``."""
        value = tree_rss_bytes(self.pid)
        self.peak_bytes = max(self.peak_bytes, value)
        return value


def mib(n: int | float | None) -> float | None:
    """Bytes to MiB (None stays None)."""
    return None if n is None else n / (1024 * 1024)
