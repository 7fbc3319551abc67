"""chorus.launcher's parts without a job: the driver's line protocol (every message as it is
written parses back to its fields; what is not a message is rejected), host lists and host files
(both syntaxes, merged hosts, a bad line named), the option table (a value checked, an
elastic option refused without --elastic, a refused horovodrun option named), and the elastic
driver's choice after a failure between going on in the surviving processes and a restart.

    test_launcher.py SOURCE_ROOT"""
import os
import sys
import tempfile
import types

sys.path.insert(0, os.path.join(sys.argv[1], "python", "chorus"))
import launcher.elastic as driver_module  # noqa: E402 (the package alone, as chorusrun imports it)
import launcher.hosts as hosts  # noqa: E402
import launcher.options as options  # noqa: E402
import launcher.protocol as protocol  # noqa: E402
import launcher.worlds as worlds  # noqa: E402

passed = failed = 0


def check(condition, what):
    global passed, failed
    if condition:
        passed += 1
    else:
        failed += 1
        print(f"FAILED: {what}")


def raises(function, fragment):
    try:
        function()
    except options.UsageError as e:
        return fragment in str(e)
    return False


# The protocol, both ways.
for line, kind, fields in [
        (protocol.hello("tok", 3, 8, "node-1", 4242), "hello", ["tok", "3", "8", "node-1", "4242"]),
        (protocol.commit(17), "commit", ["17"]),
        (protocol.resumed(16), "resumed", ["16"]),
        (protocol.bye("done"), "bye", ["done", ""]),
        (protocol.bye("restart", "failure rank 2 went silent"), "bye",
         ["restart", "failure rank 2 went silent"]),
        (protocol.bye("failed", "ValueError: a\nb"), "bye", ["failed", "ValueError: a b"]),
        (protocol.hosts_updated(2, "added"), "hosts-updated", ["2", "added"]),
        (protocol.lost("in-place", "failure CHORUS_ERR_TIMEOUT: x"), "lost",
         ["in-place", "failure CHORUS_ERR_TIMEOUT: x"]),
        (protocol.reform([2, 0, 3]), "reform", ["2,0,3"]),
        (protocol.leave(), "leave", []),
        (protocol.peer_lost(1, 4), "peer-lost", ["1", "4"]),
        (protocol.address(2, "00ff"), "address", ["2", "00ff"]),
        (protocol.shut(), "shut", []),
        (protocol.open_world(3), "open", ["3"]),
        (protocol.world_table(3, 1, ["aa", "bb"]), "world", ["3", "1", "2", "aa,bb"]),
        (protocol.close(4), "close", ["4"])]:
    check(line.endswith("\n") and line.count("\n") == 1, f"one line: {line!r}")
    message = protocol.parse(line)
    check(message is not None and message.kind == kind and message.fields == fields,
          f"{line!r} parsed as {message}")
for junk in ["", "hello tok 3", "hello tok x 8 h 1", "commit", "commit soon", "bye",
             "GET / HTTP/1.1", "hosts-updated 1", "reform", "reform 1,x", "leave now",
             "peer-lost 1", "peer-lost one 2", "address 1", "address x 00", "open", "close a",
             "world 1 2 2 aa,bb", "world 1 0 3 aa,bb", "shut now"]:
    check(protocol.parse(junk) is None, f"{junk!r} is not a message")
check(protocol.split_driver_address(protocol.driver_address("t0k", "10.0.0.1:555")) ==
      ("t0k", "10.0.0.1", 555), "the driver's address round-trips")
try:
    protocol.split_driver_address("nonsense")
    check(False, "a malformed CHORUS_ELASTIC_DRIVER was taken")
except ValueError as e:
    check("TOKEN@ADDRESS:PORT" in str(e), str(e))

# Worlds without MPI: the next world's order, and a world formed from its members' addresses.
check(worlds.member_order([(3, "d"), (0, "a"), (2, "c")], ["new"]) == ["a", "c", "d", "new"],
      "survivors in their old order, the lowest first, then the ranks that join")
forming = worlds.WorldForming(5, ["x", "y"])
check(forming.opening() == "open 5\n", "the word to open world 5")
check(not forming.address("x", 4, "aa") and not forming.address("z", 5, "aa"),
      "an address of another world, or of a rank that is not a member, is not taken")
check(forming.address("y", 5, "bb") and not forming.complete() and forming.missing() == ["x"],
      "a world is not complete while a member's address is missing")
check(forming.address("x", 5, "aa") and forming.complete(), "complete with every address")
check(forming.tables() == [("x", "world 5 0 2 aa,bb\n"), ("y", "world 5 1 2 aa,bb\n")],
      f"each member's table: its rank, every address in rank order: {forming.tables()}")

# Host lists and files.
check(hosts.parse_list("a:2,b,a:1") == {"a": 3, "b": 1}, "-H merges a host named twice")
check(list(hosts.parse_list("b:1,a:1")) == ["b", "a"], "-H keeps the order given")
check(raises(lambda: hosts.parse_list("a;rm:1"), "invalid host name"), "a hostile name refused")
check(raises(lambda: hosts.parse_list("a:two"), "not a whole number"), "slots must be numbers")
work = tempfile.mkdtemp()


def write(name, text):
    path = os.path.join(work, name)
    with open(path, "w") as f:
        f.write(text)
    return path


either = write("either", "# a comment\nx:2\ny slots = 3 max_slots=4\n\nx slots=1 # more\n")
check(hosts.read_file(either) == {"x": 3, "y": 3}, "a host file of either syntax")
hosts.check_open_mpi_file(write("good", "x slots=2 max_slots=4\ny\n"))
for text, fragment in [("x slots=two\n", "line 1: slots=two is not a whole number"),
                       ("x\ny colour=blue\n", "line 2: unknown keyword 'colour'"),
                       ("x slots\n", "'slots' is not keyword=value"),
                       ("bad;host slots=1\n", "invalid host name")]:
    check(raises(lambda: hosts.check_open_mpi_file(write("bad", text)), fragment),
          f"{text!r} refused with '{fragment}'")
check(raises(lambda: hosts.read_file(os.path.join(work, "none")), "cannot read host file"),
      "a missing host file named")
sge = write("pe", "node1 2 all.q@node1 UNDEFINED\nnode2 1 all.q@node2 UNDEFINED\n"
                  "node1 1 other.q@node1 UNDEFINED\n")
allocation = hosts.Allocation.of_environment({"PE_HOSTFILE": sge, "JOB_ID": "12", "NSLOTS": "4"})
check(allocation.hosts == {"node1": 3, "node2": 1} and allocation.slots == 4 and
      allocation.description == "SGE job 12", "an SGE allocation")
slurm = hosts.Allocation.of_environment({"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_ID": "7",
                                         "SLURM_NTASKS": "4"})
check(slurm.hosts is None and slurm.slots == 4, "a Slurm allocation (its launcher reads it)")
check(hosts.Allocation.of_environment({}) is None, "no allocation")

# The option table.
parsed = options.parse(["-np", "4", "--fusion-threshold-mb", "8", "-x", "A=1", "-x", "B",
                        "prog", "-np", "7"])
check(parsed.np == 4 and parsed.forwards == ["A=1", "B"] and
      parsed.settings == [("CHORUS_FUSION_THRESHOLD", "8M")] and
      parsed.program == ["prog", "-np", "7"], "options, then the program and its own options")
elastic = options.parse(["--min-np", "2", "-np", "4", "prog"])
check(elastic.elastic and elastic.min_np == 2 and elastic.max_np == 4,
      "--min-np starts an elastic job; -np is its most")
check(raises(lambda: options.parse(["--reset-limit", "1", "prog"]), "add --elastic"),
      "an elastic option without --elastic named")
check(raises(lambda: options.parse(["--gloo", "prog"]), "horovodrun's option --gloo"),
      "a horovodrun option chorus does not take named")
check(raises(lambda: options.parse(["--cycle-time-ms", "soon", "prog"]), "'soon'"),
      "a malformed number named")
check(raises(lambda: options.parse(["--bind", "thread", "prog"]), "core, socket, numa or none"),
      "a binding named")
check(raises(lambda: options.parse(["-np"]), "-np needs N"), "a missing value named")
names = [name for option in options.OPTIONS for name in option.names]
check(len(names) == len(set(names)), "every option name in the table once")
help_text = options.help_text()
check(all(option.name in help_text for option in options.OPTIONS), "--help lists every option")


# The driver after a failure: the job goes on in the surviving processes only when every rank
# that did not die or go silent reported and waits, under Open MPI, with enough ranks on
# healthy hosts.
class FakeConnection:
    def __init__(self):
        self.sent = []

    def sendall(self, data):
        self.sent.append(data.decode())


def failed_generation(layout, kind="openmpi", min_np=1, reset_limit=None, restart=False):
    """A generation whose ranks are (host, state) in rank order; state: dead (its connection
    ended without a word), lost (reported and waits), silent (neither, by the deadline)."""
    parsed = options.parse(["--elastic", "--min-np", str(min_np), "prog"])
    parsed.reset_limit, parsed.restart_on_failure = reset_limit, restart
    driver = types.SimpleNamespace(options=parsed, launcher=types.SimpleNamespace(kind=kind),
                                   blacklist=driver_module.Blacklist((600, 600)), resets=0,
                                   failure_noticed_at=None)
    placement = {}
    for host, _ in layout:
        placement[host] = placement.get(host, 0) + 1
    generation = driver_module.Generation(driver, 0, placement)
    generation.process = types.SimpleNamespace(poll=lambda: None)
    for number, (host, state) in enumerate(layout):
        rank = driver_module.Rank(FakeConnection())
        rank.rank, rank.host = number, host
        if state == "dead":
            rank.closed_at = 1.0
        elif state == "lost":
            rank.lost = "in-place"
        generation.ranks.append(rank)
    generation.failure_at, generation.cause = 1.0, "a test's failure"
    return generation


three_hosts = [("a", "dead"), ("a", "lost"), ("b", "lost"), ("c", "lost")]
generation = failed_generation(three_hosts)
ranks = list(generation.ranks)
check(generation.go_on_in_place(), "goes on in place after a death on host a")
check(ranks[2].connection.sent == ["reform 2,3\n"] and ranks[3].connection.sent ==
      ["reform 2,3\n"], f"the survivors on b and c are named: {ranks[2].connection.sent}")
check(ranks[1].connection.sent == ["leave\n"] and ranks[1].retired,
      f"the live rank of the failed host leaves: {ranks[1].connection.sent}")
check(ranks[0].connection.sent == [], "nothing is sent to the dead")
check(generation.np == 2 and [r.rank for r in generation.ranks] == [0, 1] and
      generation.placement == {"b": 1, "c": 1}, "the generation is the new world, renumbered")
check(generation.driver.blacklist.blocked("a") and not generation.driver.blacklist.blocked("b"),
      "the failed host is left out")
check(generation.driver.resets == 1 and generation.failure_at is None and
      generation.close_at is None, "a reset counted, the failure settled")
# A rank that neither reported nor ended by the deadline (cut off, frozen) is left out as the dead
# are, and told to leave should it hear.
generation = failed_generation([("a", "silent"), ("b", "lost"), ("c", "lost")])
ranks = list(generation.ranks)
check(generation.go_on_in_place() and ranks[1].connection.sent == ["reform 1,2\n"] and
      ranks[0].connection.sent == ["leave\n"] and generation.placement == {"b": 1, "c": 1} and
      generation.driver.blacklist.blocked("a"), "goes on without a silent rank's host")
for layout, settings, why in [
        ([("a", "lost"), ("b", "lost")], {}, "no rank died or went silent"),
        (three_hosts, {"kind": "hydra"}, "Hydra (MPICH)"),
        (three_hosts, {"min_np": 3}, "2 rank(s) left on hosts where none failed, fewer than "
                                     "--min-np 3"),
        (three_hosts, {"reset_limit": 0}, "the reset limit (--reset-limit 0)"),
        (three_hosts, {"restart": True}, "--restart-on-failure"),
        ([("a", "dead"), ("a", "lost")], {}, "0 rank(s) left on hosts where none failed")]:
    generation = failed_generation(layout, **settings)
    reason = generation.why_not_in_place() or ""
    check(not generation.go_on_in_place() and why in reason and
          all(r.connection.sent == [] for r in generation.ranks),
          f"restarts, telling nobody yet, saying why ({why!r}): {reason!r}")
# A death while the others form chorus again: they wait for it in MPI and cannot be told, so
# the generation ends at once (no deadline for reports) and restarts, saying why; once the new
# rank 0 said it resumed, a death is an ordinary failure again.
def connection_ends(generation, rank):
    generation.driver.selector = types.SimpleNamespace(unregister=lambda connection: None)
    generation.driver.report_bound = lambda: 5.0
    rank.connection.recv = lambda size: b""
    rank.connection.close = lambda: None
    generation.read(rank)


generation = failed_generation(three_hosts)
generation.go_on_in_place()
victim = generation.ranks[1]
connection_ends(generation, victim)
reason = generation.why_not_in_place() or ""
check(generation.close_at == victim.closed_at and not generation.go_on_in_place() and
      "disconnected while the others formed chorus again" in reason and "cannot be told" in reason,
      f"a death in the rebuild ends the generation at once: {reason!r}")
generation = failed_generation(three_hosts)
generation.go_on_in_place()
generation.message(generation.ranks[0], "resumed 5")
victim = generation.ranks[1]
connection_ends(generation, victim)
check(not generation.rebuilding and generation.close_at == victim.closed_at + 5.0 and
      "disconnected without leaving" in generation.cause,
      f"after the resume, a death waits for the others' reports: {generation.cause!r}")
print(f"launcher: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
