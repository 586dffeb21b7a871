"""A real ``dfmv serve`` for each test: the binary (``DFMV_BIN``, default
the repository's ``target/debug/dfmv``) on an ephemeral loopback port over
a temporary catalog holding ``orders``, a CSV table under ``src/``."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
TOKEN = "s3cr3t"


@dataclass
class Server:
    url: str
    folder: pathlib.Path
    token: str

    def append(self, name: str, csv: str) -> None:
        """A new file in ``orders``' folder."""
        (self.folder / "src" / name).write_text(csv)


def dfmv_bin() -> str:
    path = os.environ.get("DFMV_BIN") or str(ROOT / "target" / "debug" / "dfmv")
    if not os.path.exists(path):
        raise RuntimeError(f"no dfmv binary at {path}: run `cargo build --bin dfmv` or set DFMV_BIN")
    return path


@pytest.fixture
def server(tmp_path: pathlib.Path) -> Iterator[Server]:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "jan.csv").write_text("region,amount\nnorth,10\nsouth,5\nnorth,2\n")
    env = dict(os.environ, HOME=str(tmp_path), DFMV_TOKEN=TOKEN)
    catalog = str(tmp_path / "catalog")
    subprocess.run(
        [dfmv_bin(), "--catalog", catalog, "-q", "-c",
         f"CREATE EXTERNAL TABLE orders STORED AS CSV LOCATION '{tmp_path / 'src'}/'"],
        cwd=tmp_path, env=env, check=True,
    )
    proc = subprocess.Popen(
        [dfmv_bin(), "--catalog", catalog, "serve", "--http", "127.0.0.1:0", "--flight-sql", "none"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    url = None
    for _ in range(2):
        line = proc.stdout.readline()  # type: ignore[union-attr]
        if line.startswith("REST on "):
            url = line.split(" on ", 1)[1].strip()
    if url is None:
        proc.kill()
        raise RuntimeError(f"dfmv serve did not start: {proc.communicate()[1]}")
    try:
        yield Server(url, tmp_path, TOKEN)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
