/*
 * test_transport_ucx.c — the UCX transport between processes, as an elastic job uses it: 2 to 5
 * forked ranks hand their fabric addresses to the parent through pipes (the elastic driver's
 * part) and run allreduces checked against the reference every rank computes from all ranks'
 * inputs. Then the parent SIGKILLs one rank in the middle of a large allreduce: every survivor's
 * wait must fail with CHORUS_ERR_TIMEOUT naming the dead rank (the time it took is printed, not
 * asserted tightly: the machine is shared), and the survivors must form the next epoch on new
 * fabrics, in their own processes, and allreduce correctly there.
 */
#include "../../lib/collectives/algorithms.h"
#include "../../lib/transport/transport_ucx.h"
#include "../common/reference.h"

#include "../common/check_runner.h"
#include "../common/child_pipes.h"

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_RANKS 5
#define MAX_ADDRESS 4096
/* The allreduce the victim dies in: 16 MiB a rank, many ring segments per step. */
#define LARGE_COUNT ((size_t)4 << 20)
/* What a survivor's failure may take at most: UCX reports a dead peer's closed connection in
 * tens of milliseconds; this bound only catches a wait that hangs. */
#define DETECTION_BOUND_SECONDS 10.0

/* What a rank tells the parent after each phase. */
struct report {
    chorus_status status;
    double seconds; /* the large phase: when the failed wait returned (clock_seconds) */
    char text[640];
};

struct address {
    size_t bytes;
    unsigned char data[MAX_ADDRESS];
};

/* Every algorithm that uses point to point alone, on counts 0, 1, fewer than the ranks, primes
 * and one past a ring segment, summed; a failure or a wrong element is written to `report`. */
static void allreduce_checked(struct transport *transport, uint64_t seed, struct report *report)
{
    size_t counts[] = {0, 1, (size_t)transport->nranks - 1, 7, 13, 65537};
    const int algorithms[] = {ALLREDUCE_RING, ALLREDUCE_RECURSIVE_DOUBLING,
                              ALLREDUCE_RABENSEIFNER};
    size_t table_size = 0;
    const struct algorithm *table = algorithm_table(CHORUS_ALLREDUCE, &table_size);
    struct scratch scratch = {0};
    *report = (struct report){.status = CHORUS_OK};
    for (size_t a = 0; a < ARRAY_LENGTH(algorithms) && report->status == CHORUS_OK; a++)
        for (size_t c = 0; c < ARRAY_LENGTH(counts) && report->status == CHORUS_OK; c++) {
            float *buffer = malloc(counts[c] * sizeof *buffer + 1);
            uint64_t case_seed = seed + a * 16 + c;
            reference_fill(buffer, counts[c], CHORUS_FLOAT32, CHORUS_SUM, case_seed,
                           transport->rank);
            struct allreduce_args args = {.transport = transport, .scratch = &scratch,
                                          .buffer = buffer, .count = counts[c],
                                          .dtype = CHORUS_FLOAT32, .op = CHORUS_SUM};
            report->status = table[algorithms[a]].run.allreduce(&args);
            char why[256] = "";
            if (report->status != CHORUS_OK)
                snprintf(report->text, sizeof report->text, "%s, count %zu: %s",
                         algorithm_name(CHORUS_ALLREDUCE, algorithms[a]), counts[c],
                         transport->error);
            else if (reference_check_allreduce(buffer, counts[c], CHORUS_FLOAT32, CHORUS_SUM,
                                               transport->nranks, NULL, case_seed, 1.0, 1.0, why,
                                               sizeof why) >= 0) {
                report->status = CHORUS_ERR_INTERNAL;
                snprintf(report->text, sizeof report->text, "%s, count %zu: %s",
                         algorithm_name(CHORUS_ALLREDUCE, algorithms[a]), counts[c], why);
            }
            free(buffer);
        }
    scratch_release(&scratch);
}

static void rank_failed(int rank, const char *error)
{
    fprintf(stderr, "rank %d: %s\n", rank, error);
    _exit(2);
}

/* A rank's process: epoch 1 over every rank, killed or failing in the large allreduce, then
 * epoch 2 over the survivors. Talks to the parent through `in` and `out`. */
static void run_rank(int rank, int nranks, int in, int out)
{
    alarm(60); /* a hang ends the process, and the parent sees its pipe close */
    char error[512] = "";
    struct ucx_context *context = NULL;
    struct ucx_fabric *fabric = NULL, *next = NULL;
    if (ucx_context_create(&context, error, sizeof error) != CHORUS_OK ||
        ucx_fabric_create(context, 1, &fabric, error, sizeof error) != CHORUS_OK)
        rank_failed(rank, error);
    struct address mine = {0};
    const void *address = ucx_fabric_address(fabric, &mine.bytes);
    memcpy(mine.data, address, mine.bytes);
    child_write_all(out, &mine, sizeof mine);
    static struct address all[MAX_RANKS];
    const void *addresses[MAX_RANKS];
    if (!child_read_all(in, all, (size_t)nranks * sizeof all[0], 30))
        rank_failed(rank, error);
    for (int r = 0; r < nranks; r++)
        addresses[r] = all[r].data;
    if (ucx_fabric_connect(fabric, rank, nranks, addresses, error, sizeof error) != CHORUS_OK)
        rank_failed(rank, error);
    struct transport transport;
    transport_ucx_init(&transport, fabric);

    struct report report;
    allreduce_checked(&transport, 500, &report);
    child_write_all(out, &report, sizeof report);

    /* Large allreduces until the parent's SIGKILL of one rank makes one fail. */
    float *large = calloc(LARGE_COUNT, sizeof *large);
    struct scratch scratch = {0};
    report = (struct report){.status = CHORUS_OK};
    child_write_all(out, &report, sizeof report); /* started */
    for (int call = 0; call < 200 && report.status == CHORUS_OK; call++) {
        struct allreduce_args args = {.transport = &transport, .scratch = &scratch,
                                      .buffer = large, .count = LARGE_COUNT,
                                      .dtype = CHORUS_FLOAT32, .op = CHORUS_SUM};
        report.status = allreduce_ring(&args);
    }
    report.seconds = clock_seconds();
    snprintf(report.text, sizeof report.text, "%s", transport.error);
    /* The next epoch's fabric, whose address goes to the parent with the report. The broken one
     * stays until the next epoch has run: closing it earlier makes this rank look lost to
     * survivors still waiting on theirs, and made the next epoch's connections fail (Endpoint
     * timeout) in 2 of 6 runs. */
    if (ucx_fabric_create(context, 2, &next, error, sizeof error) != CHORUS_OK)
        rank_failed(rank, error);
    address = ucx_fabric_address(next, &mine.bytes);
    memcpy(mine.data, address, mine.bytes);
    child_write_all(out, &report, sizeof report);
    child_write_all(out, &mine, sizeof mine);

    int survivors = 0, new_rank = -1;
    if (!child_read_all(in, &survivors, sizeof survivors, 30) ||
        !child_read_all(in, &new_rank, sizeof new_rank, 30) ||
        !child_read_all(in, all, (size_t)survivors * sizeof all[0], 30))
        rank_failed(rank, error);
    for (int r = 0; r < survivors; r++)
        addresses[r] = all[r].data;
    if (ucx_fabric_connect(next, new_rank, survivors, addresses, error, sizeof error) !=
        CHORUS_OK)
        rank_failed(rank, error);
    transport_ucx_init(&transport, next);
    allreduce_checked(&transport, 900, &report);
    child_write_all(out, &report, sizeof report);
    /* Closing a fabric fails the world on the ranks still in its last collective (a closed
     * connection is a lost rank), so every rank closes only when all have reported. */
    char go = 0;
    if (!child_read_all(in, &go, sizeof go, 30))
        rank_failed(rank, error);
    ucx_fabric_destroy(fabric);
    ucx_fabric_destroy(next);
    ucx_context_destroy(context);
    scratch_release(&scratch);
    free(large);
    _exit(0);
}

static void read_report(const struct child *child, int rank, struct report *report,
                        const char *phase)
{
    ck_assert_msg(child_read_all(child->in, report, sizeof *report, 60), "rank %d: no report %s",
                  rank, phase);
}

START_TEST(ranks_survive_a_killed_rank_and_go_on_in_a_new_epoch)
{
    int nranks = _i, victim = nranks / 2;
    struct child children[MAX_RANKS] = {0};
    child_fork_all(children, nranks, run_rank);
    /* The driver's part: every rank's address to every rank. */
    static struct address all[MAX_RANKS];
    for (int r = 0; r < nranks; r++)
        ck_assert_msg(child_read_all(children[r].in, &all[r], sizeof all[r], 30),
                      "rank %d sent no address", r);
    for (int r = 0; r < nranks; r++)
        child_write_all(children[r].out, all, (size_t)nranks * sizeof all[0]);
    struct report report;
    for (int r = 0; r < nranks; r++) {
        read_report(&children[r], r, &report, "of epoch 1");
        ck_assert_msg(report.status == CHORUS_OK, "%d ranks, epoch 1, rank %d: %s: %s", nranks,
                      r, chorus_status_name(report.status), report.text);
    }
    for (int r = 0; r < nranks; r++)
        read_report(&children[r], r, &report, "of the large allreduce's start");
    usleep(100 * 1000); /* into the middle of a large allreduce */
    double killed = clock_seconds();
    kill(children[victim].pid, SIGKILL);
    waitpid(children[victim].pid, NULL, 0);

    int survivors = 0;
    static struct address next[MAX_RANKS];
    for (int r = 0; r < nranks; r++) {
        if (r == victim)
            continue;
        read_report(&children[r], r, &report, "after the kill");
        double seconds = report.seconds - killed;
        printf("%d ranks: rank %d's wait failed %.3f s after rank %d was killed: %s\n", nranks, r,
               seconds, victim, report.text);
        char named[32];
        snprintf(named, sizeof named, "rank %d lost", victim);
        ck_assert_msg(report.status == CHORUS_ERR_TIMEOUT && strstr(report.text, named) != NULL,
                      "%d ranks, rank %d: %s: %s", nranks, r, chorus_status_name(report.status),
                      report.text);
        ck_assert_msg(seconds < DETECTION_BOUND_SECONDS, "rank %d took %.1f s", r, seconds);
        ck_assert(child_read_all(children[r].in, &next[survivors++], sizeof next[0], 30));
    }
    /* The next epoch: the survivors in their order, each told its new rank. */
    for (int r = 0, new_rank = 0; r < nranks; r++) {
        if (r == victim)
            continue;
        child_write_all(children[r].out, &survivors, sizeof survivors);
        child_write_all(children[r].out, &new_rank, sizeof new_rank);
        child_write_all(children[r].out, next, (size_t)survivors * sizeof next[0]);
        new_rank++;
    }
    for (int r = 0; r < nranks; r++) {
        if (r == victim)
            continue;
        read_report(&children[r], r, &report, "of epoch 2");
        ck_assert_msg(report.status == CHORUS_OK, "%d ranks, epoch 2, rank %d: %s: %s", nranks,
                      r, chorus_status_name(report.status), report.text);
    }
    for (int r = 0; r < nranks; r++) {
        if (r == victim)
            continue;
        child_write_all(children[r].out, "", 1); /* every rank reported: close */
        int status = 0;
        waitpid(children[r].pid, &status, 0);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank %d ended badly", r);
        close(children[r].in);
        close(children[r].out);
    }
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("transport_ucx");
    TCase *processes = tcase_create("processes");
    tcase_set_timeout(processes, 120);
    tcase_add_loop_test(processes, ranks_survive_a_killed_rank_and_go_on_in_a_new_epoch, 2,
                        MAX_RANKS + 1);
    suite_add_tcase(suite, processes);
    return run_suite(suite);
}
