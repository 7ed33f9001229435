"""The SSH server that runs inside a ``det-hub shell`` task.

A shell task's process is this server. It accepts exactly one public key (the per-task key
the master made with :func:`generate_keypair`), any user name, and runs every session as the
server process's own user, in its working directory and with its environment, which is where
the task's variables are (variables the client sends are ignored). ``det-hub shell open``
connects to it with the system ``ssh``.

What a session can do, as with a single-user ``sshd``:

* ``ssh -t host``: a login shell on a real pseudo-terminal with the client's ``TERM`` and
  window size; window-size changes, signals and the exit status are passed through.
* ``ssh host 'cmd'``: ``$SHELL -c cmd`` on pipes, stdout and stderr kept apart, the exit
  status or the fatal signal passed back.
* Each session runs in a process group of its own, sent SIGHUP when the session ends or the
  client goes away.
* ``sftp`` and ``scp`` (both protocols), on the whole file system.
* ``ssh -L``: connections from the client to any host and port the task can reach.

Passwords, keyboard-interactive and host-based logins, agent and X11 forwarding and remote
forwarding (``ssh -R``) are refused. The server is built on asyncssh, so it needs neither
``openssh-server`` nor root.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import logging
import os
import signal
import struct
import termios
import time
from typing import Any

import asyncssh

from det_hub.env_names import SHELL_PUBLIC_KEY_ENV

__all__ = ["generate_keypair", "serve"]

logger = logging.getLogger("det_hub.shell")

KEY_TYPE = "ssh-ed25519"

# After a pseudo-terminal's shell exits, how long to wait for the rest of its output. A job it
# left in the background can hold the terminal open forever; sshd likewise stops reading then.
PTY_DRAIN_GRACE_S = 1.0

_CHUNK_SIZE = 64 * 1024


def generate_keypair() -> tuple[str, str]:
    """Make a new ed25519 key pair, e.g. the key of one shell task.

    Returns:
        The private key in OpenSSH PEM text (``-----BEGIN OPENSSH PRIVATE KEY-----``), and the
        public key as one OpenSSH line (``ssh-ed25519 AAAA...``), ready for :func:`serve`.
    """
    key = asyncssh.generate_private_key(KEY_TYPE)
    private = key.export_private_key("openssh").decode("ascii")
    public = key.export_public_key("openssh").decode("ascii").strip()
    return private, public


async def serve(
    authorized_key: str,
    host: str,
    port: int = 0,
    *,
    host_key: asyncssh.SSHKey | None = None,
) -> tuple[asyncssh.SSHAcceptor, int]:
    """Start the SSH server on ``host:port`` in the running event loop.

    Args:
        authorized_key: The one public key allowed to log in, as an OpenSSH line
            (``ssh-ed25519 AAAA... comment``); authorized_keys options in front of it apply.
        host: Address to listen on.
        port: Port to listen on; 0 picks a free one.
        host_key: The server's private host key; a fresh ed25519 key when not given.

    Returns:
        The acceptor (``close()`` it to stop listening; sessions already open carry on) and
        the port it listens on.

    Raises:
        ValueError: ``authorized_key`` is not exactly one public key line.
    """
    authorized = _parse_authorized_key(authorized_key)
    acceptor = await asyncssh.create_server(
        _ShellServer,
        host,
        port,
        server_host_keys=[host_key or asyncssh.generate_private_key(KEY_TYPE)],
        authorized_client_keys=authorized,
        public_key_auth=True,
        password_auth=False,
        kbdint_auth=False,
        host_based_auth=False,
        gss_host=None,
        agent_forwarding=False,
        x11_forwarding=False,
        process_factory=_run_session,
        sftp_factory=_SFTPServer,
        allow_scp=True,
        # Sessions pass raw bytes; a pseudo-terminal does its own line editing.
        encoding=None,
        line_editor=False,
    )
    return acceptor, acceptor.get_port()


def _parse_authorized_key(line: str) -> asyncssh.SSHAuthorizedKeys:
    """The authorized_keys holding ``line`` alone, or ValueError saying what is wrong."""
    line = line.strip()
    if not line or "\n" in line:
        raise ValueError(
            "authorized_key must be exactly one OpenSSH public key line, "
            f"got {len(line.splitlines())} lines"
        )
    try:
        return asyncssh.import_authorized_keys(line)
    except ValueError as exc:  # KeyImportError is a ValueError
        raise ValueError(f"authorized_key is not an OpenSSH public key line: {exc}") from None


class _ShellServer(asyncssh.SSHServer):
    """Per-connection policy: public-key logins only, local forwarding allowed."""

    def __init__(self) -> None:
        self._conn: asyncssh.SSHServerConnection | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._conn = conn

    def begin_auth(self, username: str) -> bool:
        return True  # every user name must authenticate with the key

    def auth_completed(self) -> None:
        assert self._conn is not None
        logger.info(
            "login: user %s from %s",
            self._conn.get_extra_info("username"),
            _peer(self._conn.get_extra_info("peername")),
        )

    def connection_requested(
        self, dest_host: str, dest_port: int, orig_host: str, orig_port: int
    ) -> bool:
        logger.debug("forwarding a connection to %s:%d", dest_host, dest_port)
        return True


class _SFTPServer(asyncssh.SFTPServer):
    """asyncssh's SFTP server on the whole file system; it also serves legacy ``scp``."""

    def __init__(self, chan: asyncssh.SSHServerChannel[bytes]) -> None:
        super().__init__(chan)
        # Read now: the connection's details are gone once it has closed.
        self._user = chan.get_extra_info("username")
        self._peer = _peer(chan.get_extra_info("peername"))
        self._kind = "sftp" if chan.get_subsystem() == "sftp" else "scp"

    def exit(self) -> None:
        if self._kind == "sftp":
            # OpenSSH's scp (SFTP mode) fails without an exit status; sshd sends sftp-server's.
            self.channel.exit(0)
        logger.info("session end: user %s from %s, %s", self._user, self._peer, self._kind)


async def _run_session(process: asyncssh.SSHServerProcess[bytes]) -> None:
    """Run one shell or command session and report how it ended.

    asyncssh serves ``sftp`` and ``scp`` itself; everything else comes here.
    """
    # Read now: the connection's details are gone once it has closed.
    user = process.get_extra_info("username")
    peername = process.get_extra_info("peername")
    sockname = process.get_extra_info("sockname")
    if peername is None:
        return  # the client left before the session began
    peer = _peer(peername)
    started = time.monotonic()
    if process.subsystem:
        process.stderr.write(f"subsystem {process.subsystem!r} is not supported\n".encode())
        process.exit(1)
        return

    shell = _login_shell()
    command = process.command
    if command is None:
        # sshd's convention: a leading "-" in argv[0] makes the shell a login shell.
        argv = ["-" + os.path.basename(shell)]
    else:
        argv = [os.path.basename(shell), "-c", command]
    env = _session_env(process.term_type, shell, peername, sockname)
    use_pty = process.term_type is not None
    kind = ("shell" if command is None else "command") + (" on a pty" if use_pty else "")
    try:
        if use_pty:
            child = await _start_on_pty(process, shell, argv, env)
        else:
            child = await _start_on_pipes(process, shell, argv, env)
    except OSError as exc:
        logger.warning("session for user %s: cannot start %s: %s", user, shell, exc)
        process.stderr.write(f"cannot start {shell}: {exc}\n".encode())
        process.exit(127)
        return

    forward = asyncio.create_task(_forward_input(process, child))
    finish = asyncio.create_task(_wait_finished(process, child))
    closed = asyncio.create_task(process.channel.wait_closed())
    try:
        await asyncio.wait({finish, closed}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        closed.cancel()
        forward.cancel()
        # Whatever the session started and left running goes, as with sshd.
        _hang_up(child.process.pid)
    # _wait_finished only fails (its drain raising) once the connection is gone.
    if finish.done() and finish.exception() is None:
        outcome = _report_exit(process, finish.result())
    else:
        finish.cancel()
        outcome = "client disconnected"
    logger.info(
        "session end: user %s from %s, %s, %s after %.1fs",
        user,
        peer,
        kind,
        outcome,
        time.monotonic() - started,
    )
    await asyncio.gather(forward, return_exceptions=True)
    child.close_input()
    await child.process.wait()
    await process.wait_closed()  # also finishes asyncssh's clean-up of the output streams


@dataclasses.dataclass
class _Child:
    """A session's process, and the descriptor its input is written to."""

    process: asyncio.subprocess.Process
    input_fd: int
    """Non-blocking: the write end of the child's stdin pipe, or the pseudo-terminal master."""
    on_terminal: bool
    _input_closed: bool = dataclasses.field(default=False, init=False)

    def close_input(self) -> None:
        """Close ``input_fd`` (once): on a pipe, the child reads EOF."""
        if not self._input_closed:
            self._input_closed = True
            os.close(self.input_fd)


def _login_shell() -> str:
    """``$SHELL``, else bash, else sh: the first that can be run."""
    for candidate in (os.environ.get("SHELL"), "/bin/bash"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return "/bin/sh"


def _session_env(
    term: str | None, shell: str, peername: tuple[Any, ...], sockname: tuple[Any, ...]
) -> dict[str, str]:
    """The server's environment plus what sshd adds; variables the client sends are ignored."""
    env = dict(os.environ)
    env["SHELL"] = shell
    if term:
        env["TERM"] = term
    peer_host, peer_port = peername[:2]
    local_host, local_port = sockname[:2]
    env["SSH_CLIENT"] = f"{peer_host} {peer_port} {local_port}"
    env["SSH_CONNECTION"] = f"{peer_host} {peer_port} {local_host} {local_port}"
    return env


async def _start_on_pty(
    process: asyncssh.SSHServerProcess[bytes], shell: str, argv: list[str], env: dict[str, str]
) -> _Child:
    """Start the shell on a new pseudo-terminal; its output goes to the session's stdout."""
    master, slave = os.openpty()
    try:
        width, height, pixwidth, pixheight = process.term_size
        _set_window_size(slave, width, height, pixwidth, pixheight)
        env = {**env, "SSH_TTY": os.ttyname(slave)}
        child = await asyncio.create_subprocess_exec(
            *argv,
            executable=shell,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            start_new_session=True,
            preexec_fn=_take_controlling_terminal,
        )
    except BaseException:
        os.close(master)
        raise
    finally:
        # Only the child may hold the terminal: the master then reads EOF when it is done.
        os.close(slave)
    # asyncssh reads the output from the master and closes it; input goes to a duplicate.
    os.set_blocking(master, False)
    session_child = _Child(child, os.dup(master), on_terminal=True)
    await _redirect_output(process, session_child, stdout=master)
    return session_child


async def _start_on_pipes(
    process: asyncssh.SSHServerProcess[bytes], shell: str, argv: list[str], env: dict[str, str]
) -> _Child:
    """Start the shell on three pipes; its stdout and stderr go to the session's."""
    pipes = [os.pipe() for _ in range(3)]
    child_ends = [pipes[0][0], pipes[1][1], pipes[2][1]]
    our_ends = [pipes[0][1], pipes[1][0], pipes[2][0]]
    try:
        child = await asyncio.create_subprocess_exec(
            *argv,
            executable=shell,
            stdin=child_ends[0],
            stdout=child_ends[1],
            stderr=child_ends[2],
            env=env,
            start_new_session=True,
        )
    except BaseException:
        for fd in our_ends:
            os.close(fd)
        raise
    finally:
        for fd in child_ends:
            os.close(fd)
    os.set_blocking(our_ends[0], False)
    session_child = _Child(child, our_ends[0], on_terminal=False)
    await _redirect_output(process, session_child, stdout=our_ends[1], stderr=our_ends[2])
    return session_child


async def _redirect_output(
    process: asyncssh.SSHServerProcess[bytes],
    child: _Child,
    stdout: int,
    stderr: int | None = None,
) -> None:
    """Have asyncssh forward (and close) the child's output fds; kill the child on failure."""
    try:
        # An SSH channel has one EOF for stdout and stderr together: the first stream to end
        # must not send it. Closing the channel once both have drained says it instead.
        await process.redirect(stdout=stdout, stderr=stderr, send_eof=False)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.process.pid, signal.SIGKILL)
        child.close_input()
        raise


async def _forward_input(process: asyncssh.SSHServerProcess[bytes], child: _Child) -> None:
    """Copy the client's input to the child until EOF, applying window changes and signals.

    Written here rather than with asyncssh's ``redirect(stdin=...)``: through asyncio's pipe
    transport that can drop the end of the input when EOF arrives while a write is pending.
    """
    discard = False  # the child stopped reading: drop input, as sshd does
    while True:
        try:
            data = await process.stdin.read(_CHUNK_SIZE)
        except asyncssh.TerminalSizeChanged as change:
            if child.on_terminal:
                _set_window_size(child.input_fd, *change.term_size)
            continue
        except asyncssh.SignalReceived as received:
            _send_signal(child.process, received.signal)
            continue
        except asyncssh.BreakReceived:
            continue  # a serial-line break means nothing to a pseudo-terminal or a pipe
        if not data:
            break
        if discard:
            continue
        try:
            await _write_all(child.input_fd, data)
        except OSError:  # EPIPE from a pipe, EIO from a terminal nobody has open
            discard = True
    # A terminal stays open after the client's EOF, as with sshd; a pipe passes it on.
    if not child.on_terminal:
        child.close_input()


async def _write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to the non-blocking ``fd``, waiting whenever it is full."""
    loop = asyncio.get_running_loop()
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
            continue
        except BlockingIOError:
            pass
        writable = loop.create_future()
        loop.add_writer(fd, writable.set_result, None)
        try:
            await writable
        finally:
            loop.remove_writer(fd)


def _send_signal(child: asyncio.subprocess.Process, name: str) -> None:
    """Deliver a signal the client sent by name (``"INT"``) to the child, if it is running."""
    try:
        signum = signal.Signals["SIG" + name]
    except KeyError:
        logger.debug("ignoring unknown signal %r from the client", name)
        return
    if child.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signum)


def _take_controlling_terminal() -> None:
    """In the child, after setsid(): make its stdin terminal the controlling terminal."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def _set_window_size(fd: int, width: int, height: int, pixwidth: int, pixheight: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", height, width, pixwidth, pixheight))


async def _wait_finished(process: asyncssh.SSHServerProcess[bytes], child: _Child) -> int:
    """Wait for the child to exit and its output to reach the channel; its return code."""
    returncode = await child.process.wait()
    drained = asyncio.gather(process.stdout.drain(), process.stderr.drain())
    if child.on_terminal:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(drained, PTY_DRAIN_GRACE_S)
    else:
        # As sshd does, wait until everything holding the output pipes has closed them.
        await drained
    return returncode


def _report_exit(process: asyncssh.SSHServerProcess[bytes], returncode: int) -> str:
    """Send the child's exit status or fatal signal to the client, close the channel."""
    if returncode >= 0:
        process.exit(returncode)
        return f"exit status {returncode}"
    try:
        name = signal.Signals(-returncode).name.removeprefix("SIG")
    except ValueError:
        process.exit(128 - returncode)
        return f"killed by signal {-returncode}"
    process.exit_with_signal(name)
    return f"killed by SIG{name}"


def _hang_up(pgid: int) -> None:
    """SIGHUP the process group ``pgid``, if anything is left in it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGHUP)


def _peer(peername: tuple[Any, ...]) -> str:
    """The client's address, for the log."""
    host, port = peername[:2]
    return f"{host} port {port}"


async def _serve_task() -> int:
    """Serve the task's key on the agent's address until SIGTERM or SIGINT."""
    from det_hub.exec._serve import announce, bind_host, fail

    key = os.environ.get(SHELL_PUBLIC_KEY_ENV, "")
    if not key:
        return fail(f"{SHELL_PUBLIC_KEY_ENV} is not set: the master starts shells with one")
    acceptor, port = await serve(key, bind_host())
    print(f"det_hub: SSH server on port {port}", flush=True)
    try:
        await asyncio.to_thread(announce, port)
    except Exception as e:  # the master will send nobody here
        acceptor.close()
        return fail(f"could not tell the master the SSH server is ready: {e}")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    acceptor.close()
    return 0


def main() -> int:
    """``python3 -m det_hub.exec.shell``: what the master runs for ``det-hub shell start``."""
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    logging.getLogger("asyncssh").setLevel(logging.WARNING)  # it logs command lines at INFO
    return asyncio.run(_serve_task())


if __name__ == "__main__":
    raise SystemExit(main())
