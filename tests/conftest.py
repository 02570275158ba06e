"""Shared fixtures: the warmed-up tiny model and the Qwen-shaped rehearsal model (each built once
per test session), an uninterrupted training run to compare resumed runs with, and sample data.

`make test TEST_WORKERS=N` runs the suite on N pytest-xdist workers (the default is 2; 1 runs it
in one process). The session's models and reference run live in the folder the workers share,
and the first worker to need one makes it while the others wait on its lock (the kernel's flock).
Tests are grouped per module (and the SLURM ones together) so that a module's fixtures are made
once and two sweeps never compete for the 2-CPU cluster.

The suite tests the configs the checkout ships, never a user's own: `conf/local/default.yaml`
(your paths and SLURM account, loaded by default) is not loaded in any test or in the processes
they start (`GRPO_LOCAL_CONFIG=none`: conf/config.yaml loads `conf/local/<that>.yaml`, and there is
no `none.yaml`), and the presets `python -m analysis promote` writes (`conf/experiment/promoted/`,
`conf/promoted/`) are presets of their own (`grpo.config.keys.PRESET_GROUPS`) that no test walks
(test_local_config.py plants both and runs the tests they used to break)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from omegaconf import DictConfig, OmegaConf

from grpo.models.build import exclusive_lock
from grpo.models.loading import resolve_model_path

ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = Path(__file__).parent / "data"
LOCAL_CONFIG_ENV, NO_LOCAL_CONFIG = "GRPO_LOCAL_CONFIG", "none"
os.environ[LOCAL_CONFIG_ENV] = NO_LOCAL_CONFIG  # before any test composes a config or starts a process
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    # started in the background by a shell without job control (`make test &` in a script, a
    # CI step's `&`), this process ignores Ctrl-C, and every process a test starts would inherit
    # that: the tests of what Ctrl-C does to a sweep, a run and the monitor need Python's own
    # handler, as a terminal's foreground job has it
    signal.signal(signal.SIGINT, signal.default_int_handler)


def stand_in_real_paths(folder: Path, n_validation: int = 50) -> list[str]:
    """A stand-in for the real model (a folder with config.json only) and MATH files of 300
    training and `n_validation` validation problems in `folder`: the overrides pointing at them."""
    model = folder / "Qwen2.5-Math-1.5B"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"max_position_embeddings": 4096}))
    for split, n in (("train", 300), ("validation", n_validation)):
        with (folder / f"{split}.jsonl").open("w") as f:
            f.writelines(json.dumps({"problem": f"{i}+1?", "answer": str(i + 1)}) + "\n" for i in range(n))
    return [f"model.path={model}", f"data.train_path={folder / 'train.jsonl'}",
            f"data.validation_path={folder / 'validation.jsonl'}"]


def gen_pages() -> ModuleType:
    """docs/gen_pages.py, the generator of the reference pages, loaded as a module (it is a script
    of the docs, not a package module)."""
    spec = importlib.util.spec_from_file_location("gen_pages", ROOT / "docs" / "gen_pages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def model_conf(name: str, path: Path) -> DictConfig:
    """conf/model/<name>.yaml with `path` set: the model exactly as `model=<name>` builds it."""
    cfg = OmegaConf.load(ROOT / "conf" / "model" / f"{name}.yaml")
    cfg.path = str(path)
    return cfg


@pytest.fixture(scope="session")
def vllm_installed() -> None:
    """Skip where vLLM is not installed (the main .venv); with GRPO_REQUIRE_VLLM=1 (set by
    `make test-vllm`) fail instead, so that no vLLM test can skip there."""
    if importlib.util.find_spec("vllm") is None:
        message = "vLLM is not installed here; `make test-vllm` runs this test in .venv-vllm"
        if os.environ.get("GRPO_REQUIRE_VLLM") == "1":
            pytest.fail(message + " (GRPO_REQUIRE_VLLM=1)", pytrace=False)
        pytest.skip(message)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """xdist groups (`--dist loadgroup`): one per module, one for all SLURM tests (the cluster's
    2 CPUs run one test's jobs at a time: a detached driver holds one of them). On xdist
    workers the longest groups go first, so that none starts last on an otherwise idle worker:
    the SLURM group, then modules with slow tests (a stable sort: the order within a module
    stays); a run in one process keeps pytest's order.

    The group is written into each node id here (`<id>@<group>`, what LoadGroupScheduling splits
    on; `grouped_node_id`): pytest-xdist 3.8's worker does it by setting `item._nodeid`, which
    pytest 9 no longer reads, so every test was scheduled alone and the SLURM tests ran on both
    workers at once."""
    groups = {item: "slurm" if item.get_closest_marker("slurm") else item.module.__name__
              for item in items}
    slow = {groups[item] for item in items if item.get_closest_marker("slow")}
    for item in items:
        item.add_marker(pytest.mark.xdist_group(groups[item]))
        if config.getoption("loadgroup", default=False) and not item.nodeid.endswith(f"@{groups[item]}"):
            grouped_node_id(item, groups[item])
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: (groups[item] != "slurm", groups[item] not in slow))


def grouped_node_id(item: pytest.Item, group: str) -> None:
    """Give `item` the node id `<id>@<group>`, as pytest-xdist's worker does for `xdist_group`
    under pytest 8 (`_nodeid`); pytest 9 keeps the id in `_id`, a parsed NodeId."""
    suffixed = f"{item.nodeid}@{group}"
    if hasattr(item, "_id"):
        from _pytest.nodeid import NodeId

        item._id = NodeId.parse(suffixed)
    else:
        item._nodeid = suffixed


SHARED_ENV = "GRPO_TEST_SHARED"
"""A folder where concurrent test sessions (CI's two tiers, run side by side) make the models and
the reference run once between them, under the same flocks the workers of one session use;
unset, each session makes its own in its temporary folder."""


def shared_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder all xdist workers of this session (and, with `GRPO_TEST_SHARED`, every session
    given the same folder) share: the session's temporary folder by default."""
    if os.environ.get(SHARED_ENV):
        folder = Path(os.environ[SHARED_ENV]).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        return folder
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


SLURM_LOCK = Path(tempfile.gettempdir()) / "grpo-sweeps-slurm-tests.lock"
"""Held (flock) by each SLURM test while it runs: the test cluster's 2 CPUs hold one test's jobs at
a time. The cluster is the machine's, so the lock is too (the system's temporary folder, not the
checkout's): two checkouts' sessions (a fresh clone's tiers beside a working tree's test) take
turns on it."""


@pytest.fixture(autouse=True)
def one_slurm_test_at_a_time(request: pytest.FixtureRequest) -> Iterator[None]:
    """A SLURM test (marked `slurm`) waits for any other session's SLURM test on this machine to
    end: within a session they run one after another on one worker already (their xdist group)."""
    if request.node.get_closest_marker("slurm") is None:
        yield
        return
    SLURM_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(SLURM_LOCK):
        yield


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory of the tiny model built with conf/model/tiny.yaml's settings, shared by the
    whole session (all workers); treat it as read-only. A `model=tiny model.path=<this dir>`
    config finds its own build there and reuses it."""
    return resolve_model_path(model_conf("tiny", shared_root(tmp_path_factory) / "tiny-qwen2"))


@pytest.fixture(scope="session")
def rehearsal_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory of the Qwen-shaped rehearsal model as `model=qwen-rehearsal` builds it, shared
    by the whole session (all workers); treat it as read-only."""
    return resolve_model_path(
        model_conf("qwen-rehearsal", shared_root(tmp_path_factory) / "qwen-rehearsal")
    )


@pytest.fixture(scope="session")
def reference(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run directory of an uninterrupted `training_runs.launch` run, made once for all workers;
    treat it as read-only."""
    from training_runs import finish, launch

    run_dir = shared_root(tmp_path_factory) / "reference"
    with exclusive_lock(run_dir.with_name("reference.lock")):
        status = run_dir / "status.json"
        if not (status.exists() and json.loads(status.read_text())["status"] == "completed"):
            shutil.rmtree(run_dir, ignore_errors=True)  # a worker that died while making it
            returncode, output = finish(launch(run_dir, tiny_model_dir))
            assert returncode == 0, output
    return run_dir


@pytest.fixture
def tiny_model_cfg(tiny_model_dir: Path) -> DictConfig:
    """conf/model/tiny.yaml with `path` pointing at the session's tiny model."""
    return model_conf("tiny", tiny_model_dir)


@pytest.fixture
def math_sample_path() -> Path:
    """A MATH-format jsonl of 8 problems; lines 3, 4, 5 and 7 have no `answer` field (line 4's
    solution has two \\boxed{}, the last one, 42, is the answer)."""
    return DATA_DIR / "math_sample.jsonl"
