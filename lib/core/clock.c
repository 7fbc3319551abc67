/*
 * clock.c — the monotonic clock every wait and timeout reads, and deadlines for timed waits
 * (common.h).
 */
#include "common.h"

#include <time.h>

double clock_seconds(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
}

struct timespec clock_deadline(clockid_t clock, double seconds)
{
    struct timespec deadline;
    clock_gettime(clock, &deadline);
    long long nanoseconds = deadline.tv_nsec + (long long)(seconds * 1e9);
    deadline.tv_sec += (time_t)(nanoseconds / 1000000000LL);
    deadline.tv_nsec = (long)(nanoseconds % 1000000000LL);
    return deadline;
}
