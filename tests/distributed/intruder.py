"""A stranger at a rank's device-memory socket (the abstract `@neuronx-*-fds` unix socket through
which the ranks of a neuron process group pass each other their device memory files): it connects,
says "connected" on stdout, then either sends nothing (`silent`) or claims to be rank 1 and passes a
memory file of its own (`claim`), and holds the connection until the rank closes it.

`python intruder.py SOCKET_NAME {silent,claim} [UID]`: with UID (the caller is root), it runs as
that user from the moment it connects; an abstract socket has no file modes, any user reaches it.
"""
import array
import os
import socket
import struct
import sys

HOLD_S = 60.0  # longer than any group's timeout in the tests: a rank that waits on us never forms


def main():
    name, kind = sys.argv[1], sys.argv[2]
    if len(sys.argv) > 3:
        uid = int(sys.argv[3])
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect("\0" + name)
    if kind == "claim":
        fd = os.memfd_create("not-device-memory")
        os.ftruncate(fd, 1 << 20)
        os.pwrite(fd, b"\x7f" * (1 << 20), 0)
        s.sendmsg([struct.pack("ii", 1, 1)], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
    print("connected", flush=True)
    s.settimeout(HOLD_S)
    try:
        s.recv(1)  # returns once the rank closes the connection
    except OSError:
        pass


if __name__ == "__main__":
    main()
