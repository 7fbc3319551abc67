"""What Horovod's test/utils/common.py imports from horovod.runner.util.threads."""
import threading


def in_thread(target, args=(), name=None, daemon=True, silent=False):
    """Runs target(*args) in a started daemon thread, which it returns."""
    def run():
        try:
            target(*args)
        except BaseException:
            if not silent:
                raise
    thread = threading.Thread(target=run, name=name, daemon=daemon)
    thread.start()
    return thread
