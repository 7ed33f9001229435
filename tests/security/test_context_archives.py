"""Crafted context archives: each is refused by the check, by a real master at upload (400
naming the member, 413 for a size bound, nothing created), and by the extraction (nothing
written anywhere); good archives extract exactly, and with no more rights than they should."""

from __future__ import annotations

import base64
import functools
import gzip
import io
import json
import os
import shutil
import stat
import tarfile
import tempfile
import threading
import zlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tornado.httpclient import AsyncHTTPClient, HTTPResponse
from tornado.httpserver import HTTPServer
from tornado.testing import bind_unused_port

from det_hub.agents.local import LocalAgent
from det_hub.archive import (
    ContextError,
    ContextLimits,
    check_archive,
    extract_archive,
    read_file,
)
from det_hub.service.app import make_app
from det_hub.service.master import Master
from det_hub.store import Store

Member = tuple[tarfile.TarInfo, bytes | None]
GiB = 1 << 30


# --- building archives ----------------------------------------------------------------------
def archive(*members: Member) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def file(name: str, data: bytes = b"x", mode: int = 0o644, mtime: int = 1_600_000_000
         ) -> Member:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, mtime
    return info, data


def folder(name: str, mtime: int = 1_600_000_000) -> Member:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, mtime
    return info, None


def link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> Member:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info, None


def special(name: str, kind: bytes) -> Member:
    info = tarfile.TarInfo(name)
    info.type = kind
    return info, None


def path_max_chain() -> list[Member]:
    """The CVE-2025-4517 pattern: directories with 247-byte names nested sixteen deep, each
    paired with a one-letter symbolic link to it, so the short path through the links resolves
    to a path far past PATH_MAX; then a link through that chain climbing back up, and a link
    and a file that use it to land outside."""
    long_name = "d" * 247
    letters = "abcdefghijklmnop"
    members: list[Member] = []
    where = ""
    for letter in letters:
        members.append(folder(where + long_name))
        members.append(link(where + letter, long_name))
        where += long_name + "/"
    deep_link = "/".join(letters) + "/" + "l" * 254
    members.append(link(deep_link, "../" * len(letters)))
    members.append(link("escape", deep_link + "/.." * (len(letters) + 1)))
    members.append(file("escape/pwned.txt", b"outside\n"))
    return members


def header(name: str, size: int, kind: bytes = tarfile.REGTYPE) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.type = size, kind
    return info.tobuf(format=tarfile.GNU_FORMAT)


def gzip_of_zeros(prefix: bytes, zeros: int) -> bytes:
    """``prefix`` and then ``zeros`` zero bytes, gzip-compressed without ever holding (or
    deflating) the zeros: after a full flush deflate starts afresh, so every further MiB of
    zeros compresses to the same bytes, which are repeated. The gzip trailer is left out; the
    check must stop long before it, and reading that far would end in a read error instead of
    a size refusal."""
    chunk = 1 << 20
    assert zeros % chunk == 0
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = deflate.compress(prefix) + deflate.flush(zlib.Z_FULL_FLUSH)
    one = deflate.compress(bytes(chunk)) + deflate.flush(zlib.Z_FULL_FLUSH)
    again = deflate.compress(bytes(chunk)) + deflate.flush(zlib.Z_FULL_FLUSH)
    assert again == one
    gzip_header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
    return gzip_header + head + one * (zeros // chunk) + deflate.flush()


def many_members(count: int) -> bytes:
    """``count`` empty files with distinct names, written header by header and streamed
    through gzip (tarfile would take several seconds and keep every header)."""
    template = bytearray(header("f000000", 0))
    template[148:156] = b" " * 8
    base_sum = sum(template) - sum(b"f000000")
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=1) as gz:
        block = []
        for i in range(count):
            name = b"f%06d" % i
            template[0:7] = name
            template[148:156] = b"%06o\0 " % (base_sum + sum(name))
            block.append(bytes(template))
            if len(block) == 4096:
                gz.write(b"".join(block))
                block.clear()
        gz.write(b"".join(block) + bytes(1024))
    return buf.getvalue()


@dataclass(frozen=True)
class Crafted:
    """An archive that must be refused, at ``member``, with ``fragment`` in the message."""

    build: Callable[[], bytes]
    member: str | None
    fragment: str
    too_large: bool = False
    limits: ContextLimits = ContextLimits()


DEEP = "/".join(["p" * 200] * 6)  # 1205 bytes

CRAFTED: dict[str, Crafted] = {
    "dotdot": Crafted(lambda: archive(file("ok.py"), file("../outside.py")),
                      "../outside.py", "outside the context"),
    "dotdot-inner": Crafted(lambda: archive(folder("pkg"), file("pkg/../../outside.py")),
                            "pkg/../../outside.py", "outside the context"),
    "absolute": Crafted(lambda: archive(file("/etc/cron.d/evil")),
                        "/etc/cron.d/evil", "absolute path"),
    "symlink-out-relative": Crafted(lambda: archive(link("pkg/evil", "../../secret")),
                                    "pkg/evil", "outside the context"),
    "symlink-out-absolute": Crafted(lambda: archive(link("evil", "/etc/passwd")),
                                    "evil", "outside the context"),
    "symlink-chain-out": Crafted(
        lambda: archive(folder("sub"), link("p", "sub"), link("sub/q", ".."),
                        link("x", "p/q/..")), "x", "outside the context"),
    "symlink-dotdot-later": Crafted(  # 'u' is no directory yet: 'u/..' could mean anything
        lambda: archive(link("y", "u/../.."), link("u", ".")), "y", "steps out of 'u'"),
    "write-through-symlink": Crafted(
        lambda: archive(link("l", "."), file("l/ok.py")), "l/ok.py",
        "passes through 'l', a symbolic link"),
    "cve-2025-4517": Crafted(lambda: archive(*path_max_chain()),
                             "d" * 247 + ("/" + "d" * 247) * 4, "longer than the limit"),
    "cve-2025-4517-no-path-limit": Crafted(
        lambda: archive(*path_max_chain()), "/".join("abcdefghijklmnop") + "/" + "l" * 254,
        "passes through 'a', a symbolic link",
        limits=ContextLimits(max_path_bytes=1 << 20, max_depth=10_000)),
    "hardlink-out": Crafted(lambda: archive(link("hard", "../secret", tarfile.LNKTYPE)),
                            "hard", "outside the context"),
    "hardlink-to-symlink": Crafted(
        lambda: archive(file("a.py"), link("s", "a.py"), link("h", "s", tarfile.LNKTYPE)),
        "h", "not an earlier regular file"),
    "hardlink-to-later": Crafted(lambda: archive(link("h", "a.py", tarfile.LNKTYPE),
                                                 file("a.py")), "h", "not an earlier"),
    "char-device": Crafted(lambda: archive(special("dev/null", tarfile.CHRTYPE)),
                           "dev/null", "character device"),
    "block-device": Crafted(lambda: archive(special("sda", tarfile.BLKTYPE)),
                            "sda", "block device"),
    "fifo": Crafted(lambda: archive(special("pipe", tarfile.FIFOTYPE)), "pipe", "FIFO"),
    "dir-replaced-by-symlink": Crafted(lambda: archive(folder("pkg"), link("pkg", ".")),
                                       "pkg", "replacing an earlier directory"),
    "file-replaced-by-dir": Crafted(lambda: archive(file("a"), folder("a")),
                                    "a", "replacing an earlier file"),
    "file-twice": Crafted(lambda: archive(file("a"), file("a")), "a", "appears twice"),
    "under-a-file": Crafted(lambda: archive(file("a"), file("a/b")), "a/b",
                            "passes through 'a', a file"),
    "path-too-long": Crafted(lambda: archive(file(DEEP)), DEEP, "longer than the limit"),
    "300k-members": Crafted(functools.cache(lambda: many_members(300_000)), "f100000",
                            "more than 100000 members", too_large=True),
    "tar-bomb": Crafted(functools.cache(lambda: gzip_of_zeros(header("zeros.bin", GiB), GiB)),
                        "zeros.bin", "larger than 96 MiB unpacked", too_large=True),
    "long-name-bomb": Crafted(
        functools.cache(lambda: gzip_of_zeros(
            header("train.py", 1) + b"x" + bytes(511)
            + header("././@LongLink", GiB, tarfile.GNUTYPE_LONGNAME), GiB)),
        "train.py", "decompression bomb", too_large=True),
    "garbage": Crafted(lambda: b"\x1f\x8b" + b"not really gzip" * 10, None,
                       "not a readable tar archive"),
}


# --- the check ------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CRAFTED, ids=list(CRAFTED))
def test_check_refuses_crafted_archives_naming_the_member(case: str) -> None:
    crafted = CRAFTED[case]
    with pytest.raises(ContextError) as err:
        check_archive(crafted.build(), crafted.limits)
    assert err.value.member == crafted.member
    if crafted.member is not None:
        assert repr(crafted.member) in str(err.value)
    assert crafted.fragment in str(err.value)
    assert err.value.too_large is crafted.too_large


def test_the_member_bound_stops_reading_at_the_bound() -> None:
    data = many_members(1000)
    assert check_archive(data, ContextLimits(max_members=1000)) == 0
    with pytest.raises(ContextError) as err:
        check_archive(data, ContextLimits(max_members=999))
    assert err.value.member == "f000999"


def test_symlinks_may_point_anywhere_inside() -> None:
    data = archive(folder("a/b"), link("a/b/up", "../.."), link("a/b/top", "up/a/b"),
                   link("dangling", "later/file.py"), link("self", "."),
                   link("a/to_b", "b/../b/up/a"), file("later/file.py", b"12"))
    assert check_archive(data) == 2


# --- at upload, over HTTP -------------------------------------------------------------------
@dataclass
class Api:
    """An in-process master serving its REST API on 127.0.0.1."""

    url: str
    token: str
    master: Master

    async def call(self, method: str, path: str, body: Any = None) -> HTTPResponse:
        return await AsyncHTTPClient().fetch(
            f"{self.url}/api/v1{path}", method=method, raise_error=False,
            headers={"Authorization": f"Bearer {self.token}"},
            body=None if body is None else json.dumps(body), request_timeout=120)


@pytest.fixture
async def api(sqlite_url: str, tmp_path: Path) -> AsyncIterator[Api]:
    store = await Store.open(sqlite_url)
    master = Master(store, LocalAgent(work_root=tmp_path / "work", use_gpus=False),
                    master_url="http://127.0.0.1:9", data_dir=tmp_path, kill_grace_seconds=2,
                    poll_interval=0.05)
    await master.start()
    token = await master.users.ensure_admin_token(tmp_path / "admin-token")
    sock, port = bind_unused_port()
    server = HTTPServer(make_app(master), max_body_size=200 << 20)
    server.add_sockets([sock])
    try:
        yield Api(f"http://127.0.0.1:{port}", token, master)
    finally:
        server.stop()
        await master.stop()
        await store.close()


EXPERIMENT = yaml.safe_dump({
    "name": "t", "entrypoint": "python3 train.py",
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}}})


@pytest.mark.parametrize("case", [c for c in CRAFTED if CRAFTED[c].limits == ContextLimits()])
async def test_the_master_refuses_crafted_archives_at_upload(api: Api, case: str) -> None:
    crafted = CRAFTED[case]
    context = base64.b64encode(crafted.build()).decode()
    r = await api.call("POST", "/experiments", {"config": EXPERIMENT, "context": context})
    assert r.code == (413 if crafted.too_large else 400), r.body
    body = json.loads(r.body)
    assert crafted.fragment in body["error"]
    if crafted.member is not None:
        assert repr(crafted.member) in body["error"]
        assert body["details"] == [{"member": crafted.member, "message": body["error"]}]
    listed = json.loads((await api.call("GET", "/experiments")).body)
    assert listed["experiments"] == []
    assert listed["pagination"]["total"] == 0


async def test_the_master_refuses_a_crafted_archive_for_a_command(api: Api) -> None:
    context = base64.b64encode(CRAFTED["symlink-chain-out"].build()).decode()
    r = await api.call("POST", "/commands", {"config": "entrypoint: python3 train.py\n",
                                             "context": context})
    assert r.code == 400, r.body
    assert "context member 'x'" in json.loads(r.body)["error"]
    assert json.loads((await api.call("GET", "/commands")).body)["commands"] == []


async def test_the_check_runs_off_the_event_loop(api: Api,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[int] = []

    def recording(data: bytes, limits: ContextLimits) -> int:
        threads.append(threading.get_ident())
        return check_archive(data, limits)

    monkeypatch.setattr("det_hub.service.context.check_archive", recording)
    data = archive(file("train.py", b"print(1)\n"))
    r = await api.call("POST", "/experiments", {
        "config": EXPERIMENT, "context": base64.b64encode(data).decode(), "activate": False})
    assert r.code == 201, r.body
    assert len(threads) == 1 and threads[0] != threading.get_ident()


async def test_the_master_keeps_the_limits_it_is_given(api: Api) -> None:
    api.master.experiments.context_limits = ContextLimits(max_bytes=1000)
    data = archive(file("train.py", b"print(1)\n"), file("big.bin", bytes(1200)))
    r = await api.call("POST", "/experiments", {
        "config": EXPERIMENT, "context": base64.b64encode(data).decode(), "activate": False})
    assert r.code == 413, r.body
    assert "larger than 1000 bytes unpacked (at member 'big.bin')" in json.loads(r.body)["error"]
    api.master.experiments.context_limits = ContextLimits()
    r = await api.call("POST", "/experiments", {
        "config": EXPERIMENT, "context": base64.b64encode(data).decode(), "activate": False})
    assert r.code == 201, r.body


# --- extraction -----------------------------------------------------------------------------
def umask() -> int:
    current = os.umask(0o022)
    os.umask(current)
    return current


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every path below ``root`` (links not followed) with its mode and size."""
    seen = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            st_ = os.lstat(os.path.join(dirpath, name))
            seen[os.path.relpath(os.path.join(dirpath, name), root)] = (st_.st_mode, st_.st_size)
    return seen


def test_a_normal_context_extracts_exactly(tmp_path: Path) -> None:
    script = b"#!/bin/sh\necho hi\n"
    data = archive(
        folder("pkg", mtime=1_500_000_000), file("train.py", b"print(1)\n", mtime=1_500_000_001),
        file("pkg/run.sh", script, mode=0o755), folder("pkg/sub"),
        file("pkg/sub/rows.csv", b"a,b\n", mode=0o600),
        link("pkg/alias.py", "../train.py"), link("pkg/sub/copy.csv", "pkg/sub/rows.csv",
                                                  tarfile.LNKTYPE))
    dest = tmp_path / "ctx"
    assert extract_archive(data, dest) == 9 + len(script) + 4
    assert sorted(snapshot(dest)) == ["pkg", "pkg/alias.py", "pkg/run.sh", "pkg/sub",
                                      "pkg/sub/copy.csv", "pkg/sub/rows.csv", "train.py"]
    mask = umask()
    assert (dest / "train.py").read_bytes() == b"print(1)\n"
    assert stat.S_IMODE((dest / "train.py").stat().st_mode) == 0o644 & ~mask
    assert (dest / "pkg" / "run.sh").read_bytes() == script
    assert stat.S_IMODE((dest / "pkg" / "run.sh").stat().st_mode) == 0o755 & ~mask
    assert stat.S_IMODE((dest / "pkg" / "sub" / "rows.csv").stat().st_mode) == 0o600 & ~mask
    assert os.readlink(dest / "pkg" / "alias.py") == "../train.py"
    assert (dest / "pkg" / "alias.py").read_bytes() == b"print(1)\n"
    rows, copy = (dest / "pkg" / "sub" / "rows.csv").stat(), (dest / "pkg/sub/copy.csv").stat()
    assert (rows.st_ino, rows.st_nlink) == (copy.st_ino, 2)
    assert (dest / "train.py").stat().st_mtime == 1_500_000_001
    assert (dest / "pkg").stat().st_mtime == 1_500_000_000
    assert stat.S_IMODE((dest / "pkg").stat().st_mode) == 0o755 & ~mask


def test_extraction_from_a_file_into_an_empty_directory(tmp_path: Path) -> None:
    path = tmp_path / "ctx.tar.gz"
    path.write_bytes(archive(file("a/b/c.txt", b"abc")))
    (tmp_path / "dest").mkdir()
    assert extract_archive(path, tmp_path / "dest") == 3
    assert (tmp_path / "dest" / "a" / "b" / "c.txt").read_bytes() == b"abc"


def test_setuid_setgid_and_sticky_bits_are_dropped(tmp_path: Path) -> None:
    data = archive(file("suid", b"#!/bin/sh\n", mode=0o7777), file("gw", b"", mode=0o666))
    extract_archive(data, tmp_path / "dest")
    assert stat.S_IMODE((tmp_path / "dest" / "suid").stat().st_mode) == 0o755 & ~umask()
    assert stat.S_IMODE((tmp_path / "dest" / "gw").stat().st_mode) == 0o644 & ~umask()


def test_extraction_into_a_non_empty_directory_is_refused(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not empty"):
        extract_archive(archive(file("keep.txt", b"theirs"), file("new.txt")), dest)
    assert os.listdir(dest) == ["keep.txt"]
    assert (dest / "keep.txt").read_text() == "mine"


def test_extraction_into_a_symlink_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "dest").symlink_to("real")
    with pytest.raises(OSError):
        extract_archive(archive(file("a.py")), tmp_path / "dest")
    assert list((tmp_path / "real").iterdir()) == []


@pytest.mark.parametrize("case", CRAFTED, ids=list(CRAFTED))
def test_extraction_refuses_crafted_archives_and_writes_nothing(tmp_path: Path,
                                                                case: str) -> None:
    crafted = CRAFTED[case]
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_text("keep")
    before = snapshot(tmp_path)
    with pytest.raises(ContextError) as err:
        extract_archive(crafted.build(), tmp_path / "dest", crafted.limits)
    assert err.value.member == crafted.member
    assert snapshot(tmp_path) == before  # not even dest was made


# --- reading one file without unpacking -----------------------------------------------------
def test_one_file_is_read_from_an_archive_without_unpacking_it(tmp_path: Path) -> None:
    data = archive(folder("pkg"), file("train.py", b"import torch\n"),
                   file("pkg/model.py", b"x" * 100), link("alias.py", "train.py"),
                   link("copy.py", "train.py", tarfile.LNKTYPE))
    assert read_file(data, "train.py", 1 << 20) == b"import torch\n"
    assert read_file(data, "./pkg//model.py", 10) == b"x" * 10
    (tmp_path / "ctx.tar.gz").write_bytes(data)
    assert read_file(tmp_path / "ctx.tar.gz", "pkg/model.py", 1000) == b"x" * 100
    # Only a regular file: not a directory, a link to one, or what is not there.
    for path in ("pkg", "alias.py", "copy.py", "missing.py", "pkg/missing.py"):
        assert read_file(data, path, 100) is None, path


@pytest.mark.parametrize("case", ["dotdot", "absolute"])
def test_reading_a_file_refuses_a_crafted_archive_as_the_check_does(case: str) -> None:
    crafted = CRAFTED[case]
    with pytest.raises(ContextError) as err:
        read_file(crafted.build(), "anything.py", 100, crafted.limits)
    assert err.value.member == crafted.member


# --- random archives ------------------------------------------------------------------------
# Mostly plain names, so that many archives pass and their links get followed.
names = st.lists(st.sampled_from(["a", "b", "c"] * 4 + ["..", "."]), min_size=1,
                 max_size=4).map("/".join)
targets = st.one_of(names, names, names, names.map(lambda n: n + "/"),
                    names.map(lambda n: "/" + n))
members = st.tuples(st.sampled_from(["file", "dir", "symlink", "symlink", "hardlink"]), names,
                    targets)


def build(spec: list[tuple[str, str, str]]) -> bytes:
    made: list[Member] = []
    for kind, name, target in spec:
        if kind == "file":
            made.append(file(name, name.encode()))
        elif kind == "dir":
            made.append(folder(name))
        else:
            made.append(link(name, target, tarfile.SYMTYPE if kind == "symlink"
                             else tarfile.LNKTYPE))
    return archive(*made)


def inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root + os.sep)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(members, min_size=1, max_size=8))
def test_whatever_is_accepted_extracts_inside(spec: list[tuple[str, str, str]]) -> None:
    try:
        data = build(spec)
    except (ValueError, tarfile.TarError):
        return  # a name tarfile itself will not write
    base = tempfile.mkdtemp()
    try:
        parent = Path(base)
        (parent / "outside").mkdir()
        (parent / "outside" / "secret").write_text("keep")
        before = snapshot(parent)
        try:
            written = extract_archive(data, parent / "dest")
        except ContextError as e:
            assert e.member is not None
            assert snapshot(parent) == before
            with pytest.raises(ContextError):
                check_archive(data)
            return
        assert written == check_archive(data)
        assert {k: v for k, v in snapshot(parent).items()
                if not k.startswith("dest")} == before
        root = os.path.realpath(parent / "dest")
        for dirpath, dirnames, filenames in os.walk(root):
            for entry in dirnames + filenames:
                assert inside(os.path.realpath(os.path.join(dirpath, entry)), root), (
                    entry, os.readlink(os.path.join(dirpath, entry)))
    finally:
        shutil.rmtree(base)
