"""Context archives at upload: unsafe members are refused by name, sizes are limited, and a
refusal becomes the API's answer (400 naming the member, 413 for a size bound)."""

from __future__ import annotations

import base64
import io
import tarfile
from pathlib import Path

import pytest

from det_hub.archive import ContextError, ContextLimits, check_archive, extract_archive
from det_hub.client import pack_context
from det_hub.service.context import decode_context
from det_hub.service.errors import BadRequest, TooLarge


def archive(*members: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def file(name: str, data: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info, None


def test_a_normal_context_passes_and_reports_its_size() -> None:
    data = archive(file("train.py", b"print(1)\n"), file("pkg/model.py", b"x" * 100),
                   link("pkg/alias.py", "model.py"))
    assert check_archive(data) == 9 + 100


def test_what_pack_context_makes_passes(tmp_path: Path) -> None:
    src = tmp_path / "model"
    (src / "pkg" / "data").mkdir(parents=True)
    (src / "train.py").write_text("print('train')\n")
    (src / "pkg" / "net.py").write_text("W = 1\n")
    (src / "pkg" / "data" / "rows.csv").write_text("a,b\n1,2\n")
    (src / "pkg" / "alias.py").symlink_to("../train.py")
    (src / "datalink").symlink_to("pkg/data")
    packed = pack_context(src)  # links followed: alias.py and datalink/ hold copies
    assert check_archive(packed) == 15 + 6 + 8 + 15 + 8
    out = tmp_path / "out"
    assert extract_archive(packed, out) == 15 + 6 + 8 + 15 + 8
    assert (out / "pkg" / "alias.py").read_text() == "print('train')\n"
    assert (out / "datalink" / "rows.csv").read_text() == "a,b\n1,2\n"


@pytest.mark.parametrize(("member", "fragment"), [
    (file("/etc/passwd"), "absolute path"),
    (file("../outside.py"), "outside the context"),
    (file("pkg/../../outside.py"), "outside the context"),
    (link("evil", "/etc/passwd"), "outside the context"),
    (link("pkg/evil", "../../secret"), "outside the context"),
    (link("hard", "../secret", tarfile.LNKTYPE), "outside the context"),
])
def test_unsafe_members_are_refused_by_name(member, fragment: str) -> None:
    with pytest.raises(ContextError) as err:
        check_archive(archive(file("ok.py"), member))
    assert fragment in str(err.value)
    assert repr(member[0].name) in str(err.value)
    assert err.value.member == member[0].name
    assert not err.value.too_large


def test_device_files_are_refused() -> None:
    info = tarfile.TarInfo("dev")
    info.type = tarfile.CHRTYPE
    with pytest.raises(ContextError, match="not a regular file") as err:
        check_archive(archive((info, None)))
    assert err.value.member == "dev"


def test_size_limit_counts_unpacked_bytes() -> None:
    data = archive(file("a.bin", b"\0" * 600), file("b.bin", b"\0" * 600))
    assert len(data) < 600  # compresses well; the limit is on what unpacks
    assert check_archive(data, ContextLimits(max_bytes=1200)) == 1200
    with pytest.raises(ContextError) as err:
        check_archive(data, ContextLimits(max_bytes=1000))
    assert err.value.too_large
    assert err.value.member == "b.bin"
    assert "'b.bin'" in str(err.value)


@pytest.mark.parametrize("mode", ["w", "w:bz2", "w:xz"])
def test_plain_bzip2_and_xz_archives_are_read_too(mode: str) -> None:
    def packed(*members: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode=mode) as tar:
            for info, data in members:
                tar.addfile(info, io.BytesIO(data) if data is not None else None)
        return buf.getvalue()

    assert check_archive(packed(file("train.py", b"print(1)\n"))) == 9
    with pytest.raises(ContextError) as err:
        check_archive(packed(file("train.py"), link("evil", "../x")))
    assert err.value.member == "evil"


def test_garbage_is_not_an_archive() -> None:
    with pytest.raises(ContextError, match="not a readable tar archive") as err:
        check_archive(b"definitely not a tarball")
    assert err.value.member is None


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_members"):
        ContextLimits(max_members=0)


def encoded(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_the_api_gets_the_archive_back_when_it_is_good() -> None:
    data = archive(file("train.py", b"print(1)\n"))
    assert decode_context(encoded(data), ContextLimits()) == data


def test_an_unsafe_member_is_a_bad_request_naming_it() -> None:
    with pytest.raises(BadRequest) as err:
        decode_context(encoded(archive(file("ok.py"), link("evil", "/etc/passwd"))),
                       ContextLimits())
    assert err.value.status_code == 400
    assert "'evil'" in err.value.message
    assert err.value.details == [{"member": "evil", "message": err.value.message}]


def test_a_size_bound_is_too_large() -> None:
    data = archive(file("a.bin", b"\0" * 600), file("b.bin", b"\0" * 600))
    with pytest.raises(TooLarge) as err:
        decode_context(encoded(data), ContextLimits(max_bytes=1000))
    assert err.value.status_code == 413
    assert "'b.bin'" in err.value.message


def test_bad_base64_and_garbage_are_bad_requests() -> None:
    with pytest.raises(BadRequest, match="not valid base64"):
        decode_context("not base64!", ContextLimits())
    with pytest.raises(BadRequest, match="not a readable tar archive") as err:
        decode_context(encoded(b"definitely not a tarball"), ContextLimits())
    assert err.value.details == []
