/*
 * test_host_parts.c — memory shared between the processes of a host without MPI
 * (lib/transport/host_parts.h), and the watch on their processes (node_segment_ended): a parent
 * and its forked child exchange over pipes as the world's transport would, map each other's
 * parts and see each other's writes; a part that one of them cannot make fails on both; a peer
 * whose process ended is seen as ended, reaped or not.
 */
#include "../../lib/transport/host_parts.h"
#include "../../lib/transport/node_segment.h"

#include "../common/check_runner.h"

#include <check.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Two processes' exchange: each writes its words to the other's pipe and reads the other's. */
struct pipe_pair {
    int rank;    /* 0: the parent, 1: the child */
    int in, out; /* from the other process, to it */
};

static bool swap_bytes(struct pipe_pair *pair, const void *mine, void *theirs, size_t bytes)
{
    if (write(pair->out, mine, bytes) != (ssize_t)bytes)
        return false;
    size_t got = 0;
    while (got < bytes) {
        ssize_t now = read(pair->in, (unsigned char *)theirs + got, bytes - got);
        if (now <= 0)
            return false;
        got += (size_t)now;
    }
    return true;
}

static bool pair_allgather(void *context, const void *mine, size_t bytes, void *all)
{
    struct pipe_pair *pair = context;
    unsigned char *slots = all;
    memcpy(slots + (size_t)pair->rank * bytes, mine, bytes);
    return swap_bytes(pair, mine, slots + (size_t)(1 - pair->rank) * bytes, bytes);
}

static bool pair_minimum(void *context, uint64_t *words, size_t count)
{
    uint64_t theirs[8];
    if (count > 8 || !swap_bytes(context, words, theirs, count * sizeof *words))
        return false;
    for (size_t i = 0; i < count; i++)
        words[i] = theirs[i] < words[i] ? theirs[i] : words[i];
    return true;
}

/* Both sides make parts of `bytes` (`child_bytes` on the child's side, which 0 makes fail);
 * each writes its rank's pattern into its own part, then checks the other's through its
 * mapping. The child's verdict is its exit status; returns the parent's parts' verdict. */
static bool share_parts(size_t bytes, size_t child_bytes, bool *child_ok)
{
    int down[2], up[2];
    ck_assert(pipe(down) == 0 && pipe(up) == 0);
    pid_t child = fork();
    ck_assert(child >= 0);
    int rank = child == 0 ? 1 : 0;
    struct pipe_pair pair = {.rank = rank, .in = rank ? down[0] : up[0],
                             .out = rank ? up[1] : down[1]};
    struct host_exchange exchange = {.local_rank = rank, .local_size = 2,
                                     .allgather = pair_allgather, .minimum = pair_minimum,
                                     .context = &pair};
    struct host_parts parts;
    char error[256];
    bool made = host_parts_create(&parts, &exchange, rank ? child_bytes : bytes, error,
                                  sizeof error);
    bool right = made;
    if (made) {
        memset(parts.part[rank], 0x40 + rank, parts.bytes);
        uint64_t ready = 1;
        right = pair_minimum(&pair, &ready, 1); /* both wrote */
        for (size_t b = 0; right && b < parts.bytes; b++)
            right = parts.part[1 - rank][b] == 0x40 + (1 - rank);
        right = pair_minimum(&pair, &ready, 1) && right; /* both read */
        host_parts_destroy(&parts);
    } else {
        right = strstr(error, "shared part") != NULL;
    }
    if (rank == 1)
        _exit(right && made ? 0 : made ? 1 : 2);
    int status = 0;
    waitpid(child, &status, 0);
    *child_ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!made)
        *child_ok = WIFEXITED(status) && WEXITSTATUS(status) == 2;
    for (int i = 0; i < 2; i++) {
        close(down[i]);
        close(up[i]);
    }
    return made ? right : !right ? false : true;
}

START_TEST(two_processes_map_each_others_parts_and_see_each_others_writes)
{
    bool child_ok = false;
    ck_assert(share_parts((size_t)3 << 20, (size_t)3 << 20, &child_ok));
    ck_assert_msg(child_ok, "the child did not see the parent's part");
}
END_TEST

START_TEST(a_part_one_side_cannot_make_fails_on_both_sides)
{
    bool child_ok = false;
    ck_assert(share_parts(4096, 0, &child_ok));
    ck_assert_msg(child_ok, "the child's side did not fail with a reason");
}
END_TEST

/* Whether `segment` sees local rank 1 as ended within two seconds. */
static bool seen_ended(const struct node_segment *segment)
{
    for (int i = 0; i < 200; i++) {
        if (node_segment_ended(segment, 1))
            return true;
        nanosleep(&(struct timespec){.tv_nsec = 10000000}, NULL);
    }
    return false;
}

START_TEST(a_peer_whose_process_ended_is_seen_ended_reaped_or_not)
{
    pid_t child = fork();
    ck_assert(child >= 0);
    if (child == 0) {
        pause();
        _exit(0);
    }
    static struct node_segment segment;
    segment.local_rank = 0;
    segment.local_size = 2;
    segment.pids[0] = getpid();
    segment.pids[1] = child;
    segment.starts[0] = node_process_start(getpid());
    segment.starts[1] = node_process_start(child);
    ck_assert(segment.starts[0] != 0 && segment.starts[1] != 0);
    segment.watch_processes = true;
    ck_assert(!node_segment_ended(&segment, 1));
    ck_assert(!node_segment_ended(&segment, 0)); /* never this rank itself */
    ck_assert_int_eq(node_segment_first_ended(&segment), -1);
    kill(child, SIGKILL);
    ck_assert_msg(seen_ended(&segment), "a killed child not yet reaped still runs");
    waitpid(child, NULL, 0);
    ck_assert(node_segment_ended(&segment, 1));
    ck_assert_int_eq(node_segment_first_ended(&segment), 1);
    segment.watch_processes = false; /* processes not known to be visible: never ended */
    ck_assert(!node_segment_ended(&segment, 1));
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("host_parts");
    TCase *parts = tcase_create("parts");
    tcase_add_test(parts, two_processes_map_each_others_parts_and_see_each_others_writes);
    tcase_add_test(parts, a_part_one_side_cannot_make_fails_on_both_sides);
    tcase_add_test(parts, a_peer_whose_process_ended_is_seen_ended_reaped_or_not);
    suite_add_tcase(suite, parts);
    return run_suite(suite);
}
