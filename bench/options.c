/*
 * options.c — chorus-bench's command line, for every mode (bench.h). A value it does not know
 * fails the run, naming it.
 */
#include "bench.h"
#include "measure.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: chorus-bench [options]                 (under mpirun)\n"
    "Sweeps (nccl-tests columns, chorus against plain MPI in the same run):\n"
    "  -c, --collective NAME  allreduce (default), broadcast, allgather, reducescatter or\n"
    "                         alltoall\n"
    "  -b, --min-bytes SIZE   smallest size (default 8; K, M, G suffixes)\n"
    "  -e, --max-bytes SIZE   largest size (default 256M)\n"
    "  -f, --factor X         size step, a factor above 1 (default 2)\n"
    "  -n, --iterations N     timed operations per size (default: about 0.4 GB of traffic)\n"
    "  -w, --warmup N         untimed operations per size first (default 3)\n"
    "  -d, --dtype NAME       float32 (default), float64 or int32\n"
    "      --csv FILE         also write the table as CSV\n"
    "      --device cuda      buffers on the GPU (chorus built with CUDA and NCCL)\n"
    "      --world            chorus on a world over UCX (chorus_init_world, MPI handing the\n"
    "                         addresses round), as elastic jobs run, instead of on MPI\n"
    "Other measurements:\n"
    "      --workload MODEL   a training step: resnet50, bert, or a file of gradient sizes\n"
    "      --steps N          steps of the workload (default 20; 15 with --overlap)\n"
    "      --overlap          with --workload: gradients become ready one by one behind busy\n"
    "                         work, as in backward; chorus against MPI_Allreduce and\n"
    "                         MPI_Iallreduce per tensor, as exposed communication\n"
    "      --compute-ratio L  compute per step as multiples of the communication (default 1,3)\n"
    "      --compare PARAMS   also a chorus row with these parameters (\"NAME=value;...\")\n"
    "      --shared-heap      host buffers and gradients from chorus_mem_alloc (the shared\n"
    "                         heap), which allreduces on one host reduce in place; MPI gets\n"
    "                         the same buffers\n"
    "      --autotune         with --workload (and --overlap): chorus with CHORUS_AUTOTUNE=on\n"
    "                         against its defaults, in interleaved rounds: the step after\n"
    "                         tuning, and what the tuning steps cost\n"
    "      --step-timeline F  with --overlap: write one step per ratio to timeline F (F.1,\n"
    "                         ...), with the compute spans; with --workload alone: the\n"
    "                         default configuration's --steps steps once more, to F\n"
    "      --cycle N          a step of N tiny tensors: the negotiation's cost\n"
    "      --link             what the network between the first two hosts delivers to MPI\n"
    "      --ordered          the sweep's chorus operations in call order, not negotiated\n"
    "                         (CHORUS_OP_ORDERED, as the torch.distributed backend runs them)\n"
    "      --latency          small allreduces (-b, default 8, to -e, default 64K) and a barrier\n"
    "                         through MPI (chorus shut down), chorus's ordered path and its\n"
    "                         negotiated path, in interleaved rounds: medians, t/MPI\n"
    "      --rounds N         rounds of --latency (default 5)\n"
    "  -h, --help             this text\n"
    "The last line of every run is a summary: line; a wrong result fails the run (exit 1).\n";

/* Index of `text` among `names`, or -1. */

static int choice(const char *text, const char *const *names, int count)
{
    for (int i = 0; i < count; i++)
        if (strcmp(text, names[i]) == 0)
            return i;
    return -1;
}

static bool parse_positive_int(const char *text, int *value)
{
    char *end = NULL;
    long parsed = strtol(text, &end, 10);
    if (end == text || *end != '\0' || parsed < 0 || parsed > 1000000000)
        return false;
    *value = (int)parsed;
    return true;
}

/* "1,3": compute ratios of --overlap, each above 0. */
static bool parse_ratios(const char *text, struct options *o)
{
    o->ratio_count = 0;
    const char *at = text;
    while (*at != '\0' && o->ratio_count < (int)ARRAY_SIZE(o->ratios)) {
        char *end = NULL;
        double ratio = strtod(at, &end);
        if (end == at || !(ratio > 0) || (*end != ',' && *end != '\0'))
            return false;
        o->ratios[o->ratio_count++] = ratio;
        at = *end == ',' ? end + 1 : end;
    }
    return *at == '\0' && o->ratio_count > 0;
}

/* Parses the command line into `o`. Returns -1 to go on, else the exit status (0 for --help,
 * 2 for a mistake, which it names). */
int parse_options(int argc, char **argv, struct options *o)
{
    static const struct option long_options[] = {
        {"collective", required_argument, NULL, 'c'}, {"min-bytes", required_argument, NULL, 'b'},
        {"max-bytes", required_argument, NULL, 'e'},  {"factor", required_argument, NULL, 'f'},
        {"iterations", required_argument, NULL, 'n'}, {"warmup", required_argument, NULL, 'w'},
        {"dtype", required_argument, NULL, 'd'},      {"csv", required_argument, NULL, 'C'},
        {"device", required_argument, NULL, 'D'},     {"workload", required_argument, NULL, 'W'},
        {"steps", required_argument, NULL, 'S'},      {"cycle", required_argument, NULL, 'Y'},
        {"link", no_argument, NULL, 'L'},             {"overlap", no_argument, NULL, 'O'},
        {"compute-ratio", required_argument, NULL, 'R'},
        {"compare", required_argument, NULL, 'P'},
        {"step-timeline", required_argument, NULL, 'T'},
        {"ordered", no_argument, NULL, 'Q'},
        {"latency", no_argument, NULL, 'U'},
        {"rounds", required_argument, NULL, 'N'},
        {"autotune", no_argument, NULL, 'A'},
        {"shared-heap", no_argument, NULL, 'H'},
        {"world", no_argument, NULL, 'X'},
        {"help", no_argument, NULL, 'h'},             {NULL, 0, NULL, 0},
    };
    static const char *const collectives[] = {"allreduce", "broadcast", "allgather",
                                              "reducescatter", "alltoall"};
    static const chorus_collective collective_values[] = {
        CHORUS_ALLREDUCE, CHORUS_BROADCAST, CHORUS_ALLGATHER, CHORUS_REDUCESCATTER,
        CHORUS_ALLTOALL};
    static const char *const dtypes[] = {"float32", "float64", "int32"};
    static const chorus_dtype dtype_values[] = {CHORUS_FLOAT32, CHORUS_FLOAT64, CHORUS_INT32};
    opterr = 0; /* the messages below name the mistake, once, on rank 0 */
    int option;
    while ((option = getopt_long(argc, argv, ":c:b:e:f:n:w:d:h", long_options, NULL)) != -1) {
        const char *value = optarg;
        int index = -1;
        bool ok = true;
        switch (option) {
        case 'c':
            index = choice(value, collectives, 5);
            ok = index >= 0;
            if (ok)
                o->sweep.collective = collective_values[index];
            break;
        case 'b':
            ok = measure_parse_size(value, &o->min_bytes);
            break;
        case 'e':
            ok = measure_parse_size(value, &o->max_bytes);
            o->max_bytes_given = true;
            break;
        case 'f': {
            char *end = NULL;
            o->factor = strtod(value, &end);
            ok = end != value && *end == '\0' && o->factor > 1;
            break;
        }
        case 'n':
            ok = parse_positive_int(value, &o->sweep.iterations);
            break;
        case 'w':
            ok = parse_positive_int(value, &o->sweep.warmup);
            break;
        case 'd':
            index = choice(value, dtypes, 3);
            ok = index >= 0;
            if (ok)
                o->sweep.dtype = dtype_values[index];
            break;
        case 'C':
            o->csv = value;
            break;
        case 'Q':
            o->sweep.ordered = true;
            break;
        case 'U':
            o->latency = true;
            break;
        case 'N':
            ok = parse_positive_int(value, &o->rounds) && o->rounds > 0;
            break;
        case 'A':
            o->autotune = true;
            break;
        case 'H':
            measure_shared_heap = true;
            break;
        case 'X':
            o->world = true;
            break;
        case 'D':
            ok = strcmp(value, "cuda") == 0;
            o->sweep.device = ok;
            if (ok && !chorus_gpu_built()) {
                if (bench_rank == 0)
                    fprintf(stderr, "chorus-bench: --device cuda needs chorus built with CUDA and "
                                    "NCCL (or chorus-bench-emulated)\n");
                return 2;
            }
            break;
        case 'W':
            o->workload = value;
            break;
        case 'S':
            ok = parse_positive_int(value, &o->steps);
            break;
        case 'Y':
            ok = parse_positive_int(value, &o->cycle_tensors);
            break;
        case 'L':
            o->link = true;
            break;
        case 'O':
            o->overlap = true;
            break;
        case 'R':
            ok = parse_ratios(value, o);
            break;
        case 'P':
            o->compare = value;
            break;
        case 'T':
            o->step_timeline = value;
            break;
        case 'h':
            if (bench_rank == 0)
                fputs(usage_text, stdout);
            return 0;
        case ':':
            if (bench_rank == 0)
                fprintf(stderr, "chorus-bench: %s needs a value (--help lists the options)\n",
                        argv[optind - 1]);
            return 2;
        default:
            if (bench_rank == 0)
                fprintf(stderr, "chorus-bench: unknown option %s (--help lists the options)\n",
                        argv[optind - 1]);
            return 2;
        }
        if (!ok) {
            const char *name = "?";
            for (const struct option *known = long_options; known->name != NULL; known++)
                if (known->val == option)
                    name = known->name;
            if (bench_rank == 0)
                fprintf(stderr, "chorus-bench: \"%s\" is not a valid --%s (--help lists the "
                                "valid values)\n",
                        value, name);
            return 2;
        }
    }
    if (o->overlap && o->workload == NULL) {
        if (bench_rank == 0)
            fprintf(stderr, "chorus-bench: --overlap needs --workload MODEL\n");
        return 2;
    }
    if (optind < argc) {
        if (bench_rank == 0)
            fprintf(stderr, "chorus-bench: unexpected argument %s (--help lists the options)\n",
                    argv[optind]);
        return 2;
    }
    return -1;
}
