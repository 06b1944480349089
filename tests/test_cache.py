"""The measurement cache (cl_validate/run/cache.py): what its key hashes, the weights digest,
the on-disk store, how the cache directory is chosen, and the CLI end to end — a warm run
answers from the cache without compiling and re-judges the case file as it is now. The key
needs the model's weights, so the worker computes it and reads the cache; the parent writes.

conftest sets CL_VALIDATE_NO_CACHE=1, so every CLI run here passes --cache-dir explicitly.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import pickle
import re
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import torch
from junitparser import JUnitXml
from torch import nn

from cl_validate.cli import main
from cl_validate.compile.factory import weights_digest
from cl_validate.errors import ExitCode
from cl_validate.measurements import cache as cache_mod
from cl_validate.measurements import sources
from cl_validate.measurements.cache import Cache, cacheable, key
from cl_validate.measurements.measurement import Measurement, Sample
from cl_validate.session.case_session import CaseSession
from cl_validate.spec import CaseSpec, load_case
from cl_validate.spec import options as cache_options
from cl_validate.spec.options import RunOptions, resolve_dir
from cl_validate.spec.placement import RpcSettings

REPO = Path(__file__).resolve().parents[1]
TARGETS = 'targets = ["llvm"]\n'

BASE = """\
model = "tiny_models:conv_relu"
targets = ["llvm"]

[[inputs]]
name = "x"
shape = [1, 3, 8, 8]
dtype = "float32"

[layout]
"relax.nn.conv2d" = ["NHWC", "OHWI"]

[budget]
layout_transforms = 2

[tolerance]
rtol = 1e-5
atol = 1e-5
"""


def _edit(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


def _load(directory: Path, text: str, name: str = "case.toml") -> CaseSpec:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return load_case(path)


def _key(case: CaseSpec, target: str = "llvm", weights: str = "w0", numerics: bool = True,
         target_desc: str = "llvm", static_only: bool = False) -> str:
    return key(case, target, weights, numerics, target_desc, static_only)


@pytest.fixture
def tiny_imported(write_case) -> None:
    """tests/data on sys.path (write_case does that) and tiny_models imported, as the worker
    has it when it computes keys (the model's source is hashed from sys.modules)."""
    importlib.import_module("tiny_models")


@pytest.fixture
def src_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An importable folder for throwaway model/pipeline modules named ckm_*."""
    d = tmp_path / "src"
    d.mkdir()
    monkeypatch.syspath_prepend(str(d))
    yield d
    for name in [n for n in sys.modules if n.startswith("ckm_")]:
        del sys.modules[name]


# --------------------------------------------------------------------------------------------
# key(): everything that can change a measurement is in it; budgets and tolerances are not
# --------------------------------------------------------------------------------------------
KEY_EDITS = {
    "model": ('"tiny_models:conv_relu"', '"tiny_models:classifier"'),
    "input shape": ("[1, 3, 8, 8]", "[1, 3, 8, 16]"),
    "input dtype": ('dtype = "float32"', 'dtype = "float16"'),
    "input layout": ('dtype = "float32"\n', 'dtype = "float32"\nlayout = "NHWC"\n'),
    "input range": ('dtype = "float32"\n', 'dtype = "float32"\nrange = [0.0, 1.0]\n'),
    "input name": ('name = "x"', 'name = "image"'),
    "[layout] layouts": ('["NHWC", "OHWI"]', '["NHWC", "HWIO"]'),
    "[layout] op added": ('"relax.nn.conv2d"', '"relax.nn.max_pool2d" = ["NHWC"]\n'
                          '"relax.nn.conv2d"'),
    "[layout_overrides]": ("[budget]", '[layout_overrides]\n"conv1" = ["NCHW", "OIHW"]\n\n'
                           "[budget]"),
    "output layout": ("atol = 1e-5\n", 'atol = 1e-5\n\n[[outputs]]\nlayout = "NHWC"\n'),
    "pipeline": (TARGETS, TARGETS + 'pipeline = "nhwc-plain"\n'),
    "seed": (TARGETS, TARGETS + "seed = 1\n"),
    # keys a later issue added, which the key's allow-list forgot (#43.2): a restored cache
    # answered a case that turned integer compute off, or its calibration on, with a PASS
    "integer_compute": (TARGETS, TARGETS + "integer_compute = false\n"),
    "weights": (TARGETS, TARGETS + 'weights = "calibrated"\n'),
    "seeds": (TARGETS, TARGETS + "seeds = 2\n"),
}

JUDGE_ONLY_EDITS = {
    "[budget]": ("layout_transforms = 2", 'layout_transforms = 0\nkernels = 3\nreason = "r"'),
    "[tolerance]": ("rtol = 1e-5\natol = 1e-5", "rtol = 0.5\natol = 0.0"),
    "[targets_override]": ("atol = 1e-5\n", "atol = 1e-5\n\n[targets_override.llvm]\n"
                           "budget = { layout_transforms = 9, kernels = 7 }\n"
                           "tolerance = { atol = 0.1 }\n"),
    "name, description, limits": (TARGETS, TARGETS + 'name = "renamed"\ndescription = "d"\n'
                                  "timeout = 5\nmax_memory_mb = 512\n"),
    "more targets": (TARGETS, 'targets = ["llvm", "cuda"]\n'),
    "comments": ("[budget]\n", "[budget]  # why: the NCHW boundaries\n# more words\n"),
}


@pytest.mark.parametrize("what", list(KEY_EDITS))
def test_key_changes_with_every_measurement_input(what, tmp_path, tiny_imported):
    base = _load(tmp_path, BASE, "a.toml")
    edited = _load(tmp_path, _edit(BASE, *KEY_EDITS[what]), "b.toml")
    assert _key(base) == _key(_load(tmp_path, BASE, "again.toml"))  # stable
    assert _key(edited) != _key(base)


@pytest.mark.parametrize("what", list(KEY_EDITS))
def test_the_parents_direct_key_changes_with_every_measurement_input(what, tmp_path):
    """The key the parent looks a case up by, before any of the model's code runs."""
    from cl_validate.measurements.cache import direct_key
    from cl_validate.spec.options import RunOptions

    base = _load(tmp_path, BASE, "a.toml")
    edited = _load(tmp_path, _edit(BASE, *KEY_EDITS[what]), "b.toml")
    options = RunOptions()
    assert direct_key(base, "llvm", options) == direct_key(
        _load(tmp_path, BASE, "again.toml"), "llvm", options)
    assert direct_key(edited, "llvm", options) != direct_key(base, "llvm", options)


def test_every_case_field_is_in_the_key_or_declared_judged(tmp_path):
    """The key is the whole parsed case but what is declared judged: a field a later change
    adds to the case file is measured-on unless someone says otherwise."""
    import dataclasses

    from cl_validate.measurements.cache import JUDGED, _case_parts

    case = _load(tmp_path, BASE)
    fields = {f.name for f in dataclasses.fields(case)}
    assert JUDGED <= fields  # no stale names
    assert set(_case_parts(case)) == (fields - JUDGED) | {"format"}


@pytest.mark.parametrize("what", list(JUDGE_ONLY_EDITS))
def test_key_ignores_what_is_judged_not_measured(what, tmp_path, tiny_imported):
    base = _load(tmp_path, BASE, "a.toml")
    edited = _load(tmp_path, _edit(BASE, *JUDGE_ONLY_EDITS[what]), "b.toml")
    # The edit really reached the spec (else the test would prove nothing) ...
    assert (edited.budget, edited.tolerance, edited.overrides, edited.name, edited.targets,
            edited.lines) != (base.budget, base.tolerance, base.overrides, base.name,
                              base.targets, base.lines)
    # ... and the measurement it would be judged from is the same one.
    assert _key(edited) == _key(base)


@pytest.mark.parametrize(("arg", "value"), [
    ("target", "cuda"),
    ("weights", "w1"),
    ("numerics", False),
    ("target_desc", "cuda -keys=cuda,gpu -arch=sm_90"),
    ("static_only", True),
])
def test_key_changes_with_target_weights_and_run_mode(arg, value, tmp_path, tiny_imported):
    case = _load(tmp_path, BASE)
    assert _key(case, **{arg: value}) != _key(case)


def target_description(case, target, options):
    plan = CaseSession(case, options).plan(target)
    return plan.numerics, plan.describe()


def test_target_description_feeds_the_numerics_flag(tmp_path):
    case = _load(tmp_path, BASE)
    numerics, desc = target_description(case, "llvm", RunOptions())
    assert numerics and '"kind":"llvm"' in desc and desc.endswith(" on local")
    assert target_description(case, "llvm", RunOptions(static_only=True)) == (False, desc)
    # Run through a tracker, the same target is another measurement: where is in the key.
    remote = RunOptions(rpc=RpcSettings(("127.0.0.1", 9190), keys=(("llvm", "farm"),)))
    assert target_description(case, "llvm", remote) == (True, desc[:-len("local")] +
                                                           "rpc:farm")
    # Without a tracker a target with a key of its own cannot run anywhere: no numerics.
    lost = RunOptions(rpc=RpcSettings(None, keys=(("llvm", "farm"),)))
    assert target_description(case, "llvm", lost) == (False, desc[:-len("local")] + "none")


def test_key_is_the_same_in_another_process(tmp_path, src_dir):
    """CI jobs share a cache: the key must not depend on the process (hash seeds, ids)."""
    (src_dir / "ckm_proc.py").write_text("def f():\n    return None\n")
    text = _edit(BASE, '"tiny_models:conv_relu"', '"ckm_proc:f"')
    text = _edit(text, "[budget]", '[layout_overrides]\n"a.b" = ["NCHW", "OIHW"]\n'
                 '"c" = ["NCHW", "OIHW"]\n\n[budget]')
    case = _load(tmp_path, text)
    importlib.import_module("ckm_proc")
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(src_dir)!r})
        import ckm_proc
        from cl_validate.measurements.cache import key
        from cl_validate.spec import load_case
        print(key(load_case({str(case.path)!r}), "llvm", "w0", True, "llvm", False))
    """)
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=env, check=True).stdout.strip()
    assert out == _key(case)


def _model_case(tmp_path: Path, model: str, pipeline: str | None = None) -> CaseSpec:
    text = _edit(BASE, '"tiny_models:conv_relu"', f'"{model}"')
    if pipeline:
        text = _edit(text, TARGETS, TARGETS + f'pipeline = "{pipeline}"\n')
    return _load(tmp_path, text)


def test_key_follows_the_model_modules_source(tmp_path, src_dir):
    mod = src_dir / "ckm_single.py"
    mod.write_text("def f():\n    return 1\n")
    importlib.import_module("ckm_single")
    case = _model_case(tmp_path, "ckm_single:f")
    before = _key(case)
    assert before == _key(case)
    mod.write_text("def f():\n    return 2\n")
    assert _key(case) != before


def test_key_follows_every_file_of_the_model_package(tmp_path, src_dir):
    pkg = src_dir / "ckm_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "blocks.py").write_text("ACT = 'relu'\n")
    (pkg / "net.py").write_text("from ckm_pkg.blocks import ACT\n\ndef f():\n    return ACT\n")
    importlib.import_module("ckm_pkg.net")
    case = _model_case(tmp_path, "ckm_pkg.net:f")
    before = _key(case)
    (pkg / "__pycache__").mkdir(exist_ok=True)
    (pkg / "__pycache__" / "stray.py").write_text("x = 1\n")
    assert _key(case) == before  # bytecode caches are not the model's source
    (pkg / "blocks.py").write_text("ACT = 'gelu'\n")  # a helper, not the factory's module
    assert _key(case) != before


def test_key_follows_a_user_pipelines_source(tmp_path, src_dir):
    mod = src_dir / "ckm_pipe.py"
    mod.write_text("def custom(mod, case, target):\n    return mod\n")
    importlib.import_module("ckm_pipe")
    (src_dir / "ckm_model.py").write_text("def f():\n    return None\n")
    importlib.import_module("ckm_model")
    case = _model_case(tmp_path, "ckm_model:f", pipeline="ckm_pipe:custom")
    before = _key(case)
    mod.write_text("def custom(mod, case, target):\n    return mod  # changed\n")
    assert _key(case) != before


def test_key_follows_a_model_in_a_namespace_package(tmp_path, src_dir):
    ns = src_dir / "ckm_ns"
    ns.mkdir()  # no __init__.py: a namespace package, valid since Python 3.3
    (ns / "net.py").write_text("def f():\n    return 'relu'\n")
    importlib.import_module("ckm_ns.net")
    case = _model_case(tmp_path, "ckm_ns.net:f")
    before = _key(case)
    (ns / "net.py").write_text("def f():\n    return 'gelu'\n")
    assert _key(case) != before


def test_key_follows_a_helper_module_next_to_a_flat_model(tmp_path, src_dir):
    (src_dir / "ckm_flat_blocks.py").write_text("ACT = 'relu'\n")
    (src_dir / "ckm_flat_net.py").write_text(
        "from ckm_flat_blocks import ACT\n\ndef f():\n    return ACT\n")
    importlib.import_module("ckm_flat_net")
    case = _model_case(tmp_path, "ckm_flat_net:f")
    before = _key(case)
    (src_dir / "ckm_flat_blocks.py").write_text("ACT = 'gelu'\n")
    assert _key(case) != before


def test_cl_validates_own_source_is_the_package_tree_and_in_the_key(tmp_path, tiny_imported,
                                                                    monkeypatch):
    pkg = Path(cache_mod.__file__).resolve().parent.parent
    copy = tmp_path / "cl_validate"
    shutil.copytree(pkg, copy)
    # own_source() (uncached) is exactly the hash of the package's .py tree ...
    assert sources.own_source.__wrapped__() == sources.package_source(copy)
    h0 = sources.package_source(copy)
    (copy / "compile" / "passes" / "__pycache__").mkdir(exist_ok=True)
    (copy / "compile" / "passes" / "__pycache__" / "stray.py").write_text("x = 1\n")
    assert sources.package_source(copy) == h0
    # ... but for the version setuptools-scm writes, which names the commit between tags ...
    (copy / "_version.py").write_text("__version__ = version = '0.2.1.dev7+g0123abc'\n")
    assert sources.package_source(copy) == h0
    # ... so a one-byte edit deep in it (here a pass) changes it ...
    nested = copy / "compile" / "passes" / "_util.py"
    nested.write_bytes(nested.read_bytes() + b"\n")
    assert sources.package_source(copy) != h0
    # ... and whatever own_source() says is part of every key.
    case = _load(tmp_path, BASE)
    before = _key(case)
    monkeypatch.setattr(cache_mod, "own_source", lambda: "cl_validate edited")
    assert _key(case) != before


def test_tool_versions_are_found_and_in_the_key(tmp_path, tiny_imported, monkeypatch):
    import numpy
    import tvm

    v = sources.versions()
    # Not "absent": a wrong distribution name would silently drop TVM upgrades from the key.
    assert v["apache-tvm"] == tvm.__version__
    assert v["torch"] == torch.__version__
    assert v["numpy"] == numpy.__version__
    assert v["python"] == ".".join(map(str, sys.version_info[:3]))
    case = _load(tmp_path, BASE)
    before = _key(case)
    monkeypatch.setattr(cache_mod, "versions", lambda: {**v, "apache-tvm": "0.28.0"})
    assert _key(case) != before


# --------------------------------------------------------------------------------------------
# weights_digest
# --------------------------------------------------------------------------------------------
def test_weights_digest_is_reproducible_from_the_seed_and_sees_one_ulp(tmp_path, tiny_imported):
    from cl_validate.compile.factory import build_model

    case = _load(tmp_path, BASE)
    a, b = build_model(case), build_model(case)
    assert a is not b and weights_digest(a) == weights_digest(b)
    assert re.fullmatch(r"[0-9a-f]{64}", weights_digest(a))
    assert weights_digest(build_model(_load(tmp_path, _edit(BASE, TARGETS, TARGETS + "seed = 1\n"),
                                            "seed1.toml"))) != weights_digest(a)
    with torch.no_grad():  # the smallest possible change to one weight
        w = b.conv2.weight
        w[0, 0, 0, 0] = torch.nextafter(w[0, 0, 0, 0], torch.tensor(1.0))
    assert weights_digest(b) != weights_digest(a)


def test_weights_digest_covers_buffers_and_dtypes():
    torch.manual_seed(0)
    a = nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4)).eval()
    torch.manual_seed(0)
    b = nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4)).eval()
    assert weights_digest(a) == weights_digest(b)
    b[1].running_mean.add_(0.5)  # persistent buffer: changes eval() outputs
    assert weights_digest(b) != weights_digest(a)
    # The same bytes read as another dtype are other weights.
    as_float, as_int = nn.Module(), nn.Module()
    as_float.register_buffer("t", torch.arange(4, dtype=torch.float32))
    as_int.register_buffer("t", torch.arange(4, dtype=torch.float32).view(torch.int32))
    assert weights_digest(as_float) != weights_digest(as_int)


class _Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)
        # Not saved in the state dict, but exported as a constant and used by forward().
        self.register_buffer("scale", torch.ones(4, 1, 1), persistent=False)

    def forward(self, x):
        return self.conv(x) * self.scale


def test_weights_digest_covers_non_persistent_buffers():
    torch.manual_seed(0)
    a = _Scaled()
    torch.manual_seed(0)
    b = _Scaled()
    b.scale.fill_(2.0)
    assert not torch.equal(a(torch.ones(1, 3, 2, 2)), b(torch.ones(1, 3, 2, 2)))
    assert weights_digest(b) != weights_digest(a)


class _WithExtraState(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)

    def get_extra_state(self):
        return {"version": 2}

    def set_extra_state(self, state) -> None:
        pass

    def forward(self, x):
        return self.conv(x)


def test_weights_digest_accepts_modules_with_extra_state():
    torch.manual_seed(0)
    a = _WithExtraState()
    assert re.fullmatch(r"[0-9a-f]{64}", weights_digest(a))

    class Newer(_WithExtraState):
        def get_extra_state(self):
            return {"version": 3}

    torch.manual_seed(0)
    assert weights_digest(Newer()) != weights_digest(a)  # same tensors, other extra state


# --------------------------------------------------------------------------------------------
# Cache: get/put, corrupt entries, atomic writes
# --------------------------------------------------------------------------------------------
K = "ab" + "0" * 62


def _measurement(fill: float = 1.0, n: int = 16) -> Measurement:
    return Measurement("llvm", samples=[Sample("", [np.full(n, fill, np.float32)],
                                               [np.full(n, fill, np.float32)])],
                       numerics_skip=None, compile_seconds=fill, seconds=fill + 1)


def test_put_then_get_round_trips(tmp_path):
    c = Cache(tmp_path / "c")
    assert c.get(K) is None
    m = _measurement(3.0)
    c.put(K, m)
    got = Cache(tmp_path / "c").get(K)  # a fresh instance: it is on disk, not in memory
    assert got is not None and got is not m
    assert (got.target, got.error, got.numerics_error, got.compile_seconds, got.seconds) == (
        "llvm", None, None, 3.0, 4.0)
    np.testing.assert_array_equal(got.samples[0].actual[0], m.samples[0].actual[0])
    assert c.get(K) is not None
    assert sorted(p.name for p in (tmp_path / "c").rglob("*") if p.is_file()) == [f"{K}.m"]
    assert c.get("cd" + "0" * 62) is None


def test_a_read_marks_the_entry_used_so_ci_can_prune_the_rest(tmp_path):
    """The workflow deletes entries not newer than the run's start before saving the cache;
    a hit must count as use, or an unchanged case would be pruned and miss next time."""
    c = Cache(tmp_path)
    c.put(K, _measurement())
    entry = c._path(K)
    os.utime(entry, (1_000_000_000, 1_000_000_000))  # written long ago
    marker = tmp_path / "run-start"
    marker.write_text("")
    assert c.get(K) is not None
    assert entry.stat().st_mtime >= marker.stat().st_mtime
    os.chmod(entry, 0o444)
    os.chmod(tmp_path / K[:2], 0o555)  # a read-only cache still answers
    try:
        assert Cache(tmp_path).get(K) is not None
    finally:
        os.chmod(tmp_path / K[:2], 0o755)


def test_entries_get_the_umask_mode_not_mkstemps_0600(tmp_path):
    """Several users (a CI image, a workstation) may share a cache folder."""
    import os

    mask = os.umask(0o022)
    os.umask(mask)
    c = Cache(tmp_path / "c")
    c.put(K, _measurement())
    entry = c._path(K)
    assert entry.stat().st_mode & 0o777 == 0o666 & ~mask, oct(entry.stat().st_mode)


class _Planted:
    """A pickle that runs code when it is loaded: what a poisoned cache would hold."""

    def __reduce__(self):
        return (os.system, ("touch cl_validate_was_fooled",))


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "a pickle", "a folder"])
def test_a_corrupt_entry_is_a_miss_not_an_exception(tmp_path, damage, monkeypatch):
    c = Cache(tmp_path)
    c.put(K, _measurement(n=1000))
    path = tmp_path / K[:2] / f"{K}.m"
    good = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(good[: len(good) // 2])
    elif damage == "garbage":
        path.write_bytes(os.urandom(64))
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "a pickle":  # never unpickled: reading the cache runs nothing
        monkeypatch.chdir(tmp_path)
        path.write_bytes(pickle.dumps(_Planted()))
    else:
        path.unlink()
        path.mkdir()
    assert c.get(K) is None
    assert not (tmp_path / "cl_validate_was_fooled").exists()
    if damage != "a folder":  # the next put repairs it
        c.put(K, _measurement(2.0))
        got = c.get(K)
        assert got is not None and got.compile_seconds == 2.0


def test_a_failed_put_leaves_neither_entry_nor_temporary_file(tmp_path):
    c = Cache(tmp_path)
    bad = Measurement("llvm", samples=[Sample("", [lambda: 0], [])])  # cannot be encoded
    with pytest.raises(TypeError):
        c.put(K, bad)
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []
    assert c.get(K) is None
    c.put(K, _measurement())  # an earlier entry survives a failed overwrite
    with pytest.raises(TypeError):
        c.put(K, bad)
    assert c.get(K) is not None
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == [f"{K}.m"]


_WRITER = """
import sys
import numpy as np
from cl_validate.measurements.cache import Cache
from cl_validate.measurements.measurement import Measurement, Sample
root, k, wid = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = Cache(root)
for i in range(40):
    v = float(wid * 100 + i)
    c.put(k, Measurement("llvm", samples=[Sample("", [np.full(500_000, v, np.float32)], [])],
                         compile_seconds=v))
"""


def test_concurrent_puts_of_one_key_never_expose_a_partial_entry(tmp_path):
    """Several processes (CI jobs, workers) write the same 1 MB entry while this one reads."""
    root = tmp_path / "shared"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(root), K, str(w)], env=env)
             for w in range(4)]
    path = root / K[:2] / f"{K}.m"
    reader = Cache(root)
    complete = 0
    try:
        while any(p.poll() is None for p in procs):
            if not path.exists():
                continue
            m = reader.get(K)  # once the entry exists, every read is a whole measurement
            assert m is not None, "a reader saw a partially written entry"
            actual = m.samples[0].actual[0]
            assert actual.shape == (500_000,)
            assert (actual == m.compile_seconds).all(), "bytes of two writers mixed"
            complete += 1
    finally:
        for p in procs:
            p.wait(timeout=60)
    assert [p.returncode for p in procs] == [0, 0, 0, 0]
    assert complete > 0
    final = Cache(root).get(K)
    assert final is not None and final.compile_seconds % 100 == 39  # some writer's last put
    assert [p.name for p in root.rglob("*") if p.is_file()] == [f"{K}.m"]  # no temp files


def test_only_clean_measurements_are_cacheable():
    assert cacheable(Measurement("llvm"))
    # A numerics skip is a fact of the (keyed) run mode, not an accident: cacheable.
    assert cacheable(Measurement("cuda", numerics_skip=("no cuda device", "DeviceUnavailable")))
    assert not cacheable(Measurement("llvm", error=("boom", "CompileError", "detail", 3)))
    assert not cacheable(Measurement("llvm", error=("timeout", "Timeout", "", None)))
    assert not cacheable(Measurement("llvm", numerics_error=("running failed", "Traceback")))


# --------------------------------------------------------------------------------------------
# Which directory: --no-cache, --cache-dir, CL_VALIDATE_NO_CACHE
# --------------------------------------------------------------------------------------------
def test_resolve_dir(monkeypatch):
    monkeypatch.setenv("CL_VALIDATE_NO_CACHE", "1")
    assert resolve_dir("d", no_cache=True) is None  # --no-cache wins over everything
    assert resolve_dir("d", no_cache=False) == "d"  # an explicit dir wins over the env
    assert resolve_dir(None, no_cache=False) is None  # the env turns the default off
    for off in ("", "0"):
        monkeypatch.setenv("CL_VALIDATE_NO_CACHE", off)
        assert resolve_dir(None, no_cache=False) == cache_options.DEFAULT_DIR
    monkeypatch.delenv("CL_VALIDATE_NO_CACHE")
    assert resolve_dir(None, no_cache=False) == ".cl_validate_cache"
    assert resolve_dir(None, no_cache=True) is None
    assert resolve_dir("d", no_cache=False) == "d"


@pytest.mark.parametrize(("argv", "env", "expected"), [
    (["--cache-dir", "D", "--no-cache"], None, None),
    (["--cache-dir", "D"], "1", "D"),
    ([], "1", None),
    ([], None, ".cl_validate_cache"),
    (["--no-cache"], None, None),
])
def test_cli_flags_and_env_reach_run_options(argv, env, expected, monkeypatch, tmp_path):
    from cl_validate.cli.main import _parser
    from cl_validate.spec.options import run_options

    monkeypatch.chdir(tmp_path)  # no pyproject.toml settings from the repository
    if env is None:
        monkeypatch.delenv("CL_VALIDATE_NO_CACHE", raising=False)
    else:
        monkeypatch.setenv("CL_VALIDATE_NO_CACHE", env)
    args = _parser().parse_args(["run", *argv])
    assert run_options(vars(args).get).cache_dir == expected


# --------------------------------------------------------------------------------------------
# End to end through the CLI: a tiny two-conv model on a 1x3x8x8 input, llvm only, -j 1
# --------------------------------------------------------------------------------------------
E2E_MODEL = "cache_e2e_net"
MODEL_SRC = '''\
from pathlib import Path

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        return self.conv2(torch.relu(self.conv1(x)))


def net():
    model = Net()
    # Stands for a checkpoint: a number next to this file, loaded into the model's weights.
    with torch.no_grad():
        model.conv2.bias.fill_(float((Path(__file__).parent / "bias.txt").read_text()))
    return model
'''
E2E_CASE = f"""\
model = "{E2E_MODEL}:net"
targets = ["llvm", "cuda"]    # runs below select llvm, except the partial-hit test

[[inputs]]
name = "x"
shape = [1, 3, 8, 8]

[layout]
"relax.nn.conv2d" = ["NHWC", "OHWI"]

[budget]
layout_transforms = 2   # NCHW input and output boundaries

[tolerance]
rtol = 1e-4
atol = 1e-4
"""
REUSED = re.compile(r"cache: (\d+) of (\d+) case x target measurements reused from (\S+)")
LLVM = ["--target", "llvm", "-j", "1"]


@dataclass
class Run:
    code: int
    out: str
    err: str
    seconds: float
    compiled: list[str] = field(default_factory=list)  # targets compiled in this process

    @property
    def reused(self) -> tuple[int, int] | None:
        m = REUSED.search(self.out)
        return (int(m.group(1)), int(m.group(2))) if m else None

    @property
    def measured(self) -> bool:
        """Something was compiled: in this process (--no-isolation), or in a worker (every
        target the cache did not answer; the parent writes each new measurement)."""
        runs = re.search(r"\((\d+) case x target runs\)", self.out)
        return bool(self.compiled) or not (runs and self.reused and
                                           self.reused[0] == int(runs.group(1)))


def _cli(workdir: Path, *argv: str) -> Run:
    """`cl-validate run ...` in this process, from `workdir`, recording what got compiled here
    (with --no-isolation)."""
    from cl_validate.session import case_session as measure

    compiled: list[str] = []
    compile_case = measure.compile_case

    def spy_compile(front, case, target, *a, **kw):
        compiled.append(target)
        return compile_case(front, case, target, *a, **kw)

    sys.modules.pop(E2E_MODEL, None)  # import this workdir's copy, as a fresh CLI would
    importlib.invalidate_caches()
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(workdir)
        mp.setattr(sys, "path", list(sys.path))
        mp.setattr(measure, "compile_case", spy_compile)
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["run", "case.toml", *argv])
        seconds = time.perf_counter() - t0
    sys.modules.pop(E2E_MODEL, None)
    return Run(code, out.getvalue(), err.getvalue(), seconds, compiled)


def _entries(cache_dir: Path) -> dict[str, bytes]:
    """Each entry's content (a read refreshes an entry's time, so times say nothing)."""
    return {p.name: p.read_bytes() for p in cache_dir.rglob("*.m")}


def _verdicts(junit: Path) -> dict[tuple[str, str, str], list[str]]:
    out = {}
    for suite in JUnitXml.fromfile(str(junit)):
        for tc in suite:
            out[(suite.name, tc.classname, tc.name)] = sorted(
                f"{type(r).__name__}:{r.message}" for r in tc.result)
    return out


@pytest.fixture(scope="module")
def cold(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Run]:
    """One cold run (worker process, real compile) that fills a cache; tests copy it."""
    root = tmp_path_factory.mktemp("cold")
    (root / f"{E2E_MODEL}.py").write_text(MODEL_SRC)
    (root / "bias.txt").write_text("0.0\n")
    (root / "case.toml").write_text(E2E_CASE)
    run = _cli(root, *LLVM, "--cache-dir", "D", "--junit", "cold.xml")
    return root, run


@pytest.fixture
def warm(cold, tmp_path: Path) -> Path:
    """This test's own copy of the case, the model and the filled cache."""
    root, _ = cold
    work = tmp_path / "work"
    shutil.copytree(root, work, ignore=shutil.ignore_patterns("__pycache__"))
    return work


@pytest.mark.compile
def test_cold_run_measures_in_a_worker_and_fills_the_cache(cold):
    root, run = cold
    assert run.code == ExitCode.OK, run.out + run.err
    assert run.measured and not run.compiled  # measured, in a worker process
    assert "[1/1] PASS  case  llvm" in run.out
    assert run.reused is None  # nothing was there to reuse
    assert len(_entries(root / "D")) == 1


@pytest.mark.compile
def test_warm_run_reuses_the_measurement_with_the_same_verdicts(cold, warm):
    _, first = cold
    before = _entries(warm / "D")
    run = _cli(warm, *LLVM, "--cache-dir", "D", "--junit", "warm.xml")
    assert run.code == ExitCode.OK, run.out + run.err
    assert run.reused == (1, 1)
    assert REUSED.search(run.out).group(3) == "D"
    assert not run.measured  # no worker job, no compile
    assert _entries(warm / "D") == before  # nothing rewritten
    assert _verdicts(warm / "warm.xml") == _verdicts(warm / "cold.xml")
    def progress(out: str) -> list[str]:  # the verdicts, not the time each run took
        return [ln.rsplit("  ", 1)[0] for ln in out.splitlines() if ln.startswith("[1/1]")]

    assert progress(run.out) == progress(first.out)


@pytest.mark.compile
def test_budget_and_tolerance_edits_are_rejudged_from_the_cache(warm):
    case = warm / "case.toml"
    text = case.read_text()
    case.write_text(_edit(text, "layout_transforms = 2", "layout_transforms = 1"))
    run = _cli(warm, *LLVM, "--cache-dir", "D", "--junit", "r.xml")
    assert run.code == ExitCode.CHECK_FAILED, run.out + run.err
    assert run.reused == (1, 1) and not run.measured
    assert "FAILED case [llvm] layout_transforms: layout_transforms 2 > budget 1" in run.out
    failure = _verdicts(warm / "r.xml")[("cl_validate.llvm", "case", "layout_transforms[llvm]")]
    assert failure[0].startswith("Failure:layout_transforms 2 > budget 1")

    # Tolerance zero: the cached outputs differ from PyTorch by rounding, which now fails. A
    # failure says which stage broke the numerics, so the cached measurement (which has no
    # bisection) is measured again, once: the next run with that tolerance reuses it.
    case.write_text(_edit(text, "rtol = 1e-4\natol = 1e-4", "rtol = 0.0\natol = 0.0"))
    run = _cli(warm, *LLVM, "--cache-dir", "D")
    assert run.code == ExitCode.CHECK_FAILED, run.out + run.err
    assert run.measured and "numerics=FAIL" in run.out
    assert "first break after `import`" in run.out  # TVM's own rounding, from the start
    again = _cli(warm, *LLVM, "--cache-dir", "D")
    assert again.reused == (1, 1) and not again.measured

    def failures(out: str) -> list[str]:
        return [ln for ln in out.splitlines() if ln.startswith("FAILED")]

    assert failures(again.out) == failures(run.out)

    case.write_text(text)  # and back: passes again, without compiling
    run = _cli(warm, *LLVM, "--cache-dir", "D")
    assert run.code == ExitCode.OK and run.reused == (1, 1) and not run.measured
    assert len(_entries(warm / "D")) == 1


@pytest.mark.compile
def test_editing_the_input_shape_misses(warm):
    case = warm / "case.toml"
    case.write_text(_edit(case.read_text(), "[1, 3, 8, 8]", "[1, 3, 8, 6]"))
    run = _cli(warm, *LLVM, "--cache-dir", "D")
    assert run.code == ExitCode.OK, run.out + run.err
    assert run.measured and run.reused is None
    assert len(_entries(warm / "D")) == 2  # the new measurement is stored next to the old


@pytest.mark.compile
def test_editing_the_model_source_misses_and_stores_in_process_too(warm):
    (warm / f"{E2E_MODEL}.py").write_text(MODEL_SRC + "# retuned\n")
    run = _cli(warm, *LLVM, "--no-isolation", "--cache-dir", "D")
    assert run.code == ExitCode.OK, run.out + run.err
    assert run.compiled == ["llvm"] and run.reused is None
    assert len(_entries(warm / "D")) == 2
    again = _cli(warm, *LLVM, "--no-isolation", "--cache-dir", "D")
    assert again.code == ExitCode.OK and again.reused == (1, 1) and not again.measured


@pytest.mark.compile
def test_editing_only_the_weights_misses(warm):
    """Same code, same case file, other weights (as after a new checkpoint): the digest the
    worker computes is in the key."""
    (warm / "bias.txt").write_text("0.25\n")
    run = _cli(warm, *LLVM, "--no-isolation", "--cache-dir", "D")
    assert run.code == ExitCode.OK, run.out + run.err
    assert run.compiled == ["llvm"] and run.reused is None
    assert len(_entries(warm / "D")) == 2


@pytest.mark.compile
def test_no_cache_neither_reads_nor_writes(warm):
    before = _entries(warm / "D")
    run = _cli(warm, *LLVM, "--no-isolation", "--cache-dir", "D", "--no-cache")
    assert run.code == ExitCode.OK and run.reused is None and run.compiled == ["llvm"]
    assert _entries(warm / "D") == before


@pytest.mark.compile
def test_error_measurements_are_not_cached(write_case, tmp_path):
    """A case that errors while measuring (here: its pipeline raises) is measured again on
    the next run, never answered from the cache."""
    (tmp_path / "ckm_broken_pipe.py").write_text(
        "def broken(ctx):\n    raise RuntimeError('no stages today')\n")
    write_case(BASE.replace('targets = ["llvm"]',
                            'targets = ["llvm"]\npipeline = "ckm_broken_pipe:broken"'))
    for _ in range(2):
        run = _cli(tmp_path, *LLVM, "--no-isolation", "--cache-dir", "D")
        assert run.code == ExitCode.CHECK_FAILED, run.out + run.err
        assert "pipeline setup failed: RuntimeError: no stages today" in run.out
        assert run.reused is None
        assert _entries(tmp_path / "D") == {}


@pytest.mark.compile
def test_declared_outputs_are_judged_against_the_cached_measurement(write_case, tmp_path):
    """How many [[outputs]] a case declares is a verdict on the measurement, not part of it:
    too many is an error; fixing it, or adding an [[outputs]] table that only sets a
    tolerance, is answered from the cache."""
    write_case(BASE + "\n[[outputs]]\n\n[[outputs]]\n")
    run = _cli(tmp_path, *LLVM, "--no-isolation", "--cache-dir", "D")
    assert run.code == ExitCode.CHECK_FAILED, run.out + run.err
    assert "case declares 2 [[outputs]] but the model returns 1" in run.out
    assert run.compiled == ["llvm"] and len(_entries(tmp_path / "D")) == 1

    write_case(BASE + "\n[[outputs]]\n[outputs.tolerance]\nrtol = 1e-4\natol = 1e-4\n")
    run = _cli(tmp_path, *LLVM, "--no-isolation", "--cache-dir", "D")
    assert run.code == ExitCode.OK, run.out + run.err
    assert run.compiled == [] and run.reused == (1, 1)


@pytest.mark.compile
def test_reused_count_matches_what_was_not_recompiled(warm):
    run = _cli(warm, "-j", "1", "--no-isolation", "--cache-dir", "D")  # llvm and cuda
    assert run.code == ExitCode.OK, run.out + run.err
    reused = run.reused[0] if run.reused else 0
    assert reused + len(run.compiled) == 2, (run.reused, run.compiled)


@pytest.mark.compile
def test_an_unwritable_cache_never_drops_a_case(warm):
    (warm / "blocker").write_text("a file where the cache folder should be\n")
    run = _cli(warm, *LLVM, "--cache-dir", "blocker/cache")
    assert run.code == ExitCode.OK, (run.code, run.out, run.err)
    assert "(1 case x target runs)" in run.out and "[1/1] PASS  case  llvm" in run.out
    # Said once, in one line, with what to check.
    warnings = [ln for ln in run.err.splitlines() if "cannot write the cache" in ln]
    assert len(warnings) == 1 and "blocker/cache" in warnings[0], run.err
    assert "hint: check --cache-dir" in warnings[0]


def test_what_is_planted_in_the_cache_is_a_miss_never_a_hang(tmp_path):
    """A FIFO, a link to a device, a file of gigabytes where an entry or a manifest would be
    (a model runs as the user and may plant them): each reads as a miss, at once, unread."""
    c = Cache(tmp_path)
    entry, manifest = c._path("ab" * 32), c._manifest("cd" * 32)
    def huge(p: Path) -> None:
        p.touch()
        os.truncate(p, 8 << 30)  # sparse: gigabytes to read, none on the disk

    planted = {"fifo": os.mkfifo, "device": lambda p: os.symlink("/dev/zero", p),
               "huge": huge}
    for how, plant in planted.items():
        for path in (entry, manifest):
            path.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            plant(path)
        t0 = time.monotonic()
        assert c.get("ab" * 32) is None, how
        assert c.recall("cd" * 32, tmp_path) is None, how
        assert time.monotonic() - t0 < 5, how
