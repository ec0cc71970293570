"""Run a command on a pseudo-terminal, as a person runs it in a shell: its stdout and stderr are the terminal, and it
leads the terminal's foreground process group (a Ctrl-C typed there reaches every process of that group).

    output, code = on_a_terminal([...], env=..., timeout=120)

`output`: everything the terminal showed (carriage returns kept: a progress bar redraws its line with them); `code`:
the exit code, as a shell's $? gives it (a process killed by signal N: -N)."""

import fcntl
import os
import pty
import select
import signal
import struct
import termios
import time


def on_a_terminal(command, env=None, cwd=None, timeout=120, columns=160):
    pid, master = pty.fork()
    if pid == 0:  # the child: its stdin, stdout and stderr are the terminal
        try:
            if cwd is not None:
                os.chdir(cwd)
            os.execvpe(command[0], command, env or os.environ)
        finally:
            os._exit(127)
    fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))  # rows, columns: its window
    output, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if not ready:
            continue
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: every process that had the terminal open has closed it
            break
        if not data:
            break
        output += data
    else:
        os.killpg(pid, signal.SIGKILL)
    os.close(master)
    _, status = os.waitpid(pid, 0)
    return output.decode(errors="replace"), os.waitstatus_to_exitcode(status)
