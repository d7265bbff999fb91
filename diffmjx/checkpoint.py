"""Fingerprinted checkpoint files: one ``.npz`` holding a loop's arrays and what they were made from.

A long loop (a fit, a closed-loop MPC run) saves its state after every step with :func:`save`;
a rerun :func:`load`-s it and continues, but only if the file's *fingerprint* (a JSON text of the
configuration and a digest of the data, :func:`fingerprint`) equals the run's own: a checkpoint of
another configuration raises ``ValueError`` naming the first fields that differ. Writes are atomic
(a temporary file replaced), so a run killed mid-write keeps the previous checkpoint.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["digest", "fingerprint", "load", "save"]


def digest(*arrays) -> str:
    """SHA-256 of arrays' bytes, shapes and dtypes (the data part of a fingerprint)."""
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(str((a.shape, a.dtype.str)).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def fingerprint(**parts: Any) -> str:
    """A canonical JSON text of ``parts`` (configs as dicts, digests as strings)."""
    return json.dumps(parts, sort_keys=True, default=str)


def _diff(a: Any, b: Any, prefix: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [x for k in sorted(set(a) | set(b)) for x in _diff(a.get(k), b.get(k), f"{prefix}{k}.")]
    return [] if a == b else [f"{prefix.rstrip('.')}: {a!r} (checkpoint) vs {b!r} (now)"]


def check(path: Path, saved: str, wanted: str, what: str = "another run", hint: str = "delete it") -> None:
    """Raise ``ValueError`` naming the first fields that differ when ``saved != wanted``."""
    if saved != wanted:
        try:
            diff = _diff(json.loads(saved), json.loads(wanted))
        except json.JSONDecodeError:
            diff = ["an unreadable fingerprint"]
        raise ValueError(f"checkpoint {path} was written for {what} ({'; '.join(diff[:4])}); {hint}")


def save(path: str | Path, fingerprint_text: str, arrays: dict[str, Any]) -> None:
    """Write ``arrays`` and the fingerprint to ``path`` atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, fingerprint=np.asarray(fingerprint_text), **{k: np.asarray(v) for k, v in arrays.items()})
    tmp.replace(path)


def load(path: str | Path, fingerprint_text: str, what: str = "another run", hint: str = "delete it") -> dict | None:
    """The arrays of ``path``, or None if there is no such file.

    Raises:
        ValueError: the file's fingerprint differs (naming the fields), or it is unreadable.
    """
    path = Path(path)
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = {k: f[k] for k in f.files}
    except Exception as e:
        raise ValueError(f"checkpoint {path} is unreadable ({e}); {hint}") from e
    check(path, str(arrays.pop("fingerprint", "")), fingerprint_text, what, hint)
    return arrays
