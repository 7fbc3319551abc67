/*
 * tune_settings.c — chorus-tune's second part: the settings beside the algorithms that depend on
 * the hosts. Which ones, with which values, measured how and where, is the parameter table's
 * (its rows with chorus-tune values, read through chorus_query.h). Each candidate value runs
 * against the default in interleaved rounds, chorus restarted with it each time:
 *   - the staging areas, their count and their size (CHORUS_SEGMENT_CHUNK on one host,
 *     CHORUS_CROSS_HOST_CHUNK across hosts), on allreduces through the host's segment (the sweep's
 * sizes from 256 KiB, where it carries whole chunks) and on a step of 40 tensors of 16 KiB to 4 MiB
 *     submitted together: alone, a setting can win that loses in a step (4 ranks on 2 cores,
 *     2026-11-26: ordinary stores took 0.73-0.88x the time of streaming ones on allreduces from
 *     256 KiB to 64 MiB, 2.5x on ResNet-50's steps);
 *   - the fusion threshold, on bursts of small allreduces submitted together (as backward
 *     produces them) and waited for together.
 * A value is written as a `setting` row where it beat the default beyond noise (its slowest
 * round faster than the default's fastest) at half the sizes or more and was slower beyond
 * noise at none; of several, the one with the smallest product of median ratios.
 */
#include "tune_settings.h"

#include "measure.h"

#include <chorus.h>
#include <chorus_query.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VALUES_MAX 5
#define WORKLOADS_MAX 8
#define ROUNDS_MAX 16

/* A burst: this many allreduces of this many float32 each, submitted together. */
#define BURST_TENSOR_ELEMENTS 4096 /* 16 KiB, fused under the default tensor limit */
/* A step's tensors cycle through these sizes (16 KiB to 4 MiB): 40 of them are 55 MB. */
static const size_t step_elements[] = {4096, 65536, 262144, 1048576};
#define STEP_TENSORS 40

/* What one measurement of a trial runs. */
enum workload_kind {
    WORKLOAD_SIZE,  /* one allreduce of `amount` bytes */
    WORKLOAD_BURST, /* `amount` allreduces of 16 KiB */
    WORKLOAD_STEP,  /* `amount` allreduces of the step's sizes */
};
struct workload {
    enum workload_kind kind;
    size_t amount;
};

/* A parameter's row, as chorus-tune measures it. */
struct setting_trial {
    const char *name;
    const char *values[VALUES_MAX]; /* values[0] is "" (the default) */
    int count;
    bool bursts; /* measured on bursts of small tensors, else on allreduces by size and a step */
    chorus_query_where where;
};

/* The parameter table's row `index` as a trial; false when chorus-tune does not measure it. */
static bool trial_of(size_t index, struct setting_trial *trial)
{
    chorus_query_parameter row;
    if (chorus_query_parameter_row(index, &row) != CHORUS_OK || row.tune_values == NULL ||
        row.tune_measure == CHORUS_QUERY_MEASURE_NONE)
        return false;
    *trial = (struct setting_trial){.name = row.name,
                                    .bursts = row.tune_measure == CHORUS_QUERY_MEASURE_BURSTS,
                                    .where = row.tune_where};
    while (trial->count < VALUES_MAX && row.tune_values[trial->count] != NULL) {
        trial->values[trial->count] = row.tune_values[trial->count];
        trial->count++;
    }
    return trial->count > 1;
}

static bool start_with(const char *name, const char *value)
{
    char parameters[256];
    if (value[0] != '\0')
        snprintf(parameters, sizeof parameters, "CHORUS_TUNING_FILE=;%s=%s", name, value);
    else
        snprintf(parameters, sizeof parameters, "CHORUS_TUNING_FILE=");
    chorus_init_options init = CHORUS_INIT_OPTIONS_INIT;
    init.parameters = parameters;
    if (chorus_init(&init) == CHORUS_OK)
        return true;
    fprintf(stderr, "chorus-tune: rank %d: chorus_init (%s): %s\n", tune_rank, parameters,
            chorus_last_error());
    return false;
}

/* Seconds per burst of `tensors` allreduces submitted together (16 KiB each, or with `mixed`
 * the step's sizes), the slowest rank's, results checked: `wrong` counts the wrong elements on
 * this rank. */
static double time_burst(size_t tensors, bool mixed, int iterations, long *wrong)
{
    struct measure_gradient *burst = calloc(tensors, sizeof *burst);
    chorus_handle **handles = malloc(tensors * sizeof *handles);
    for (size_t t = 0; t < tensors; t++) {
        snprintf(burst[t].name, sizeof burst[t].name, "burst.%zu", t);
        burst[t].count = mixed ? step_elements[t % (sizeof step_elements / sizeof *step_elements)]
                               : BURST_TENSOR_ELEMENTS;
        burst[t].data = measure_host_alloc(burst[t].count * sizeof(float), false);
    }
    double seconds = 0;
    for (int i = -1; i < iterations; i++) { /* -1: a warm-up that also checks */
        for (size_t t = 0; t < tensors; t++)
            for (size_t e = 0; e < burst[t].count; e++)
                burst[t].data[e] = (float)(tune_rank + 1);
        double slowest =
            measure_chorus_step(burst, tensors, handles, CHORUS_ALLREDUCE, CHORUS_SUM);
        if (i >= 0) {
            seconds += slowest;
            continue;
        }
        float expected = (float)tune_size * (float)(tune_size + 1) / 2;
        for (size_t t = 0; t < tensors; t++)
            for (size_t e = 0; e < burst[t].count; e++)
                *wrong += burst[t].data[e] != expected;
    }
    measure_free_gradients(burst, tensors);
    free(handles);
    return seconds / iterations;
}

static double median_of(const double *values, int count, double *low, double *high)
{
    double sorted[ROUNDS_MAX];
    memcpy(sorted, values, (size_t)count * sizeof *sorted);
    double median = measure_median(sorted, count);
    *low = sorted[0];
    *high = sorted[count - 1];
    return median;
}

static void describe(char *text, size_t size, const struct workload *workload)
{
    if (workload->kind == WORKLOAD_BURST)
        snprintf(text, size, "burst of %zu x 16K", workload->amount);
    else if (workload->kind == WORKLOAD_STEP)
        snprintf(text, size, "step of %zu x 16K-4M", workload->amount);
    else if (workload->amount % (1 << 20) == 0)
        snprintf(text, size, "allreduce %zuM", workload->amount >> 20);
    else
        snprintf(text, size, "allreduce %zuK", workload->amount >> 10);
}

/* Rank 0: prints the trial's comparison and writes its row, if a value won. */
static void decide(FILE *file, const struct setting_trial *trial, const struct workload *amounts,
                   int workloads, double seconds[VALUES_MAX][WORKLOADS_MAX][ROUNDS_MAX], int rounds)
{
    printf("\n# %s: each value against the default (medians of %d rounds, [fastest-slowest])\n",
           trial->name, rounds);
    int best = 0;
    double best_score = 0;
    for (int v = 1; v < trial->count; v++) {
        int wins = 0, losses = 0;
        double score = 0;
        for (int w = 0; w < workloads; w++) {
            double base_low, base_high, low, high;
            double base = median_of(seconds[0][w], rounds, &base_low, &base_high);
            double mine = median_of(seconds[v][w], rounds, &low, &high);
            wins += high < base_low;
            losses += low > base_high;
            score += log(mine / base);
            char what[48];
            describe(what, sizeof what, &amounts[w]);
            printf("#   %s=%-10s %-22s %10.1f us [%.1f-%.1f] against %10.1f us [%.1f-%.1f]: "
                   "%.2f%s\n",
                   trial->name, trial->values[v], what, mine * 1e6, low * 1e6, high * 1e6,
                   base * 1e6, base_low * 1e6, base_high * 1e6, mine / base,
                   high < base_low   ? " (faster beyond noise)"
                   : low > base_high ? " (slower beyond noise)"
                                     : "");
        }
        if (losses == 0 && 2 * wins >= workloads && (best == 0 || score < best_score)) {
            best = v;
            best_score = score;
        }
    }
    if (best == 0) {
        printf("#   no row: no value beat the default beyond noise without losing elsewhere\n");
        return;
    }
    printf("#   row: %s=%s\n", trial->name, trial->values[best]);
    if (file == NULL)
        return;
    fprintf(file, "setting %s=%s #", trial->name, trial->values[best]);
    for (int w = 0; w < workloads; w++) {
        double base_low, base_high, low, high;
        double base = median_of(seconds[0][w], rounds, &base_low, &base_high);
        double mine = median_of(seconds[best][w], rounds, &low, &high);
        char what[48];
        describe(what, sizeof what, &amounts[w]);
        fprintf(file, "%s %s: %.0f us [%.0f-%.0f] against the default's %.0f us [%.0f-%.0f]",
                w ? ";" : "", what, mine * 1e6, low * 1e6, high * 1e6, base * 1e6, base_low * 1e6,
                base_high * 1e6);
    }
    fprintf(file, "\n");
}

bool tune_settings(const struct measure_sweep *sweep, const size_t *sizes, int size_count,
                   int rounds, int local_ranks, int hosts, FILE *file)
{
    /* Staging: the sizes from 256 KiB and a step; fusion: bursts of 4 MiB and 32 MiB. */
    struct workload by_size[WORKLOADS_MAX],
        by_burst[] = {{WORKLOAD_BURST, 256}, {WORKLOAD_BURST, 2048}};
    int sized = 0;
    for (int s = 0; s < size_count && sized + 1 < WORKLOADS_MAX; s++)
        if (sizes[s] >= ((size_t)256 << 10))
            by_size[sized++] = (struct workload){WORKLOAD_SIZE, sizes[s]};
    if (sized > 0)
        by_size[sized++] = (struct workload){WORKLOAD_STEP, STEP_TENSORS};
    if (rounds > ROUNDS_MAX)
        rounds = ROUNDS_MAX;
    static double seconds[VALUES_MAX][WORKLOADS_MAX][ROUNDS_MAX];
    bool right = true;
    for (size_t t = 0; t < chorus_query_parameter_count() && right; t++) {
        struct setting_trial row;
        if (!trial_of(t, &row))
            continue;
        const struct setting_trial *trial = &row;
        const struct workload *amounts = trial->bursts ? by_burst : by_size;
        int workloads = trial->bursts ? (int)(sizeof by_burst / sizeof *by_burst) : sized;
        bool shared = local_ranks > 1;
        bool applies = trial->where == CHORUS_QUERY_WHERE_ANY ||
                       (trial->where == CHORUS_QUERY_WHERE_SHARED_HOSTS && shared) ||
                       (trial->where == CHORUS_QUERY_WHERE_ONE_HOST && shared && hosts == 1) ||
                       (trial->where == CHORUS_QUERY_WHERE_SEVERAL_HOSTS && shared && hosts > 1);
        if (workloads == 0 || !applies)
            continue;
        for (int round = 0; round < rounds && right; round++) {
            for (int k = 0; k < trial->count && right; k++) {
                int v = (k + round) % trial->count;
                if (!start_with(trial->name, trial->values[v]))
                    return false;
                for (int w = 0; w < workloads; w++) {
                    long wrong = 0, total = 0;
                    struct measure_sweep allreduce = *sweep;
                    allreduce.collective = CHORUS_ALLREDUCE;
                    int iterations = sweep->iterations ? sweep->iterations : 5;
                    seconds[v][w][round] =
                        amounts[w].kind == WORKLOAD_SIZE
                            ? measure_sweep_size(&allreduce, MEASURE_CHORUS,
                                                 amounts[w].amount / 4, &wrong)
                            : time_burst(amounts[w].amount, amounts[w].kind == WORKLOAD_STEP,
                                         iterations, &wrong);
                    MPI_Allreduce(&wrong, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
                    if (total != 0) {
                        right = false;
                        if (tune_rank == 0)
                            fprintf(stderr, "chorus-tune: %s=%s: %ld wrong elements\n", trial->name,
                                    trial->values[v], total);
                    }
                }
                chorus_shutdown();
            }
        }
        if (right && tune_rank == 0)
            decide(file, trial, amounts, workloads, seconds, rounds);
    }
    return right;
}
