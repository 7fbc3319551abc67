/*
 * mpi_shared_heap.c — allreduces of tensors in the shared heap (chorus_mem_alloc), checked
 * against the reference: on every rank (reduced in place), on some ranks only (staged as usual),
 * in place and out of place, averaged and scaled, at odd counts and several dtypes and ops; the
 * same bits on every rank; and chorus_mem_alloc's and chorus_mem_free's own contract.
 */
#include "../common/reference.h"
#include "mpi_test.h"

#include <stdint.h>

/* Counts from empty to several of the algorithm's 64 KiB pieces per rank, with primes and
 * fewer elements than ranks. */
static const size_t counts[] = {0, 1, 2, 3, 7, 31, 1021, 65537, 262147, 1048573};

static void *shared_or_plain(size_t bytes, bool shared)
{
    void *memory = NULL;
    if (shared)
        EXPECT_STATUS(chorus_mem_alloc(bytes, &memory), CHORUS_OK);
    else
        memory = malloc(bytes ? bytes : 1);
    return memory;
}

static void release(void *memory, bool shared)
{
    if (shared)
        EXPECT_STATUS(chorus_mem_free(memory), CHORUS_OK);
    else
        free(memory);
}

/* Whether this rank's tensors lie in the heap in `layout`: 0 every rank, 1 none, 2 every other
 * rank, 3 all but the last. */
static bool in_heap(int layout)
{
    switch (layout) {
    case 0:
        return true;
    case 1:
        return false;
    case 2:
        return test_rank % 2 == 0;
    default:
        return test_rank != test_size - 1;
    }
}

struct variant {
    chorus_dtype dtype;
    chorus_op op;
    double prescale, postscale;
    bool out_of_place;
};

static void check_one(size_t count, int layout, const struct variant *variant, uint64_t seed)
{
    size_t bytes = count * chorus_dtype_size(variant->dtype);
    bool shared = in_heap(layout);
    void *input = shared_or_plain(bytes, shared);
    void *output = variant->out_of_place ? shared_or_plain(bytes, shared) : input;
    reference_fill(input, count, variant->dtype, variant->op, seed, test_rank);
    chorus_tensor in = {
        .data = input, .dtype = variant->dtype, .ndims = 1, .shape = {(int64_t)count}};
    char name[96];
    snprintf(name, sizeof name, "heap.%zu.%d.%d.%d.%d", count, layout, (int)variant->dtype,
             (int)variant->op, variant->out_of_place);
    chorus_op_args args = CHORUS_OP_ARGS_INIT;
    args.collective = CHORUS_ALLREDUCE;
    args.name = name;
    args.input = in;
    args.output = variant->out_of_place ? output : NULL;
    args.op = variant->op;
    args.prescale_factor = variant->prescale;
    args.postscale_factor = variant->postscale;
    expect_completes(&args);
    char why[256] = "";
    long wrong =
        reference_check_allreduce(output, count, variant->dtype, variant->op, test_size, NULL, seed,
                                  variant->prescale, variant->postscale, why, sizeof why);
    EXPECT(wrong < 0, "%s: element %ld: %s", name, wrong, why);
    /* Each slice is reduced by one rank for all: every rank ends with the same bits. */
    uint64_t digest = 1469598103934665603ull;
    for (size_t i = 0; i < bytes; i++)
        digest = (digest ^ ((unsigned char *)output)[i]) * 1099511628211ull;
    uint64_t lowest = digest, highest = digest;
    MPI_Allreduce(MPI_IN_PLACE, &lowest, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &highest, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    EXPECT(lowest == highest, "%s: the ranks' results differ", name);
    if (output != input)
        release(output, shared);
    release(input, shared);
}

static void test_allreduces(void)
{
    const struct variant variants[] = {
        {CHORUS_FLOAT32, CHORUS_SUM, 1.0, 1.0, false},
        {CHORUS_FLOAT64, CHORUS_AVERAGE, 1.0, 1.0, true},
        {CHORUS_FLOAT32, CHORUS_SUM, 0.5, 3.0, false},
        {CHORUS_INT32, CHORUS_MAX, 1.0, 1.0, false},
        {CHORUS_INT64, CHORUS_PRODUCT, 1.0, 1.0, true},
        {CHORUS_FLOAT16, CHORUS_SUM, 1.0, 1.0, false},
    };
    uint64_t seed = 1000;
    for (int layout = 0; layout < 4; layout++)
        for (size_t v = 0; v < sizeof variants / sizeof *variants; v++)
            for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
                /* The slow dtypes at the smaller counts only. */
                if (counts[c] > 70000 && v >= 3)
                    continue;
                test_step = "allreduce";
                check_one(counts[c], layout, &variants[v], seed++);
            }
}

/* The same tensors reduced again and again: the mappings of the peers' heaps are reused, and a
 * block freed and allocated again between calls is seen at its new place. */
static void test_reuse(void)
{
    test_step = "reuse";
    struct variant plain = {CHORUS_FLOAT32, CHORUS_SUM, 1.0, 1.0, false};
    for (int round = 0; round < 6; round++)
        check_one(100003 + (size_t)round * 4099, 0, &plain, 5000 + (uint64_t)round);
}

static void test_contract(void)
{
    test_step = "contract";
    void *memory = NULL;
    EXPECT_STATUS(chorus_mem_alloc(12345, NULL), CHORUS_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(chorus_mem_alloc(0, &memory), CHORUS_OK);
    EXPECT(memory != NULL, "a block of 0 bytes is a block");
    EXPECT_STATUS(chorus_mem_free(memory), CHORUS_OK);
    EXPECT_STATUS(chorus_mem_free(memory), CHORUS_ERR_INVALID_ARGUMENT);
    EXPECT(strstr(chorus_last_error(), "chorus_mem_alloc") != NULL, "%s", chorus_last_error());
    int on_stack = 0;
    EXPECT_STATUS(chorus_mem_free(&on_stack), CHORUS_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(chorus_mem_free(NULL), CHORUS_OK);
    /* Fresh blocks are zeroed, also where a freed block lay. */
    unsigned char *first = NULL, *second = NULL;
    EXPECT_STATUS(chorus_mem_alloc(1 << 20, (void **)&first), CHORUS_OK);
    memset(first, 0xab, 1 << 20);
    EXPECT_STATUS(chorus_mem_free(first), CHORUS_OK);
    EXPECT_STATUS(chorus_mem_alloc(1 << 20, (void **)&second), CHORUS_OK);
    size_t dirty = 0;
    for (size_t i = 0; i < (1 << 20); i++)
        dirty += second[i] != 0;
    EXPECT(dirty == 0, "%zu bytes of a new block are not zero", dirty);
    EXPECT_STATUS(chorus_mem_free(second), CHORUS_OK);
    /* More than the host's memory is refused, with the reason. */
    EXPECT_STATUS(chorus_mem_alloc((size_t)1 << 62, &memory), CHORUS_ERR_OUT_OF_MEMORY);
    EXPECT(strstr(chorus_last_error(), "shared heap") != NULL, "%s", chorus_last_error());
}

int main(int argc, char **argv)
{
    test_start(&argc, &argv, 240);
    /* Before chorus_init: the heap needs no instance, and its blocks outlive chorus_shutdown. */
    float *early = NULL;
    EXPECT_STATUS(chorus_mem_alloc(1000 * sizeof *early, (void **)&early), CHORUS_OK);
    test_init_chorus();
    test_contract();
    test_allreduces();
    test_reuse();
    chorus_tensor tensor = floats(early, 1000);
    for (int i = 0; i < 1000; i++)
        early[i] = (float)(test_rank + i);
    test_step = "early block";
    EXPECT_STATUS(chorus_allreduce("early", &tensor, NULL, CHORUS_SUM), CHORUS_OK);
    for (int i = 0; i < 1000; i++)
        if (early[i] != (float)(test_size * i + test_size * (test_size - 1) / 2)) {
            EXPECT(false, "early[%d] = %g", i, (double)early[i]);
            break;
        }
    chorus_shutdown();
    early[0] = 1.0f; /* still mapped */
    EXPECT_STATUS(chorus_mem_free(early), CHORUS_OK);
    return test_finish("mpi_shared_heap");
}
