/*
 * child_pipes.h — whole reads and writes on the pipes between a test and the rank processes it
 * forks (the elastic driver's part in the UCX tests: addresses out, the table back, reports).
 */
#ifndef CHORUS_TEST_CHILD_PIPES_H
#define CHORUS_TEST_CHILD_PIPES_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* A forked rank, and the parent's ends of its pipes: it reads `in`, writes `out`. */
struct child {
    pid_t pid;
    int in, out;
};

/* Forks `count` children: child r runs body(r, count, in, out), which must not return (it ends
 * with _exit). */
void child_fork_all(struct child *children, int count,
                    void (*body)(int rank, int count, int in, int out));

/* Writes all `bytes`; a failed write ends the process (exit status 3). */
void child_write_all(int fd, const void *data, size_t bytes);
/* Reads exactly `bytes`; false on end of file or after `seconds`. */
bool child_read_all(int fd, void *data, size_t bytes, double seconds);

#endif
