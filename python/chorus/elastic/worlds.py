"""Worlds without MPI formed through chorusrun's elastic driver (CHORUS_ELASTIC_WORLDS=ucx):
chorus over UCX, whose ranks outlive a lost peer or host. The driver starts every rank itself
and forms each world: it tells a rank to open world N (at its start, or after a failed
collective), collects every rank's address and sends each the table (protocol.py). After a
loss the survivors open the next world in their own processes, with the ranks of added hosts.
A rank keeps each world open until the driver says every rank is done with it: a closed world
looks lost to the ranks still waiting on it."""
import atexit
import os

from .. import _library as c
from .. import core
from . import driver_link
from .driver_link import DriverLink

ENVIRONMENT = "CHORUS_ELASTIC_WORLDS"  # "ucx": the driver forms worlds without MPI
# The host the driver started this rank on (ranks of one name share a host), the rank it means
# it to have in the world it first opens, and that world's size.
HOST_ENVIRONMENT = "CHORUS_ELASTIC_HOST"
RANK_ENVIRONMENT = "CHORUS_ELASTIC_RANK"
SIZE_ENVIRONMENT = "CHORUS_ELASTIC_SIZE"
# How long a rank waits for the driver's word to open its first world, and for a world's table
# (the driver waits for every member's address; a new rank's start-up takes seconds).
OPEN_WAIT_S = 120.0
TABLE_WAIT_S = 60.0
# How long a finished rank waits for every other to finish before it closes its worlds anyway.
CLOSE_WAIT_S = 30.0

_held = {}  # world number -> core.World, until every rank is done with it
first_world = None  # the number of the first world this process joined


def enabled():
    return os.environ.get(ENVIRONMENT) == "ucx"


def _failed(message):
    return core.error(c.ERR_TIMEOUT, message)


def join(link, number, parameters=None):
    """Opens world `number`, gives the driver its address and starts chorus on the table it
    sends; first closes the worlds every rank is done with."""
    for old in [n for n in _held if n < link.closed_before]:
        _held.pop(old).close()
    world = core.World(number)
    _held[number] = world
    link.address(number, world.address.hex())
    table = link.table(number, TABLE_WAIT_S)
    if table is None and link.lost_while_forming is not None:
        raise _failed(f"world {number}: rank {link.lost_while_forming} lost before the world "
                      "formed (the elastic driver saw its process end)")
    if table is None:
        raise _failed(f"world {number}: the elastic driver sent no table of addresses within "
                      f"{TABLE_WAIT_S:.0f} s")
    rank, addresses = table
    core.init_world(world, rank, len(addresses), [bytes.fromhex(a) for a in addresses],
                    host=os.environ.get(HOST_ENVIRONMENT), parameters=parameters)


def join_first(parameters=None):
    """hvd.init() under the driver: says hello, and joins the world the driver names (world 0
    at the job's start; a later one for a rank of an added host)."""
    global first_world
    atexit.register(_finish)  # before init_world registers chorus's shutdown, so after it
    link = DriverLink.from_environment()
    if link is None:
        raise _failed(f"{ENVIRONMENT}=ucx needs the elastic driver ({ENVIRONMENT} is set by "
                      "chorusrun --elastic), and it cannot be reached")
    link.hello(int(os.environ.get(RANK_ENVIRONMENT, "0")),
               int(os.environ.get(SIZE_ENVIRONMENT, "1")))
    first_world = named(link, OPEN_WAIT_S)
    join(link, first_world, parameters)


def named(link, wait_seconds):
    """The world the driver names next (`open N`); ChorusInternalError when none comes."""
    number = link.opened(wait_seconds)
    if number is None:
        raise _failed(f"the elastic driver named no world to join within {wait_seconds:g} s")
    return number


def rejoin(link, number=None, wait_seconds=None):
    """Going on in this process: shuts chorus down here and joins world `number` (None: the one
    the driver names within `wait_seconds`) with the parameters of the last init."""
    core.shutdown()
    join(link, named(link, wait_seconds) if number is None else number, core._parameters)


def _finish():
    """As the process ends (atexit, after chorus's own shutdown hook ran): tells the driver that
    chorus shut down here and closes every world once the driver says every rank has (or after
    CLOSE_WAIT_S): a rank that closed a world while others still ran collectives on it would
    look lost to them. Training may end long before the process does; until the process ends,
    its worlds stay open for collectives after hvd.elastic.run."""
    link = driver_link.shared()  # (never a new connection now)
    if core.is_initialized():
        core.shutdown()
    if link is not None and _held:
        link.shut()
        link.closed(max(_held), CLOSE_WAIT_S)
    for number in list(_held):
        _held.pop(number).close()
