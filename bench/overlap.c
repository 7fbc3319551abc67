/*
 * overlap.c — see overlap.h.
 *
 * The compute is a dependent floating-point chain on the submitting thread: a fixed amount of
 * work (calibrated once to a time), so that a background thread taking the core from it makes
 * the step longer, as it would in a real backward pass.
 */
#include "overlap.h"

#include "autotune.h"
#include "measure.h"

#include <chorus.h>
#include <math.h>
#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum variant {
    COMPUTE_ONLY,
    CHORUS_DEFAULT,
    CHORUS_COMPARED,
    MPI_BLOCKING,
    MPI_NONBLOCKING,
    VARIANT_COUNT
};

enum { STEPS_PER_ROUND = 3 };

/* A dependent chain through a volatile, so that the compiler can neither fold nor vectorize it. */
static void busy_work(long iterations)
{
    volatile double x = 1.0;
    for (long i = 0; i < iterations; i++)
        x = x * 0.9999999 + 1e-7;
}

/* Iterations of busy_work per second, averaged over the ranks so that all do the same work. */
static double calibrate_work(int size)
{
    enum { PROBE = 2000000 };
    double fastest = INFINITY;
    for (int i = 0; i < 5; i++) {
        double start = measure_now();
        busy_work(PROBE);
        double elapsed = measure_now() - start;
        fastest = elapsed < fastest ? elapsed : fastest;
    }
    double rate = PROBE / fastest, sum = 0;
    MPI_Allreduce(&rate, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return sum / size;
}

struct step_plan {
    struct measure_gradient *gradients;
    size_t count;
    long *work; /* busy_work iterations before gradient i is ready */
    chorus_handle **handles;
    MPI_Request *requests;
    float expected; /* every element after a chorus step: the average of rank + 1 */
    long wrong;
};

static void fill_gradients(struct step_plan *plan, int rank)
{
    for (size_t i = 0; i < plan->count; i++)
        for (size_t e = 0; e < plan->gradients[i].count; e++)
            plan->gradients[i].data[e] = (float)(rank + 1);
}

static void submit(struct step_plan *plan, enum variant variant, size_t i, size_t order)
{
    struct measure_gradient *g = &plan->gradients[i];
    if (variant == CHORUS_DEFAULT || variant == CHORUS_COMPARED) {
        chorus_tensor tensor = {.data = g->data, .dtype = CHORUS_FLOAT32, .ndims = 1,
                                .shape = {(int64_t)g->count}};
        if (chorus_allreduce_async(g->name, &tensor, NULL, CHORUS_AVERAGE, &plan->handles[i]) !=
            CHORUS_OK) {
            fprintf(stderr, "chorus-bench: %s\n", chorus_last_error());
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    } else if (variant == MPI_BLOCKING) {
        MPI_Allreduce(MPI_IN_PLACE, g->data, (int)g->count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    } else if (variant == MPI_NONBLOCKING) {
        MPI_Iallreduce(MPI_IN_PLACE, g->data, (int)g->count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                       &plan->requests[order]);
    }
}

static void wait_all(struct step_plan *plan, enum variant variant)
{
    if (variant == MPI_NONBLOCKING)
        MPI_Waitall((int)plan->count, plan->requests, MPI_STATUSES_IGNORE);
    if (variant != CHORUS_DEFAULT && variant != CHORUS_COMPARED)
        return;
    for (size_t i = 0; i < plan->count; i++) {
        if (chorus_wait(plan->handles[i]) != CHORUS_OK) {
            fprintf(stderr, "chorus-bench: %s\n", chorus_handle_error(plan->handles[i]));
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        chorus_handle_free(plan->handles[i]);
        const struct measure_gradient *g = &plan->gradients[i];
        if (g->count > 0 &&
            (g->data[0] != plan->expected || g->data[g->count - 1] != plan->expected))
            plan->wrong++;
    }
}

/* One step in backward order; its time on the slowest rank. With `mark`, rank 0's compute
 * spans go to the timeline beside chorus's own. */
static double overlap_step(struct step_plan *plan, enum variant variant, bool mark)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double start = measure_now();
    for (size_t order = 0; order < plan->count; order++) {
        size_t i = plan->count - 1 - order;
        double computing = measure_now();
        busy_work(plan->work[i]);
        if (mark)
            chorus_timeline_mark("compute (backward)", plan->gradients[i].name, computing,
                                 measure_now());
        submit(plan, variant, i, order);
    }
    wait_all(plan, variant);
    double elapsed = measure_now() - start, slowest = 0;
    MPI_Allreduce(&elapsed, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return slowest;
}

static const char *variant_label(enum variant variant, const char *compare)
{
    static char label[160];
    switch (variant) {
    case COMPUTE_ONLY:
        return "compute only";
    case CHORUS_DEFAULT:
        return "chorus";
    case CHORUS_COMPARED:
        snprintf(label, sizeof label, "chorus, %s", compare);
        return label;
    case MPI_BLOCKING:
        return "MPI_Allreduce per tensor";
    default:
        return "MPI_Iallreduce per tensor + Waitall";
    }
}

/* Per variant: every timed step, and the median of each round. */
struct samples {
    double *steps;
    int step_count;
    double *round_medians;
    int round_count;
};

/* Runs `rounds` rounds of every variant in turn (chorus restarted per round, shut down while
 * the baselines run) and fills `samples`. */
static void measure_rounds(struct step_plan *plan, int rounds, const char *compare, int rank,
                           struct samples samples[VARIANT_COUNT])
{
    for (int round = 0; round < rounds; round++) {
        for (int v = 0; v < VARIANT_COUNT; v++) {
            enum variant variant = (enum variant)v;
            bool chorus = variant == CHORUS_DEFAULT || variant == CHORUS_COMPARED;
            if (variant == CHORUS_COMPARED && compare == NULL)
                continue;
            if (chorus) {
                measure_restart_chorus(variant == CHORUS_COMPARED ? compare : NULL);
                fill_gradients(plan, rank);
                overlap_step(plan, variant, false); /* warm-up: the response cache fills */
            }
            double times[STEPS_PER_ROUND];
            for (int s = 0; s < STEPS_PER_ROUND; s++) {
                times[s] = overlap_step(plan, variant, false);
                samples[v].steps[samples[v].step_count++] = times[s];
            }
            samples[v].round_medians[samples[v].round_count++] =
                measure_median(times, STEPS_PER_ROUND);
            if (chorus)
                chorus_shutdown();
        }
    }
}

static void print_table(const struct samples samples[VARIANT_COUNT], const char *compare,
                        double medians[VARIANT_COUNT])
{
    printf("%-44s %10s %17s %13s %10s\n", "#", "step (ms)", "round medians", "exposed (ms)",
           "exposed vs");
    printf("%-44s %10s %17s %13s %10s\n", "#", "median", "min-max", "step-compute",
           "Iallreduce");
    for (int v = 0; v < VARIANT_COUNT; v++) {
        if (samples[v].step_count == 0)
            continue;
        double *rounds = malloc((size_t)samples[v].round_count * sizeof *rounds);
        memcpy(rounds, samples[v].round_medians, (size_t)samples[v].round_count * sizeof *rounds);
        qsort(rounds, (size_t)samples[v].round_count, sizeof *rounds, measure_compare_doubles);
        char range[40];
        snprintf(range, sizeof range, "%.1f-%.1f", rounds[0] * 1e3,
                 rounds[samples[v].round_count - 1] * 1e3);
        free(rounds);
        const char *label = variant_label((enum variant)v, compare);
        if (v == COMPUTE_ONLY) {
            printf("%-44s %10.1f %17s %13s %10s\n", label, medians[v] * 1e3, range, "", "");
            continue;
        }
        double exposed = medians[v] - medians[COMPUTE_ONLY];
        double baseline = medians[MPI_NONBLOCKING] - medians[COMPUTE_ONLY];
        printf("%-44s %10.1f %17s %13.1f %10.2f\n", label, medians[v] * 1e3, range,
               exposed * 1e3, exposed / baseline);
    }
}

/* The plan of `workload`'s steps, with the busy work's rate (iterations per second) and the
 * communication it is scaled to (blocking MPI per tensor, nothing else), measured with chorus
 * shut down. */
static struct step_plan prepare_plan(const char *workload, int rank, int size, size_t *total,
                                     double *rate, double *communication)
{
    size_t count = 0;
    struct measure_gradient *gradients = measure_load_gradients(workload, rank, &count, total);
    struct step_plan plan = {.gradients = gradients, .count = count,
                             .work = calloc(count, sizeof(long)),
                             .handles = calloc(count, sizeof(chorus_handle *)),
                             .requests = calloc(count, sizeof(MPI_Request)),
                             .expected = (float)(size + 1) / 2};
    chorus_shutdown();
    *rate = calibrate_work(size);
    double reference[5];
    for (int s = 0; s < 6; s++) {
        double t = overlap_step(&plan, MPI_BLOCKING, false);
        if (s > 0)
            reference[s - 1] = t;
    }
    *communication = measure_median(reference, 5);
    return plan;
}

static void release_plan(struct step_plan *plan)
{
    free(plan->work);
    free(plan->handles);
    free(plan->requests);
    measure_free_gradients(plan->gradients, plan->count);
}

/* Spreads `compute` seconds of busy work over the gradients by size. */
static void spread_work(struct step_plan *plan, double compute, double rate, size_t total)
{
    for (size_t i = 0; i < plan->count; i++)
        plan->work[i] =
            (long)(compute * rate * (double)plan->gradients[i].count / (double)total);
}

long overlap_benchmark(const struct overlap_options *options, int rank, int size)
{
    size_t total = 0;
    double rate = 0, communication = 0;
    struct step_plan plan =
        prepare_plan(options->workload, rank, size, &total, &rate, &communication);
    size_t count = plan.count;
    int rounds = (options->steps + STEPS_PER_ROUND - 1) / STEPS_PER_ROUND;
    if (rank == 0)
        printf("# overlap: %d ranks; each gradient is submitted as backward produces it (last "
               "layer first), after busy work on the submitting thread proportional to its size; "
               "%d interleaved rounds of %d steps per variant, chorus restarted each round; "
               "communication alone (MPI_Allreduce per tensor, no compute): %.1f ms\n",
               size, rounds, STEPS_PER_ROUND, communication * 1e3);
    long wrong = 0;
    for (int r = 0; r < options->ratio_count; r++) {
        double compute = options->ratios[r] * communication;
        spread_work(&plan, compute, rate, total);
        struct samples samples[VARIANT_COUNT];
        for (int v = 0; v < VARIANT_COUNT; v++)
            samples[v] = (struct samples){
                .steps = calloc((size_t)(rounds * STEPS_PER_ROUND), sizeof(double)),
                .round_medians = calloc((size_t)rounds, sizeof(double))};
        measure_rounds(&plan, rounds, options->compare, rank, samples);
        double medians[VARIANT_COUNT] = {0};
        for (int v = 0; v < VARIANT_COUNT; v++)
            if (samples[v].step_count > 0)
                medians[v] = measure_median(samples[v].steps, samples[v].step_count);
        long step_wrong = 0;
        MPI_Allreduce(&plan.wrong, &step_wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        wrong += step_wrong;
        plan.wrong = 0;
        if (options->timeline != NULL) {
            measure_restart_chorus(NULL);
            fill_gradients(&plan, rank);
            overlap_step(&plan, CHORUS_DEFAULT, false);
            if (chorus_start_timeline(options->timeline) != CHORUS_OK) {
                fprintf(stderr, "chorus-bench: %s\n", chorus_last_error());
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
            overlap_step(&plan, CHORUS_DEFAULT, true);
            chorus_stop_timeline();
            chorus_shutdown();
        }
        if (rank == 0) {
            printf("\n# compute %.2gx the communication: %.1f ms of busy work per step "
                   "(calibrated), spread over the %zu tensors by size\n",
                   options->ratios[r], compute * 1e3, count);
            print_table(samples, options->compare, medians);
            double chorus_exposed = medians[CHORUS_DEFAULT] - medians[COMPUTE_ONLY];
            double baseline = medians[MPI_NONBLOCKING] - medians[COMPUTE_ONLY];
            printf("summary: overlap workload=%s np=%d compute_ratio=%g compute_ms=%.1f "
                   "chorus_exposed_ms=%.1f iallreduce_exposed_ms=%.1f exposed_ratio=%.2f "
                   "wrong=%ld\n",
                   options->workload, size, options->ratios[r], medians[COMPUTE_ONLY] * 1e3,
                   chorus_exposed * 1e3, baseline * 1e3, chorus_exposed / baseline, step_wrong);
        }
        for (int v = 0; v < VARIANT_COUNT; v++) {
            free(samples[v].steps);
            free(samples[v].round_medians);
        }
    }
    release_plan(&plan);
    return wrong;
}

static double run_overlap_step(void *state)
{
    return overlap_step(state, CHORUS_DEFAULT, false);
}

static void refill(void *state)
{
    fill_gradients(state, bench_rank);
}

long overlap_autotune(const struct overlap_options *options, int rank, int size)
{
    size_t total = 0;
    double rate = 0, communication = 0;
    struct step_plan plan =
        prepare_plan(options->workload, rank, size, &total, &rate, &communication);
    struct autotune_step step = {.run = run_overlap_step, .restarted = refill, .state = &plan};
    for (int r = 0; r < options->ratio_count; r++) {
        spread_work(&plan, options->ratios[r] * communication, rate, total);
        char title[200];
        snprintf(title, sizeof title, "overlap workload=%s compute_ratio=%g compute_ms=%.1f",
                 options->workload, options->ratios[r], options->ratios[r] * communication * 1e3);
        autotune_benchmark(&step, options->steps, title);
    }
    long wrong = 0;
    MPI_Allreduce(&plan.wrong, &wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && wrong > 0)
        printf("# %ld wrong averages\n", wrong);
    release_plan(&plan);
    return wrong;
}
