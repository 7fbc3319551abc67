/*
 * hello_allreduce — the smallest chorus program: every rank contributes its rank number and
 * prints the sum, then the topology chorus found. Run: mpirun -np 4 ./hello_allreduce
 */
#include <chorus.h>
#include <stdio.h>

int main(void)
{
    if (chorus_init(NULL) != CHORUS_OK) {
        fprintf(stderr, "chorus_init: %s\n", chorus_last_error());
        return 1;
    }
    int rank = chorus_rank(), size = chorus_size();
    float value = (float)rank;
    chorus_tensor tensor = {.data = &value, .dtype = CHORUS_FLOAT32, .ndims = 1, .shape = {1}};
    if (chorus_allreduce("hello", &tensor, NULL, CHORUS_SUM) != CHORUS_OK) {
        fprintf(stderr, "allreduce: %s\n", chorus_last_error());
        return 1;
    }
    float expected = (float)size * (float)(size - 1) / 2;
    printf("rank %d of %d (local %d of %d, host %d of %d): sum of ranks = %g (%s)\n", rank, size,
           chorus_local_rank(), chorus_local_size(), chorus_cross_rank(), chorus_cross_size(),
           value, value == expected ? "ok" : "WRONG");
    chorus_shutdown();
    return value == expected ? 0 : 1;
}
