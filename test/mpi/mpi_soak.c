/*
 * mpi_soak.c — many mixed collectives in a row: allreduces small and large, fused and alone,
 * broadcasts, allgathers of uneven rows and grouped allreduces, under names that repeat (the
 * response cache's steady state) and names used once. Every result is checked, and the resident
 * memory after the warm-up (the first tenth) must not grow by more than 1%. The response cache
 * holds 128 entries here (CHORUS_CACHE_CAPACITY, unless set): every repeated name (about 60 are
 * cacheable) and the names used once in the warm-up fill it. At its default of 1024 the names
 * used once went on filling it long after, 0.67% of resident memory in 20000 operations at
 * np=4: bounded by the capacity, but indistinguishable from a leak.
 *   mpi_soak [OPERATIONS]   (default 20000; the soak of record: 100000 at np=4)
 */
#include "../common/reference.h"
#include "mpi_test.h"

static size_t resident_bytes(void)
{
    long pages = 0, resident = 0;
    FILE *file = fopen("/proc/self/statm", "r");
    if (file == NULL)
        return 0;
    if (fscanf(file, "%ld %ld", &pages, &resident) != 2)
        resident = 0;
    fclose(file);
    return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}

/* One step of the mix; `fresh` names are used once. */
static void step(long i, bool fresh)
{
    char name[64];
    float small[17], large[65537];
    long cycle = fresh ? i : i % 50;
    const char *kind = fresh ? "fresh" : "again";
    int which = (int)(i % 5);
    if (which == 0 || which == 1) {
        float *data = which == 0 ? small : large;
        size_t count = which == 0 ? 17 : 65537;
        reference_fill(data, count, CHORUS_FLOAT32, CHORUS_SUM, (uint64_t)i, test_rank);
        snprintf(name, sizeof name, "%s.allreduce.%ld", kind, cycle);
        chorus_tensor tensor = floats(data, (int64_t)count);
        EXPECT_STATUS(chorus_allreduce(name, &tensor, NULL, CHORUS_SUM), CHORUS_OK);
        char why[128];
        EXPECT(reference_check_allreduce(data, count, CHORUS_FLOAT32, CHORUS_SUM, test_size, NULL,
                                         (uint64_t)i, 1, 1, why, sizeof why) < 0,
               "%s: %s", name, why);
    } else if (which == 2) {
        int root = (int)(i % test_size);
        reference_fill_bytes(small, sizeof small, (uint64_t)i, root);
        if (test_rank != root)
            memset(small, 0, sizeof small);
        snprintf(name, sizeof name, "%s.broadcast.%ld", kind, cycle);
        chorus_tensor tensor = floats(small, 17);
        EXPECT_STATUS(chorus_broadcast(name, &tensor, root), CHORUS_OK);
        EXPECT(reference_check_bytes(small, sizeof small, (uint64_t)i, root) < 0, "%s", name);
    } else if (which == 3) {
        int64_t rows = test_rank % 3;
        reference_fill_bytes(small, (size_t)rows * 2 * sizeof(float), (uint64_t)i, test_rank);
        snprintf(name, sizeof name, "%s.allgather.%ld", kind, cycle);
        chorus_tensor tensor = {.data = small, .dtype = CHORUS_FLOAT32, .ndims = 2,
                                .shape = {rows, 2}};
        chorus_tensor gathered = {0};
        EXPECT_STATUS(chorus_allgather(name, &tensor, &gathered), CHORUS_OK);
        size_t offset = 0;
        for (int r = 0; r < test_size; r++) {
            size_t bytes = (size_t)(r % 3) * 2 * sizeof(float);
            EXPECT(reference_check_bytes((char *)gathered.data + offset, bytes, (uint64_t)i, r) < 0,
                   "%s: rank %d's rows", name, r);
            offset += bytes;
        }
        free(gathered.data);
    } else {
        char names[3][64];
        chorus_op_args group[3];
        for (int m = 0; m < 3; m++) {
            snprintf(names[m], sizeof names[m], "%s.group.%ld.%d", kind, cycle, m);
            group[m] = (chorus_op_args)CHORUS_OP_ARGS_INIT;
            group[m].name = names[m];
            small[m] = (float)(test_rank + m);
            group[m].input = floats(&small[m], 1);
        }
        chorus_handle *handle = NULL;
        EXPECT_STATUS(chorus_submit_group(group, 3, &handle), CHORUS_OK);
        EXPECT_STATUS(chorus_wait(handle), CHORUS_OK);
        chorus_handle_free(handle);
        for (int m = 0; m < 3; m++)
            EXPECT(small[m] == (float)(test_size * (test_size - 1) / 2 + m * test_size),
                   "%s: %g", names[m], (double)small[m]);
    }
}

int main(int argc, char **argv)
{
    setenv("CHORUS_CACHE_CAPACITY", "128", 0);
    test_start(&argc, &argv, 1800);
    long operations = argc > 1 ? atol(argv[1]) : 20000;
    test_init_chorus();
    size_t warmed = 0;
    for (long i = 0; i < operations && test_failures == 0; i++) {
        step(i, i % 10 == 9);
        if (i == operations / 10)
            warmed = resident_bytes();
    }
    size_t end = resident_bytes();
    double growth = warmed ? ((double)end - (double)warmed) / (double)warmed : 0;
    if (test_rank == 0)
        printf("mpi_soak: %ld operations; resident memory %.1f MiB after the warm-up, %.1f MiB "
               "at the end (%+.2f%%)\n",
               operations, (double)warmed / 1048576, (double)end / 1048576, growth * 100);
    EXPECT(growth <= 0.01, "resident memory grew by %.2f%% after the warm-up", growth * 100);
    EXPECT_STATUS(chorus_shutdown(), CHORUS_OK);
    return test_finish("mpi_soak");
}
