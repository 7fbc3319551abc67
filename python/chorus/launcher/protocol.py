"""The line protocol between chorusrun's elastic driver and the ranks it started, written once and
used by both ends (the driver in chorus.launcher.elastic, the ranks in chorus.elastic.driver_link).

One TCP connection per rank, a message per line of text, its words separated by spaces; the last
field of `bye` and of `failed` may hold spaces. A rank sends:

    hello TOKEN RANK SIZE HOST PID   first, with the job's token (CHORUS_ELASTIC_DRIVER's):
                                     the driver drops a connection that does not present it
    commit NUMBER                    rank 0, at each commit of the state
    resumed NUMBER                   rank 0, once the ranks restored commit NUMBER
    growing NUMBER                   rank 0, as the ranks begin to grow in place at commit NUMBER
    grown NUMBER SIZE                rank 0, once the ranks grown in place (and the ones they
                                     added) took commit NUMBER: SIZE ranks now
    bye done                         how it leaves: training finished,
    bye restart REASON               left so that the job starts again (new hosts, a failure),
    bye failed TEXT                  or an error of the training script
    lost HOW REASON                  a collective failed and this rank waits for the driver's
                                     word (HOW: in-place, it can go on in this process; restart)
    address WORLD HEX                worlds without MPI (CHORUS_ELASTIC_WORLDS=ucx): this rank's
                                     address in world WORLD, once the driver said `open WORLD`
    shut                             worlds without MPI, as the process ends: chorus shut down
                                     here; the rank waits for `close` before closing its worlds

and the driver sends:

    hosts-updated NUMBER KIND        the usable hosts changed (KIND: added, removed, changed)
    grow NUMBER COUNT HOSTS          hosts came back that this launch holds: at the next commit
                                     add COUNT ranks on HOSTS (host,host,...: one a rank) in
                                     place (chorus_grow), or leave for a restart when that fails
    reform R0,R1,...                 to a rank that said lost: go on in this process, over these
                                     ranks of the current world (R0 becomes rank 0)
    leave                            to a rank that said lost: leave, for a restart
    peer-lost EPOCH RANK             rank RANK of the world formed EPOCH times in place (0: the
                                     first) is gone: fail what waits for it now
    open WORLD                       worlds without MPI: to a rank that said hello or lost, go
                                     on in this process in world WORLD: open it, send its address
    world WORLD RANK SIZE HEX,...    world WORLD's ranks' addresses: start chorus on it as rank
                                     RANK of SIZE
    close WORLD                      every rank is done with the worlds before WORLD (all of them
                                     once every rank said shut): close them

A rank that disappears without a bye has failed: that is how the driver tells the host that
failed from the hosts whose ranks it stopped. Standard library only: the launcher imports this
module without the rest of the chorus package."""
import collections

# CHORUS_ELASTIC_DRIVER=TOKEN@ADDRESS:PORT: how a rank finds the driver that started it.
ENVIRONMENT = "CHORUS_ELASTIC_DRIVER"

Message = collections.namedtuple("Message", "kind fields")

# kind -> the number of fields; the last takes the rest of the line where marked with '+'.
_SHAPES = {"hello": 5, "commit": 1, "resumed": 1, "growing": 1, "grown": 2, "bye": "1+", "lost": "1+",
           "hosts-updated": 2, "grow": 3, "reform": 1, "leave": 0, "peer-lost": 2,
           "address": 2, "shut": 0, "open": 1, "world": 4, "close": 1}


def driver_address(token, address):
    """The value of CHORUS_ELASTIC_DRIVER for the driver at ADDRESS:PORT with `token`."""
    return f"{token}@{address}"


def split_driver_address(value):
    """(token, host, port) from CHORUS_ELASTIC_DRIVER's value; ValueError when malformed."""
    token, _, address = value.rpartition("@")
    host, _, port = address.rpartition(":")
    if not token or not host or not port.isdigit():
        raise ValueError(f"{ENVIRONMENT}={value!r} is not TOKEN@ADDRESS:PORT")
    return token, host, int(port)


def _line(kind, *fields):
    return " ".join([kind] + [str(f).replace("\n", " ") for f in fields]) + "\n"


def hello(token, rank, size, host, pid):
    return _line("hello", token, rank, size, host, pid)


def commit(number):
    return _line("commit", number)


def resumed(number):
    return _line("resumed", number)


def growing(number):
    return _line("growing", number)


def grown(number, size):
    return _line("grown", number, size)


def bye(how, text=""):
    """how: 'done', 'restart' (text: the reason) or 'failed' (text: the error)."""
    return _line("bye", how, text) if text else _line("bye", how)


def hosts_updated(number, kind):
    return _line("hosts-updated", number, kind)


def grow(number, hosts):
    """Add a rank on each of `hosts` (a list, a host once per rank)."""
    return _line("grow", number, len(hosts), ",".join(hosts))


def lost(how, reason):
    """how: 'in-place' (this rank can go on in its process) or 'restart'."""
    return _line("lost", how, reason)


def reform(ranks):
    return _line("reform", ",".join(str(r) for r in ranks))


def leave():
    return _line("leave")


def peer_lost(epoch, rank):
    return _line("peer-lost", epoch, rank)


def address(world, hex_address):
    return _line("address", world, hex_address)


def shut():
    return _line("shut")


def open_world(world):
    return _line("open", world)


def world_table(world, rank, hex_addresses):
    """World `world`'s table for rank `rank`: every rank's address, in rank order."""
    return _line("world", world, rank, len(hex_addresses), ",".join(hex_addresses))


def close(world):
    return _line("close", world)


def parse(line):
    """The Message of one line (without its newline), or None when it is not one: a peer that
    speaks otherwise is not one of the job's."""
    words = line.strip().split(" ")
    kind, rest = words[0], words[1:]
    shape = _SHAPES.get(kind)
    if shape is None:
        return None
    if isinstance(shape, str):  # "N+": N fields at least, the last one keeps its spaces
        least = int(shape[:-1])
        if len(rest) < least:
            return None
        fields = rest[:least - 1] + [" ".join(rest[least - 1:])]
        if kind in ("bye", "lost"):
            how, _, text = fields[0].partition(" ")
            fields = [how, text]
        return Message(kind, fields)
    if len(rest) != shape:
        return None
    numbered = ("commit", "resumed", "growing", "hosts-updated", "address", "open", "close")
    if kind in numbered and not rest[0].lstrip("-").isdigit():
        return None
    if kind == "grown" and not (rest[0].lstrip("-").isdigit() and rest[1].isdigit()):
        return None
    if kind == "grow" and not (rest[0].isdigit() and rest[1].isdigit() and
                               len(rest[2].split(",")) == int(rest[1])):
        return None
    if kind == "peer-lost" and not (rest[0].isdigit() and rest[1].isdigit()):
        return None
    if kind == "hello" and not (rest[1].isdigit() and rest[2].isdigit()):
        return None
    if kind == "reform" and not all(r.isdigit() for r in rest[0].split(",")):
        return None
    if kind == "world" and not (rest[0].isdigit() and rest[1].isdigit() and rest[2].isdigit() and
                                len(rest[3].split(",")) == int(rest[2]) > int(rest[1])):
        return None
    return Message(kind, rest)
