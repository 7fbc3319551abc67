/*
 * autotune.c — chorus-bench --workload MODEL --autotune [--overlap]: what CHORUS_AUTOTUNE gains
 * and what its tuning costs. Each round runs chorus with its defaults for --steps steps, then
 * chorus with CHORUS_AUTOTUNE=on from its first step until rank 0's autotune log says it
 * settled, then --steps steps more, then the defaults again (their two medians averaged). Per round: the default's median step, the tuned median
 * step, how many steps tuning took, and their cost: the time they took beyond the same number
 * of tuned steps, as a share of a 1,000-step run at the tuned speed. Rounds interleave the two,
 * so a host that slows down for a while slows both.
 */
#include "autotune.h"

#include "measure.h"

#include <chorus.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The defaults are measured after as many steps as tuning takes at most (16 trials of 5 steps
 * and their warm-up steps), so that both sides are measured equally warm: across hosts, TCP's
 * windows and buffers keep growing for tens of steps. */
enum { ROUNDS = 5, TUNING_STEP_LIMIT = 600, WARMUP_STEPS = 100 };

struct round_result {
    double default_ms, tuned_ms;
    int tuning_steps;
    double cost_ms; /* the tuning steps' time beyond as many tuned steps */
    char settled[128];
};

/* Rank 0: the settled row of the autotune log, if written yet (",settled,limit,threshold,
 * cycle,..."), as "limit/threshold/cycle"; the answer goes to every rank. */
static bool settled(const char *log_path, char *settings, size_t settings_size)
{
    int found = 0;
    if (bench_rank == 0) {
        FILE *log = fopen(log_path, "r");
        char line[512];
        while (log != NULL && fgets(line, sizeof line, log) != NULL) {
            double limit = 0, threshold = 0, cycle = 0;
            if (sscanf(line, ",settled,%lf,%lf,%lf", &limit, &threshold, &cycle) == 3) {
                snprintf(settings, settings_size, "%.0fK/%.0fM/%gms", limit / 1024,
                         threshold / (1024 * 1024), cycle);
                found = 1;
            }
        }
        if (log != NULL)
            fclose(log);
    }
    MPI_Bcast(&found, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return found != 0;
}

static double median_of_steps(const struct autotune_step *step, int steps)
{
    double *times = calloc((size_t)steps, sizeof *times);
    for (int s = 0; s < steps; s++)
        times[s] = step->run(step->state);
    double result = measure_median(times, steps) * 1e3;
    free(times);
    return result;
}

/* The median step of chorus with its defaults, after a fresh init and warm-up steps. */
static double default_median(const struct autotune_step *step, int steps)
{
    measure_restart_chorus(NULL);
    if (step->restarted != NULL)
        step->restarted(step->state);
    for (int s = 0; s < WARMUP_STEPS; s++)
        step->run(step->state);
    double result = median_of_steps(step, steps);
    chorus_shutdown();
    return result;
}

static void run_round(const struct autotune_step *step, int steps, const char *log_path,
                      struct round_result *result)
{
    double before = default_median(step, steps);

    char parameters[600];
    snprintf(parameters, sizeof parameters, "CHORUS_AUTOTUNE=on;CHORUS_AUTOTUNE_LOG=%s",
             log_path);
    remove(log_path);
    measure_restart_chorus(parameters);
    if (step->restarted != NULL)
        step->restarted(step->state);
    double *tuning = calloc(TUNING_STEP_LIMIT, sizeof *tuning);
    int n = 0;
    snprintf(result->settled, sizeof result->settled, "not settled");
    while (n < TUNING_STEP_LIMIT) {
        tuning[n++] = step->run(step->state);
        if (settled(log_path, result->settled, sizeof result->settled))
            break;
    }
    result->tuning_steps = n;
    result->tuned_ms = median_of_steps(step, steps);
    double total = 0;
    for (int s = 0; s < n; s++)
        total += tuning[s] * 1e3;
    result->cost_ms = total - n * result->tuned_ms;
    free(tuning);
    chorus_shutdown();
    remove(log_path);
    /* The defaults measured on both sides of the tuned steps: a host that slowed down or sped
     * up meanwhile moves both. */
    result->default_ms = (before + default_median(step, steps)) / 2;
}

void autotune_benchmark(const struct autotune_step *step, int steps, const char *title)
{
    char log_path[256];
    snprintf(log_path, sizeof log_path, "/tmp/chorus-bench-autotune-%ld.csv", (long)getpid());
    struct round_result results[ROUNDS];
    for (int r = 0; r < ROUNDS; r++)
        run_round(step, steps, log_path, &results[r]);
    if (bench_rank != 0)
        return;
    printf("# autotune, %s: %d ranks; %d rounds of: chorus with its defaults (%d steps after %d "
           "warm-up steps), CHORUS_AUTOTUNE=on from its first step until it settled and %d "
           "steps more, the defaults again (the two medians averaged)\n",
           title, bench_size, ROUNDS, steps, WARMUP_STEPS, steps);
    printf("# cost: the tuning steps' time beyond as many tuned steps, as a share of a "
           "1,000-step run at the tuned speed\n");
    printf("%-7s %12s %12s %8s %8s %10s %8s  %s\n", "# round", "default (ms)", "tuned (ms)",
           "tuned/", "tuning", "cost (ms)", "cost of", "settled on (tensor limit/");
    printf("%-7s %12s %12s %8s %8s %10s %8s  %s\n", "#", "median", "median", "default", "steps",
           "", "1000 st", "threshold/cycle)");
    double ratios[ROUNDS], shares[ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        const struct round_result *x = &results[r];
        ratios[r] = x->tuned_ms / x->default_ms;
        shares[r] = x->cost_ms / (1000 * x->tuned_ms);
        printf("%-7d %12.2f %12.2f %8.3f %8d %10.1f %7.2f%%  %s\n", r + 1, x->default_ms,
               x->tuned_ms, ratios[r], x->tuning_steps, x->cost_ms, shares[r] * 100,
               x->settled);
    }
    double ratio = measure_median(ratios, ROUNDS), share = measure_median(shares, ROUNDS);
    printf("summary: autotune %s np=%d tuned_vs_default_median=%.3f tuning_cost_of_1000_steps="
           "%.2f%%\n",
           title, bench_size, ratio, share * 100);
}
