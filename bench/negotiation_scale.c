/*
 * negotiation_scale.c — how negotiation scales with the number of ranks, measured without MPI:
 * N simulated ranks (test/common/simulated_ranks) run training steps of a model's gradient list,
 * the gradients arriving one by one in backward order (one negotiation cycle each, the worst
 * case), by the star protocol and by ready rounds. Prints rank 0's CPU time and messages per
 * step, for the first step (empty response cache) and the steady state (median of the others).
 *
 *   negotiation-scale [--workload resnet50|bert|FILE] [--ranks 2,16,1024] [--steps N]
 *                     [--protocol star|rounds|both]
 *
 * Rank 0 starts every cycle from cold caches, at every N (simulated_evict_caches says why).
 * Rank 0's time counts what its background thread would do: decoding requests, the negotiator,
 * encoding responses, and in rounds its share of the allreduce (one AND per recursive-doubling
 * step) and settling the round. Not counted: the network, and MPI's own cost per message, which
 * the message columns let a cost model add (docs/scaling.md).
 */
#include "../test/common/simulated_ranks.h"
#include "measure.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* More than the last-level caches of the machines we run on (32 MiB here). */
#define EVICTION_BYTES ((size_t)64 << 20)

struct gradient {
    char name[128];
    int ndims;
    int64_t shape[CHORUS_MAX_DIMS];
};

/* One gradient a line: "ELEMENTS NAME DIMxDIMx..."; '#' lines are comments. */
static struct gradient *load_gradients(const char *workload, size_t *count)
{
    char path[4096];
    FILE *file = measure_gradient_list_open(workload, path, sizeof path);
    if (file == NULL) {
        fprintf(stderr, "negotiation-scale: cannot find the gradient list of \"%s\"\n", workload);
        return NULL;
    }
    struct gradient *gradients = NULL;
    size_t capacity = 0;
    *count = 0;
    char line[1024];
    while (fgets(line, sizeof line, file) != NULL) {
        long long elements = 0;
        char name[128], shape[256];
        if (line[0] == '#' || sscanf(line, "%lld %127s %255s", &elements, name, shape) != 3)
            continue;
        if (*count == capacity) {
            capacity = capacity ? 2 * capacity : 256;
            gradients = realloc(gradients, capacity * sizeof *gradients);
            if (gradients == NULL)
                abort();
        }
        struct gradient *gradient = &gradients[(*count)++];
        snprintf(gradient->name, sizeof gradient->name, "%s", name);
        gradient->ndims = 0;
        for (char *dim = strtok(shape, "x"); dim != NULL && gradient->ndims < CHORUS_MAX_DIMS;
             dim = strtok(NULL, "x"))
            gradient->shape[gradient->ndims++] = atoll(dim);
    }
    fclose(file);
    return gradients;
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

struct step_figures {
    double first_ms;
    size_t first_messages;
    double steady_ms;
    size_t steady_messages;
};

static struct step_figures measure(int nranks, enum simulated_protocol protocol,
                                   const struct gradient *gradients, size_t count, int steps)
{
    struct simulated_ranks *world = simulated_ranks_create(nranks, protocol, 1024, 1.0);
    simulated_keep_logs(world, false);
    simulated_evict_caches(world, EVICTION_BYTES);
    struct step_figures figures = {0};
    double *steady = calloc((size_t)steps, sizeof *steady);
    double now = 0;
    for (int s = 0; s < steps; s++) {
        simulated_reset_work(world);
        for (size_t g = count; g-- > 0;) {
            struct wire_request request = {.name = (char *)gradients[g].name,
                                           .collective = CHORUS_ALLREDUCE,
                                           .dtype = CHORUS_FLOAT32,
                                           .op = CHORUS_AVERAGE,
                                           .ndims = (uint8_t)gradients[g].ndims,
                                           .device = -1,
                                           .prescale = 1,
                                           .postscale = 1,
                                           .group = "",
                                           .group_size = 1};
            memcpy(request.shape, gradients[g].shape, sizeof request.shape);
            for (int r = 0; r < nranks; r++)
                simulated_submit(world, r, &request, now);
            simulated_cycle(world, now, 0, 0);
            now += 1e-4;
        }
        for (int r = 0; r < nranks; r++)
            if (simulated_pending(world, r) != 0) {
                fprintf(stderr, "negotiation-scale: rank %d has tensors left after a step\n", r);
                exit(1);
            }
        const struct rank0_work *work = simulated_rank0_work(world);
        size_t messages = work->messages_in + work->messages_out;
        if (s == 0) {
            figures.first_ms = work->seconds * 1e3;
            figures.first_messages = messages;
        } else {
            steady[s - 1] = work->seconds * 1e3;
            figures.steady_messages = messages;
        }
    }
    if (steps > 1) {
        qsort(steady, (size_t)steps - 1, sizeof *steady, compare_doubles);
        figures.steady_ms = steady[(steps - 1) / 2];
    }
    free(steady);
    simulated_ranks_destroy(world);
    return figures;
}

static void usage(FILE *to)
{
    fprintf(to, "usage: negotiation-scale [--workload resnet50|bert|FILE] [--ranks N,N,...]\n"
                "                         [--steps N] [--protocol star|rounds|both]\n"
                "  --workload  the gradient list of a training step (default resnet50)\n"
                "  --ranks     simulated rank counts (default 2,4,16,64,256,1024,4096)\n"
                "  --steps     steps per measurement, the first with an empty cache (default 6)\n"
                "  --protocol  which protocols to measure (default both)\n");
}

int main(int argc, char **argv)
{
    const char *workload = "resnet50";
    char ranks_text[256] = "2,4,16,64,256,1024,4096";
    int steps = 6;
    bool star = true, rounds = true;
    const struct option options[] = {
        {"workload", required_argument, NULL, 'w'}, {"ranks", required_argument, NULL, 'r'},
        {"steps", required_argument, NULL, 's'},    {"protocol", required_argument, NULL, 'p'},
        {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0}};
    for (int option; (option = getopt_long(argc, argv, "w:r:s:p:h", options, NULL)) != -1;) {
        switch (option) {
        case 'w':
            workload = optarg;
            break;
        case 'r':
            snprintf(ranks_text, sizeof ranks_text, "%s", optarg);
            break;
        case 's':
            steps = atoi(optarg);
            break;
        case 'p':
            star = strcmp(optarg, "star") == 0 || strcmp(optarg, "both") == 0;
            rounds = strcmp(optarg, "rounds") == 0 || strcmp(optarg, "both") == 0;
            if (!star && !rounds) {
                fprintf(stderr, "negotiation-scale: unknown protocol \"%s\"\n", optarg);
                return 2;
            }
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc || steps < 2) {
        usage(stderr);
        return 2;
    }
    size_t count = 0;
    struct gradient *gradients = load_gradients(workload, &count);
    if (gradients == NULL)
        return 1;
    printf("# negotiation with simulated ranks (no MPI): rank 0's CPU time and messages per "
           "training step\n# workload %s: %zu tensors arriving one by one in backward order, one "
           "cycle each; steady = median of %d steps\n",
           workload, count, steps - 1);
    printf("%-8s %6s %12s %12s %12s %12s %14s\n", "protocol", "ranks", "first_ms", "first_msgs",
           "steady_ms", "steady_msgs", "us_per_tensor");
    for (char *item = strtok(ranks_text, ","); item != NULL; item = strtok(NULL, ",")) {
        int nranks = atoi(item);
        if (nranks < 1) {
            fprintf(stderr, "negotiation-scale: bad rank count \"%s\"\n", item);
            return 2;
        }
        for (int p = 0; p < 2; p++) {
            if ((p == 0 && !star) || (p == 1 && !rounds))
                continue;
            struct step_figures figures = measure(
                nranks, p == 0 ? SIMULATED_STAR : SIMULATED_ROUNDS, gradients, count, steps);
            printf("%-8s %6d %12.3f %12zu %12.3f %12zu %14.2f\n", p == 0 ? "star" : "rounds",
                   nranks, figures.first_ms, figures.first_messages, figures.steady_ms,
                   figures.steady_messages, figures.steady_ms * 1e3 / (double)count);
            fflush(stdout);
        }
    }
    free(gradients);
    return 0;
}
