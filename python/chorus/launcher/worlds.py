"""The elastic driver's part in worlds without MPI (CHORUS_ELASTIC_WORLDS=ucx, chorus over UCX):
it numbers each world's ranks and hands every rank the table of their addresses (protocol.py:
open, address, world). Standard library only."""
from . import protocol


def member_order(survivors, newcomers):
    """The next world's ranks in their new order: the survivors in their old rank order (so the
    lowest surviving rank becomes rank 0, wherever the old rank 0 was), then the ranks that
    join. `survivors` is a list of (old rank, member); `newcomers` a list of members."""
    return [member for _, member in sorted(survivors, key=lambda pair: pair[0])] + \
        list(newcomers)


class WorldForming:
    """World `number` forming over `members` (in rank order): each member is told to open it,
    sends its address, and once every address is in, each gets the table."""

    def __init__(self, number, members):
        self.number = number
        self.members = list(members)
        self._addresses = {}

    def opening(self):
        """The line that tells a member to open this world."""
        return protocol.open_world(self.number)

    def address(self, member, world, hex_address):
        """Takes a member's `address WORLD HEX`; an address of another world, or of a rank that
        is not a member, is not this world's (False). True once it is taken."""
        if world != self.number or member not in self.members:
            return False
        self._addresses[id(member)] = hex_address
        return True

    def complete(self):
        return len(self._addresses) == len(self.members)

    def missing(self):
        """The members whose address has not come."""
        return [m for m in self.members if id(m) not in self._addresses]

    def tables(self):
        """(member, line) for every member: its rank and every member's address."""
        table = [self._addresses[id(m)] for m in self.members]
        return [(m, protocol.world_table(self.number, rank, table))
                for rank, m in enumerate(self.members)]
