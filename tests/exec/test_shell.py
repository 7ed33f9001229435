"""The shell task's SSH server, driven by the system OpenSSH client like ``det-hub shell open``."""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import shutil
import socket
import struct
import termios
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import asyncssh
import pytest

from det_hub.exec.shell import generate_keypair, serve

pytestmark = pytest.mark.skipif(
    shutil.which("ssh") is None or shutil.which("scp") is None,
    reason="needs the OpenSSH client (ssh, scp)",
)

HOST = "127.0.0.1"
TIMEOUT_S = 30.0

# -F /dev/null: neither the user's nor the system's ssh_config gets a say.
CLIENT_OPTIONS = [
    "-F", "/dev/null",
    "-o", "StrictHostKeyChecking=no",
    "-o", "UserKnownHostsFile=/dev/null",
    "-o", "BatchMode=yes",
    "-o", "IdentitiesOnly=yes",
    "-o", "LogLevel=ERROR",
]  # fmt: skip


@pytest.fixture(autouse=True)
def no_errors_logged(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Fail a test whose session logged an error (asyncio callbacks, asyncssh tasks)."""
    yield
    errors = [r.getMessage() for r in caplog.get_records("call") if r.levelno >= logging.ERROR]
    assert not errors


@dataclass
class Server:
    port: int
    key_file: Path
    """The authorized private key, mode 0600."""


def write_key(path: Path, private_key: str) -> Path:
    path.write_text(private_key)
    path.chmod(0o600)
    return path


@pytest.fixture
async def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Server]:
    """A server on 127.0.0.1 whose sessions run POSIX sh, whatever the tester's $SHELL."""
    monkeypatch.setenv("SHELL", "/bin/sh")
    private_key, public_key = generate_keypair()
    acceptor, port = await serve(public_key, HOST, 0)
    try:
        yield Server(port, write_key(tmp_path / "id_ed25519", private_key))
    finally:
        acceptor.close()
        await acceptor.wait_closed()


def ssh_args(server: Server, *args: str, key_file: Path | None = None) -> list[str]:
    key = key_file or server.key_file
    return ["ssh", "-i", str(key), "-p", str(server.port), *CLIENT_OPTIONS, *args]


async def run(args: Sequence[str], stdin: bytes = b"") -> tuple[int, bytes, bytes]:
    """Run a client command to completion: (exit code, stdout, stderr)."""
    proc = await asyncio.create_subprocess_exec(
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin), TIMEOUT_S)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return proc.returncode, out, err


async def wait_until(check: Callable[[], bool], timeout: float) -> bool:
    """Poll ``check()`` until it is true (True) or ``timeout`` has passed (False)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def eventually(check: Callable[[], bool], what: str) -> None:
    if not await wait_until(check, TIMEOUT_S):
        pytest.fail(f"timed out waiting for {what}")


# ---------------------------------------------------------------------------------------------
# Commands and authentication
# ---------------------------------------------------------------------------------------------


async def test_command_keeps_stdout_stderr_apart_and_returns_exit_status(server: Server) -> None:
    code, out, err = await run(ssh_args(server, HOST, "echo out; echo err >&2; exit 3"))

    assert (code, out, err) == (3, b"out\n", b"err\n")


async def test_command_input_reaches_the_command_whole(server: Server) -> None:
    data = os.urandom(3 * 1024 * 1024)

    code, out, _ = await run(ssh_args(server, HOST, "cat"), stdin=data)

    assert code == 0
    assert out == data


async def test_a_key_other_than_the_authorized_one_is_refused(
    server: Server, tmp_path: Path
) -> None:
    other_key = write_key(tmp_path / "other", generate_keypair()[0])
    marker = tmp_path / "ran"

    code, _, err = await run(ssh_args(server, HOST, f"touch {marker}", key_file=other_key))

    assert code == 255
    assert b"Permission denied" in err
    assert not marker.exists()


async def test_passwords_are_not_accepted(server: Server) -> None:
    with pytest.raises(asyncssh.PermissionDenied):
        await asyncio.wait_for(
            asyncssh.connect(
                HOST,
                server.port,
                username="anyone",
                password="secret",
                client_keys=None,
                agent_path=None,
                known_hosts=None,
            ),
            TIMEOUT_S,
        )


async def test_session_has_the_server_environment_and_working_directory(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DET_HUB_SHELL_TEST", "task variable")
    monkeypatch.chdir(tmp_path)

    code, out, _ = await run(ssh_args(server, HOST, 'echo "$DET_HUB_SHELL_TEST"; pwd'))

    assert code == 0
    assert out.decode().splitlines() == ["task variable", str(tmp_path)]


async def test_closing_the_connection_hangs_up_the_session(server: Server, tmp_path: Path) -> None:
    hung_up = tmp_path / "hung-up"
    script = f'trap "echo SIGHUP > {hung_up}; exit 0" HUP; echo started; sleep 60 & wait'
    client = await asyncio.create_subprocess_exec(
        *ssh_args(server, HOST, script),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert client.stdout is not None
        assert await asyncio.wait_for(client.stdout.readline(), TIMEOUT_S) == b"started\n"
    finally:
        client.kill()
        await asyncio.wait_for(client.wait(), TIMEOUT_S)

    await eventually(hung_up.exists, "the session's shell to get SIGHUP")
    await eventually(lambda: hung_up.read_text() == "SIGHUP\n", "the trap to finish writing")


# ---------------------------------------------------------------------------------------------
# Interactive sessions on a pseudo-terminal
# ---------------------------------------------------------------------------------------------


def set_window_size(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def take_controlling_terminal() -> None:
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    """The ``ssh`` client on a pseudo-terminal of its own, as a user's terminal runs it."""

    def __init__(self, proc: asyncio.subprocess.Process, master: int) -> None:
        self.proc = proc
        self.master = master
        self.output = bytearray()
        self.closed = False
        asyncio.get_running_loop().add_reader(master, self._read)

    @classmethod
    async def start(cls, args: Sequence[str], rows: int, cols: int, term: str) -> Terminal:
        master, slave = os.openpty()
        try:
            set_window_size(slave, rows, cols)
            proc = await asyncio.create_subprocess_exec(
                *args,
                stdin=slave,
                stdout=slave,
                stderr=slave,
                env={**os.environ, "TERM": term},
                start_new_session=True,
                preexec_fn=take_controlling_terminal,
            )
        finally:
            os.close(slave)
        os.set_blocking(master, False)
        return cls(proc, master)

    def _read(self) -> None:
        try:
            data = os.read(self.master, 65536)
        except BlockingIOError:
            return
        except OSError:  # EIO: the client has exited and closed the terminal
            data = b""
        if data:
            self.output += data
        else:
            self.closed = True
            asyncio.get_running_loop().remove_reader(self.master)

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def resize(self, rows: int, cols: int) -> None:
        set_window_size(self.master, rows, cols)  # the kernel sends ssh SIGWINCH

    async def shows(self, text: str, timeout: float) -> bool:
        """Whether ``text`` appears in the output within ``timeout`` seconds."""
        return await wait_until(lambda: text.encode() in self.output, timeout)

    async def exit_code(self) -> int:
        return await asyncio.wait_for(self.proc.wait(), TIMEOUT_S)

    async def close(self) -> None:
        if not self.closed:
            asyncio.get_running_loop().remove_reader(self.master)
        os.close(self.master)
        if self.proc.returncode is None:
            self.proc.kill()
            await asyncio.wait_for(self.proc.wait(), TIMEOUT_S)


StartTerminal = Callable[[Sequence[str], int, int], Awaitable[Terminal]]


@pytest.fixture
async def start_terminal() -> AsyncIterator[StartTerminal]:
    """Start ``ssh`` on a terminal of the given rows and columns, with TERM=xterm-256color."""
    started: list[Terminal] = []

    async def start(args: Sequence[str], rows: int, cols: int) -> Terminal:
        terminal = await Terminal.start(args, rows, cols, term="xterm-256color")
        started.append(terminal)
        return terminal

    yield start
    for terminal in started:
        await terminal.close()


async def test_pty_session_has_the_clients_terminal_and_exit_status(
    server: Server, start_terminal: StartTerminal
) -> None:
    terminal = await start_terminal(ssh_args(server, "-tt", HOST), 30, 100)

    terminal.type('stty size; echo "term=$TERM"; tty; exit 5\n')

    assert await terminal.exit_code() == 5
    await eventually(lambda: terminal.closed, "the client's terminal to close")
    output = terminal.output.decode(errors="replace")
    assert "30 100" in output
    assert "term=xterm-256color" in output
    assert "/dev/pts/" in output


async def test_pty_session_follows_window_size_changes(
    server: Server, start_terminal: StartTerminal
) -> None:
    terminal = await start_terminal(ssh_args(server, "-tt", HOST), 30, 100)
    terminal.type("stty size\n")
    assert await terminal.shows("30 100", TIMEOUT_S)

    terminal.resize(40, 120)
    # ssh may read its input before its SIGWINCH: ask again until the new size shows.
    for _ in range(int(TIMEOUT_S / 0.5)):
        terminal.type("stty size\n")
        if await terminal.shows("40 120", 0.5):
            break
    else:
        pytest.fail("the new window size never reached the session")

    terminal.type("exit 0\n")
    assert await terminal.exit_code() == 0


# ---------------------------------------------------------------------------------------------
# File transfer and forwarding
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["sftp", "scp"])
async def test_scp_uploads_a_file_intact(server: Server, tmp_path: Path, protocol: str) -> None:
    source = tmp_path / "upload.bin"
    source.write_bytes(os.urandom(512 * 1024 + 7))
    target = tmp_path / "uploaded" / "copy.bin"
    target.parent.mkdir()
    legacy = ["-O"] if protocol == "scp" else []

    code, _, err = await run(
        [
            "scp",
            *legacy,
            "-i",
            str(server.key_file),
            "-P",
            str(server.port),
            *CLIENT_OPTIONS,
            str(source),
            f"{HOST}:{target}",
        ]
    )

    assert code == 0, err
    assert target.read_bytes() == source.read_bytes()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


async def test_local_port_forward_reaches_a_server_on_the_task(server: Server) -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.readline())
        await writer.drain()
        writer.close()

    echo_server = await asyncio.start_server(echo, HOST, 0)
    echo_port = echo_server.sockets[0].getsockname()[1]
    forward_port = free_port()
    client = await asyncio.create_subprocess_exec(
        *ssh_args(
            server,
            "-N",
            "-o",
            "ExitOnForwardFailure=yes",
            "-L",
            f"{HOST}:{forward_port}:{HOST}:{echo_port}",
            HOST,
        ),
        stdin=asyncio.subprocess.DEVNULL,
    )
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TIMEOUT_S
        while True:  # the client listens once it has logged in
            assert client.returncode is None, "ssh -L exited"
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(HOST, forward_port), TIMEOUT_S
                )
                break
            except ConnectionRefusedError:
                assert loop.time() < deadline, "ssh -L never listened"
                await asyncio.sleep(0.05)
        writer.write(b"through the tunnel\n")
        reply = await asyncio.wait_for(reader.readline(), TIMEOUT_S)
        writer.close()
    finally:
        client.terminate()
        await asyncio.wait_for(client.wait(), TIMEOUT_S)
        echo_server.close()
        await echo_server.wait_closed()

    assert reply == b"through the tunnel\n"


# ---------------------------------------------------------------------------------------------
# Keys
# ---------------------------------------------------------------------------------------------


def test_generate_keypair_gives_a_matching_openssh_pair() -> None:
    private_key, public_key = generate_keypair()

    key = asyncssh.import_private_key(private_key)
    assert private_key.startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    assert public_key.startswith("ssh-ed25519 ")
    assert "\n" not in public_key
    assert key.export_public_key("openssh").decode().strip() == public_key
    assert generate_keypair()[1] != public_key


@pytest.mark.parametrize(
    "authorized_key",
    ["", "not a key", "\n".join([generate_keypair()[1], generate_keypair()[1]])],
    ids=["empty", "garbage", "two-keys"],
)
async def test_serve_refuses_anything_but_one_public_key_line(authorized_key: str) -> None:
    with pytest.raises(ValueError, match="authorized_key"):
        await serve(authorized_key, HOST)
