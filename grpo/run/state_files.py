"""Nested training state (optimizer, lr schedule, RNG states, sampler, counters) stored without
pickle, so that reading it back cannot run code: tensors go to a safetensors file, everything
else to a JSON file that refers to them.

JSON encoding of a value: None, bool, int, float, str and lists as themselves; a dict whose keys
are strings not starting with `$` as a JSON object; every other value as an object with one
`$`-key: `{"$tensor": name}` (a tensor of the safetensors file), `{"$tuple": [...]}`,
`{"$dict": [[key, value], ...]}` (e.g. the int keys of an optimizer state) and
`{"$ndarray": {"dtype": ..., "shape": [...], "data": [...]}}` (numpy's RNG key).
Floats are written with `repr` precision, so values come back bit-equal.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from grpo.run.files import RunFileError, read_json

FORMAT = "grpo-trainer-state/1"


class StateFileError(ValueError):
    """A trainer-state file that cannot be decoded."""


def _encode(value: Any, tensors: dict[str, torch.Tensor], where: str) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, torch.Tensor):
        name = str(len(tensors))
        tensors[name] = value.detach().to("cpu", copy=True).contiguous()
        return {"$tensor": name}
    if isinstance(value, np.ndarray):
        return {"$ndarray": {"dtype": value.dtype.str, "shape": list(value.shape),
                             "data": value.ravel().tolist()}}
    if isinstance(value, list | tuple):
        items = [_encode(v, tensors, f"{where}[{i}]") for i, v in enumerate(value)]
        return {"$tuple": items} if isinstance(value, tuple) else items
    if isinstance(value, Mapping):
        if all(isinstance(k, str) and not k.startswith("$") for k in value):
            return {k: _encode(v, tensors, f"{where}.{k}") for k, v in value.items()}
        return {"$dict": [[_encode(k, tensors, where), _encode(v, tensors, f"{where}.{k}")]
                          for k, v in value.items()]}
    raise TypeError(f"cannot store {type(value).__name__} at {where} in a trainer-state file")


def _decode(value: Any, tensors: Mapping[str, torch.Tensor]) -> Any:
    if isinstance(value, list):
        return [_decode(v, tensors) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) != 1 or not next(iter(value)).startswith("$"):
        return {k: _decode(v, tensors) for k, v in value.items()}
    (tag, body), = value.items()
    if tag == "$tensor" and isinstance(body, str) and body in tensors:
        return tensors[body]
    if tag == "$tuple" and isinstance(body, list):
        return tuple(_decode(v, tensors) for v in body)
    if tag == "$dict" and isinstance(body, list) and all(isinstance(kv, list) and len(kv) == 2 for kv in body):
        return {_decode(k, tensors): _decode(v, tensors) for k, v in body}
    if tag == "$ndarray" and isinstance(body, dict):
        try:
            return np.asarray(body["data"], dtype=np.dtype(body["dtype"])).reshape(body["shape"])
        except (KeyError, TypeError, ValueError) as err:
            raise StateFileError(f"bad $ndarray entry ({err})") from err
    raise StateFileError(f"unknown or malformed entry {tag!r}")


def save_state(state: Mapping[str, Any], json_path: Path, tensors_path: Path) -> None:
    """Write `state` to `json_path` (structure) and `tensors_path` (its tensors)."""
    tensors: dict[str, torch.Tensor] = {}
    encoded = _encode(state, tensors, "state")
    save_file(tensors, str(tensors_path))
    json_path.write_text(json.dumps({"format": FORMAT, "state": encoded}) + "\n")


def load_state(json_path: Path, tensors_path: Path) -> dict[str, Any]:
    """Read back what `save_state` wrote; StateFileError names the file that does not decode."""
    try:
        payload = read_json(json_path)
    except RunFileError as err:
        raise StateFileError(str(err)) from err
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise StateFileError(f"{json_path.name} is not a {FORMAT} file")
    try:
        tensors = load_file(str(tensors_path), device="cpu")
    except (OSError, SafetensorError) as err:
        raise StateFileError(f"{tensors_path.name} is not a readable safetensors file ({err})") from err
    try:
        state = _decode(payload.get("state"), tensors)
    except RecursionError:
        raise StateFileError(f"{json_path.name} is nested too deeply") from None
    except (StateFileError, TypeError) as err:
        raise StateFileError(f"{json_path.name}: {err}") from err
    if not isinstance(state, dict):
        raise StateFileError(f"{json_path.name} does not hold a mapping")
    return state
