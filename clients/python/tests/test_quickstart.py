"""The Python quickstart of docs/clients.md, run as written (with the test
server's address and token), so the documentation cannot drift from what
works."""

from __future__ import annotations

import contextlib
import io
import pathlib
import re

QUICKSTART = '''\
import datafusion_matview as dfmv

db = dfmv.connect("http://127.0.0.1:2333")
view = db.create_materialized_view(
    "totals", "SELECT region, sum(amount) AS total FROM orders GROUP BY region")
print(view.row_count, view.freshness)             # 2 fresh
# ... a new file lands in the folder of orders ...
result = view.refresh()
print(result.mode, result.rows_written)           # incremental 3
print(view.to_arrow(filter="total > 6").num_rows) # 2
job = view.refresh_async(full=True)               # a Job: status(), done(), cancel(), wait()
print(job.wait().mode)                            # full
'''


def test_the_documented_quickstart_runs_and_prints_what_it_says(server):
    page = (pathlib.Path(__file__).resolve().parents[3] / "docs" / "clients.md").read_text()
    assert "```python\n" + QUICKSTART + "```" in page
    before, after = QUICKSTART.split("# ... a new file lands in the folder of orders ...\n")
    before = before.replace('dfmv.connect("http://127.0.0.1:2333")',
                            f'dfmv.connect("{server.url}", token="{server.token}")')
    scope: dict = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(before, scope)
        server.append("feb.csv", "region,amount\neast,7\nnorth,1\n")
        exec(after, scope)
    expected = re.findall(r"# (\S.*)$", QUICKSTART, re.M)
    expected = [e for e in expected if not e.startswith(("...", "a Job"))]
    assert out.getvalue().splitlines() == expected
