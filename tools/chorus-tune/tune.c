/*
 * tune.c — chorus-tune: the selection table for the hosts a job runs on. Run it under the
 * job's launcher (mpirun, chorusrun, an SGE or Slurm job) on the job's own hosts and ranks:
 *
 *     chorusrun -np 16 -H a:8,b:8 chorus-tune -o cluster.tuning
 *     CHORUS_TUNING_FILE=cluster.tuning chorusrun -np 16 -H a:8,b:8 python3 train.py
 *
 * For each collective and each size of a sweep it times every algorithm that can run in this
 * placement, and the built-in choice, through chorus itself (chorus_init with the algorithm
 * forced by CHORUS_<COLLECTIVE>_ALGO, then the same submit-and-wait loop and result check as
 * chorus-bench's sweep: measure.h), in rounds that take the candidates in a rotating order so
 * that noise shows as a range. Rank 0's timeline of a probe tells which algorithm really ran
 * (one that declines gives way to another). A row is written where an algorithm beat the
 * built-in choice beyond noise: its slowest round faster than the built-in's fastest. Elsewhere
 * the built-in table keeps deciding, so the file cannot make a size slower than the noise allows.
 */
#include "tune_settings.h"

#include "measure.h"

#include <chorus_query.h>

#include <getopt.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int tune_rank, tune_size;

#define SIZES_MAX 32
#define CANDIDATES_MAX 17 /* the built-in choice and every algorithm of a collective */

struct tune_options {
    const char *output;
    size_t min_bytes, max_bytes;
    double factor;
    int rounds;
    int iterations;
    bool collectives[CHORUS_COLLECTIVE_COUNT];
    bool settings; /* also the settings rows (tune_settings.c) */
};

struct placement_info {
    int local_ranks; /* as the selection sees them: ranks per host when every host has as many */
    int hosts;
    char names[512]; /* the hosts, comma-separated */
};

/* One candidate of a collective: an algorithm forced by name, or the built-in choice (id -1). */
struct candidate {
    int id;
    char ran[SIZES_MAX][32]; /* what rank 0's probe saw run at each size */
    double seconds[SIZES_MAX][16];
};

static void usage(FILE *to)
{
    fprintf(to,
            "usage: chorus-tune [-o FILE] [--quick] [-c COLLECTIVE,...] [-b MIN] [-e MAX] "
            "[-f FACTOR]\n"
            "                   [-r ROUNDS] [-n ITERATIONS] [--no-settings]\n"
            "Run under the job's launcher, on its hosts and ranks. Times every algorithm that can\n"
            "run each collective in this placement, and the built-in choice, at each size from\n"
            "MIN to MAX (times FACTOR; default 4K to 64M, x4) in ROUNDS interleaved rounds\n"
            "(default 3), results checked; prints how the best compares with the built-in\n"
            "choice at each size, and writes the rows where it wins beyond noise to FILE for\n"
            "CHORUS_TUNING_FILE. Then the settings beside them (staging areas and their\n"
            "size where ranks share hosts, the fusion threshold on bursts of small tensors):\n"
            "a `setting` row where a value beats the default beyond noise (--no-settings: not\n"
            "measured).\n"
            "--quick: 64K to 4M, x8, 2 rounds, 5 iterations (seconds, for tests). -c:\n"
            "allreduce, broadcast, allgather, reducescatter, alltoall (default all).\n");
}

static bool parse_collectives(const char *text, bool *chosen)
{
    char copy[256];
    snprintf(copy, sizeof copy, "%s", text);
    memset(chosen, 0, CHORUS_COLLECTIVE_COUNT * sizeof *chosen);
    char *save = NULL;
    for (char *name = strtok_r(copy, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        int c = chorus_query_collective(name);
        if (c < 0)
            return false;
        chosen[c] = true;
    }
    return true;
}

/* -1 to go on, else the exit status. */
static int parse_tune_options(int argc, char **argv, struct tune_options *o)
{
    static const struct option long_options[] = {
        {"output", required_argument, NULL, 'o'}, {"quick", no_argument, NULL, 'q'},
        {"collectives", required_argument, NULL, 'c'}, {"help", no_argument, NULL, 'h'},
        {"no-settings", no_argument, NULL, 'S'}, {NULL, 0, NULL, 0}};
    *o = (struct tune_options){.min_bytes = 4 << 10, .max_bytes = 64 << 20, .factor = 4,
                               .rounds = 3, .settings = true};
    for (int c = 0; c < CHORUS_COLLECTIVE_COUNT; c++)
        o->collectives[c] = true;
    int option;
    while ((option = getopt_long(argc, argv, "o:qc:b:e:f:r:n:h", long_options, NULL)) != -1) {
        bool ok = true;
        switch (option) {
        case 'o': o->output = optarg; break;
        case 'q':
            o->min_bytes = 64 << 10;
            o->max_bytes = 4 << 20;
            o->factor = 8;
            o->rounds = 2;
            o->iterations = 5;
            break;
        case 'c': ok = parse_collectives(optarg, o->collectives); break;
        case 'S': o->settings = false; break;
        case 'b': ok = measure_parse_size(optarg, &o->min_bytes) && o->min_bytes > 0; break;
        case 'e': ok = measure_parse_size(optarg, &o->max_bytes); break;
        case 'f': o->factor = atof(optarg); ok = o->factor > 1; break;
        case 'r': o->rounds = atoi(optarg); ok = o->rounds >= 1 && o->rounds <= 16; break;
        case 'n': o->iterations = atoi(optarg); ok = o->iterations >= 1; break;
        case 'h':
            if (tune_rank == 0)
                usage(stdout);
            return 0;
        default: ok = false;
        }
        if (!ok) {
            if (tune_rank == 0) {
                if (option != '?')
                    fprintf(stderr, "chorus-tune: invalid value for -%c: '%s'\n", option,
                            optarg);
                usage(stderr);
            }
            return 2;
        }
    }
    if (optind < argc || o->max_bytes < o->min_bytes) {
        if (tune_rank == 0)
            fprintf(stderr, "chorus-tune: %s\n", optind < argc ? "unexpected arguments"
                                                                : "-e is below -b");
        return 2;
    }
    return -1;
}

static void find_placement(struct placement_info *p)
{
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, tune_rank, MPI_INFO_NULL, &local);
    int local_size = 0, local_rank = 0;
    MPI_Comm_size(local, &local_size);
    MPI_Comm_rank(local, &local_rank);
    MPI_Comm_free(&local);
    int low = 0, high = 0, leaders = 0, leader = local_rank == 0;
    MPI_Allreduce(&local_size, &low, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&local_size, &high, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&leader, &leaders, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    p->local_ranks = low == high ? local_size : 1;
    p->hosts = leaders;
    char name[MPI_MAX_PROCESSOR_NAME] = "";
    int length = 0;
    MPI_Get_processor_name(name, &length);
    char *all = calloc((size_t)tune_size, MPI_MAX_PROCESSOR_NAME);
    int *leading = calloc((size_t)tune_size, sizeof *leading);
    MPI_Gather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0,
               MPI_COMM_WORLD);
    MPI_Gather(&leader, 1, MPI_INT, leading, 1, MPI_INT, 0, MPI_COMM_WORLD);
    p->names[0] = '\0';
    for (int r = 0; tune_rank == 0 && r < tune_size; r++)
        if (leading[r] && strlen(p->names) + MPI_MAX_PROCESSOR_NAME + 2 < sizeof p->names)
            snprintf(p->names + strlen(p->names), sizeof p->names - strlen(p->names), "%s%s",
                     p->names[0] ? "," : "", all + (size_t)r * MPI_MAX_PROCESSOR_NAME);
    free(all);
    free(leading);
}

/* The bytes the selection table sees for a sweep's buffer of `bytes`: an alltoall counts every
 * block sent and received. */
static size_t selection_bytes(chorus_collective collective, size_t bytes)
{
    return collective == CHORUS_ALLTOALL ? 2 * bytes : bytes;
}

static bool start_chorus(chorus_collective collective, int id)
{
    char parameters[256];
    char upper[32];
    snprintf(upper, sizeof upper, "%s", chorus_collective_name(collective));
    for (char *c = upper; *c; c++)
        *c = (char)(*c - 'a' + 'A');
    snprintf(parameters, sizeof parameters, "CHORUS_TUNING_FILE=;CHORUS_%s_ALGO=%s", upper,
             id < 0 ? "auto" : chorus_query_algorithm_name(collective, id));
    chorus_init_options init = CHORUS_INIT_OPTIONS_INIT;
    init.parameters = parameters;
    if (chorus_init(&init) != CHORUS_OK) {
        fprintf(stderr, "chorus-tune: rank %d: chorus_init (%s): %s\n", tune_rank, parameters,
                chorus_last_error());
        return false;
    }
    return true;
}

/* Which algorithm ran the operations of a probe: rank 0's timeline, told to every rank. */
static void probe(const struct measure_sweep *sweep, size_t count, const char *directory,
                  int serial, char *ran, size_t ran_size)
{
    char path[512];
    snprintf(path, sizeof path, "%s/probe-%d.json", directory, serial);
    long wrong = 0;
    struct measure_sweep once = *sweep;
    once.iterations = 1;
    once.warmup = 0;
    chorus_start_timeline(path);
    measure_sweep_size(&once, MEASURE_CHORUS, count, &wrong);
    chorus_stop_timeline();
    char name[32] = "?";
    if (tune_rank == 0) {
        FILE *file = fopen(path, "r");
        char line[4096];
        while (file != NULL && fgets(line, sizeof line, file) != NULL) {
            const char *at = strstr(line, "\"algorithm\": \"");
            if (at != NULL)
                sscanf(at + 14, "%31[a-z_]", name);
        }
        if (file != NULL)
            fclose(file);
        unlink(path);
    }
    MPI_Bcast(name, sizeof name, MPI_CHAR, 0, MPI_COMM_WORLD);
    snprintf(ran, ran_size, "%s", name);
}

struct spread {
    double median, low, high;
};

static struct spread spread_of(const double *seconds, int rounds)
{
    double sorted[16];
    memcpy(sorted, seconds, (size_t)rounds * sizeof *sorted);
    double median = measure_median(sorted, rounds);
    return (struct spread){median, sorted[0], sorted[rounds - 1]};
}

static void print_size(char *text, size_t size, size_t bytes)
{
    if (bytes >= (1 << 20) && bytes % (1 << 20) == 0)
        snprintf(text, size, "%zuM", bytes >> 20);
    else if (bytes >= 1024 && bytes % 1024 == 0)
        snprintf(text, size, "%zuK", bytes >> 10);
    else
        snprintf(text, size, "%zu", bytes);
}

/* Where the cells of two neighbouring sizes meet: halfway on a log scale, rounded to a power of
 * two when one lies strictly between them (readable rows). */
static size_t boundary(size_t below, size_t above)
{
    size_t middle = (size_t)ceil(sqrt((double)below * (double)above));
    size_t power = 1;
    while (power < middle)
        power *= 2;
    return power > below && power < above ? power : middle;
}

/* The rows of one collective, written to `file` (rank 0), and the comparison printed. */
static void report(FILE *file, chorus_collective collective, struct candidate *candidates,
                   int count, const size_t *sizes, int size_count, int rounds,
                   const struct placement_info *p)
{
    const char *name = chorus_collective_name(collective);
    printf("\n# %s, %d ranks, %d per host: the built-in choice against the best algorithm "
           "(medians of %d rounds, [fastest-slowest])\n", name, tune_size, p->local_ranks,
           rounds);
    printf("#%11s  %-19s %30s  %-19s %30s  %6s  %s\n", "size (B)", "built-in", "time (us)",
           "best", "time (us)", "ratio", "row");
    int winner[SIZES_MAX];
    struct spread best_spread[SIZES_MAX], builtin_spread[SIZES_MAX];
    for (int s = 0; s < size_count; s++) {
        struct spread builtin = spread_of(candidates[0].seconds[s], rounds);
        int best = 0;
        struct spread best_seen = builtin;
        for (int c = 1; c < count; c++) {
            /* an algorithm that declined ran another: its times are not its own */
            if (strcmp(candidates[c].ran[s], chorus_query_algorithm_name(collective, candidates[c].id)) != 0)
                continue;
            struct spread mine = spread_of(candidates[c].seconds[s], rounds);
            if (mine.median < best_seen.median) {
                best = c;
                best_seen = mine;
            }
        }
        bool differs = best != 0 && strcmp(candidates[best].ran[s], candidates[0].ran[s]) != 0;
        bool beyond_noise = differs && best_seen.high < builtin.low;
        winner[s] = beyond_noise ? best : 0;
        best_spread[s] = best_seen;
        builtin_spread[s] = builtin;
        char low[48], high[48];
        snprintf(low, sizeof low, "%.1f [%.1f-%.1f]", builtin.median * 1e6, builtin.low * 1e6,
                 builtin.high * 1e6);
        snprintf(high, sizeof high, "%.1f [%.1f-%.1f]", best_seen.median * 1e6,
                 best_seen.low * 1e6, best_seen.high * 1e6);
        printf(" %11zu  %-19s %30s  %-19s %30s  %6.2f  %s\n", sizes[s], candidates[0].ran[s],
               low, best ? candidates[best].ran[s] : "(built-in)", high,
               builtin.median / best_seen.median,
               beyond_noise ? "yes" : differs ? "no: within noise" : "no: built-in is best");
    }
    if (file == NULL)
        return;
    /* Runs of sizes with the same winner become one row; a size's cell reaches halfway to its
     * neighbours (boundary), and the first and last cells stop at the sweep's ends. */
    for (int s = 0; s < size_count;) {
        int end = s;
        while (end + 1 < size_count && winner[end + 1] == winner[s])
            end++;
        if (winner[s] != 0) {
            size_t from = selection_bytes(collective, s == 0 ? sizes[0]
                                                             : boundary(sizes[s - 1], sizes[s]));
            size_t to = end + 1 == size_count
                            ? selection_bytes(collective, sizes[end])
                            : selection_bytes(collective, boundary(sizes[end], sizes[end + 1])) - 1;
            char low[24], high[24];
            print_size(low, sizeof low, from);
            print_size(high, sizeof high, to);
            const struct candidate *c = &candidates[winner[s]];
            fprintf(file, "%s %s bytes=%s-%s ranks=%d local_ranks=%d # ", name,
                    chorus_query_algorithm_name(collective, c->id), low, high, tune_size, p->local_ranks);
            for (int k = s; k <= end; k++)
                fprintf(file, "%s%zu B: %.1f us [%.1f-%.1f] against %s %.1f us [%.1f-%.1f]",
                        k > s ? "; " : "", sizes[k], best_spread[k].median * 1e6,
                        best_spread[k].low * 1e6, best_spread[k].high * 1e6,
                        candidates[0].ran[k], builtin_spread[k].median * 1e6,
                        builtin_spread[k].low * 1e6, builtin_spread[k].high * 1e6);
            fprintf(file, "\n");
        }
        s = end + 1;
    }
}

/* The sweep's sizes for sweep's collective, as the elements it measures make them; how many. */
static int sweep_sizes(const struct tune_options *t, const struct measure_sweep *sweep,
                       size_t *sizes)
{
    int size_count = 0;
    for (size_t bytes = t->min_bytes; bytes <= t->max_bytes && size_count < SIZES_MAX;
         bytes = (size_t)ceil((double)bytes * t->factor)) {
        size_t measured = measure_sweep_count(sweep, bytes) * chorus_dtype_size(sweep->dtype);
        if (size_count == 0 || measured > sizes[size_count - 1])
            sizes[size_count++] = measured;
    }
    return size_count;
}

/* Measures one collective: every candidate at every size, `rounds` times. */
static bool tune_collective(const struct tune_options *t, chorus_collective collective,
                            const struct placement_info *p, const char *directory, FILE *file)
{
    static struct candidate candidates[CANDIDATES_MAX];
    int count = 0;
    candidates[count++] = (struct candidate){.id = -1};
    for (int a = 0; a < chorus_query_algorithm_count(collective) && count < CANDIDATES_MAX; a++)
        if (chorus_query_algorithm_fits(collective, a, tune_size, p->local_ranks))
            candidates[count++] = (struct candidate){.id = a};
    struct measure_sweep sweep = {.collective = collective, .dtype = CHORUS_FLOAT32,
                                  .iterations = t->iterations, .warmup = 2};
    size_t sizes[SIZES_MAX];
    int size_count = sweep_sizes(t, &sweep, sizes);
    bool right = true;
    static int serial; /* a timeline path this process wrote before would get ".N" added */
    for (int round = 0; round < t->rounds; round++) {
        for (int k = 0; k < count; k++) {
            struct candidate *c = &candidates[(k + round) % count];
            if (!start_chorus(collective, c->id))
                return false;
            for (int s = 0; s < size_count; s++) {
                size_t elements = sizes[s] / chorus_dtype_size(sweep.dtype);
                if (round == 0)
                    probe(&sweep, elements, directory, serial++, c->ran[s], sizeof c->ran[s]);
                long wrong = 0;
                c->seconds[s][round] = measure_sweep_size(&sweep, MEASURE_CHORUS, elements,
                                                          &wrong);
                if (wrong != 0) {
                    right = false;
                    if (tune_rank == 0)
                        fprintf(stderr, "chorus-tune: %s by %s at %zu bytes: %ld wrong "
                                "elements\n", chorus_collective_name(collective),
                                c->ran[s], sizes[s], wrong);
                }
            }
            chorus_shutdown();
        }
    }
    if (tune_rank == 0)
        report(right ? file : NULL, collective, candidates, count, sizes, size_count, t->rounds,
               p);
    return right;
}

int main(int argc, char **argv)
{
    int provided = 0;
    measure_program = "chorus-tune";
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &tune_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &tune_size);
    struct tune_options t;
    int status = parse_tune_options(argc, argv, &t);
    if (status >= 0) {
        MPI_Finalize();
        return status;
    }
    struct placement_info p;
    find_placement(&p);
    char directory[] = "/tmp/chorus-tune-XXXXXX";
    if (tune_rank == 0 && mkdtemp(directory) == NULL) {
        perror("chorus-tune: mkdtemp");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    FILE *file = NULL;
    char partial[1100] = "";
    if (tune_rank == 0 && t.output != NULL) {
        snprintf(partial, sizeof partial, "%s.partial", t.output);
        file = fopen(partial, "w");
        if (file == NULL) {
            perror(partial);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        char when[64];
        time_t seconds = time(NULL);
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&seconds));
        fprintf(file, "chorus-tuning 1\n"
                "# chorus-tune, chorus %s, %s\n"
                "# placement: %d ranks, %d per host, %d host(s): %s\n"
                "# sweep: %zu to %zu bytes, x%g, %d interleaved rounds; a row where an "
                "algorithm's\n# slowest round beat the built-in choice's fastest; elsewhere the "
                "built-in table decides;\n# a setting where a value beat the default so at half "
                "the sizes or more, and lost at none\n",
                chorus_version(), when, tune_size, p.local_ranks, p.hosts, p.names,
                t.min_bytes, t.max_bytes, t.factor, t.rounds);
    }
    if (tune_rank == 0)
        printf("# chorus-tune: %d ranks, %d per host, %d host(s) (%s); %zu to %zu bytes, x%g, "
               "%d rounds\n", tune_size, p.local_ranks, p.hosts, p.names, t.min_bytes,
               t.max_bytes, t.factor, t.rounds);
    bool right = true;
    for (int c = 0; c < CHORUS_COLLECTIVE_COUNT && right; c++)
        if (t.collectives[c])
            right = tune_collective(&t, (chorus_collective)c, &p, directory, file);
    if (right && t.settings) {
        struct measure_sweep sweep = {.collective = CHORUS_ALLREDUCE, .dtype = CHORUS_FLOAT32,
                                      .iterations = t.iterations, .warmup = 2};
        size_t sizes[SIZES_MAX];
        int size_count = sweep_sizes(&t, &sweep, sizes);
        right = tune_settings(&sweep, sizes, size_count, t.rounds, p.local_ranks, p.hosts, file);
    }
    if (tune_rank == 0) {
        rmdir(directory);
        if (file != NULL) {
            fclose(file);
            if (right && rename(partial, t.output) == 0)
                printf("\n# wrote %s (CHORUS_TUNING_FILE=%s)\n", t.output, t.output);
            else
                unlink(partial);
        }
        if (!right)
            fprintf(stderr, "chorus-tune: wrong results: no tuning file written\n");
    }
    MPI_Finalize();
    return right ? 0 : 1;
}
