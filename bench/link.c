/*
 * link.c — chorus-bench --link: what the network between the first two hosts delivers to plain
 * MPI (latency, one flow, every pair both ways), the bound that cross-host collectives are
 * measured against.
 */
#include "bench.h"

#include "measure.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Seconds for `bytes` sent by every active rank to its partner (by the sender, or with
 * both_ways by both at the same time), in 4 MiB messages; median of 3. */
static double link_transfer(int partner, bool active, bool both_ways, bool sender, size_t bytes)
{
    const size_t message = (size_t)4 << 20;
    char *out = malloc(message), *in = malloc(message);
    memset(out, 1, message);
    double times[3];
    for (int trial = 0; trial < 3; trial++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double start = measure_now();
        for (size_t sent = 0; active && sent < bytes; sent += message) {
            MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
            if (sender || both_ways)
                MPI_Isend(out, (int)message, MPI_BYTE, partner, 7, MPI_COMM_WORLD, &requests[0]);
            if (!sender || both_ways)
                MPI_Irecv(in, (int)message, MPI_BYTE, partner, 7, MPI_COMM_WORLD, &requests[1]);
            MPI_Waitall(2, requests, MPI_STATUSES_IGNORE);
        }
        double elapsed = measure_now() - start, slowest = 0;
        MPI_Allreduce(&elapsed, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        times[trial] = slowest;
    }
    free(out);
    free(in);
    qsort(times, 3, sizeof *times, measure_compare_doubles);
    return times[1];
}

/* Between the first two hosts: the latency of one flow, the rate of one flow one way, and the
 * rate one way when every rank of the first host exchanges with its counterpart on the second,
 * both ways at once (the traffic of a hierarchical allreduce's cross-host step). */
void link_benchmark(void)
{
    char host[MPI_MAX_PROCESSOR_NAME] = {0};
    int length = 0;
    MPI_Get_processor_name(host, &length);
    char *hosts = calloc((size_t)bench_size, sizeof host);
    MPI_Allgather(host, sizeof host, MPI_CHAR, hosts, sizeof host, MPI_CHAR, MPI_COMM_WORLD);
    /* Host index and local index of every rank, in rank order. */
    int *host_of = calloc((size_t)bench_size, sizeof *host_of);
    int *local_of = calloc((size_t)bench_size, sizeof *local_of);
    int host_count = 0;
    for (int r = 0; r < bench_size; r++) {
        host_of[r] = -1;
        for (int q = 0; q < r && host_of[r] < 0; q++)
            if (strcmp(hosts + (size_t)q * sizeof host, hosts + (size_t)r * sizeof host) == 0)
                host_of[r] = host_of[q];
        if (host_of[r] < 0)
            host_of[r] = host_count++;
        local_of[r] = 0;
        for (int q = 0; q < r; q++)
            local_of[r] += host_of[q] == host_of[r];
    }
    if (host_count < 2) {
        if (bench_rank == 0)
            printf("link: all %d ranks are on one host; nothing to measure\n", bench_size);
        free(hosts), free(host_of), free(local_of);
        return;
    }
    int partner = -1;
    for (int r = 0; r < bench_size && host_of[bench_rank] <= 1; r++)
        if (host_of[r] == 1 - host_of[bench_rank] && local_of[r] == local_of[bench_rank])
            partner = r;
    int first_partner = -1;
    for (int r = 0; r < bench_size && first_partner < 0; r++)
        if (host_of[r] == 1 && local_of[r] == 0)
            first_partner = r;
    bool first_pair = bench_rank == 0 || bench_rank == first_partner;
    /* Latency: 8-byte round trips of the first pair. */
    double latencies[200];
    char byte8[8] = {0};
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < 200 && first_pair; i++) {
        double start = measure_now();
        if (bench_rank == 0) {
            MPI_Send(byte8, 8, MPI_BYTE, first_partner, 8, MPI_COMM_WORLD);
            MPI_Recv(byte8, 8, MPI_BYTE, first_partner, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(byte8, 8, MPI_BYTE, 0, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(byte8, 8, MPI_BYTE, 0, 8, MPI_COMM_WORLD);
        }
        latencies[i] = (measure_now() - start) / 2;
    }
    double latency = first_pair ? measure_median(latencies, 200) : 0;
    const size_t bytes = (size_t)64 << 20;
    double one_flow =
        link_transfer(bench_rank == 0 ? first_partner : 0, first_pair, false, bench_rank == 0, bytes);
    double all_pairs = link_transfer(partner, partner >= 0, true, true, bytes);
    int sender = host_of[bench_rank] == 0 && partner >= 0, flows = 0;
    MPI_Allreduce(&sender, &flows, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (bench_rank == 0)
        printf("link: hosts=%d latency_us=%.1f one_flow_gbit=%.3f all_pairs_both_ways_gbit=%.3f "
               "flows=%d\n",
               host_count, latency * 1e6, (double)bytes * 8 / one_flow / 1e9,
               (double)bytes * flows * 8 / all_pairs / 1e9, flows);
    free(hosts), free(host_of), free(local_of);
}
