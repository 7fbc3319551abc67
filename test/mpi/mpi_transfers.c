/*
 * mpi_transfers.c — point-to-point transfers (chorus_send_async, chorus_recv_async) through the
 * public API under mpirun, each received tensor compared byte for byte with what the sender's
 * known generator made: a ring of uint8, int64, float32 and float64 tensors of 0, 1, 7, 1021 and
 * 65537 elements (one past any eager limit); receives from any rank, which must name the sender
 * that the data says sent it; tags told apart and one tag's messages kept in order; a rank
 * sending to itself; transfers beside ordered collectives; two threads transferring at once
 * (under ThreadSanitizer too); a process set's ranks; the refusals
 * (a peer or rank outside the set, a bad tag, a message longer or shorter than the receive);
 * a receive still pending at shutdown; and an ordered operation's own timeout_seconds, which
 * ends a call that the other ranks never make after that long (not CHORUS_TIMEOUT_SECONDS).
 */
#include "../common/reference.h"
#include "mpi_test.h"

#include <pthread.h>
#include <stdint.h>

/* Byte i of the message that `sender` sends with `tag` under `seed`. */
static uint8_t message_byte(uint64_t seed, int sender, int tag, size_t i)
{
    return (uint8_t)test_random(seed + (uint64_t)tag * 7919u, (uint64_t)sender, i);
}

static void fill(uint8_t *bytes, size_t count, uint64_t seed, int sender, int tag)
{
    for (size_t i = 0; i < count; i++)
        bytes[i] = message_byte(seed, sender, tag, i);
}

/* How many bytes differ from what `sender` sent. */
static size_t wrong_bytes(const uint8_t *bytes, size_t count, uint64_t seed, int sender, int tag)
{
    size_t wrong = 0;
    for (size_t i = 0; i < count; i++)
        wrong += bytes[i] != message_byte(seed, sender, tag, i);
    return wrong;
}

static chorus_tensor tensor_of(void *data, chorus_dtype dtype, int64_t count)
{
    return (chorus_tensor){.data = data, .dtype = dtype, .ndims = 1, .shape = {count}};
}

static chorus_handle *send_to(void *data, chorus_dtype dtype, int64_t count, int to, int tag,
                              int set)
{
    chorus_tensor tensor = tensor_of(data, dtype, count);
    chorus_handle *handle = NULL;
    EXPECT_STATUS(chorus_send_async(&tensor, to, tag, set, &handle), CHORUS_OK);
    return handle;
}

static chorus_handle *receive_from(void *data, chorus_dtype dtype, int64_t count, int from, int tag,
                                   int set)
{
    chorus_tensor tensor = tensor_of(data, dtype, count);
    chorus_handle *handle = NULL;
    EXPECT_STATUS(chorus_recv_async(&tensor, from, tag, set, &handle), CHORUS_OK);
    return handle;
}

static void finish_ok(chorus_handle *handle)
{
    if (handle == NULL)
        return;
    chorus_status status = chorus_wait(handle);
    EXPECT(status == CHORUS_OK, "%s: %s", chorus_status_name(status), chorus_handle_error(handle));
    chorus_handle_free(handle);
}

static void ring(uint64_t seed)
{
    test_step = "ring";
    const chorus_dtype dtypes[] = {CHORUS_UINT8, CHORUS_INT64, CHORUS_FLOAT32, CHORUS_FLOAT64};
    const int64_t counts[] = {0, 1, 7, 1021, 65537};
    int next = (test_rank + 1) % test_size, previous = (test_rank + test_size - 1) % test_size;
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
            size_t bytes = (size_t)counts[c] * chorus_dtype_size(dtypes[d]);
            int tag = (int)(d * 10 + c);
            uint8_t *out = malloc(bytes + 1), *in = malloc(bytes + 1);
            fill(out, bytes, seed, test_rank, tag);
            memset(in, 0xEE, bytes + 1);
            chorus_handle *received = receive_from(in, dtypes[d], counts[c], previous, tag, 0);
            chorus_handle *sent = send_to(out, dtypes[d], counts[c], next, tag, 0);
            finish_ok(received);
            finish_ok(sent);
            EXPECT(wrong_bytes(in, bytes, seed, previous, tag) == 0,
                   "%s x %lld from rank %d: wrong bytes", chorus_dtype_name(dtypes[d]),
                   (long long)counts[c], previous);
            EXPECT(in[bytes] == 0xEE, "a byte past the tensor was written");
            free(out);
            free(in);
        }
    }
}

/* Rank 0 receives one message from every other rank, from any source. */
static void from_any(uint64_t seed)
{
    test_step = "any source";
    enum { BYTES = 333, TAG = 5 };
    if (test_rank != 0) {
        uint8_t out[BYTES];
        fill(out, BYTES, seed, test_rank, TAG);
        finish_ok(send_to(out, CHORUS_UINT8, BYTES, 0, TAG, 0));
        return;
    }
    int *seen = calloc((size_t)test_size, sizeof *seen);
    for (int m = 1; m < test_size; m++) {
        uint8_t in[BYTES];
        chorus_handle *handle = receive_from(in, CHORUS_UINT8, BYTES, CHORUS_ANY_SOURCE, TAG, 0);
        EXPECT_STATUS(chorus_wait(handle), CHORUS_OK);
        int source = chorus_handle_source(handle);
        EXPECT(source >= 1 && source < test_size, "source %d", source);
        if (source >= 1 && source < test_size) {
            seen[source]++;
            EXPECT(wrong_bytes(in, BYTES, seed, source, TAG) == 0,
                   "the data is not what rank %d sent", source);
        }
        chorus_handle_free(handle);
    }
    for (int r = 1; r < test_size; r++)
        EXPECT(seen[r] == 1, "rank %d's message was taken %d times", r, seen[r]);
    free(seen);
}

/* Rank 1 sends tags 1, 2, 1 to rank 0, which receives tag 2 first: tags select, and one tag's
 * messages arrive in the order sent. */
static void tags_and_order(uint64_t seed)
{
    test_step = "tags and order";
    if (test_size < 2 || test_rank > 1)
        return;
    int64_t first[4], second[4], third[4];
    if (test_rank == 1) {
        for (int i = 0; i < 4; i++)
            first[i] = 100 + i, second[i] = 200 + i, third[i] = 300 + i;
        chorus_handle *a = send_to(first, CHORUS_INT64, 4, 0, 1, 0);
        chorus_handle *b = send_to(second, CHORUS_INT64, 4, 0, 2, 0);
        chorus_handle *c = send_to(third, CHORUS_INT64, 4, 0, 1, 0);
        finish_ok(a), finish_ok(b), finish_ok(c);
    } else {
        finish_ok(receive_from(second, CHORUS_INT64, 4, 1, 2, 0));
        finish_ok(receive_from(first, CHORUS_INT64, 4, 1, 1, 0));
        finish_ok(receive_from(third, CHORUS_INT64, 4, CHORUS_ANY_SOURCE, 1, 0));
        for (int i = 0; i < 4; i++) {
            EXPECT(first[i] == 100 + i && second[i] == 200 + i && third[i] == 300 + i,
                   "element %d: %lld %lld %lld", i, (long long)first[i], (long long)second[i],
                   (long long)third[i]);
        }
    }
    (void)seed;
}

static void to_itself(uint64_t seed)
{
    test_step = "to itself";
    float out[9], in[9];
    fill((uint8_t *)out, sizeof out, seed, test_rank, 77);
    chorus_handle *received = receive_from(in, CHORUS_FLOAT32, 9, test_rank, 77, 0);
    chorus_handle *sent = send_to(out, CHORUS_FLOAT32, 9, test_rank, 77, 0);
    EXPECT_STATUS(chorus_wait(sent), CHORUS_OK);
    EXPECT_STATUS(chorus_wait(received), CHORUS_OK);
    EXPECT(chorus_handle_source(received) == test_rank, "source %d",
           chorus_handle_source(received));
    /* Each handle names its transfer: a send has no source, a receive no output. */
    EXPECT_STATUS(chorus_handle_source(sent), CHORUS_ERR_INVALID_ARGUMENT);
    EXPECT(strstr(chorus_last_error(), "the handle is a send, not a receive") != NULL, "%s",
           chorus_last_error());
    chorus_tensor output;
    EXPECT_STATUS(chorus_handle_output(received, &output), CHORUS_ERR_INVALID_ARGUMENT);
    EXPECT(strstr(chorus_last_error(), "the handle is a receive, not an allgather") != NULL, "%s",
           chorus_last_error());
    finish_ok(sent);
    finish_ok(received);
    EXPECT(wrong_bytes((uint8_t *)in, sizeof in, seed, test_rank, 77) == 0, "wrong bytes");
    /* A collective's handle is named with its article too. */
    float one = 1;
    chorus_tensor tensor = {.data = &one, .dtype = CHORUS_FLOAT32, .ndims = 0};
    chorus_handle *reduced = NULL;
    EXPECT_STATUS(chorus_allreduce_async("self.article", &tensor, NULL, CHORUS_SUM, &reduced),
                  CHORUS_OK);
    EXPECT_STATUS(chorus_wait(reduced), CHORUS_OK);
    EXPECT_STATUS(chorus_handle_source(reduced), CHORUS_ERR_INVALID_ARGUMENT);
    EXPECT(strstr(chorus_last_error(), "the handle is an allreduce, not a receive") != NULL, "%s",
           chorus_last_error());
    chorus_handle_free(reduced);
}

/* A send posted before an ordered allreduce and received after it: the collective does not
 * take the message, nor the message the collective's. */
static void beside_ordered(uint64_t seed)
{
    test_step = "beside ordered collectives";
    int next = (test_rank + 1) % test_size, previous = (test_rank + test_size - 1) % test_size;
    double out[64], in[64];
    fill((uint8_t *)out, sizeof out, seed, test_rank, 3);
    chorus_handle *sent = send_to(out, CHORUS_FLOAT64, 64, next, 3, 0);
    float values[5];
    for (int i = 0; i < 5; i++)
        values[i] = (float)(test_rank + i);
    chorus_op_args args = CHORUS_OP_ARGS_INIT;
    args.input = floats(values, 5);
    args.flags = CHORUS_OP_ORDERED;
    expect_completes(&args);
    for (int i = 0; i < 5; i++) {
        double expected = 0;
        for (int r = 0; r < test_size; r++)
            expected += r + i;
        EXPECT(values[i] == (float)expected, "allreduce element %d: %g, expected %g", i, values[i],
               expected);
    }
    finish_ok(receive_from(in, CHORUS_FLOAT64, 64, previous, 3, 0));
    finish_ok(sent);
    EXPECT(wrong_bytes((uint8_t *)in, sizeof in, seed, previous, 3) == 0, "wrong bytes");
}

struct ring_thread {
    uint64_t seed;
    int tag;
};

/* 50 rounds of a ring of 1021-byte messages under one tag. */
static void *ring_rounds(void *argument)
{
    const struct ring_thread *ring = argument;
    int next = (test_rank + 1) % test_size, previous = (test_rank + test_size - 1) % test_size;
    uint8_t out[1021], in[1021];
    for (int round = 0; round < 50; round++) {
        int tag = ring->tag + round;
        fill(out, sizeof out, ring->seed, test_rank, tag);
        chorus_handle *received = receive_from(in, CHORUS_UINT8, sizeof in, previous, tag, 0);
        chorus_handle *sent = send_to(out, CHORUS_UINT8, sizeof out, next, tag, 0);
        finish_ok(received);
        finish_ok(sent);
        EXPECT(wrong_bytes(in, sizeof in, ring->seed, previous, tag) == 0,
               "thread of tag %d, round %d: wrong bytes", ring->tag, round);
    }
    return NULL;
}

/* Two user threads transferring at once, each taking the loop's turn to post or leaving it to
 * the background thread: ThreadSanitizer's suite runs this (tsan_transfers_np3). */
static void threaded(uint64_t seed)
{
    test_step = "two threads";
    struct ring_thread rings[2] = {{seed, 1000}, {seed, 2000}};
    pthread_t threads[2];
    for (int t = 0; t < 2; t++)
        pthread_create(&threads[t], NULL, ring_rounds, &rings[t]);
    for (int t = 0; t < 2; t++)
        pthread_join(threads[t], NULL);
}

/* The odd ranks' set: transfers among its members by job rank; the others are refused. */
static void in_a_set(uint64_t seed)
{
    test_step = "process set";
    int odd[3], count = 0;
    for (int r = 1; r < test_size && count < 3; r += 2)
        odd[count++] = r;
    if (count == 0)
        return;
    int set = 0;
    EXPECT_STATUS(chorus_process_set_add(odd, count, &set), CHORUS_OK);
    uint8_t out[100], in[100];
    chorus_handle *handle = NULL;
    chorus_tensor tensor = tensor_of(in, CHORUS_UINT8, 100);
    if (test_rank % 2 == 1 && test_rank <= odd[count - 1]) {
        int me = (test_rank - 1) / 2;
        int next = odd[(me + 1) % count], previous = odd[(me + count - 1) % count];
        fill(out, 100, seed, test_rank, 9);
        chorus_handle *received = receive_from(in, CHORUS_UINT8, 100, previous, 9, set);
        finish_ok(send_to(out, CHORUS_UINT8, 100, next, 9, set));
        finish_ok(received);
        EXPECT(wrong_bytes(in, 100, seed, previous, 9) == 0, "from rank %d in the set: wrong",
               previous);
        EXPECT_STATUS(chorus_send_async(&tensor, 0, 9, set, &handle), CHORUS_ERR_INVALID_ARGUMENT);
        EXPECT(strstr(chorus_last_error(), "rank 0 is not a member") != NULL, "%s",
               chorus_last_error());
    } else if (test_rank % 2 == 0) {
        EXPECT_STATUS(chorus_recv_async(&tensor, CHORUS_ANY_SOURCE, 9, set, &handle),
                      CHORUS_ERR_INVALID_ARGUMENT);
        EXPECT(strstr(chorus_last_error(), "is not a member") != NULL, "%s", chorus_last_error());
    }
    EXPECT_STATUS(chorus_process_set_remove(set), CHORUS_OK);
}

static void refusals(void)
{
    test_step = "refusals";
    int32_t word[2] = {0, 0};
    chorus_tensor tensor = tensor_of(word, CHORUS_INT32, 1);
    chorus_handle *handle = NULL;
    EXPECT_STATUS(chorus_send_async(&tensor, test_size, 0, 0, &handle),
                  CHORUS_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(chorus_send_async(&tensor, CHORUS_ANY_SOURCE, 0, 0, &handle),
                  CHORUS_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(chorus_recv_async(&tensor, 0, -1, 0, &handle), CHORUS_ERR_INVALID_ARGUMENT);
    EXPECT(strstr(chorus_last_error(), "tag -1") != NULL, "%s", chorus_last_error());
    EXPECT_STATUS(chorus_recv_async(&tensor, 0, 0, 12345, &handle), CHORUS_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(chorus_recv_async(NULL, 0, 0, 0, &handle), CHORUS_ERR_INVALID_ARGUMENT);
    EXPECT(handle == NULL, "a refused call handed out a handle");
    /* A collective's handle is no receive. */
    chorus_op_args args = CHORUS_OP_ARGS_INIT;
    args.input = tensor;
    args.flags = CHORUS_OP_ORDERED;
    EXPECT_STATUS(chorus_submit(&args, &handle), CHORUS_OK);
    EXPECT_STATUS(chorus_wait(handle), CHORUS_OK);
    EXPECT_STATUS(chorus_handle_source(handle), CHORUS_ERR_INVALID_ARGUMENT);
    EXPECT(strstr(chorus_last_error(), "allreduce, not a receive") != NULL, "%s",
           chorus_last_error());
    chorus_handle_free(handle);
    /* A negotiated operation takes no timeout of its own. */
    args.flags = 0;
    args.name = "negotiated with a timeout";
    args.timeout_seconds = 5;
    handle = NULL;
    EXPECT_STATUS(chorus_submit(&args, &handle), CHORUS_ERR_INVALID_ARGUMENT);
    EXPECT(strstr(chorus_last_error(), "timeout_seconds is for ordered operations") != NULL, "%s",
           chorus_last_error());
    args.flags = CHORUS_OP_ORDERED;
    args.timeout_seconds = -1;
    EXPECT_STATUS(chorus_submit(&args, &handle), CHORUS_ERR_INVALID_ARGUMENT);
}

/* Rank 1 sends 8 bytes where rank 0 receives 4, then 4 where it receives 8. */
static void wrong_sizes(void)
{
    test_step = "wrong sizes";
    if (test_size < 2 || test_rank > 1)
        return;
    if (test_rank == 1) {
        int32_t sent[2] = {1, 2};
        finish_ok(send_to(sent, CHORUS_INT32, 2, 0, 40, 0));
        finish_ok(send_to(sent, CHORUS_INT32, 1, 0, 41, 0));
        return;
    }
    int32_t words[2] = {7, 9};
    chorus_handle *handle = receive_from(words, CHORUS_INT32, 1, 1, 40, 0);
    EXPECT_STATUS(chorus_wait(handle), CHORUS_ERR_MISMATCH);
    EXPECT(strstr(chorus_handle_error(handle), "rank 1 sent 8 bytes where the receive takes 4") !=
                   NULL &&
               strstr(chorus_handle_error(handle), "receive of 4 bytes from rank 1 (tag 40") !=
                   NULL,
           "%s", chorus_handle_error(handle));
    /* Neither message touches the tensor: each is received aside. */
    EXPECT(words[0] == 7 && words[1] == 9, "the receive's tensor changed: %d %d", words[0],
           words[1]);
    chorus_handle_free(handle);
    handle = receive_from(words, CHORUS_INT32, 2, 1, 41, 0);
    EXPECT_STATUS(chorus_wait(handle), CHORUS_ERR_MISMATCH);
    EXPECT(strstr(chorus_handle_error(handle), "rank 1 sent 4 bytes where the receive takes 8") !=
               NULL,
           "%s", chorus_handle_error(handle));
    EXPECT(words[0] == 7 && words[1] == 9, "the receive's tensor changed: %d %d", words[0],
           words[1]);
    chorus_handle_free(handle);
}

/* A receive nobody sends to completes with CHORUS_ERR_SHUTDOWN when chorus shuts down. */
static void pending_at_shutdown(void)
{
    test_step = "pending at shutdown";
    int32_t word = 0;
    chorus_handle *handle = receive_from(&word, CHORUS_INT32, 1, CHORUS_ANY_SOURCE, 999, 0);
    EXPECT(chorus_test(handle) == CHORUS_IN_PROGRESS, "completed with nothing sent");
    /* One rank's shutdown ends every rank's instance: every rank must have submitted first. */
    MPI_Barrier(MPI_COMM_WORLD);
    EXPECT_STATUS(chorus_shutdown(), CHORUS_OK);
    EXPECT_STATUS(chorus_wait(handle), CHORUS_ERR_SHUTDOWN);
    EXPECT(strstr(chorus_handle_error(handle), "receive") != NULL, "%s",
           chorus_handle_error(handle));
    chorus_handle_free(handle);
}

/* Rank 0 alone calls an ordered allreduce with a timeout of 1 s: it fails after about that
 * long, naming the operation's timeout. The instance then stops (a timeout is fatal). */
static void own_timeout(void)
{
    test_step = "own timeout";
    test_init_chorus();
    if (test_rank == 0) {
        int32_t word = 1;
        chorus_op_args args = CHORUS_OP_ARGS_INIT;
        args.input = tensor_of(&word, CHORUS_INT32, 1);
        args.flags = CHORUS_OP_ORDERED;
        args.name = "alone";
        args.timeout_seconds = 1.0;
        chorus_handle *handle = NULL;
        double started = test_seconds();
        EXPECT_STATUS(chorus_submit(&args, &handle), CHORUS_OK);
        EXPECT_STATUS(chorus_wait(handle), CHORUS_ERR_TIMEOUT);
        double waited = test_seconds() - started;
        EXPECT(waited >= 0.95 && waited < 30, "gave up after %.2f s", waited);
        EXPECT(strstr(chorus_handle_error(handle), "within the timeout of 1 s (the operation's "
                                                   "timeout)") != NULL,
               "%s", chorus_handle_error(handle));
        chorus_handle_free(handle);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    chorus_shutdown();
}

int main(int argc, char **argv)
{
    test_start(&argc, &argv, 120);
    test_init_chorus();
    uint64_t seed = 20261127;
    ring(seed);
    from_any(seed);
    tags_and_order(seed);
    to_itself(seed);
    beside_ordered(seed);
    threaded(seed);
    in_a_set(seed);
    refusals();
    wrong_sizes();
    pending_at_shutdown();
    if (test_size > 1)
        own_timeout();
    return test_finish("mpi_transfers");
}
