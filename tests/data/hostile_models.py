"""Models that misbehave at run time: the report must survive each of them."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import time

import torch
from torch import nn


class Segfault(nn.Module):
    """Crashes the process in forward (as a buggy native extension would)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        print("about to crash", flush=True)
        ctypes.string_at(0)  # reads address 0: SIGSEGV
        return x


class Hang(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(3600)
        return x


class MemoryHog(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hog = torch.ones(1024, 1024, 1024, dtype=torch.float32)  # 4 GiB, touched
        time.sleep(30)
        return x + hog[0, 0, 0]


def segfault() -> nn.Module:
    return Segfault()


def hang() -> nn.Module:
    return Hang()


def memory_hog() -> nn.Module:
    return MemoryHog()


# --- faults of the isolation issue (#13): each must cost its case, never the run ------------
class _Forward(nn.Module):
    """A model whose forward() calls `fn` first (the faults below), then is a plain identity."""

    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn
        # 3x3: a pointwise convolution would read the NCHW input in place (one transform)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.fn()
        return self.conv(x)


def crash_in_factory() -> nn.Module:
    """The factory itself dies (a C extension crashing while the model is built)."""
    print("building the model", flush=True)
    ctypes.string_at(0)
    return Segfault()


def exits() -> nn.Module:
    return _Forward(lambda: sys.exit(3))


def hard_exit() -> nn.Module:
    def die() -> None:
        print("leaving without a word", flush=True)
        os._exit(7)

    return _Forward(die)


_GARBAGE = (b"\x00\x01\x02\x1b[31mred\x1b[0m \xff\xfe\xc3\x28 ]]> <![CDATA[ & <error/> \x7f\x0c"
            b"\n::error file=../evil.toml,line=1::injected annotation\n\xe2\x80\xae\n")


def garbage() -> nn.Module:
    """Writes binary junk, escape sequences, invalid UTF-8, XML breakers and a fake GitHub
    workflow command to stdout and stderr, and otherwise works."""

    def spew() -> None:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
            stream.buffer.write(_GARBAGE * 50)
            stream.flush()
        os.write(1, _GARBAGE)

    return _Forward(spew)


def garbage_then_crash() -> nn.Module:
    def spew_and_die() -> None:
        os.write(2, _GARBAGE * 3)
        ctypes.string_at(0)

    return _Forward(spew_and_die)


def flood() -> nn.Module:
    """Prints forever."""

    def spew() -> None:
        line = "x" * 1000 + "\n"
        while True:
            sys.stdout.write(line)

    return _Forward(spew)


def _sleeper(marker: str) -> list[str]:
    return [sys.executable, "-c", "import time; time.sleep(600)", marker]


def leaves_a_child() -> nn.Module:
    """Starts a process in a session of its own (a daemon) and never waits for it."""
    return _Forward(lambda: subprocess.Popen(_sleeper("cl-validate-test-orphan"),
                                             start_new_session=True))


def leaves_a_child_and_dies() -> nn.Module:
    """Starts a detached process, then kills its own interpreter: the child is orphaned."""

    def spawn_and_die() -> None:
        subprocess.Popen(_sleeper("cl-validate-test-orphan-of-a-dead-worker"),
                         start_new_session=True)
        os._exit(1)

    return _Forward(spawn_and_die)


def forking_hog() -> nn.Module:
    """The memory is eaten by a child process, not by the worker itself."""

    def fork_hog() -> None:
        subprocess.Popen([sys.executable, "-c",
                          "import time; b = bytearray(3 << 30); time.sleep(600)"])
        time.sleep(600)

    return _Forward(fork_hog)


#: Terminal control in text cl_validate prints: clear the screen, recolour, ring the bell,
#: reverse what follows (a bidi override), return to the line's start and overwrite it, and
#: a second line that starts with a GitHub workflow command.
ESCAPES = "\x1b[2J\x1b[31mred\x07 \u202eexe.txt\rOK\n::error file=x.toml::forged"


def raises_escapes() -> nn.Module:
    """The factory raises with `ESCAPES` in its message."""
    raise RuntimeError(ESCAPES)


class _Named(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.add_module("\x1b[31mconv\u202e", nn.Conv2d(3, 4, 1))  # any name but '' and '.'

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return getattr(self, "\x1b[31mconv\u202e")(x)


def escapes_in_module_names() -> nn.Module:
    """A submodule named with an escape sequence and a bidi override: kernel attributions
    name modules."""
    return _Named()


class _EvilKey(nn.Module):
    """A dict output whose key is `ESCAPES` (a workflow command on a line of its own) and
    whose values are NaN: its numerics fail, naming the output."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {ESCAPES: self.conv(x) * float("nan")}


def evil_output_key() -> nn.Module:
    return _EvilKey().eval()


class _ReturnsItsBuffer(nn.Module):
    """Writes each forward's result into a buffer of its own and returns the buffer (a
    cache, a running state): the output a caller keeps is overwritten by the next forward."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.register_buffer("state", torch.zeros(1, 4, 16, 16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.state.copy_(torch.relu(self.conv(x)))
        return self.state


def returns_its_buffer() -> nn.Module:
    return _ReturnsItsBuffer().eval()


class _Float8Out(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.conv(x)
        return y, y.to(torch.float8_e4m3fn)


def float8_output() -> nn.Module:
    """A float8 output (numpy has no float8): PyTorch's forward ran; reading it did not."""
    return _Float8Out().eval()


class _Deep(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)

    def forward(self, x: torch.Tensor) -> object:
        out: object = self.conv(x)
        for _ in range(3000):
            out = [out]
        return out


def deeply_nested_output() -> nn.Module:
    return _Deep().eval()


class _WideSelection(nn.Module):
    """An output of 6144 one-value items (its case declares it a selection): matching it
    weighs 6144² pairs, which the parent did for every seed."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x.flatten(1)] * 8, 1).unsqueeze(-1)


def wide_selection() -> nn.Module:
    return _WideSelection()
