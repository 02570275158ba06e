"""Nothing is unpickled from a run directory: a restart of a run whose checkpoints and final
model hold crafted pickles (files that create a marker file when unpickled) never runs them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from training_runs import assert_same_run, copy_run, finish, launch


class WritesMarker:
    """Unpickling this creates the file `marker` (it calls `open(marker, "w")`)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (open, (str(self.marker), "w"))


@pytest.mark.slow
def test_crafted_pickle_in_a_checkpoint_is_never_executed(
    reference: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    run_dir = copy_run(reference, tmp_path)
    marker = tmp_path / "pickle_was_executed"
    for checkpoint in (run_dir / "checkpoints").glob("step_*"):
        for name in ("trainer_state.pt", "optimizer.pt", "rng_state.pth"):
            torch.save(WritesMarker(marker), checkpoint / name)
    torch.save(WritesMarker(marker), run_dir / "final_model" / "pytorch_model.bin")
    returncode, output = finish(launch(run_dir, tiny_model_dir))
    assert not marker.exists(), "a pickle from the run directory was loaded and ran code"
    assert returncode == 0, output
    assert not (run_dir / "metrics.discarded.jsonl").exists()
    # the same final weights; a relaunch of a completed run trains nothing and is no restart
    assert_same_run(run_dir, reference, restarts=0)
