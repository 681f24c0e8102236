"""An on-disk memo of `launcher render`'s stdout, so that rendering the same inputs again starts no model.

Rendering is pure: the output depends only on the config file's bytes, `--set`, `--backend`, `--gitops`,
the output format and the code that renders (this package's sources and templates, pydantic, Jinja2,
PyYAML, the Python version). A fresh process spends most of its time importing pydantic and building the
spec's models, ~10x what the render itself costs; when every one of those inputs is unchanged, the text
printed last time is the answer, and this module returns it having imported only the standard library.

The key is a SHA-256 of all of the above: this package's files by content, the libraries by their
`__init__` file's path, size and mtime (a reinstall rewrites them). Only successful renders are stored
(a config that fails validation is re-validated every time, exit 2 as ever). Entries live in
`$XDG_CACHE_HOME/grpo-launcher/render/` (default `~/.cache`), at most `MAX_ENTRIES` of them; any error
reading or writing the cache falls back to rendering (it is an optimisation, never a source of failure).
`launcher render --no-cache` bypasses it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import stat
import sys
from pathlib import Path

MAX_ENTRIES = 256
MAX_CONFIG_BYTES = 1 << 20  # larger configs are refused by launcher.config: never cached
_PACKAGE = Path(__file__).resolve().parent
_LIBRARIES = ("pydantic", "pydantic_core", "jinja2", "yaml")
_code_digest: str | None = None


def cache_dir() -> Path:
    """Where entries live: `$XDG_CACHE_HOME/grpo-launcher/render` (default `~/.cache/...`)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "grpo-launcher" / "render"


def code_digest() -> str:
    """SHA-256 of what renders: this package's .py and template files (content) and the libraries' files."""
    global _code_digest
    if _code_digest is None:
        h = hashlib.sha256(sys.version.encode())
        for path in sorted(p for p in _PACKAGE.rglob("*") if p.suffix in (".py", ".j2") and p.is_file()):
            h.update(str(path.relative_to(_PACKAGE)).encode() + b"\0" + path.read_bytes() + b"\0")
        for name in _LIBRARIES:
            spec = importlib.util.find_spec(name)
            origin = spec.origin if spec else None
            st = os.stat(origin) if origin else None
            h.update(f"{name}={origin}:{st.st_size if st else 0}:{st.st_mtime_ns if st else 0}\0".encode())
        _code_digest = h.hexdigest()
    return _code_digest


def key(config: str, sets: list[str], backend: str | None, gitops: bool, fmt: str) -> str | None:
    """The entry's name for these inputs, or None when they cannot be keyed (unreadable or oversized config:
    rendering reports that). Only a regular file is keyed: reading a pipe (`<(...)`, /dev/stdin) here would
    leave nothing for the renderer."""
    try:
        if not stat.S_ISREG(os.stat(config).st_mode):
            return None
        with open(config, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except (OSError, ValueError):
        return None
    if len(data) > MAX_CONFIG_BYTES:
        return None
    h = hashlib.sha256(code_digest().encode())
    h.update(json.dumps([config, list(sets), backend, gitops, fmt]).encode() + b"\0" + data)
    return h.hexdigest()


def get(name: str | None) -> str | None:
    """The stored output for `name`, or None."""
    if name is None:
        return None
    try:
        return (cache_dir() / name).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def put(name: str | None, text: str) -> None:
    """Store `text` under `name` (atomically), keeping at most MAX_ENTRIES entries; errors are ignored."""
    if name is None:
        return
    d = cache_dir()
    try:
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f".{name}.{os.getpid()}.tmp"
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, d / name)
        entries = [p for p in d.iterdir() if not p.name.startswith(".")]
        if len(entries) > MAX_ENTRIES:
            entries.sort(key=lambda p: p.stat().st_mtime_ns)
            for old in entries[: len(entries) - MAX_ENTRIES]:
                old.unlink(missing_ok=True)
    except OSError:
        pass
