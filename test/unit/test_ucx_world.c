/*
 * test_ucx_world.c — chorus on a world over UCX, as an elastic job runs it: 1 to 4 forked ranks
 * hand their addresses to the parent through pipes (the driver's part), get the table back and
 * start chorus on it (chorus_init_world), on two made-up hosts, or all on this one (where the
 * host's segment and slots are memory files the ranks share). They run allreduces in every
 * op on odd counts and broadcasts through chorus's API, checked against the reference every
 * rank computes from all ranks' inputs. Then the parent SIGKILLs the last rank: each
 * survivor's next allreduce must fail at once (not after CHORUS_TIMEOUT_SECONDS) naming the
 * lost rank, and the survivors, in their own processes, shut chorus down, start it on a new
 * world of themselves, refuse what needs MPI (process sets, sends, reform) and run the checks
 * again.
 */
#include "../../lib/core/common.h"
#include "../common/check_runner.h"
#include "../common/child_pipes.h"
#include "../common/reference.h"

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_RANKS 4
#define MAX_ADDRESS 8192
/* A failure met later than this after the kill waited for the bound, not for UCX's notice. */
#define DETECTION_BOUND_SECONDS 5.0

/* Every rank on one host (set before the ranks are forked), else ranks alternate between two. */
static bool on_one_host;

struct address {
    size_t bytes;
    unsigned char data[MAX_ADDRESS];
};

struct report {
    chorus_status status;
    int rank, size; /* chorus_rank() and chorus_size() */
    double seconds; /* the failed allreduce: when it returned */
    char text[640];
};

static void checked(struct report *report, const char *what, chorus_status status)
{
    if (report->status == CHORUS_OK && status != CHORUS_OK) {
        report->status = status;
        snprintf(report->text, sizeof report->text, "%s: %s", what, chorus_last_error());
    }
}

/* Allreduces of every op on counts 1, 7 and 1009 (float64), and a broadcast from the last rank,
 * against the reference; the first failure into `report`. */
static void run_checks(int rank, int size, uint64_t seed, struct report *report)
{
    static const size_t counts[] = {1, 7, 1009};
    static const chorus_op ops[] = {CHORUS_SUM, CHORUS_MIN, CHORUS_MAX, CHORUS_PRODUCT};
    static double input[1009], output[1009];
    static unsigned char bytes[4099];
    *report = (struct report){.status = CHORUS_OK, .rank = chorus_rank(), .size = chorus_size()};
    for (size_t c = 0; c < ARRAY_LENGTH(counts); c++) {
        for (size_t o = 0; o < ARRAY_LENGTH(ops); o++) {
            char name[64];
            snprintf(name, sizeof name, "world.%zu.%zu", c, o);
            reference_fill(input, counts[c], CHORUS_FLOAT64, ops[o], seed + c, rank);
            chorus_tensor tensor = {.data = input, .dtype = CHORUS_FLOAT64, .ndims = 1,
                                    .shape = {(int64_t)counts[c]}};
            checked(report, name, chorus_allreduce(name, &tensor, output, ops[o]));
            char why[256] = "";
            if (report->status == CHORUS_OK &&
                reference_check_allreduce(output, counts[c], CHORUS_FLOAT64, ops[o], size, NULL,
                                          seed + c, 1, 1, why, sizeof why) >= 0) {
                report->status = CHORUS_ERR_INTERNAL;
                snprintf(report->text, sizeof report->text, "%s: %s", name, why);
            }
        }
    }
    reference_fill_bytes(bytes, sizeof bytes, seed, rank);
    chorus_tensor tensor = {.data = bytes, .dtype = CHORUS_UINT8, .ndims = 1,
                            .shape = {(int64_t)sizeof bytes}};
    checked(report, "world.broadcast", chorus_broadcast("world.broadcast", &tensor, size - 1));
    if (report->status == CHORUS_OK &&
        reference_check_bytes(bytes, sizeof bytes, seed, size - 1) >= 0) {
        report->status = CHORUS_ERR_INTERNAL;
        snprintf(report->text, sizeof report->text, "the broadcast's bytes differ");
    }
}

/* `call` must have been refused for needing MPI; if not, it goes into `report`. */
static void expect_refused(struct report *report, const char *call, chorus_status status)
{
    if (report->status != CHORUS_OK)
        return;
    if (status != CHORUS_ERR_NOT_SUPPORTED || strstr(chorus_last_error(), "without") == NULL) {
        report->status = status == CHORUS_OK ? CHORUS_ERR_INTERNAL : status;
        snprintf(report->text, sizeof report->text, "%s was not refused: %s", call,
                 chorus_last_error());
    }
}

/* What needs MPI is refused on a world without it, and chorus goes on: a process set, a send,
 * a reform. */
static void refuse_what_needs_mpi(struct report *report)
{
    *report = (struct report){.status = CHORUS_OK};
    int everyone[MAX_RANKS], set = -1;
    for (int r = 0; r < chorus_size(); r++)
        everyone[r] = r;
    static float value;
    chorus_tensor tensor = {.data = &value, .dtype = CHORUS_FLOAT32, .ndims = 1, .shape = {1}};
    chorus_handle *handle = NULL;
    expect_refused(report, "chorus_process_set_add",
                   chorus_process_set_add(everyone, chorus_size(), &set));
    expect_refused(report, "chorus_send_async", chorus_send_async(&tensor, 0, 1, 0, &handle));
    expect_refused(report, "chorus_reform", chorus_reform(everyone, chorus_size(), NULL));
}

/* Makes a world for `epoch`, sends its address up, takes the table and starts chorus as the
 * rank the parent says, with the size it says; the start's report goes up too, and into
 * `started` (NULL: not wanted). */
static chorus_world *join_world(uint16_t epoch, int in, int out, struct report *started)
{
    chorus_world *world = NULL;
    static struct address mine, all[MAX_RANKS];
    if (chorus_world_open(epoch, &world) != CHORUS_OK)
        _exit(4);
    const void *address;
    chorus_world_address(world, &address, &mine.bytes);
    if (mine.bytes > MAX_ADDRESS)
        _exit(5);
    memcpy(mine.data, address, mine.bytes);
    child_write_all(out, &mine, sizeof mine);
    int numbering[2]; /* rank, size */
    if (!child_read_all(in, numbering, sizeof numbering, 30) ||
        !child_read_all(in, all, (size_t)numbering[1] * sizeof all[0], 30))
        _exit(6);
    const void *addresses[MAX_RANKS];
    for (int r = 0; r < numbering[1]; r++)
        addresses[r] = all[r].data;
    struct report report = {.status = CHORUS_OK};
    checked(&report, "chorus_init_world",
            chorus_init_world(world, numbering[0], numbering[1],
                                numbering[0] % 2 && !on_one_host ? "host-b" : "host-a",
                                addresses, NULL));
    report.seconds = clock_seconds();
    child_write_all(out, &report, sizeof report);
    if (started != NULL)
        *started = report;
    return world;
}

/* The parent's go-ahead between phases; none within 60 s ends the rank. */
static void await_parent(int in)
{
    char go;
    if (!child_read_all(in, &go, 1, 60))
        _exit(7);
}

static void run_rank(int rank, int count, int in, int out)
{
    (void)rank, (void)count; /* the parent numbers the worlds */
    alarm(90); /* a hang ends the process, and the parent sees its pipe close */
    setenv("CHORUS_TIMEOUT_SECONDS", "30", 1);
    chorus_world *first = join_world(1, in, out, NULL);
    struct report report;
    run_checks(chorus_rank(), chorus_size(), 100, &report);
    child_write_all(out, &report, sizeof report);
    await_parent(in); /* the last rank was killed, or this one is it and waits for the kill */
    report = (struct report){.status = CHORUS_OK};
    static double lone[64];
    chorus_tensor tensor = {.data = lone, .dtype = CHORUS_FLOAT64, .ndims = 1, .shape = {64}};
    checked(&report, "after the kill", chorus_allreduce("after.kill", &tensor, lone, CHORUS_SUM));
    report.seconds = clock_seconds();
    child_write_all(out, &report, sizeof report);
    chorus_shutdown();
    chorus_world *second = join_world(2, in, out, NULL);
    struct report refused;
    refuse_what_needs_mpi(&refused);
    run_checks(chorus_rank(), chorus_size(), 200, &report);
    if (refused.status != CHORUS_OK)
        report = refused;
    child_write_all(out, &report, sizeof report);
    await_parent(in); /* every rank is done with the world: shut down, then close it */
    chorus_shutdown();
    child_write_all(out, &report, sizeof report);
    await_parent(in);
    chorus_world_close(second);
    chorus_world_close(first);
    _exit(0);
}

/* A rank of a world whose last rank dies before it starts: the start fails, and the rank closes
 * the world once the parent has seen every report. */
static void run_rank_of_a_broken_start(int rank, int count, int in, int out)
{
    (void)rank, (void)count;
    alarm(90);
    setenv("CHORUS_TIMEOUT_SECONDS", "30", 1);
    struct report started;
    chorus_world *world = join_world(1, in, out, &started);
    await_parent(in);
    if (started.status == CHORUS_OK)
        chorus_shutdown();
    chorus_world_close(world);
    _exit(0);
}

static struct report read_report(const struct child *child, int rank, const char *phase)
{
    struct report report;
    ck_assert_msg(child_read_all(child->in, &report, sizeof report, 60), "rank %d: no report %s",
                  rank, phase);
    return report;
}

/* The driver's first part: every listed rank's address into `all`. */
static void collect_addresses(struct child *children, const int *members, int size,
                              struct address *all)
{
    for (int r = 0; r < size; r++)
        ck_assert_msg(child_read_all(children[members[r]].in, &all[r], sizeof all[r], 30),
                      "rank %d sent no address", members[r]);
}

/* The driver's part: every listed rank's address, then to each its new rank, the size and the
 * table; then each one's start must succeed. */
static void form_world(struct child *children, const int *members, int size)
{
    static struct address all[MAX_RANKS];
    collect_addresses(children, members, size, all);
    for (int r = 0; r < size; r++) {
        int numbering[2] = {r, size};
        child_write_all(children[members[r]].out, numbering, sizeof numbering);
        child_write_all(children[members[r]].out, all, (size_t)size * sizeof all[0]);
    }
    for (int r = 0; r < size; r++) {
        struct report report = read_report(&children[members[r]], r, "of the start");
        ck_assert_msg(report.status == CHORUS_OK, "%d ranks, rank %d: %s", size, r, report.text);
    }
}

static void expect_checks(struct child *children, const int *members, int size, const char *when)
{
    for (int r = 0; r < size; r++) {
        struct report report = read_report(&children[members[r]], r, when);
        ck_assert_msg(report.status == CHORUS_OK, "%s, %d ranks, rank %d: %s: %s", when, size, r,
                      chorus_status_name(report.status), report.text);
        ck_assert_int_eq(report.rank, r);
        ck_assert_int_eq(report.size, size);
    }
}

static void tell(struct child *children, const int *members, int size)
{
    for (int r = 0; r < size; r++)
        child_write_all(children[members[r]].out, "", 1);
}

/* Waits for the first `alive` ranks to end well, and closes every rank's pipes. */
static void reap_ranks(struct child *children, int alive, int nranks)
{
    for (int r = 0; r < alive; r++) {
        int status = 0;
        waitpid(children[r].pid, &status, 0);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank %d ended badly (%d)",
                      r, status);
    }
    for (int r = 0; r < nranks; r++) {
        close(children[r].in);
        close(children[r].out);
    }
}

/* A survivor's report of a failure after `victim` was killed at `killed`: an error naming it,
 * met within the bound. */
static void expect_loss(const struct report *report, int nranks, int rank, int victim,
                        double killed, const char *what)
{
    double seconds = report->seconds - killed;
    printf("%d ranks: rank %d's %s failed %.3f s after rank %d was killed: %s\n", nranks, rank,
           what, seconds, victim, report->text);
    /* UCX words it "rank N lost", the host's watch on its processes "rank N (host X) lost". */
    char named[32], with_host[32];
    snprintf(named, sizeof named, "rank %d lost", victim);
    snprintf(with_host, sizeof with_host, "rank %d (host ", victim);
    ck_assert_msg(report->status < 0 && (strstr(report->text, named) != NULL ||
                                         (strstr(report->text, with_host) != NULL &&
                                          strstr(report->text, ") lost") != NULL)),
                  "%d ranks, rank %d: %s: %s", nranks, rank, chorus_status_name(report->status),
                  report->text);
    ck_assert_msg(seconds < DETECTION_BOUND_SECONDS, "rank %d took %.1f s", rank, seconds);
}

/* The body of the two tests below. */
static void lose_a_rank_and_go_on(int nranks)
{
    int victim = nranks - 1;
    struct child children[MAX_RANKS] = {0};
    int everyone[MAX_RANKS], survivors[MAX_RANKS];
    for (int r = 0; r < nranks; r++)
        everyone[r] = survivors[r] = r;
    child_fork_all(children, nranks, run_rank);
    form_world(children, everyone, nranks);
    expect_checks(children, everyone, nranks, "epoch 1");
    double killed = clock_seconds();
    kill(children[victim].pid, SIGKILL);
    waitpid(children[victim].pid, NULL, 0);
    int left = nranks - 1;
    tell(children, survivors, left);
    for (int r = 0; r < left; r++) {
        struct report report = read_report(&children[r], r, "after the kill");
        expect_loss(&report, nranks, r, victim, killed, "allreduce");
    }
    if (left > 0) {
        form_world(children, survivors, left);
        expect_checks(children, survivors, left, "epoch 2");
        tell(children, survivors, left);
        for (int r = 0; r < left; r++)
            read_report(&children[r], r, "of the shutdown");
        tell(children, survivors, left);
    }
    reap_ranks(children, left, nranks);
}

START_TEST(a_world_over_ucx_loses_a_rank_and_goes_on_in_its_survivors)
{
    lose_a_rank_and_go_on(_i);
}
END_TEST

/* The same with every rank on one host: the host's segment and slots carry the collectives and
 * the negotiation, and a lost rank is still met at once. */
START_TEST(a_world_on_one_host_loses_a_rank_and_goes_on_in_its_survivors)
{
    on_one_host = true;
    lose_a_rank_and_go_on(_i);
    on_one_host = false;
}
END_TEST

/* The last rank dies after it gave its address, before the world starts (a death during a
 * rebuild): every other rank's start fails within moments, naming it, rather than waiting. */
START_TEST(a_rank_lost_while_the_world_forms_fails_every_start)
{
    int nranks = _i, victim = nranks - 1, everyone[MAX_RANKS];
    struct child children[MAX_RANKS] = {0};
    for (int r = 0; r < nranks; r++)
        everyone[r] = r;
    child_fork_all(children, nranks, run_rank_of_a_broken_start);
    static struct address all[MAX_RANKS];
    collect_addresses(children, everyone, nranks, all);
    double killed = clock_seconds();
    kill(children[victim].pid, SIGKILL);
    waitpid(children[victim].pid, NULL, 0);
    for (int r = 0; r < victim; r++) {
        int numbering[2] = {r, nranks};
        child_write_all(children[r].out, numbering, sizeof numbering);
        child_write_all(children[r].out, all, (size_t)nranks * sizeof all[0]);
    }
    for (int r = 0; r < victim; r++) {
        struct report report = read_report(&children[r], r, "of the start");
        expect_loss(&report, nranks, r, victim, killed, "start");
    }
    tell(children, everyone, victim);
    reap_ranks(children, victim, nranks);
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("ucx_world");
    TCase *processes = tcase_create("processes");
    tcase_set_timeout(processes, 120);
    tcase_add_loop_test(processes, a_world_over_ucx_loses_a_rank_and_goes_on_in_its_survivors, 2,
                        MAX_RANKS + 1);
    tcase_add_loop_test(processes, a_world_on_one_host_loses_a_rank_and_goes_on_in_its_survivors,
                        2, MAX_RANKS + 1);
    tcase_add_loop_test(processes, a_rank_lost_while_the_world_forms_fails_every_start, 2,
                        MAX_RANKS + 1);
    suite_add_tcase(suite, processes);
    return run_suite(suite);
}
