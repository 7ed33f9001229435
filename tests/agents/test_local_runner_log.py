"""The local runner's log of a task's output: whole lines (split multi-byte characters and
lines that span reads joined), stdout before stderr when both have data, a last line without
a newline kept, and a progress bar that rewrites one line with \\r kept as one line."""

from __future__ import annotations

import io
import json
import os

from det_hub.agents.local_runner import _pump


def test_lines_are_logged_whole_and_stdout_first() -> None:
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    accent = "é".encode()
    for piece in (b"ab", b"c\nde", accent[:1], accent[1:] + b"\n\nlast", b"\r10%" * 2000):
        os.write(out_w, piece)
    os.write(err_w, b"err1\r\nerr2")
    os.close(out_w)
    os.close(err_w)
    log = io.StringIO()
    with os.fdopen(out_r, "rb") as out, os.fdopen(err_r, "rb") as err:
        _pump(out, err, log)
    records = [json.loads(line) for line in log.getvalue().splitlines()]
    assert [(r["s"], r["m"]) for r in records] == [
        ("stdout", "abc"), ("stdout", "deé"), ("stdout", ""), ("stderr", "err1"),
        ("stdout", "last" + "\r10%" * 2000), ("stderr", "err2")]
    assert all(isinstance(r["t"], float) for r in records)
