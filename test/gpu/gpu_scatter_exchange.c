/*
 * gpu_scatter_exchange.c — reducescatter and alltoall of GPU tensors through the public API,
 * checked against the reference: reducescatters of every dtype and op (through host memory where
 * NCCL cannot reduce them), with rows that do not divide by the ranks (0, 1, fewer than the
 * ranks, a prime, rows of 3: padded blocks) and rows that do, alone and fused, and blocks past
 * the emulation's slot;
 * alltoalls with splits that differ per pair of ranks (zeros included) and larger than the
 * emulation's slot, so that the exchange runs in rounds. The outputs are device memory. Grouped
 * allgathers and reducescatters read member by member from one handle. Then GPU
 * collectives in a process set of the even ranks (its own NCCL communicator) beside one of the
 * whole job, the members numbered by their rank in the set. Runs on
 * a real GPU and on the emulated CUDA runtime and NCCL; exits 77 (SKIP) like gpu_collectives.
 */
#include "../../lib/gpu/gpu.h"
#include "../common/reference.h"
#include "../mpi/mpi_test.h"

static void *to_device(const void *host, size_t bytes, int device)
{
    void *memory = gpu_malloc(bytes, device);
    if (memory != NULL && bytes != 0)
        gpu_copy(memory, host, bytes);
    return memory;
}

static int64_t first_row(int64_t rows, int r)
{
    int64_t extra = rows % test_size;
    return r * (rows / test_size) + (r < extra ? r : extra);
}

static void check_reducescatter(chorus_dtype dtype, chorus_op op, int64_t rows, uint64_t seed,
                                int device)
{
    test_step = "reducescatter";
    enum { WIDTH = 3 };
    size_t count = (size_t)(rows * WIDTH), element = chorus_dtype_size(dtype);
    void *host = malloc(count * element + 1);
    reference_fill(host, count, dtype, op, seed, test_rank);
    void *data = to_device(host, count * element, device);
    char name[64];
    snprintf(name, sizeof name, "gpu.rs.%s.%s.%lld", chorus_dtype_name(dtype), chorus_op_name(op),
             (long long)rows);
    chorus_tensor tensor = {.data = data, .dtype = dtype, .ndims = 2, .shape = {rows, WIDTH},
                            .memory = CHORUS_MEMORY_CUDA, .device = device};
    chorus_tensor block = {0};
    EXPECT_STATUS(chorus_reducescatter(name, &tensor, op, &block), CHORUS_OK);
    int64_t mine = rows / test_size + (test_rank < rows % test_size ? 1 : 0);
    EXPECT(block.shape[0] == mine && block.shape[1] == WIDTH &&
               block.memory == CHORUS_MEMORY_CUDA,
           "%s: block of %lld rows (expected %lld), memory %d", name, (long long)block.shape[0],
           (long long)mine, (int)block.memory);
    if (block.shape[0] == mine) {
        void *result = malloc((size_t)(mine * WIDTH) * element + 1);
        gpu_copy(result, block.data, (size_t)(mine * WIDTH) * element);
        char why[256];
        EXPECT(reference_check_reduced(result, (size_t)(first_row(rows, test_rank) * WIDTH),
                                       (size_t)(mine * WIDTH), dtype, op, test_size, NULL, seed,
                                       1, 1, why, sizeof why) < 0,
               "%s: %s", name, why);
        free(result);
    }
    gpu_free(block.data);
    gpu_free(data);
    free(host);
}

enum { FUSED_TENSORS = 6 };

/* Reducescatters of one dtype and op submitted together, so that they run fused: one
 * ncclReduceScatter of the tensors packed rank by rank, each rank's block padded to the largest
 * where the rows do not divide by the ranks. */
static void check_fused_reducescatters(const int64_t rows[FUSED_TENSORS], uint64_t seed,
                                       int device)
{
    test_step = "fused reducescatters";
    enum { WIDTH = 2, TENSORS = FUSED_TENSORS };
    chorus_handle *handles[TENSORS];
    void *inputs[TENSORS];
    for (int t = 0; t < TENSORS; t++) {
        size_t count = (size_t)(rows[t] * WIDTH);
        float *host = malloc(count * sizeof *host + 1);
        reference_fill(host, count, CHORUS_FLOAT32, CHORUS_SUM, seed + (uint64_t)t, test_rank);
        inputs[t] = to_device(host, count * sizeof *host, device);
        free(host);
        char name[64];
        snprintf(name, sizeof name, "gpu.rs.fused.%d", t);
        chorus_tensor tensor = {.data = inputs[t], .dtype = CHORUS_FLOAT32, .ndims = 2,
                                .shape = {rows[t], WIDTH}, .memory = CHORUS_MEMORY_CUDA,
                                .device = device};
        EXPECT_STATUS(chorus_reducescatter_async(name, &tensor, CHORUS_SUM, &handles[t]),
                      CHORUS_OK);
    }
    for (int t = 0; t < TENSORS; t++) {
        EXPECT_STATUS(chorus_wait(handles[t]), CHORUS_OK);
        chorus_tensor block = {0};
        EXPECT_STATUS(chorus_handle_output(handles[t], &block), CHORUS_OK);
        int64_t mine = rows[t] / test_size + (test_rank < rows[t] % test_size ? 1 : 0);
        EXPECT(block.shape[0] == mine, "fused reducescatter %d: %lld rows, expected %lld", t,
               (long long)block.shape[0], (long long)mine);
        if (block.shape[0] == mine && mine > 0) {
            float *result = malloc((size_t)(mine * WIDTH) * sizeof *result);
            gpu_copy(result, block.data, (size_t)(mine * WIDTH) * sizeof *result);
            char why[256];
            EXPECT(reference_check_reduced(result, (size_t)(first_row(rows[t], test_rank) * WIDTH),
                                           (size_t)(mine * WIDTH), CHORUS_FLOAT32, CHORUS_SUM,
                                           test_size, NULL, seed + (uint64_t)t, 1, 1, why,
                                           sizeof why) < 0,
                   "fused reducescatter %d: %s", t, why);
            free(result);
        }
        chorus_handle_free(handles[t]);
        gpu_free(inputs[t]);
    }
}

/* Rows `from` sends `to`: 0..4 times `scale`; a negative scale is the same -scale rows between
 * every pair (ncclAlltoAll). */
static int64_t rows_between(uint64_t seed, int from, int to, int64_t scale)
{
    if (scale < 0)
        return -scale;
    return (int64_t)(test_random(seed, (uint64_t)from, (uint64_t)to) % 5) * scale;
}

static void check_alltoall(uint64_t seed, int64_t width, int64_t scale, int device)
{
    test_step = "alltoall";
    size_t row_bytes = (size_t)width * sizeof(float);
    int64_t splits[8], rows = 0;
    for (int to = 0; to < test_size; to++)
        rows += splits[to] = rows_between(seed, test_rank, to, scale);
    unsigned char *host = malloc((size_t)rows * row_bytes + 1), *at = host;
    for (int to = 0; to < test_size; to++) {
        reference_fill_bytes(at, (size_t)splits[to] * row_bytes, seed * 10 + (uint64_t)to,
                             test_rank);
        at += (size_t)splits[to] * row_bytes;
    }
    void *data = to_device(host, (size_t)rows * row_bytes, device);
    char name[64];
    snprintf(name, sizeof name, "gpu.a2a.%llu", (unsigned long long)seed);
    chorus_tensor tensor = {.data = data, .dtype = CHORUS_FLOAT32, .ndims = 2,
                            .shape = {rows, width}, .memory = CHORUS_MEMORY_CUDA,
                            .device = device};
    chorus_tensor output = {0};
    int64_t received[8] = {0};
    EXPECT_STATUS(chorus_alltoall(name, &tensor, splits, &output, received), CHORUS_OK);
    int64_t total = 0;
    for (int from = 0; from < test_size; from++) {
        int64_t expected = rows_between(seed, from, test_rank, scale);
        EXPECT(received[from] == expected, "%s: %lld rows from rank %d, expected %lld", name,
               (long long)received[from], from, (long long)expected);
        total += expected;
    }
    EXPECT(output.shape[0] == total && output.memory == CHORUS_MEMORY_CUDA,
           "%s: %lld rows received, expected %lld", name, (long long)output.shape[0],
           (long long)total);
    if (output.shape[0] == total) {
        unsigned char *result = malloc((size_t)total * row_bytes + 1), *from_at = result;
        gpu_copy(result, output.data, (size_t)total * row_bytes);
        for (int from = 0; from < test_size; from++) {
            size_t bytes = (size_t)received[from] * row_bytes;
            EXPECT(reference_check_bytes(from_at, bytes, seed * 10 + (uint64_t)test_rank, from) <
                       0,
                   "%s: the rows from rank %d are wrong", name, from);
            from_at += bytes;
        }
        free(result);
    }
    gpu_free(output.data);
    gpu_free(data);
    free(host);
}

/* A grouped allgather (uneven rows, none on some ranks) and a grouped reducescatter (rows that
 * divide by the ranks: one fused ncclReduceScatter) of GPU tensors, each member's output read
 * from the one handle. */
static void check_grouped(int device)
{
    test_step = "grouped on the GPU";
    enum { MEMBERS = 3, WIDTH = 2 };
    chorus_op_args args[MEMBERS];
    char names[MEMBERS][32];
    void *inputs[MEMBERS];
    for (int m = 0; m < MEMBERS; m++) {
        int64_t rows = (test_rank + m) % 3;
        size_t bytes = (size_t)(rows * WIDTH) * sizeof(float);
        void *host = malloc(bytes + 1);
        reference_fill_bytes(host, bytes, 300 + (uint64_t)m, test_rank);
        inputs[m] = to_device(host, bytes, device);
        free(host);
        snprintf(names[m], sizeof names[m], "gpu.grouped.ag.%d", m);
        args[m] = (chorus_op_args)CHORUS_OP_ARGS_INIT;
        args[m].collective = CHORUS_ALLGATHER;
        args[m].name = names[m];
        args[m].input = (chorus_tensor){.data = inputs[m], .dtype = CHORUS_FLOAT32, .ndims = 2,
                                        .shape = {rows, WIDTH}, .memory = CHORUS_MEMORY_CUDA,
                                        .device = device};
    }
    chorus_handle *handle = NULL;
    EXPECT_STATUS(chorus_submit_group(args, MEMBERS, &handle), CHORUS_OK);
    EXPECT_STATUS(chorus_wait(handle), CHORUS_OK);
    for (int m = 0; m < MEMBERS; m++) {
        chorus_tensor gathered = {0};
        EXPECT_STATUS(chorus_handle_output_at(handle, (size_t)m, &gathered), CHORUS_OK);
        int64_t total = 0;
        for (int r = 0; r < test_size; r++)
            total += (r + m) % 3;
        EXPECT(gathered.shape[0] == total && gathered.memory == CHORUS_MEMORY_CUDA,
               "grouped GPU allgather %d: %lld rows, expected %lld", m,
               (long long)gathered.shape[0], (long long)total);
        size_t all = (size_t)(total * WIDTH) * sizeof(float), offset = 0;
        unsigned char *back = malloc(all + 1);
        if (gathered.shape[0] == total && all > 0)
            gpu_copy(back, gathered.data, all);
        for (int r = 0; r < test_size && gathered.shape[0] == total; r++) {
            size_t block = (size_t)((r + m) % 3 * WIDTH) * sizeof(float);
            EXPECT(reference_check_bytes(back + offset, block, 300 + (uint64_t)m, r) < 0,
                   "grouped GPU allgather %d: rank %d's rows wrong", m, r);
            offset += block;
        }
        free(back);
        gpu_free(inputs[m]);
    }
    chorus_handle_free(handle);

    for (int m = 0; m < MEMBERS; m++) {
        size_t count = (size_t)((m + 1) * test_size * WIDTH);
        float *host = malloc(count * sizeof *host + 1);
        reference_fill(host, count, CHORUS_FLOAT32, CHORUS_SUM, 400 + (uint64_t)m, test_rank);
        inputs[m] = to_device(host, count * sizeof *host, device);
        free(host);
        snprintf(names[m], sizeof names[m], "gpu.grouped.rs.%d", m);
        args[m] = (chorus_op_args)CHORUS_OP_ARGS_INIT;
        args[m].collective = CHORUS_REDUCESCATTER;
        args[m].name = names[m];
        args[m].input = (chorus_tensor){.data = inputs[m], .dtype = CHORUS_FLOAT32, .ndims = 2,
                                        .shape = {(m + 1) * test_size, WIDTH},
                                        .memory = CHORUS_MEMORY_CUDA, .device = device};
    }
    EXPECT_STATUS(chorus_submit_group(args, MEMBERS, &handle), CHORUS_OK);
    EXPECT_STATUS(chorus_wait(handle), CHORUS_OK);
    for (int m = 0; m < MEMBERS; m++) {
        chorus_tensor block = {0};
        EXPECT_STATUS(chorus_handle_output_at(handle, (size_t)m, &block), CHORUS_OK);
        size_t mine = (size_t)((m + 1) * WIDTH);
        EXPECT(block.shape[0] == m + 1, "grouped GPU reducescatter %d: %lld rows", m,
               (long long)block.shape[0]);
        if (block.shape[0] == m + 1) {
            float *result = malloc(mine * sizeof *result);
            gpu_copy(result, block.data, mine * sizeof *result);
            char why[256];
            EXPECT(reference_check_reduced(result, (size_t)test_rank * mine, mine,
                                           CHORUS_FLOAT32, CHORUS_SUM, test_size, NULL,
                                           400 + (uint64_t)m, 1, 1, why, sizeof why) < 0,
                   "grouped GPU reducescatter %d: %s", m, why);
            free(result);
        }
        gpu_free(inputs[m]);
    }
    chorus_handle_free(handle);
}

/* Allreduce, broadcast and allgather of GPU tensors in a set of the even ranks, while every
 * rank also runs an allreduce of the whole job. */
static void check_process_set(int device)
{
    test_step = "process set";
    int evens[8], count = 0;
    for (int r = 0; r < test_size; r += 2)
        evens[count++] = r;
    int set = 0;
    EXPECT_STATUS(chorus_process_set_add(evens, count, &set), CHORUS_OK);
    int me = test_rank % 2 == 0 ? test_rank / 2 : -1;
    enum { COUNT = 1021 };
    float host[COUNT];
    reference_fill(host, COUNT, CHORUS_FLOAT32, CHORUS_SUM, 77, test_rank);
    float *whole = to_device(host, sizeof host, device);
    chorus_tensor job_tensor = {.data = whole, .dtype = CHORUS_FLOAT32, .ndims = 1,
                                .shape = {COUNT}, .memory = CHORUS_MEMORY_CUDA, .device = device};
    chorus_handle *job = NULL;
    EXPECT_STATUS(chorus_allreduce_async("gpu.set.job", &job_tensor, NULL, CHORUS_SUM, &job),
                  CHORUS_OK);
    if (me >= 0) {
        float mine[COUNT];
        reference_fill(mine, COUNT, CHORUS_FLOAT32, CHORUS_SUM, 78, me);
        float *data = to_device(mine, sizeof mine, device);
        chorus_op_args args = CHORUS_OP_ARGS_INIT;
        args.name = "gpu.set.allreduce";
        args.process_set = set;
        args.input = (chorus_tensor){.data = data, .dtype = CHORUS_FLOAT32, .ndims = 1,
                                     .shape = {COUNT}, .memory = CHORUS_MEMORY_CUDA,
                                     .device = device};
        expect_completes(&args);
        gpu_copy(mine, data, sizeof mine);
        char why[256];
        EXPECT(reference_check_allreduce(mine, COUNT, CHORUS_FLOAT32, CHORUS_SUM, count, NULL, 78,
                                         1, 1, why, sizeof why) < 0,
               "allreduce in the set: %s", why);
        int root = evens[count - 1];
        unsigned char bytes[333];
        reference_fill_bytes(bytes, sizeof bytes, 79, root);
        if (test_rank != root)
            memset(bytes, 0, sizeof bytes);
        unsigned char *shared = to_device(bytes, sizeof bytes, device);
        args = (chorus_op_args)CHORUS_OP_ARGS_INIT;
        args.collective = CHORUS_BROADCAST;
        args.name = "gpu.set.broadcast";
        args.process_set = set;
        args.root = root;
        args.input = (chorus_tensor){.data = shared, .dtype = CHORUS_UINT8, .ndims = 1,
                                     .shape = {sizeof bytes}, .memory = CHORUS_MEMORY_CUDA,
                                     .device = device};
        expect_completes(&args);
        gpu_copy(bytes, shared, sizeof bytes);
        EXPECT(reference_check_bytes(bytes, sizeof bytes, 79, root) < 0,
               "broadcast from rank %d in the set", root);
        gpu_free(shared);
        gpu_free(data);
    }
    EXPECT_STATUS(chorus_wait(job), CHORUS_OK);
    chorus_handle_free(job);
    gpu_copy(host, whole, sizeof host);
    char why[256];
    EXPECT(reference_check_allreduce(host, COUNT, CHORUS_FLOAT32, CHORUS_SUM, test_size, NULL, 77,
                                     1, 1, why, sizeof why) < 0,
           "allreduce of the job beside the set: %s", why);
    gpu_free(whole);
    EXPECT_STATUS(chorus_process_set_remove(set), CHORUS_OK);
}

int main(int argc, char **argv)
{
    if (!gpu_compiled() || gpu_device_count() == 0) {
        printf("gpu_scatter_exchange: %s; skipped\n",
               gpu_compiled() ? "no CUDA device visible" : "chorus built without CUDA");
        return 77;
    }
    test_start(&argc, &argv, 120);
    test_init_chorus();
    int device = chorus_local_rank();
    int skip = device >= gpu_device_count() || test_size > 8, any_skip = 0;
    MPI_Allreduce(&skip, &any_skip, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any_skip) {
        if (test_rank == 0)
            printf("gpu_scatter_exchange: fewer GPUs than ranks per host; skipped\n");
        chorus_shutdown();
        MPI_Finalize();
        return 77;
    }
    /* Uneven rows (by allreduce), and rows that divide by the ranks (by ncclReduceScatter). */
    const int64_t rows[] = {0, 1, test_size - 1, 7, 1021, 5 * test_size};
    for (int d = 0; d < CHORUS_DTYPE_COUNT; d++)
        for (int o = 0; o < CHORUS_OP_COUNT; o++)
            for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
                /* 16-bit integers and integer averages go through host memory; bool takes no
                 * average. */
                if (o == CHORUS_ADASUM || (d == CHORUS_BOOL && o == CHORUS_AVERAGE))
                    continue;
                check_reducescatter((chorus_dtype)d, (chorus_op)o, rows[r],
                                    (uint64_t)(1000 + 100 * d + 10 * o) + r, device);
            }
    /* Blocks larger than the emulation's slot: the reduction runs in chunks. */
    check_reducescatter(CHORUS_FLOAT32, CHORUS_AVERAGE, 100000 * (int64_t)test_size, 77, device);
    const int64_t uneven[FUSED_TENSORS] = {0, 1, test_size > 1 ? test_size - 1 : 2, 7, 13, 1021};
    const int64_t even[FUSED_TENSORS] = {0, test_size, 2 * test_size, 7 * test_size,
                                         13 * test_size, 1021 * test_size};
    check_fused_reducescatters(uneven, 500, device);
    check_fused_reducescatters(even, 600, device);
    /* Small rows, then rows past the emulation's 1 MiB slot. */
    check_alltoall(11, 3, 1, device);
    check_alltoall(12, 1, 0, device);
    check_alltoall(13, 256, 300, device);
    /* The same rows between every pair: small, then past the emulation's share of a slot. */
    check_alltoall(14, 5, -3, device);
    check_alltoall(15, 256, -700, device);
    check_grouped(device);
    check_process_set(device);
    test_step = "shutdown";
    EXPECT_STATUS(chorus_shutdown(), CHORUS_OK);
    return test_finish("gpu_scatter_exchange");
}
