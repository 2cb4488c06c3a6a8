"""What a group's ranks send each other, seen from outside them: the packets on the group's
loopback, read by the grader from a packet socket the group's leader opened in the group's
network namespace before any rank started (``sandbox.ranks.group.open_capture``; no rank
can reach it, patch it or switch it off).

Every byte between two ranks travels on gloo's TCP connections, whose stream is a sequence
of messages, each a 48-byte preamble (six 64-bit words: the message's length, its opcode,
its *slot*, offsets and the payload's length) and, for the two send opcodes, the payload
(gloo's ``transport/tcp/pair.h``, ``struct Op``). The slot's top byte tells what sent it:
0 for ``send``/``recv`` (the slot is the user's tag), another value for each built-in
collective (the rest of the slot numbers the call). So the grader counts, per rank and
between checkpoints, the payload bytes of point-to-point messages and of each collective,
the collective calls (distinct slots), the bytes on the rendezvous store's connections after
the rendezvous (a channel no grader module uses), and bytes that are no gloo message at all
(written to gloo's sockets past gloo). A connection's client writes 8 bytes before its
first message (the pair's identity), which are skipped. Each point-to-point message is also
listed with its receiver and its place in the group's traffic as a whole (the packet that
completed it: the loopback carries every connection's packets in one order), so a grader can
check the order of sends between ranks, which no rank can rewrite.

Verified on this machine's torch (2.13) by capturing each operation alone: send/recv slot
prefix 0; all-reduce 4 (reduce-scatter is run as an all-reduce: 2(n-1)/n of the input);
all-gather 2; reduce 3; broadcast 6; barrier 7 (no payload); all-to-all 8 (the rows sent to
the other ranks, the rank's own share staying). ``tests/test_rank_wire.py``
checks the prefixes and byte counts against the formulas, so a torch whose gloo changed
fails there, not in a student's grade.
"""
from __future__ import annotations

import bisect
import socket
import struct

#: Slot prefixes (the slot's top byte) of gloo's messages, by what sends them.
PREFIXES = {0: "send/recv", 2: "all_gather", 3: "reduce", 4: "all_reduce", 6: "broadcast", 7: "barrier",
            8: "all_to_all"}
PREAMBLE = struct.Struct("<6Q")
SEND_BUFFER, SEND_UNBOUND_BUFFER, NOTIFY_SEND_READY, NOTIFY_RECV_READY = range(4)
CLIENT_HELLO = 8  # bytes a connecting side writes before its first message
PACKET_STATISTICS = 6
SOL_PACKET = 263
#: The most a grader keeps of one connection's stream while waiting for a message's end.
MAX_PENDING = 64 * 1024 * 1024
#: The most point-to-point messages listed per rank between two cuts (counted past that).
MAX_LISTED = 4096


def empty_counts() -> dict:
    # calls: name -> {slot: bytes}; sends: [packet number, connection, payload bytes] per p2p message
    return {"p2p": 0, "collectives": {}, "calls": {}, "store": 0, "garbage": 0, "messages": 0, "sends": [],
            "unlisted": 0}


class _Stream:
    """One direction of one TCP connection, reassembled and cut into gloo messages."""

    def __init__(self, client: bool):
        self.next_seq = None
        self.buffer = bytearray()
        self.skip = CLIENT_HELLO if client else 0
        self.out_of_order = {}
        self.broken = False
        self.consumed = 0  # bytes of the stream already cut off the buffer's front
        self.marks = []  # (the stream's length after a packet's bytes, that packet's number)

    def completed_at(self, end: int) -> int:
        """The number of the packet that brought the stream's byte ``end - 1``."""
        k = bisect.bisect_left(self.marks, (end, -1))
        return self.marks[min(k, len(self.marks) - 1)][1] if self.marks else 0

    def forget_before(self, position: int) -> None:
        """Drop the marks of bytes before ``position`` (all cut off the buffer), keeping the last."""
        del self.marks[:min(bisect.bisect_right(self.marks, (position, float("inf"))), len(self.marks) - 1)]

    def add(self, seq: int, payload: bytes, packet: int = 0) -> None:
        if self.next_seq is None:
            self.next_seq = seq
        offset = (seq - self.next_seq) % 2**32
        if offset >= 2**31:  # a retransmission of bytes already seen
            overlap = (self.next_seq - seq) % 2**32
            payload = payload[overlap:] if overlap < len(payload) else b""
            offset = 0
        if offset:
            self.out_of_order[seq] = payload
            return
        self.buffer += payload
        self.next_seq = (self.next_seq + len(payload)) % 2**32
        while self.next_seq in self.out_of_order:
            more = self.out_of_order.pop(self.next_seq)
            self.buffer += more
            self.next_seq = (self.next_seq + len(more)) % 2**32
        self.marks.append((self.consumed + len(self.buffer), packet))
        if len(self.buffer) > MAX_PENDING:
            self.broken = True
            self.consumed += len(self.buffer)
            self.buffer.clear()


class Capture:
    """The group's traffic, counted per rank between the grader's cuts (:meth:`take`).
    ``owner[(local port, remote port)]`` names the rank whose connection that is, learned
    from each rank's first message, sent before its student code ran. A connection is keyed
    by both ports, not by its local port: Linux gives connections to different peers the
    same local port when it can, so two ranks' connections may share one, and keyed by port
    one rank would be charged with the other's bytes. ``store_port`` is the rendezvous
    store's."""

    def __init__(self, sock: socket.socket, world_size: int, store_port: int, shared: bool = False):
        self.sock, self.world_size, self.store_port = sock, world_size, store_port
        #: the machine's loopback (no namespace of the group's own): other processes' traffic
        #: passes there too, and only the ranks' connections and those into their listening
        #: sockets are kept
        self.shared = shared
        self.sock.setblocking(False)
        self.owner = {}  # (local port, remote port) -> rank
        self.listening = set()  # the ranks' listening ports (gloo's, the store's)
        self.learned = 0  # ranks that have reported
        self.streams = {}  # (sport, dport) -> _Stream
        self.clients = set()  # (sport, dport) of connections seen opening (SYN)
        self.counts = [empty_counts() for _ in range(world_size)]
        self.unowned = 0  # bytes of connections no rank reported (a socket made past the filter?)
        self.store_open = False  # store bytes are counted once every rank has met
        self.packets = 0  # packets read so far: a packet's number is its place in the group's traffic

    def learn(self, rank: int, sockets) -> None:
        """``sockets``: the rank's ``(local port, remote port)`` pairs (remote 0: listening)."""
        for local, remote in sockets:
            if remote:
                self.owner[(local, remote)] = rank
            else:
                self.listening.add(local)
        self.learned += 1
        for key in [k for k in self.streams if self._stranger(*k)]:  # every rank has said: drop the rest
            del self.streams[key]

    def _stranger(self, sport: int, dport: int) -> bool:
        """On a shared loopback once every rank has reported: a connection that is no rank's
        and goes into no rank's listening socket (another process's, which may leave from the
        same local port as a rank's connection). Never in a namespace of the group's own."""
        return (self.shared and self.learned >= self.world_size and (sport, dport) not in self.owner
                and sport not in self.listening and dport not in self.listening)

    def dropped(self) -> int:
        """Packets the kernel dropped before the grader read them (then the counts are not
        the whole traffic)."""
        try:
            raw = self.sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8)
            return struct.unpack("II", raw)[1]
        except OSError:
            return 0

    def drain(self) -> None:
        """Read every packet waiting, and count every whole message they complete."""
        touched = set()
        while True:
            try:
                data, address = self.sock.recvfrom(1 << 17)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                break
            if address[2] == socket.PACKET_OUTGOING:  # a loopback packet is seen twice
                continue
            self.packets += 1
            key = self._packet(data)
            if key is not None:
                touched.add(key)
        for key in touched:
            self._messages(key)

    def _packet(self, data: bytes):
        if len(data) < 34 or data[12:14] != b"\x08\x00":  # IPv4 over the loopback's Ethernet header
            return None
        ip = 14
        if data[ip + 9] != socket.IPPROTO_TCP:
            return None
        header = (data[ip] & 0x0F) * 4
        total = struct.unpack_from("!H", data, ip + 2)[0]
        tcp = ip + header
        sport, dport, seq = struct.unpack_from("!HHI", data, tcp)
        flags = data[tcp + 13]
        key = (sport, dport)
        if flags & 0x02 and not flags & 0x10:  # SYN without ACK: the connecting side
            self.clients.add(key)
        payload = data[tcp + (data[tcp + 12] >> 4) * 4: ip + total]
        if self._stranger(sport, dport):
            return None  # someone else's traffic on the machine's loopback
        if flags & 0x02:
            self.streams[key] = _Stream(key in self.clients)
            self.streams[key].next_seq = (seq + 1) % 2**32
            return None
        if not payload:
            return None
        stream = self.streams.get(key)
        if stream is None:
            stream = self.streams[key] = _Stream(key in self.clients)
        stream.add(seq, payload, self.packets)
        return key

    def _messages(self, key) -> None:
        sport, dport = key
        stream = self.streams[key]
        rank = self.owner.get(key)
        if rank is None:
            return  # kept until the rank that owns it says so (see take)
        counts = self.counts[rank]
        if self.store_port in (sport, dport):
            if self.store_open:
                counts["store"] += len(stream.buffer)
            stream.consumed += len(stream.buffer)
            stream.buffer.clear()
            return
        buffer = stream.buffer
        if stream.skip:
            cut = min(stream.skip, len(buffer))
            del buffer[:cut]
            stream.skip -= cut
            stream.consumed += cut
        offset = 0
        while len(buffer) - offset >= PREAMBLE.size and not stream.broken:
            nbytes, opcode, slot, _, length, _ = PREAMBLE.unpack_from(buffer, offset)
            carries = opcode in (SEND_BUFFER, SEND_UNBOUND_BUFFER)
            if opcode > NOTIFY_RECV_READY or nbytes != PREAMBLE.size + (length if carries else 0):
                stream.broken = True  # not gloo's: count the rest as garbage
                break
            if len(buffer) - offset < nbytes:
                break
            offset += nbytes
            counts["messages"] += 1
            prefix = slot >> 56
            if prefix == 0:
                counts["p2p"] += length if carries else 0
                if carries and len(counts["sends"]) < MAX_LISTED:
                    counts["sends"].append((stream.completed_at(stream.consumed + offset), key, length))
                elif carries:
                    counts["unlisted"] += 1
                continue
            name = PREFIXES.get(prefix, f"collective {prefix}")
            counts["collectives"][name] = counts["collectives"].get(name, 0) + (length if carries else 0)
            calls = counts["calls"].setdefault(name, {})
            calls[slot] = calls.get(slot, 0) + (length if carries else 0)
        if stream.broken:
            counts["garbage"] += len(buffer) - offset
            offset = len(buffer)
        del buffer[:offset]
        stream.consumed += offset
        stream.forget_before(stream.consumed)

    def take(self) -> list:
        """Drain, and return each rank's counts since the last cut (plain data: the calls as
        their number, the slots as a sorted list per collective; ``sends``, the rank's
        point-to-point messages as ``[packet number, receiving rank (None: unknown), payload
        bytes]`` in the order the group's traffic completed them, at most :data:`MAX_LISTED`,
        ``unlisted`` counting the rest)."""
        self.drain()
        out = []
        for counts in self.counts:
            sends = [[packet, self.owner.get((dport, sport)), length]
                     for packet, (sport, dport), length in sorted(counts["sends"], key=lambda e: e[0])]
            out.append({"p2p": counts["p2p"], "collectives": dict(counts["collectives"]),
                        "calls": {k: len(v) for k, v in counts["calls"].items()},
                        "call_bytes": {k: dict(v) for k, v in counts["calls"].items()},
                        "store": counts["store"], "garbage": counts["garbage"], "messages": counts["messages"],
                        "sends": sends, "unlisted": counts["unlisted"]})
        self.counts = [empty_counts() for _ in range(self.world_size)]
        return out

    def finish(self) -> int:
        """Drain once more; the bytes of connections no rank reported (a socket the
        system-call filter should have refused), which are then dropped."""
        self.drain()
        for (sport, dport), stream in self.streams.items():
            if (sport, dport) not in self.owner and not self._stranger(sport, dport):
                self.unowned += len(stream.buffer)
                stream.buffer.clear()
        return self.unowned

    def close(self) -> None:
        self.sock.close()
