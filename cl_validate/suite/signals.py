"""Signals to the run's parent, told apart by who sent them.

A model's code runs in a process the run started, and it can signal any process of the same
user: ``os.kill(os.getppid(), signal.SIGTERM)`` would stop a whole run. So the parent blocks
the signals that end or stop a process and receives them on a thread (``sigwaitinfo``), which
learns the sender's pid. A signal from one of the run's own processes (a case, whatever it
started) is that case's error, named, and the run goes on; a signal from anyone else — the
terminal's Ctrl-C (sent by the kernel), CI cancelling the job, a user's ``kill`` — interrupts
the run as before: the report is written with the unfinished cases marked not run.

Where the kernel walls each case in (`cl_validate.session.sandbox`, Linux 6.12 and later), no
signal from a case reaches this process at all; this is the defence where it does not. What
it cannot defend: SIGKILL and SIGSTOP cannot be blocked (a model that sends them ends or
freezes the run; the cases notice the parent is gone and end themselves). A sender that has
already exited when the thread looks (a model that runs ``kill(1)`` and returns at once can
win that race) cannot be traced, and is taken as an interrupt.
"""

from __future__ import annotations

import _thread
import os
import signal
import threading
from collections.abc import Callable
from types import TracebackType

from cl_validate import procs

GUARDED = procs.GUARDED_SIGNALS
#: The ones that stop rather than end: from outside they stop the run, as a shell expects.
_STOPS = tuple(getattr(signal, n) for n in ("SIGTSTP", "SIGTTIN", "SIGTTOU") if hasattr(signal, n))
#: What a signal from outside does to the run: the interrupt the CLI turns into a report.
OnInternal = Callable[[signal.Signals, int, list[int]], None]


class SignalGuard:
    """While active (a context manager, in the main thread), the guarded signals are blocked
    and received on a thread. One from a descendant of this process goes to `on_internal`
    (signal, sender pid, its ancestors up to this process); one from outside raises
    `KeyboardInterrupt` in the main thread (through the Python handler of SIGINT and SIGTERM
    the caller installs) or, for a stop signal, stops this process."""

    def __init__(self, on_internal: OnInternal) -> None:
        self.on_internal = on_internal
        self._old_mask: set[int | signal.Signals] = set()
        self._thread: threading.Thread | None = None
        self._closing = False
        #: external signals received while `deferred` (writing the report): raised after
        self.deferred = False
        self.pending: signal.Signals | None = None
        #: the last signal from outside that interrupted the run
        self.last: signal.Signals | None = None

    def __enter__(self) -> SignalGuard:
        if not hasattr(signal, "sigwaitinfo"):  # pragma: no cover - not Linux
            return self
        self._old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, GUARDED)
        self._thread = threading.Thread(target=self._receive, name="cl_validate-signals",
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._thread is None:
            return
        self._closing = True
        signal.pthread_kill(self._thread.ident or 0, signal.SIGUSR1)  # wakes it to end
        self._thread.join(timeout=2)
        signal.pthread_sigmask(signal.SIG_SETMASK, self._old_mask)

    def _receive(self) -> None:
        me = os.getpid()
        while True:
            info = signal.sigwaitinfo(GUARDED)
            if self._closing:
                return
            signo = signal.Signals(info.si_signo)
            sender = info.si_pid
            chain = procs.ancestors(sender) if sender > 0 else []
            if sender not in (0, me) and me in chain[1:]:
                self.on_internal(signo, sender, chain[:chain.index(me)])
                continue
            if signo in _STOPS:
                os.kill(me, signal.SIGSTOP)  # stop as asked; SIGCONT resumes the run
                continue
            if self.deferred:
                self.pending = self.pending or signo
                continue
            self.last = signo
            _thread.interrupt_main(signo if signo in (signal.SIGINT, signal.SIGTERM)
                                   else signal.SIGTERM)
