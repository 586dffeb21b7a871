"""What the tests of `dfmv serve` from Python share."""

import os
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOKEN = "s3cr3t"


def dfmv_bin() -> str:
    """The dfmv binary: ``DFMV_BIN``, default ``target/debug/dfmv``."""
    path = os.environ.get("DFMV_BIN") or str(ROOT / "target" / "debug" / "dfmv")
    if not os.path.exists(path):
        raise RuntimeError(f"no dfmv binary at {path}: run `cargo build --bin dfmv` or set DFMV_BIN")
    return path
