/*
 * gpu_collectives.c — the NCCL path through the public API, checked against the reference:
 * allreduce of every dtype and op at counts from 0 to over a million (scale factors on sums and
 * averages of floats, a postscale on integer sums; 16-bit integers, integer averages and scaled
 * integers through host memory), 500 small tensors fused in the device's fusion
 * buffer, host and device tensors in one step, broadcasts from every root, allgathers of uneven
 * rows (alone and fused) and of even rows (ncclAllGather, fused with the others); inputs whose
 * producing copies are still queued, on the default stream or the caller's, when they are
 * submitted. Runs on a real GPU and, in CI, on the emulated CUDA runtime and NCCL
 * (test/gpu/emulation). Exits 77 (meson: SKIP) when chorus was built without CUDA, when no
 * device is visible, or when there are fewer devices than ranks on this host.
 */
#include "../../lib/gpu/gpu.h"
#include "../common/reference.h"
#include "../mpi/mpi_test.h"

#include <math.h>
#ifdef CHORUS_TEST_CUDA
#include <cuda_runtime.h>
#endif

static void *to_device(const void *host, size_t bytes, int device)
{
    void *memory = gpu_malloc(bytes, device);
    if (memory != NULL && bytes != 0)
        gpu_copy(memory, host, bytes);
    return memory;
}

/* One allreduce of `count` elements, in place, with the scale factors an op allows on the GPU
 * (sums and averages of floating types: a prescale of 0.5 and a postscale of 2), checked
 * against the reference. */
static void check_allreduce(chorus_dtype dtype, size_t count, chorus_op op, uint64_t seed,
                            int device)
{
    test_step = "allreduce";
    bool floating = dtype == CHORUS_FLOAT16 || dtype == CHORUS_BFLOAT16 ||
                    dtype == CHORUS_FLOAT32 || dtype == CHORUS_FLOAT64;
    bool summing = op == CHORUS_SUM || op == CHORUS_AVERAGE;
    /* Integers take a postscale (rounded, through host memory: NCCL scales floats only). */
    double pre = floating && summing ? 0.5 : 1.0;
    double post = floating && summing ? 2.0 : dtype != CHORUS_BOOL && op == CHORUS_SUM ? 3.0 : 1.0;
    size_t bytes = count * chorus_dtype_size(dtype);
    void *host = malloc(bytes + 1);
    reference_fill(host, count, dtype, op, seed, test_rank);
    void *data = to_device(host, bytes, device);
    chorus_op_args args = CHORUS_OP_ARGS_INIT;
    char name[64];
    snprintf(name, sizeof name, "gpu.%s.%s.%zu", chorus_dtype_name(dtype), chorus_op_name(op),
             count);
    args.name = name;
    args.input = (chorus_tensor){.data = data, .dtype = dtype, .ndims = 1,
                                 .shape = {(int64_t)count}, .memory = CHORUS_MEMORY_CUDA,
                                 .device = device};
    args.op = op;
    args.prescale_factor = pre;
    args.postscale_factor = post;
    expect_completes(&args);
    gpu_copy(host, data, bytes);
    char why[256];
    EXPECT(reference_check_allreduce(host, count, dtype, op, test_size, NULL, seed, pre, post,
                                     why, sizeof why) < 0,
           "%s: %s", name, why);
    gpu_free(data);
    free(host);
}

/* FP16 and BF16 compression of a float32 on the GPU fail cleanly at submit: the conversion
 * would need a kernel, which chorus does not have. */
static void check_unsupported_compression(int device)
{
    test_step = "unsupported compression";
    float values[5] = {1, 2, 3, 4, 5};
    void *data = to_device(values, sizeof values, device);
    chorus_op_args args = CHORUS_OP_ARGS_INIT;
    args.name = "gpu.compressed";
    args.input = (chorus_tensor){.data = data, .dtype = CHORUS_FLOAT32, .ndims = 1, .shape = {5},
                                 .memory = CHORUS_MEMORY_CUDA, .device = device};
    const chorus_compression compressions[] = {CHORUS_COMPRESSION_FP16, CHORUS_COMPRESSION_BF16};
    for (size_t c = 0; c < sizeof compressions / sizeof compressions[0]; c++) {
        args.compression = compressions[c];
        chorus_handle *handle = NULL;
        EXPECT_STATUS(chorus_submit(&args, &handle), CHORUS_ERR_NOT_SUPPORTED);
        EXPECT(strstr(chorus_last_error(), "gpu.compressed") != NULL &&
                   strstr(chorus_last_error(), "compression") != NULL,
               "unclear error: %s", chorus_last_error());
    }
    /* An error feedback buffer in host memory for a GPU tensor is refused. */
    float residual[5] = {0};
    args.compression = CHORUS_COMPRESSION_INT8;
    args.error_feedback = residual;
    chorus_handle *handle = NULL;
    EXPECT_STATUS(chorus_submit(&args, &handle), CHORUS_ERR_INVALID_ARGUMENT);
    EXPECT(strstr(chorus_last_error(), "the error_feedback buffer lies in host memory") != NULL,
           "unclear error: %s", chorus_last_error());
    gpu_free(data);
}

/* INT8, INT4 and TOPK of GPU tensors go through host memory: each result, and each error
 * feedback residual (on the device too), is the same bits as a host tensor's of the same values
 * under the same name, for float32, float16 and bfloat16, fused several to a batch. (The host
 * path is checked against the double sum in mpi_quantized and mpi_topk.) */
static void check_lossy_compression(int device)
{
    test_step = "lossy compression through host memory";
    const chorus_dtype dtypes[] = {CHORUS_FLOAT32, CHORUS_FLOAT16, CHORUS_BFLOAT16};
    const chorus_compression compressions[] = {CHORUS_COMPRESSION_INT8, CHORUS_COMPRESSION_INT4,
                                               CHORUS_COMPRESSION_TOPK};
    const size_t counts[] = {0, 1, 3, 1021};
    enum { TENSORS = 3 * 4, MOST = 1021 * 4 };
    static char host[TENSORS][MOST], back[TENSORS][MOST];
    static float host_residual[TENSORS][MOST], device_residual[TENSORS][MOST];
    void *data[TENSORS], *residual[TENSORS];
    for (size_t c = 0; c < 3; c++) {
        /* The host tensors, then the device ones, each set submitted at once (fused). */
        for (int on_device = 0; on_device < 2; on_device++) {
            chorus_handle *handles[TENSORS];
            for (size_t t = 0; t < TENSORS; t++) {
                chorus_dtype dtype = dtypes[t / 4];
                size_t count = counts[t % 4], bytes = count * chorus_dtype_size(dtype);
                uint64_t seed = 500 + 10 * c + t;
                /* The host pass leaves its results in host[] and host_residual[]. */
                char *input = on_device ? back[t] : host[t];
                float *zeros = on_device ? device_residual[t] : host_residual[t];
                reference_fill(input, count, dtype, CHORUS_SUM, seed, test_rank);
                memset(zeros, 0, sizeof host_residual[t]);
                data[t] = on_device ? to_device(input, bytes, device) : input;
                residual[t] = on_device ? to_device(zeros, count * sizeof(float), device) : zeros;
                char name[64];
                snprintf(name, sizeof name, "gpu.lossy.%zu.%zu", c, t);
                chorus_op_args args = CHORUS_OP_ARGS_INIT;
                args.name = name;
                args.input = (chorus_tensor){
                    .data = data[t], .dtype = dtype, .ndims = 1, .shape = {(int64_t)count},
                    .memory = on_device ? CHORUS_MEMORY_CUDA : CHORUS_MEMORY_HOST,
                    .device = on_device ? device : 0};
                args.op = t % 2 ? CHORUS_AVERAGE : CHORUS_SUM;
                args.prescale_factor = 0.5;
                args.compression = compressions[c];
                args.compression_ratio = compressions[c] == CHORUS_COMPRESSION_TOPK ? 0.1 : 0;
                args.error_feedback = residual[t];
                EXPECT_STATUS(chorus_submit(&args, &handles[t]), CHORUS_OK);
            }
            for (size_t t = 0; t < TENSORS; t++) {
                EXPECT_STATUS(chorus_wait(handles[t]), CHORUS_OK);
                chorus_handle_free(handles[t]);
                if (!on_device)
                    continue;
                size_t count = counts[t % 4];
                gpu_copy(back[t], data[t], count * chorus_dtype_size(dtypes[t / 4]));
                gpu_copy(device_residual[t], residual[t], count * sizeof(float));
                EXPECT(memcmp(back[t], host[t], count * chorus_dtype_size(dtypes[t / 4])) == 0,
                       "%s %s of %zu values on the GPU: not the host's result",
                       chorus_dtype_name(dtypes[t / 4]),
                       c == 0 ? "int8" : c == 1 ? "int4" : "topk", count);
                EXPECT(memcmp(device_residual[t], host_residual[t], count * sizeof(float)) == 0,
                       "%s %s of %zu values on the GPU: not the host's residual",
                       chorus_dtype_name(dtypes[t / 4]),
                       c == 0 ? "int8" : c == 1 ? "int4" : "topk", count);
                gpu_free(data[t]);
                gpu_free(residual[t]);
            }
        }
    }
}

/* A host tensor and a device tensor of the same step, submitted together: each goes its own way
 * (host algorithms and NCCL) and both are right. */
static void check_mixed_host_and_device(int device)
{
    test_step = "host and device tensors together";
    enum { COUNT = 4099 };
    float *host_tensor = malloc(COUNT * sizeof *host_tensor);
    float *staging = malloc(COUNT * sizeof *staging);
    reference_fill(host_tensor, COUNT, CHORUS_FLOAT32, CHORUS_SUM, 81, test_rank);
    reference_fill(staging, COUNT, CHORUS_FLOAT32, CHORUS_SUM, 82, test_rank);
    void *device_tensor = to_device(staging, COUNT * sizeof *staging, device);
    chorus_tensor on_host = floats(host_tensor, COUNT);
    chorus_tensor on_device = {.data = device_tensor, .dtype = CHORUS_FLOAT32, .ndims = 1,
                               .shape = {COUNT}, .memory = CHORUS_MEMORY_CUDA, .device = device};
    chorus_handle *handles[2];
    EXPECT_STATUS(chorus_allreduce_async("mixed.host", &on_host, NULL, CHORUS_SUM, &handles[0]),
                  CHORUS_OK);
    EXPECT_STATUS(
        chorus_allreduce_async("mixed.device", &on_device, NULL, CHORUS_SUM, &handles[1]),
        CHORUS_OK);
    for (int h = 0; h < 2; h++) {
        EXPECT_STATUS(chorus_wait(handles[h]), CHORUS_OK);
        chorus_handle_free(handles[h]);
    }
    gpu_copy(staging, device_tensor, COUNT * sizeof *staging);
    char why[256];
    EXPECT(reference_check_allreduce(host_tensor, COUNT, CHORUS_FLOAT32, CHORUS_SUM, test_size,
                                     NULL, 81, 1.0, 1.0, why, sizeof why) < 0,
           "mixed.host: %s", why);
    EXPECT(reference_check_allreduce(staging, COUNT, CHORUS_FLOAT32, CHORUS_SUM, test_size, NULL,
                                     82, 1.0, 1.0, why, sizeof why) < 0,
           "mixed.device: %s", why);
    gpu_free(device_tensor);
    free(host_tensor);
    free(staging);
}

/* Tensors submitted together fuse into the device's fusion buffer: 500 small averages (every
 * third out of place, one of 0 elements) and one over the fusion tensor limit, each checked. */
/* Adasum of GPU tensors (staged through host memory): orthogonal contributions add up, equal
 * ones stay as they are, and random ones give what the same Adasum of host tensors gives. */
static void check_adasum(int device)
{
    test_step = "adasum";
    enum { COUNT = 1021 };
    static double orthogonal[COUNT], equal[COUNT], random_host[COUNT], random_device[COUNT];
    for (size_t i = 0; i < COUNT; i++) {
        orthogonal[i] = (int)(i % (size_t)test_size) == test_rank ? (double)(test_rank + 1) : 0.0;
        equal[i] = (double)(test_random(31, 0, i) % 2001) / 1000.0 - 1.0;
        random_host[i] = (double)(test_random(32, (uint64_t)test_rank, i) % 2001) / 1000.0 - 1.0;
    }
    double *inputs[] = {orthogonal, equal, random_device};
    memcpy(random_device, random_host, sizeof random_host);
    const char *names[] = {"gpu.adasum.orthogonal", "gpu.adasum.equal", "gpu.adasum.random"};
    for (size_t k = 0; k < 3; k++) {
        double *data = to_device(inputs[k], sizeof orthogonal, device);
        chorus_tensor tensor = {.data = data, .dtype = CHORUS_FLOAT64, .ndims = 1,
                                .shape = {COUNT}, .memory = CHORUS_MEMORY_CUDA, .device = device};
        EXPECT_STATUS(chorus_allreduce(names[k], &tensor, NULL, CHORUS_ADASUM), CHORUS_OK);
        gpu_copy(inputs[k], data, sizeof orthogonal);
        gpu_free(data);
    }
    chorus_tensor host = {.data = random_host, .dtype = CHORUS_FLOAT64, .ndims = 1,
                          .shape = {COUNT}};
    EXPECT_STATUS(chorus_allreduce("host.adasum.random", &host, NULL, CHORUS_ADASUM), CHORUS_OK);
    for (size_t i = 0; i < COUNT; i++) {
        EXPECT(fabs(orthogonal[i] - (double)(i % (size_t)test_size + 1)) < 1e-12,
               "orthogonal element %zu: %g", i, orthogonal[i]);
        EXPECT(fabs(equal[i] - ((double)(test_random(31, 0, i) % 2001) / 1000.0 - 1.0)) < 1e-12,
               "equal element %zu: %g", i, equal[i]);
        EXPECT(random_device[i] == random_host[i], "random element %zu: GPU %.17g, host %.17g", i,
               random_device[i], random_host[i]);
    }
}

static void check_fused_batch(int device)
{
    test_step = "fused allreduce";
    enum { TENSORS = 501 };
    size_t counts[TENSORS];
    void *inputs[TENSORS], *outputs[TENSORS];
    chorus_handle *handles[TENSORS];
    for (int t = 0; t < TENSORS; t++) {
        counts[t] = t == 7 ? 0 : t == TENSORS - 1 ? (size_t)1 << 18 : (size_t)(t * 37 % 1999 + 1);
        size_t bytes = counts[t] * sizeof(float);
        float *host = malloc(bytes ? bytes : 1);
        reference_fill(host, counts[t], CHORUS_FLOAT32, CHORUS_AVERAGE, 100 + (uint64_t)t,
                       test_rank);
        inputs[t] = to_device(host, bytes, device);
        outputs[t] = t % 3 == 0 ? gpu_malloc(bytes, device) : inputs[t];
        free(host);
        chorus_op_args args = CHORUS_OP_ARGS_INIT;
        char name[32];
        snprintf(name, sizeof name, "gpu.fused.%d", t);
        args.name = name;
        args.input = (chorus_tensor){.data = inputs[t], .dtype = CHORUS_FLOAT32, .ndims = 1,
                                     .shape = {(int64_t)counts[t]},
                                     .memory = CHORUS_MEMORY_CUDA, .device = device};
        args.output = outputs[t] != inputs[t] ? outputs[t] : NULL;
        args.op = CHORUS_AVERAGE;
        args.postscale_factor = 2.0;
        EXPECT_STATUS(chorus_submit(&args, &handles[t]), CHORUS_OK);
    }
    for (int t = 0; t < TENSORS; t++) {
        EXPECT_STATUS(chorus_wait(handles[t]), CHORUS_OK);
        chorus_handle_free(handles[t]);
        size_t bytes = counts[t] * sizeof(float);
        float *host = malloc(bytes ? bytes : 1);
        gpu_copy(host, outputs[t], bytes);
        char why[256];
        EXPECT(reference_check_allreduce(host, counts[t], CHORUS_FLOAT32, CHORUS_AVERAGE,
                                         test_size, NULL, 100 + (uint64_t)t, 1.0, 2.0, why,
                                         sizeof why) < 0,
               "gpu.fused.%d: %s", t, why);
        free(host);
        if (outputs[t] != inputs[t])
            gpu_free(outputs[t]);
        gpu_free(inputs[t]);
    }
}

/* Rank r's rows of allgather g below: uneven for the first four (a broadcast per rank), then
 * the same on every rank (ncclAllGather), one of them past the emulation's 1 MiB slot. */
static int64_t fused_gather_rows(int r, int g)
{
    return g < 4 ? (r + g) % 3 : g == 4 ? 2 : 40000;
}

/* Broadcasts from the last rank and allgathers of uneven and even rows, submitted together so
 * that each kind runs as one NCCL group; every result checked. */
static void check_fused_broadcasts_and_allgathers(int device)
{
    test_step = "fused broadcasts and allgathers";
    enum { BROADCASTS = 5, GATHERS = 6 };
    const size_t sizes[BROADCASTS] = {1, 7, 1000, 4099, 65537};
    int root = test_size - 1;
    void *broadcast_data[BROADCASTS], *gather_data[GATHERS];
    chorus_handle *broadcasts[BROADCASTS], *gathers[GATHERS];
    for (int b = 0; b < BROADCASTS; b++) {
        uint8_t *host = malloc(sizes[b]);
        reference_fill_bytes(host, sizes[b], 40 + (uint64_t)b, root);
        if (test_rank != root)
            memset(host, 0, sizes[b]);
        broadcast_data[b] = to_device(host, sizes[b], device);
        free(host);
        char name[32];
        snprintf(name, sizeof name, "gpu.fbc.%d", b);
        chorus_tensor tensor = {.data = broadcast_data[b], .dtype = CHORUS_UINT8, .ndims = 1,
                                .shape = {(int64_t)sizes[b]}, .memory = CHORUS_MEMORY_CUDA,
                                .device = device};
        EXPECT_STATUS(chorus_broadcast_async(name, &tensor, root, &broadcasts[b]), CHORUS_OK);
    }
    for (int g = 0; g < GATHERS; g++) {
        int64_t rows = fused_gather_rows(test_rank, g), columns = g * 7 + 1;
        size_t bytes = (size_t)(rows * columns) * sizeof(float);
        uint8_t *host = malloc(bytes + 1);
        reference_fill_bytes(host, bytes, 60 + (uint64_t)g, test_rank);
        gather_data[g] = to_device(host, bytes, device);
        free(host);
        char name[32];
        snprintf(name, sizeof name, "gpu.fag.%d", g);
        chorus_tensor tensor = {.data = gather_data[g], .dtype = CHORUS_FLOAT32, .ndims = 2,
                                .shape = {rows, columns}, .memory = CHORUS_MEMORY_CUDA,
                                .device = device};
        EXPECT_STATUS(chorus_allgather_async(name, &tensor, &gathers[g]), CHORUS_OK);
    }
    for (int b = 0; b < BROADCASTS; b++) {
        EXPECT_STATUS(chorus_wait(broadcasts[b]), CHORUS_OK);
        chorus_handle_free(broadcasts[b]);
        uint8_t *host = malloc(sizes[b]);
        gpu_copy(host, broadcast_data[b], sizes[b]);
        EXPECT(reference_check_bytes(host, sizes[b], 40 + (uint64_t)b, root) < 0,
               "broadcast gpu.fbc.%d wrong", b);
        free(host);
        gpu_free(broadcast_data[b]);
    }
    for (int g = 0; g < GATHERS; g++) {
        EXPECT_STATUS(chorus_wait(gathers[g]), CHORUS_OK);
        chorus_tensor gathered;
        EXPECT_STATUS(chorus_handle_take_output(gathers[g], &gathered), CHORUS_OK);
        chorus_handle_free(gathers[g]);
        int64_t total = 0, columns = g * 7 + 1;
        for (int r = 0; r < test_size; r++)
            total += fused_gather_rows(r, g);
        EXPECT(gathered.shape[0] == total && gathered.memory == CHORUS_MEMORY_CUDA,
               "gpu.fag.%d: gathered %lld rows", g, (long long)gathered.shape[0]);
        size_t bytes = (size_t)(total * columns) * sizeof(float), offset = 0;
        uint8_t *host = malloc(bytes + 1);
        gpu_copy(host, gathered.data, bytes);
        for (int r = 0; r < test_size && gathered.shape[0] == total; r++) {
            size_t block = (size_t)(fused_gather_rows(r, g) * columns) * sizeof(float);
            EXPECT(reference_check_bytes(host + offset, block, 60 + (uint64_t)g, r) < 0,
                   "gpu.fag.%d: rows of rank %d wrong", g, r);
            offset += block;
        }
        free(host);
        gpu_free(gathered.data);
        gpu_free(gather_data[g]);
    }
}

#ifdef CHORUS_TEST_CUDA
/* Inputs whose producing work is still queued on the producer's stream when they are
 * submitted: copied from the host behind a long device-to-device copy, on the legacy default
 * stream (cuda_stream NULL) and then on a non-blocking stream of the caller's own (named in
 * cuda_stream). chorus must read them only once that work has run; a read before it sees
 * whatever cudaMalloc left there. One tensor alone (NCCL on the input), then a fused batch. */
static void check_late_producers(int device)
{
    test_step = "late producers";
    enum { TENSORS = 33 };
    const size_t busy_bytes = (size_t)64 << 20;
    cudaStream_t own = NULL;
    EXPECT(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking) == cudaSuccess,
           "cudaStreamCreateWithFlags failed");
    void *busy_from = gpu_malloc(busy_bytes, device), *busy_to = gpu_malloc(busy_bytes, device);
    EXPECT(busy_from != NULL && busy_to != NULL, "no device memory for the busy copies");
    for (int round = 0; round < 4 && busy_from != NULL && busy_to != NULL; round++) {
        bool legacy = round < 2, alone = round % 2 == 0;
        cudaStream_t stream = legacy ? cudaStreamLegacy : own;
        size_t tensors = alone ? 1 : TENSORS;
        float *hosts[TENSORS];
        void *inputs[TENSORS];
        size_t counts[TENSORS];
        chorus_handle *handles[TENSORS];
        for (int copy = 0; copy < 8; copy++)
            cudaMemcpyAsync(busy_to, busy_from, busy_bytes, cudaMemcpyDeviceToDevice, stream);
        for (size_t t = 0; t < tensors; t++) {
            counts[t] = alone ? 100003 : t * 97 % 1031 + 1;
            hosts[t] = malloc(counts[t] * sizeof(float));
            reference_fill(hosts[t], counts[t], CHORUS_FLOAT32, CHORUS_SUM, 300 + 50 * round + t,
                           test_rank);
            inputs[t] = gpu_malloc(counts[t] * sizeof(float), device);
            cudaMemcpyAsync(inputs[t], hosts[t], counts[t] * sizeof(float),
                            cudaMemcpyHostToDevice, stream);
            chorus_op_args args = CHORUS_OP_ARGS_INIT;
            char name[48];
            snprintf(name, sizeof name, "gpu.late.%d.%zu", round, t);
            args.name = name;
            args.input = (chorus_tensor){.data = inputs[t], .dtype = CHORUS_FLOAT32, .ndims = 1,
                                         .shape = {(int64_t)counts[t]},
                                         .memory = CHORUS_MEMORY_CUDA, .device = device};
            args.op = CHORUS_SUM;
            args.postscale_factor = 2.0;
            args.cuda_stream = legacy ? NULL : (void *)own;
            EXPECT_STATUS(chorus_submit(&args, &handles[t]), CHORUS_OK);
        }
        for (size_t t = 0; t < tensors; t++) {
            EXPECT_STATUS(chorus_wait(handles[t]), CHORUS_OK);
            chorus_handle_free(handles[t]);
            gpu_copy(hosts[t], inputs[t], counts[t] * sizeof(float));
            char why[256];
            EXPECT(reference_check_allreduce(hosts[t], counts[t], CHORUS_FLOAT32, CHORUS_SUM,
                                             test_size, NULL, 300 + 50 * round + t, 1.0, 2.0,
                                             why, sizeof why) < 0,
                   "%s stream, %s, tensor %zu: %s", legacy ? "default" : "own",
                   alone ? "alone" : "fused", t, why);
            gpu_free(inputs[t]);
            free(hosts[t]);
        }
    }
    gpu_free(busy_from);
    gpu_free(busy_to);
    if (own != NULL)
        cudaStreamDestroy(own);
}
#endif

int main(int argc, char **argv)
{
    if (!gpu_compiled() || gpu_device_count() == 0) {
        printf("gpu_collectives: %s; skipped\n",
               gpu_compiled() ? "no CUDA device visible" : "chorus built without CUDA");
        return 77;
    }
    test_start(&argc, &argv, 120);
    test_init_chorus();
    int device = chorus_local_rank();
    int skip = device >= gpu_device_count(), any_skip = 0;
    MPI_Allreduce(&skip, &any_skip, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any_skip) {
        if (test_rank == 0)
            printf("gpu_collectives: fewer GPUs than ranks per host; skipped\n");
        chorus_shutdown();
        MPI_Finalize();
        return 77;
    }
    /* Every dtype and op, at counts of 0, 1, fewer than the ranks, a prime and over a million.
     * Averages of 16-bit floats scale by a 16-bit scalar; 16-bit integers, integer averages and
     * scaled integer sums go through host memory. */
    const size_t counts[] = {0, 1, 3, 1021, (1 << 20) + 7};
    for (int d = 0; d < CHORUS_DTYPE_COUNT; d++)
        for (int o = 0; o < CHORUS_OP_COUNT; o++)
            for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
                /* Adasum: check_adasum; bool takes no average. */
                if ((c == 4 && d != CHORUS_FLOAT32) || o == CHORUS_ADASUM ||
                    (d == CHORUS_BOOL && o == CHORUS_AVERAGE))
                    continue;
                check_allreduce((chorus_dtype)d, counts[c], (chorus_op)o,
                                (uint64_t)(100 * d + 10 * o) + c, device);
            }
    check_unsupported_compression(device);
    check_lossy_compression(device);
    check_mixed_host_and_device(device);
    check_fused_batch(device);
#ifdef CHORUS_TEST_CUDA
    check_late_producers(device);
#endif
    check_adasum(device);
    check_fused_broadcasts_and_allgathers(device);

    test_step = "broadcast from every root";
    size_t bytes = 100003;
    uint8_t *host = malloc(bytes);
    void *data = NULL;
    chorus_tensor tensor;
    for (int root = 0; root < test_size; root++) {
        reference_fill_bytes(host, bytes, 5 + (uint64_t)root, root);
        if (test_rank != root)
            memset(host, 0, bytes);
        data = to_device(host, bytes, device);
        tensor = (chorus_tensor){.data = data, .dtype = CHORUS_UINT8, .ndims = 1,
                                 .shape = {(int64_t)bytes}, .memory = CHORUS_MEMORY_CUDA,
                                 .device = device};
        EXPECT_STATUS(chorus_broadcast("gpu.bcast", &tensor, root), CHORUS_OK);
        gpu_copy(host, data, bytes);
        EXPECT(reference_check_bytes(host, bytes, 5 + (uint64_t)root, root) < 0,
               "broadcast from rank %d wrong", root);
        gpu_free(data);
    }
    free(host);

    test_step = "allgather";
    int64_t rows = test_rank + 1;
    size_t row_bytes = 3 * sizeof(float);
    host = malloc((size_t)rows * row_bytes);
    reference_fill_bytes(host, (size_t)rows * row_bytes, 6, test_rank);
    data = to_device(host, (size_t)rows * row_bytes, device);
    tensor = (chorus_tensor){.data = data, .dtype = CHORUS_FLOAT32, .ndims = 2,
                             .shape = {rows, 3}, .memory = CHORUS_MEMORY_CUDA, .device = device};
    chorus_tensor gathered;
    EXPECT_STATUS(chorus_allgather("gpu.gather", &tensor, &gathered), CHORUS_OK);
    int64_t total = (int64_t)test_size * (test_size + 1) / 2;
    EXPECT(gathered.shape[0] == total && gathered.memory == CHORUS_MEMORY_CUDA,
           "gathered %lld rows", (long long)gathered.shape[0]);
    uint8_t *back = malloc((size_t)total * row_bytes);
    gpu_copy(back, gathered.data, (size_t)total * row_bytes);
    size_t offset = 0;
    for (int r = 0; r < test_size; r++) {
        EXPECT(reference_check_bytes(back + offset, (size_t)(r + 1) * row_bytes, 6, r) < 0,
               "rows of rank %d wrong", r);
        offset += (size_t)(r + 1) * row_bytes;
    }
    gpu_free(gathered.data);
    gpu_free(data);
    free(back);
    free(host);
    EXPECT_STATUS(chorus_shutdown(), CHORUS_OK);
    return test_finish("gpu_collectives");
}
