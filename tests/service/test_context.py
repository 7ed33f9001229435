"""Context archives: unsafe members are refused by name, sizes are limited."""

from __future__ import annotations

import io
import tarfile

import pytest

from det_hub.service.context import ContextError, check_context


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
    assert check_context(data) == 9 + 100


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
        check_context(archive(file("ok.py"), member))
    assert fragment in str(err.value)
    assert repr(member[0].name) in str(err.value)
    assert not err.value.too_large


def test_device_files_are_refused() -> None:
    info = tarfile.TarInfo("dev")
    info.type = tarfile.CHRTYPE
    with pytest.raises(ContextError, match="not a regular file"):
        check_context(archive((info, None)))


def test_size_limit_counts_unpacked_bytes() -> None:
    data = archive(file("a.bin", b"\0" * 600), file("b.bin", b"\0" * 600))
    assert len(data) < 600  # compresses well; the limit is on what unpacks
    with pytest.raises(ContextError) as err:
        check_context(data, limit=1000)
    assert err.value.too_large


def test_garbage_is_not_an_archive() -> None:
    with pytest.raises(ContextError, match="not a readable tar archive"):
        check_context(b"definitely not a tarball")
