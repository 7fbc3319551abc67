/*
 * child_pipes.c — see child_pipes.h.
 */
#include "child_pipes.h"

#include "../../lib/core/common.h"

#include <check.h>
#include <poll.h>
#include <unistd.h>

void child_fork_all(struct child *children, int count,
                    void (*body)(int rank, int count, int in, int out))
{
    for (int r = 0; r < count; r++) {
        int down[2], up[2];
        ck_assert(pipe(down) == 0 && pipe(up) == 0);
        pid_t pid = fork();
        ck_assert(pid >= 0);
        if (pid == 0) {
            close(down[1]);
            close(up[0]);
            body(r, count, down[0], up[1]);
            _exit(9); /* a body that returned */
        }
        close(down[0]);
        close(up[1]);
        children[r] = (struct child){pid, up[0], down[1]};
    }
}

void child_write_all(int fd, const void *data, size_t bytes)
{
    const char *at = data;
    while (bytes > 0) {
        ssize_t written = write(fd, at, bytes);
        if (written <= 0)
            _exit(3);
        at += written;
        bytes -= (size_t)written;
    }
}

bool child_read_all(int fd, void *data, size_t bytes, double seconds)
{
    char *at = data;
    double deadline = clock_seconds() + seconds;
    while (bytes > 0) {
        struct pollfd ready = {.fd = fd, .events = POLLIN};
        int left_ms = (int)((deadline - clock_seconds()) * 1000);
        if (left_ms <= 0 || poll(&ready, 1, left_ms) <= 0)
            return false;
        ssize_t got = read(fd, at, bytes);
        if (got <= 0)
            return false;
        at += got;
        bytes -= (size_t)got;
    }
    return true;
}
