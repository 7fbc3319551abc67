"""How the multi-process Python tests' ranks report to their parent: a line on standard output
that starts with "@" and a kind (anything else there is the library's or the script's)."""


def say(*words):
    """A rank's report: '@ KIND WORDS...'."""
    print("@", *words, flush=True)


def heard(process, kind):
    """The words after '@ KIND' in the next such line of a child's standard output (a
    subprocess.Popen with text pipes), or None if the child's output ended first."""
    while True:
        line = process.stdout.readline()
        if not line:
            return None
        words = line.split()
        if words[:2] == ["@", kind]:
            return words[2:]
