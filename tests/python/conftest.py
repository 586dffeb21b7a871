"""What the tests of `dfmv serve` from Python share."""

import json
import os
import pathlib
import signal
import subprocess
import urllib.error
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOKEN = "s3cr3t"


def dfmv_bin() -> str:
    """The dfmv binary: ``DFMV_BIN``, default ``target/debug/dfmv``."""
    path = os.environ.get("DFMV_BIN") or str(ROOT / "target" / "debug" / "dfmv")
    if not os.path.exists(path):
        raise RuntimeError(f"no dfmv binary at {path}: run `cargo build --bin dfmv` or set DFMV_BIN")
    return path


def serve(tmp_path, *flags: str) -> tuple[subprocess.Popen, dict[str, str]]:
    """`dfmv serve` with the token over ``tmp_path/catalog``, run in
    ``tmp_path``; answers the process and its addresses by what its banner
    names them (``REST``, ``Flight SQL``)."""
    env = dict(os.environ, HOME=str(tmp_path), DFMV_TOKEN=TOKEN)
    proc = subprocess.Popen(
        [dfmv_bin(), "--catalog", str(tmp_path / "catalog"), "serve", "--http", "127.0.0.1:0", *flags],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    addresses = {}
    for _ in range(3):
        line = proc.stdout.readline()
        if " on " in line:
            what, address = line.split(" on ", 1)
            addresses[what] = address.strip()
    return proc, addresses


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM, then a clean stop."""
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert err.endswith("dfmv serve: stopped\n"), err


def post(url: str, path: str, body: dict) -> tuple[int, object]:
    """POSTs ``body`` as JSON to ``path`` of the server at ``url`` with the
    token; answers the status and the JSON answer, error or not."""
    req = urllib.request.Request(
        f"{url}{path}", data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json", "Accept": "application/json",
                 "Authorization": f"Bearer {TOKEN}"})
    try:
        with urllib.request.urlopen(req) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)
