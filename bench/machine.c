/*
 * machine.c — what this machine offers the collectives, measured in the same run as they are:
 * the memory bandwidth of a plain copy (the ceiling of on-host collectives) and the round trip
 * of a cache line between two local ranks (how far apart their cores are).
 */
#include "bench.h"

#include "measure.h"

#include <mpi.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* A STREAM-like copy of 256 MiB, best of 5: the memory bandwidth of this run (GB/s). */
double copy_bandwidth(void)
{
    size_t bytes = (size_t)256 << 20;
    char *from = malloc(bytes), *to = malloc(bytes);
    memset(from, 1, bytes);
    memset(to, 2, bytes);
    double best = 0;
    for (int i = 0; i < 5; i++) {
        double start = measure_now();
        memcpy(to, from, bytes);
        double rate = (double)bytes / (measure_now() - start) / 1e9;
        best = rate > best ? rate : best;
    }
    free(from);
    free(to);
    return best;
}

/* The round trip of a cache line between the first two ranks of rank 0's host, in ns (median
 * of 5 rounds of 10000, each cut short after ROUND_TRIP_BUDGET seconds; 0 when rank 0 is alone
 * on its host). It tells how far apart their cores are: on the development VM 55 ns in one
 * placement of its virtual CPUs, 330 ns in the other. */
#define ROUND_TRIP_BUDGET 0.02
double cache_line_round_trip(void)
{
    MPI_Comm host;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, bench_rank, MPI_INFO_NULL, &host);
    int local_rank = 0, local_size = 1;
    MPI_Comm_rank(host, &local_rank);
    MPI_Comm_size(host, &local_size);
    _Atomic long *line = NULL;
    MPI_Win window;
    MPI_Win_allocate_shared(local_rank == 0 ? 64 : 0, 1, MPI_INFO_NULL, host, &line, &window);
    MPI_Aint bytes = 0;
    int unit = 0;
    MPI_Win_shared_query(window, 0, &bytes, &unit, &line);
    if (local_rank == 0)
        atomic_store(line, 0);
    MPI_Barrier(host);
    double rounds[5] = {0};
    const long trips = 10000;
    /* Where the two spinning ranks do not run at once (more ranks than cores: emulated hosts on
     * one machine), a trip takes a scheduler's time slice, and 50000 of them took minutes: rank 0
     * ends a round after its budget with a stop value of the round's own, which rank 1 answers
     * before rank 0 goes on, and the trips so far make its figure. */
    for (int round = 0; round < 5 && local_size > 1 && local_rank < 2; round++) {
        long base = (long)round * 2 * trips, stop = -1 - 2 * round, stopped = stop - 1, i;
        double start = measure_now();
        for (i = 0; i < trips; i++) {
            long ping = base + 2 * i + 1, pong = ping + 1;
            if (local_rank == 0) {
                if (i % 64 == 0 && i > 0 && measure_now() - start > ROUND_TRIP_BUDGET) {
                    atomic_store(line, stop);
                    while (atomic_load(line) != stopped)
                        ;
                    break;
                }
                atomic_store(line, ping);
                while (atomic_load(line) != pong)
                    ;
            } else {
                long seen;
                while ((seen = atomic_load(line)) != ping && seen != stop)
                    ;
                if (seen == stop) {
                    atomic_store(line, stopped);
                    break;
                }
                atomic_store(line, pong);
            }
        }
        /* i >= 64: a round stops no sooner */
        rounds[round] = (measure_now() - start) / (double)i * 1e9;
    }
    MPI_Barrier(host);
    MPI_Win_free(&window);
    MPI_Comm_free(&host);
    qsort(rounds, 5, sizeof rounds[0], measure_compare_doubles);
    return rounds[2];
}
